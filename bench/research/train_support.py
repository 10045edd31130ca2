"""A support classifier for paraphrased answers (issue 48): the packaged cross-encoder fine-tuned to
tell a claim its premise states from one it does not, on claims a local instruct model wrote in
its own words and their corruptions.

Reproduce, from the repository root::

    # 1. paraphrases of the manuals' own statements (about 3.5 s each on one core; resumable)
    .venv/bin/python bench/research/train_support.py paraphrase --model qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    # 2. fine-tune, export int8, calibrate on the verdict benchmark's fit half
    .venv/bin/python bench/research/train_support.py train
    # 3. measure it beside the other checkers
    .venv/bin/python bench/quality/verdicts.py --half fit --checker learned --checker classifier

1. **Paraphrases** (``bench/devset/support-llm.jsonl``): pages of Debian's ``postgresql-doc-15``
   and ``python3-doc`` library reference in a fixed shuffled order, never a page of the verdict
   benchmark's halves nor a release note; from each, two statements of 8 to 45 words (no code).
   The model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, joined from its split wheels: docs/benchmarks.md,
   "Verdicts on answers in people's own words") says each in other words, greedy, by one of
   :data:`PROMPTS`. A reply that echoes the prompt, copies the statement or runs over twice its length is
   dropped when training.
2. **Groups**, one for each kept paraphrase: the premise the classifier will read it against
   (of the paragraph it comes from: the statement sharing most of its words, or two joined), the
   paraphrase as the positive; its corruptions by rule (``verdicts.corruptions``: a number, a
   negation, a swapped word or name, a widened scope) and the paraphrase of another statement of
   the page as negatives. The statement itself (as its own premise) against its own corruptions;
   and the writers' claims (``support-train.jsonl``, and the 2,192 sets of ``support-sets.jsonl``:
   each paraphrase against its corruptions and invented sentence). ``--sources`` picks among
   ``llm`` (the model's paraphrases), ``train`` and ``sets``. A page's groups all go to training or
   all to the held-out tenth.
3. **Training** (:func:`ragdx.train.cross.fine_tune`, ``--loss``, default ``pointwise``): the packaged int8
   ms-marco-MiniLM-L-12-v2 dequantised into torch, its lower ``--freeze`` layers frozen, exported
   int8 to ``--out`` (``model.onnx``, ``tokenizer.json``), what ``verify.model`` takes with
   ``verify.method = "classifier"``.
4. **Calibration**: the threshold is the one that calls the most of the fit half's supported
   answers supported while calling at most 10% of its unsupported ones so; it is written in
   ``training.json`` beside the model. The test half is never read here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, machine  # noqa: E402
from quality.verdicts import (DEVSET, HALVES, TRAIN, calibrate, corruptions, lowest_probabilities,  # noqa: E402
                              written_sets)

NEEDS = ("a subcommand: 'paraphrase' (a local GGUF instruct model, --model) or 'train' (the paraphrases it "
         "wrote, and the extras dense, onnx, quantize)")
DOC = Path("/usr/share/doc")
ROOTS = ("postgresql-doc-15/html", "python3-doc/html/library")
PARAPHRASES = DEVSET / "support-llm.jsonl"
OUT = REPO / "bench" / ".cache" / "support" / "model"
#: the instructions the model is given, by name (each row records its own; a row without one is "rewrite")
PROMPTS = {
    "rewrite": ("Rewrite the statement below the way a colleague would say it when answering a question in a chat: "
                "in your own words, shorter if you can, keeping every fact (numbers, names, negations, conditions) "
                "and adding nothing. Change the wording: do not copy runs of more than three words, but keep names "
                "of commands, functions, parameters and options exactly. Reply with the rewritten text only.\n\n"
                "Statement: {s}"),
    # the "rewrite" replies kept a median 88% of the statement's content words, the writers' paraphrases 62%
    "synonyms": ("Say the same thing as the statement below in different words, as a short chat reply. Replace every "
                 "ordinary verb, noun and adjective with a synonym or a rephrasing, and change the sentence structure; "
                 "keep code names, numbers and negations exactly as they mean. Reply with your sentence only.\n\n"
                 "Statement: {s}"),
}
#: a reply's preamble ("Sure, here's the sentence with synonyms: ")
PREAMBLE = re.compile(r"^(?:sure|certainly|here)[^:]{0,80}:\s*", re.IGNORECASE)
#: a reply that repeats the prompt instead of answering it
ECHO = re.compile(r"own words|Statement:|rewrit|colleague", re.IGNORECASE)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path.exists() else []


def pages(seed: int = 48) -> list[str]:
    """The pages read, in order: every page of the two manuals but the benchmark's and the release notes."""
    held = {row["page"] for half in HALVES.values() for row in _lines(half)}
    found = sorted(p.relative_to(DOC).as_posix() for root in ROOTS for p in (DOC / root).glob("*.html"))
    found = [p for p in found if p not in held and "/release" not in p]
    random.Random(seed).shuffle(found)
    return found


def paraphrase(model: Path, out: Path, count: int, per_page: int, threads: int, prompt: str = "synonyms",
               seed: int = 48) -> None:
    """Write paraphrases to ``out`` (appending; statements already there are skipped)."""
    from ragdx.ingest.parse_html import parse_html
    from ragdx.stages.local import LocalChatClient
    from ragdx.text import content_terms, statements
    done = {row["statement"] for row in _lines(out)}
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    client = LocalChatClient(model, threads=threads, context=1024, max_tokens=120)
    rng = random.Random(seed)
    written, started = 0, time.time()
    with out.open("a", encoding="utf-8") as sink:
        for page in pages(seed)[:count]:
            parsed = parse_html((DOC / page).read_text(encoding="utf-8", errors="replace"))
            paragraphs = [parsed.text[b.start:b.end] for b in parsed.blocks if b.kind.value in ("text", "list")]
            said = [(s, para) for para in paragraphs for s in statements(para)
                    if 8 <= len(s.split()) <= 45 and len(content_terms(s)) >= 4 and not re.search(r"[{};]|^\W", s)]
            for statement, para in rng.sample(said, min(per_page, len(said))):
                if statement in done:
                    continue
                text, usage = client.complete([{"role": "user", "content": PROMPTS[prompt].format(s=statement)}])
                text = PREAMBLE.sub("", " ".join(text.split())).strip().strip('"').strip()
                sink.write(json.dumps({"page": page, "premise": para, "statement": statement, "paraphrase": text,
                                       "prompt": prompt, "model": model.name, "model_sha256": sha,
                                       "seconds": round(usage.seconds, 2)}) + "\n")
                sink.flush()
                written += 1
                if written % 20 == 0:
                    print(f"{written} paraphrases in {time.time() - started:.0f} s", file=sys.stderr, flush=True)


def kept(rows: list[dict]) -> list[dict]:
    """The paraphrases trained on: not an echo of the prompt, not the statement, not over twice its length."""
    return [r for r in rows if r["paraphrase"] and not ECHO.search(r["paraphrase"])
            and r["paraphrase"].strip() != r["statement"].strip()
            and len(r["paraphrase"].split()) <= 2 * len(r["statement"].split()) + 5]


def _premise(claim: str, paragraph: str) -> str:
    """What the classifier reads a claim against at inference (:func:`ragdx.stages.support.premises`):
    the two statements joined when the claim has such a premise, else the statement sharing most
    of its words (the paragraph when it has no statement)."""
    from ragdx.stages.support import premises
    found = premises(claim, paragraph)
    pairs = [p for p in found if p.pair]
    return (pairs or found)[0].text if found else paragraph


def groups(rows: list[dict], seed: int = 48, writers: tuple[str, ...] = ("train", "sets")) -> list:
    """The training groups (module docstring, step 2); ``section_id`` is the page. ``rows``: the
    model's paraphrases (none: the writers' sets alone); ``writers``: which written sets, ``train``
    (``support-train.jsonl``) and ``sets`` (``support-sets.jsonl``)."""
    from ragdx.train.pairs import Group
    rng = random.Random(seed)
    by_page: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_page[row["page"]].append(row)
    out = []
    for row in rows:
        others = [o["paraphrase"] for o in by_page[row["page"]] if o["premise"] != row["premise"]] \
            or [rng.choice(rows)["paraphrase"]]
        negatives = [t for t, _ in corruptions(row["paraphrase"], row["premise"], rng)] + [rng.choice(others)]
        premise = _premise(row["paraphrase"], row["premise"])
        out.append(Group(premise, row["paraphrase"], tuple(negatives), "paraphrase", (), row["page"]))
        quoted = [t for t, _ in corruptions(row["statement"], row["premise"], rng)]
        if quoted:
            out.append(Group(row["statement"], row["statement"], tuple(quoted), "quote", (), row["page"]))
    by_claim: dict[str, list[dict]] = defaultdict(list)
    for row in (_lines(TRAIN) if "train" in writers else []) + (written_sets() if "sets" in writers else []):
        by_claim[row["id"].rsplit("-", 1)[0]].append(row)
    for written in by_claim.values():
        good = [r for r in written if r["label"] == 1]
        bad = tuple(r["claim"] for r in written if r["label"] == 0)
        if good and bad:
            premise = _premise(good[0]["claim"], "\n\n".join(good[0]["premise"]))
            out.append(Group(premise, good[0]["claim"], bad, "writer", (), good[0]["page"]))
    return out


def train(args: argparse.Namespace) -> None:
    from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER
    from ragdx.encoders.packaged import resolve
    from ragdx.stages.support import SupportClassifier
    from ragdx.train.cross import dequantise, export, fine_tune, tokenizer_for, write_card
    rows = _lines(args.paraphrases) if "llm" in args.sources.split(",") else []
    chosen = kept(rows)
    every = groups(chosen, args.seed, tuple(args.sources.split(",")))
    held_pages = set(sorted({g.section_id for g in every})[::10])
    trained_on = [g for g in every if g.section_id not in held_pages]
    held = [g for g in every if g.section_id in held_pages]
    print(f"{len(chosen)} of {len(rows)} paraphrases kept; {len(trained_on)} groups to train on, "
          f"{len(held)} held out", file=sys.stderr)
    files = resolve(DEFAULT_CROSS_ENCODER, kind="cross-encoder", what="train_support")
    model = dequantise(files.onnx)
    tokenizer = tokenizer_for(files.tokenizer, args.max_tokens)
    result = fine_tune(model, tokenizer, trained_on, epochs=args.epochs, batch_groups=8, lr=args.lr,
                       freeze_below=args.freeze, loss=args.loss, threads=args.threads, seed=args.seed,
                       log=lambda m: print(m, file=sys.stderr, flush=True))
    export(model, files.tokenizer, args.out)
    judge = SupportClassifier(args.out, threshold=0.5)
    held_right = [judge.logit(g.positive, g.query) > max(judge.logit(n, g.query) for n in g.negatives) for g in held]
    threshold = calibrate(lowest_probabilities(judge, "fit"))
    card = {"start": f"{files.model_id}, int8 ONNX dequantised", "paraphrases": str(args.paraphrases),
            "paraphrases_kept": len(chosen), "sources": args.sources, "groups": len(trained_on),
            "held_out_groups": len(held),
            "held_out_positive_first": round(sum(held_right) / max(1, len(held_right)), 4),
            "epochs": args.epochs, "lr": args.lr, "freeze_below": args.freeze, "max_tokens": args.max_tokens,
            "loss": args.loss, "steps": result.steps, "seconds": result.seconds, "losses": list(result.losses),
            "threshold": threshold, "threshold_on": "bench/devset/verdicts.fit.jsonl, at most 10% of unsupported "
            "answers called supported", "code": code_version(), "machine": machine(),
            "command": " ".join([".venv/bin/python", "bench/research/train_support.py", *sys.argv[1:]])}
    write_card(args.out, card)
    print(json.dumps({k: card[k] for k in ("paraphrases_kept", "groups", "held_out_positive_first", "steps",
                                           "seconds", "threshold")}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("paraphrase", help="write paraphrases with a local GGUF instruct model")
    p.add_argument("--model", type=Path, required=True, help="the .gguf file")
    p.add_argument("--out", type=Path, default=PARAPHRASES)
    p.add_argument("--pages", type=int, default=900)
    p.add_argument("--per-page", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prompt", default="synonyms", choices=sorted(PROMPTS))
    t = sub.add_parser("train", help="fine-tune, export and calibrate the classifier")
    t.add_argument("--paraphrases", type=Path, default=PARAPHRASES)
    t.add_argument("--sources", default="llm,train,sets",
                   help="what to train on, comma-separated: llm (--paraphrases), train (support-train.jsonl), "
                        "sets (support-sets.jsonl)")
    t.add_argument("--out", type=Path, default=OUT)
    t.add_argument("--epochs", type=float, default=2.0)
    t.add_argument("--lr", type=float, default=3e-5)
    t.add_argument("--freeze", type=int, default=6)
    t.add_argument("--max-tokens", type=int, default=256)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--seed", type=int, default=48)
    t.add_argument("--loss", default="pointwise", choices=["pointwise", "listwise"])
    args = parser.parse_args()
    if args.command == "paraphrase":
        paraphrase(args.model, args.out, args.pages, args.per_page, args.threads, args.prompt)
    else:
        train(args)


if __name__ == "__main__":
    main()
