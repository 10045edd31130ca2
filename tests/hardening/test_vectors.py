"""An ingest without the dense channel into a store whose dense channel is live is refused: it
would delete or skip vectors of the active space without a word (issue 14, item 4)."""

from __future__ import annotations

import json

import pytest

from ragdx.build import build_ingestor
from ragdx.cli import main
from ragdx.config import load_settings
from ragdx.errors import ConfigError, SpaceMismatchError
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.conftest import snapshot, write

DOCS = {"refund.md": "# Refund policy\n\nRefunds are accepted within 30 days of delivery.",
        "shipping.md": "# Shipping\n\nParcels are delivered within 3 business days."}
LEXICAL = "retrieval.dense.enabled=false"


def _corpus(folder, docs=DOCS):
    for name, text in docs.items():
        write(folder / name, text)
    return write(folder / "m.jsonl", "\n".join(json.dumps({"doc_id": n, "path": n}) for n in docs) + "\n")


def _vectors(path) -> int:
    with SQLiteStore(path, "read") as store:
        return sum(count for _, _, _, count in store.spaces())


@pytest.fixture
def dense(tmp_path):
    """A store ingested with the dense channel on (hashing encoder); its active space holds vectors."""
    manifest = _corpus(tmp_path / "corpus")
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        build_ingestor(store, load_settings(), HashingEncoder(dim=64)).run(manifest)
        assert store.active_space() is not None
    return path, manifest


def test_reingesting_with_the_dense_channel_off_is_refused(dense):
    path, manifest = dense
    before, vectors = snapshot(path), _vectors(path)
    assert vectors > 0
    with SQLiteStore(path, "write") as store, pytest.raises(ConfigError) as info:
        build_ingestor(store, load_settings(overrides=[LEXICAL])).run(manifest)
    message = str(info.value)
    assert "the dense channel is off (retrieval.dense.enabled=false)" in message
    assert "this ingest would re-chunk 2 stored versions (deleting their vectors)" in message
    assert "ingest into a new store beside the live one" in message
    assert snapshot(path) == before and _vectors(path) == vectors  # before: 0 vectors, silently


def test_adding_documents_with_the_dense_channel_off_is_refused(tmp_path, dense, capsys):
    path, _ = dense
    more = _corpus(tmp_path / "more", {"warranty.md": "# Warranty\n\nThe warranty lasts 24 months."})
    before = snapshot(path)
    assert main(["ingest", "--store", str(path), str(more), "--set", LEXICAL]) == 2
    err = capsys.readouterr().err
    assert "this ingest would add 1 versions without vectors" in err
    assert snapshot(path) == before


def test_an_ingest_that_changes_no_chunk_needs_no_encoder(tmp_path):
    # chunked in words and punctuation from the start, the store's chunks do not depend on the
    # encoder: an ingest with the dense channel off changes attributes only, and keeps every vector
    manifest = _corpus(tmp_path / "corpus")
    path = tmp_path / "store.db"
    regex = "chunking.tokenizer=regex"
    with SQLiteStore(path) as store:
        build_ingestor(store, load_settings(overrides=[regex]), HashingEncoder(dim=64)).run(manifest)
    vectors = _vectors(path)
    relabelled = write(tmp_path / "corpus" / "m2.jsonl", "\n".join(json.dumps(
        {"doc_id": n, "path": n, "acl": ["public", "staff"]}) for n in DOCS) + "\n")
    with SQLiteStore(path, "write") as store:
        report = build_ingestor(store, load_settings(overrides=[regex, LEXICAL])).run(relabelled)
    assert [a.action.value for a in report.actions] == ["update", "update"]
    assert _vectors(path) == vectors


WARRANTY = {"warranty.md": "# Warranty\n\nThe warranty lasts 24 months."}


def _race(tmp_path, monkeypatch, dim: int, ingestor_of):
    """Run the ingest ``ingestor_of(store)`` makes while another process's first ingest, with a
    ``dim``-dimensional encoder, commits just before this one's write transaction begins."""
    path = tmp_path / "store.db"
    manifest = _corpus(tmp_path / "corpus")
    more = _corpus(tmp_path / "more", WARRANTY)
    store = SQLiteStore(path)
    original, done = store.transaction, []

    def transaction():
        if not done:
            with SQLiteStore(path, "write") as other:
                done.append(build_ingestor(other, load_settings(), HashingEncoder(dim=dim)).run(more))
        return original()

    monkeypatch.setattr(store, "transaction", transaction)
    return store, lambda: ingestor_of(store).run(manifest)


def test_a_space_activated_after_the_ingest_parsed_is_seen_inside_its_transaction(tmp_path, monkeypatch):
    # another process's first dense ingest commits between this lexical ingest's check before
    # its work and its write transaction: the check is made again under the write lock
    store, run = _race(tmp_path, monkeypatch, 64, lambda s: build_ingestor(s, load_settings(overrides=[LEXICAL])))
    with store:
        with pytest.raises(ConfigError, match="this ingest would add 2 versions without vectors"):
            run()
        assert store.active_space() is not None
        assert store.chunks("refund.md") == [] and store.chunks("shipping.md") == []
        assert store.chunks("warranty.md") != []


def test_another_space_activated_after_a_dense_ingest_embedded_is_seen_inside_its_transaction(tmp_path, monkeypatch):
    # this ingest embeds with one model while another process's first ingest activates another
    # model's space: the vectors are not written into a store whose active space is another
    store, run = _race(tmp_path, monkeypatch, 32, lambda s: build_ingestor(s, load_settings(), HashingEncoder(dim=64)))
    with store:
        with pytest.raises(SpaceMismatchError, match="ingest: the query encoder's space .* dim: 64 vs 32"):
            run()
        assert store.active_space().dim == 32
        assert store.chunks("refund.md") == [] and store.chunks("warranty.md") != []
