"""The PostgreSQL store at scale: BM25 from postings with MaxScore pruning (exactly the
embedded store's top k and floats), vectors and postings written by COPY with the HNSW index
built after the load, postings segments merged, HNSW settings, shards read in parallel."""

from __future__ import annotations

import json

import pytest

from ragdx.errors import InputError
from ragdx.ingest.embed import Embedder
from ragdx.ingest.ingestor import Ingestor, delete_documents
from ragdx.store.postgres import PostgresStore
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.conftest import write

pytestmark = pytest.mark.pg

KINDS = ["pg", "sharded"]


def _corpus(folder, n=48):
    """``n`` one-chunk documents: every one holds 'common'; 'rare' is in documents 0, 6, 12,
    18 and 24; 'mid' in every third; a fifth (4, 9, 14, ...) are readable by 'staff' only."""
    lines = []
    for d in range(n):
        words = ["common"] * (1 + d % 3) + ["filler"] * (d % 5)
        if d % 6 == 0 and d < 30:
            words += ["rare"] * (1 + d // 6)
        if d % 3 == 0:
            words.append("mid")
        write(folder / f"d{d:02d}.txt", f"Doc {d}\n\n" + " ".join(words) + ".")
        lines.append(json.dumps({"doc_id": f"d{d:02d}", "path": f"d{d:02d}.txt",
                                 "acl": ["staff"] if d % 5 == 4 else ["public"]}))
    return write(folder / "manifest.jsonl", "\n".join(lines) + "\n")


@pytest.fixture
def both(tmp_path, pg_store_factory):
    def make(kind):
        manifest = _corpus(tmp_path)
        sqlite = SQLiteStore(tmp_path / f"{kind}.db")
        store = pg_store_factory(kind)
        for s in (sqlite, store):
            Ingestor(s).run(manifest)
        return sqlite, store
    return make


def _postings_read(store, monkeypatch) -> list[list[str]]:
    """The phrases whose postings the store reads, in order (filled as it searches)."""
    read: list[list[str]] = []
    original = store._postings
    monkeypatch.setattr(store, "_postings", lambda tokens: read.append(list(tokens)) or original(tokens))
    return read


@pytest.mark.parametrize("kind", KINDS)
def test_maxscore_skips_the_frequent_term_and_keeps_fts5s_top_and_floats(both, kind, monkeypatch):
    sqlite, store = both(kind)
    read = _postings_read(store, monkeypatch)
    # 'common' is in all 48 rows (idf floored), 'mid' in 16 (a third: over an eighth, and >= 4 x 3)
    got = [(c.id, s) for c, s in store.bm25(["common", "rare", "mid"], ("public",), 3)]
    want = [(c.id, s) for c, s in sqlite.bm25(["common", "rare", "mid"], ("public",), 3)]
    assert got == want and len(got) == 3
    # the rare phrase was read; the two frequent ones never were (their rows' tf came from the chunks)
    assert read == [["rare"]]
    sqlite.close()


@pytest.mark.parametrize("kind", KINDS)
def test_when_the_frequent_terms_decide_they_are_read_and_the_top_is_still_exact(both, kind, monkeypatch):
    sqlite, store = both(kind)
    read = _postings_read(store, monkeypatch)
    # 'mid' (16 rows, >= 4 x 4) is skipped first, but 'staff' reads one row holding 'rare' (d24):
    # there is no 4th score to prune against, so 'mid' is read after all (d09, d24 and d39 hold it)
    found = store.bm25(["rare", "mid"], ("staff",), 4)
    assert [(c.id, s) for c, s in found] == [(c.id, s) for c, s in sqlite.bm25(["rare", "mid"], ("staff",), 4)]
    assert read == [["rare"], ["mid"]] and [c.doc_id for c, _ in found] == ["d24", "d09", "d39"]
    sqlite.close()


def _index_names(store, conn_dsns):
    import psycopg
    names = []
    for dsn in conn_dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            names += [r[0] for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE '%%USING hnsw%%' "
                "ORDER BY 1", (store.schema,))]
    return names


def test_the_hnsw_index_is_built_after_the_load_and_rebuilt_after_a_larger_one(tmp_path, pg_store_factory,
                                                                                 pg_servers, caplog):
    store = pg_store_factory("pg")
    encoder = HashingEncoder(dim=32)
    caplog.set_level("INFO", logger="ragdx.store")
    Ingestor(store, embedder=Embedder(encoder)).run(_corpus(tmp_path / "a", 6))
    assert _index_names(store, pg_servers[:1]) == ["vec_1_hnsw"]
    assert [r.message for r in caplog.records if "HNSW" in r.message][0].startswith("built the HNSW index of vec_1")
    caplog.clear()
    # 48 documents: more vectors than the table holds, so the index is dropped, and built again after
    Ingestor(store, embedder=Embedder(encoder)).run(_corpus(tmp_path / "b", 48))
    assert len([r for r in caplog.records if r.message.startswith("built the HNSW index of vec_1")]) == 1
    caplog.clear()
    write(tmp_path / "b" / "d00.txt", "Doc 0\n\nchanged words.")
    Ingestor(store, embedder=Embedder(encoder)).run(tmp_path / "b" / "manifest.jsonl")  # 1 of 49: kept
    assert not [r for r in caplog.records if "HNSW" in r.message]
    assert _index_names(store, pg_servers[:1]) == ["vec_1_hnsw"]
    assert store.counts()["chunks"] == 48 + 1 and store.verify() == []  # d00..d05 came again unchanged
    with store._pool.connection() as conn:
        conn.execute("SET enable_seqscan = off")  # 49 rows: the planner would rather read them all
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT chunk_rowid FROM vec_1 ORDER BY embedding <#> %s::vector LIMIT 5", (str([0.1] * 32),)))
    assert "Index Scan using vec_1_hnsw" in plan


def test_sharded_vectors_get_an_hnsw_index_per_part_on_the_shards(tmp_path, pg_store_factory, pg_servers):
    store = pg_store_factory("sharded")
    Ingestor(store, embedder=Embedder(HashingEncoder(dim=32))).run(_corpus(tmp_path, 12))
    assert _index_names(store, pg_servers[:1]) == []
    assert _index_names(store, pg_servers[1:]) == ["vec_1_p0_hnsw", "vec_1_p2_hnsw", "vec_1_p1_hnsw",
                                                   "vec_1_p3_hnsw"]


@pytest.mark.parametrize("kind", KINDS)
def test_segments_are_merged_and_deleted_rows_leave_the_postings(tmp_path, pg_store_factory, kind):
    store = pg_store_factory(kind)
    sqlite = SQLiteStore(tmp_path / "s.db")
    manifest = _corpus(tmp_path, 12)
    for s in (sqlite, store):
        Ingestor(s).run(manifest)
        write(tmp_path / "late.txt", "Late\n\nrare rare rare.")
        Ingestor(s).run(write(tmp_path / "late.jsonl", json.dumps({"doc_id": "late", "path": "late.txt"}) + "\n"))
        delete_documents(s, ["d00"])
    segments = "SELECT count(DISTINCT seg), count(*) FROM {s}.postings"
    assert store._one(segments)[0] == 2  # one per ingest; the deletion wrote none
    before = [(c.id, s) for c, s in store.bm25(["rare", "common"], ("public",), 5)]
    assert before == [(c.id, s) for c, s in sqlite.bm25(["rare", "common"], ("public",), 5)]
    stale = store._one("SELECT count(*) FROM {s}.postings WHERE term = 'rare'")[0]
    store._compact_postings(most=1)
    assert store._one(segments)[0] == 1
    # 'rare' was in d00, d07 and late: after the merge, the deleted d00's row is gone from its postings
    rows = store._postings(["rare"])["rare"].rowids.tolist()
    assert len(rows) == 2 and stale >= 2
    assert [(c.id, s) for c, s in store.bm25(["rare", "common"], ("public",), 5)] == before
    sqlite.close()


def test_hnsw_settings_reach_the_connections_and_bad_ones_are_named(pg_servers, pg_store_factory):
    store = pg_store_factory("pg")
    with PostgresStore(store.dsn, "read", hnsw_ef_search=57) as reader:
        assert reader._one("SHOW hnsw.ef_search") == ("57",)
    with pytest.raises(InputError, match=r"hnsw_m must be a whole number >= 2, not 0"):
        PostgresStore(store.dsn, "read", hnsw_m=0)
