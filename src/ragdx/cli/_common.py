"""What every command group of the CLI shares: opening the store and the settings, the result
cache and the executor around a run, argument types and declarations, and the usage error."""

from __future__ import annotations

import argparse
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

log = logging.getLogger("ragdx")


def _store(args: argparse.Namespace, mode: str = "read"):
    """The store at a file path or a ``postgresql://`` DSN, read-only unless the command writes
    (``write``: it must exist; ``create``)."""
    from ragdx.build import open_store
    return open_store(args.store, mode)


def _settings(args: argparse.Namespace):
    from ragdx.config import load_settings
    return load_settings(args.config, args.set or ())


def _principal(args: argparse.Namespace):
    from ragdx.types import Principal
    groups = tuple(args.group) if args.group else ("public",)
    return Principal(args.user, groups)


@contextmanager
def _with_cache(args: argparse.Namespace, pipeline, settings) -> Iterator[tuple]:
    """The pipeline with the store's result cache, unless ``cache.enabled`` is false; a cache that
    cannot be opened is logged and the pipeline runs without it. Yields the pipeline and the
    cache (None without one), and closes the cache. A cache file this command created is removed
    again when the command fails (a damaged store is found only when read: nothing is left
    beside it)."""
    from ragdx.build import cache_path, open_cache
    from ragdx.errors import StoreError
    path = cache_path(args.store, settings)
    new = path is not None and not path.exists()
    try:
        cache = open_cache(args.store, settings)
    except StoreError as exc:
        log.warning("%s; running without the cache", exc)
        cache = None
    if cache is None:
        yield pipeline, None
        return
    from ragdx.caching import CachedPipeline
    try:
        yield CachedPipeline(pipeline, cache), cache
    except BaseException:
        cache.close()
        if new:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        raise
    cache.close()


@contextmanager
def _executor(args: argparse.Namespace) -> Iterator:
    """The executor ``--executor`` names (None without it), closed at the end whatever happens: a
    local cluster it started is stopped; a cluster given by address is left running."""
    if not getattr(args, "executor", None):
        yield None
        return
    from ragdx.executors import executor_for
    executor = executor_for(args.executor)
    try:
        yield executor
    finally:
        executor.close()


def _remote(args: argparse.Namespace, executor):
    """The pipelines run on the executor's workers, which open the store where this process does."""
    if executor is None:
        return None
    from ragdx.executors import RemotePipelines
    return RemotePipelines(executor, _absolute(args.store))


def _absolute(location: str) -> str:
    """A path made absolute (a run is resumed from anywhere); a DSN as it is."""
    return location if "://" in location else str(Path(location).resolve())


def _purge_cache(args: argparse.Namespace, store, settings=None) -> None:
    """Bring the store's result cache, if there is one, up to date with a change just made, so
    nothing of a deleted document or a revoked access stays in it."""
    from ragdx.build import cache_path
    from ragdx.errors import StoreError
    path = cache_path(args.store, settings)
    if path is None or not path.is_file():
        return
    from ragdx.store.cache import SQLiteCache
    try:
        with SQLiteCache(path) as cache:
            dropped = cache.sync(store)
    except StoreError as exc:
        log.warning("%s; the cache is brought up to date at its next use", exc)
        return
    log.info("%d cached results invalidated (%s)", dropped, path)


class _UsageError(Exception):
    """Bad usage found after argument parsing (exit 2)."""


def _command(sub: argparse._SubParsersAction, name: str, func: Callable[[argparse.Namespace], int],
             help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    p.set_defaults(func=func)
    return p


def _configurable(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr (they are "
                   "drawn only when stderr is a terminal)")
    p.add_argument("--config", help="a TOML settings file")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="change one setting, e.g. retrieval.dense.enabled=false (repeatable)")


def _distributable(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--executor", metavar="SPEC", help=f"{what} on worker processes: local:N (a process "
                   "pool), dask (a local Dask cluster of two workers), dask:N, or dask:tcp://HOST:PORT "
                   "(a running scheduler; its workers must reach the store at the same path); "
                   "default: in this process")


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return int(value)


def _retention(value: str) -> int | str:
    if value == "all":
        return value
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is neither 'all' nor a whole number of at least 0")
    return int(value)
