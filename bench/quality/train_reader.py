"""The extractive generator's learned reader (:mod:`ragdx.stages.reader`): its training data built
from the dev set's fit half, its weights fitted, its selection rule chosen, in one command.

Reproduce, from the repository root, after ``bench/quality/quality.py`` has built the dev store::

    .venv/bin/python bench/quality/train_reader.py            # contexts cached in bench/.cache/reader/

1. **Contexts.** Each question of ``queries.fit.jsonl`` (the fit half only: the test half is for
   ``bench/quality/quality.py``) runs through ragdx's pipeline up to the context, with the settings of
   ``bench/quality/quality.py`` (the per-token int8 all-MiniLM-L6-v2, the result cache off). The
   contexts are kept in ``bench/.cache/reader/contexts-fit.pkl`` (``--rebuild`` runs them again).
2. **Rows.** The generator's candidate sentences of each answerable question, with the reader's
   features (:func:`ragdx.stages.reader.feature_matrix`; the packaged cross-encoder reads the
   ``--depth`` best by words and meaning) and a label: the required groups whose labelled span the
   sentence's support overlaps (:func:`ragdx.stages.verify.support_spans`: where the diagnosis
   will say the claim rests). Written to ``bench/.cache/reader/rows-fit.jsonl``, and the rows the
   shipped weights are fitted on to ``tests/data/reader_rows.json.gz`` (a test refits them).
3. **Fit.** A logistic regression (:func:`ragdx.stages.reader.fit_logistic`) with and without the
   cross-encoder's features, measured first by 5-fold cross-validation over questions: the
   share of questions whose first sentence states a required group, and, for each selection rule
   (further sentences while their probability reaches ``reader_keep``, at most
   ``max_sentences``), the share whose chosen sentences state every group and the median words.
   The weights fitted on every row are written to ``src/ragdx/stages/reader.json``.

Results: ``bench/results/reader.json``; docs/benchmarks.md, "The learned reader".
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, INT8, REPO, code_version, machine, write_result

CACHE = REPO / "bench" / ".cache" / "reader"
ROWS_FOR_TEST = REPO / "tests" / "data" / "reader_rows.json.gz"
DEFAULT_OUT = REPO / "bench" / "results" / "reader.json"
FOLDS = 5


def settings_and_encoder(cross_model: str = "", weights: Path | None = None) -> tuple[Any, Any]:
    from ragdx.config import load_settings
    from ragdx.encoders.onnx import OnnxEncoder
    extra = [f"generation.reader_model={cross_model}"] if cross_model else []
    extra += [f"generation.reader_weights={weights}"] if weights else []
    settings = load_settings(overrides=["retrieval.dense.backend=onnx", f"retrieval.dense.model={INT8}",
                                        "cache.enabled=false", *extra])
    encoder = OnnxEncoder(INT8.stem, model_path=INT8, vocab_path=INT8.parent / "vocab.txt",
                          batch_size=settings.retrieval.dense.batch_size, threads=1)
    return settings, encoder


def contexts(store: Any, settings: Any, encoder: Any, queries: list[Any], rebuild: bool) -> dict[str, Any]:
    """Each question's context, by id (cached)."""
    path = CACHE / f"contexts-{len(queries)}.pkl"
    if path.is_file() and not rebuild:
        return pickle.loads(path.read_bytes())
    from ragdx.build import default_stages
    from ragdx.pipeline import Pipeline
    from ragdx.types import StageKind
    stages = [s for s in default_stages(store, settings, encoder=encoder) if s.kind.order <= StageKind.CONTEXT.order]
    pipeline = Pipeline(stages, store=store, encoder=encoder, settings=settings)
    out = {}
    started = time.perf_counter()
    for n, q in enumerate(queries, start=1):
        out[q.id] = pipeline.run(q).context
        if n % 20 == 0:
            print(f"  contexts {n}/{len(queries)}, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(out))
    return out


def build_rows(store: Any, settings: Any, encoder: Any, queries: list[Any], ctxs: dict[str, Any],
               depth: int, read: bool = True) -> list[dict]:
    """One record per answerable question: its candidates' facts, blend, cross-encoder logits
    (None beyond ``depth``), required groups stated, words, and each sentence as the
    cross-encoder reads it (``texts``). Without ``read``, no cross-encoder runs and the records
    have no ``rows`` (what ``bench/research/train_cross.py --from-queries`` trains on)."""
    from dataclasses import astuple

    from ragdx.diagnosis.evidence import EvidenceResolver
    from ragdx.encoders.cross import CrossEncoder
    from ragdx.stages.generate import ExtractiveGenerator, _in_place
    from ragdx.stages.reader import SentenceFacts
    from ragdx.stages.verify import support_spans
    from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER
    g = settings.generation
    cross = CrossEncoder(g.reader_model or DEFAULT_CROSS_ENCODER, max_tokens=g.reader_max_tokens, threads=1) \
        if read else None
    gen = ExtractiveGenerator(min_coverage=g.min_coverage, keep_ratio=g.keep_ratio, max_sentences=g.max_sentences,
                              encoder=encoder, semantic_weight=g.semantic_weight, rank_weight=g.rank_weight,
                              reader=cross, reader_weight=0.0, reader_depth=depth,
                              store=store)  # as the pipeline's: each sentence under its own entry
    resolver = EvidenceResolver(store)
    records = []
    started = time.perf_counter()
    for n, q in enumerate(queries, start=1):
        ctx = ctxs[q.id]
        found = gen._candidates(q.question, ctx)
        if not found:
            continue
        rows = gen.reader_rows(*gen.as_read(q.question, ctx, found)) if read else None
        spans = [a for a in resolver.run(q).alternatives if a.span is not None]
        groups = [sorted({a.group for a in spans for s in support_spans(c.text, [c.unit]) if s.overlaps(a.span)})
                  for c in found]
        facts = [astuple(SentenceFacts(c.lexical, c.cosine, c.density, c.unit.rank, c.index, len(c.text.split()),
                                       c.text.endswith(":"), any(ch.isdigit() for ch in c.text), c.table_row,
                                       0.0)) for c in found]
        record = {"id": q.id, "question": q.question, "kind": q.tags[0] if q.tags else "", "n_groups": len(q.required),
                  "rows": np.round(rows, 5).tolist() if rows is not None else None, "groups": groups,
                  "words": [len(c.text.split()) for c in found], "facts": facts,
                  "blend": [round(c.content, 5) for c in found], "texts": [_in_place(c) for c in found]}
        records.append({k: v for k, v in record.items() if v is not None})
        if n % 20 == 0:
            print(f"  rows {n}/{len(queries)}, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return records


def with_depth(record: dict, depth: int) -> np.ndarray:
    """A record's rows as if the cross-encoder had read only its ``depth`` best by blend."""
    rows = np.array(record["rows"], float)
    order = np.argsort(-np.array(record["blend"]), kind="stable")
    deeper = order[depth:]
    rows[deeper, 12:] = 0.0
    read = rows[:, 14] > 0
    if read.any():  # the gap to the best read logit: the best is among the read ones still
        logit = np.log(np.clip(rows[:, 12], 1e-12, 1 - 1e-12) / np.clip(1 - rows[:, 12], 1e-12, 1))
        rows[read, 13] = logit[read] - logit[read].max()
    return rows


def top(record: dict, rows: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` best rows by blend and their labels: what the reader is fitted on (the deeper
    sentences are easy negatives, and leaving them out keeps the shipped table small)."""
    order = np.argsort(-np.array(record["blend"]), kind="stable")[:keep]
    return rows[order], np.array([bool(record["groups"][i]) for i in order])


def select(p: np.ndarray, keep: float, most: int) -> list[int]:
    """The selection rule: the most probable first, then each further one whose probability is at
    least ``keep`` of the first's, up to ``most`` in all."""
    order = list(np.argsort(-p, kind="stable"))
    return [order[0]] + [i for i in order[1:most] if p[i] >= keep * p[order[0]]]


def evaluate(records: list[dict], probs: list[np.ndarray], rules: list[tuple[float, int]]) -> dict:
    """First sentence states a group; and, per rule, every group stated and median words."""
    having = [k for k, r in enumerate(records) if any(r["groups"])]
    first = sum(bool(records[k]["groups"][int(np.argmax(probs[k]))]) for k in having)
    out: dict[str, Any] = {"questions": len(records), "with_a_positive": len(having),
                           "first_states_a_group": round(first / len(having), 4)}
    for keep, most in rules:
        complete, words = 0, []
        for k, r in enumerate(records):
            chosen = select(probs[k], keep, most)
            stated = {g for i in chosen for g in r["groups"][i]}
            complete += len(stated) == r["n_groups"]
            words.append(sum(r["words"][i] for i in chosen))
        out[f"keep {keep}, at most {most}"] = {"all_groups_stated": round(complete / len(records), 4),
                                               "median_words": statistics.median(words)}
    return out


def out_of_fold(records: list[dict], matrix: Any, fit: Any, fit_top: int = 50) -> tuple[list[dict], list[np.ndarray]]:
    """The records in fold order, each with its sentences' probabilities from a reader fitted on
    the other folds (:data:`FOLDS`, over questions): ``fit(rows, labels)`` on each training
    question's ``fit_top`` best rows by blend (``matrix(record)``: its rows) returns the function
    that maps a held-out question's rows to probabilities."""
    folds = [records[k::FOLDS] for k in range(FOLDS)]
    held, probs = [], []
    for k in range(FOLDS):
        parts = [top(r, matrix(r), fit_top) for j, f in enumerate(folds) if j != k for r in f]
        predict = fit(np.vstack([x for x, _ in parts]), np.concatenate([y for _, y in parts]))
        for r in folds[k]:
            held.append(r)
            probs.append(predict(matrix(r)))
    return held, probs


def first_hits(records: list[dict], held: list[dict], probs: list[np.ndarray]) -> list[bool]:
    """For each record with a positive, in ``records``' order, whether the most probable of its
    sentences (``held`` and ``probs``: :func:`out_of_fold`'s) states a required group: the pairs
    a McNemar test compares."""
    first = {r["id"]: bool(r["groups"][int(np.argmax(p))]) for r, p in zip(held, probs) if any(r["groups"])}
    return [first[r["id"]] for r in records if r["id"] in first]


def cross_validate(records: list[dict], features: tuple[str, ...], depth: int, rules: list, l2: float,
                   fit_top: int) -> dict:
    from ragdx.stages.reader import fit_logistic
    return evaluate(*out_of_fold(records, lambda r: with_depth(r, depth),
                                 lambda x, y: fit_logistic(x, y, features, l2=l2).probabilities, fit_top), rules)


def cross_alone(records: list[dict], depth: int) -> dict:
    """The cross-encoder's own order of the ``depth`` best sentences by blend: the share of the
    questions with a positive among them whose first, or first three, state a required group."""
    first = three = having = 0
    for r in records:
        rows = with_depth(r, depth)
        read = np.flatnonzero(rows[:, 14] > 0)
        if not any(r["groups"][i] for i in read):
            continue
        having += 1
        order = read[np.argsort(-rows[read, 13], kind="stable")]
        first += bool(r["groups"][order[0]])
        three += any(r["groups"][i] for i in order[:3])
    return {"questions_with_a_positive_read": having, "first": round(first / max(1, having), 4),
            "in_first_three": round(three / max(1, having), 4)}


def blend_baseline(records: list[dict], rules: list) -> dict:
    """Today's order (words and meaning, and the unit-rank prior) as a probability-free ranking."""
    probs = []
    for r in records:
        b = np.array(r["blend"]) + 0.3 / np.log2(1 + np.array([f[3] for f in r["facts"]]))
        probs.append(b)
    return evaluate(records, probs, [(-1e9, m) for m in (1, 2, 3, 4, 5, 7)])


def answers(store: Any, settings: Any, encoder: Any, queries: list[Any], ctxs: dict[str, Any],
            most: tuple[int, ...]) -> dict:
    """The generator's real answers on the fit half's contexts with the shipped reader, for each
    ``max_sentences``: the share of questions whose claims state every required group (a claim's
    support, located as the diagnosis locates it, overlapping a group's span) and the answers'
    median words (exceptions, parts and prefixes included)."""
    from ragdx.build import learned_reader
    from ragdx.diagnosis.evidence import EvidenceResolver
    from ragdx.stages.generate import ExtractiveGenerator
    from ragdx.stages.verify import support_spans
    g = settings.generation
    reader, weights = learned_reader(g)
    resolver = EvidenceResolver(store)
    spans = {q.id: [a for a in resolver.run(q).alternatives if a.span is not None] for q in queries}
    out = {}
    for n in most:
        gen = ExtractiveGenerator(min_coverage=g.min_coverage, keep_ratio=g.keep_ratio, max_sentences=n,
                                  encoder=encoder, semantic_weight=g.semantic_weight, rank_weight=g.rank_weight,
                                  reader=reader, reader_depth=g.reader_depth, weights=weights,
                                  reader_keep=g.reader_keep, store=store)
        complete, words, answered = 0, [], 0
        for q in queries:
            ctx = ctxs[q.id]
            answer = gen.run(q, ctx)
            if answer.abstained:
                continue
            answered += 1
            words.append(len(answer.text.split()))
            stated = {a.group for c in answer.claims for s in support_spans(c.text, [ctx.unit(i) for i in c.citations])
                      for a in spans[q.id] if s.overlaps(a.span)}
            complete += len(stated) == len(q.required)
        out[f"max_sentences {n}"] = {"answered": answered, "all_groups_stated": round(complete / len(queries), 4),
                                     "median_words": statistics.median(words) if words else 0}
        print(f"  max_sentences {n}: {out[f'max_sentences {n}']}", file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=DEVSET / "store.db")
    ap.add_argument("--queries", type=Path, default=DEVSET / "queries.fit.jsonl")
    ap.add_argument("--depth", type=int, default=30, help="sentences the cross-encoder reads when building rows")
    ap.add_argument("--depths", default="8,12,20,30", help="cross-encoder depths to compare")
    ap.add_argument("--ship-depth", type=int, default=30, help="the depth the shipped weights are fitted at (generation.reader_depth)")
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--fit-top", type=int, default=50, help="fit on each question's N best sentences by blend")
    ap.add_argument("--limit", type=int, default=0, help="the first N answerable questions only (a smoke test)")
    ap.add_argument("--answers", default="3,4,5",
                    help="max_sentences values to run the generator with, on the cached contexts ('' skips)")
    ap.add_argument("--rebuild", action="store_true", help="run the contexts and rows again")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cross-model", default="",
                    help="the reader's cross-encoder: a folder (bench/research/train_cross.py writes one); "
                         "default the packaged one")
    ap.add_argument("--weights-out", type=Path, default=None,
                    help="where the fitted weights go (default: the shipped src/ragdx/stages/reader.json, "
                         "and its refit table tests/data/reader_rows.json.gz)")
    args = ap.parse_args()
    if "test" in args.queries.name:
        ap.error("the reader is fitted on the fit half; the test half is for bench/quality/quality.py")
    from ragdx.queryset import load_queries
    from ragdx.stages.reader import FEATURES, READER_FILE, WITHOUT_CROSS, fit_logistic
    from ragdx.store.sqlite import SQLiteStore
    queries = [q for q in load_queries(args.queries) if q.answerable and q.required]
    if args.limit:
        queries = queries[:args.limit]
    tag = "-" + hashlib.sha256(str(Path(args.cross_model).resolve()).encode()).hexdigest()[:8] \
        if args.cross_model else ""
    rows_path = CACHE / f"rows-{len(queries)}{tag}.jsonl"
    weights_out = args.weights_out or READER_FILE
    if rows_path.is_file() and not args.rebuild:
        records = [json.loads(line) for line in rows_path.read_text().splitlines()]
    else:
        settings, encoder = settings_and_encoder(args.cross_model)
        with SQLiteStore(args.store, "read") as store:
            ctxs = contexts(store, settings, encoder, queries, args.rebuild)
            records = build_rows(store, settings, encoder, queries, ctxs, args.depth)
        rows_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    rules = [(keep, most) for most in (1, 2, 3, 4, 5, 7) for keep in (0.0, 0.1, 0.2, 0.3, 0.5)]
    result: dict[str, Any] = {"machine": machine(), "code": code_version(), "queries": args.queries.name,
                              "answerable_questions": len(queries), "records": len(records),
                              "rows": sum(len(r["rows"]) for r in records),
                              "positives": sum(bool(g) for r in records for g in r["groups"])}
    result["cross_model"] = args.cross_model or "packaged ms-marco-MiniLM-L-12-v2"
    result["today's order"] = blend_baseline(records, rules)
    result["cross alone, depth 12"] = cross_alone(records, 12)
    result["cv plain"] = cross_validate(records, WITHOUT_CROSS, 0, rules, args.l2, args.fit_top)
    for d in (int(x) for x in args.depths.split(",")):
        result[f"cv cross, depth {d}"] = cross_validate(records, FEATURES, d, rules, args.l2, args.fit_top)
    if args.fit_top < 10 ** 6:
        result[f"cv cross, depth {args.ship_depth}, fitted on every row"] = cross_validate(
            records, FEATURES, args.ship_depth, rules, args.l2, 10 ** 6)
    # the shipped weights are fitted on the rows as the test reads them back (5 decimals)
    parts = [top(r, with_depth(r, args.ship_depth), args.fit_top) for r in records]
    x_cross = np.round(np.vstack([x for x, _ in parts]), 4)
    y = np.concatenate([y for _, y in parts])

    shipped = {"trained_on": f"{args.queries.name}: {len(records)} questions, their {args.fit_top} best sentences by "
                             f"words and meaning: {len(y)} sentences, {int(y.sum())} stating a required group",
               "command": ".venv/bin/python bench/quality/train_reader.py", "depth": args.ship_depth, "l2": args.l2,
               "readers": {"cross": fit_logistic(x_cross, y, FEATURES, l2=args.l2).to_dict(),
                           "plain": fit_logistic(x_cross, y, WITHOUT_CROSS, l2=args.l2).to_dict()}}
    if args.cross_model:
        shipped["cross_model"] = args.cross_model
        shipped["command"] += f" --cross-model {args.cross_model} --weights-out {weights_out}"
    weights_out.parent.mkdir(parents=True, exist_ok=True)
    weights_out.write_text(json.dumps(shipped, indent=1) + "\n")
    if weights_out == READER_FILE:  # the shipped weights: the test refits them from this table
        ROWS_FOR_TEST.parent.mkdir(parents=True, exist_ok=True)
        # mtime 0: the same rows give the same bytes
        with gzip.GzipFile(ROWS_FOR_TEST, "wb", mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
            json.dump({"depth": args.ship_depth, "l2": args.l2, "top": args.fit_top, "features": list(FEATURES),
                       "rows": x_cross.tolist(), "labels": y.astype(int).tolist()}, f)
    result["shipped"] = shipped
    if args.answers:
        settings, encoder = settings_and_encoder(args.cross_model, weights_out)
        with SQLiteStore(args.store, "read") as store:
            result["answers"] = answers(store, settings, encoder, queries,
                                        contexts(store, settings, encoder, queries, False),
                                        tuple(int(x) for x in args.answers.split(",")))
    write_result(args.out, result, json.dumps({k: v for k, v in result.items() if k.startswith(("cv", "today", "cross"))},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
