"""Statement vectors computed at ingest and kept in the store: what the sentence reranker and the
extractive generator read instead of encoding (docs/pipeline.md, "Statement vectors")."""

import sqlite3

import numpy as np
import pytest

from ragdx.build import build_embedder, build_ingestor, build_pipeline
from ragdx.config import load_settings
from ragdx.index.spaces import build_space
from ragdx.ingest.embed import chunk_statements, statements_hash
from ragdx.ingest.ingestor import delete_documents
from ragdx.stages._sentences import sentence_vectors
from ragdx.stages.rerank import SentenceReranker, SentenceSimilarity
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from ragdx.text import statements
from ragdx.types import Principal, Query
from tests.stages.conftest import make_corpus

Q = Query("q", "What does error RFD-4021 mean for my refund?", Principal())


def _stored(store, space_id, chunks):
    """Each chunk's stored statement vectors as a matrix (statements x dim)."""
    found = store.statement_vectors(space_id, [c.id for c in chunks])
    return {cid: np.frombuffer(blob, np.float32).reshape(-1, 128) for cid, (_, blob) in found.items()}


def test_ingest_stores_each_statement_as_the_encoder_encodes_it(small):
    store, encoder, _ = small
    chunk = next(c for c in store.chunks("errors.md") if "RFD-4021" in c.text)
    said = statements(chunk.text)
    assert said == ["Error RFD-4021 means the refund window expired.",
                    "Error RFD-5003 means the payment provider timed out."]
    ((h, blob),) = store.statement_vectors(encoder.space.id, [chunk.id]).values()
    assert h == statements_hash(said)
    assert np.array_equal(np.frombuffer(blob, np.float32).reshape(2, 128),
                          encoder.encode(said, kind="passage").vectors)
    # every searchable chunk has them; a heading chunk stating nothing is read as its text
    searchable = [c for c in store.chunks() if c.duplicate_of is None]
    stored = _stored(store, encoder.space.id, searchable)
    assert set(stored) == {c.id for c in searchable}
    for c in searchable:
        assert np.array_equal(stored[c.id], encoder.encode(chunk_statements(c), kind="passage").vectors)


def test_the_statement_vectors_go_with_a_deleted_document(small):
    store, encoder, _ = small
    gone = [c.id for c in store.chunks("errors.md")]
    count = store._db.execute("SELECT COUNT(*) FROM statement_vectors").fetchone()[0]
    assert store.statement_vectors(encoder.space.id, gone).keys() == set(gone)
    delete_documents(store, ["errors.md"])
    assert store.statement_vectors(encoder.space.id, gone) == {}
    assert store._db.execute("SELECT COUNT(*) FROM statement_vectors").fetchone()[0] == count - len(gone)


def test_another_space_has_none_and_reads_none(small):
    store, encoder, _ = small
    other = HashingEncoder(dim=128, seed=1)  # same dimension, another space
    assert other.space.id != encoder.space.id
    chunks = [c for c in store.chunks() if c.duplicate_of is None]
    assert store.statement_vectors(other.space.id, [c.id for c in chunks]) == {}
    # read through the other space, every statement is encoded by the other encoder
    cosines = SentenceSimilarity(other, store).run(Q.question, chunks)
    vectors = sentence_vectors(other)
    assert (vectors.encoded, vectors.stored) == (sum(len(chunk_statements(c)) for c in chunks), 0)
    assert cosines == pytest.approx(SentenceSimilarity(HashingEncoder(dim=128, seed=1)).run(Q.question, chunks))


def test_the_reranker_encodes_no_statement_the_store_holds(small):
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    fused = pipeline.fusion.run(pipeline.retrieve(Q))
    n = len(fused.items)
    reranked = SentenceReranker(store, encoder, top_n=n, depth=n).run(Q, fused)
    vectors = sentence_vectors(encoder)
    chunks = store.chunks_by_id([c.chunk_id for c in fused.items])
    said = {t for c in chunks.values() for t in chunk_statements(c)}
    assert (vectors.encoded, vectors.stored) == (0, len(said))
    # the same scores as encoding every statement (a fresh encoder of the space, no store)
    fresh = HashingEncoder(dim=128)
    encoded = SentenceReranker(store, fresh, top_n=n, depth=n)
    encoded.similarity = SentenceSimilarity(fresh)  # reads no store
    assert [(c.chunk_id, c.score) for c in encoded.run(Q, fused).items] == \
        [(c.chunk_id, pytest.approx(c.score)) for c in reranked.items]
    assert sentence_vectors(fresh).encoded == len(said)


def test_statements_split_otherwise_are_encoded_not_read(small):
    store, encoder, _ = small
    chunk = next(c for c in store.chunks("errors.md") if "RFD-4021" in c.text)
    store._db.execute("UPDATE statement_vectors SET statements_hash = 'another split' WHERE chunk_rowid = "
                      "(SELECT rowid FROM chunks WHERE id = ?)", (chunk.id,))
    SentenceSimilarity(encoder, store).run(Q.question, [chunk])
    assert (sentence_vectors(encoder).encoded, sentence_vectors(encoder).stored) == (2, 0)


def test_without_them_the_statements_are_encoded_and_index_build_fills_them(tmp_path):
    manifest = make_corpus(tmp_path / "corpus")
    settings = load_settings(overrides=["rerank.method=none", "chunking.tokenizer=regex",
                                        "retrieval.dense.statement_vectors=false"])
    encoder = HashingEncoder(dim=128)
    with SQLiteStore(tmp_path / "store.db") as store:
        report = build_ingestor(store, settings, encoder).run(manifest)
        assert report.embedding.statements is None
        chunks = [c for c in store.chunks() if c.duplicate_of is None]
        assert store.statement_vectors(encoder.space.id, [c.id for c in chunks]) == {}
        SentenceSimilarity(encoder, store).run(Q.question, chunks)
        said = sum(len(chunk_statements(c)) for c in chunks)
        assert sentence_vectors(encoder).encoded == said
        # 'ragdx index build' of the active space writes them (its chunk vectors are all there)
        on = load_settings(overrides=["chunking.tokenizer=regex"])
        stats = build_space(store, build_embedder(on.retrieval.dense, HashingEncoder(dim=128)))
        assert (stats.encoded, stats.statements.chunks) == (0, len(chunks))
        assert stats.statements.encoded + stats.statements.reused == said
        later = HashingEncoder(dim=128)
        SentenceSimilarity(later, store).run(Q.question, chunks)
        assert sentence_vectors(later).encoded == 0


def test_a_schema_2_store_is_read_without_them_and_migrated_when_written(small):
    store, encoder, _ = small
    path = store.path
    store.close()
    con = sqlite3.connect(path)
    con.execute("DROP TABLE statement_vectors")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with SQLiteStore(path, "read") as old:
        chunks = [c for c in old.chunks() if c.duplicate_of is None]
        assert old.statement_vectors(encoder.space.id, [c.id for c in chunks]) == {}
        SentenceSimilarity(encoder, old).run(Q.question, chunks)
        assert sentence_vectors(encoder).encoded == sum(len(chunk_statements(c)) for c in chunks)
    with SQLiteStore(path, "write") as migrated:
        assert migrated._db.execute("SELECT COUNT(*) FROM statement_vectors").fetchone() == (0,)
