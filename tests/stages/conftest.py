"""A small corpus with a public and a staff-only document, ingested with the hashing encoder."""

import json

import pytest

from ragdx.config import load_settings
from ragdx.build import build_ingestor
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.conftest import write

DOCS = {
    "refund.md": ("public", "# Refund policy\n\nRefunds are accepted within 30 days of delivery.\n\n"
                  "## Exceptions\n\nQuality defects may be refunded within 90 days of delivery."),
    "errors.md": ("public", "# Error codes\n\nError RFD-4021 means the refund window expired.\n\n"
                  "Error RFD-5003 means the payment provider timed out."),
    "runbook.md": ("staff", "# Runbook\n\nRefunds above 500 EUR need approval from a team lead. "
                   "The secret override code for refunds is OVERRIDE-77."),
    "shipping.md": ("public", "# Shipping\n\nParcels are delivered within 3 business days."),
}


def make_corpus(folder):
    lines = []
    for name, (group, text) in DOCS.items():
        write(folder / name, text)
        lines.append(json.dumps({"doc_id": name, "path": name, "acl": [group]}))
    return write(folder / "manifest.jsonl", "\n".join(lines) + "\n")


@pytest.fixture
def small(tmp_path):
    """(store, encoder, settings) for the small corpus, ingested with dense vectors."""
    manifest = make_corpus(tmp_path / "corpus")
    settings = load_settings(overrides=["rerank.method=none", "chunking.tokenizer=regex"])
    encoder = HashingEncoder(dim=128)
    store = SQLiteStore(tmp_path / "store.db")
    build_ingestor(store, settings, encoder).run(manifest)
    yield store, encoder, settings
    store.close()
