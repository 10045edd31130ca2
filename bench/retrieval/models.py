"""The packaged models (issue 26, extra ``models``) measured on the dev set's fit half: the int8
cross-encoder and ColBERT as rerankers against ragdx's default reranker, and int8
bge-small-en-v1.5 against all-MiniLM-L6-v2 as the dense encoder.

Reproduce, from the repository root, after ``bench/quality/quality.py`` has built the dev store::

    .venv/bin/python bench/retrieval/models.py                       # every part, the fit half
    .venv/bin/python bench/retrieval/models.py --parts rerank,colbert --sample 40 --depths 30,50

The store is opened read-only. The fit half only (``queries.fit.jsonl``): defaults are chosen
on it, never on the test half. Only answerable questions count.

**Rerankers** (in-process, ragdx's own stages): each question runs once through ragdx's pipeline
up to the context, with the settings of ``bench/quality/quality.py`` (the per-token int8 all-MiniLM-L6-v2
of ``bench/.cache/int8``, the result cache off); each variant then resumes that run at the
rerank stage (``Pipeline.resume``), so every variant reranks the same fused list. A model's
scores are kept per (question, text) and shared by its variants (one pair per forward pass,
so a score does not depend on the others scored with it). For each variant:

- for each required group of each question, the rank (in the reranked list) at which the group
  is first held, whole, by the units up to that rank (``groups_present``); ``recall@k`` is the
  share of groups held by the first k; ``complete@k`` the share of questions with every group;
  ``first@1`` the share of questions whose first unit holds part of some required group;
- ``complete@context``: every group held by the assembled context (ragdx's default 6,000-token
  budget);
- the reranker's seconds per question (the shared machine's wall clock: relative only; a
  model's variants share its scores, so each shows the model's scoring time).

**Dense encoders**: re-embedding the ~70k chunks with bge on the shared 2-core machine would
take hours, so both encoders are measured over the same subset: every chunk holding part of a
required span of the questions (the relevant ones) plus a fixed uniform random sample of the
other searchable chunks (``--distractors``, seed 0); each question searches the chunks its
principal may read, exactly (cosine), all versions. all-MiniLM-L6-v2's vectors are the ones the
store holds; bge's are computed here from the same encoder input (heading prefix and text).
Recall on a subset is higher than on the whole corpus; the comparison is what counts. The encode
rate is measured first and reported.

Results: ``bench/results/models.json`` (``--out``); docs/benchmarks.md, "Packaged models".
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, INT8, REPO, code_version, machine, write_result

DEFAULT_OUT = REPO / "bench" / "results" / "models.json"
KS = (1, 3, 10, 30)


class SharedScores:
    """A pair scorer whose scores are kept per (question, text) and shared by the variants that
    use it (exact: the packaged models score one pair per forward pass)."""

    def __init__(self, scorer: Any) -> None:
        self.scorer = scorer
        self.kept: dict[tuple[str, str], float] = {}
        self.seconds = 0.0
        self.pairs = 0

    @property
    def config(self) -> Any:
        return self.scorer.config

    def warm_up(self) -> None:
        self.scorer.warm_up()

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if (query, t) not in self.kept]
        if todo:
            started = time.perf_counter()
            for text, value in zip(todo, self.scorer.score(query, todo)):
                self.kept[(query, text)] = float(value)
            self.seconds += time.perf_counter() - started
            self.pairs += len(todo)
        return np.array([self.kept[(query, t)] for t in texts], np.float32)


def _spans(items: Sequence[Any]) -> dict[str, Any]:
    from ragdx.types import Span
    return {i.chunk_id if hasattr(i, "chunk_id") else i.id: Span(i.doc_id, i.version, i.start, i.end) for i in items}


def group_ranks(evidence: Any, items: Sequence[Any]) -> dict[int, int | None]:
    """Each required group's first rank at which the units up to it hold it whole (None: never)."""
    from ragdx.diagnosis.evidence import groups_present
    groups = sorted({a.group for a in evidence.alternatives})
    ranks: dict[int, int | None] = {g: None for g in groups}
    held: dict[str, Any] = {}
    for rank, item in enumerate(items, start=1):
        held.update(_spans([item]))
        for g in groups_present(evidence, held):
            if ranks[g] is None:
                ranks[g] = rank
        if all(r is not None for r in ranks.values()):
            break
    return ranks


def summarise(rows: list[dict]) -> dict:
    """The variant's figures over its questions (see the module docstring)."""
    groups = [r for row in rows for r in row["group_ranks"].values()]
    out: dict[str, Any] = {"questions": len(rows), "groups": len(groups)}
    for k in KS:
        out[f"recall@{k}"] = round(sum(r is not None and r <= k for r in groups) / len(groups), 4)
        out[f"complete@{k}"] = round(sum(all(r is not None and r <= k for r in row["group_ranks"].values())
                                         for row in rows) / len(rows), 4)
    found = sorted(r for r in groups if r is not None)
    out["median_group_rank"] = statistics.median(found) if found else None
    out["groups_never_held"] = sum(r is None for r in groups)
    out["first@1"] = round(sum(row["first_holds"] for row in rows) / len(rows), 4)
    out["complete@context"] = round(sum(row["complete_context"] for row in rows) / len(rows), 4)
    out["complete@context_n"] = sum(row["complete_context"] for row in rows)
    out["rerank_seconds_mean"] = round(statistics.fmean(row["seconds"] for row in rows), 3)
    return out


def rerank_variants(store: Any, encoder: Any, settings: Any, parts: set[str], depths: list[int]) -> dict[str, Any]:
    """The reranker stages to compare, by name, and their shared scorers."""
    from ragdx.encoders.cross import CrossEncoder
    from ragdx.stages.rerank import CrossEncoderReranker
    top_n = settings.fusion.top_k
    variants: dict[str, Any] = {}
    scorers: dict[str, SharedScores] = {}
    if "rerank" in parts:
        scorers["cross-encoder"] = SharedScores(CrossEncoder(threads=1))
    if "colbert" in parts:
        from ragdx.encoders.colbert import LateInteractionScorer
        scorers["colbert"] = SharedScores(LateInteractionScorer(threads=1))
    for model, shared in scorers.items():  # the deepest scores every pair the shallower need
        for depth in depths:
            for combine in ("alone", "rrf"):
                variants[f"{model} {combine}, depth {depth}"] = CrossEncoderReranker(
                    store, shared, top_n=top_n, depth=depth, combine=combine)
    return {"variants": variants, "scorers": scorers}


def measure_rerankers(store: Any, encoder: Any, settings: Any, queries: list[Any], parts: set[str],
                      depths: list[int]) -> dict:
    from ragdx.build import default_stages
    from ragdx.diagnosis.evidence import EvidenceResolver, relevant_items
    from ragdx.pipeline import Pipeline
    from ragdx.types import StageKind
    stages = [s for s in default_stages(store, settings, encoder=encoder) if s.kind.order <= StageKind.CONTEXT.order]
    base = Pipeline(stages, store=store, encoder=encoder, settings=settings)
    made = rerank_variants(store, encoder, settings, parts, depths)
    pipelines = {f"ragdx default ({base.reranker.name})": None, "fused order (no rerank)": None}
    for name, stage in made["variants"].items():
        pipelines[name] = Pipeline([stage if s.kind is StageKind.RERANK else s for s in stages],
                                   store=store, encoder=encoder, settings=settings)
    resolver = EvidenceResolver(store)
    rows: dict[str, list[dict]] = defaultdict(list)
    started = time.perf_counter()
    for n, query in enumerate(queries, start=1):
        evidence = resolver.run(query)
        trace = base.run(query)
        traces = {name: (trace if pipeline is None else pipeline.resume(trace, StageKind.RERANK))
                  for name, pipeline in pipelines.items()}
        for name, t in traces.items():
            ranked = t.stage(base.fusion.name) if name.startswith("fused order") else \
                next(r for r in t.ranked if r.kind is StageKind.RERANK)
            items = ranked.items
            first = items[:1]
            rows[name].append({
                "id": query.id,
                "group_ranks": group_ranks(evidence, items),
                "first_holds": bool(relevant_items(evidence, _spans(first))),
                "complete_context": len(group_ranks(evidence, t.context.units)) > 0 and all(
                    r is not None for r in group_ranks(evidence, t.context.units).values()),
                "seconds": 0.0 if name.startswith("fused order") else ranked.seconds,
            })
        if n % 10 == 0:
            print(f"  {n}/{len(queries)} questions, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    out = {name: {"summary": summarise(r), "per_question": {row["id"]: {
        "group_ranks": row["group_ranks"], "complete_context": row["complete_context"]} for row in r}}
        for name, r in rows.items()}
    for model, shared in made["scorers"].items():
        # the variants of a model share its scores: each costs the model's scoring time
        for name, v in out.items():
            if name.startswith(f"{model} "):
                v["summary"]["rerank_seconds_mean"] = round(shared.seconds / len(queries), 3)
        out[f"{model} scoring"] = {"config": dict(shared.config), "pairs": shared.pairs,
                                   "seconds": round(shared.seconds, 1),
                                   "ms_per_pair": round(1000 * shared.seconds / max(shared.pairs, 1), 1)}
    return out


def measure_dense(store: Any, encoder: Any, queries: list[Any], distractors: int, seed: int = 0) -> dict:
    """R@10, R@100 and nDCG@10 of all-MiniLM-L6-v2 (stored int8 vectors) and bge-small-en-v1.5
    (int8, encoded here) over one subset of the chunks (see the module docstring)."""
    from ragdx.diagnosis.evidence import EvidenceResolver, relevant_items
    from ragdx.encoders.onnx import packaged_encoder
    from ragdx.evaluation.measures import evaluate, parse_measure
    from ragdx.ingest.embed import passage_input
    space = store.active_space()
    ids, docs, blobs, _ = store.vector_table(space.id)
    index = {cid: i for i, cid in enumerate(ids)}
    resolver = EvidenceResolver(store)
    relevant: dict[str, set[str]] = {}
    for q in queries:
        evidence = resolver.run(q)
        docs_needed = {(a.span.doc_id, a.span.version) for a in evidence.alternatives if a.span is not None}
        spans = {c.id: c for d, v in docs_needed for c in store.chunks(d, v)}
        relevant[q.id] = {c for c in relevant_items(evidence, _spans(list(spans.values()))) if c in index}
    wanted = set().union(*relevant.values())
    others = sorted(set(ids) - wanted)
    sample = sorted(random.Random(seed).sample(others, min(distractors, len(others))))
    subset = sorted(wanted) + sample
    rows = [index[c] for c in subset]
    minilm = np.stack([np.frombuffer(blobs[i], np.float32) for i in rows])
    acl = defaultdict(set)
    db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    for doc, version, grp in db.execute("SELECT doc_id, version, grp FROM acl"):
        acl[(doc, version)].add(grp)
    db.close()
    readable = [acl[docs[i]] for i in rows]
    chunks = store.chunks_by_id(subset)
    texts = [passage_input(chunks[c], True)[0] for c in subset]
    bge = packaged_encoder("bge-small-en-v1.5", threads=1)
    started, cpu = time.perf_counter(), time.process_time()
    probe = bge.encode(texts[:100]).vectors
    rate = {"texts": len(probe), "wall_s_per_text": round((time.perf_counter() - started) / len(probe), 4),
            "cpu_s_per_text": round((time.process_time() - cpu) / len(probe), 4)}
    print(f"  bge encode rate: {rate}; {len(subset)} texts to encode", file=sys.stderr, flush=True)
    started = time.perf_counter()
    bge_vectors = np.concatenate([probe, bge.encode(texts[100:]).vectors]) if len(texts) > 100 else probe
    encode_seconds = time.perf_counter() - started
    measures = [parse_measure(m) for m in ("R@10", "R@100", "nDCG@10")]
    qrels = {q.id: {c: 1 for c in relevant[q.id]} for q in queries if relevant[q.id]}
    systems = {"all-MiniLM-L6-v2 (int8, stored)": (encoder, minilm),
               "bge-small-en-v1.5 (int8, query prompt)": (bge, bge_vectors),
               "bge-small-en-v1.5 (int8, no query prompt)": (None, bge_vectors)}
    out: dict[str, Any] = {"subset": {"chunks": len(subset), "relevant": len(wanted), "distractors": len(sample),
                                      "seed": seed, "searchable_in_store": len(ids), "questions": len(qrels)},
                           "bge_encode_rate": rate, "bge_encode_seconds": round(encode_seconds, 1)}
    for name, (enc, matrix) in systems.items():
        run = {}
        for q in queries:
            if q.id not in qrels:
                continue
            if enc is None:
                qv = bge.encode([q.question], kind="passage").vectors[0]  # the same text, no prompt
            else:
                qv = enc.encode([q.question], kind="query").vectors[0]
            mask = np.array([bool(r & set(q.principal.groups)) for r in readable])
            scores = np.where(mask, matrix @ qv, -np.inf)
            top = np.argsort(-scores, kind="stable")[:100]
            run[q.id] = {subset[i]: float(scores[i]) for i in top if np.isfinite(scores[i])}
        values = evaluate(measures, qrels, run)
        out[name] = {str(m): round(statistics.fmean(values[str(m)].values()), 4) for m in measures}
    return out


def table(result: dict) -> str:
    lines = []
    rr = result.get("rerank")
    if rr:
        lines.append("| reranker | first@1 | recall@1 | recall@3 | recall@10 | recall@30 | complete@10 | "
                     "complete@context | s/question |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, v in rr.items():
            if "summary" not in v:
                continue
            s = v["summary"]
            lines.append(f"| {name} | {s['first@1']:.3f} | {s['recall@1']:.3f} | {s['recall@3']:.3f} | "
                         f"{s['recall@10']:.3f} | {s['recall@30']:.3f} | {s['complete@10']:.3f} | "
                         f"{s['complete@context']:.3f} ({s['complete@context_n']}/{s['questions']}) | "
                         f"{s['rerank_seconds_mean']:.2f} |")
    dense = result.get("dense")
    if dense:
        lines.append(f"\ndense subset: {dense['subset']}; bge encode: {dense['bge_encode_rate']}")
        lines.append("| encoder | R@10 | R@100 | nDCG@10 |")
        lines.append("|---|---:|---:|---:|")
        for name, v in dense.items():
            if isinstance(v, dict) and "R@10" in v:
                lines.append(f"| {name} | {v['R@10']:.4f} | {v['R@100']:.4f} | {v['nDCG@10']:.4f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=DEVSET / "store.db")
    ap.add_argument("--queries", type=Path, default=DEVSET / "queries.fit.jsonl")
    ap.add_argument("--parts", default="rerank,colbert,dense", help="comma-separated: rerank, colbert, dense")
    ap.add_argument("--sample", type=int, default=0,
                    help="rerank a fixed random sample (seed 0) of N answerable questions, not all")
    ap.add_argument("--depths", default="30,75", help="candidates the models score (rerank.depth), comma-separated")
    ap.add_argument("--distractors", type=int, default=6000)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--merge", type=Path, default=None,
                    help="a results file of other parts (e.g. --parts dense run apart) to merge into --out")
    args = ap.parse_args()
    if "test" in args.queries.name:
        ap.error("the models are chosen on the fit half; the test half is for bench/quality/quality.py")
    from ragdx.config import load_settings
    from ragdx.encoders.onnx import OnnxEncoder
    from ragdx.queryset import load_queries
    from ragdx.store.sqlite import SQLiteStore
    parts = set(args.parts.split(","))
    depths = sorted(int(d) for d in args.depths.split(","))
    settings = load_settings(overrides=["retrieval.dense.backend=onnx", f"retrieval.dense.model={INT8}",
                                        "cache.enabled=false"])
    encoder = OnnxEncoder(INT8.stem, model_path=INT8, vocab_path=INT8.parent / "vocab.txt",
                          batch_size=settings.retrieval.dense.batch_size, threads=1)
    queries = [q for q in load_queries(args.queries) if q.answerable and q.required]
    reranked = queries
    if args.sample and args.sample < len(queries):
        keep = set(random.Random(0).sample(range(len(queries)), args.sample))
        reranked = [q for i, q in enumerate(queries) if i in keep]
    result: dict[str, Any] = {"machine": machine(), "code": code_version(), "queries": str(args.queries.name),
                              "answerable_questions": len(queries), "reranked_questions": len(reranked), "depths": depths}
    with SQLiteStore(args.store, "read") as store:
        if store.active_space().id != encoder.space.id:
            raise SystemExit(f"the store's active space is not {INT8}'s")
        if parts & {"rerank", "colbert"}:
            print(f"reranking {len(reranked)} questions ...", file=sys.stderr, flush=True)
            result["rerank"] = measure_rerankers(store, encoder, settings, reranked, parts, depths)
        if "dense" in parts:
            print("dense encoders ...", file=sys.stderr, flush=True)
            result["dense"] = measure_dense(store, encoder, queries, args.distractors)
    if args.merge:
        other = json.loads(args.merge.read_text(encoding="utf-8"))
        for key in ("rerank", "dense"):
            if key in other and key not in result:
                result[key] = other[key]
                result[f"{key}_run"] = {k: other[k] for k in ("code", "answerable_questions", "reranked_questions",
                                                             "depths") if k in other}
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
