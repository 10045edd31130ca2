"""`ragdx index verify --live`: the audit of the live index (issue 15)."""

from __future__ import annotations

import sqlite3

from ragdx.cli import main
from tests.test_cache import REFUND, SETTINGS, corpus


def test_index_verify_live_audits_the_live_index(tmp_path, capsys):
    """A sound store has no problem and notes its superseded version; each damage written behind
    the store's back (foreign keys off) is named."""
    store = str(tmp_path / "s.db")
    sets = sum((["--set", s] for s in SETTINGS), [])
    assert main(["ingest", "--store", store, str(corpus(tmp_path)), *sets]) == 0
    assert main(["ingest", "--store", store, str(corpus(tmp_path, refund=REFUND.replace("30", "14"))), *sets]) == 0
    assert main(["delete", "--store", store, "shipping.md"]) == 0
    capsys.readouterr()
    assert main(["index", "verify", "--live", "--store", store]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "note: 1 superseded versions still indexed (1 chunks): searchable only by a question naming their version",
        "live index (index version 3, space none): sound"]
    db = sqlite3.connect(store)
    with db:
        db.execute("INSERT INTO documents SELECT 'shipping.md', 'v0', 99, content_hash, path, title, format, "
                   "status, updated_at, metadata, parser, parse_warnings, chunker_config, raw_text, parsed_text, "
                   "ingested_at FROM documents LIMIT 1")
        db.execute("INSERT INTO chunks (id, doc_id, version, ord, start, end, text, kind, heading_path, section_id, "
                   "prefix, token_count, over_limit, config_id) VALUES "
                   "('c_orphan', 'gone.md', 'v1', 0, 0, 4, 'text', 'text', '[]', 's', '', 1, 0, 'x')")
        db.execute("INSERT INTO vectors VALUES ((SELECT rowid FROM chunks WHERE id = 'c_orphan'), 'nowhere', 'h', "
                   "zeroblob(4), NULL)")
    db.close()
    assert main(["index", "verify", "--live", "--store", store]) == 1
    out = capsys.readouterr().out
    assert "problem: deleted document shipping.md is still reachable: 1 versions, 0 chunks" in out
    assert "problem: 1 chunks without a document version (first: c_orphan)" in out
    assert "problem: 1 vectors of space nowhere, which is not registered" in out
    assert out.splitlines()[-1] == "live index (index version 3, space none): 3 problem(s)"
