"""Rewriting, HyDE and multi-hop against the single pass, per kind of question, on the dev set.

One ``ragdx ablate`` run on the test half of ``bench/devset/`` (the store ``bench/quality/quality.py``
builds, the int8 encoder), with the single pass as the baseline (``rewrite.route=single``) and
four variants of the rewrite stage:

- ``rewrite``: every question rewritten by the offline rewriter (entities from the title and
  heading index, the parts of a compound question), no multi-hop;
- ``hyde``: every question searched with an offline hypothetical passage too, nothing else;
- ``multihop``: every question down the multi-hop path (rewrites, slots, hops);
- ``routed``: the default, the multi-hop path only for the questions routing sends there.

Then, per kind of question (the first tag) and variant: answer success, evidence complete at
the context, and mean latency, baseline against variant, with ragdx's paired tests (exact
McNemar for success and completeness, the paired randomization test for latency), how many
questions each variant routed down the multi-hop path, and the rewrite stage's own mean time
(in brackets: over how many questions it was recorded). Reproduce, from the repository root::

    .venv/bin/python bench/quality/quality.py                  # builds the dev set, the encoder, the store
    .venv/bin/python bench/retrieval/rewrite_ablation.py         # the ablation (about an hour on 2 cores), the table
    .venv/bin/python bench/retrieval/rewrite_ablation.py --read FOLDER   # the table of an ablation folder

Writes ``bench/results/rewrite_ablation.json`` and prints the markdown tables of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, machine, write_result

from ragdx.evaluation.significance import mcnemar, randomization

DEVSET = REPO / "bench" / ".cache" / "devset"
INT8 = REPO / "bench" / ".cache" / "int8" / "all-MiniLM-L6-v2-int8.onnx"
VARIANTS = {
    "rewrite": "rewrite.rewrite_single=true",
    "hyde": "rewrite.rewrite_single=true,rewrite.hyde=true,rewrite.entities=false,rewrite.expand=false",
    "multihop": "rewrite.route=multi-hop",
    "routed": "rewrite.route=auto",
}
MEASURES = (("success", "pass"), ("complete@context", "pass"), ("latency_ms total", "latency"))


def run_ablation(store: Path, queries: Path, out: Path) -> None:
    ragdx = str(Path(sys.executable).with_name("ragdx"))
    args = [ragdx, "ablate", "--store", str(store), "--queries", str(queries), "--out", str(out),
            "--set", "retrieval.dense.backend=onnx", "--set", f"retrieval.dense.model={INT8}",
            "--set", "rewrite.route=single"]
    for name, change in VARIANTS.items():
        args += ["--variant", f"{name}:{change}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def _per_query(folder: Path) -> dict[str, dict]:
    return json.loads((folder / "metrics.json").read_text())["per_query"]


def _routes(folder: Path) -> dict[str, str]:
    out = {}
    for line in (folder / "traces.jsonl").read_text().splitlines():
        trace = json.loads(line)
        rewrite = next((s for s in trace["stages"] if s["kind"] == "rewrite"), None)
        out[trace["query_id"]] = rewrite["route"] if rewrite else "single"
    return out


def compare(out: Path, queries: Path) -> dict:
    kinds = {}
    for line in queries.read_text().splitlines():
        q = json.loads(line)
        kinds[q["id"]] = (q.get("tags") or ["(untagged)"])[0]
    order = list(dict.fromkeys(kinds.values()))
    base = _per_query(out / "baseline")
    result: dict = {"queries": len(kinds), "kinds": {k: sum(v == k for v in kinds.values()) for k in order},
                    "variants": {}}
    for name in VARIANTS:
        variant = _per_query(out / name)
        routes = _routes(out / name)
        rows = {}
        for kind in order + ["all"]:
            ids = [q for q in kinds if kind == "all" or kinds[q] == kind]
            row = {"queries": len(ids), "multi-hop": sum(routes.get(q) == "multi-hop" for q in ids)}
            for measure, how in MEASURES:
                pairs = [(base[q][measure], variant[q][measure]) for q in ids
                         if base[q].get(measure) is not None and variant[q].get(measure) is not None]
                a, b = [x for x, _ in pairs], [y for _, y in pairs]
                test = mcnemar([x > 0.5 for x in a], [y > 0.5 for y in b]) if how == "pass" else \
                    randomization(a, b, seed=0)
                row[measure] = {"n": len(pairs), "baseline": sum(a) / len(a) if a else None,
                                "variant": sum(b) / len(b) if b else None, "p": test.p, "detail": test.detail}
            spent = [variant[q]["latency_ms rewrite"] for q in ids if variant[q].get("latency_ms rewrite") is not None]
            row["rewrite stage ms"] = {"n": len(spent), "mean": sum(spent) / len(spent) if spent else None}
            rows[kind] = row
        result["variants"][name] = rows
    return result


def table(result: dict) -> str:
    lines = []
    for name, rows in result["variants"].items():
        lines += [f"**{name}** (`{VARIANTS[name]}`)", "",
                  "| kind | questions | multi-hop | success | p | complete@context | p | mean latency ms | p | "
                  "rewrite stage ms |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for kind, row in rows.items():
            cells = [kind, str(row["queries"]), str(row["multi-hop"])]
            for measure, how in MEASURES:
                m = row[measure]
                if m["baseline"] is None:
                    cells += ["–", "–"]
                    continue
                fmt = (lambda v: f"{v:.0f}") if how == "latency" else (lambda v: f"{v:.3f}")
                cells += [f"{fmt(m['baseline'])} -> {fmt(m['variant'])}", f"{m['p']:.3g}"]
            spent = row["rewrite stage ms"]
            cells.append(f"{spent['mean']:.0f} ({spent['n']})" if spent["mean"] is not None else "–")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, default=DEVSET / "store.db")
    ap.add_argument("--queries", type=Path, default=DEVSET / "queries.test.jsonl")
    ap.add_argument("--read", type=Path, help="an ablation folder already run: only read it")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "rewrite_ablation.json")
    args = ap.parse_args()
    folder = args.read
    if folder is None:
        folder = REPO / "bench" / ".cache" / "rewrite-ablation"
        run_ablation(args.store, args.queries, folder)
    result = compare(folder, args.queries)
    result |= {"folder": str(folder), "code": code_version(), "machine": machine(),
               "command": " ".join(["bench/retrieval/rewrite_ablation.py"] + sys.argv[1:])}
    write_result(args.out, result, table(result))


if __name__ == "__main__":
    main()
