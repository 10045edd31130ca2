"""Shared pieces of the hardening tests: a lexical copy of the bundled example per test, a way to
damage one page of a store, a fingerprint of a store file, and run folders of 'ragdx run'."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragdx.cli import main
from ragdx.ingest.ingestor import Ingestor
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import EXAMPLE

LEXICAL = ["--set", "retrieval.dense.enabled=false"]


@pytest.fixture(scope="session")
def _lexical_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hardening") / "store.db"
    with SQLiteStore(path) as store:
        Ingestor(store).run(EXAMPLE / "manifest.jsonl")  # words and punctuation, no vectors
    return path


@pytest.fixture
def example_db(tmp_path: Path, _lexical_template: Path) -> Path:
    """A store file of this test's own holding the bundled example (lexical only)."""
    path = tmp_path / "store.db"
    shutil.copyfile(_lexical_template, path)
    return path


def fingerprint(path: Path) -> str:
    """The SHA-256 of a store file and of its write-ahead log (what a write would change)."""
    digest = hashlib.sha256(path.read_bytes())
    wal = Path(f"{path}-wal")
    if wal.exists():
        digest.update(wal.read_bytes())
    return digest.hexdigest()


def corrupt_page(path: Path, name: str = "chunks_by_doc") -> None:
    """Overwrite the header of one table's or index's root page: the schema still reads, SQLite's
    integrity check fails, and so does any read of that table."""
    con = sqlite3.connect(str(path))
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
        size = con.execute("PRAGMA page_size").fetchone()[0]
    finally:
        con.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * size)
        fh.write(b"\xff" * 12)


# -- run folders of 'ragdx run' (issue 25, item 7) --------------------------------------------------

RUN_QUERIES = 4  # the example's first four questions: a run of a second or two


def ragdx(argv: list[str]) -> tuple[int, str, str]:
    """``ragdx ARGV`` in this process: the exit code, stdout and stderr. A traceback escapes."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        logging.getLogger("ragdx").handlers[:] = []  # main() logs to the redirected stderr
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def run_inputs(tmp_path_factory: pytest.TempPathFactory, _lexical_template: Path) -> tuple[Path, Path]:
    """A store of the example (lexical) and a query set of its first questions."""
    folder = tmp_path_factory.mktemp("run_inputs")
    store = folder / "store.db"
    shutil.copyfile(_lexical_template, store)
    lines = (EXAMPLE / "queries.jsonl").read_text(encoding="utf-8").splitlines()[:RUN_QUERIES]
    queries = folder / "queries.jsonl"
    queries.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return store, queries


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory, run_inputs: tuple[Path, Path]) -> Path:
    """A finished run folder of RUN_QUERIES items, every one published. Copy it before changing it."""
    store, queries = run_inputs
    out = tmp_path_factory.mktemp("finished") / "run"
    code, _, err = ragdx(["run", "--store", str(store), "--queries", str(queries), "--out", str(out), "-q",
                          *LEXICAL])
    assert code == 0, err
    return out


@pytest.fixture(scope="session")
def unfinished_run(tmp_path_factory: pytest.TempPathFactory, run_inputs: tuple[Path, Path]) -> Path:
    """A run folder whose worker died right after its first draft (the lease long expired): one item
    drafted, the others queued. Copy it before changing it."""
    store, queries = run_inputs
    out = tmp_path_factory.mktemp("unfinished") / "run"
    died = subprocess.run([sys.executable, "-m", "ragdx.cli", "run", "--store", str(store), "--queries",
                           str(queries), "--out", str(out), "--lease-seconds", "0.1", "--fault", "after_draft",
                           *LEXICAL], capture_output=True, text=True)
    assert died.returncode == 4, died.stderr
    time.sleep(0.2)
    return out


def copy_run(run: Path, to: Path) -> Path:
    """A copy of a run folder (its database's log folded in first)."""
    con = sqlite3.connect(str(run / "run.db"))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    shutil.copytree(run, to)
    return to


def query_ids(path: Path) -> list[str]:
    """The query ids of a published file's lines (traces: query_id; diagnoses: id), in order."""
    return [(lambda o: o.get("query_id", o.get("id")))(json.loads(line))
            for line in path.read_text(encoding="utf-8").splitlines()]
