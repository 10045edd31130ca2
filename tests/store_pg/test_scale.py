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
    """The phrases whose postings the store reads, in order (filled as it searches): those the
    statistics' statement sent whole (every part holding the phrase sent it), then each read
    of its own."""
    read: list[list[str]] = []
    original, with_statistics = store._postings, store._statistics_and_postings

    def statistics(tokens, limit):
        found = with_statistics(tokens, limit)
        used = sorted(t for t in found[3] if t not in found[4])
        if used:
            read.append(used)
        return found
    monkeypatch.setattr(store, "_statistics_and_postings", statistics)
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


@pytest.mark.parametrize("kind", KINDS)
def test_a_frequent_phrase_alone_is_read_after_the_statistics_and_scored_exactly(both, kind, monkeypatch):
    sqlite, store = both(kind)
    read = _postings_read(store, monkeypatch)
    # 'common' is in every row: no part sends its postings with the statistics, and as the only
    # phrase it cannot be skipped, so it is read on its own
    got = [(c.id, s) for c, s in store.bm25(["common"], ("public",), 3)]
    assert got == [(c.id, s) for c, s in sqlite.bm25(["common"], ("public",), 3)] and len(got) == 3
    assert read == [["common"]]
    sqlite.close()


def _round_trips(store, monkeypatch) -> list[str]:
    """What the store asks its servers, in order: "fan" per statement sent to every shard (or
    to the one server), "coordinator" per statement on the coordinator."""
    asked: list[str] = []
    fan, one = store._fan, store._all
    monkeypatch.setattr(store, "_fan", lambda *a, **k: asked.append("fan") or fan(*a, **k))
    monkeypatch.setattr(store, "_all", lambda *a, **k: asked.append("coordinator") or one(*a, **k))
    return asked


def test_a_sharded_search_takes_one_round_trip_to_the_shards_per_step(tmp_path, pg_store_factory, monkeypatch):
    """BM25: the statistics with the rare phrases' postings, then the access check with the hits'
    chunk rows and statuses; dense: the search with its hits' rows and statuses; the access
    re-check: one statement per shard (it went through the coordinator's foreign tables, part
    after part). The same results as one server."""
    encoder = HashingEncoder(dim=32)
    manifest = _corpus(tmp_path, 48)
    one, sharded = pg_store_factory("pg"), pg_store_factory("sharded")
    for store in (one, sharded):
        Ingestor(store, embedder=Embedder(encoder)).run(manifest)
    asked = _round_trips(sharded, monkeypatch)
    from ragdx.types import VersionFilter
    current = VersionFilter(current_only=True)
    # 'rare' is in 5 rows (d24 readable by 'staff' only): no part holds enough of them to keep
    # its postings back
    got = sharded.bm25(["rare"], ("public",), 5, versions=current)
    assert asked == ["fan", "fan"]
    assert [(c.id, s) for c, s in got] == [(c.id, s) for c, s in one.bm25(["rare"], ("public",), 5,
                                                                          versions=current)]
    assert [c.doc_id for c, _ in got] == ["d18", "d12", "d06", "d00"]
    asked.clear()
    vector = encoder.encode(["rare mid"], kind="query").vectors[0]
    # k 40: each part first sends 21 rows (ceil(1.5 x 56 / 4)), more than any part holds, so
    # none is cut and there is no second round (the next test has one)
    got = sharded.vector_search(encoder.space.id, vector, ("public",), 40, exact=False, versions=current)
    assert asked == ["fan"]
    want = one.vector_search(encoder.space.id, vector, ("public",), 40, exact=False, versions=current)
    assert [(c.id, s) for c, s in got] == [(c.id, s) for c, s in want] and len(got) == 39
    asked.clear()
    keys = [(c.doc_id, c.version) for c, _ in got] + [("d04", "1"), ("nope", "1")]
    assert sharded.readable_many(("public",), keys) == {(c.doc_id, c.version) for c, _ in got}
    assert asked == ["fan"]


@pytest.mark.parametrize("exact", [True, False])
def test_a_sharded_dense_search_reads_a_share_of_each_part_and_the_rest_only_where_cut(
        tmp_path, pg_store_factory, monkeypatch, exact):
    """k 1 asks the top 17 (k + 16): each of the four parts first sends its top 7 (ceil(1.5 x
    17 / 4)), not 17; a part whose 7th row scores at or above the merged 17th sends its rows
    8 to 17 in a second round. The results are one server's, at every k. (The query shares
    'common' with every chunk, so no two scores tie: tied rows at the cut could come in another
    order from another HNSW graph.)"""
    encoder = HashingEncoder(dim=32)
    manifest = _corpus(tmp_path, 48)
    one, sharded = pg_store_factory("pg"), pg_store_factory("sharded")
    for store in (one, sharded):
        Ingestor(store, embedder=Embedder(encoder)).run(manifest)
    asked: list = []
    fan = sharded._fan
    monkeypatch.setattr(sharded, "_fan", lambda sql, *a, **k: asked.append(
        ("LIMIT" + sql("_p0").split("LIMIT")[1].split(")")[0], k.get("parts"))) or fan(sql, *a, **k))
    vector = encoder.encode(["common rare mid filler"], kind="query").vectors[0]
    sizes = []
    for n in (1, 5, 20, 60):
        got = sharded.vector_search(encoder.space.id, vector, ("public",), n, exact=exact)
        want = one.vector_search(encoder.space.id, vector, ("public",), n, exact=exact)
        assert [(c.id, s) for c, s in got] == [(c.id, s) for c, s in want]
        sizes.append(len(got))
    assert sizes == [1, 5, 20, 39]  # 39 readable chunks
    # k 1: 17 rows, 7 from each part first, part 1 (the most rows) cut at or above the 17th;
    # k 5: 21 rows, 8 first, part 1 cut; k 20: 36 rows, 14 first, part 1 cut; k 60: 76 rows, 29
    # first, no part has as many readable rows (39 over four parts), none is cut
    assert asked == [("LIMIT 7 OFFSET 0", None), ("LIMIT 10 OFFSET 7", [1]),
                     ("LIMIT 8 OFFSET 0", None), ("LIMIT 13 OFFSET 8", [1]),
                     ("LIMIT 14 OFFSET 0", None), ("LIMIT 22 OFFSET 14", [1]),
                     ("LIMIT 29 OFFSET 0", None)]


def test_store_sessions_plan_each_statement_and_compile_nothing(pg_store_factory):
    """No JIT (compiling an HNSW search's expressions took ten times its index scan) and a
    custom plan per execution (a generic plan of "rowid = ANY($1)" read whole parts), on the
    coordinator's connections and on the shards'."""
    store = pg_store_factory("sharded")
    assert store._one("SHOW jit") == ("off",)
    assert store._one("SHOW plan_cache_mode") == ("force_custom_plan",)
    assert store._on_servers(lambda conn, parts: conn.execute(
        "SELECT current_setting('jit'), current_setting('plan_cache_mode')").fetchone()) == [
        ("off", "force_custom_plan")] * 2


def test_a_space_registered_by_a_rolled_back_transaction_is_forgotten(tmp_path, pg_store_factory):
    store = pg_store_factory("pg")
    encoder = HashingEncoder(dim=16)
    with pytest.raises(RuntimeError, match="stop"):
        with store.transaction():
            store.register_space(encoder.space, "hashing")
            assert store._space_table(encoder.space.id) == ("vec_1", 16)
            raise RuntimeError("stop")
    assert store._space_table(encoder.space.id) is None
    # registered again, the space gets the next table (the sequence does not roll back)
    Ingestor(store, embedder=Embedder(encoder)).run(_corpus(tmp_path, 6))
    assert store._space_table(encoder.space.id) == ("vec_2", 16)
    vector = encoder.encode(["rare"], kind="query").vectors[0]
    assert len(store.vector_search(encoder.space.id, vector, ("public",), 3)) == 3


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


def _statements(monkeypatch) -> list[str]:
    """Every statement the process sends one at a time (``executemany`` and ``COPY`` batches not
    counted, nor the settings of a pool's new connection), filled as it runs."""
    import psycopg
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):
        if not str(query).startswith("SET "):
            sent.append(str(query))
        return execute(self, query, *args, **kwargs)
    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return sent


@pytest.mark.parametrize("kind", KINDS)
def test_ingest_sends_no_statement_per_document(tmp_path, pg_store_factory, monkeypatch, kind):
    """The version look-ups (three a document: before parsing, before writing, and the versions
    to supersede) are one per batch, and a version's rows (documents, acl, tombstone, log) go
    with the batch's flush: ingesting 30 documents sends exactly the statements 10 do."""
    counts = []
    for n in (10, 30):
        manifest = _corpus(tmp_path / str(n), n)
        store = pg_store_factory(kind)
        sent = _statements(monkeypatch)
        Ingestor(store, embedder=Embedder(HashingEncoder(dim=16))).run(manifest)
        monkeypatch.undo()
        counts.append(len(sent))
        assert store.counts()["versions"] == n and len(store.log_entries()) == n + 2  # + the space's two
    assert counts[0] == counts[1]


@pytest.mark.parametrize("kind", ["sqlite", *KINDS])
def test_ingest_reads_a_batchs_versions_in_one_look_up_and_keeps_them_right(tmp_path, pg_store_factory,
                                                                           monkeypatch, kind):
    """One ``versions_of`` before parsing and one inside the write transaction, not a
    ``version``/``versions`` per document; what it writes is what the per-document look-ups
    wrote: a version listed twice, a new version superseding the stored one, an attribute
    change, each logged in order; a bad entry or a changed text under a stored version leaves
    the store as it was."""
    store = SQLiteStore(tmp_path / "s.db") if kind == "sqlite" else pg_store_factory(kind)
    for name, text in (("a1", "Alpha one."), ("a2", "Alpha two."), ("b1", "Beta one."), ("b2", "Beta two.")):
        write(tmp_path / f"{name}.txt", text)

    def manifest(name, *rows):
        return write(tmp_path / name, "".join(json.dumps(r) + "\n" for r in rows))

    Ingestor(store).run(manifest("m1.jsonl", {"doc_id": "a", "path": "a1.txt", "version": "1"},
                                 {"doc_id": "b", "path": "b1.txt", "version": "1"}))
    calls: list[str] = []
    for method in ("version", "versions", "versions_of"):
        original = getattr(store, method)
        monkeypatch.setattr(store, method, lambda *a, _m=method, _o=original, **k: calls.append(_m) or _o(*a, **k))
    report = Ingestor(store).run(manifest(
        "m2.jsonl",
        {"doc_id": "a", "path": "a1.txt", "version": "1", "acl": ["staff"]},  # attributes only
        {"doc_id": "a", "path": "a2.txt", "version": "2"},                    # supersedes a@1
        {"doc_id": "b", "path": "b2.txt", "version": "2"}))                   # supersedes stored b@1
    # (the one ``version``: update_attributes reads the stored version it changes, a@1)
    assert calls == ["versions_of", "versions_of", "version"]
    monkeypatch.undo()
    assert [(a.doc_id, a.version, a.action.value, a.detail) for a in report.actions] == [
        ("a", "1", "update", "acl, status"), ("a", "2", "add", ""), ("b", "2", "add", "")]
    assert {(v.document.doc_id, v.document.version): (v.document.status.value, v.document.acl)
            for v in store.versions()} == {("a", "1"): ("superseded", ("staff",)), ("b", "1"): ("superseded", ("public",)),
                                          ("a", "2"): ("current", ("public",)), ("b", "2"): ("current", ("public",))}
    assert [(e.op, e.doc_id, e.version) for e in store.log_entries()] == [
        ("add", "a", "1"), ("add", "b", "1"), ("acl", "a", "1"), ("status", "a", "1"),
        ("add", "a", "2"), ("add", "b", "2"), ("status", "b", "1")]
    before = (store.counts(), store.index_version, len(store.log_entries()))
    write(tmp_path / "b2.txt", "Beta two, changed.")
    with pytest.raises(InputError, match="version '2' of 'b' is already stored with different content"):
        Ingestor(store).run(manifest("m3.jsonl", {"doc_id": "c", "path": "a1.txt", "version": "1"},
                                     {"doc_id": "b", "path": "b2.txt", "version": "2"}))
    with pytest.raises(InputError, match="file not found"):
        Ingestor(store).run(manifest("m4.jsonl", {"doc_id": "c", "path": "a1.txt", "version": "1"},
                                     {"doc_id": "d", "path": "nope.txt", "version": "1"}))
    assert (store.counts(), store.index_version, len(store.log_entries())) == before
    store.close()


def test_a_shards_parts_are_searched_at_once_each_by_a_statement_of_its_own(tmp_path, pg_store_factory,
                                                                           monkeypatch):
    """Two parts per shard: each part's statement goes alone (no UNION ALL of a shard's parts,
    which its server ran one after the other), all four at the same time on four threads, and
    the results are one server's."""
    import threading

    import psycopg
    manifest = _corpus(tmp_path, 48)
    one, sharded = pg_store_factory("pg"), pg_store_factory("sharded")
    for store in (one, sharded):
        Ingestor(store).run(manifest)
    ran: list[tuple[str, int]] = []
    execute = psycopg.Cursor.execute

    def recorded(self, query, *args, **kwargs):
        if "acl_p" in str(query):
            ran.append((str(query), threading.get_ident()))
        return execute(self, query, *args, **kwargs)
    monkeypatch.setattr(psycopg.Cursor, "execute", recorded)
    keys = sorted((v.document.doc_id, v.document.version) for v in one.versions())[:12]
    ran.clear()
    assert sharded.readable_many(("public",), keys) == one.readable_many(("public",), keys) == {
        key for key in keys if int(key[0][1:]) % 5 != 4}  # d04 and d09 are staff's
    assert sorted(q.count("acl_p") for q, _ in ran) == [1, 1, 1, 1]
    assert sorted(int(q.split("acl_p")[1][0]) for q, _ in ran) == [0, 1, 2, 3]
    assert len({thread for _, thread in ran}) == 4
