"""Answers bound to their evidence: the binding an answer records, and `recheck` after an edit, a
deletion, a revocation, an expiry, a re-parse, and an unrelated change (issue 15)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragdx.binding import EvidenceBinding, RecheckStatus, SpanChange, bind_evidence, recheck
from ragdx.build import build_ingestor, build_pipeline
from ragdx.config import load_settings
from ragdx.errors import InputError
from ragdx.ingest.ingestor import delete_documents
from ragdx.store.sqlite import SQLiteStore
from ragdx.tracefile import trace_to_dict
from ragdx.types import DocStatus, Principal, Query
from tests.conftest import write

# binding and recheck, not reading: the words-and-meaning reader answers alike with or without the models
SETTINGS = ["retrieval.dense.enabled=false", "chunking.tokenizer=regex", "rerank.method=none", "generation.reader=none"]
REFUND = "# Refund policy\n\nRefunds are accepted within 30 days of delivery.\n"
QUESTION = "Are refunds accepted within 30 days of delivery?"


def corpus(folder: Path, refund: str = REFUND, refund_acl=("public",), shipping: str = "within 2 working days",
           refund_status: str = "current") -> Path:
    """Two documents; the question is answered from refund.md alone. Returns the manifest."""
    write(folder / "refund.md", refund)
    write(folder / "shipping.md", f"# Shipping\n\nParcels ship {shipping} by courier.\n")
    return write(folder / "m.jsonl", "\n".join(json.dumps(x) for x in [
        {"doc_id": "refund.md", "path": "refund.md", "acl": list(refund_acl), "status": refund_status},
        {"doc_id": "shipping.md", "path": "shipping.md"}]) + "\n")


def answered(store, folder: Path):
    """Ingest the corpus, answer the question, and return the trace and its binding."""
    settings = load_settings(overrides=SETTINGS)
    build_ingestor(store, settings).run(corpus(folder))
    trace = build_pipeline(store, settings).run(Query("q", QUESTION, Principal("ann", ("public",))))
    return trace, bind_evidence(store, trace.query.principal, trace.context, trace.answer)


def change(store, folder: Path, what: str) -> None:
    """Apply one change to the store, as a user would (through ingest or delete)."""
    settings = load_settings(overrides=SETTINGS)
    if what == "delete":
        delete_documents(store, ["refund.md"])
        return
    manifest = {"edit": lambda: corpus(folder, refund=REFUND.replace("30 days", "14 days")),
                "revoke": lambda: corpus(folder, refund_acl=("staff",)),
                "expire": lambda: corpus(folder, refund_status="expired"),
                "unrelated": lambda: corpus(folder, shipping="within 5 working days")}[what]()
    build_ingestor(store, settings).run(manifest)


EXPECTED = {"delete": SpanChange.DELETED, "revoke": SpanChange.UNREADABLE, "edit": SpanChange.SUPERSEDED,
            "expire": SpanChange.EXPIRED}


def check_binding(store, folder: Path):
    """The binding holds refund.md's one cited span, hashed as the store's parsed text holds it."""
    trace, binding = answered(store, folder)
    [cited] = binding.cited
    version = store.versions("refund.md")[0].document.version
    parsed = store.texts("refund.md", version)[1]
    assert (cited.unit, cited.doc_id, cited.version, cited.status) == ("S1", "refund.md", version, DocStatus.CURRENT)
    assert "Refunds are accepted within 30 days of delivery." in parsed[cited.start:cited.end]
    assert cited.sha256 == hashlib.sha256(parsed[cited.start:cited.end].encode()).hexdigest()
    assert binding.index_version == store.index_version == 1
    return trace, binding


@pytest.mark.parametrize("what", sorted(EXPECTED))
def test_recheck_names_the_change_of_the_cited_document(tmp_path, what):
    with SQLiteStore(tmp_path / "s.db") as store:
        _, binding = check_binding(store, tmp_path)
        assert recheck(store, binding).status is RecheckStatus.VALID
        change(store, tmp_path, what)
        found = recheck(store, binding)
        assert found.status is RecheckStatus.CHANGED
        assert [(c.span.doc_id, c.reason) for c in found.changed] == [("refund.md", EXPECTED[what])]
        assert (found.bound_index_version, found.cited) == (1, 1) and found.index_version > 1


def test_recheck_details_name_what_the_store_says_now(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        _, binding = check_binding(store, tmp_path)
        change(store, tmp_path, "edit")
        new = [v.document.version for v in store.versions("refund.md") if v.document.status is DocStatus.CURRENT]
        [changed] = recheck(store, binding).changed
        assert changed.detail == f"the current version is {new[0]}"
        assert changed.to_dict()["reason"] == "superseded"


def test_an_unrelated_change_leaves_the_answer_valid(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        _, binding = check_binding(store, tmp_path)
        change(store, tmp_path, "unrelated")
        found = recheck(store, binding)
        assert store.index_version == 2  # the ingest of shipping.md's new version: one commit
        assert (found.status, found.changed, found.index_version) == (RecheckStatus.VALID, (), 2)


def test_a_re_parsed_span_is_changed(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        _, binding = check_binding(store, tmp_path)
        [cited] = binding.cited
        store._db.execute("UPDATE documents SET parsed_text = 'Refunds are NOT accepted at all, ever' "
                          "WHERE doc_id = 'refund.md'")
        store._db.execute("UPDATE meta SET value = value + 1 WHERE key = 'index_version'")
        [changed] = recheck(store, binding).changed
        assert (changed.span, changed.reason) == (cited, SpanChange.CHANGED)


def test_the_binding_round_trips_through_the_trace_json(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        trace, binding = check_binding(store, tmp_path)
        data = json.loads(json.dumps(trace_to_dict(trace, binding)))
        assert EvidenceBinding.from_trace(data) == binding
        assert data["evidence"]["cited"][0]["status"] == "current"
        del data["evidence"]["cited"][0]["sha256"]
        with pytest.raises(InputError, match=r"evidence.cited\[0\].sha256 must be a str, not None"):
            EvidenceBinding.from_trace(data, "a.json")
        with pytest.raises(InputError, match="a.json: no 'evidence' object"):
            EvidenceBinding.from_trace({"principal": {"user": "u", "groups": []}}, "a.json")


def test_an_abstention_binds_to_nothing_and_stays_valid(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        answered(store, tmp_path)
        trace = build_pipeline(store, load_settings(overrides=SETTINGS)).run(
            Query("q2", "What is the capital of Mongolia?", Principal()))
        assert trace.answer.abstained
        binding = bind_evidence(store, Principal(), trace.context, trace.answer)
        assert binding.cited == ()
        delete_documents(store, ["refund.md"])
        assert recheck(store, binding).status is RecheckStatus.VALID


def _ragdx(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragdx.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("what", ["edit", "delete", "revoke", "unrelated"])
def test_ragdx_recheck_cli(tmp_path, what):
    """`ragdx ask --json` then `ragdx recheck` (exit 0 valid, 3 changed) around each change."""
    store = str(tmp_path / "s.db")
    sets = [a for s in SETTINGS for a in ("--set", s)]
    assert _ragdx("ingest", "--store", store, str(corpus(tmp_path)), *sets).returncode == 0
    asked = _ragdx("ask", "--store", store, "--json", *sets, QUESTION)
    answer = write(tmp_path / "answer.json", asked.stdout)
    first = _ragdx("recheck", "--store", store, str(answer))
    assert (first.returncode, json.loads(first.stdout)["status"]) == (0, "valid")
    with SQLiteStore(store, "write") as opened:
        change(opened, tmp_path, what)
    again = _ragdx("recheck", "--store", store, str(answer))
    found = json.loads(again.stdout)
    if what == "unrelated":
        assert (again.returncode, found["status"], found["changed"]) == (0, "valid", [])
    else:
        assert (again.returncode, found["status"]) == (3, "evidence_changed_or_expired")
        assert [(c["doc"], c["reason"]) for c in found["changed"]] == [("refund.md", EXPECTED[what].value)]


def test_ragdx_recheck_names_a_bad_answer_file(tmp_path, capsys):
    from ragdx.cli import main
    store = tmp_path / "s.db"
    with SQLiteStore(store) as opened:
        answered(opened, tmp_path)
    old = write(tmp_path / "old.json", json.dumps({"principal": {"user": "u", "groups": ["public"]}, "stages": []}))
    assert main(["recheck", "--store", str(store), str(old)]) == 2
    assert f"{old}: no 'evidence' object" in capsys.readouterr().err
    broken = write(tmp_path / "broken.json", "{not json")
    assert main(["recheck", "--store", str(store), str(broken)]) == 2
    assert "not a JSON answer from 'ragdx ask --json'" in capsys.readouterr().err
