"""The PostgreSQL store (one server, and sharded over two) keeps the embedded store's promises:
versions, access changes, deletions, re-chunking, exact BM25 statistics, search, index spaces."""

from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pytest

from ragdx.build import build_ingestor
from ragdx.config import load_settings
from ragdx.errors import InputError, StoreError
from ragdx.index import spaces as index
from ragdx.ingest.chunk import ChunkerConfig
from ragdx.ingest.embed import Embedder
from ragdx.ingest.ingestor import Ingestor, delete_documents
from ragdx.stages.bm25 import BM25Retriever, query_terms
from ragdx.stages.dense import DenseRetriever
from ragdx.store.pg_admin import drop_store
from ragdx.store.postgres import FTS5_MIN_IDF, PostgresStore
from ragdx.store.sqlite import SQLiteStore
from ragdx.store.vectors import DenseIndex
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import DocStatus, Principal, Query
from tests.conftest import write
from tests.store_pg.conftest import with_schema

pytestmark = pytest.mark.pg

KINDS = ["pg", "sharded"]


def manifest(folder, *lines):
    return write(folder / "manifest.jsonl", "\n".join(json.dumps(line) for line in lines) + "\n")


@pytest.mark.parametrize("kind", KINDS)
def test_versions_supersede_and_same_content_changes_nothing(tmp_path, pg_store_factory, kind):
    store = pg_store_factory(kind)
    doc = write(tmp_path / "refund.md", "# Refunds\n\nRefunds are accepted within 14 days.")
    m = manifest(tmp_path, {"doc_id": "policies/refund.md", "path": "refund.md"})
    assert [a.action for a in Ingestor(store).run(m).actions] == ["add"]
    v1 = store.latest("policies/refund.md").document
    assert store.index_version == 1
    assert [a.action for a in Ingestor(store).run(m).actions] == ["unchanged"]
    assert store.index_version == 1 and len(store.log_entries()) == 1
    doc.write_text("# Refunds\n\nRefunds are accepted within 30 days.", encoding="utf-8")
    third = Ingestor(store).run(m)
    assert [(v.document.version, v.document.status) for v in store.versions("policies/refund.md")] == [
        (v1.version, DocStatus.SUPERSEDED), (third.actions[0].version, DocStatus.CURRENT)]
    assert store.texts("policies/refund.md", v1.version)[1].endswith("14 days.")
    assert store.index_version == 2
    assert [e.op for e in store.log_entries()] == ["add", "add", "status"]
    assert store.verify() == []
    # every label, of any status (a question's "15" names a version only when one starts with it)
    assert store.version_labels() == frozenset({v1.version, third.actions[0].version}) and len(
        store.version_labels()) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_an_access_change_is_one_acl_row_and_revokes_at_once(tmp_path, pg_store_factory, kind):
    store = pg_store_factory(kind)
    write(tmp_path / "r.md", "Runbook: the override code is OVERRIDE-77.")
    encoder = HashingEncoder(dim=32)
    settings = load_settings(overrides=["chunking.tokenizer=regex"])
    build_ingestor(store, settings, encoder).run(
        manifest(tmp_path, {"doc_id": "r", "path": "r.md", "acl": ["staff", "public"]}))
    public = Query("q", "override code", Principal("p", ("public",)))
    dense = DenseRetriever(store, encoder)
    assert [c.doc_id for c in BM25Retriever(store).run(public).items] == ["r"]
    assert [c.doc_id for c in dense.run(public).items] == ["r"]
    vectors_before = store._all("SELECT chunk_rowid, input_hash FROM {s}.vec_1 ORDER BY 1")
    report = build_ingestor(store, settings, encoder).run(
        manifest(tmp_path, {"doc_id": "r", "path": "r.md", "acl": ["staff"]}))
    assert [(a.action, a.detail) for a in report.actions] == [("update", "acl")]
    assert store.log_entries()[-1].detail == '["public", "staff"] -> ["staff"]'
    assert BM25Retriever(store).run(public).items == () and dense.run(public).items == ()
    staff = Query("q", "override code", Principal("s", ("staff",)))
    assert [c.doc_id for c in dense.run(staff).items] == ["r"]
    # no vector row was rewritten: the access lives in its own table
    assert store._all("SELECT chunk_rowid, input_hash FROM {s}.vec_1 ORDER BY 1") == vectors_before
    assert store._all("SELECT groups FROM {s}.acl") == [(["staff"],)]


@pytest.mark.parametrize("kind", KINDS)
def test_delete_and_rechunk_keep_the_bm25_statistics_exact(tmp_path, pg_store_factory, kind):
    store = pg_store_factory(kind)
    write(tmp_path / "a.md", "# A\n\n" + " ".join(["Refunds are accepted within thirty days."] * 20))
    write(tmp_path / "b.md", "Beta refunds.")
    m = manifest(tmp_path, {"doc_id": "a", "path": "a.md"}, {"doc_id": "b", "path": "b.md"})
    Ingestor(store, ChunkerConfig(max_tokens=100)).run(m)
    n_before = len(store.chunks("a"))
    assert [a.action for a in Ingestor(store, ChunkerConfig(max_tokens=30)).run(m).actions] == [
        "rechunk", "rechunk"]
    chunks = store.chunks()
    assert len(store.chunks("a")) > n_before
    rows, n_tokens, df = store.bm25_statistics(["refund", "beta", "thirti"])
    assert rows == len(chunks)
    assert df == {"refund": len(chunks), "beta": 1, "thirti": len(store.chunks("a"))}
    with pytest.raises(InputError, match="no document 'zzz'"):
        delete_documents(store, ["b", "zzz"])
    assert store.doc_ids() == ["a", "b"]  # all or nothing
    b_version = store.latest("b").document.version
    delete_documents(store, ["b"])
    assert store.tombstone("b")[1] == [b_version]
    rows, _, df = store.bm25_statistics(["refund", "beta"])
    assert rows == len(store.chunks("a")) and df == {"refund": rows}
    assert store.chunks("b") == [] and store.fts_problems() == [] and store.verify() == []


def _df_rows(store, table: str, term: str) -> int:
    """The sum of ``df`` over a statistics table's rows for a term (every part)."""
    return int(store._one(f"SELECT coalesce(sum(df), 0) FROM {{s}}.{table} WHERE term = %s", (term,))[0])


@pytest.mark.parametrize("kind", KINDS)
def test_term_deltas_count_inside_the_transaction_and_are_folded_at_commit(tmp_path, pg_store_factory, kind):
    store = pg_store_factory(kind)
    write(tmp_path / "a.md", "Refunds within thirty days.")
    write(tmp_path / "b.md", "Beta refunds.")
    Ingestor(store).run(manifest(tmp_path, {"doc_id": "a", "path": "a.md"}))
    assert store.bm25_statistics(["refund", "beta"])[2] == {"refund": 1}
    assert _df_rows(store, "term_df", "refund") == 1 and _df_rows(store, "term_delta", "refund") == 0
    with store.transaction():
        Ingestor(store).run(manifest(tmp_path, {"doc_id": "b", "path": "b.md"}))
        # not folded yet: term_df still counts one row, the transaction's deltas add the other
        assert (_df_rows(store, "term_df", "refund"), _df_rows(store, "term_delta", "refund")) == (1, 1)
        assert store.bm25_statistics(["refund", "beta"])[2] == {"refund": 2, "beta": 1}
    assert (_df_rows(store, "term_df", "refund"), _df_rows(store, "term_df", "beta")) == (2, 1)
    assert store._one("SELECT count(*) FROM {s}.term_delta")[0] == 0
    delete_documents(store, ["b"])
    assert (_df_rows(store, "term_df", "refund"), _df_rows(store, "term_df", "beta")) == (1, 0)
    assert store._one("SELECT count(*) FROM {s}.term_df WHERE term = 'beta'")[0] == 0
    assert store.bm25_statistics(["refund", "beta"])[2] == {"refund": 1} and store.fts_problems() == []


def test_a_store_of_an_older_schema_is_refused_and_can_be_dropped(pg_servers):
    store = PostgresStore(with_schema(pg_servers[0], f"t_old_{uuid.uuid4().hex[:8]}"))
    with store.transaction():
        store._write("UPDATE {s}.meta SET value = '1' WHERE key = 'schema_version'")
    store.close()
    with pytest.raises(StoreError, match=r"store schema 1 predates the BM25 postings of schema 3, which this ragdx \(schema 4\).*pg_admin drop DSN"):
        PostgresStore(store.dsn, "read")
    drop_store(store.dsn)
    with pytest.raises(StoreError, match="no ragdx store in the schema"):
        PostgresStore(store.dsn, "read")


def test_bm25_is_fts5s_formula_computed_by_hand(tmp_path, pg_store_factory):
    """Five one-chunk documents; the query 'refund days' scored by the formula itself."""
    store = pg_store_factory("pg")
    texts = {"a": "Refunds within thirty days.", "b": "Refund refund policy.", "c": "Shipping takes days.",
             "d": "Parcels arrive soon.", "e": "Error codes explained."}
    for name, text in texts.items():
        write(tmp_path / f"{name}.txt", text)
    Ingestor(store).run(manifest(tmp_path, *[{"doc_id": n, "path": f"{n}.txt"} for n in texts]))
    assert all(c.prefix == c.text for c in store.chunks())  # a plain text's title is its first line
    found = {c.doc_id: s for c, s in store.bm25(["refund", "days"], ("public",), 10, (0.5, 1.0))}
    # rows' lengths over prefix and text: a 4 + 4, the others 3 + 3; avgdl = 32 / 5
    n, avgdl, k1, b = 5, 32 / 5, 1.2, 0.75
    idf = math.log((n - 2 + 0.5) / (2 + 0.5))  # 'refund' and 'dai' are each in 2 of 5 rows

    def part(f, length):  # f: 0.5 per occurrence in the prefix, 1.0 per occurrence in the text
        return idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * length / avgdl))
    assert found == {"a": pytest.approx(part(1.5, 8) + part(1.5, 8), rel=1e-12),
                     "b": pytest.approx(part(3.0, 6), rel=1e-12),
                     "c": pytest.approx(part(1.5, 6), rel=1e-12)}
    # a term in no row adds nothing
    assert store.bm25(["refund", "days", "a"], ("public",), 1)[0][1] == pytest.approx(
        found["a"], rel=1e-12)
    write(tmp_path / "f.txt", "Refunds, refunds.")
    Ingestor(store).run(manifest(tmp_path, *[{"doc_id": n, "path": f"{n}.txt"} for n in [*texts, "f"]]))
    (chunk, score), = store.bm25(["refund"], ("public",), 1)  # 3 of 6 rows: idf <= 0
    assert chunk.doc_id == "f" and score == pytest.approx(
        FTS5_MIN_IDF * (3.0 * 2.2) / (3.0 + 1.2 * (0.25 + 0.75 * 4 / (36 / 6))), rel=1e-12)


@pytest.fixture(scope="module")
def example_sqlite(tmp_path_factory):
    from ragdx.examples import example_dir
    store = SQLiteStore(tmp_path_factory.mktemp("sq") / "store.db")
    build_ingestor(store, load_settings(), HashingEncoder(dim=64)).run(example_dir() / "manifest.jsonl")
    yield store
    store.close()


QUESTIONS = ["Can I get a refund for a quality problem 35 days after delivery?",
             "Above which amount does a manual refund need approval from a team lead?",
             "What does error RFD-4021 mean?", "how long does shipping take", "the the of a"]


@pytest.mark.parametrize("kind", KINDS)
def test_search_on_the_example_equals_the_embedded_store(example_sqlite, pg_store_factory, kind):
    from ragdx.examples import example_dir
    store = pg_store_factory(kind)
    encoder = HashingEncoder(dim=64)
    build_ingestor(store, load_settings(), encoder).run(example_dir() / "manifest.jsonl")
    dense = DenseIndex.load(example_sqlite, encoder.space.id, 64)
    for groups in [("public",), ("public", "staff"), ("nobody",)]:
        for question in QUESTIONS:
            terms = query_terms(question)
            want = [(c.id, s) for c, s in example_sqlite.bm25(terms, groups, 20)]
            got = [(c.id, s) for c, s in store.bm25(terms, groups, 20)]
            assert got == want, (question, groups)  # the same floats, not just the same order
            vector = encoder.encode([question], kind="query").vectors[0]
            want_d = [(dense.chunk_ids[row], s) for row, s in dense.search(vector, groups, 20)]
            got_d = store.vector_search(encoder.space.id, vector, groups, 20)
            assert [c.id for c, _ in got_d] == [cid for cid, _ in want_d]
            assert np.allclose([s for _, s in got_d], [s for _, s in want_d], atol=1e-6)
    # documents holding a word, by hand: Northwind is in the refund policy (both versions: one
    # document), the quality policy, the review, the warranty, the gift cards and the API's Host
    # line; the FAQ and the error page name it only in navigation and footer, which are not indexed.
    # PayPal: the cancellation page, the order records and the refund timing
    words = ["Northwind", "Switzerland", "PayPal", "Northwind Outfitters", "Zug"]
    want_df = (14, {"Northwind": 6, "Switzerland": 1, "PayPal": 3, "Northwind Outfitters": 0, "Zug": 0})
    assert example_sqlite.document_frequency(words) == want_df
    assert store.document_frequency(words) == want_df
    assert store.verify() == []


def test_sharded_rows_live_on_the_shards(tmp_path, pg_servers, pg_store_factory):
    from ragdx.examples import example_dir
    store = pg_store_factory("sharded")
    Ingestor(store).run(example_dir() / "manifest.jsonl")
    total = store.counts()["chunks"]
    held = []
    for dsn in pg_servers[1:]:
        with psycopg_connect(dsn) as conn:
            parts = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND "
                "table_name LIKE 'chunks_p%%'", (store.schema,))]
            held.append(sum(conn.execute(f"SELECT count(*) FROM {store.schema}.{t}").fetchone()[0]
                            for t in parts))
    assert sum(held) == total and all(held)  # every chunk on a shard, and both shards hold some
    with psycopg_connect(pg_servers[0]) as conn:  # the coordinator's own tables hold none
        assert conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE 'chunks%%'",
                            (store.schema,)).fetchone()[0] == 0


def psycopg_connect(dsn):
    import psycopg
    return psycopg.connect(dsn, autocommit=True)


@pytest.mark.parametrize("kind", KINDS)
def test_build_verify_switch_rollback_keep_deletions_and_revocations(tmp_path, pg_store_factory, kind):
    store = pg_store_factory(kind)
    docs = {"refund.md": "Refunds are accepted within 30 days of delivery.",
            "shipping.md": "Parcels are delivered within 3 business days.",
            "errors.md": "Error RFD-4021 means the refund window expired."}
    for name, text in docs.items():
        write(tmp_path / name, text)
    lines = [{"doc_id": n, "path": n} for n in docs]
    settings = load_settings(overrides=["chunking.tokenizer=regex"])
    old_encoder, new_encoder = HashingEncoder(dim=32), HashingEncoder(dim=24, seed=3)
    build_ingestor(store, settings, old_encoder).run(manifest(tmp_path, *lines))
    stats = index.build_space(store, Embedder(new_encoder))
    assert stats.encoded == stats.chunks == 3
    assert {s.id: state for s, _, state, _ in store.spaces()} == {
        old_encoder.space.id: "active", new_encoder.space.id: "built"}
    assert index.verify_space(store, new_encoder.space.id, Embedder(new_encoder)) == []
    index.switch_space(store, new_encoder.space.id)
    assert store.active_space().id == new_encoder.space.id
    delete_documents(store, ["shipping.md"])
    lines = [{**line, "acl": ["staff"]} if line["doc_id"] == "refund.md" else line
             for line in lines if line["doc_id"] != "shipping.md"]
    build_ingestor(store, settings, new_encoder).run(manifest(tmp_path, *lines))
    assert index.rollback_space(store) == old_encoder.space.id
    found = DenseRetriever(store, old_encoder).run(Query("q", "refund delivery parcels", Principal()))
    assert {c.doc_id for c in found.items} == {"errors.md"}  # deleted and revoked stay so


def test_errors_name_what_is_wrong(pg_servers, pg_store_factory):
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/ragdx: cannot connect to PostgreSQL: .*"
                                         r"'make pg' starts a local one"):
        PostgresStore("postgresql://postgres@127.0.0.1:1/ragdx", connect_timeout=2)
    with pytest.raises(StoreError, match="no ragdx store in the schema 'nothing_here'"):
        PostgresStore(pg_servers[0] + "?options=-csearch_path%3Dnothing_here", "read")
    store = pg_store_factory("pg")
    reader = PostgresStore(store.dsn, "read")
    with pytest.raises(StoreError, match="opened read-only"):
        with reader.transaction():
            pass
    reader.close()


def test_a_second_writer_waits_then_gives_up_and_writes_nothing(tmp_path, pg_store_factory):
    store = pg_store_factory("pg")
    other = PostgresStore(store.dsn, "write", wait=0.5)
    write(tmp_path / "a.md", "Alpha.")
    try:
        with store.transaction():
            store.log("test", None, None, "holding the write lock")
            with pytest.raises(StoreError, match=r"another process is still writing to this store after 0\.5 s"):
                Ingestor(other).run(manifest(tmp_path, {"doc_id": "a", "path": "a.md"}))
        assert other.doc_ids() == [] and other.index_version == 1
    finally:
        other.close()


def test_pgvector_missing_from_a_database_is_named(pg_servers):
    """A role that may not create extensions, in a database without pgvector."""
    import psycopg
    admin = pg_servers[0].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS ragdx_novector")
        conn.execute("DROP ROLE IF EXISTS ragdx_plain")
        conn.execute("CREATE ROLE ragdx_plain LOGIN")
        conn.execute("CREATE DATABASE ragdx_novector OWNER ragdx_plain")
    try:
        host = pg_servers[0].split("@", 1)[1].rsplit("/", 1)[0]
        with pytest.raises(StoreError, match="pgvector is installed but not enabled in this database"):
            PostgresStore(f"postgresql://ragdx_plain@{host}/ragdx_novector")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS ragdx_novector")
            conn.execute("DROP ROLE IF EXISTS ragdx_plain")
