"""Replays the context assembler on the governance lists of a recorded run, at several token
budgets: how many answerable questions keep every required group at the context, and which lost
one there although governance passed it. Only the assembler runs (no retrieval, reranking or
generation), so a packing change or a budget is measured on the fit half in a minute or two.

    nice -n 10 .venv/bin/python bench/quality/quality.py --half fit --run-dir /tmp/q-fit   # the run to replay
    nice -n 10 .venv/bin/python bench/research/context_replay.py /tmp/q-fit --budgets 3000 4500 6000

The budget is counted in the int8 encoder's tokenizer, as in ``bench/quality/quality.py``'s runs. A
group counts as present as ``ragdx diagnose`` counts it (:func:`ragdx.diagnosis.evidence.groups_present`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, INT8

from ragdx.build import build_encoder, open_store
from ragdx.config import DenseSettings
from ragdx.diagnosis.evidence import EvidenceResolver, groups_present
from ragdx.queryset import load_queries
from ragdx.stages.assemble import ContextAssembler
from ragdx.types import Candidate, Ranked, Span, StageKind

#: what bench/run_all.py cannot give it: the script is skipped there
NEEDS = "a run folder of bench/quality/quality.py to replay (its first argument)"


def governance_lists(run: Path) -> dict[str, Ranked]:
    """Each question's governance list, as the run recorded it."""
    out = {}
    with (run / "traces.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            trace = json.loads(line)
            stage = next(s for s in trace["stages"] if s["kind"] == "governance")
            items = tuple(Candidate(i["id"], i["doc"], i["version"], i["start"], i["end"], i["rank"],
                                    i.get("score", 0.0)) for i in stage["items"])
            out[trace["query_id"]] = Ranked(stage["name"], StageKind.GOVERNANCE, items)
    return out


def replay(run: Path, queries: Path, store_path: Path, budgets: list[int]) -> list[dict]:
    store = open_store(store_path)
    encoder = build_encoder(DenseSettings(backend="onnx", model=str(INT8)))
    resolver = EvidenceResolver(store)
    lists = governance_lists(run)
    asked = [q for q in load_queries(queries) if q.answerable and q.id in lists]
    evidence = {q.id: resolver.run(q) for q in asked}
    rows = []
    for budget in budgets:
        started, complete, lost = time.perf_counter(), 0, []
        assembler = ContextAssembler(store, encoder, budget_tokens=budget)
        for q in asked:
            ranked, ev = lists[q.id], evidence[q.id]
            context = assembler.run(q, ranked)
            need = {a.group for a in ev.alternatives}
            units = {u.id: Span(u.doc_id, u.version, u.start, u.end) for u in context.units}
            if need and groups_present(ev, units) >= need:
                complete += 1
            elif groups_present(ev, {c.chunk_id: c.span for c in ranked.items}) >= need:
                lost.append(q.id)  # governance passed every group; the context lost one
        rows.append({"budget_tokens": budget, "complete": complete, "answerable": len(asked),
                     "lost_at_context": lost, "seconds": round(time.perf_counter() - started, 1)})
        print(f"{budget:>6} tokens: complete@context {complete}/{len(asked)}; lost at the context "
              f"{len(lost)} {lost}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run folder of bench/quality/quality.py (its traces.jsonl)")
    ap.add_argument("--half", choices=("fit", "test"), default="fit")
    ap.add_argument("--store", type=Path, default=DEVSET / "store.db")
    ap.add_argument("--budgets", type=int, nargs="+", default=[3000, 4500, 6000])
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    rows = replay(args.run, DEVSET / f"queries.{args.half}.jsonl", args.store, args.budgets)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
