"""Batch work spread over processes or a cluster: embedding a large corpus, running a large query
set, and running an ablation grid.

An :class:`Executor` maps a picklable function over items and returns the results in order.
:class:`LocalExecutor` is a process pool on this machine (the default); :class:`DaskExecutor`
runs on a Dask cluster (extra ``dask``): a local one of ``n`` worker processes, or an existing
scheduler's address. Dask was chosen over Ray after measuring both here (docs/benchmarks.md,
``bench/pg_executors.py``): a two-worker local cluster starts in 2.3 s against Ray's 8.3 s, the
per-task overhead is alike, and the install is a tenth of Ray's size.

Workers rebuild what they need from cheap, picklable descriptions and keep it for the life of
the process: an encoder from its factory, a store from its location (a file path or a
``postgresql://`` DSN), a pipeline from its settings. A file store must be on a disk every
worker sees; a PostgreSQL store is reached over the network, which is what a cluster needs.
"""

from __future__ import annotations

import os
import pickle
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

from ragdx.errors import ConfigError, MissingExtraError
from ragdx.protocols import Encoder, TextKind
from ragdx.types import EmbeddingSpace, Encoding, Query

__all__ = ["Executor", "LocalExecutor", "DaskExecutor", "executor_for", "ParallelEncoder",
           "run_queries", "run_grid"]

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Executor(Protocol):
    """Maps a picklable function over items, results in the items' order."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """A pool of ``workers`` processes on this machine (default: one per core)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers)
        return list(self._pool.map(fn, items))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DaskExecutor:
    """Tasks on a Dask cluster (extra ``dask``).

    Args:
        address: a running scheduler (``tcp://host:8786``), or None for a local cluster.
        workers: the local cluster's worker processes (one thread each).
    """

    def __init__(self, address: str | None = None, *, workers: int = 2) -> None:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise MissingExtraError("dask", "running batch work on a Dask cluster") from None
        if address is None:
            self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                         dashboard_address=None, host="127.0.0.1")
            self.client = Client(self._cluster)
        else:
            self._cluster = None
            self.client = Client(address)

    @property
    def workers(self) -> int:
        return len(self.client.scheduler_info()["workers"])

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if not items:
            return []
        return self.client.gather(self.client.map(fn, list(items), pure=False))

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> "DaskExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def executor_for(spec: str) -> Executor:
    """An executor from a short spec: ``local``, ``local:4``, ``dask`` (a local cluster of two
    workers), ``dask:4``, or ``dask:tcp://host:8786``.

    Raises:
        ConfigError: naming the bad spec and the valid forms.
    """
    kind, _, arg = spec.partition(":")
    count = int(arg) if arg.isdigit() else None
    if kind == "local" and (not arg or count):
        return LocalExecutor(count)
    if kind == "dask" and arg.startswith(("tcp://", "tls://")):
        return DaskExecutor(arg)
    if kind == "dask" and (not arg or count):
        return DaskExecutor(workers=count or 2)
    raise ConfigError(f"executor {spec!r} is not one of: local, local:N, dask, dask:N, dask:tcp://HOST:PORT")


# -- what workers keep for the life of their process ------------------------------------------
_KEPT: dict[bytes, Any] = {}


def _kept(key: Any, build: Callable[[], Any]) -> Any:
    token = pickle.dumps(key)
    if token not in _KEPT:
        _KEPT[token] = build()
    return _KEPT[token]


# -- embedding -------------------------------------------------------------------------------
def _encode_batch(job: tuple[Callable[[], Encoder], list[str], str]) -> Encoding:
    factory, texts, kind = job
    return _kept(("encoder", factory), factory).encode(texts, kind=kind)


class ParallelEncoder:
    """An :class:`~ragdx.protocols.Encoder` that encodes large inputs in batches on an executor
    (each worker builds the encoder once from ``factory``): hand it to an
    :class:`~ragdx.ingest.embed.Embedder` to embed a corpus at ingest or with ``index build``.

    Args:
        executor: where batches run.
        factory: a picklable callable returning the encoder (``functools.partial(build_encoder,
            settings.retrieval.dense)``, say).
        batch: texts per task.
    """

    def __init__(self, executor: Executor, factory: Callable[[], Encoder], *, batch: int = 256) -> None:
        self.executor, self.factory, self.batch = executor, factory, batch
        self._local = factory()

    @property
    def space(self) -> EmbeddingSpace:
        return self._local.space

    @property
    def name(self) -> str:
        return self._local.name

    def count(self, text: str) -> int:
        return self._local.count(text)

    def encode(self, texts: Sequence[str], *, kind: TextKind = "passage") -> Encoding:
        import numpy as np
        texts = list(texts)
        if len(texts) <= self.batch:
            return self._local.encode(texts, kind=kind)
        parts = self.executor.map(_encode_batch, [(self.factory, texts[i:i + self.batch], kind)
                                                  for i in range(0, len(texts), self.batch)])
        return Encoding(self.space, np.concatenate([p.vectors for p in parts]),
                        tuple(end for p in parts for end in p.window_ends))


# -- query sets and ablation grids ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Job:
    store: str
    overrides: tuple[str, ...]
    encoder: Callable[[], Encoder] | None
    queries: tuple[Query, ...]


def _pipeline(store: str, overrides: tuple[str, ...], encoder: Callable[[], Encoder] | None) -> Any:
    from ragdx.build import build_pipeline, open_store
    from ragdx.config import load_settings
    opened = _kept(("store", store), lambda: open_store(store, "read"))
    return _kept(("pipeline", store, overrides, encoder), lambda: build_pipeline(
        opened, load_settings(overrides=list(overrides)), encoder=encoder() if encoder else None))


def _run_job(job: _Job) -> list[Any]:
    pipeline = _pipeline(job.store, job.overrides, job.encoder)
    return [pipeline.run(query) for query in job.queries]


def run_grid(executor: Executor, store: str, variants: Mapping[str, Sequence[str]],
             queries: Sequence[Query], *, encoder: Callable[[], Encoder] | None = None,
             per_task: int = 16) -> dict[str, list[Any]]:
    """Every query through every variant's pipeline, spread over the executor.

    Args:
        executor: where the work runs.
        store: the store's location (a file every worker sees, or a ``postgresql://`` DSN).
        variants: name -> settings overrides (``key=value``; ``[]`` is the default settings).
        queries: the query set.
        encoder: a picklable factory of the dense encoder (default: the settings' encoder).
        per_task: queries per task.

    Returns:
        Each variant's traces, in the queries' order.
    """
    jobs = [(name, _Job(str(store), tuple(overrides), encoder, tuple(queries[i:i + per_task])))
            for name, overrides in variants.items() for i in range(0, len(queries), per_task)]
    done = executor.map(_run_job, [job for _, job in jobs])
    out: dict[str, list[Any]] = {name: [] for name in variants}
    for (name, _), traces in zip(jobs, done):
        out[name].extend(traces)
    return out


def run_queries(executor: Executor, store: str, queries: Sequence[Query], *,
                overrides: Sequence[str] = (), encoder: Callable[[], Encoder] | None = None,
                per_task: int = 16) -> list[Any]:
    """Every query through the pipeline the overrides describe, spread over the executor; the
    traces, in the queries' order (diagnose them with :func:`ragdx.run_pipeline`'s machinery or
    write them with :mod:`ragdx.tracefile`)."""
    return run_grid(executor, store, {"run": overrides}, queries, encoder=encoder, per_task=per_task)["run"]

