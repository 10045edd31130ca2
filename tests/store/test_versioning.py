"""Versions, statuses, access groups, deletions and the update log of the store."""

import json

import pytest

from ragdx.errors import InputError
from ragdx.ingest.chunk import ALGORITHM, ChunkerConfig
from ragdx.ingest.ingestor import Ingestor, delete_documents
from ragdx.store.sqlite import SQLiteStore
from ragdx.types import DocStatus
from tests.conftest import write


def manifest(folder, *lines):
    return write(folder / "manifest.jsonl", "\n".join(json.dumps(line) for line in lines) + "\n")


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "store.db") as s:
        yield s


def test_new_content_makes_a_new_version_and_same_content_changes_nothing(tmp_path, store):
    doc = write(tmp_path / "refund.md", "# Refunds\n\nRefunds are accepted within 14 days.")
    m = manifest(tmp_path, {"doc_id": "policies/refund.md", "path": "refund.md"})
    first = Ingestor(store).run(m)
    assert [a.action for a in first.actions] == ["add"]
    v1 = store.latest("policies/refund.md").document
    assert v1.version == v1.content_hash[:12] and v1.status is DocStatus.CURRENT
    assert store.index_version == 1

    again = Ingestor(store).run(m)
    assert [a.action for a in again.actions] == ["unchanged"]
    assert store.index_version == 1 and len(store.log_entries()) == 1

    doc.write_text("# Refunds\n\nRefunds are accepted within 30 days.", encoding="utf-8")
    third = Ingestor(store).run(m)
    assert [a.action for a in third.actions] == ["add"]
    versions = store.versions("policies/refund.md")
    assert [(v.document.version, v.document.status) for v in versions] == [
        (v1.version, DocStatus.SUPERSEDED), (third.actions[0].version, DocStatus.CURRENT)]
    assert store.texts("policies/refund.md", v1.version)[1].endswith("14 days.")  # kept exactly
    assert store.index_version == 2
    assert [e.op for e in store.log_entries()] == ["add", "add", "status"]


def test_acl_change_without_content_change_updates_in_place(tmp_path, store):
    write(tmp_path / "r.md", "Runbook text.")
    Ingestor(store).run(manifest(tmp_path, {"doc_id": "r", "path": "r.md", "acl": ["staff", "public"]}))
    report = Ingestor(store).run(manifest(tmp_path, {"doc_id": "r", "path": "r.md", "acl": ["staff"]}))
    assert [(a.action, a.detail) for a in report.actions] == [("update", "acl")]
    assert store.latest("r").document.acl == ("staff",)
    assert len(store.versions("r")) == 1
    assert store.log_entries()[-1].detail == '["public", "staff"] -> ["staff"]'


def test_explicit_version_reused_with_other_content_is_refused(tmp_path, store):
    doc = write(tmp_path / "a.md", "One.")
    m = manifest(tmp_path, {"doc_id": "a", "path": "a.md", "version": "v1"})
    Ingestor(store).run(m)
    doc.write_text("Two.", encoding="utf-8")
    before = store.index_version
    with pytest.raises(InputError, match=r"manifest.jsonl:1 field 'version': version 'v1' of 'a' is "
                                         "already stored with different content"):
        Ingestor(store).run(m)
    assert store.index_version == before and store.texts("a", "v1")[0] == "One."


def test_two_versions_in_one_manifest(tmp_path, store):
    write(tmp_path / "old.md", "Refunds within 14 days.")
    write(tmp_path / "new.md", "Refunds within 30 days.")
    m = manifest(tmp_path, {"doc_id": "p", "path": "old.md", "version": "2024"},
                 {"doc_id": "p", "path": "new.md", "version": "2026"})
    Ingestor(store).run(m)
    assert [(v.document.version, v.document.status.value) for v in store.versions("p")] == [
        ("2024", "superseded"), ("2026", "current")]
    assert [a.action for a in Ingestor(store).run(m).actions] == ["unchanged", "unchanged"]


def test_rechunking_is_recorded(tmp_path, store):
    write(tmp_path / "a.md", "# A\n\n" + " ".join(["Refunds are accepted within thirty days."] * 20))
    m = manifest(tmp_path, {"doc_id": "a", "path": "a.md"})
    Ingestor(store, ChunkerConfig(max_tokens=100)).run(m)
    n_before = len(store.chunks("a"))
    report = Ingestor(store, ChunkerConfig(max_tokens=30)).run(m)
    assert [a.action for a in report.actions] == ["rechunk"]
    chunks = store.chunks("a")
    assert len(chunks) > n_before
    assert {c.config_id for c in chunks} == {ChunkerConfig(max_tokens=30).id}
    assert store.latest("a").chunker_config == json.dumps(
        {"algorithm": ALGORITHM, "heading_prefix": True, "max_tokens": 30, "overlap_tokens": 0,
         "tokenizer": "regex:words+punct"}, sort_keys=True)
    assert store.log_entries()[-1].op == "rechunk" and store.verify() == []


def test_delete_removes_text_and_leaves_a_tombstone(tmp_path, store):
    write(tmp_path / "a.md", "Alpha.")
    write(tmp_path / "b.md", "Beta.")
    Ingestor(store).run(manifest(tmp_path, {"doc_id": "a", "path": "a.md"},
                                 {"doc_id": "b", "path": "b.md"}))
    with pytest.raises(InputError, match="no document 'zzz'"):
        delete_documents(store, ["a", "zzz"])
    assert store.doc_ids() == ["a", "b"]  # all or nothing
    deleted = delete_documents(store, ["a"])
    assert list(deleted) == ["a"]
    assert store.doc_ids() == ["b"] and store.chunks("a") == []
    assert store.tombstone("a")[1] == deleted["a"]
    assert store.verify() == []


def test_neighbours_and_sections(tmp_path, store):
    write(tmp_path / "a.md", "# A\n\n" + "\n\n".join(f"Paragraph {i} has some words." for i in range(6)))
    Ingestor(store, ChunkerConfig(max_tokens=8)).run(manifest(tmp_path, {"doc_id": "a", "path": "a.md"}))
    chunks = store.chunks("a")
    middle = chunks[3]
    assert [c.id for c in store.neighbours(middle.id, 1)] == [c.id for c in chunks[2:5]]
    section = store.section(middle.section_id)
    parsed = store.texts("a", middle.version)[1]
    assert parsed[section.start:section.end] == parsed  # the only section spans the document
    assert section.heading_path == ("A",)


def test_example_store_is_consistent(example_store):
    assert example_store.verify() == []
    counts = example_store.counts()
    assert counts["documents"] == 14 and counts["versions"] == 15
    runbook = example_store.latest("internal/refund-runbook.md").document
    assert runbook.acl == ("staff",)
    refund = example_store.versions("policies/refund.md")
    assert [(v.document.version, v.document.status.value) for v in refund] == [
        ("2024-01", "superseded"), ("2026-03", "current")]
