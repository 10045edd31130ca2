"""Run the bundled example as the recorded-run test does, and write (or compare) its snapshot.

Re-record only when a change of behaviour is intended, and say so in the commit:

    .venv/bin/python -m tests.recorded.record hashing   # the hashing encoder (every install)
    .venv/bin/python -m tests.recorded.record minilm    # all-MiniLM-L6-v2 (the 'dense' extra)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from ragdx.build import build_ingestor
from ragdx.examples import example_dir
from ragdx.config import load_settings
from ragdx.experiments.run import run
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.recorded.snapshot import snapshot

HERE = Path(__file__).parent


def recorded_path(which: str) -> Path:
    return HERE / f"demo-{which}.json"


def demo_snapshot(which: str, folder: Path) -> dict:
    """Ingest the bundled example into ``folder`` with default settings and the named encoder
    (``hashing``: :class:`HashingEncoder` of 256 dimensions, the generator by words alone, no learned reader;
    ``minilm``: the settings' model),
    run every question, and return the run folder's snapshot."""
    example = example_dir()
    # hashing vectors carry no meaning: the generator scores by words alone with them, and reads
    # without the learned reader, whose weights depend on whether the extra 'models' is installed
    # (the recording must be the same in the core environment and the full one)
    settings = load_settings(overrides=["generation.semantic_weight=0", "generation.reader=none"]
                             if which == "hashing" else [])
    encoder = HashingEncoder(dim=256) if which == "hashing" else None
    with SQLiteStore(folder / "store.db", "create") as store:
        build_ingestor(store, settings, encoder).run(example / "manifest.jsonl")
        run(store, settings, load_queries(example / "queries.jsonl"), folder / "run",
            example / "queries.jsonl", progress=False, encoder=encoder)
    return snapshot(folder / "run", folder)


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "hashing"
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_snapshot(which, Path(tmp))
    recorded_path(which).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {recorded_path(which)}")
