"""Durability and concurrency of the store and its index versions (issue 15): a `ragdx` command
killed with SIGKILL at an exact point (``RAGDX_KILL_AT``) of an ingest, an edit, a delete, an
index build, a switch or a rollback leaves a consistent store whose live index answers; a reader
during edits and switches never sees a half-applied change; a second writer waits or fails. A
build, a switch and a rollback killed are tested on every backend alike in
tests/store_pg/test_index_versions_backends.py (with :func:`sound` and :func:`killed` from here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragdx.index import versions as indexing
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
                          text=True, timeout=180, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def sound(store):
    """The store (of any backend) passes its checks, its keyword mirror answers as FTS5 does (SQLite),
    it has one live index, and every current version is in it. Returns the store."""
    assert store.verify() == [] and store.audit()[0] == []
    if isinstance(store, SQLiteStore):
        for terms in TERMS:
            for groups in (("public",), ("staff",)):
                assert store.bm25(terms, groups, 20) == store.fts5_bm25(terms, groups, 20)
    assert [v.state for v in store.index_versions()].count(SpaceState.ACTIVE) == 1
    # the live index holds every current version (an empty or half-copied one fails here)
    empty = [f"{v.document.doc_id}@{v.document.version}" for v in store.versions()
             if v.document.status is DocStatus.CURRENT and not store.chunk_count(v.document.doc_id, v.document.version)]
    assert empty == [] and store.versions()
    return store


def consistent(path: Path) -> SQLiteStore:
    return sound(SQLiteStore(path, "write"))


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


BUILD = textwrap.dedent("""
    import sys
    from ragdx.index import versions
    from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
    from ragdx.store.sqlite import SQLiteStore
    with SQLiteStore(sys.argv[1], "write") as store:
        built = versions.build_index(store, ChunkerConfig(max_tokens=12), RegexTokenCounter(), batch=1)
        print(built.chunked, built.copied, built.chunks)
""")


def test_a_build_killed_after_its_second_batch_keeps_both_and_resumes_with_the_third(corpus):
    proc = subprocess.run([sys.executable, "-c", BUILD, str(corpus)], env=dict(os.environ, RAGDX_KILL_AT="staged:2"),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with consistent(corpus) as store:
        [_, building] = store.index_versions()
        assert (building.state, building.versions) == (SpaceState.BUILDING, 2)
        staged = {c.id for c in store.staged_chunks(building.id)}
    done = subprocess.run([sys.executable, "-c", BUILD, str(corpus)], capture_output=True, text=True, timeout=60,
                          check=True)
    chunked, copied, chunks = map(int, done.stdout.split())
    with consistent(corpus) as store:
        [_, built] = store.index_versions()
        assert (chunked, copied, built.state, built.versions, chunks) == (1, 0, SpaceState.BUILT, 3, built.chunks)
        assert staged < {c.id for c in store.staged_chunks(built.id)}  # the two batches kept, the third added


EMBED = textwrap.dedent("""
    import sys
    from ragdx.index import versions
    from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
    from ragdx.ingest.embed import Embedder
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.testing.encoders import HashingEncoder
    with SQLiteStore(sys.argv[1], "write") as store:
        built = versions.build_index(store, ChunkerConfig(max_tokens=12), RegexTokenCounter(), batch=2,
                                     embedder=Embedder(HashingEncoder(), backend="HashingEncoder"))
        print(built.embedding.chunks, built.chunks)
""")


def test_a_build_killed_while_embedding_keeps_the_vectors_it_committed(tmp_path):
    from ragdx.build import build_ingestor
    from ragdx.config import load_settings
    from ragdx.testing.encoders import HashingEncoder
    path = tmp_path / "d.db"
    with SQLiteStore(path) as store:
        build_ingestor(store, load_settings(overrides=["chunking.tokenizer=regex", "rerank.method=none"]),
                       encoder=HashingEncoder()).run(manifest(tmp_path / "c"))
    proc = subprocess.run([sys.executable, "-c", EMBED, str(path)], env=dict(os.environ, RAGDX_KILL_AT="embedded:2"),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with SQLiteStore(path, "read") as store:
        assert store._db.execute("SELECT COUNT(*) FROM staged_vectors").fetchone() == (4,)  # two batches of 2
    done = subprocess.run([sys.executable, "-c", EMBED, str(path)], capture_output=True, text=True, timeout=60,
                          check=True)
    embedded, chunks = map(int, done.stdout.split())
    with SQLiteStore(path, "read") as store:
        space = store.active_space().id
        assert embedded == chunks - 4 and store.staged_chunks("ix_1", without_vector_in=space) == []


def test_a_migration_killed_before_its_commit_leaves_schema_1(corpus):
    from tests.test_index_versions import schema_1
    schema_1(corpus)
    before = snapshot(corpus)
    killed(["delete", "--store", str(corpus), "refund.md"], "commit")  # the first commit: the migration's
    assert snapshot(corpus) == before
    with SQLiteStore(corpus, "read") as store:
        assert store._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
    with consistent(corpus) as store:  # migrated now, whole
        assert [(v.id, v.state) for v in store.index_versions()] == [(INITIAL_INDEX, SpaceState.ACTIVE)]


@pytest.fixture
def verified(corpus):
    with SQLiteStore(corpus, "write") as store:
        index_id = indexing.build_index(store, ChunkerConfig(max_tokens=12), RegexTokenCounter()).index_id
        assert indexing.verify_index(store, index_id).problems == ()
    return corpus


READER = textwrap.dedent("""
    import json, sys
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.types import VersionFilter
    store = SQLiteStore(sys.argv[1], "read")
    current = VersionFilter.for_question("weeks")
    for line in sys.stdin:  # one view of the store per request
        hits = store.bm25(["parcels", "weeks", "refunds", "bonuses"], ("public",), 100, versions=current)
        store._db.execute("BEGIN")
        count, configs = store._db.execute(
            "SELECT COUNT(*), GROUP_CONCAT(DISTINCT config_id) FROM chunks c JOIN documents d "
            "ON d.doc_id = c.doc_id AND d.version = c.version WHERE d.status = 'current'").fetchone()
        store._db.execute("COMMIT")
        print(json.dumps({"hits": sorted(c.id for c, _ in hits), "weeks": sorted(c.text for c, _ in hits
                          if "weeks" in c.text), "chunks": count, "configs": sorted(configs.split(","))}), flush=True)
""")


def test_a_reader_sees_the_whole_change_or_none_of_it_at_every_commit_point(verified, tmp_path):
    """The writer stops at every commit point (about to commit, just committed) while a reader in
    another process takes its view: before the commit it is the view before the change, after it
    the view after, and no change commits in more than one step."""
    from ragdx._faults import pausing
    from ragdx.build import build_ingestor
    from ragdx.config import load_settings
    reader = subprocess.Popen([sys.executable, "-c", READER, str(verified)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def view() -> str:
        reader.stdin.write("view\n")
        reader.stdin.flush()
        line = reader.stdout.readline()
        assert line, reader.stderr.read()
        return line

    seen: list[tuple[str, str]] = []

    def at(point: str) -> None:
        if point in ("commit", "committed"):
            seen.append((point, view()))

    def edit(word: str, settings: list[str]):
        docs = dict(DOCS, **{"shipping.md": DOCS["shipping.md"].replace("two", word)})
        return lambda store: build_ingestor(store, load_settings(overrides=[*OFF[1::2], *settings])).run(
            manifest(tmp_path / "c", docs=docs))

    changes = [lambda store: indexing.switch_index(store, "ix_1"), edit("three", ["chunking.max_tokens=12"]),
               lambda store: indexing.rollback_index(store), edit("four", [])]
    views: list[str] = []
    try:
        with SQLiteStore(verified, "write") as store:
            for change in changes:
                before = view()
                seen.clear()
                with pausing(at):
                    change(store)
                after = view()
                assert before != after  # premise: the reader can tell the two apart
                assert seen == [("commit", before), ("committed", after)]
                views += [before, after]
        # every view is of one chunker, and the reader saw both indexes
        assert sorted({tuple(json.loads(v)["configs"]) for v in views}) == sorted(
            {(ChunkerConfig(max_tokens=12).id,), (ChunkerConfig(max_tokens=200).id,)})
    finally:
        reader.kill()
        reader.wait()


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
