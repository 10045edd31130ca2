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
