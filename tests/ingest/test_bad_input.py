"""Every kind of bad input gets an error naming file, line and field, and leaves the store as it was."""

import json
import logging

import pytest

from ragdx.errors import InputError
from ragdx.ingest.ingestor import Ingestor
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import snapshot, write


@pytest.fixture
def filled(tmp_path):
    """A store that already holds one document, and its snapshot."""
    write(tmp_path / "corpus" / "good.md", "# Good\n\nRefunds are accepted within 30 days.")
    write(tmp_path / "seed.jsonl", json.dumps({"doc_id": "good", "path": "corpus/good.md"}) + "\n")
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        Ingestor(store).run(tmp_path / "seed.jsonl")
    return path, snapshot(path)


def run_bad(tmp_path, filled, lines, files=None):
    path, before = filled
    for name, content in (files or {}).items():
        write(tmp_path / "corpus" / name, content)
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    manifest = write(tmp_path / "bad.jsonl", text)
    with SQLiteStore(path) as store, pytest.raises(InputError) as info:
        Ingestor(store).run(manifest)
    assert snapshot(path) == before, "a failed ingest changed the store"
    return str(info.value)


GOOD = {"doc_id": "new", "path": "corpus/new.md"}
NEW = {"new.md": "A new document."}


def test_missing_file(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "x", "path": "corpus/missing.md"}], NEW)
    assert "bad.jsonl:2 field 'path'" in msg and "missing.md" in msg and "file not found" in msg


def test_unreadable_file(tmp_path, filled):
    (tmp_path / "corpus" / "dir.md").mkdir(parents=True)
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "x", "path": "corpus/dir.md"}], NEW)
    assert "bad.jsonl:2" in msg and "dir.md" in msg and "directory" in msg


def test_unknown_format(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "x", "path": "corpus/x.docx"}],
                  {**NEW, "x.docx": "binary"})
    assert "bad.jsonl:2" in msg and "unknown format" in msg and "'.docx'" in msg


def test_unknown_declared_format(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [{"doc_id": "x", "path": "corpus/new.md", "format": "docx"}], NEW)
    assert "bad.jsonl:1 field 'format'" in msg and "'docx'" in msg and "markdown" in msg


def test_undecodable_bytes(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "x", "path": "corpus/latin1.md"}],
                  {**NEW, "latin1.md": "Caf\xe9 ok\nna\xefve".encode("latin-1")})
    assert "bad.jsonl:2" in msg and "latin1.md" in msg
    assert "not valid UTF-8: byte 0xe9 at offset 3" in msg


def test_empty_document(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "x", "path": "corpus/empty.html"}],
                  {**NEW, "empty.html": "<html><nav>only navigation</nav><script>x()</script></html>"})
    assert "empty.html" in msg and "empty document" in msg and "bad.jsonl:2" in msg


def test_duplicate_doc_id(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "new", "path": "corpus/new.md"}], NEW)
    assert "bad.jsonl:2 field 'doc_id'" in msg and "duplicate doc_id 'new' (first on line 1)" in msg


def test_malformed_jsonl_line(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [GOOD, "", '{"doc_id": "x", "path": }'], NEW)
    assert msg.startswith(str(tmp_path / "bad.jsonl") + ":3: malformed JSON at column 25")


def test_line_that_is_not_an_object(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [GOOD, '["doc_id", "x"]'], NEW)
    assert "bad.jsonl:2: expected a JSON object, got list" in msg


@pytest.mark.parametrize("field, value, expected", [
    ("acl", "public", 'field \'acl\': expected a list, got "public"'),
    ("acl", [1], "field 'acl': expected a list of non-empty strings, got [1]"),
    ("acl", [], "field 'acl': must list at least one group"),
    ("version", 3, "field 'version': expected a string, got 3"),
    ("status", "archived", "field 'status': status must be one of 'current', 'superseded', 'expired', "
                           "not 'archived'"),
    ("metadata", ["x"], "field 'metadata': expected an object, got [\"x\"]"),
    ("updated_at", "yesterday", "field 'updated_at': not an ISO 8601 date-time: 'yesterday'"),
    ("doc_id", "", "field 'doc_id': must not be empty"),
    ("acls", ["public"], "field 'acls': unknown field"),
])
def test_field_of_the_wrong_type(tmp_path, filled, field, value, expected):
    msg = run_bad(tmp_path, filled, [GOOD, {**GOOD, "doc_id": "y", field: value}], NEW)
    assert f"bad.jsonl:2 {expected}" in msg


def test_missing_required_field(tmp_path, filled):
    msg = run_bad(tmp_path, filled, [{"doc_id": "y"}], NEW)
    assert "bad.jsonl:1 field 'path': required field is missing" in msg


def test_missing_manifest_and_empty_folder(tmp_path, filled):
    path, before = filled
    with SQLiteStore(path) as store:
        with pytest.raises(InputError, match="no such manifest file or folder"):
            Ingestor(store).run(tmp_path / "nope.jsonl")
        (tmp_path / "empty").mkdir()
        with pytest.raises(InputError, match="no documents of a known format"):
            Ingestor(store).run(tmp_path / "empty")
    assert snapshot(path) == before


def test_folder_ingest_uses_relative_paths_and_skips_unknown_files(tmp_path):
    write(tmp_path / "docs" / "a.md", "# A\n\nAlpha.")
    write(tmp_path / "docs" / "sub" / "b.txt", "Beta.")
    write(tmp_path / "docs" / "logo.png", b"\x89PNG")
    write(tmp_path / "docs" / ".hidden.md", "Hidden.")
    with SQLiteStore(tmp_path / "s.db") as store:
        report = Ingestor(store).run(tmp_path / "docs")
        assert store.doc_ids() == ["a.md", "sub/b.txt"]
        assert report.skipped_files == (str(tmp_path / "docs" / "logo.png"),)


# -- issue 25, item 10: paths outside the manifest's folder, and sizes over their limits ----------

@pytest.mark.parametrize("where", ["../../../../etc/passwd", "/etc/passwd", "corpus/../../outside.md"])
def test_a_path_outside_the_manifests_folder_is_refused(tmp_path, filled, where):
    write(tmp_path.parent / "outside.md", "# Outside\n\nNot part of this corpus.")
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "x", "path": where}], NEW)
    assert msg.startswith(f"{tmp_path / 'bad.jsonl'}:2 field 'path': {where!r} lies outside the manifest's "
                          f"folder {tmp_path.resolve()}")
    assert "ragdx ingest --allow-outside" in msg


def test_a_link_leading_out_of_the_folder_is_refused(tmp_path, filled):
    outside = write(tmp_path.parent / "secret.md", "# Secret\n\nNot part of this corpus.")
    (tmp_path / "corpus").mkdir(exist_ok=True)
    (tmp_path / "corpus" / "link.md").symlink_to(outside)
    msg = run_bad(tmp_path, filled, [{"doc_id": "x", "path": "corpus/link.md"}], NEW)
    assert "bad.jsonl:1 field 'path': 'corpus/link.md' lies outside the manifest's folder" in msg


def test_a_path_outside_is_ingested_with_allow_outside(tmp_path, capsys):
    write(tmp_path / "elsewhere" / "policy.md", "# Policy\n\nRefunds are accepted within 30 days.")
    manifest = write(tmp_path / "corpus" / "m.jsonl", json.dumps({"doc_id": "p", "path": "../elsewhere/policy.md"}))
    from ragdx.cli import main
    store = str(tmp_path / "s.db")
    try:
        assert main(["ingest", "--store", store, str(manifest), "--workers", "1",
                     "--set", "retrieval.dense.enabled=false"]) == 2
        assert "field 'path': '../elsewhere/policy.md' lies outside" in capsys.readouterr().err
        assert main(["ingest", "--store", store, str(manifest), "--workers", "1", "--allow-outside",
                     "--set", "retrieval.dense.enabled=false"]) == 0
    finally:
        logging.getLogger("ragdx").handlers[:] = []  # main() logs to the captured stderr, closed after this test
    with SQLiteStore(tmp_path / "s.db", "read") as opened:
        assert [v.document.doc_id for v in opened.versions()] == ["p"]


def test_a_title_or_metadata_over_its_limit_is_refused(tmp_path, filled):
    from ragdx.ingest.manifest import MAX_METADATA_BYTES, MAX_TITLE_CHARS
    msg = run_bad(tmp_path, filled, [GOOD, dict(GOOD, doc_id="t", title="T" * 30_000_000)], NEW)
    assert msg == (f"{tmp_path / 'bad.jsonl'}:2 field 'title': 30,000,000 characters; a title may have at most "
                   f"{MAX_TITLE_CHARS:,}")
    assert MAX_TITLE_CHARS == 1_000
    fine = run_bad(tmp_path, filled, [dict(GOOD, title="T" * MAX_TITLE_CHARS), {"doc_id": "gone", "path": "gone.md"}],
                   NEW)
    assert "bad.jsonl:2" in fine  # a title at the limit passes; the next line's missing file is the error
    big = {"k": "v" * MAX_METADATA_BYTES}
    msg = run_bad(tmp_path, filled, [dict(GOOD, metadata=big)], NEW)
    assert msg == (f"{tmp_path / 'bad.jsonl'}:1 field 'metadata': {MAX_METADATA_BYTES + 8:,} bytes as JSON; "
                   f"metadata may have at most {MAX_METADATA_BYTES:,}")


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, filled):
    from ragdx.ingest.manifest import MAX_FILE_BYTES
    big = tmp_path / "corpus" / "big.md"
    big.parent.mkdir(parents=True, exist_ok=True)
    with open(big, "wb") as fh:  # sparse: no disk used, and never read
        fh.truncate(MAX_FILE_BYTES + 1)
    msg = run_bad(tmp_path, filled, [GOOD, {"doc_id": "big", "path": "corpus/big.md"}], NEW)
    assert msg.startswith(f"{tmp_path / 'bad.jsonl'}:2 field 'path': ")
    assert f"big.md: {MAX_FILE_BYTES + 1:,} bytes; a document file may have at most {MAX_FILE_BYTES:,}" in msg
