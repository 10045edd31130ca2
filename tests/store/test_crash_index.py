"""Durability and concurrency of the store and its index versions (issue 15): a `ragdx` command
killed with SIGKILL at an exact point (``RAGDX_KILL_AT``) of an ingest, an edit, a delete, an
index build, a switch or a rollback leaves a consistent store whose live index answers; a reader
during edits and switches never sees a half-applied change; a second writer waits or fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragdx import indexing
from ragdx.errors import StoreError
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
from ragdx.store.sqlite import INITIAL_INDEX, SQLiteStore
from ragdx.types import DocStatus, SpaceState, VersionFilter
from tests.conftest import snapshot
from tests.test_index_versions import DOCS, ingest, manifest

CLI = [sys.executable, "-m", "ragdx.cli"]
OFF = ["--set", "retrieval.dense.enabled=false", "--set", "chunking.tokenizer=regex"]
TERMS = (["refunds", "gift"], ["parcels", "abroad"], ["bonuses"], ["weeks"])


def killed(args: list[str], point: str) -> None:
    """Run ``ragdx ARGS`` until it kills itself at ``point``."""
    proc = subprocess.run(CLI + args, env=dict(os.environ, RAGDX_KILL_AT=point), capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def consistent(path: Path) -> SQLiteStore:
    """The store passes its checks, and its keyword mirror answers as FTS5 does."""
    store = SQLiteStore(path, "write")
    assert store.verify() == [] and store.audit()[0] == []
    for terms in TERMS:
        for groups in (("public",), ("staff",)):
            assert store.bm25(terms, groups, 20) == store.fts5_bm25(terms, groups, 20)
    assert [v.state for v in store.index_versions()].count(SpaceState.ACTIVE) == 1
    return store


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        ingest(store, tmp_path / "c")
    return path


def edited(tmp_path: Path) -> Path:
    return manifest(tmp_path / "c", docs=dict(DOCS, **{"shipping.md": DOCS["shipping.md"].replace("two", "three")}))


@pytest.mark.parametrize("what", ["ingest", "edit", "delete"])
def test_a_write_killed_before_its_commit_leaves_the_store_as_it_was(corpus, tmp_path, what):
    before = snapshot(corpus)
    args = {"ingest": ["ingest", "--store", str(corpus), str(manifest(tmp_path / "n", docs={"new.md": "# New\n\nNew text.\n"})), *OFF],
            "edit": ["ingest", "--store", str(corpus), str(edited(tmp_path)), *OFF],
            "delete": ["delete", "--store", str(corpus), "refund.md"]}[what]
    killed(args, "commit")
    assert snapshot(corpus) == before
    with consistent(corpus) as store:
        assert sorted(store.doc_ids()) == sorted(DOCS)


def test_an_edit_killed_just_after_its_commit_is_whole(corpus, tmp_path):
    killed(["ingest", "--store", str(corpus), str(edited(tmp_path)), *OFF], "committed")
    with consistent(corpus) as store:
        assert [v.document.status for v in store.versions("shipping.md")] == [DocStatus.SUPERSEDED, DocStatus.CURRENT]
        current = VersionFilter.for_question("weeks")
        [(chunk, _)] = store.bm25(["weeks"], ("public",), 5, versions=current)
        assert "three weeks" in chunk.text


@pytest.mark.parametrize("point", ["commit:3", "staged:1"])
def test_a_build_killed_midway_leaves_the_live_index_and_continues(corpus, point):
    live = [(c.id, c.text) for c in SQLiteStore(corpus, "read").chunks()]
    build = ["index", "build", "--chunks", "--store", str(corpus), *OFF, "--set", "chunking.max_tokens=12"]
    killed(build, point)
    with consistent(corpus) as store:
        assert [(c.id, c.text) for c in store.chunks()] == live
        [_, building] = store.index_versions()
        assert building.state is SpaceState.BUILDING
        assert building.versions == (0 if point == "commit:3" else 3)
    subprocess.run(CLI + build, check=True, capture_output=True)
    with consistent(corpus) as store:
        [_, built] = store.index_versions()
        assert (built.id, built.state, built.versions) == ("ix_1", SpaceState.BUILT, 3)


@pytest.fixture
def verified(corpus):
    with SQLiteStore(corpus, "write") as store:
        index_id = indexing.build_index(store, ChunkerConfig(max_tokens=12), RegexTokenCounter()).index_id
        assert indexing.verify_index(store, index_id).problems == ()
    return corpus


@pytest.mark.parametrize("point", ["commit", "committed"])
def test_a_switch_killed_is_all_or_nothing(verified, point):
    before = snapshot(verified)
    killed(["index", "switch", "--store", str(verified), "--index", "ix_1", *OFF], point)
    if point == "commit":
        assert snapshot(verified) == before
    with consistent(verified) as store:
        live = store.live_index().id
        assert live == (INITIAL_INDEX if point == "commit" else "ix_1")
        assert len({c.config_id for c in store.chunks()}) == 1
        assert (ChunkerConfig(max_tokens=12).id in {c.config_id for c in store.chunks()}) == (live == "ix_1")
        assert {c.doc_id for c, _ in store.bm25(["bonuses"], ("staff",), 5)} == {"salaries.md"}


def test_a_rollback_killed_before_its_commit_leaves_the_switched_index(verified):
    with SQLiteStore(verified, "write") as store:
        indexing.switch_index(store, "ix_1")
    before = snapshot(verified)
    killed(["index", "rollback", "--chunks", "--store", str(verified), *OFF], "commit")
    assert snapshot(verified) == before
    with consistent(verified) as store:
        assert store.live_index().id == "ix_1"


READER = textwrap.dedent("""
    import sys, pathlib
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.types import VersionFilter
    path, stop, counts = sys.argv[1], pathlib.Path(sys.argv[2]), set(map(int, sys.argv[3].split(",")))
    store = SQLiteStore(path, "read")
    current = VersionFilter.for_question("weeks")
    checks = 0
    print("ready", flush=True)
    while not stop.exists() or checks < 50:
        hits = store.bm25(["parcels", "weeks", "refunds", "bonuses"], ("public",), 100, versions=current)
        configs = {c.config_id for c, _ in hits}
        weeks = [c.text for c, _ in hits if "weeks" in c.text]
        store._db.execute("BEGIN")
        chunks = store._db.execute("SELECT COUNT(*), COUNT(DISTINCT config_id) FROM chunks c JOIN documents d "
                                   "ON d.doc_id = c.doc_id AND d.version = c.version WHERE d.status = 'current'"
                                   ).fetchone()
        store._db.execute("COMMIT")
        problem = (len(configs) != 1 and f"a mix of chunkers {configs}"
                   or len(weeks) != 1 and f"{len(weeks)} current chunks about weeks: {weeks}"
                   or any(c.doc_id == "salaries.md" for c, _ in hits) and "a restricted chunk"
                   or chunks[1] != 1 and f"the chunks table mixes {chunks[1]} chunkers"
                   or chunks[0] not in counts and f"{chunks[0]} current chunks, neither index's count {counts}")
        if problem:
            print("FAIL", checks, problem, flush=True)
            sys.exit(1)
        checks += 1
    print("ok", checks, flush=True)
""")


def test_a_reader_never_sees_a_half_applied_switch_or_edit(verified, tmp_path):
    with SQLiteStore(verified, "write") as store:
        old = len(store.chunks())
        new = store.index_version_of("ix_1").chunks
    stop = tmp_path / "stop"
    # the shipping.md edits below keep the current versions' chunk count in both indexes (one word
    # changes); a half-applied edit (a new version, the old one still current) would count more
    reader = subprocess.Popen([sys.executable, "-c", READER, str(verified), str(stop), f"{old},{new}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready"
        with SQLiteStore(verified, "write") as store:
            for i in range(4):
                indexing.switch_index(store, "ix_1") if i % 2 == 0 else indexing.rollback_index(store)
                word = ("three", "four", "five", "six")[i]
                docs = dict(DOCS, **{"shipping.md": DOCS["shipping.md"].replace("two", word)})
                settings = ["chunking.max_tokens=12"] if i % 2 == 0 else []
                from ragdx.build import build_ingestor
                from ragdx.config import load_settings
                build_ingestor(store, load_settings(overrides=[
                    "retrieval.dense.enabled=false", "chunking.tokenizer=regex", *settings])).run(
                    manifest(tmp_path / "c", docs=docs))
        stop.touch()
        out, err = reader.communicate(timeout=60)
    finally:
        stop.touch()
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0, out + err
    assert out.startswith("ok")


def test_a_second_writer_during_a_switch_fails_with_a_message_and_changes_nothing(verified):
    holder = SQLiteStore(verified, "write")
    holder._db.execute("BEGIN IMMEDIATE")  # another process's write in progress
    try:
        before = snapshot(verified)
        with SQLiteStore(verified, "write", wait=0.2) as second, pytest.raises(StoreError) as info:
            indexing.switch_index(second, "ix_1")
        assert str(info.value) == (f"{verified}: another process is still writing to this store after "
                                   "0.2 s; nothing was written: try again when it has finished")
    finally:
        holder._db.execute("ROLLBACK")
        holder.close()
    assert snapshot(verified) == before
