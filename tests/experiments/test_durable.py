"""Durable runs (issue 19): leases, draft checkpoints, publication, crash recovery that rechecks
the evidence, resume after kill -9, and several workers on one run. Workers are `ragdx run`
subprocesses, as users start them."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ragdx.build import build_ingestor, build_pipeline
from ragdx.cli import _FAULT_EXIT, build_parser
from ragdx.config import load_settings
from ragdx.errors import EXIT_ITEMS_FAILED
from ragdx.experiments.durable import FAULT_EXIT, Fault, inspect_run
from ragdx.experiments.run import run_pipeline
from ragdx.experiments.runstate import ItemState, RunState
from ragdx.ingest.ingestor import delete_documents
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import write

# a small, fast pipeline: about 8 ms a query, so 200 queries take seconds
SETTINGS = ["retrieval.dense.enabled=false", "chunking.tokenizer=regex", "rerank.method=none",
            "retrieval.bm25.top_k=4", "fusion.top_k=4", "rerank.top_n=3", "context.budget_tokens=80"]
SETS = [a for s in SETTINGS for a in ("--set", s)]
DOCS = 20


def manifest(folder: Path, acl0=("public",), ships5: int = 1) -> Path:
    """DOCS small policies; d0.md's access and d5.md's shipping time can be changed."""
    lines = []
    for i in range(DOCS):
        ships = ships5 if i == 5 else i % 5 + 1
        write(folder / f"d{i}.md", f"# Policy {i}\n\nItem {i} refunds are accepted within {i + 10} days of "
                                   f"delivery.\n\nItem {i} ships in {ships} days.\n")
        lines.append({"doc_id": f"d{i}.md", "path": f"d{i}.md", "acl": list(acl0) if i == 0 else ["public"]})
    return write(folder / "m.jsonl", "\n".join(map(json.dumps, lines)) + "\n")


def queries(folder: Path, n: int) -> Path:
    lines = []
    for k in range(n):
        i = k % DOCS
        quote, question = ((f"Item {i} refunds are accepted within {i + 10} days",
                            f"Within how many days are item {i} refunds accepted?") if k % 2 == 0 else
                           (f"Item {i} ships in {i % 5 + 1} days", f"How fast does item {i} ship?"))
        lines.append({"id": f"q{k}", "question": question, "required": [[{"doc": f"d{i}.md", "quote": quote}]]})
    return write(folder / "q.jsonl", "\n".join(map(json.dumps, lines)) + "\n")


@pytest.fixture
def corpus(tmp_path):
    """The store (ingested, closed) and a query set of 200."""
    with SQLiteStore(tmp_path / "s.db") as store:
        build_ingestor(store, load_settings(overrides=SETTINGS)).run(manifest(tmp_path / "corpus"))
    return tmp_path / "s.db", queries(tmp_path, 200)


def ragdx_run(store: Path, qs: Path, out: Path, *extra: str, wait: bool = True):
    args = [sys.executable, "-m", "ragdx.cli", "run", "--store", str(store), "--queries", str(qs),
            "--out", str(out), *SETS, *extra]
    if not wait:
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(args, capture_output=True, text=True)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def published_count(run: Path) -> int:
    """How many items a running run has published (read-only, beside its workers)."""
    try:
        con = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    except sqlite3.OperationalError:  # not created yet
        return 0
    try:
        return con.execute("SELECT COUNT(*) FROM items WHERE state = 'published'").fetchone()[0]
    except sqlite3.OperationalError:  # no table yet
        return 0
    finally:
        con.close()


def one_query(tmp_path: Path, store: Path) -> Path:
    return write(tmp_path / "one.jsonl", (tmp_path / "q.jsonl").read_text().splitlines()[0] + "\n")


def wait_past_lease(run: Path) -> None:
    with RunState(run / "run.db") as state:
        _, left = state.wait_hint()
    time.sleep((left or 0) + 0.2)


@pytest.mark.parametrize("what, reason", [("delete", "deleted"), ("revoke", "unreadable")])
def test_a_dead_workers_draft_whose_evidence_changed_fails_and_is_not_published(corpus, tmp_path, what, reason):
    """The field's experiment: submit; a worker with a 2-second lease dies right after its draft;
    the cited document is deleted or revoked; after the lease, the next worker fails the item
    with evidence_changed_or_expired and publishes nothing; the old draft is kept."""
    store, _ = corpus
    qs, run = one_query(tmp_path, store), tmp_path / "run"
    died = ragdx_run(store, qs, run, "--lease-seconds", "2", "--fault", "after_draft")
    assert died.returncode == FAULT_EXIT == _FAULT_EXIT
    seen = inspect_run(run)
    assert seen["counts"] == {"queued": 0, "leased": 0, "drafted": 1, "published": 0, "failed": 0}
    [draft] = seen["checkpoints"]
    assert (draft["query_id"], draft["attempt"], draft["index_version"]) == ("q0", 1, 1)
    with RunState(run / "run.db") as state:
        cited = [c["doc"] for c in state.draft(0).trace["evidence"]["cited"]]
    assert cited[0] == "d0.md" and cited.count("d0.md") == 1
    with SQLiteStore(store, "write") as opened:
        if what == "delete":
            delete_documents(opened, ["d0.md"])
        else:
            revoked = manifest(tmp_path / "corpus", acl0=("staff",))
            build_ingestor(opened, load_settings(overrides=SETTINGS)).run(revoked)
    wait_past_lease(run)
    again = subprocess.run([sys.executable, "-m", "ragdx.cli", "run", "--resume", str(run)],
                           capture_output=True, text=True)
    assert again.returncode == 5, again.stderr  # finished, with a failed item (ragdx.errors.EXIT_ITEMS_FAILED)
    seen = inspect_run(run)
    assert seen["counts"] == {"queued": 0, "leased": 0, "drafted": 0, "published": 0, "failed": 1}
    [failed] = seen["items"]["failed"]
    assert failed["reason"].startswith("evidence_changed_or_expired: d0.md@") and f"] {reason} (" in failed["reason"]
    assert failed["reason"].count("] deleted (") + failed["reason"].count("] unreadable (") == 1  # d0.md alone
    assert "not published: evidence_changed_or_expired" in again.stderr
    assert lines(run / "traces.jsonl") == lines(run / "diagnosis.jsonl") == []
    assert seen["checkpoints"] == [draft]  # the old draft is kept for inspection
    assert json.loads((run / "manifest.json").read_text())["durable"]["failed"] == [
        {"id": "q0", "reason": failed["reason"]}]
    # re-run only on request: the retry answers again against the store as it is now
    retried = subprocess.run([sys.executable, "-m", "ragdx.cli", "run", "--resume", str(run), "--retry-failed"],
                             capture_output=True, text=True)
    assert retried.returncode == 0, retried.stderr
    seen = inspect_run(run)
    assert seen["counts"]["published"] == 1 and [c["attempt"] for c in seen["checkpoints"]] == [1, 2]
    assert [d["id"] for d in lines(run / "diagnosis.jsonl")] == ["q0"]


def test_a_dead_workers_draft_is_not_published_from_a_store_rebuilt_at_the_same_path(corpus, tmp_path):
    """Issue 25, item 2: the worker dies after its draft; the store is removed and ingested again
    at the same path without the cited document, back to the same index version (1). On main the
    unchanged index version published the draft, and the deleted text reached traces.jsonl."""
    store, _ = corpus
    qs, run = one_query(tmp_path, store), tmp_path / "run"
    assert ragdx_run(store, qs, run, "--lease-seconds", "2", "--fault", "after_draft").returncode == FAULT_EXIT
    with RunState(run / "run.db") as state:
        evidence = state.draft(0).trace["evidence"]
    with SQLiteStore(store, "read") as opened:
        first_id = opened.store_id
    assert [c["doc"] for c in evidence["cited"]][0] == "d0.md"
    deleted = "Item 0 refunds are accepted within 10 days"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    kept = [line for line in manifest(tmp_path / "corpus").read_text().splitlines() if '"d0.md"' not in line]
    with SQLiteStore(store) as rebuilt:
        build_ingestor(rebuilt, load_settings(overrides=SETTINGS)).run(write(tmp_path / "corpus" / "k.jsonl",
                                                                             "\n".join(kept)))
        assert (rebuilt.index_version, evidence["index_version"]) == (1, 1) and rebuilt.store_id != first_id
        new_id = rebuilt.store_id
    wait_past_lease(run)
    again = subprocess.run([sys.executable, "-m", "ragdx.cli", "run", "--resume", str(run)],
                           capture_output=True, text=True)
    assert again.returncode == EXIT_ITEMS_FAILED, again.stderr  # the run finished, an item failed
    seen = inspect_run(run)
    assert (seen["counts"]["published"], seen["counts"]["failed"]) == (0, 1)
    [failed] = seen["items"]["failed"]
    cited = evidence["cited"][0]
    assert failed["reason"].startswith(f"evidence_changed_or_expired: d0.md@{cited['version']} [{cited['start']}:"
                                       f"{cited['end']}] missing (no such document in this store)")
    assert failed["reason"].endswith(f"(in store {new_id}; the answer was bound to store {first_id})")
    assert lines(run / "traces.jsonl") == lines(run / "diagnosis.jsonl") == []
    assert deleted not in ((run / "traces.jsonl").read_text() if (run / "traces.jsonl").exists() else "")
    assert evidence["store_id"] == first_id  # the draft was bound to the first store


def test_a_dead_workers_draft_is_read_span_by_span_from_a_store_restored_with_the_same_id(tmp_path):
    """Issue 51: the store is restored from a copy made before it was filled (the same store id)
    and filled again without the cited document, back to the same index version (1): the same id
    and version let the recovered draft take the unchanged store's shortcut, and it was published
    citing a document the store no longer holds."""
    store = tmp_path / "s.db"
    SQLiteStore(store).close()  # an empty store: its id is made now
    blank = tmp_path / "blank.db"
    blank.write_bytes(store.read_bytes())
    with SQLiteStore(store) as opened:
        build_ingestor(opened, load_settings(overrides=SETTINGS)).run(manifest(tmp_path / "corpus"))
        first_id = opened.store_id
    queries(tmp_path, 1)
    qs, run = one_query(tmp_path, store), tmp_path / "run"
    assert ragdx_run(store, qs, run, "--lease-seconds", "2", "--fault", "after_draft").returncode == FAULT_EXIT
    with RunState(run / "run.db") as state:
        evidence = state.draft(0).trace["evidence"]
    assert [c["doc"] for c in evidence["cited"]][0] == "d0.md"
    for suffix in ("-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    store.write_bytes(blank.read_bytes())
    kept = [line for line in manifest(tmp_path / "corpus").read_text().splitlines() if '"d0.md"' not in line]
    with SQLiteStore(store) as restored:
        build_ingestor(restored, load_settings(overrides=SETTINGS)).run(write(tmp_path / "corpus" / "k.jsonl",
                                                                              "\n".join(kept)))
        assert (restored.store_id, restored.index_version) == (first_id, evidence["index_version"]) == (first_id, 1)
    wait_past_lease(run)
    again = subprocess.run([sys.executable, "-m", "ragdx.cli", "run", "--resume", str(run)],
                           capture_output=True, text=True)
    assert again.returncode == EXIT_ITEMS_FAILED, again.stderr
    seen = inspect_run(run)
    assert (seen["counts"]["published"], seen["counts"]["failed"]) == (0, 1)
    [failed] = seen["items"]["failed"]
    assert failed["reason"].startswith("evidence_changed_or_expired: d0.md@")
    assert "missing (no such document in this store)" in failed["reason"]
    assert lines(run / "traces.jsonl") == []


def test_a_dead_workers_draft_is_published_after_an_unrelated_change(corpus, tmp_path):
    store, _ = corpus
    qs, run = one_query(tmp_path, store), tmp_path / "run"
    assert ragdx_run(store, qs, run, "--lease-seconds", "2", "--fault", "after_draft").returncode == FAULT_EXIT
    with RunState(run / "run.db") as state:
        drafted = state.draft(0)
    cited = {c["doc"] for c in drafted.trace["evidence"]["cited"]}
    assert cited and "d5.md" not in cited  # the draft cites something, and not d5.md
    with SQLiteStore(store, "write") as opened:  # d5.md is not what q0's answer cites
        build_ingestor(opened, load_settings(overrides=SETTINGS)).run(manifest(tmp_path / "corpus", ships5=9))
        assert opened.index_version == 2
    wait_past_lease(run)
    again = ragdx_run(store, qs, run)  # re-running the same command resumes
    assert again.returncode == 0, again.stderr
    seen = inspect_run(run)
    assert seen["counts"]["published"] == 1 and len(seen["checkpoints"]) == 1
    assert lines(run / "traces.jsonl") == [drafted.trace] and lines(run / "diagnosis.jsonl") == [drafted.diagnosis]
    assert drafted.trace["evidence"]["index_version"] == 1


def test_a_torn_publication_is_undone_not_doubled(corpus, tmp_path):
    """--fault before_publish: the lines reach the files, the publication is not committed; the
    next worker cuts them away and publishes the draft once."""
    store, qs = corpus
    run = tmp_path / "run"
    assert ragdx_run(store, qs, run, "--lease-seconds", "1", "--fault", "before_publish").returncode == FAULT_EXIT
    assert [d["id"] for d in lines(run / "diagnosis.jsonl")] == ["q0"]  # appended, not committed
    assert inspect_run(run)["counts"]["drafted"] == 1
    wait_past_lease(run)
    assert ragdx_run(store, qs, run).returncode == 0
    ids = [d["id"] for d in lines(run / "diagnosis.jsonl")]
    assert len(ids) == 200 and len(set(ids)) == 200
    assert [t["query_id"] for t in lines(run / "traces.jsonl")] == ids


def test_kill_9_at_random_points_then_resume_equals_an_uninterrupted_run(corpus, tmp_path):
    store, qs = corpus
    queries_ = load_queries(qs)
    with SQLiteStore(store, "read") as opened:
        single = run_pipeline(build_pipeline(opened, load_settings(overrides=SETTINGS)), queries_,
                              tmp_path / "single", progress=False)
    run, rng = tmp_path / "run", random.Random(19)
    # the first worker dies at a random moment of its start (before or while it submits), the
    # others once a random number of items is published: wherever they are in the next item
    kills = [("seconds", rng.uniform(0.1, 0.6))] + [("published", n) for n in sorted(rng.sample(range(10, 180), 4))]
    for how, at in kills:
        worker = ragdx_run(store, qs, run, "--lease-seconds", "1", wait=False)
        if how == "seconds":
            time.sleep(at)
        else:
            deadline = time.monotonic() + 60
            while published_count(run) < at and worker.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
        assert worker.poll() is None  # killed while it ran
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    assert kills[-1][1] <= published_count(run) < 200  # the kills interrupted the run
    done = ragdx_run(store, qs, run)
    assert done.returncode == 0, done.stderr
    published = lines(run / "diagnosis.jsonl")
    assert len(published) == 200 and len({d["id"] for d in published}) == 200
    assert sorted(published, key=lambda d: int(d["id"][1:])) == [d.to_dict() for d in single.diagnoses]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["overall"]["outcomes"] == json.loads((tmp_path / "single" / "metrics.json").read_text())[
        "overall"]["outcomes"]
    with RunState(run / "run.db") as state:
        assert state.counts()[ItemState.PUBLISHED] == 200
        assert len(state.events("lease_expired")) >= 1  # an item in flight at a kill was taken again


def test_two_workers_share_a_run_and_never_take_an_item_twice(corpus, tmp_path):
    store, qs = corpus
    run = tmp_path / "run"
    workers = [ragdx_run(store, qs, run, wait=False) for _ in range(2)]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    with RunState(run / "run.db") as state:
        claimed = Counter(n for n, _, _, _ in state.events("claimed"))
        drafted_by = Counter(c["worker"] for c in state.checkpoints())
    assert sorted(claimed) == list(range(200)) and set(claimed.values()) == {1}
    assert len(drafted_by) == 2 and sum(drafted_by.values()) == 200  # both worked, each item once
    ids = [d["id"] for d in lines(run / "diagnosis.jsonl")]
    assert sorted(ids) == sorted(f"q{k}" for k in range(200))


def test_an_index_change_mid_run_is_said_in_the_manifest_and_report(corpus, tmp_path):
    store, _ = corpus
    qs = write(tmp_path / "four.jsonl", "\n".join((tmp_path / "q.jsonl").read_text().splitlines()[:4]) + "\n")
    run = tmp_path / "run"
    assert ragdx_run(store, qs, run, "--lease-seconds", "1", "--fault", "after_draft").returncode == FAULT_EXIT
    with SQLiteStore(store, "write") as opened:
        build_ingestor(opened, load_settings(overrides=SETTINGS)).run(manifest(tmp_path / "corpus", ships5=9))
    wait_past_lease(run)
    done = ragdx_run(store, qs, run)
    assert done.returncode == 0, done.stderr
    assert "answers made at versions 1, 2" in done.stdout
    durable = json.loads((run / "manifest.json").read_text())["durable"]
    assert durable["index_version_changed"] is True and durable["index_versions"] == [1, 2]
    assert "the index version changed while the run ran" in (run / "report.html").read_text()
    assert [c["index_version"] for c in inspect_run(run)["checkpoints"]] == [1, 2, 2, 2]


def test_a_folder_of_another_run_is_refused_and_bad_options_are_named(corpus, tmp_path):
    store, qs = corpus
    run = tmp_path / "run"
    assert ragdx_run(store, one_query(tmp_path, store), run).returncode == 0
    again = ragdx_run(store, one_query(tmp_path, store), run)
    assert "finished, nothing left to do (1 published, 0 failed)" in again.stdout
    other = ragdx_run(store, qs, run)
    assert other.returncode == 2 and "holds a run of other queries_sha256" in other.stderr
    assert "--lease-seconds must be positive" in ragdx_run(store, qs, tmp_path / "r2", "--lease-seconds", "0").stderr
    missing = subprocess.run([sys.executable, "-m", "ragdx.cli", "run", "--inspect", str(tmp_path)],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "run.db not found" in missing.stderr
    fault = next(a for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions
                 if a.dest == "fault")
    assert fault.choices == [f.value for f in Fault]


def test_a_draft_is_discarded_when_the_lease_was_taken(tmp_path):
    """A worker whose lease expired and was taken by another keeps no draft and publishes nothing."""
    with RunState(tmp_path / "run.db") as state:
        state.submit(["a", "b"], {"fingerprint": {}})
        slow = state.claim("w1", lease_seconds=0.01)
        time.sleep(0.02)
        fast = state.claim("w2", lease_seconds=60)
        assert (slow.n, fast.n, fast.attempt) == (0, 0, 2)
        assert state.write_draft(slow, "w1", 1, "{}", "{}", ()) is None
        assert state.write_draft(fast, "w2", 1, '{"t": 1}', '{"d": 1}', ()).trace == {"t": 1}
        with state.publishing(0, "w1") as sizes:
            assert sizes is None
        assert [c["worker"] for c in state.checkpoints()] == ["w2"]
        assert [e for _, _, e, _ in state.events()] == ["submitted", "claimed", "lease_expired", "claimed",
                                                          "draft_discarded", "drafted"]
        assert state.claim("w3", 60).n == 1  # item 0 is held; the next is free
        assert state.claim("w3", 60) is None
    assert sqlite3.connect(str(tmp_path / "run.db")).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_published_lines_are_cut_back_to_the_last_commit_or_written_again(tmp_path):
    from ragdx.runfolder import append_published
    traces, diagnoses = tmp_path / "traces.jsonl", tmp_path / "diagnosis.jsonl"
    sizes = append_published(tmp_path, (0, 0), ("t1", "d1"), lambda: [])
    assert sizes == (3, 3)
    traces.write_text("t1\nt2-torn")  # a publication appended, its commit never made
    sizes = append_published(tmp_path, sizes, ("t2", "d2"), lambda: pytest.fail("nothing is lost"))
    assert (traces.read_text(), diagnoses.read_text(), sizes) == ("t1\nt2\n", "d1\nd2\n", (6, 6))
    traces.write_text("")  # the machine was lost before the committed lines reached the disk
    sizes = append_published(tmp_path, sizes, ("t3", "d3"), lambda: [("t1", "d1"), ("t2", "d2")])
    assert (traces.read_text(), diagnoses.read_text(), sizes) == ("t1\nt2\nt3\n", "d1\nd2\nd3\n", (9, 9))
