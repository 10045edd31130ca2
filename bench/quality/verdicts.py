"""Verdicts on answers written in people's own words: the support judgement against a careful reader.

The benchmark (``bench/devset/verdicts.{fit,test}.jsonl``): questions about pages of the
PostgreSQL 15 manual and the Python 3.11 library reference (Debian's ``postgresql-doc-15`` and
``python3-doc``), each with an answer written the way LLMs answer (terse, paraphrased, often
opening "Yes." or "No."; a quarter need two passages) and the same answer with one corrupting edit
(a number, a negation, a swapped name or word, a widened scope). Its contexts are the paragraphs
holding the evidence and two other paragraphs of the same page, in page order, as a RAGAS row's
``retrieved_contexts``. Every answer was judged by its writer as a careful reader: the answer
supported, the corrupted one not. The halves are split by page (no page in both).

Each answer goes through what ``ragdx diagnose`` does with an imported answer that carries no
verdicts (:meth:`ragdx.diagnosis.locate.Diagnoser.check_answer`): it is cut into claims, and each
claim is checked against the contexts. An answer is called supported when every claim is.

Reproduce, from the repository root::

    .venv/bin/python bench/quality/verdicts.py                 # measure every checker on the test half
    .venv/bin/python bench/quality/verdicts.py --half fit      # ... on the fit half
    .venv/bin/python bench/quality/verdicts.py fit             # refit src/ragdx/stages/support.json
    .venv/bin/python bench/quality/verdicts.py build --written DIR   # rebuild the halves from the writers' files

``fit`` reads the fit half and ``bench/devset/support-train.jsonl`` (claims written apart from
the benchmark, on other pages: each a paraphrase, a corruption and an invented sentence on the
same subject, against the paragraph they come from). The test half is never fitted on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, machine, write_result  # noqa: E402

DEVSET = REPO / "bench" / "devset"
HALVES = {"fit": DEVSET / "verdicts.fit.jsonl", "test": DEVSET / "verdicts.test.jsonl"}
TRAIN = DEVSET / "support-train.jsonl"
#: claim sets written by hand on other pages (stop 60): a premise and six claims on it (``claims``, by kind):
#: a paraphrase, four one-edit corruptions of it and an invented sentence; :func:`written_sets` reads them as TRAIN
SETS = DEVSET / "support-sets.jsonl"
SET_KINDS = ("paraphrase", "number", "negation", "swap", "scope", "invented")
OUT = REPO / "bench" / "results" / "verdicts.json"
KINDS = ("number", "negation", "swap", "scope")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def written_sets(path: Path = SETS) -> list[dict]:
    """The written claim sets as rows of ``support-train.jsonl``: one a claim, ``id`` the set's
    and the kind's, ``label`` 1 for the paraphrase and 0 for the rest."""
    return [{"id": f"{s['id']}-{kind}", "page": s["page"], "premise": s["premise"], "claim": s["claims"][kind],
             "label": int(kind == "paraphrase"), "kind": kind}
            for s in _rows(path) for kind in SET_KINDS if kind in s["claims"]]


# --- build: the writers' files -> the committed halves ---------------------------------------

def build(written: Path) -> None:
    """The halves and the training pairs from the writers' files (``out-*.jsonl``: benchmark
    items; ``train-*.jsonl``: training claims; ``in-*.jsonl``: the pages they were given)."""
    pages: dict[str, dict[str, str]] = {}
    for f in sorted(written.glob("in-*.jsonl")):
        for row in _rows(f):
            pages[row["page"]] = row["paragraphs"]
    fit, test = [], []
    for f in sorted(written.glob("out-*.jsonl")):
        for item in _rows(f):
            paras = pages[item["page"]]
            keys = sorted(set(item["evidence"]) | set(item["distractors"]), key=int)
            contexts = [paras[k] for k in keys]
            base = {"page": item["page"], "user_input": item["question"], "retrieved_contexts": contexts,
                    "evidence": [keys.index(k) for k in item["evidence"]], "two_passages": item["two_passages"]}
            half = fit if int(hashlib.sha256(item["page"].encode()).hexdigest(), 16) % 2 == 0 else test
            half.append({"id": item["id"], **base, "response": item["answer"], "judged": "supported",
                         "kind": "paraphrase"})
            half.append({"id": item["id"] + "-x", **base, "response": item["corrupted"], "judged": "unsupported",
                         "kind": item["kind"]})
    for name, rows in (("fit", fit), ("test", test)):
        HALVES[name].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"{name}: {len(rows)} answers", file=sys.stderr)
    train = []
    for f in sorted(written.glob("train-*.jsonl")):
        for item in _rows(f):
            paras = pages[item["page"]]
            premise = [paras[k] for k in item["premise"]]
            for text, label, kind in ((item["claim"], 1, "paraphrase"), (item["corrupted"], 0, item["kind"]),
                                      (item["hard_negative"], 0, "invented")):
                train.append({"id": f"{item['id']}-{kind}", "page": item["page"], "premise": premise,
                              "claim": text, "label": label, "kind": kind})
    TRAIN.write_text("".join(json.dumps(r) + "\n" for r in train), encoding="utf-8")
    print(f"training claims: {len(train)}", file=sys.stderr)


# --- the checkers ----------------------------------------------------------------------------

def checkers(names: list[str], llm: Path | None = None, threshold: float = 0.5,
             classifier: Path | None = None) -> dict[str, object]:
    """The checkers by name, as ``verify.method`` builds them (:func:`ragdx.build.support_checker`):
    ``lexical``, ``learned`` (the default), ``classifier`` (a support classifier's folder,
    ``classifier``, at its calibrated threshold), ``llm`` (a local GGUF model, ``llm``, judging at
    ``threshold``)."""
    from ragdx.build import support_checker
    from ragdx.config import load_settings
    model = {"classifier": classifier, "llm": llm}
    out: dict[str, object] = {}
    for name in names:
        if name in model and model[name] is None:
            raise SystemExit(f"--checker {name} needs {'--support-model DIR' if name == 'classifier' else '--llm-model FILE.gguf'}")
        settings = [f"verify.method={name}", f"verify.threshold={threshold}"]
        out[name] = support_checker(load_settings(overrides=settings + ([f"verify.model={model[name]}"]
                                                                           if model.get(name) else [])))
    return out


def judge_answers(rows: list[dict], checker) -> list[dict]:
    """Each answer's claims as ``ragdx diagnose`` checks an imported answer, with the seconds."""
    from ragdx.diagnosis.locate import AnswerView, Diagnoser, ItemView, StageView
    from ragdx.types import StageKind
    diagnoser = Diagnoser(checker)
    out = []
    for row in rows:
        context = StageView("contexts", StageKind.CONTEXT, tuple(
            ItemView(f"c{n}", text=t) for n, t in enumerate(row["retrieved_contexts"])))
        started = time.perf_counter()
        checked, _ = diagnoser.check_answer(AnswerView(row["response"], False, ()), context)
        seconds = time.perf_counter() - started
        claims = checked.claims if checked is not None else ()
        out.append({"id": row["id"], "judged": row["judged"], "kind": row["kind"],
                    "called": "supported" if claims and all(c.supported for c in claims) else "unsupported",
                    "claims": len(claims), "seconds": seconds,
                    "reasons": [c.reason for c in claims if not c.supported]})
    return out


def figures(results: list[dict]) -> dict[str, object]:
    good = [r for r in results if r["judged"] == "supported"]
    bad = [r for r in results if r["judged"] == "unsupported"]
    called = [r for r in results if r["called"] == "supported"]
    true_pos = sum(r["called"] == "supported" for r in good)
    per_claim = [r["seconds"] / r["claims"] for r in results if r["claims"]]
    return {
        "answers": len(results),
        "agreement": sum(r["called"] == r["judged"] for r in results) / len(results),
        "supported_called_supported": true_pos / len(good),
        "unsupported_called_supported": sum(r["called"] == "supported" for r in bad) / len(bad),
        "precision_supported": true_pos / len(called) if called else 0.0,
        "recall_supported": true_pos / len(good),
        "caught": {k: sum(r["called"] == "unsupported" for r in bad if r["kind"] == k)
                   / max(1, sum(r["kind"] == k for r in bad)) for k in KINDS},
        "claim_ms_p50": 1000 * statistics.median(per_claim),
        "claim_ms_p90": 1000 * float(np.percentile(per_claim, 90)),
    }


def measure(half: str, names: list[str], llm: Path | None = None, threshold: float = 0.5,
            classifier: Path | None = None) -> None:
    rows = _rows(HALVES[half])
    result: dict[str, object] = {"half": half, "machine": machine(), "code": code_version(), "checkers": {}}
    lines = [f"{'checker':<14} {'agree':>6} {'sup->sup':>8} {'uns->sup':>8} {'prec':>6} "
             + " ".join(f"{k:>8}" for k in KINDS) + f" {'ms p50':>7}"]
    for name, checker in checkers(names, llm, threshold, classifier).items():
        judge_answers(rows[:1], checker)  # loads the model
        checker_results = judge_answers(rows, checker)
        if name == "llm":
            result["llm_model"] = str(llm)
            if half == "fit":  # calibrate: the most supported answers at most 10% of unsupported ones called so
                seconds = {r["id"]: r["seconds"] for r in checker_results}  # the model's; the sweep reads its cache
                sweep = []
                for t in np.arange(0.05, 0.995, 0.005):
                    checker.threshold = round(float(t), 3)
                    f = figures(judge_answers(rows, checker))
                    sweep.append((f["unsupported_called_supported"] <= 0.10, f["supported_called_supported"],
                                  checker.threshold))
                checker.threshold = max(sweep)[2]
                checker_results = [r | {"seconds": seconds[r["id"]]} for r in judge_answers(rows, checker)]
            result["llm_threshold"] = round(float(checker.threshold), 3)
        if name == "classifier":
            result["classifier"] = {"folder": str(classifier), "threshold": checker.model.threshold}
        f = figures(checker_results)
        result["checkers"][name] = f | {"missed": [
            {"id": r["id"], "judged": r["judged"], "reasons": r["reasons"]}
            for r in checker_results if r["called"] != r["judged"]]}
        lines.append(f"{name:<14} {f['agreement']:>6.1%} {f['supported_called_supported']:>8.1%} "
                     f"{f['unsupported_called_supported']:>8.1%} {f['precision_supported']:>6.1%} "
                     + " ".join(f"{f['caught'][k]:>8.1%}" for k in KINDS) + f" {f['claim_ms_p50']:>7.1f}")
    parts = ["verdicts"] + ([half] if half != "test" else []) + ([names[0]] if names in (["llm"], ["classifier"]) else [])
    out = OUT.with_name("-".join(parts) + ".json")
    write_result(out, result, "\n".join(lines))


# --- fit -------------------------------------------------------------------------------------

def training_claims(sources: tuple[str, ...] = ("fit", "train", "rules")) -> list[tuple[str, str, int]]:
    """(claim, evidence, label) for fitting, from ``sources``: ``fit``, the fit half's claims (a
    supported answer's every claim; a corrupted answer's claims that the edit changed); ``train``,
    the training claims; ``rules``, claims made by rule from the training claims' paragraphs."""
    from ragdx.diagnosis.locate import answer_claims
    out = []
    rows = _rows(HALVES["fit"]) if "fit" in sources else []
    by_id = {r["id"]: r for r in rows}
    for row in rows:
        evidence = "\n\n".join(row["retrieved_contexts"])
        claims = answer_claims(row["response"])
        if row["judged"] == "supported":
            out += [(c, evidence, 1) for c in claims]
        else:
            kept = set(answer_claims(by_id[row["id"][:-2]]["response"]))
            out += [(c, evidence, 0) for c in claims if c not in kept]
    train = (_rows(TRAIN) if "train" in sources else []) + (written_sets() if "sets" in sources else [])
    out += [(row["claim"], "\n\n".join(row["premise"]), row["label"]) for row in train]
    return out + (rule_claims(train) if "rules" in sources else [])


_FLIPS = ((" is ", " is not "), (" are ", " are not "), (" can ", " cannot "), (" must ", " must not "),
          (" will ", " will not "), (" does not ", " does "), (" do not ", " do "), (" is not ", " is "),
          (" cannot ", " can "), (" are not ", " are "), (" isn't ", " is "), (" doesn't ", " does "),
          (" don't ", " do "), (" can't ", " can "), (" won't ", " will "), (" should ", " should not "),
          (" may ", " may not "), (" has ", " has no "), (" never ", " always "), (" no ", " a "))
_WIDEN = ((" only ", " "), (" some ", " all "), (" may ", " will "), (" can ", " always "), (" usually ", " always "),
          (" often ", " always "), (" most ", " all "), (" might ", " will "), (" certain ", " all "))


def corruptions(claim: str, premise: str, rng) -> list[tuple[str, str]]:
    """A claim corrupted by rule, once by each rule that applies: a number changed (``number``),
    a negation added or removed (``negation``), a word swapped for its opposite or a name for
    another name of the premise's page (``swap``), a qualifier widened or dropped (``scope``)."""
    from ragdx.stages.support import _NAME, _OPPOSITES
    out = []
    numbers = list(re.finditer(r"(?<![\w.])(\d+)(?![\w]*\d)", claim))
    if numbers:
        m = rng.choice(numbers)
        n = int(m.group())
        out.append((claim[:m.start()] + str(rng.choice([n + 1, n * 2, max(0, n - 1), n * 10]) if n else 1)
                    + claim[m.end():], "number"))
    padded = f" {claim} "
    flips = [(a, b) for a, b in _FLIPS if a in padded]
    if flips:
        a, b = rng.choice(flips)
        out.append((padded.replace(a, b, 1).strip(), "negation"))
    words = {w.lower(): w for w in re.findall(r"[A-Za-z]+", claim)}
    swaps = [(w, b if w == a else a) for a, b in _OPPOSITES for w in (a, b) if w in words]
    names = [m.group() for m in _NAME.finditer(claim) if len(m.group()) > 3]
    others = sorted({m.group() for m in _NAME.finditer(premise) if len(m.group()) > 3} - set(names))
    if swaps and (not names or not others or rng.random() < 0.5):
        w, other = rng.choice(swaps)
        written = words[w]
        other = other.upper() if written.isupper() else other.title() if written[0].isupper() else other
        out.append((re.sub(rf"\b{re.escape(written)}\b", other, claim, count=1), "swap"))
    elif names and others:
        name = rng.choice(names)
        out.append((claim.replace(name, rng.choice(others), 1), "swap"))
    widen = [(a, b) for a, b in _WIDEN if a in padded]
    if widen:
        a, b = rng.choice(widen)
        out.append((" ".join(padded.replace(a, b, 1).split()), "scope"))
    return [(text, kind) for text, kind in out if text != claim]


def rule_claims(train: list[dict], seed: int = 48) -> list[tuple[str, str, int]]:
    """Claims made by rule from the training claims: each written claim corrupted by every rule
    that applies (:func:`corruptions`), and one sentence of each premise quoted (supported) and
    corrupted the same way."""
    import random

    from ragdx.text import statements
    rng = random.Random(seed)
    out = []
    for row in train:
        if row["label"] == 1:
            premise = "\n\n".join(row["premise"])
            out += [(text, premise, 0) for text, _ in corruptions(row["claim"], premise, rng)]
    for premise in sorted({"\n\n".join(row["premise"]) for row in train}):
        said = [s for s in statements(premise) if 8 <= len(s.split()) <= 40]
        if said:
            s = rng.choice(said)
            out += [(s, premise, 1)] + [(text, premise, 0) for text, _ in corruptions(s, premise, rng)]
    return out


def lowest_probabilities(judge, half: str) -> list[tuple[float, str]]:
    """Each answer of a half: its lowest claim probability by ``judge`` (a claim's: its best
    premise's; an answer is called supported from it on), and the reader's judgement."""
    from ragdx.diagnosis.locate import answer_claims
    out = []
    for row in _rows(HALVES[half]):
        evidence = "\n\n".join(row["retrieved_contexts"])
        probabilities = [judge.probability(c, evidence)[0] for c in answer_claims(row["response"])]
        out.append((min(probabilities) if probabilities else 0.0, row["judged"]))
    return out


def calibrate(scored: list[tuple[float, str]], most_unsupported: float = 0.10) -> float:
    """The threshold calling the most supported answers supported among those calling at most
    ``most_unsupported`` of the unsupported ones so (the higher on a tie)."""
    grid = sorted({round(p, 4) for p, _ in scored} | {0.5})
    return max((t for t in grid if np.mean([p >= t for p, j in scored if j == "unsupported"]) <= most_unsupported),
               key=lambda t: (np.mean([p >= t for p, j in scored if j == "supported"]), t))


def fit(l2: float = 10.0, rounds: int = 4, sources: tuple[str, ...] = ("train", "rules"),
        most_unsupported: float = 0.10, only: tuple[str, ...] = ()) -> None:
    """Fit the judgement by multiple-instance logistic regression: each claim is one row, its
    best premise's (by the words at first, then by the previous round's fit; Andrews et al.,
    "Support Vector Machines for Multiple-Instance Learning", NIPS 2002). The threshold is set on
    the fit half's answers: the most supported answers called supported among thresholds that
    call at most ``most_unsupported`` of its unsupported answers supported; ``uncertain`` is half
    the threshold. ``only``: the features read (default every one of ``FEATURES``)."""
    from ragdx.stages.reader import fit_standardised
    from ragdx.stages.support import FEATURES, SUPPORT_FILE, SupportModel, SupportWeights
    model = SupportModel(SupportWeights(FEATURES, (0.0,) * len(FEATURES), (1.0,) * len(FEATURES),
                                        (0.0,) * len(FEATURES), 0.0))
    table = [(rows, label) for rows, label in ((model.rows(c, e)[1], label) for c, e, label in training_claims(sources))
             if len(rows)]
    print(f"fitting on {len(table)} claims ({sum(label for _, label in table)} supported)", file=sys.stderr)
    read = tuple(only) or FEATURES
    columns = [FEATURES.index(f) for f in read]
    pick = [int(np.argmax(rows[:, FEATURES.index("cover")])) for rows, _ in table]
    for _ in range(rounds):
        x = np.vstack([rows[[k]] for (rows, _), k in zip(table, pick)])[:, columns]
        y = np.array([float(label) for _, label in table])
        mean, scale, w = fit_standardised(x, y, l2)
        weights = SupportWeights(read, tuple(map(float, mean)), tuple(map(float, scale)),
                                 tuple(map(float, w[1:])), float(w[0]))
        pick = [int(np.argmax(weights.probabilities(rows))) for rows, _ in table]
    best = calibrate(lowest_probabilities(SupportModel(weights), "fit"), most_unsupported)
    weights = SupportWeights(weights.features, weights.mean, weights.scale, weights.coef, weights.intercept,
                             float(best), float(best) / 2)
    SUPPORT_FILE.write_text(json.dumps({
        "fitted_by": "bench/quality/verdicts.py fit", "sources": list(sources), "claims": len(table), "l2": l2,
        "threshold_on": f"bench/devset/verdicts.fit.jsonl, at most {most_unsupported:.0%} of unsupported answers "
                        "called supported", "judgement": weights.to_dict()}, indent=1) + "\n", encoding="utf-8")
    print(f"threshold {best:.4f}; wrote {SUPPORT_FILE}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="measure", choices=["measure", "fit", "build"])
    parser.add_argument("--half", default="test", choices=sorted(HALVES))
    parser.add_argument("--checker", action="append", choices=["lexical", "learned", "classifier", "llm"])
    parser.add_argument("--support-model", type=Path, help="--checker classifier: the classifier's folder")
    parser.add_argument("--llm-model", type=Path, help="--checker llm: a GGUF chat model file")
    parser.add_argument("--llm-threshold", type=float, default=0.5,
                        help="--checker llm on the test half: the P(yes) the fit half calibrated")
    parser.add_argument("--written", type=Path, help="build: the folder of the writers' files")
    parser.add_argument("--l2", type=float, default=10.0)
    parser.add_argument("--sources", default="train,rules", help="fit: what to fit on (fit, train, rules)")
    parser.add_argument("--features", default="", help="fit: the features read, comma-separated (default all)")
    args = parser.parse_args()
    if args.command == "build":
        build(args.written)
    elif args.command == "fit":
        fit(args.l2, sources=tuple(args.sources.split(",")), only=tuple(f for f in args.features.split(",") if f))
    else:
        measure(args.half, args.checker or ["lexical", "learned"], args.llm_model, args.llm_threshold,
                args.support_model)


if __name__ == "__main__":
    main()
