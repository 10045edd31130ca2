"""The generator's reader with one more reading, measured: the packaged cross-encoder reads each
of the best sentences with the sentence after it in its unit (a short reply, "Yes, using the C
compatibility features found in C++.", says what it says through the next one), as two more
features of the learned reader (the logit and its gap to the question's best so read).

It reads the contexts and rows ``bench/quality/train_reader.py`` cached for a query set
(``bench/.cache/reader/contexts-N.pkl``, ``rows-N.jsonl``; N answerable questions), rebuilds each
question's candidates with the generator as ``bench/quality/train_reader.py`` does, and reads the
``--depth`` best by words and meaning, each after its heading and followed by its next statement,
at the setting's token budget (``generation.reader_max_tokens``). It reports the cross-encoder's
own order so read against the sentence alone, and the learned reader's 5-fold figures with the
two features added (and read only for the 8, 12 or 20 best), each against the reader as shipped
with an exact McNemar test on "the first sentence states a group".

Reproduce, from the repository root (about 1.3 s a question on 2 cores)::

    .venv/bin/python bench/quality/train_reader.py --answers ''                       # the dev fit half's rows
    .venv/bin/python bench/research/reader_window.py                                   # bench/results/reader-window.json
    .venv/bin/python bench/quality/train_reader.py --store bench/.cache/pg-versions/store.db \\
        --queries PG_FIT.jsonl --answers '' --weights-out /tmp/w.json --out /tmp/r.json
    .venv/bin/python bench/research/reader_window.py --store bench/.cache/pg-versions/store.db --queries PG_FIT.jsonl \\
        --out bench/results/reader-window-pg.json

where ``PG_FIT.jsonl`` is the PostgreSQL fit sets joined (``cat bench/devset/pg-general.fit.jsonl
bench/devset/pg-label.fit.jsonl bench/devset/pg-label2.fit.jsonl bench/devset/pg-versions.jsonl``).

Results: docs/benchmarks-history.md, "Issue 26, twelfth round".
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, REPO, code_version, label_table, machine, write_result
from research.reader_lm import alone, cross_validate
from quality.train_reader import CACHE, cross_alone, settings_and_encoder

NEEDS = "the contexts and rows bench/quality/train_reader.py caches for the query set (run it first)"


def read_windows(store_path: Path, queries_path: Path, depth: int, out: Path) -> dict[str, list]:
    """Each answerable question's ``depth`` best sentences by blend read with the sentence after
    them (logits; None for the others), appended to ``out`` a question at a time (a rerun resumes)."""
    from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER, CrossEncoder
    from ragdx.queryset import load_queries
    from ragdx.stages.generate import ExtractiveGenerator, _in_place, _next_statement
    from ragdx.store.sqlite import SQLiteStore
    queries = [q for q in load_queries(queries_path) if q.answerable and q.required]
    done = {d["id"]: d["next"] for d in map(json.loads, out.read_text().splitlines())} if out.is_file() else {}
    if all(q.id in done for q in queries):
        return done
    ctxs = pickle.loads((CACHE / f"contexts-{len(queries)}.pkl").read_bytes())
    rows = {d["id"]: d for d in map(json.loads, (CACHE / f"rows-{len(queries)}.jsonl").read_text().splitlines())}
    settings, encoder = settings_and_encoder()
    g = settings.generation
    cross = CrossEncoder(g.reader_model or DEFAULT_CROSS_ENCODER, max_tokens=g.reader_max_tokens, threads=1)
    started = time.perf_counter()
    with SQLiteStore(store_path, "read") as store, out.open("a") as f:
        gen = ExtractiveGenerator(min_coverage=g.min_coverage, keep_ratio=g.keep_ratio,
                                  max_sentences=g.max_sentences, encoder=encoder, semantic_weight=g.semantic_weight,
                                  rank_weight=g.rank_weight, reader=cross, reader_weight=0.0, reader_depth=depth,
                                  store=store)
        for n, q in enumerate((q for q in queries if q.id not in done and q.id in rows), start=1):
            found = gen._candidates(q.question, ctxs[q.id])
            if len(found) != len(rows[q.id]["texts"]):
                raise SystemExit(f"{q.id}: {len(found)} candidates, the rows have {len(rows[q.id]['texts'])}: "
                                 "run bench/quality/train_reader.py --rebuild")
            order = np.argsort(-np.array(rows[q.id]["blend"]), kind="stable")[:depth]
            texts = [" ".join(filter(None, (_in_place(found[i]), _next_statement(found[i])))) for i in order]
            scores: list[float | None] = [None] * len(found)
            for i, s in zip(order, cross.score(q.question, texts)):
                scores[int(i)] = round(float(s), 4)
            done[q.id] = scores
            f.write(json.dumps({"id": q.id, "next": scores}) + "\n")
            f.flush()
            if n % 20 == 0:
                print(f"  {n} questions, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=DEVSET / "store.db")
    ap.add_argument("--queries", type=Path, default=DEVSET / "queries.fit.jsonl")
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "reader-window.json")
    args = ap.parse_args()
    if "test" in args.queries.name:
        ap.error("the reader is fitted on fit halves; the test halves are for bench/quality/quality.py")
    from ragdx.evaluation.significance import mcnemar
    from ragdx.queryset import load_queries
    n = sum(1 for q in load_queries(args.queries) if q.answerable and q.required)
    if not (CACHE / f"rows-{n}.jsonl").is_file():
        ap.error(f"no rows for {n} answerable questions in {CACHE}: run bench/quality/train_reader.py on {args.queries}")
    records = [json.loads(line) for line in (CACHE / f"rows-{n}.jsonl").read_text().splitlines()]
    windows = read_windows(args.store, args.queries, args.depth,
                           CACHE / f"window-{args.queries.stem}-{n}-{args.depth}.jsonl")
    records = [r for r in records if r["id"] in windows]
    result = {"machine": machine(), "code": code_version(), "queries": str(args.queries), "questions": len(records),
              "depth": args.depth, "window_alone": alone(records, windows), "cross_alone": cross_alone(records, args.depth)}
    shipped, before = cross_validate(records, None, args.depth, 15)
    result["reader"] = shipped
    table = [("cross-encoder, sentence alone", json.dumps(result["cross_alone"])),
             ("cross-encoder, with the next", json.dumps(result["window_alone"])),
             ("reader as shipped", f"first {shipped['first_states_a_group']}, "
                                   f"3 state every group {shipped['keep 0.0, at most 3']['all_groups_stated']}")]
    for read in (8, 12, 20, args.depth):
        top = {r["id"]: set(np.argsort(-np.array(r["blend"]), kind="stable")[:read].tolist()) for r in records}
        masked = {i: [x if k in top[i] else None for k, x in enumerate(s)] for i, s in windows.items()}
        figures, after = cross_validate(records, masked, args.depth, 15)
        test = mcnemar(before, after)
        figures["first_mcnemar"] = {"p_value": round(test.p, 4), "gained": test.gained, "lost": test.lost}
        result[f"reader_with_next_{read}"] = figures
        table.append((f"reader + the next, {read} read", f"first {figures['first_states_a_group']} "
                      f"({test.gained} gained, {test.lost} lost, McNemar p {test.p:.3f}), 3 state every group "
                      f"{figures['keep 0.0, at most 3']['all_groups_stated']}"))
    write_result(args.out, result, label_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
