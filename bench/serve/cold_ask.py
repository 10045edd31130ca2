"""A new user's first question: ``ragdx ask`` on the bundled example's store, each run a new
process (the OS file cache warm, ragdx's own caches as a user has them), timed from outside.

    .venv/bin/python bench/serve/cold_ask.py --runs 7 --out bench/results/cold-ask.json

Three settings: the result cache off (every run answers afresh), the result cache on (the first
run answers and stores, the others read the answer back), and the reader's rewritten ONNX bytes
not cached (``RAGDX_CACHE_DIR=''``: onnx imported and the model rewritten every run). The store
is ingested once with the defaults (dense channel on, all-MiniLM-L6-v2) into a temporary folder.
Each setting's first run is untimed (it fills the cache folder or the result cache). Recorded:
wall and user+system CPU seconds per run (p50, max), the load average before and after, and a
digest of each run's printed answer (they must all be the same), and whether torch was imported.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, machine

QUESTION = "Can I get a refund for a quality problem 35 days after delivery?"
# the run's stdout, and whether it imported torch (the last line)
PROGRAM = ("import sys\nfrom ragdx.cli import main\ncode = main(sys.argv[1:])\n"
           "print('torch imported:', 'torch' in sys.modules)\nsys.exit(code)")


def run_once(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system, the child's) and stdout of one new process."""
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, done.stdout


def measure(name: str, args: list[str], env: dict[str, str], runs: int) -> dict[str, object]:
    run_once(args, env)  # untimed: fills the cache folder, or the result cache
    load = os.getloadavg()[0]
    walls, cpus, outputs = [], [], set()
    for _ in range(runs):
        wall, cpu, out = run_once(args, env)
        walls.append(wall)
        cpus.append(cpu)
        outputs.add(out)
    answer = next(iter(outputs))
    return {"setting": name, "runs": runs, "wall_p50_s": round(statistics.median(walls), 3),
            "wall_max_s": round(max(walls), 3), "cpu_p50_s": round(statistics.median(cpus), 3),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            "answers_identical": len(outputs) == 1,
            "answer_sha256": hashlib.sha256(answer.encode()).hexdigest()[:16],
            "torch_imported": answer.rstrip().endswith("torch imported: True")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragdx-cold-ask-") as tmp:
        store = Path(tmp) / "store.db"
        manifest = REPO / "src" / "ragdx" / "examples" / "refund" / "manifest.jsonl"
        subprocess.run([sys.executable, "-m", "ragdx.cli", "ingest", "--store", str(store), str(manifest)],
                       check=True, capture_output=True)
        env = dict(os.environ, RAGDX_CACHE_DIR=str(Path(tmp) / "cache"))
        ask = ["ask", "--store", str(store), QUESTION]
        rows = [measure("result cache off", ask + ["--set", "cache.enabled=false"], env, args.runs),
                measure("result cache on (answer read back)", ask, env, args.runs),
                measure("result cache off, no model cache", ask + ["--set", "cache.enabled=false"],
                        dict(env, RAGDX_CACHE_DIR=""), args.runs)]
    for row in rows:
        print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps({"benchmark": "cold_ask", "question": QUESTION, "results": rows,
                                        "machine": machine(), "code": code_version()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
