"""Run every product benchmark: ``quality/quality.py`` first (it builds the dev set's store that
others read), then the scripts of each area folder of ``AREAS`` in turn (sorted by name within a
folder, without ``_private.py`` helper modules), stopping at the first that fails.
``bench/research/`` holds rounds that decided something once: never run here.

    .venv/bin/python bench/run_all.py      (or: make bench)

Each script runs with the same interpreter, from the repository root, with its default
arguments; its table goes to stdout and its results to ``bench/results/``. A script that cannot
run with its defaults says what it needs in a module-level ``NEEDS = "..."`` line (a PostgreSQL
server's DSN, a revision to compare with); it is skipped, and the runner prints that line and
the script's usage. The exit code is the failing script's, or 0 when all the others passed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
#: the folders of product benchmarks, in the order they run
AREAS = ("ingest", "retrieval", "quality", "diagnosis", "scale", "serve")
#: run before every other: it builds the dev set's store (``.cache/devset/``), which scripts of
#: several areas read (a fresh machine has none)
FIRST = ("quality/quality.py",)


def scripts(folder: Path = BENCH) -> list[Path]:
    """The product benchmarks: :data:`FIRST`, then each area's scripts in turn, sorted by name
    within it."""
    first = [folder / name for name in FIRST if (folder / name).is_file()]
    rest = [p for area in AREAS for p in sorted((folder / area).glob("*.py")) if not p.name.startswith("_")]
    return first + [p for p in rest if p not in first]


def needs(script: Path) -> str | None:
    """What a script needs beyond its defaults: its module-level ``NEEDS`` string, or None."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NEEDS" for t in node.targets) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    return None


def main(folder: Path = BENCH, root: Path = REPO) -> int:
    found = scripts(folder)
    if not found:
        print(f"no benchmark scripts in {folder}", file=sys.stderr)
        return 1
    skipped = 0
    for script in found:
        name = script.relative_to(root).as_posix()
        wanted = needs(script)
        if wanted is not None:
            skipped += 1
            print(f"== {name} skipped: it needs {wanted}; run it by hand "
                  f"(.venv/bin/python {name} --help)", file=sys.stderr, flush=True)
            continue
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        code = subprocess.run([sys.executable, str(script)], cwd=root).returncode
        seconds = time.perf_counter() - started
        if code != 0:
            print(f"== {name} failed with exit code {code} after {seconds:.0f} s; "
                  "stopping", file=sys.stderr)
            return code if code > 0 else 1  # killed by a signal
        print(f"== {name} done in {seconds:.0f} s", file=sys.stderr, flush=True)
    print(f"== all {len(found) - skipped} benchmarks run passed; {skipped} skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
