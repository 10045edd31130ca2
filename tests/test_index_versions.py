"""Index versions built beside the live one (issue 15): a new chunker or retention builds a version
that queries do not see, `verify` checks it, `switch` makes it live at once (caches and the
keyword mirror follow), and `rollback` returns to the previous one without bringing back a
deleted document or a revoked permission. Keyword statistics under a retention, by hand. What
every backend does alike (deletions and revocations across a switch and a rollback, verify's
coverage, the CLI, SIGKILL at each step) is tested on SQLite and PostgreSQL together in
tests/store_pg/test_index_versions_backends.py; this module holds SQLite's own."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from ragdx.index import checks, versions as indexing
from ragdx.protocols import IndexBuildStore
from ragdx.build import build_ingestor, build_pipeline
from ragdx.caching import CachedPipeline
from ragdx.cli import main
from ragdx.config import load_settings
from ragdx.errors import ConfigError, InputError, StoreError
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
from ragdx.ingest.ingestor import delete_documents
from ragdx.queryset import load_queries
from ragdx.store.cache import SQLiteCache
from ragdx.store.sqlite import FTS_BM25_B, FTS_BM25_K1, INITIAL_INDEX, SCHEMA_VERSION, SQLiteStore
from ragdx.types import Principal, Query, SpaceState
from tests.conftest import snapshot, write

SETTINGS = ["retrieval.dense.enabled=false", "chunking.tokenizer=regex", "rerank.method=none"]
SMALL = ChunkerConfig(max_tokens=12)  # the default cuts each document below into 2 chunks, this into 4+
QUESTION = "Are refunds accepted within 30 days of delivery?"
DOCS = {
    "refund.md": "# Refund policy\n\nRefunds are accepted within 30 days of delivery. Quality defects may "
                 "be refunded within 90 days.\n\n## Exceptions\n\nGift cards are never refunded at all.\n",
    "shipping.md": "# Shipping\n\nParcels travel by courier and arrive within 3 working days.\n\n## Abroad\n\n"
                   "Parcels abroad take two weeks and cost extra.\n",
    "salaries.md": "# Salaries\n\nThe salary bands are secret and reviewed every spring.\n\n## Bonus\n\n"
                   "Bonuses are paid in March to staff only.\n",
}


def manifest(folder: Path, docs=DOCS, acl=None) -> Path:
    acl = acl or {"salaries.md": ["staff"]}
    for name, text in docs.items():
        write(folder / name, text)
    return write(folder / "m.jsonl", "\n".join(json.dumps(
        {"doc_id": name, "path": name, "acl": acl.get(name, ["public"])}) for name in docs) + "\n")


def ingest(store: SQLiteStore, folder: Path, **kw) -> None:
    build_ingestor(store, load_settings(overrides=SETTINGS)).run(manifest(folder, **kw))


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "s.db")
    ingest(s, tmp_path / "c")
    yield s
    s.close()


def build(store: IndexBuildStore, config: ChunkerConfig = SMALL, retain: int | None = None) -> str:
    return indexing.build_index(store, config, RegexTokenCounter(), retain_superseded=retain).index_id


def configs(store: IndexBuildStore) -> set[str]:
    return {c.config_id for c in store.chunks()}


def found(store: IndexBuildStore, terms, groups=("public",)) -> set[str]:
    return {c.doc_id for c, _ in store.bm25(terms, groups, 50)}


def test_a_built_version_is_invisible_until_the_switch_and_then_alone_live(store):
    live_config = configs(store)
    generation = store.index_version
    index_id = build(store)
    assert store.index_version == generation  # nothing a query or a cache reads changed
    assert configs(store) == live_config and len(store.chunks()) == 6
    assert [c.config_id for c, _ in store.bm25(["parcels"], ("public",), 5)] == [live_config.pop()] * 2
    assert indexing.verify_index(store, index_id).problems == ()
    assert indexing.switch_index(store, index_id) == INITIAL_INDEX
    assert configs(store) == {SMALL.id}
    assert len(store.chunks()) > 6
    # the keyword mirror was rebuilt: every hit is a new chunk, scored as FTS5 scores it
    assert store.bm25(["parcels", "abroad"], ("public",), 10) == store.fts5_bm25(["parcels", "abroad"], ("public",), 10)
    assert {c.config_id for c, _ in store.bm25(["parcels"], ("public",), 10)} == {SMALL.id}
    assert store.verify() == [] and store.audit()[0] == []
    states = {v.id: v.state for v in store.index_versions()}
    assert states == {INITIAL_INDEX: SpaceState.RETIRED, index_id: SpaceState.ACTIVE}


def test_a_switch_drops_every_cached_result(store, tmp_path):
    pipeline = CachedPipeline(build_pipeline(store, load_settings(overrides=SETTINGS)),
                              SQLiteCache(tmp_path / "s.db.cache"))
    query = Query("q", QUESTION, Principal("ann", ("public",)))
    pipeline.run(query)
    assert pipeline.run(query).cached  # premise: the answer is cached
    index_id = build(store)
    assert pipeline.run(query).cached  # a build beside the live index changes nothing served
    indexing.switch_index(store, index_id, force=True)
    trace = pipeline.run(query)
    assert trace.cached == ()
    new_chunks = {c.id for c in store.chunks() if c.config_id == SMALL.id}
    assert trace.context.units and {i.chunk_id for r in trace.ranked for i in r.items} <= new_chunks


def test_a_deleted_document_never_resurfaces_through_the_cache_across_a_switch_and_rollback(store, tmp_path):
    pipeline = CachedPipeline(build_pipeline(store, load_settings(overrides=SETTINGS)),
                              SQLiteCache(tmp_path / "s.db.cache"))
    query = Query("q", QUESTION, Principal("ann", ("public",)))

    def cited(trace):
        return {u.doc_id for u in trace.context.units}

    assert "refund.md" in cited(pipeline.run(query))
    indexing.switch_index(store, build(store), force=True)
    assert "refund.md" in cited(pipeline.run(query)) and pipeline.run(query).cached  # cached on ix_1
    delete_documents(store, ["refund.md"])
    indexing.rollback_index(store)
    after = pipeline.run(query)
    assert after.cached == () and "refund.md" not in cited(after)
    assert "refund.md" not in {i.doc_id for r in after.ranked for i in r.items}


def test_verify_finds_restricted_text_filed_under_a_public_document(store):
    index_id = build(store)
    # the bug a probe guards: a staged chunk of salaries.md attributed to refund.md
    store._db.execute("UPDATE staged_chunks SET doc_id = 'refund.md', version = ? WHERE index_id = ? AND "
                      "doc_id = 'salaries.md'", (store.latest("refund.md").document.version, index_id))
    problems = indexing.verify_index(store, index_id).problems
    assert any(p.startswith("permission: a public principal asking 'Salaries The salary bands") for p in problems)
    assert any("text is not parsed_text" in p for p in problems)
    assert store.index_version_of(index_id).state is SpaceState.BUILT


def test_verify_reports_a_required_span_the_new_index_no_longer_holds(store, tmp_path):
    # retention 0 takes the superseded version out; a query pinned to it loses its span
    old = store.latest("refund.md").document.version
    docs = dict(DOCS, **{"refund.md": DOCS["refund.md"].replace("30 days", "45 days")})
    ingest(store, tmp_path / "c", docs=docs)
    queries = write(tmp_path / "q.jsonl", json.dumps({
        "id": "q1", "question": QUESTION,
        "required": [[{"doc": "refund.md", "version": old, "quote": "accepted within 30 days"}]]}) + "\n")
    index_id = build(store, ChunkerConfig(max_tokens=store_config(store)), retain=0)
    code = main(["index", "verify", "--store", str(store.path), "--index", index_id, "--queries", str(queries)])
    assert code == 1
    check = indexing.verify_index(store, index_id, load_queries(queries))
    assert [p.split(" (")[0] for p in check.problems] == ["spans: query 'q1': group 0 alternative 0"]


def store_config(store: SQLiteStore) -> int:
    return json.loads(store.parse_configs()[0][0])["max_tokens"]


def test_ingest_refuses_other_chunker_settings_after_a_switch(store, tmp_path):
    indexing.switch_index(store, build(store), force=True)
    before = snapshot(store.path)
    with pytest.raises(ConfigError, match=r"max_tokens: 12 \(live\) vs 200"):
        ingest(store, tmp_path / "c", docs=dict(DOCS, **{"new.md": "# New\n\nSomething new.\n"}))
    assert snapshot(store.path) == before


def test_build_refuses_the_live_settings_and_stores_without_index_versions(store):
    with pytest.raises(InputError, match="already has these settings"):
        build(store, ChunkerConfig(max_tokens=store_config(store)))
    with pytest.raises(StoreError, match="^object keeps no index versions"):
        indexing.build_index(object(), SMALL, RegexTokenCounter())  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="^object keeps no index versions"):
        indexing.drop_index(object(), "ix_1")  # type: ignore[arg-type]


# -- retention and the keyword statistics, by hand -----------------------------------------
# Plain-text versions: one chunk each, whose prefix (the title: the first line) is its text,
# so a row's length is twice its words. a@1 "apple banana cherry kiwi" (8 tokens), a@2 "apple
# banana" (4), a@3 "apple fig" (4, current), b@1 "banana date egg" (6, current).
VERSIONS = [("a", "1", "apple banana cherry kiwi"), ("b", "1", "banana date egg"), ("a", "2", "apple banana"),
            ("a", "3", "apple fig")]


@pytest.fixture
def versions(tmp_path):
    s = SQLiteStore(tmp_path / "v.db")
    for doc_id, version, text in VERSIONS:
        write(tmp_path / f"{doc_id}{version}.txt", text)
        m = write(tmp_path / "m.jsonl", json.dumps({"doc_id": doc_id, "version": version,
                                                    "path": f"{doc_id}{version}.txt"}) + "\n")
        build_ingestor(s, load_settings(overrides=SETTINGS)).run(m)
    yield s
    s.close()


def retain(store: SQLiteStore, keep: int) -> None:
    indexing.switch_index(store, build(store, ChunkerConfig(max_tokens=store_config(store)), retain=keep), force=True)


@pytest.mark.parametrize("keep, n, avgdl, df", [
    (None, 4, (8 + 6 + 4 + 4) / 4, {"banana": 3, "appl": 3, "cherri": 1, "fig": 1}),
    (1, 3, (6 + 4 + 4) / 3, {"banana": 2, "appl": 2, "cherri": 0, "fig": 1}),
    (0, 2, (6 + 4) / 2, {"banana": 1, "appl": 1, "cherri": 0, "fig": 1}),
])
def test_keyword_statistics_count_only_the_versions_retained(versions, keep, n, avgdl, df):
    if keep is not None:
        retain(versions, keep)
    assert versions.keyword_statistics(list(df)) == (n, avgdl, df)
    assert versions.verify() == []


def test_a_bm25_score_after_retention_is_the_formula_on_the_retained_versions(versions):
    retain(versions, 1)
    # N = 3 rows (a@2, a@3, b@1), avgdl 14/3; "date" is in b@1 only, once in its prefix and once in
    # its text (weights 0.5 and 1), and b@1 is 6 tokens long
    idf = math.log((3 - 1 + 0.5) / (1 + 0.5))
    f = 0.5 + 1.0
    expected = idf * f * (FTS_BM25_K1 + 1) / (f + FTS_BM25_K1 * (1 - FTS_BM25_B + FTS_BM25_B * 6 / (14 / 3)))
    [(chunk, score)] = versions.bm25(["date"], ("public",), 5)
    assert (chunk.doc_id, chunk.version) == ("b", "1")
    assert score == pytest.approx(expected, rel=1e-9)


def test_the_next_ingest_applies_the_retention_and_logs_it(versions, tmp_path):
    retain(versions, 1)
    write(tmp_path / "a4.txt", "apple grape")
    build_ingestor(versions, load_settings(overrides=SETTINGS)).run(write(
        tmp_path / "m.jsonl", json.dumps({"doc_id": "a", "version": "4", "path": "a4.txt"}) + "\n"))
    assert sorted({(c.doc_id, c.version) for c in versions.chunks()}) == [("a", "3"), ("a", "4"), ("b", "1")]
    assert [(e.op, e.doc_id, e.version) for e in versions.log_entries()][-1] == ("unindex", "a", "2")
    assert versions.texts("a", "2")[1] == "apple banana"  # the text stays stored
    assert versions.keyword_statistics(["appl"]) == (3, (4 + 4 + 6) / 3, {"appl": 2})


# -- schema ----------------------------------------------------------------------------------
def test_a_schema_1_store_is_read_as_is_and_migrated_when_written(store, tmp_path):
    path = store.path
    store.close()
    schema_1(path)
    with SQLiteStore(path, "read") as old:
        assert [(v.id, v.state, v.chunks) for v in old.index_versions()] == [(INITIAL_INDEX, SpaceState.ACTIVE, 6)]
        assert found(old, ["parcels"]) == {"shipping.md"}
    with SQLiteStore(path, "write") as migrated:
        assert migrated._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert build(migrated) == "ix_1" and migrated.verify() == []


def test_vectors_follow_the_chunks_through_a_switch_and_a_rollback(tmp_path):
    from ragdx.ingest.embed import Embedder
    from ragdx.testing.encoders import HashingEncoder
    encoder = HashingEncoder()
    dense = ["chunking.tokenizer=regex", "rerank.method=none", "generation.semantic_weight=0"]
    with SQLiteStore(tmp_path / "d.db") as store:
        build_ingestor(store, load_settings(overrides=dense), encoder=encoder).run(manifest(tmp_path / "c"))
        space = store.active_space().id
        live = store.vector_table(space)[0]
        with pytest.raises(ConfigError, match="new chunks need its vectors"):
            build(store)
        embedder = Embedder(encoder, backend="HashingEncoder")
        built = indexing.build_index(store, SMALL, RegexTokenCounter(), embedder=embedder)
        assert built.embedding.chunks == built.chunks
        assert store.vector_table(space)[0] == live  # the live vectors are untouched
        indexing.switch_index(store, built.index_id, force=True, embedder=embedder)
        ids = store.vector_table(space)[0]
        assert sorted(ids) == sorted(c.id for c in store.chunks() if c.duplicate_of is None)
        assert set(ids).isdisjoint(live)
        pipeline = build_pipeline(store, load_settings(overrides=dense), encoder=encoder)
        trace = pipeline.run(Query("q", QUESTION, Principal("ann", ("public",))))
        assert {c.chunk_id for c in trace.stage("dense").items} <= set(ids)
        indexing.rollback_index(store, embedder=embedder)
        assert sorted(store.vector_table(space)[0]) == sorted(live)
        assert store.audit() == ([], [f"index version {built.index_id} (retired) held beside the live one: "
                                      f"{built.chunks} chunks of 3 versions, invisible to queries"])


def test_a_parser_version_change_builds_a_version_parsed_again(store):
    # the store as an older markdown parser left it: same text, another parser id
    store._db.execute("UPDATE documents SET parser = 'markdown/0'")
    live_config = ChunkerConfig(max_tokens=store_config(store))
    built = indexing.build_index(store, live_config, RegexTokenCounter())
    assert (built.chunked, built.copied) == (3, 0)  # nothing copied: every version parsed again
    assert store.index_version_of(built.index_id).settings.parsers == (("markdown", "markdown/1"),)
    indexing.switch_index(store, built.index_id, force=True)
    assert {v.parser for v in store.versions()} == {"markdown/1"} and store.verify() == []
    assert found(store, ["parcels"]) == {"shipping.md"} and len(store.chunks()) == 6
    indexing.rollback_index(store)
    assert {v.parser for v in store.versions()} == {"markdown/0"}
    assert found(store, ["parcels"]) == {"shipping.md"} and len(store.chunks()) == 6


# -- races and states (each test stands another writer in the gap a check used to leave) ---
def other_writer(store: SQLiteStore) -> SQLiteStore:
    return SQLiteStore(store.path, "write")


def before_first_transaction(monkeypatch, store: SQLiteStore, act) -> None:
    """Run ``act()`` (another process's write) just before ``store``'s next transaction begins."""
    original, done = store.transaction, []

    def transaction():
        if not done:
            done.append(act())
        return original()
    monkeypatch.setattr(store, "transaction", transaction)


def test_an_ingest_sees_a_switch_committed_after_it_parsed(store, tmp_path, monkeypatch):
    index_id = build(store)
    indexing.verify_index(store, index_id)
    ingestor = build_ingestor(store, load_settings(overrides=SETTINGS))  # the default chunker, not SMALL
    with other_writer(store) as other:
        before_first_transaction(monkeypatch, store, lambda: indexing.switch_index(other, index_id))
        with pytest.raises(ConfigError, match=r"max_tokens: 12 \(live\) vs 200"):
            ingestor.run(manifest(tmp_path / "c", docs=dict(DOCS, **{"new.md": "# New\n\nParcels by night.\n"})))
    assert store.live_index().id == index_id and configs(store) == {SMALL.id}
    assert store.chunks("new.md") == []


def test_a_parser_change_is_refused_by_an_ingest_into_a_built_live_index(store, tmp_path):
    indexing.switch_index(store, build(store), force=True)
    store._db.execute("UPDATE index_versions SET body = REPLACE(body, 'markdown/1', 'markdown/0')")  # an older ragdx
    before = snapshot(store.path)
    settings = load_settings(overrides=SETTINGS + ["chunking.max_tokens=12"])  # the live chunker
    with pytest.raises(ConfigError, match="parses markdown with markdown/0, and this ragdx parses it with markdown/1"):
        build_ingestor(store, settings).run(manifest(tmp_path / "c", docs=dict(
            DOCS, **{"shipping.md": DOCS["shipping.md"].replace("two", "three")})))
    assert snapshot(store.path) == before


def test_building_the_retired_versions_settings_makes_a_new_version_and_keeps_the_rollback(store):
    first = build(store)
    indexing.switch_index(store, first, force=True)
    indexing.switch_index(store, build(store, ChunkerConfig(max_tokens=20)), force=True)
    assert store.index_version_of(first).state is SpaceState.RETIRED
    again = build(store)  # SMALL: the retired version's settings
    assert again not in (first, INITIAL_INDEX)
    assert store.index_version_of(first).state is SpaceState.RETIRED
    assert indexing.rollback_index(store) == first and configs(store) == {SMALL.id}


def test_a_failed_verify_takes_back_verified(store, tmp_path):
    old = store.latest("refund.md").document.version
    ingest(store, tmp_path / "c", docs=dict(DOCS, **{"refund.md": DOCS["refund.md"].replace("30 days", "45 days")}))
    queries = load_queries(write(tmp_path / "q.jsonl", json.dumps({
        "id": "q1", "question": QUESTION,
        "required": [[{"doc": "refund.md", "version": old, "quote": "accepted within 30 days"}]]}) + "\n"))
    index_id = build(store, ChunkerConfig(max_tokens=store_config(store)), retain=0)
    assert indexing.verify_index(store, index_id).state is SpaceState.VERIFIED  # without the queries
    check = indexing.verify_index(store, index_id, queries)
    assert check.problems and check.state is SpaceState.BUILT
    with pytest.raises(InputError, match="is built, not verified"):
        indexing.switch_index(store, index_id)


def test_a_verify_does_not_promote_a_version_rebuilt_meanwhile(store, monkeypatch):
    index_id = build(store)
    probes = checks.permission_probes

    def rebuilt_meanwhile(live, new, n, notes):  # another process starts a build of it
        with other_writer(store) as other, other.transaction():
            other.set_index_state(index_id, SpaceState.BUILDING)
        return probes(live, new, n, notes)
    monkeypatch.setattr(checks, "permission_probes", rebuilt_meanwhile)
    check = indexing.verify_index(store, index_id)
    assert check.problems == () and check.state is SpaceState.BUILDING
    with pytest.raises(InputError, match="being built"):
        indexing.switch_index(store, index_id, force=True)


def test_a_build_leaves_out_a_document_deleted_while_it_ran(store, monkeypatch):
    reparse, seen = indexing._reparse, []

    def deleted_meanwhile(s, stored):
        seen.append(stored.document.doc_id)
        if len(seen) == 2:
            with other_writer(store) as other:
                delete_documents(other, ["refund.md"])
        return reparse(s, stored)
    monkeypatch.setattr(indexing, "_reparse", deleted_meanwhile)
    built = indexing.build_index(store, SMALL, RegexTokenCounter())
    assert "refund.md" in seen[:2]  # premise: it was parsed before it was deleted
    assert (built.chunked, built.state) == (2, SpaceState.BUILT)
    indexing.switch_index(store, built.index_id, force=True)
    assert sorted(store.doc_ids()) == ["salaries.md", "shipping.md"] and store.verify() == []
    assert found(store, ["parcels"]) == {"shipping.md"}


def test_a_switch_in_another_process_keeps_the_version_being_built(store, monkeypatch):
    first = build(store)
    indexing.verify_index(store, first)
    reparse, seen = indexing._reparse, []

    def switched_meanwhile(s, stored):
        seen.append(stored)
        if len(seen) == 2:
            with other_writer(store) as other:
                indexing.switch_index(other, first)
        return reparse(s, stored)
    monkeypatch.setattr(indexing, "_reparse", switched_meanwhile)
    built = indexing.build_index(store, ChunkerConfig(max_tokens=20), RegexTokenCounter())
    assert (built.chunked, built.state) == (3, SpaceState.BUILT)
    assert {v.id: v.state for v in store.index_versions()} == {
        INITIAL_INDEX: SpaceState.RETIRED, first: SpaceState.ACTIVE, built.index_id: SpaceState.BUILT}
    indexing.switch_index(store, built.index_id, force=True)
    assert configs(store) == {ChunkerConfig(max_tokens=20).id} and found(store, ["parcels"]) == {"shipping.md"}


def test_a_build_whose_version_is_dropped_fails_with_a_message(store, monkeypatch):
    reparse, seen = indexing._reparse, []

    def dropped_meanwhile(s, stored):
        seen.append(stored)
        if len(seen) == 1:
            with other_writer(store) as other, other.transaction():
                other._db.execute("DELETE FROM index_versions WHERE id = 'ix_1'")
        return reparse(s, stored)
    monkeypatch.setattr(indexing, "_reparse", dropped_meanwhile)
    with pytest.raises(StoreError, match="index version ix_1 was dropped while it was being built"):
        indexing.build_index(store, SMALL, RegexTokenCounter())


def test_retention_is_applied_at_the_switch(versions, tmp_path):
    # built with retain 0 while a@3 was current; a@4 ingested after the build makes a@3 superseded
    index_id = build(versions, ChunkerConfig(max_tokens=store_config(versions)), retain=0)
    write(tmp_path / "a4.txt", "apple grape")
    build_ingestor(versions, load_settings(overrides=SETTINGS)).run(write(
        tmp_path / "m.jsonl", json.dumps({"doc_id": "a", "version": "4", "path": "a4.txt"}) + "\n"))
    indexing.switch_index(versions, index_id, force=True)
    assert sorted({(c.doc_id, c.version) for c in versions.chunks()}) == [("a", "4"), ("b", "1")]
    # N = 2 rows (a@4: 4 tokens, b@1: 6); "appl" only in a@4, "fig" (a@3) in none
    assert versions.keyword_statistics(["appl", "fig", "banana"]) == (2, (4 + 6) / 2, {"appl": 1, "fig": 0, "banana": 1})


def test_the_migration_runs_once_when_two_writers_open_a_schema_1_store(store, monkeypatch):
    path = store.path
    store.close()
    schema_1(path)
    migrate, calls = SQLiteStore._migrate, []

    def raced(self):  # another writer opens it (migrating it) and switches twice before this one begins
        calls.append(self)
        if len(calls) == 1:
            with SQLiteStore(path, "write") as other:
                for config in (SMALL, ChunkerConfig(max_tokens=20)):
                    indexing.switch_index(other, build(other, config), force=True)
        return migrate(self)
    monkeypatch.setattr(SQLiteStore, "_migrate", raced)
    with SQLiteStore(path, "write") as first:
        assert [(v.id, v.state) for v in first.index_versions()] == [("ix_1", SpaceState.RETIRED),
                                                                     ("ix_2", SpaceState.ACTIVE)]
        assert first.verify() == [] and configs(first) == {ChunkerConfig(max_tokens=20).id}


def test_an_index_switch_takes_verified_from_a_space_without_vectors_of_the_new_chunks(tmp_path):
    from ragdx.index import spaces
    from ragdx.ingest.embed import Embedder
    from ragdx.testing.encoders import HashingEncoder
    live, other = Embedder(HashingEncoder(), backend="HashingEncoder"), \
        Embedder(HashingEncoder(seed=1), backend="HashingEncoder")
    dense = ["chunking.tokenizer=regex", "rerank.method=none", "generation.semantic_weight=0"]
    with SQLiteStore(tmp_path / "d.db") as store:
        build_ingestor(store, load_settings(overrides=dense), encoder=live.encoder).run(manifest(tmp_path / "c"))
        spaces.build_space(store, other)
        assert spaces.verify_space(store, other.space.id, other) == []  # premise: verified beside
        built = indexing.build_index(store, SMALL, RegexTokenCounter(), embedder=live)
        indexing.switch_index(store, built.index_id, force=True, embedder=live)
        assert store.space_state(other.space.id) is SpaceState.BUILT
        assert len(store.chunks_without_vectors(other.space.id)) == built.chunks
        with pytest.raises(InputError, match="is built, not verified"):
            spaces.switch_space(store, other.space.id)
        # verified, then new chunks without a vector there: the switch refuses too
        spaces.build_space(store, other)
        assert spaces.verify_space(store, other.space.id, other) == []
        build_ingestor(store, load_settings(overrides=dense + ["chunking.max_tokens=12"]),
                       encoder=live.encoder).run(manifest(tmp_path / "c", docs={"new.md": "# New\n\nParcels.\n"}))
        with pytest.raises(InputError, match=f"space {other.space.id} has no vector for 1 chunks"):
            spaces.switch_space(store, other.space.id)
        assert store.active_space().id == live.space.id


def test_a_switch_refuses_new_chunks_without_an_embedder_even_if_they_came_meanwhile(tmp_path, monkeypatch):
    from ragdx.ingest.embed import Embedder
    from ragdx.testing.encoders import HashingEncoder
    embedder = Embedder(HashingEncoder(), backend="HashingEncoder")
    dense = ["chunking.tokenizer=regex", "rerank.method=none", "generation.semantic_weight=0"]
    with SQLiteStore(tmp_path / "d.db") as store:
        build_ingestor(store, load_settings(overrides=dense), encoder=embedder.encoder).run(manifest(tmp_path / "c"))
        index_id = indexing.build_index(store, SMALL, RegexTokenCounter(), embedder=embedder).index_id
        assert not indexing.needs_embedder(store, index_id)  # premise: nothing to embed when checked

        def ingested_meanwhile():
            with other_writer(store) as other:
                build_ingestor(other, load_settings(overrides=dense), encoder=embedder.encoder).run(
                    manifest(tmp_path / "n", docs={"new.md": "# New\n\nParcels by night.\n"}))
        before_first_transaction(monkeypatch, store, ingested_meanwhile)
        with pytest.raises(ConfigError, match="chunks without a vector"):
            indexing.switch_index(store, index_id, force=True)
        assert store.live_index().id == INITIAL_INDEX
        assert store.chunks_without_vectors(store.active_space().id) == []


def schema_1(path: Path) -> None:
    """Make a store of schema 2 what schema 1 was: no index-version tables."""
    con = sqlite3.connect(path)
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                               "(name LIKE 'staged_%' OR name = 'index_versions')").fetchall():
        con.execute(f"DROP TABLE {name}")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    con.close()


@pytest.mark.parametrize("error, said", [
    ("IntegrityError: FOREIGN KEY constraint failed", "SQLite refused a write (FOREIGN KEY constraint failed)"),
    ("OperationalError: database is locked", "database is locked: another process held a lock on {store}"),
])
def test_the_cli_reports_a_refused_write_or_a_lock_as_such_not_as_a_damaged_store(store, monkeypatch, capsys,
                                                                                  error, said):
    import sqlite3 as sql
    kind, message = error.split(": ")

    def refused(*args, **kwargs):
        raise getattr(sql, kind)(message)
    monkeypatch.setattr(indexing, "build_index", refused)
    assert main(["index", "build", "--chunks", "--store", str(store.path), "--set", "retrieval.dense.enabled=false"]) == 2
    err = capsys.readouterr().err
    assert said.format(store=store.path) in err and "integrity check" not in err


def _staged_rows(store: SQLiteStore) -> dict[str, int]:
    return {table: store._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("staged_versions", "staged_sections", "staged_chunks", "staged_vectors")}


def test_a_version_that_is_not_live_is_dropped_with_everything_it_holds(store):
    live_chunks, live_version = len(store.chunks()), store.index_version
    index_id = build(store)
    held = store.index_version_of(index_id)
    assert held.chunks > live_chunks and _staged_rows(store)["staged_chunks"] == held.chunks
    dropped = indexing.drop_index(store, index_id)
    assert (dropped.id, dropped.state, dropped.chunks) == (index_id, SpaceState.BUILT, held.chunks)
    assert store.index_version_of(index_id) is None
    assert _staged_rows(store) == {"staged_versions": 0, "staged_sections": 0, "staged_chunks": 0,
                                   "staged_vectors": 0}
    # the live index is untouched, and caches bound to it stay valid
    assert len(store.chunks()) == live_chunks and store.index_version == live_version
    assert store.verify() == [] and found(store, ["refunds"]) == {"refund.md"}
    with pytest.raises(InputError, match=f"no index version '{index_id}'"):
        indexing.drop_index(store, index_id)


def test_the_live_version_cannot_be_dropped_and_the_retired_one_takes_the_rollback_with_it(store):
    index_id = build(store)
    indexing.switch_index(store, index_id, force=True)
    before = snapshot(store.path)
    with pytest.raises(InputError, match=f"index {index_id} is live"):
        indexing.drop_index(store, index_id)
    assert snapshot(store.path) == before
    assert indexing.drop_index(store, INITIAL_INDEX).state is SpaceState.RETIRED
    with pytest.raises(InputError):
        indexing.rollback_index(store)
    assert store.live_index().id == index_id and configs(store) == {SMALL.id}


def test_a_build_stopped_half_way_can_be_dropped_and_a_build_running_elsewhere_says_so(store, monkeypatch):
    original = indexing._embed

    def dropped_meanwhile(s, index_id, embedder, batch):  # another process drops it mid-build
        with SQLiteStore(store.path, "write") as other:
            assert indexing.drop_index(other, index_id).state is SpaceState.BUILDING
        return original(s, index_id, embedder, batch)

    monkeypatch.setattr(indexing, "_embed", dropped_meanwhile)
    with pytest.raises(StoreError, match="was dropped while it was being built"):
        build(store)
    assert [v.id for v in store.index_versions()] == [INITIAL_INDEX]
    assert _staged_rows(store)["staged_chunks"] == 0


def test_the_cli_drops_an_index_version(store, capsys):
    index_id = build(store)
    chunks = store.index_version_of(index_id).chunks
    s = ["--store", str(store.path)]
    assert main(["index", "drop", *s]) == 2
    assert "index drop of an index version needs --index ID" in capsys.readouterr().err
    assert main(["index", "drop", *s, "--index", INITIAL_INDEX]) == 2
    assert f"index {INITIAL_INDEX} is live" in capsys.readouterr().err
    assert main(["index", "drop", *s, "--index", index_id]) == 0
    assert capsys.readouterr().out.strip() == f"index {index_id} dropped (built, {chunks} chunks)"
