"""Batch work on a process pool and on a local Dask cluster of two workers."""

from __future__ import annotations

import functools
import os
import time

import pytest

from ragdx.build import build_ingestor, build_pipeline
from ragdx.config import load_settings
from ragdx.errors import ConfigError
from ragdx.examples import example_dir
from ragdx.executors import LocalExecutor, ParallelEncoder, executor_for, run_grid
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder


def square(x: int) -> int:
    return x * x


def pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_a_bad_executor_spec_names_the_valid_ones():
    with pytest.raises(ConfigError, match=r"'ray:2' is not one of: local, local:N, dask, dask:N"):
        executor_for("ray:2")
    with pytest.raises(ConfigError, match="'local:many'"):
        executor_for("local:many")


def test_the_process_pool_keeps_the_order():
    with LocalExecutor(2) as pool:
        assert pool.map(square, list(range(10))) == [x * x for x in range(10)]


@pytest.fixture(scope="module")
def dask_cluster():
    pytest.importorskip("dask.distributed", reason="the 'dask' extra is not installed")
    executor = executor_for("dask:2")
    yield executor
    executor.close()


def test_the_dask_cluster_has_two_workers_and_uses_both(dask_cluster):
    assert dask_cluster.workers == 2
    assert len(set(dask_cluster.map(pid_after, [0.2] * 6)) - {os.getpid()}) == 2


def test_parallel_encoding_gives_the_same_vectors(dask_cluster):
    texts = [f"refund request {i} after {i % 7} days" for i in range(50)]
    parallel = ParallelEncoder(dask_cluster, functools.partial(HashingEncoder, dim=64), batch=8)
    alone = HashingEncoder(dim=64).encode(texts)
    got = parallel.encode(texts)
    assert (got.vectors == alone.vectors).all() and got.window_ends == alone.window_ends
    assert parallel.space == HashingEncoder(dim=64).space


def test_an_ablation_grid_on_the_cluster_equals_running_it_here(tmp_path, dask_cluster):
    factory = functools.partial(HashingEncoder, dim=64)
    with SQLiteStore(tmp_path / "store.db") as store:
        build_ingestor(store, load_settings(), factory()).run(example_dir() / "manifest.jsonl")
    queries = load_queries(example_dir() / "queries.jsonl")
    variants = {"baseline": [], "no-dense": ["retrieval.dense.enabled=false"]}
    grid = run_grid(dask_cluster, str(tmp_path / "store.db"), variants, queries, encoder=factory, per_task=5)
    with SQLiteStore(tmp_path / "store.db", "read") as store:
        for name, overrides in variants.items():
            pipeline = build_pipeline(store, load_settings(overrides=overrides), encoder=factory())
            assert len(grid[name]) == len(queries) == 20
            for query, trace in zip(queries, grid[name]):
                here = pipeline.run(query)
                assert trace.query == query
                assert [[c.chunk_id for c in r.items] for r in trace.ranked] == \
                    [[c.chunk_id for c in r.items] for r in here.ranked]
                assert trace.answer.text == here.answer.text
    assert [r.stage for r in grid["no-dense"][0].ranked][0] == "bm25"
    assert "dense" not in {r.stage for r in grid["no-dense"][0].ranked}
