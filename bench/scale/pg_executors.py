"""ragdx's batch work on worker processes, on this machine.

``overhead`` (Ray against Dask, how the executor was chosen): a local cluster of two workers, its
start-up time, the round trip of 200 tiny tasks, and 16 embedding batches of 64 chunks (the
hashing encoder, so the figure is the executor's overhead, not a model's).

``speedup`` (what ``--executor`` buys): on the dev set's store (bench/.cache/devset, 96,206
chunks) with the int8 encoder of bench/quality/quality.py, the result cache off,

- ``ragdx run`` on the first QUERIES questions of the test half, in this process and with
  ``--executor local:1``, ``local:2`` and ``dask`` (a local cluster of two workers): wall seconds
  of the whole command (start-up and model loads included) and whether each diagnosis.jsonl
  equals the in-process run's;
- embedding CHUNKS of the dev set's chunk texts with :class:`ragdx.executors.ParallelEncoder`
  (what ``ragdx ingest --executor`` does) on the same executors, against one process, with the
  vectors compared.

Reproduce (results in bench/results/executors.json; the machine has 2 cores, shared)::

    .venv/bin/python bench/scale/pg_executors.py overhead            # dask and ray
    nice -n 10 .venv/bin/python bench/scale/pg_executors.py speedup --queries 48 --chunks 3000
"""

from __future__ import annotations

import argparse
import functools
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, INT8, REPO, code_version, machine, write_result  # noqa: E402

EXECUTORS = [None, "local:1", "local:2", "dask"]


def square(x: int) -> int:
    return x * x


def embed(batch: list[str]) -> int:
    from ragdx.testing.encoders import HashingEncoder
    return len(HashingEncoder(dim=384).encode(batch).vectors)


def measure(name: str, start, submit_all, stop) -> dict:
    t = time.perf_counter()
    client = start()
    started = time.perf_counter() - t
    t = time.perf_counter()
    assert submit_all(client, square, list(range(200))) == [x * x for x in range(200)]
    tiny = time.perf_counter() - t
    batches = [[f"chunk {i} of batch {b} about refunds" for i in range(64)] for b in range(16)]
    t = time.perf_counter()
    assert sum(submit_all(client, embed, batches)) == 1024
    embedding = time.perf_counter() - t
    stop(client)
    return {"executor": name, "start_s": round(started, 2), "tasks_200_s": round(tiny, 3),
            "embed_16x64_s": round(embedding, 3)}


def dask() -> dict:
    from dask.distributed import Client, LocalCluster

    def start():
        return Client(LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                   dashboard_address=None, host="127.0.0.1"))
    return measure("dask", start, lambda c, f, xs: c.gather(c.map(f, xs, pure=False)),
                   lambda c: (c.close(), c.cluster.close()))


def ray() -> dict:
    import ray as ray_

    def start():
        ray_.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        return ray_

    def submit_all(r, f, xs):
        remote = r.remote(f)
        return r.get([remote.remote(x) for x in xs])
    return measure("ray", start, submit_all, lambda r: r.shutdown())


# -- what --executor buys ----------------------------------------------------------------------
SETTINGS = ["retrieval.dense.backend=onnx", f"retrieval.dense.model={INT8}", "cache.enabled=false"]


def _run(executor: str | None, queries: Path, out: Path) -> dict:
    sets = [x for s in SETTINGS for x in ("--set", s)]
    command = [sys.executable, "-m", "ragdx.cli", "run", "--store", str(DEVSET / "store.db"), "--queries",
               str(queries), "--out", str(out), "-q", *sets, *(["--executor", executor] if executor else [])]
    t = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return {"executor": executor or "in-process", "wall_s": round(seconds, 1)}


def _embed(executor_spec: str | None, texts: list[str]) -> tuple[dict, object]:
    from ragdx.build import build_encoder
    from ragdx.config import load_settings
    from ragdx.executors import ParallelEncoder, executor_for
    dense = load_settings(overrides=SETTINGS).retrieval.dense
    factory = functools.partial(build_encoder, dense)
    t = time.perf_counter()
    if executor_spec is None:
        encoder = factory()
        encoder.encode(["warm up"])
        vectors = encoder.encode(texts).vectors
        return {"executor": "in-process", "wall_s": round(time.perf_counter() - t, 1)}, vectors
    with executor_for(executor_spec) as executor:
        started = time.perf_counter() - t
        encoder = ParallelEncoder(executor, factory, batch=128)
        vectors = encoder.encode(texts).vectors
    return {"executor": executor_spec, "wall_s": round(time.perf_counter() - t, 1),
            "start_s": round(started, 1)}, vectors


def speedup(n_queries: int, n_chunks: int, out: Path) -> None:
    """The run folders go to a temporary folder, removed at the end."""
    with tempfile.TemporaryDirectory(prefix="ragdx-executors-") as where:
        _speedup(n_queries, n_chunks, out, Path(where))


def _speedup(n_queries: int, n_chunks: int, out: Path, work: Path) -> None:
    import numpy as np
    queries = work / "queries.jsonl"
    queries.write_text("".join((DEVSET / "queries.test.jsonl").read_text().splitlines(keepends=True)[:n_queries]))
    runs, first = [], None
    for spec in EXECUTORS:
        folder = work / f"run-{spec or 'here'}".replace(":", "")
        row = _run(spec, queries, folder)
        diagnoses = (folder / "diagnosis.jsonl").read_text()
        first = diagnoses if first is None else first
        row["same_diagnoses"] = diagnoses == first
        runs.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    con = sqlite3.connect(f"file:{DEVSET / 'store.db'}?mode=ro", uri=True)
    texts = [t for (t,) in con.execute("SELECT text FROM chunks ORDER BY rowid LIMIT ?", (n_chunks,))]
    con.close()
    embeds, base = [], None
    for spec in EXECUTORS:
        row, vectors = _embed(spec, texts)
        base = vectors if base is None else base
        row["max_abs_diff"] = float(np.abs(vectors - base).max())
        embeds.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    for rows in (runs, embeds):
        for row in rows:
            row["speedup"] = round(rows[0]["wall_s"] / row["wall_s"], 2)
    result = {"benchmark": "executors", "command": " ".join(sys.argv), "machine": machine(), "code": code_version(),
              "store": str(DEVSET / "store.db"), "encoder": str(INT8.relative_to(REPO)),
              "run": {"queries": n_queries, "rows": runs}, "embedding": {"chunks": len(texts), "rows": embeds}}
    table = "\n".join([f"ragdx run, {n_queries} dev-set questions:"] +
                      [f"  {r['executor']:<11} {r['wall_s']:>7.1f} s  x{r['speedup']:.2f}  same diagnoses: "
                       f"{r['same_diagnoses']}" for r in runs] +
                      [f"embedding {len(texts)} chunks:"] +
                      [f"  {r['executor']:<11} {r['wall_s']:>7.1f} s  x{r['speedup']:.2f}  max |diff| "
                       f"{r['max_abs_diff']:.2g}" for r in embeds])
    write_result(out, result, table)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="*", default=["dask", "ray"], help="overhead: dask, ray; or speedup")
    ap.add_argument("--queries", type=int, default=48)
    ap.add_argument("--chunks", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "executors.json")
    args = ap.parse_args()
    if args.what == ["speedup"]:
        speedup(args.queries, args.chunks, args.out)
    else:
        for name in ["dask", "ray"] if args.what == ["overhead"] else args.what:
            print(json.dumps({"dask": dask, "ray": ray}[name]()))
