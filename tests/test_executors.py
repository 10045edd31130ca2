"""Batch work on a process pool and on a real Dask cluster: a scheduler and two workers started
here as separate processes (``python -m dask scheduler`` / ``dask worker``), stopped at the end
whatever happens. Ingest embeds on it, ``ragdx run`` answers on it and ``ragdx ablate`` runs
its variants on it, with the same results as in one process."""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragdx.build import build_ingestor
from ragdx.cli import main
from ragdx.config import load_settings
from ragdx.errors import ConfigError
from ragdx.executors import LocalExecutor, ParallelEncoder, executor_for
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.conftest import EXAMPLE

ROOT = Path(__file__).resolve().parents[1]
LEXICAL = ["--set", "retrieval.dense.enabled=false"]


def square(x: int) -> int:
    return x * x


def pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def encoders_kept() -> int:
    from ragdx.executors import _KEPT
    import pickle
    return sum(1 for key in _KEPT if pickle.loads(key)[0] == "encoder")


def test_a_bad_executor_spec_names_the_valid_ones():
    with pytest.raises(ConfigError, match=r"'ray:2' is not one of: local, local:N, dask, dask:N"):
        executor_for("ray:2")
    with pytest.raises(ConfigError, match="'local:many'"):
        executor_for("local:many")


def test_the_process_pool_keeps_the_order():
    with LocalExecutor(2) as pool:
        assert pool.map(square, list(range(10))) == [x * x for x in range(10)]


def _started(args: list[str], where: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=where, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two one-thread workers, each its own process, on loopback."""
    pytest.importorskip("distributed", reason="the 'dask' extra is not installed")
    where = tmp_path_factory.mktemp("dask")
    file = where / "scheduler.json"
    processes = []
    executor = None
    try:
        processes.append(_started(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(file)], where, where / "scheduler.log"))
        deadline = time.monotonic() + 60
        while not file.is_file() or not file.read_text().strip():
            assert time.monotonic() < deadline, (where / "scheduler.log").read_text()
            assert processes[0].poll() is None, (where / "scheduler.log").read_text()
            time.sleep(0.1)
        address = json.loads(file.read_text())["address"]
        for n in range(2):
            processes.append(_started(["worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                       "--host", "127.0.0.1", "--local-directory", str(where / f"w{n}")],
                                      where, where / f"worker{n}.log"))
        executor = executor_for(f"dask:{address}")
        executor.client.wait_for_workers(2, timeout=60)
        yield executor
    finally:
        if executor is not None:
            executor.close()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_the_cluster_has_two_workers_and_uses_both(cluster):
    assert cluster.workers == 2
    assert len(set(cluster.map(pid_after, [0.2] * 6)) - {os.getpid()}) == 2


def test_parallel_encoding_gives_the_same_vectors(cluster):
    texts = [f"refund request {i} after {i % 7} days" for i in range(50)]
    parallel = ParallelEncoder(cluster, functools.partial(HashingEncoder, dim=64), batch=8)
    alone = HashingEncoder(dim=64).encode(texts)
    got = parallel.encode(texts)
    assert (got.vectors == alone.vectors).all() and got.window_ends == alone.window_ends
    assert parallel.space == HashingEncoder(dim=64).space


def _vectors(path: Path) -> tuple[list, list]:
    con = sqlite3.connect(str(path))
    try:
        return (con.execute("SELECT chunk_rowid, space_id, input_hash, vector, window_end FROM vectors "
                            "ORDER BY chunk_rowid").fetchall(),
                con.execute("SELECT id, body, backend, state FROM spaces").fetchall())
    finally:
        con.close()


def test_ingest_embeds_on_the_cluster_and_stores_the_vectors_of_a_local_ingest(tmp_path, cluster):
    factory = functools.partial(HashingEncoder, dim=48)  # a factory no worker has seen yet
    with SQLiteStore(tmp_path / "here.db") as store:
        build_ingestor(store, load_settings(), factory()).run(EXAMPLE / "manifest.jsonl")
    before = sum(cluster.client.run(encoders_kept).values())
    with SQLiteStore(tmp_path / "there.db") as store:
        build_ingestor(store, load_settings(), executor=cluster, encoder_factory=factory).run(
            EXAMPLE / "manifest.jsonl")
    assert sum(cluster.client.run(encoders_kept).values()) - before == 2  # each worker built the encoder
    here, there = _vectors(tmp_path / "here.db"), _vectors(tmp_path / "there.db")
    assert len(here[0]) == 74 and here == there


@pytest.fixture(scope="module")
def lexical_store(tmp_path_factory) -> str:
    store = str(tmp_path_factory.mktemp("lexical") / "store.db")
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), "-q", *LEXICAL]) == 0
    return store


@pytest.fixture(scope="module")
def queries(tmp_path_factory) -> str:
    """The example's first ten questions (all answerable; ten keep the test short)."""
    path = tmp_path_factory.mktemp("queries") / "queries.jsonl"
    path.write_text("".join((EXAMPLE / "queries.jsonl").read_text().splitlines(keepends=True)[:10]))
    return str(path)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _without_times(trace: dict) -> dict:
    """A trace line without what the clock decides."""
    drop = {"seconds", "latency_ms", "ms"}

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(trace)


def test_a_run_on_the_cluster_gives_the_diagnoses_of_a_local_run(tmp_path, cluster, lexical_store, queries,
                                                                  capsys):
    address = cluster.client.scheduler.address
    common = ["run", "--store", lexical_store, "--queries", queries, "-q", *LEXICAL]
    assert main([*common, "--out", str(tmp_path / "here")]) == 0
    assert main([*common, "--out", str(tmp_path / "there"), "--executor", f"dask:{address}"]) == 0
    assert "10 queries published" in capsys.readouterr().out
    here, there = tmp_path / "here", tmp_path / "there"
    assert len(_lines(there / "diagnosis.jsonl")) == 10
    assert (there / "diagnosis.jsonl").read_text() == (here / "diagnosis.jsonl").read_text()
    assert [_without_times(t) for t in _lines(there / "traces.jsonl")] == \
        [_without_times(t) for t in _lines(here / "traces.jsonl")]
    overall = [json.loads((f / "metrics.json").read_text())["overall"] for f in (here, there)]
    assert [(o["queries"], o["outcomes"], o["first_failure"]) for o in overall] == \
        [(10, overall[0]["outcomes"], overall[0]["first_failure"])] * 2


def test_an_ablation_of_four_variants_on_the_cluster_equals_a_local_one(tmp_path, cluster, lexical_store, queries,
                                                                        capsys):
    address = cluster.client.scheduler.address
    variants = ["ctx:context.budget_tokens=300", "bm:retrieval.bm25.top_k=5", "rrf:fusion.c=5",
                "feat:rerank.method=features"]
    common = ["ablate", "--store", lexical_store, "--queries", queries, "-q", *LEXICAL,
              *[a for v in variants for a in ("--variant", v)]]
    assert main([*common, "--out", str(tmp_path / "here")]) == 0
    assert main([*common, "--out", str(tmp_path / "there"), "--executor", f"dask:{address}"]) == 0
    assert "10 queries x 5 configurations" in capsys.readouterr().out
    for name in ("baseline", "ctx", "bm", "rrf", "feat"):
        here, there = tmp_path / "here" / name, tmp_path / "there" / name
        assert len(_lines(there / "diagnosis.jsonl")) == 10, name
        assert (there / "diagnosis.jsonl").read_text() == (here / "diagnosis.jsonl").read_text(), name
    here, there = (json.loads((tmp_path / f / "metrics.json").read_text())["variants"] for f in ("here", "there"))
    for name in ("ctx", "bm", "rrf", "feat"):
        assert there[name]["reused"] == here[name]["reused"] and there[name]["changed"] == here[name]["changed"]
        assert [c for c in there[name]["comparisons"] if not c["metric"].startswith("latency")] == \
            [c for c in here[name]["comparisons"] if not c["metric"].startswith("latency")]
    assert here["ctx"]["reused"] == ["bm25", "governance", "rewrite", "rrf"]  # everything before the context
