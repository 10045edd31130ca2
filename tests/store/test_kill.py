"""An ingest killed with SIGKILL in the middle of its write leaves the store as it was."""

import os
import signal
import subprocess
import sys

import pytest

from ragdx.ingest.ingestor import Ingestor
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import snapshot, write

PARAGRAPH = ("Refunds are accepted within 30 days of delivery. Quality defects may be refunded "
             "within 90 days of delivery. ")


@pytest.mark.slow
def test_sigkill_during_ingest_leaves_store_consistent(tmp_path):
    store_path = tmp_path / "store.db"
    write(tmp_path / "seed" / "keep.md", "# Keep\n\nThis document was here before.")
    with SQLiteStore(store_path) as store:
        Ingestor(store).run(tmp_path / "seed")
    before = snapshot(store_path)

    corpus = tmp_path / "corpus"
    for i in range(1500):
        body = "\n\n".join(f"## Part {j}\n\n{PARAGRAPH * 4}Document {i} part {j}." for j in range(6))
        write(corpus / f"doc{i:04d}.md", f"# Document {i}\n\n{body}")

    proc = subprocess.Popen(
        [sys.executable, "-m", "ragdx.cli", "ingest", "--store", str(store_path), str(corpus),
         "--set", "retrieval.dense.enabled=false"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:  # parsing and chunking happen first; then one transaction writes all
        if "writing" in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    assert snapshot(store_path) == before  # the half-written transaction is gone
    with SQLiteStore(store_path) as store:
        assert store.verify() == []
        assert store.doc_ids() == ["keep.md"]
        # and the store still works: the same ingest, uninterrupted, completes
        report = Ingestor(store).run(corpus)
        assert report.count("add") == 1500 and store.verify() == []
