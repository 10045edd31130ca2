"""Damaged run folders are repaired or refused, and a script can rely on 'ragdx run''s exit codes
and messages (issue 25, items 7 and 8): every case here once gave a traceback, a silent drop, a
message naming the wrong file, or a file left behind."""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ragdx.experiments.runstate import RunState
from tests.hardening.conftest import (LEXICAL, RUN_QUERIES, copy_run, corrupt_page, query_ids, ragdx)


def sql(run: Path, *statements: str) -> None:
    con = sqlite3.connect(str(run / "run.db"))
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()


def resume(run: Path) -> tuple[int, str, str]:
    return ragdx(["run", "--resume", str(run), "-q"])


def events(run: Path, event: str) -> list[str]:
    with RunState(run / "run.db") as state:
        return [detail for _, _, _, detail in state.events(event)]


# -- item 7: damaged run folders -------------------------------------------------------------------

@pytest.mark.parametrize("damage, said", [
    ("objects = X'00112233'", "its results do not read back (UnpicklingError"),
    ("trace = '{not json'", "its trace is not one line of a JSON object"),
    ("diagnosis = '[1, 2]'", "its diagnosis is not one line of a JSON object"),
    ("trace = json_set(trace, '$.evidence', 5)", "no 'evidence' object"),
    ("diagnosis = json_set(diagnosis, '$.id', 'q-other')", "its diagnosis's id is 'q-other', not the item's"),
])
def test_a_damaged_draft_checkpoint_is_discarded_and_its_item_run_again(unfinished_run, finished_run, tmp_path,
                                                                       damage, said):
    run = copy_run(unfinished_run, tmp_path / "run")
    sql(run, f"UPDATE checkpoints SET {damage}")
    code, _, err = resume(run)
    assert code == 0, err
    assert f"{run / 'run.db'}: the checkpoint of item 0 is damaged: " in err and said in err
    assert "discarded, and the item run again" in err
    assert len(events(run, "draft_damaged")) == 1
    assert query_ids(run / "traces.jsonl") == query_ids(finished_run / "traces.jsonl")
    assert len(query_ids(run / "diagnosis.jsonl")) == RUN_QUERIES


def test_a_checkpoint_pickle_from_elsewhere_is_never_unpickled(unfinished_run, tmp_path):
    """A pickle that would run a command when loaded: refused by the restricted unpickler."""
    from ragdx.experiments.runstate import _DamagedCheckpoint  # new with issue 25
    run = copy_run(unfinished_run, tmp_path / "run")
    marker = tmp_path / "ran"

    class Gadget:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    con = sqlite3.connect(str(run / "run.db"))
    con.execute("UPDATE checkpoints SET objects = ?", (pickle.dumps(Gadget()),))
    con.commit()
    con.close()
    with RunState(run / "run.db") as state, pytest.raises(_DamagedCheckpoint) as caught:
        state.draft(0)
    assert "is not a ragdx result type" in str(caught.value) and "posix.system" in str(caught.value)
    assert not marker.exists()


def test_a_damaged_size_record_is_set_again_and_the_published_files_kept(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    sql(run, "UPDATE run SET value = '[\"a\", 1]' WHERE key = 'sizes'")
    code, out, err = resume(run)
    assert code == 0, err
    assert err == f"ragdx: {run / 'run.db'}: the record of the published files' sizes was damaged: set again\n"
    assert (run / "traces.jsonl").read_bytes() == (finished_run / "traces.jsonl").read_bytes()
    with RunState(run / "run.db") as state:
        assert state.sizes() == ((run / "traces.jsonl").stat().st_size, (run / "diagnosis.jsonl").stat().st_size)


def test_a_run_db_overwritten_mid_file_is_refused_naming_run_db(finished_run, run_inputs, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    corrupt_page(run / "run.db", "items")
    code, _, err = resume(run)
    assert code == 2
    assert err.startswith(f"ragdx run: error: {run / 'run.db'}: the run database is damaged: ")
    assert str(run_inputs[0]) not in err


def test_a_run_db_missing_its_items_table_is_refused_not_reported_as_zero_published(unfinished_run, tmp_path):
    run = copy_run(unfinished_run, tmp_path / "run")
    sql(run, "DROP TABLE items")
    before = (run / "run.db").read_bytes()
    code, out, err = resume(run)
    assert (code, out) == (2, "")
    assert err == (f"ragdx run: error: {run / 'run.db'}: the run database is damaged: its items table is "
                   "missing; restore it or start the run again in another folder\n")
    assert (run / "run.db").read_bytes() == before  # no empty table made in its place


def test_a_run_db_with_items_deleted_is_refused(unfinished_run, tmp_path):
    run = copy_run(unfinished_run, tmp_path / "run")
    sql(run, "DELETE FROM items WHERE n > 0")
    code, _, err = resume(run)
    assert code == 2
    assert f"{run / 'run.db'}: the run database is damaged: it holds 1 items, but the run has 4 queries" in err


@pytest.mark.parametrize("damage, said", [
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "was truncated"),
    (lambda p: p.unlink(), "was missing"),
    (lambda p: p.write_bytes(p.read_bytes() + b"\x00garbage\n"), "had text appended"),
    (lambda p: p.write_bytes(p.read_bytes().replace(b"refund", b"r3fund", 1)), "was changed"),
])
@pytest.mark.parametrize("name", ["traces.jsonl", "diagnosis.jsonl"])
def test_a_finished_runs_damaged_published_file_is_written_again_from_run_db(finished_run, tmp_path, name,
                                                                              damage, said):
    run = copy_run(finished_run, tmp_path / "run")
    damage(run / name)
    code, out, err = resume(run)
    assert code == 0, err
    assert err == (f"ragdx: {run / name} {said}: written again from the published checkpoints in "
                   f"{run / 'run.db'}\n")
    for each in ("traces.jsonl", "diagnosis.jsonl"):
        assert (run / each).read_bytes() == (finished_run / each).read_bytes()
    assert "queries published" in out  # the summary files were written again from the repaired run


def test_a_finished_runs_missing_report_is_written_again(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    (run / "report.html").unlink()
    code, _, err = resume(run)
    assert code == 0, err
    assert err == f"ragdx: {run / 'report.html'} was missing: written again\n"
    assert (run / "report.html").stat().st_size > 1000


def test_inspect_of_a_zero_byte_run_db_is_refused_and_writes_nothing(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.db").write_bytes(b"")
    code, out, err = ragdx(["run", "--inspect", str(tmp_path / "run")])
    assert (code, out) == (2, "")
    assert err == f"ragdx run: error: {tmp_path / 'run' / 'run.db'}: empty: not a run database of 'ragdx run'\n"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["run.db"]
    assert (tmp_path / "run" / "run.db").stat().st_size == 0


def test_ask_on_a_corrupt_store_leaves_no_cache_file(example_db):
    corrupt_page(example_db, "chunks")
    code, _, err = ragdx(["ask", "--store", str(example_db), *LEXICAL, "How long do refunds take?"])
    assert code == 2 and "cannot read the store" in err
    assert sorted(p.name for p in example_db.parent.iterdir() if ".cache" in p.name) == []


# -- item 8: exit codes and messages ---------------------------------------------------------------

def test_a_fault_says_on_stderr_where_the_worker_stopped(run_inputs, tmp_path):
    store, queries = run_inputs
    died = subprocess.run([sys.executable, "-m", "ragdx.cli", "run", "--store", str(store), "--queries",
                           str(queries), "--out", str(tmp_path / "run"), "--fault", "after_draft", *LEXICAL],
                          capture_output=True, text=True)
    assert died.returncode == 4
    assert died.stderr == (f"ragdx run: stopped on purpose by --fault after_draft after drafting item "
                           f"'q-refund-35d' (exit 4); continue with: ragdx run --resume {tmp_path / 'run'}\n")


def test_resume_exits_5_and_names_each_failed_item(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    sql(run, "UPDATE items SET state = 'failed', reason = 'evidence_changed_or_expired: d deleted' WHERE n = 2",
        "INSERT INTO events (at, n, worker, event, detail) VALUES ('now', 2, 'w', 'failed', '')")
    code, out, err = resume(run)
    assert code == 5
    assert "query 'q-gift-card-refund' not published: evidence_changed_or_expired: d deleted" in err
    assert f"1 item(s) failed (exit 5); run them again: ragdx run --resume {run} --retry-failed" in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["durable"]["failed"] == [{"id": "q-gift-card-refund",
                                              "reason": "evidence_changed_or_expired: d deleted"}]
