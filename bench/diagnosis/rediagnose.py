"""Old and new diagnoses of the same answers: re-diagnose a run folder's traces with the code of
this checkout, and put each query's outcome beside the one the run recorded.

Reproduce, from the repository root (the dev set's test half, run by ``bench/quality/quality.py``)::

    .venv/bin/python bench/diagnosis/rediagnose.py --run bench/.cache/quality/run-test \\
        --store bench/.cache/devset/store.db --queries bench/.cache/devset/queries.test.jsonl

Each step goes through ragdx's CLI: ``ragdx export`` writes the run's traces as OpenInference
spans (the claims, their verdicts and, when the run recorded them, where each claim rests), and
``ragdx diagnose --store`` diagnoses them again (the store's own chunks, so nothing else about the
diagnosis changes). The run's ``diagnosis.jsonl`` is the old verdict; the new one is this
checkout's. Printed, and written to ``--out`` (default ``bench/results/rediagnose.json``): the
outcome counts and answer measures before and after, every query whose outcome or first failure
changed with its new losses, and how many changed for another reason than the answer's use of
a group (expected 0).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, write_result

#: what bench/run_all.py cannot give it: the script is skipped there
NEEDS = "a run folder, its store and its query set (--run, --store, --queries)"

RAGDX = str(Path(sys.executable).with_name("ragdx"))
DEFAULT_OUT = REPO / "bench" / "results" / "rediagnose.json"
ANSWER = ("success", "supported", "answered", "faithfulness", "citation_support")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ragdx(args: list[str]) -> None:
    done = subprocess.run([RAGDX, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ragdx {args[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def answer_measures(metrics: dict) -> dict:
    m = metrics["overall"]["metrics"]
    return {k: {"value": round(m[k]["value"], 4), "n": m[k]["n"]} for k in ANSWER if k in m}


def compare(run: Path, store: Path, queries: Path, folder: Path) -> dict:
    spans = folder / "spans.jsonl"
    ragdx(["export", "--run", str(run), "--out", str(spans)])
    ragdx(["diagnose", "--traces", str(spans), "--queries", str(queries), "--store", str(store),
           "--out", str(folder / "new"), "--system", "ragdx", "-q"])
    old = {d["id"]: d for d in read_jsonl(run / "diagnosis.jsonl")}
    new = {d["id"]: d for d in read_jsonl(folder / "new" / "diagnosis.jsonl")}
    changed, other = [], []
    for qid, before in old.items():
        after = new[qid]
        if (before["outcome"], before["first_failure"]) == (after["outcome"], after["first_failure"]):
            continue
        added = [loss for loss in after["lost"] if loss not in before["lost"]]
        row = {"id": qid, "before": [before["outcome"], before["first_failure"]],
               "after": [after["outcome"], after["first_failure"]], "new_losses": added}
        changed.append(row)
        if not added or any(loss["stage"] != "generation" for loss in added):
            other.append(qid)
    return {
        "run": str(run), "queries": len(old),
        "outcomes": {"before": dict(Counter(d["outcome"] for d in old.values()).most_common()),
                     "after": dict(Counter(d["outcome"] for d in new.values()).most_common())},
        "first_failure": {"before": dict(Counter(d["first_failure"] for d in old.values()
                                                 if d["first_failure"]).most_common()),
                          "after": dict(Counter(d["first_failure"] for d in new.values()
                                                if d["first_failure"]).most_common())},
        "answers": {"before": answer_measures(json.loads((run / "metrics.json").read_text())),
                    "after": answer_measures(json.loads((folder / "new" / "metrics.json").read_text()))},
        "changed": changed,
        "changed_for_another_reason": other,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="a run folder of 'ragdx run'")
    ap.add_argument("--store", type=Path, required=True, help="the store it ran on")
    ap.add_argument("--queries", type=Path, required=True, help="the query set it ran")
    ap.add_argument("--label", default="", help="a name for this measurement")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON results (default {DEFAULT_OUT})")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = compare(args.run, args.store, args.queries, Path(tmp))
    result = {"benchmark": "rediagnose", "label": args.label,
              "command": shlex.join([".venv/bin/python", "bench/diagnosis/rediagnose.py", *(argv or sys.argv[1:])]),
              "code": code_version()} | result
    lines = []
    for side in ("before", "after"):
        lines.append(f"{side:>6}: " + ", ".join(f"{k} {v['value']:.3f} (n={v['n']})" for k, v in
                                                result["answers"][side].items()))
        lines.append(f"        outcomes {result['outcomes'][side]}")
    for row in result["changed"]:
        lines.append(f"{row['id']}: {' '.join(map(str, row['before']))} -> {' '.join(map(str, row['after']))}; "
                     + "; ".join(f"group {loss['group']}: {loss['reason']}" for loss in row["new_losses"]))
    lines.append(f"{len(result['changed'])} of {result['queries']} changed; for another reason than a group's "
                 f"use: {len(result['changed_for_another_reason'])}")
    write_result(args.out, result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
