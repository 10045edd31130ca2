"""Settings a script can rely on (issue 25, items 8 and 9): every number has a documented range
enforced at load, settings that need each other are checked together, and an error in a
``--config`` file names the file, the key and its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragdx.cli import main
from ragdx.config import load_settings
from ragdx.errors import ConfigError
from tests.conftest import write

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("override, message", [
    ("generation.min_coverage=2.5", "setting 'generation.min_coverage' must be at most 1.0, not 2.5"),
    ("generation.keep_ratio=7", "setting 'generation.keep_ratio' must be at most 1.0, not 7.0"),
    ("fusion.c=1e300", "setting 'fusion.c' must be at most 1000000.0, not 1e+300"),
])
def test_a_setting_out_of_its_range_is_refused(override, message):
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides=[override])
    assert str(caught.value) == message


def _shown(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else str(value)


def test_every_numeric_setting_has_a_documented_range():
    """docs/pipeline.md's "Valid ranges" table lists each numeric setting with the range enforced."""
    from ragdx.config import ranges  # new with issue 25
    text = (ROOT / "docs" / "pipeline.md").read_text(encoding="utf-8")
    section = text[text.index("### Valid ranges"):]
    documented = dict(re.findall(r"^\| `([a-z_.0-9]+)` \| ([0-9.,]+ to [0-9.,]+) \|", section, re.M))
    expected = {key: f"{_shown(low)} to {_shown(high)}" for key, (low, high) in ranges().items()}
    assert documented == expected
    assert len(documented) == 43  # generation.background_share is the newest
    assert expected["generation.min_coverage"] == "0 to 1"
    assert expected["generation.keep_ratio"] == "0 to 1"


def test_weighted_fusion_without_its_weights_file_names_the_setting(example_db, capsys):
    code = main(["ask", "--store", str(example_db), "--set", "retrieval.dense.enabled=false",
                 "--set", "fusion.method=weighted", "How long do refunds take?"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == ("ragdx ask: error: setting 'fusion.method' is 'weighted', which needs 'fusion.weights_file': "
                   "the weights fitted by 'ragdx fit fusion' (or use fusion.method=rrf)\n")


def test_a_weights_file_that_is_a_folder_is_a_config_error(example_db, tmp_path, capsys):
    code = main(["ask", "--store", str(example_db), "--set", "retrieval.dense.enabled=false",
                 "--set", "fusion.method=weighted", "--set", f"fusion.weights_file={tmp_path}", "refunds?"])
    assert code == 2
    assert f"fusion.weights_file {tmp_path}: cannot read it: Is a directory" in capsys.readouterr().err


def test_a_weights_file_given_by_set_completes_a_config_files_weighted_method(tmp_path):
    config = write(tmp_path / "c.toml", '[fusion]\nmethod = "weighted"\n')
    loaded = load_settings(config, ["fusion.weights_file=w.json"])
    assert (loaded.fusion.method, loaded.fusion.weights_file) == ("weighted", "w.json")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value).startswith(f"{config}:2: setting 'fusion.method' is 'weighted'")


@pytest.mark.parametrize("toml, line, key", [
    ('seed = 1\n[generation]\n# the threshold\nmin_coverage = "high"\n', 4, "generation.min_coverage"),
    ('retrieval.dense.top_k = "x"\n', 1, "retrieval.dense.top_k"),
    ('[retrieval]\n[retrieval.bm25]\nenabled = 3\n', 3, "retrieval.bm25.enabled"),
    ('generation = { keep_ratio = 7 }\n', 1, "generation.keep_ratio"),
    ('[context]\nbudget_tokens = 100\n"expand" = 5\n', 3, "context.expand"),
])
def test_a_type_or_range_error_in_a_config_file_names_the_file_the_line_and_the_key(tmp_path, toml, line, key):
    config = write(tmp_path / "settings.toml", toml)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value).startswith(f"{config}:{line}: setting '{key}' must be")
    assert caught.value.key == key
