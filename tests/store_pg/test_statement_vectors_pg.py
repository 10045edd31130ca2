"""Statement vectors in the PostgreSQL store, on one server and sharded (docs/pipeline.md, "Statement
vectors"): written at ingest as in SQLite, byte for byte, read by the sentence reranker instead of
encoding, gone with their chunk (a deletion, a re-chunk, an index switch) and written again by
`ragdx index build`; a store of schema 3 gets their table when opened for writing."""

from __future__ import annotations

import numpy as np
import pytest

from ragdx.build import build_embedder, build_ingestor, build_pipeline
from ragdx.config import load_settings
from ragdx.index import versions as indexing
from ragdx.index.spaces import build_space
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
from ragdx.ingest.embed import Embedder, chunk_statements
from ragdx.ingest.ingestor import delete_documents
from ragdx.stages._sentences import sentence_vectors
from ragdx.stages.rerank import SentenceReranker
from ragdx.store.postgres import PostgresStore
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.stages.conftest import make_corpus
from tests.stages.test_statement_vectors import Q

SETTINGS = ["rerank.method=none", "chunking.tokenizer=regex"]


@pytest.fixture(params=["pg", "sharded"])
def small(request, pg_store_factory, tmp_path):
    """(store, encoder, settings) for the small corpus, ingested with dense vectors."""
    settings = load_settings(overrides=SETTINGS)
    encoder = HashingEncoder(dim=128)
    store = pg_store_factory(request.param)
    build_ingestor(store, settings, encoder).run(make_corpus(tmp_path / "corpus"))
    return store, encoder, settings


def rows(store: PostgresStore) -> int:
    return store._one("SELECT count(*) FROM {s}.statement_vectors")[0]


def test_ingest_stores_the_statement_vectors_sqlite_stores(small, tmp_path):
    store, encoder, settings = small
    with SQLiteStore(tmp_path / "ref.db") as ref:
        build_ingestor(ref, settings, HashingEncoder(dim=128)).run(make_corpus(tmp_path / "corpus"))
        searchable = [c.id for c in ref.chunks() if c.duplicate_of is None]
        expected = ref.statement_vectors(encoder.space.id, searchable)
    assert len(expected) == len(searchable) == 5
    assert store.statement_vectors(encoder.space.id, searchable) == expected
    assert store.chunks_without_statement_vectors(encoder.space.id) == []
    assert rows(store) == len(searchable)
    (h, blob), = [expected[c.id] for c in store.chunks("errors.md") if "RFD-4021" in c.text]
    assert store.statement_vectors_by_hash(encoder.space.id, [h, "no such hash"]) == {h: blob}


def test_the_reranker_encodes_no_statement_the_store_holds(small):
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    fused = pipeline.fusion.run(pipeline.retrieve(Q))
    n = len(fused.items)
    SentenceReranker(store, encoder, top_n=n, depth=n).run(Q, fused)
    chunks = store.chunks_by_id([c.chunk_id for c in fused.items])
    said = {t for c in chunks.values() for t in chunk_statements(c)}
    assert n > 3 and (sentence_vectors(encoder).encoded, sentence_vectors(encoder).stored) == (0, len(said))


def test_they_go_with_a_deleted_document_and_a_rechunk(small, tmp_path):
    store, encoder, settings = small
    gone = [c.id for c in store.chunks("errors.md")]
    before = rows(store)
    assert store.statement_vectors(encoder.space.id, gone).keys() == set(gone)
    delete_documents(store, ["errors.md"])
    assert store.statement_vectors(encoder.space.id, gone) == {} and rows(store) == before - len(gone)
    # the live index as ingested: another chunker re-chunks in place, and the new chunks get theirs
    smaller = load_settings(overrides=[*SETTINGS, "chunking.max_tokens=12"])
    build_ingestor(store, smaller, encoder).run(make_corpus(tmp_path / "corpus"))
    searchable = [c.id for c in store.chunks() if c.duplicate_of is None]
    assert store.chunks_without_statement_vectors(encoder.space.id) == []
    assert rows(store) == len(searchable) and set(store.statement_vectors(encoder.space.id, searchable)) == set(searchable)


def test_an_index_switch_leaves_the_new_chunks_without_them_until_index_build(small):
    store, encoder, settings = small
    embedder = Embedder(encoder, backend="HashingEncoder")
    built = indexing.build_index(store, ChunkerConfig(max_tokens=12), RegexTokenCounter(), embedder=embedder)
    indexing.switch_index(store, built.index_id, force=True, embedder=embedder)
    searchable = [c for c in store.chunks() if c.duplicate_of is None]
    assert len(store.chunks_without_statement_vectors(encoder.space.id)) == len(searchable) and rows(store) == 0
    stats = build_space(store, build_embedder(settings.retrieval.dense, HashingEncoder(dim=128)))
    assert stats.statements.chunks == len(searchable)
    assert store.chunks_without_statement_vectors(encoder.space.id) == [] and rows(store) == len(searchable)
    for chunk in searchable[:3]:
        ((_, blob),) = store.statement_vectors(encoder.space.id, [chunk.id]).values()
        assert np.array_equal(np.frombuffer(blob, np.float32).reshape(-1, 128),
                              encoder.encode(chunk_statements(chunk), kind="passage").vectors)


@pytest.mark.parametrize("kind", ["pg", "sharded"])
def test_a_store_of_schema_3_gets_their_table_when_opened_for_writing(pg_store_factory, kind, tmp_path):
    store = pg_store_factory(kind)
    with store._pool.connection() as conn:
        conn.execute(f"DROP TABLE {store.schema}.statement_vectors")
        conn.execute(f"DROP TABLE {store.schema}.staged_vectors, {store.schema}.staged_chunks, "
                     f"{store.schema}.staged_sections, {store.schema}.staged_versions, {store.schema}.index_versions")
        conn.execute(f"UPDATE {store.schema}.meta SET value = '3' WHERE key = 'schema_version'")
    store.close()
    settings = load_settings(overrides=SETTINGS)
    encoder = HashingEncoder(dim=128)
    with PostgresStore(store.dsn, "write") as again:
        build_ingestor(again, settings, encoder).run(make_corpus(tmp_path / "corpus"))
        searchable = [c.id for c in again.chunks() if c.duplicate_of is None]
        assert again.chunks_without_statement_vectors(encoder.space.id) == [] and rows(again) == len(searchable)
        assert again.verify() == []


def test_the_audit_finds_rows_a_cascade_would_have_deleted(small):
    store, encoder, _ = small
    assert store.audit()[0] == []
    chunks = store.chunks("errors.md")
    with store._pool.connection() as conn:  # a deletion that forgot its statement vectors and staged rows
        conn.execute(f"INSERT INTO {store.schema}.index_versions SELECT 'ix_9', body, 'built', '', '' FROM "
                     f"{store.schema}.index_versions WHERE id = 'ix_0'")
        conn.execute(f"INSERT INTO {store.schema}.staged_versions VALUES ('ix_9', 'errors.md', %s, 'p', '[]', 'c', 't')",
                     (chunks[0].version,))
        conn.execute(f"DELETE FROM {store.schema}.chunks WHERE doc_id = 'errors.md'")
        conn.execute(f"INSERT INTO {store.schema}.tombstones VALUES ('errors.md', '', '[]')")
    problems = store.audit()[0]
    assert len(chunks) == 1 and "deleted document errors.md is still held by index version ix_9" in problems
    assert f"1 statement vectors of space {encoder.space.id} without a chunk" in problems
