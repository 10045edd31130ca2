"""``make bench`` (bench/run_all.py): every script run with its defaults, in order, stopping at the
first that fails; a script that says what it ``NEEDS`` beyond its defaults is skipped, saying so."""

import importlib.util
import re
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[1] / "bench" / "run_all.py"


def _runner():
    spec = importlib.util.spec_from_file_location("run_all", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(body, encoding="utf-8")
    return path


def test_a_script_that_needs_a_server_is_skipped_and_the_rest_run_in_order(tmp_path, capsys):
    run_all = _runner()
    bench = tmp_path / "bench"
    bench.mkdir()
    out = tmp_path / "ran.txt"
    _script(bench, "a_first.py", f"open({str(out)!r}, 'a').write('a\\n')\n")
    _script(bench, "b_server.py", f"NEEDS = 'a PostgreSQL server: --dsn'\nopen({str(out)!r}, 'a').write('b\\n')\n")
    _script(bench, "c_last.py", f"open({str(out)!r}, 'a').write('c\\n')\n")
    _script(bench, "_helper.py", "raise SystemExit(9)\n")  # a helper module, never run
    assert run_all.main(bench, tmp_path) == 0
    assert out.read_text().splitlines() == ["a", "c"]
    err = capsys.readouterr().err
    assert "== bench/b_server.py skipped: it needs a PostgreSQL server: --dsn" in err
    assert "== all 2 benchmarks run passed; 1 skipped" in err


def test_the_first_failing_script_stops_the_run_with_its_exit_code(tmp_path, capsys):
    run_all = _runner()
    bench = tmp_path / "bench"
    bench.mkdir()
    out = tmp_path / "ran.txt"
    _script(bench, "a_fails.py", "raise SystemExit(3)\n")
    _script(bench, "b_after.py", f"open({str(out)!r}, 'a').write('b\\n')\n")
    assert run_all.main(bench, tmp_path) == 3
    assert not out.exists()
    assert "== bench/a_fails.py failed with exit code 3" in capsys.readouterr().err


def _demands_arguments(source: str) -> bool:
    """Whether a script's parser has a required option or a positional argument without a default."""
    calls = re.findall(r"add_argument\((.*?)\)\n", source, re.S)
    return any("required=True" in c or (re.match(r'\s*"[a-z]', c) and "nargs=" not in c) for c in calls)


def test_every_script_that_cannot_run_with_its_defaults_says_what_it_needs():
    run_all = _runner()
    found = run_all.scripts()
    demanding = {p.name for p in found if _demands_arguments(p.read_text(encoding="utf-8"))}
    skipped = {p.name for p in found if run_all.needs(p) is not None}
    assert {"pg_backends.py", "pg_shard_dense.py", "rediagnose.py", "context_replay.py"} <= demanding
    # pg_alternate reads pg_backends' stores, reader_window and reader_variants train_reader's
    # cached rows: each needs them without demanding an argument
    assert skipped == demanding | {"pg_alternate.py", "reader_window.py", "reader_variants.py"}
