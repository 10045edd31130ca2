"""Shared pieces of the hardening tests: a lexical copy of the bundled example per test, a way to
damage one page of a store, and a fingerprint of a store file."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

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
