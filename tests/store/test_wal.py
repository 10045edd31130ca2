"""Two processes opening one new SQLite file together: the store, its result cache and a run
folder's run.db each put the file in WAL mode, which SQLite refuses at once ("database is
locked", no busy timeout) while the other process holds the file's lock (store._common.use_wal)."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest

from ragdx.experiments.runstate import RunState
from ragdx.store._common import use_wal
from ragdx.store.cache import SQLiteCache
from ragdx.store.sqlite import SQLiteStore


def _locked_file(path: Path) -> sqlite3.Connection:
    """A new file (rollback journal) whose write lock a connection holds, as the process that
    creates a file holds it while making its tables."""
    holder = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_use_wal_waits_for_a_held_lock_and_says_when_it_is_still_held(tmp_path):
    holder = _locked_file(tmp_path / "x.db")
    other = sqlite3.connect(str(tmp_path / "x.db"), isolation_level=None, timeout=5.0)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        use_wal(other, 0.05)  # still locked when the wait is over: the error, not a silent rollback mode
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    use_wal(other, 10.0)
    assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    other.close()
    holder.close()


def _open(kind: str, path: str, barrier, failures) -> None:
    barrier.wait()
    try:
        if kind == "run":
            with RunState(Path(path)) as state:
                state.counts()
        elif kind == "cache":
            SQLiteCache(path).close()
        else:
            SQLiteStore(path, "create").close()
    except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
        failures.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("kind", ["run", "cache", "store"])
def test_two_processes_create_one_file_together_and_both_open_it(kind, tmp_path):
    """Before use_wal, about one pair in two failed here; ten pairs all open."""
    ctx = multiprocessing.get_context("fork")
    failures = ctx.Queue()
    for n in range(10):
        path = str(tmp_path / f"{n}.db")
        barrier = ctx.Barrier(2)
        workers = [ctx.Process(target=_open, args=(kind, path, barrier, failures)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert [w.exitcode for w in workers] == [0, 0]
        with sqlite3.connect(path) as check:
            assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    found = []
    while not failures.empty():
        found.append(failures.get())
    assert found == []
