"""``make bench`` (bench/run_all.py): every product benchmark (the scripts of bench/'s area folders,
area by area) run with its defaults, stopping at the first that fails; a script that says what it
``NEEDS`` beyond its defaults is skipped, saying so; bench/research/ is never run."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "bench" / "run_all.py"


def _runner():
    spec = importlib.util.spec_from_file_location("run_all", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return path


def _writes(out: Path, mark: str) -> str:
    return f"open({str(out)!r}, 'a').write({mark + chr(10)!r})\n"


def test_areas_run_in_their_order_and_a_script_that_needs_a_server_is_skipped(tmp_path, capsys):
    run_all = _runner()
    bench = tmp_path / "bench"
    out = tmp_path / "ran.txt"
    # by path, quality/ would come before retrieval/ and serve/: the areas' order decides
    _script(bench, "serve/a_last.py", _writes(out, "serve"))
    _script(bench, "retrieval/b_first.py", _writes(out, "retrieval"))
    _script(bench, "quality/a_server.py", "NEEDS = 'a PostgreSQL server: --dsn'\n" + _writes(out, "server"))
    _script(bench, "quality/b_after.py", _writes(out, "quality"))
    _script(bench, "quality/quality.py", _writes(out, "dev store"))  # builds what the others read: first
    _script(bench, "quality/_helper.py", "raise SystemExit(9)\n")  # a helper module, never run
    _script(bench, "research/a_round.py", "raise SystemExit(8)\n")  # a research round, never run
    _script(bench, "devset/build.py", "raise SystemExit(7)\n")
    _script(bench, "_common.py", "raise SystemExit(6)\n")
    assert run_all.main(bench, tmp_path) == 0
    assert out.read_text().splitlines() == ["dev store", "retrieval", "quality", "serve"]
    err = capsys.readouterr().err
    assert "== bench/quality/a_server.py skipped: it needs a PostgreSQL server: --dsn" in err
    assert "== all 4 benchmarks run passed; 1 skipped" in err


def test_the_first_failing_script_stops_the_run_with_its_exit_code(tmp_path, capsys):
    run_all = _runner()
    bench = tmp_path / "bench"
    out = tmp_path / "ran.txt"
    _script(bench, "ingest/a_fails.py", "raise SystemExit(3)\n")
    _script(bench, "ingest/b_after.py", _writes(out, "b"))
    _script(bench, "serve/a_later.py", _writes(out, "c"))
    assert run_all.main(bench, tmp_path) == 3
    assert not out.exists()
    assert "== bench/ingest/a_fails.py failed with exit code 3" in capsys.readouterr().err


def test_every_script_of_bench_is_a_product_benchmark_or_a_research_round():
    run_all = _runner()
    product = {p.relative_to(ROOT / "bench").as_posix() for p in run_all.scripts()}
    research = {p.relative_to(ROOT / "bench").as_posix() for p in (ROOT / "bench" / "research").glob("*.py")}
    found = {p.relative_to(ROOT / "bench").as_posix() for p in (ROOT / "bench").rglob("*.py")
             if not p.relative_to(ROOT / "bench").parts[0].startswith(".")}
    assert len(product) >= 30 and research
    assert found - product - research == {"_common.py", "run_all.py", "devset/build.py"}
    # each product benchmark has its line in bench/README.md and in the figures table of
    # docs/benchmarks.md; each research round its line in bench/research/README.md
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    doc = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    figures = doc.split("\n## Today's figures\n", 1)[1].split("\n## ", 1)[0]
    assert sorted(s for s in product if f"`{s}`" not in readme) == []
    assert sorted(s for s in product if f"bench/{s}" not in figures) == []
    rounds = (ROOT / "bench" / "research" / "README.md").read_text(encoding="utf-8")
    assert sorted(s for s in research if f"`{Path(s).name}`" not in rounds) == []


def _demands_arguments(source: str) -> bool:
    """Whether a script's parser has a required option or a positional argument without a default."""
    calls = re.findall(r"add_argument\((.*?)\)\n", source, re.S)
    return any("required=True" in c or (re.match(r'\s*"[a-z]', c) and "nargs=" not in c) for c in calls)


def test_every_script_that_cannot_run_with_its_defaults_says_what_it_needs():
    run_all = _runner()
    found = run_all.scripts()
    demanding = {p.name for p in found if _demands_arguments(p.read_text(encoding="utf-8"))}
    skipped = {p.name for p in found if run_all.needs(p) is not None}
    assert {"pg_backends.py", "pg_shard_dense.py", "rediagnose.py"} <= demanding
    # pg_alternate reads pg_backends' stores: it needs them without demanding an argument
    assert skipped == demanding | {"pg_alternate.py"}
