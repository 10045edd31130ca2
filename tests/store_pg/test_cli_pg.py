"""Every command's --store takes a postgresql:// DSN (the shards are found in the coordinator)."""

from __future__ import annotations

import json

import pytest

from ragdx.cli import main
from ragdx.examples import example_dir

pytestmark = pytest.mark.pg


def test_ingest_ask_and_docs_through_a_dsn_on_a_sharded_store(pg_store_factory, capsys):
    store = pg_store_factory("sharded")
    dsn = store.dsn
    off = ["--set", "retrieval.dense.enabled=false"]
    assert main(["ingest", "--store", dsn, *off, str(example_dir() / "manifest.jsonl")]) == 0
    assert "15 documents" in capsys.readouterr().out
    assert main(["ask", "--store", dsn, *off, "--json", "--group", "public", "--group", "staff",
                 "Above which amount does a manual refund need approval from a team lead?"]) == 0
    trace = json.loads(capsys.readouterr().out)
    bm25 = next(s for s in trace["stages"] if s["name"] == "bm25")
    assert bm25["items"][0]["doc"] == "internal/refund-runbook.md"
    assert main(["docs", "--store", dsn]) == 0
    assert "internal/refund-runbook.md" in capsys.readouterr().out
    assert store.counts()["versions"] == 15


def test_an_unreachable_server_is_exit_2_with_the_reason(capsys):
    assert main(["docs", "--store", "postgresql://postgres:secret@127.0.0.1:1/ragdx"]) == 2
    err = capsys.readouterr().err
    assert "postgresql://postgres:***@127.0.0.1:1/ragdx: cannot connect to PostgreSQL" in err
    assert "secret" not in err


@pytest.mark.parametrize("kind", ["pg", "sharded"])
def test_index_verify_live_audits_a_postgresql_store(pg_store_factory, tmp_path, capsys, kind):
    """The live audit on PostgreSQL (issue 28: PostgresStore had no audit(), so the command raised
    AttributeError): sound after an edit and a deletion, and a deleted document still stored is
    named."""
    import psycopg
    from tests.test_cache import REFUND, SETTINGS, corpus
    store = pg_store_factory(kind)
    sets = sum((["--set", s] for s in SETTINGS), [])
    assert main(["ingest", "--store", store.dsn, str(corpus(tmp_path)), *sets]) == 0
    assert main(["ingest", "--store", store.dsn, str(corpus(tmp_path, refund=REFUND.replace("30", "14"))), *sets]) == 0
    assert main(["delete", "--store", store.dsn, "shipping.md"]) == 0
    capsys.readouterr()
    assert main(["index", "verify", "--live", "--store", store.dsn]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "note: 1 superseded versions still indexed (1 chunks): searchable only by a question naming their version",
        "live index (index version 3, space none): sound"]
    with psycopg.connect(store.dsn, autocommit=True) as conn:  # a tombstone for a document still stored
        conn.execute(f"INSERT INTO {store.schema}.tombstones VALUES ('refund.md', 'then', '[]')")
    assert main(["index", "verify", "--live", "--store", store.dsn]) == 1
    out = capsys.readouterr().out
    assert "problem: deleted document refund.md is still reachable: 2 versions, 2 chunks" in out
    assert out.splitlines()[-1] == "live index (index version 3, space none): 1 problem(s)"
