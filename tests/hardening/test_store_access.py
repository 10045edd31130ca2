"""Opening a store: readers never take the write lock, a second writer waits or gives up with a
message, and read commands never create or change a store (issue 14, items 1 and 9)."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from ragdx.cli import main
from ragdx.errors import StoreError
from ragdx.ingest.ingestor import delete_documents
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import EXAMPLE, snapshot, write
from tests.hardening.conftest import LEXICAL, corrupt_page, fingerprint

# A real `ragdx ingest` that stops inside its write transaction, after its 100th document, until
# a line arrives on stdin: the write lock is held for as long as the test needs.
PAUSED_INGEST = """
import sys
from ragdx.store import sqlite
insert, calls = sqlite.SQLiteStore.insert_version, []
def paused(self, *args, **kwargs):
    insert(self, *args, **kwargs)
    calls.append(1)
    if len(calls) == 100:
        print("paused", flush=True)
        sys.stdin.readline()
sqlite.SQLiteStore.insert_version = paused
from ragdx.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _ragdx(*args: str, stdin=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ragdx.cli", *args], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ask_docs_and_evidence_run_while_a_large_ingest_writes(tmp_path, example_db):
    corpus = tmp_path / "corpus"
    for i in range(300):
        write(corpus / f"doc{i:04d}.md", f"# Document {i}\n\nTent refunds, case {i}, take 30 days. " * 20)
    writer = subprocess.Popen([sys.executable, "-c", PAUSED_INGEST, "ingest", "--store", str(example_db),
                               str(corpus), *LEXICAL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "paused", writer.stderr.read()
        readers = {
            "ask": _ragdx("ask", "--store", str(example_db), "--json", *LEXICAL,
                          "Can I get a refund for a quality problem 35 days after delivery?"),
            "docs": _ragdx("docs", "--store", str(example_db)),
            "evidence": _ragdx("evidence", "--store", str(example_db), "--queries",
                               str(EXAMPLE / "queries.jsonl"), "--json"),
        }
        results = {name: (p.communicate(timeout=60), p.returncode) for name, p in readers.items()}
        results = {name: (code, out, err) for name, ((out, err), code) in results.items()}
        assert writer.poll() is None, "the ingest finished before the readers: nothing was tested"
        for name, (code, _, err) in results.items():
            assert code == 0 and "Traceback" not in err, f"{name}: {err}"
        # the readers saw the store as it was before the ingest began
        assert "doc0000.md" not in results["docs"][1] and "policies/refund.md" in results["docs"][1]
        assert json.loads(results["ask"][1])["query_id"] == "ask"
        assert len(results["evidence"][1].splitlines()) == 40
    finally:
        writer.communicate("\n", timeout=60)
    assert writer.returncode == 0
    assert main(["docs", "--store", str(example_db)]) == 0  # and the ingest committed


def _hold_write_lock(path):
    holder = SQLiteStore(path, "write")
    holder._begin()  # the lock a writing process holds during its transaction
    return holder


def test_a_second_writer_gives_up_with_a_message_and_writes_nothing(example_db):
    holder = _hold_write_lock(example_db)
    try:
        before = snapshot(example_db)
        second = SQLiteStore(example_db, "write", wait=0.2)  # opening to write takes no lock
        started = time.perf_counter()
        with pytest.raises(StoreError) as info:
            delete_documents(second, ["policies/refund.md"])
        assert time.perf_counter() - started < 10
        assert str(info.value) == (f"{example_db}: another process is still writing to this store after "
                                   "0.2 s; nothing was written: try again when it has finished")
        assert info.value.exit_code == 2
        second.close()
    finally:
        holder._db.execute("ROLLBACK")
        holder.close()
    assert snapshot(example_db) == before


def test_a_second_writer_waits_for_the_first(example_db, caplog):
    holder = _hold_write_lock(example_db)
    release = threading.Timer(1.5, lambda: holder._db.execute("COMMIT"))
    release.start()
    try:
        with caplog.at_level(logging.WARNING, logger="ragdx.store"), \
                SQLiteStore(example_db, "write", wait=30) as second:
            assert delete_documents(second, ["policies/refund.md"]) == {
                "policies/refund.md": ["2024-01", "2026-03"]}
    finally:
        release.join()
        holder.close()
    assert "another process is writing to this store; waiting up to 30 s" in caplog.text


def test_docs_on_a_foreign_sqlite_file_is_refused_and_changes_nothing(tmp_path, capsys):
    foreign = tmp_path / "app.db"
    con = sqlite3.connect(str(foreign))
    con.execute("CREATE TABLE people (name TEXT)")
    con.execute("INSERT INTO people VALUES ('Ada')")
    con.commit()
    con.close()
    before = fingerprint(foreign)
    for argv in (["docs"], ["ask", "refund?", *LEXICAL], ["delete", "x"], ["index", "status"],
                 ["ingest", str(EXAMPLE / "manifest.jsonl"), *LEXICAL]):
        assert main([argv[0], "--store", str(foreign), *argv[1:]]) == 2, argv
        err = capsys.readouterr().err
        assert f"{foreign}: not a ragdx store (a SQLite database with the tables people)" in err, argv
    assert fingerprint(foreign) == before


@pytest.mark.parametrize("argv", [
    ["ask", "Can I get a refund?", *LEXICAL], ["docs"], ["index", "status"], ["delete", "x"],
    ["evidence", "--queries", str(EXAMPLE / "queries.jsonl")],
    ["run", "--queries", str(EXAMPLE / "queries.jsonl"), "--out", "RUN", *LEXICAL],
])
def test_a_missing_store_is_an_error_and_is_not_created(tmp_path, capsys, argv):
    typo = tmp_path / "typo.db"
    argv = [a.replace("RUN", str(tmp_path / "run")) for a in argv]
    assert main([argv[0], "--store", str(typo), *argv[1:]]) == 2
    assert f"{typo}: no store here" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_ingest_that_fails_leaves_no_new_store_behind(tmp_path, capsys):
    store = tmp_path / "new.db"
    assert main(["ingest", "--store", str(store), str(tmp_path / "missing.jsonl"), *LEXICAL]) == 2
    assert "missing.jsonl: no such manifest file or folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_ingest_into_a_store_failing_its_integrity_check_is_refused(tmp_path, example_db, capsys):
    corrupt_page(example_db)
    before = fingerprint(example_db)
    write(tmp_path / "new.md", "# New\n\nA new document.")
    manifest = write(tmp_path / "m.jsonl", '{"doc_id": "new", "path": "new.md"}\n')
    assert main(["ingest", "--store", str(example_db), str(manifest), *LEXICAL]) == 2
    err = capsys.readouterr().err
    assert f"{example_db}: the store fails SQLite's integrity check (Page " in err
    assert "nothing was written to it" in err
    assert fingerprint(example_db) == before


def test_reading_a_damaged_page_is_reported_without_a_traceback(example_db, capsys):
    corrupt_page(example_db, "documents")
    assert main(["docs", "--store", str(example_db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ragdx docs: error: {example_db}: cannot read the store: database disk image "
                          "is malformed")


def test_read_commands_change_no_byte_of_the_store(tmp_path, example_db, capsys):
    before = fingerprint(example_db)
    queries = str(EXAMPLE / "queries.jsonl")
    for argv in (["docs"], ["index", "status"], ["ask", "refund after 35 days?", *LEXICAL],
                 ["evidence", "--queries", queries],
                 ["run", "--queries", queries, "--out", str(tmp_path / "run"), *LEXICAL]):
        assert main([argv[0], "--store", str(example_db), *argv[1:]]) == 0, argv
    capsys.readouterr()
    assert fingerprint(example_db) == before
