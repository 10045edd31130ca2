"""Ray against Dask for ragdx's batch work, on this machine: a local cluster of two workers,
its start-up time, the round trip of 200 tiny tasks, and 16 embedding batches of 64 chunks
(the hashing encoder, so the figure is the executor's overhead, not a model's).

    .venv/bin/python bench/pg_executors.py
"""

from __future__ import annotations

import json
import sys
import time


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


if __name__ == "__main__":
    which = sys.argv[1:] or ["dask", "ray"]
    for name in which:
        print(json.dumps({"dask": dask, "ray": ray}[name]()))
