"""Parsing on several processes: the same store as one process, and the same errors."""

import json

import pytest

from ragdx.errors import InputError
from ragdx.ingest import ingestor
from ragdx.ingest.ingestor import PARALLEL_FROM, Ingestor
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import snapshot, write


def corpus(root, n):
    for i in range(n):
        write(root / f"doc{i:03d}.md", f"# Page {i}\n\n## Part\n\nParagraph {i} of the corpus, "
              f"about refunds.\n\n## Other\n\n{'word ' * (i % 7 + 3)}end.")
    return root


def rows(store):
    return [(c.id, c.doc_id, c.version, c.start, c.end, c.text, c.prefix) for c in store.chunks()]


def test_two_workers_store_what_one_does(tmp_path, monkeypatch):
    pools = []

    class CountedPool(ingestor.ProcessPoolExecutor):
        def __init__(self, workers, **kwargs):
            pools.append(workers)
            super().__init__(workers, **kwargs)

    monkeypatch.setattr(ingestor, "ProcessPoolExecutor", CountedPool)
    source = corpus(tmp_path / "docs", PARALLEL_FROM + 6)
    with SQLiteStore(tmp_path / "one.db") as one, SQLiteStore(tmp_path / "two.db") as two:
        a = Ingestor(one, workers=1).run(source)
        assert pools == []                       # one worker parses in this process
        b = Ingestor(two, workers=2).run(source)
        assert pools == [2]                      # two parse in a pool of two processes
        assert a.documents == b.documents == PARALLEL_FROM + 6
        assert rows(one) == rows(two) and len(rows(one)) == a.chunks > PARALLEL_FROM
        assert [v.document for v in one.versions()] == [v.document for v in two.versions()]


def test_a_bad_file_parsed_by_a_worker_is_named_with_its_manifest_line(tmp_path):
    source = corpus(tmp_path / "docs", PARALLEL_FROM)
    write(source / "doc010.md", b"\xff\xfe broken \x00 bytes")
    write(tmp_path / "seed" / "keep.md", "# Keep\n\nThis document was here before.")
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({"doc_id": f"d{i}", "path": str(source / f"doc{i:03d}.md")}) + "\n"
                                for i in range(PARALLEL_FROM)))
    with SQLiteStore(tmp_path / "store.db") as store:
        Ingestor(store).run(tmp_path / "seed")  # something stored that must stay as it is
        before = snapshot(tmp_path / "store.db")
        with pytest.raises(InputError) as caught:
            Ingestor(store, workers=2).run(manifest)
        assert (caught.value.file, caught.value.line, caught.value.field) == (str(manifest), 11, "path")
        assert "doc010.md" in str(caught.value) and "d10" in str(caught.value)
        assert snapshot(tmp_path / "store.db") == before


def test_workers_below_one_are_refused(tmp_path):
    with SQLiteStore(tmp_path / "store.db") as store, pytest.raises(Exception, match="at least 1, not 0"):
        Ingestor(store, workers=0)
