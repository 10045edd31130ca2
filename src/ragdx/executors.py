"""Batch work spread over processes or a cluster: embedding a large corpus, running a large query
set, and running an ablation grid.

An :class:`Executor` maps a picklable function over items and returns the results in order.
:class:`LocalExecutor` is a process pool on this machine (the default); :class:`DaskExecutor`
runs on a Dask cluster (extra ``dask``): a local one of ``n`` worker processes, or an existing
scheduler's address. Dask was chosen over Ray after measuring both here (docs/benchmarks.md,
``bench/scale/pg_executors.py``): a two-worker local cluster starts in 2.3 s against Ray's 8.3 s, the
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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from ragdx.errors import ConfigError, MissingExtraError
from ragdx.protocols import Encoder, TextKind
from ragdx.types import EmbeddingSpace, Encoding, Query, StageKind

if TYPE_CHECKING:
    from ragdx.config import Settings
    from ragdx.pipeline import Trace

__all__ = ["Executor", "LocalExecutor", "DaskExecutor", "executor_for", "ParallelEncoder", "RemotePipelines"]

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Executor(Protocol):
    """Maps a picklable function over items, results in the items' order."""

    @property
    def workers(self) -> int: ...

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
        timeout: seconds to wait for the scheduler at ``address``.

    Raises:
        ConfigError: no scheduler answers at ``address``.
    """

    def __init__(self, address: str | None = None, *, workers: int = 2, timeout: float = 10.0) -> None:
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
            try:
                self.client = Client(address, timeout=timeout)
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"--executor dask:{address}: no Dask scheduler answers there within "
                                  f"{timeout:g} s ({exc})") from None

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
        batch: the most texts per task (fewer when that leaves a worker idle).
        local: the encoder ``factory`` builds, already built here (default: built now), for the
            space, the token counts and small inputs.
    """

    def __init__(self, executor: Executor, factory: Callable[[], Encoder], *, batch: int = 256,
                 local: Encoder | None = None) -> None:
        self.executor, self.factory, self.batch = executor, factory, batch
        self._local = local if local is not None else factory()

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
        if len(texts) <= 1:  # one text (a query) is not worth a round trip
            return self._local.encode(texts, kind=kind)
        size = min(self.batch, -(-len(texts) // max(1, self.executor.workers)))  # every worker has a part
        parts = self.executor.map(_encode_batch, [(self.factory, texts[i:i + size], kind)
                                                  for i in range(0, len(texts), size)])
        return Encoding(self.space, np.concatenate([p.vectors for p in parts]),
                        tuple(end for p in parts for end in p.window_ends))


# -- query sets and ablation variants --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Task:
    store: str
    settings: Settings
    encoder: Callable[[], Encoder] | None
    start: StageKind | None  # None: run each query; else resume each base trace from this kind on
    items: tuple[Any, ...]   # queries, or base traces


def _pipeline(store: str, settings: Settings, encoder: Callable[[], Encoder] | None) -> Any:
    from ragdx.build import build_pipeline, open_store

    def build() -> Any:
        pipeline = build_pipeline(_kept(("store", store), lambda: open_store(store, "read")), settings,
                                  encoder=encoder() if encoder else None)
        pipeline.warm_up()  # no query's latency includes a model load
        return pipeline
    return _kept(("pipeline", store, settings, encoder), build)


def _run_task(task: _Task) -> list[tuple[Trace, tuple[str, ...]]]:
    """Each item's trace, with the names of the stages whose output a resumed trace took from its
    base (the coordinator puts the base's own objects back in their place)."""
    pipeline = _pipeline(task.store, task.settings, task.encoder)
    if task.start is None:
        return [(pipeline.run(query), ()) for query in task.items]
    out = []
    for base in task.items:
        trace = pipeline.resume(base, task.start)
        out.append((trace, tuple(s.stage for s in trace.stages if any(s is b for b in base.stages))))
    return out


@dataclass(frozen=True, slots=True)
class RemotePipelines:
    """ragdx's own pipelines run on an executor's workers; what they return is the coordinator's
    to diagnose and write (a worker writes nothing).

    Each worker opens the store at ``store`` read-only and builds each pipeline once from its
    settings (and ``encoder``, a picklable factory, when given), then keeps both.

    Args:
        executor: where the pipelines run.
        store: the store's location as every worker reaches it (an absolute file path on a disk
            they all see, or a ``postgresql://`` DSN).
        encoder: a picklable factory of the dense encoder (default: the settings' encoder).
        per_task: queries per task (default: about four tasks per worker, at most 16 queries each).
    """

    executor: Executor
    store: str
    encoder: Callable[[], Encoder] | None = None
    per_task: int | None = None

    def _size(self, n: int) -> int:
        if self.per_task is not None:
            return self.per_task
        return max(1, min(16, -(-n // (4 * max(1, self.executor.workers)))))

    def run(self, settings: Settings, queries: Sequence[Query]) -> list[Trace]:
        """Each query's trace through the pipeline ``settings`` describe, in the queries' order."""
        size = self._size(len(queries))
        tasks = [_Task(self.store, settings, self.encoder, None, tuple(queries[i:i + size]))
                 for i in range(0, len(queries), size)]
        return [trace for done in self.executor.map(_run_task, tasks) for trace, _ in done]

    def resume(self, variants: Sequence[tuple[Settings, StageKind]], bases: Sequence[Trace]) -> list[list[Trace]]:
        """Each variant's traces, resumed from each base trace at the variant's start kind (as
        :meth:`ragdx.pipeline.Pipeline.resume` does), all variants at once; a reused stage output
        is the base's own object, as in a local resume."""
        size = self._size(len(bases) * max(1, len(variants)))
        tasks = [(v, _Task(self.store, settings, self.encoder, start, tuple(bases[i:i + size])))
                 for v, (settings, start) in enumerate(variants) for i in range(0, len(bases), size)]
        done = self.executor.map(_run_task, [task for _, task in tasks])
        out: list[list[Trace]] = [[] for _ in variants]
        for (v, task), results in zip(tasks, done):
            for base, (trace, reused) in zip(task.items, results):
                own = {s.stage: s for s in base.stages}
                out[v].append(replace(trace, stages=tuple(own[s.stage] if s.stage in reused else s
                                                          for s in trace.stages)))
        return out
