"""`recheck` reads the store only through the Store protocol: on PostgreSQL (one server, and
sharded) it names the same changes as on the embedded store (tests/test_binding.py)."""

from __future__ import annotations

import pytest

from ragdx.binding import RecheckStatus, recheck
from tests.test_binding import EXPECTED, answered, change

pytestmark = pytest.mark.pg


@pytest.mark.parametrize("kind, what", [("pg", w) for w in [*sorted(EXPECTED), "unrelated"]]
                         + [("sharded", "delete"), ("sharded", "revoke")])
def test_recheck_on_postgres(tmp_path, pg_store_factory, kind, what):
    store = pg_store_factory(kind)
    _, binding = answered(store, tmp_path)
    assert [c.doc_id for c in binding.cited] == ["refund.md"] and binding.index_version == store.index_version
    assert recheck(store, binding).status is RecheckStatus.VALID
    change(store, tmp_path, what)
    found = recheck(store, binding)
    assert found.index_version > binding.index_version
    expected = [] if what == "unrelated" else [("refund.md", EXPECTED[what])]
    assert [(c.span.doc_id, c.reason) for c in found.changed] == expected
    assert found.status is (RecheckStatus.VALID if what == "unrelated" else RecheckStatus.CHANGED)


def test_a_durable_run_on_postgres_publishes_what_a_single_pass_diagnoses(tmp_path, pg_store_factory):
    import json

    from ragdx.build import build_pipeline
    from ragdx.config import load_settings
    from ragdx.experiments.durable import run_durable
    from ragdx.experiments.run import run_pipeline
    from ragdx.types import Query
    from tests.test_binding import QUESTION, SETTINGS
    store = pg_store_factory("pg")
    answered(store, tmp_path)
    pipeline = build_pipeline(store, load_settings(overrides=SETTINGS))
    queries = [Query("q1", QUESTION), Query("q2", "How fast do parcels ship?")]
    single = run_pipeline(pipeline, queries, tmp_path / "single", progress=False)
    worked = run_durable(pipeline, queries, tmp_path / "run", progress=False)
    published = [json.loads(line) for line in (tmp_path / "run" / "diagnosis.jsonl").read_text().splitlines()]
    assert published == [d.to_dict() for d in single.diagnoses]
    assert worked.index_versions == (store.index_version,) and worked.failed == ()
    with open(tmp_path / "run" / "run.db", "rb") as fh:
        assert store.where.encode() in fh.read()  # the run is bound to this store


@pytest.mark.parametrize("kind", ["pg", "sharded"])
def test_a_store_made_again_in_the_same_schema_is_another_store(tmp_path, pg_servers, pg_store_factory, kind):
    """Issue 25: the store's id is made with the store and never reused; an answer bound to the
    dropped store is rechecked span by span in the new one, at the same index version."""
    from ragdx.binding import SpanChange
    from ragdx.build import build_ingestor
    from ragdx.config import load_settings
    from ragdx.store.pg_admin import drop_store, setup_shards
    from ragdx.store.postgres import PostgresStore
    from tests.conftest import write
    from tests.test_binding import SETTINGS, corpus
    store = pg_store_factory(kind)
    _, binding = answered(store, tmp_path)
    first = store.store_id
    assert len(first) == 32 and binding.store_id == first and binding.index_version == 1
    dsn, shards = store.dsn, [server for server in store.partitions().values() if server]
    store.close()
    drop_store(dsn)
    assert bool(shards) is (kind == "sharded")
    again = setup_shards(dsn, pg_servers[1:]) if shards else PostgresStore(dsn)
    try:
        only_shipping = write(tmp_path / "m2.jsonl", corpus(tmp_path).read_text().splitlines()[1] + "\n")
        build_ingestor(again, load_settings(overrides=SETTINGS)).run(only_shipping)
        assert again.index_version == 1 and len(again.store_id) == 32 and again.store_id != first
        found = recheck(again, binding, shortcut=True)
        assert (found.full, found.status, [(c.span.doc_id, c.reason, c.detail) for c in found.changed]) == (
            True, RecheckStatus.CHANGED, [("refund.md", SpanChange.MISSING, "no such document in this store")])
    finally:
        again.close()


def test_a_store_made_before_ids_gets_one_when_opened_for_writing(tmp_path, pg_store_factory):
    import psycopg

    from ragdx.store.postgres import PostgresStore
    store = pg_store_factory("pg")
    answered(store, tmp_path)
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {store.schema}.meta WHERE key = 'store_id'")
    with PostgresStore(store.dsn, "read") as old:
        assert (old.store_id, old.index_version) == (None, 1)
    with PostgresStore(store.dsn, "write") as opened:
        given = opened.store_id
        assert len(given) == 32 and opened.index_version == 1  # no change a query sees
    assert store.store_id == given
