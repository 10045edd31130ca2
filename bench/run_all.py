"""Run every benchmark: each ``bench/*.py`` script except this one (and ``_private.py`` helper
modules), in sorted order, stopping at the first that fails.

    .venv/bin/python bench/run_all.py      (or: make bench)

Each script runs with the same interpreter, from the repository root, with its default
arguments; its table goes to stdout and its results to ``bench/results/``. The exit code is the
failing script's, or 0 when all passed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def scripts() -> list[Path]:
    """The benchmark scripts, in sorted order, without this runner."""
    me = Path(__file__).resolve()
    return sorted(p for p in BENCH.glob("*.py") if p.resolve() != me and not p.name.startswith("_"))


def main() -> int:
    found = scripts()
    if not found:
        print("no benchmark scripts in bench/", file=sys.stderr)
        return 1
    for script in found:
        name = script.relative_to(REPO).as_posix()
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        code = subprocess.run([sys.executable, str(script)], cwd=REPO).returncode
        seconds = time.perf_counter() - started
        if code != 0:
            print(f"== {name} failed with exit code {code} after {seconds:.0f} s; "
                  "stopping", file=sys.stderr)
            return code if code > 0 else 1  # killed by a signal
        print(f"== {name} done in {seconds:.0f} s", file=sys.stderr, flush=True)
    print(f"== all {len(found)} benchmarks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
