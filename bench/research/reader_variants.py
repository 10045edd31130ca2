"""Four more ways to read the generator's candidate sentences, each measured against the learned
reader as shipped on the rows ``bench/quality/train_reader.py`` caches for a query set's fit half:

- ``bge``: bge-small-en-v1.5 (the ``models`` extra's int8 file, the query prompt of its model card)
  reads the ``--depth`` best sentences by words and meaning, each after its heading as the
  cross-encoder reads it; its cosine and the gap to the question's best become two more features;
- ``deeper``: the packaged cross-encoder reads the 45, 60, 90 or 120 best instead of the 30
  the reader reads (``generation.reader_depth``; at its ``generation.reader_max_tokens``), with
  the reader refitted for it;
- ``trees``: gradient-boosted trees (scikit-learn's ``HistGradientBoostingClassifier``, four
  settings) on the same 15 features instead of the logistic regression;
- ``cues``: four features pairing the question's kind with the sentence's form (a "why" question
  with a reason: because, since, so that, the reason, ...; "how do I" with an instruction: use,
  call, set, you can, ...; a yes/no question with a direct reply: "Yes", "No", "is not", "can be",
  ...; "what is" with a definition: "... is a ...").

Each is the reader's 5-fold figures (``bench/quality/train_reader.py``'s folds over questions): the share
of questions whose first sentence states a required group (with an exact McNemar test against the
shipped reader, per question) and the share whose 3 first state every group.

Reproduce, from the repository root (the models extra installed; about 5 minutes for the dev set's
fit half, most of it reading 120 sentences a question)::

    .venv/bin/python bench/quality/train_reader.py --answers ''                  # the dev fit half's rows
    .venv/bin/python bench/research/reader_variants.py                            # bench/results/reader-variants.json
    .venv/bin/python bench/research/reader_variants.py --queries PG_FIT.jsonl --out bench/results/reader-variants-pg.json

where ``PG_FIT.jsonl`` is the PostgreSQL fit sets joined, as in ``bench/research/reader_window.py``, whose
rows ``bench/quality/train_reader.py --store bench/.cache/pg-versions/store.db --queries PG_FIT.jsonl``
caches. Results: docs/benchmarks-history.md, "Issue 26, thirteenth round".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, REPO, code_version, label_table, machine, write_result
from research.reader_lm import cross_validate
from quality.train_reader import CACHE, evaluate, first_hits, out_of_fold, with_depth

NEEDS = "the rows bench/quality/train_reader.py caches for the query set (run it first)"

DEEPEST = 120
QUESTION_KINDS = (re.compile(r"\bwhy\b|^\s*(?:what is the reason|how come)\b", re.I),
                  re.compile(r"^\s*(?:how (?:do|can|should|would) (?:i|you|we)|how to|"
                             r"what is the (?:best|easiest|right) way)\b", re.I),
                  re.compile(r"^\s*(?:is|are|can|could|does|do|did|will|would|should|has|have|was|were|may|must)\b",
                             re.I),
                  re.compile(r"^\s*(?:what|who) (?:is|are)\b", re.I))
SENTENCE_FORMS = (re.compile(r"\b(?:because|since|so that|reasons?|this is why|that is why|due to|in order to|"
                             r"one is|advantages?|so as to|otherwise|allows?|makes? it)\b", re.I),
                  re.compile(r"\b(?:use|using|you can|you should|you need|you must|call|set|run|specify|pass|add|"
                             r"write|create|install)\b", re.I),
                  re.compile(r"^(?:yes|no|not|never)\b|\b(?:cannot|can't|can not|is not|are not|does not|doesn't|"
                             r"isn't|aren't|will not|won't|must not|is never|can be|can also|is possible|"
                             r"is allowed|it is|they are)\b", re.I),
                  re.compile(r"^[^,;:]{0,60}?\b(?:is|are|refers to|means) (?:a|an|the|one)\b", re.I))
TREES = ({"max_depth": 2, "max_iter": 100, "learning_rate": 0.05},
         {"max_depth": 3, "max_iter": 200, "learning_rate": 0.03},
         {"max_depth": 3, "max_iter": 100, "learning_rate": 0.05, "min_samples_leaf": 40},
         {"max_leaf_nodes": 8, "max_iter": 300, "learning_rate": 0.02, "l2_regularization": 1.0,
          "min_samples_leaf": 50})


def scored(records: list[dict], out: Path, depth: int, score: Callable[[str, list[str]], np.ndarray]) -> dict:
    """Each record's ``depth`` best sentences by blend scored against its question (None for the
    others), appended to ``out`` a question at a time (a rerun resumes)."""
    done = {d["id"]: d["scores"] for d in map(json.loads, out.read_text().splitlines())} if out.is_file() else {}
    started = time.perf_counter()
    with out.open("a") as f:
        for n, r in enumerate((r for r in records if r["id"] not in done), start=1):
            order = np.argsort(-np.array(r["blend"]), kind="stable")[:depth]
            scores: list[float | None] = [None] * len(r["texts"])
            for i, s in zip(order, score(r["question"], [r["texts"][i] for i in order])):
                scores[int(i)] = round(float(s), 5)
            done[r["id"]] = scores
            f.write(json.dumps({"id": r["id"], "scores": scores}) + "\n")
            f.flush()
            if n % 20 == 0:
                print(f"  {out.name}: {n} questions, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return done


def paired(before: list[bool], after: list[bool]) -> dict:
    from ragdx.evaluation.significance import mcnemar
    test = mcnemar(before, after)
    return {"p_value": round(test.p, 4), "gained": test.gained, "lost": test.lost}


def summary(figures: dict, test: dict | None = None) -> str:
    three = figures["keep 0.0, at most 3"]["all_groups_stated"]
    paired_text = f" ({test['gained']} gained, {test['lost']} lost, McNemar p {test['p_value']:.3f})" if test else ""
    return f"first {figures['first_states_a_group']}{paired_text}, 3 state every group {three}"


def held_out(records: list[dict], matrix: Callable[[dict], np.ndarray],
             fit: Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]) -> tuple[dict, list[bool]]:
    """A reader's 5-fold figures (:func:`train_reader.out_of_fold`), and for each question with a
    positive, in ``records``' order, whether its first sentence states a group."""
    held, probs = out_of_fold(records, matrix, fit)
    return evaluate(held, probs, [(0.0, 1), (0.0, 3), (0.0, 4)]), first_hits(records, held, probs)


def logistic(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    from ragdx.stages.reader import fit_standardised
    mean, scale, w = fit_standardised(x, y, 1.0)
    return lambda m: 1.0 / (1.0 + np.exp(-(w[0] + ((m - mean) / scale) @ w[1:])))


def read_deeper(record: dict, cross: list, depth: int) -> np.ndarray:
    """The record's rows with the cross-encoder's three features as if it had read the ``depth``
    best by blend (``cross``: its logits for the :data:`DEEPEST` best)."""
    rows = np.array(record["rows"], float)
    order = np.argsort(-np.array(record["blend"]), kind="stable")[:depth]
    logits = np.array([0.0 if c is None else c for c in cross])
    rows[:, 12:] = 0.0
    rows[order, 12] = 1.0 / (1.0 + np.exp(-logits[order]))
    rows[order, 13] = logits[order] - logits[order].max()
    rows[order, 14] = 1.0
    return rows


def cues(record: dict) -> np.ndarray:
    """The four question-kind x sentence-form features (the sentence without its heading)."""
    kinds = [bool(k.search(record["question"])) for k in QUESTION_KINDS]
    kinds[2] = kinds[2] and not kinds[0]
    out = np.zeros((len(record["texts"]), len(kinds)))
    for i, text in enumerate(record["texts"]):
        colon = text.find(": ")
        body = text[colon + 2:] if 0 <= colon < 80 else text
        out[i] = [k and bool(f.search(body)) for k, f in zip(kinds, SENTENCE_FORMS)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=Path, default=DEVSET / "queries.fit.jsonl")
    ap.add_argument("--depth", type=int, default=30, help="the reader's depth (generation.reader_depth)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "reader-variants.json")
    args = ap.parse_args()
    if "test" in args.queries.name:
        ap.error("the reader is fitted on fit halves; the test halves are for bench/quality/quality.py")
    from ragdx.queryset import load_queries
    n = sum(1 for q in load_queries(args.queries) if q.answerable and q.required)
    rows_path = CACHE / f"rows-{n}.jsonl"
    if not rows_path.is_file():
        ap.error(f"no rows for {n} answerable questions in {CACHE}: run bench/quality/train_reader.py on {args.queries}")
    records = [json.loads(line) for line in rows_path.read_text().splitlines()]
    base = lambda r: with_depth(r, args.depth)  # noqa: E731
    shipped, before = held_out(records, base, logistic)
    result: dict[str, Any] = {"machine": machine(), "code": code_version(), "queries": str(args.queries),
                              "questions": len(records), "depth": args.depth, "reader": shipped}
    table = [("reader as shipped", summary(shipped))]

    from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER, CrossEncoder
    from ragdx.encoders.onnx import packaged_encoder
    bge_model = packaged_encoder("bge-small-en-v1.5", threads=2, batch_size=16)

    def bge_score(question: str, texts: list[str]) -> np.ndarray:
        q = bge_model.encode([question], kind="query").vectors[0]
        return bge_model.encode(texts).vectors @ q

    bge = scored(records, CACHE / f"bge-{args.queries.stem}-{n}-{args.depth}.jsonl", args.depth, bge_score)
    figures, after = cross_validate(records, bge, args.depth, 15)
    result["bge"] = figures | {"first_mcnemar": paired(before, after)}
    table.append(("+ bge-small cosine", summary(figures, result["bge"]["first_mcnemar"])))

    from ragdx.config import load_settings
    cross_model = CrossEncoder(DEFAULT_CROSS_ENCODER, max_tokens=load_settings().generation.reader_max_tokens,
                               threads=2)
    cross = scored(records, CACHE / f"cross-{args.queries.stem}-{n}-{DEEPEST}.jsonl", DEEPEST, cross_model.score)
    for depth in (args.depth, 45, 60, 90, DEEPEST):
        figures, after = held_out(records, lambda r, d=depth: read_deeper(r, cross[r["id"]], d), logistic)
        result[f"cross_read_{depth}"] = figures | {"first_mcnemar": paired(before, after)}
        table.append((f"cross-encoder reads {depth}", summary(figures, result[f"cross_read_{depth}"]["first_mcnemar"])))

    from sklearn.ensemble import HistGradientBoostingClassifier

    def trees(settings: dict) -> Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]:
        def fit(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
            model = HistGradientBoostingClassifier(random_state=0, **settings).fit(x, y)
            return lambda m: model.predict_proba(m)[:, 1]
        return fit

    for k, settings in enumerate(TREES):
        figures, after = held_out(records, base, trees(settings))
        result[f"trees_{k}"] = figures | {"settings": settings, "first_mcnemar": paired(before, after)}
        table.append((f"trees {settings}", summary(figures, result[f"trees_{k}"]["first_mcnemar"])))

    figures, after = held_out(records, lambda r: np.column_stack([base(r), cues(r)]), logistic)
    result["cues"] = figures | {"first_mcnemar": paired(before, after)}
    table.append(("+ question kind x sentence form", summary(figures, result["cues"]["first_mcnemar"])))
    write_result(args.out, result, label_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
