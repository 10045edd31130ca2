"""Nothing about a document a principal may not read (text, title, doc id, version id) reaches
any output for that principal (issue 14, items 5 and 6)."""

from __future__ import annotations

import json
import logging

import pytest

from ragdx.cli import main
from ragdx.ingest.ingestor import Ingestor
from ragdx.stages.govern import Governance
from ragdx.store.sqlite import SQLiteStore
from ragdx.types import Candidate, Principal, Query, Ranked, StageKind
from tests.conftest import write
from tests.hardening.conftest import LEXICAL

SECRET_VERSION = "v2-contoso-greywhale"
SECRET_TEXT = "Contoso pays 900 EUR"
QUESTION = "How much does the settlement pay each claimant?"


@pytest.fixture
def legal(tmp_path):
    """A public settlement (v1), superseded by a version only the legal group may read (v2)."""
    write(tmp_path / "v1.md", "# Settlement\n\nThe settlement pays 500 EUR to each claimant.")
    write(tmp_path / "v2.md", f"# Settlement terms\n\nUnder the greywhale agreement, {SECRET_TEXT} to each "
                              "claimant of the settlement.")
    write(tmp_path / "other.md", "# Shipping\n\nParcels are delivered within 3 business days.")
    manifest = write(tmp_path / "m.jsonl", "\n".join(json.dumps(e) for e in [
        {"doc_id": "legal/settlement.md", "path": "v1.md", "version": "v1"},
        {"doc_id": "legal/settlement.md", "path": "v2.md", "version": SECRET_VERSION, "acl": ["legal"]},
        {"doc_id": "shipping.md", "path": "other.md"}]) + "\n")
    store = tmp_path / "store.db"
    with SQLiteStore(store) as s:
        Ingestor(s).run(manifest)
    return store


def _outputs(tmp_path, store, principal: dict, capsys) -> str:
    """Everything ragdx writes for one principal's question: ask --json, and a run folder with
    its traces, diagnoses, metrics, report and exported spans. Retrieval searches every version,
    so the superseded one reaches governance, whose drop reason is what is checked."""
    groups = [a for g in principal["groups"] for a in ("--group", g)]
    LEXICAL = [*globals()["LEXICAL"], "--set", "retrieval.versions=all"]
    assert main(["ask", "--store", str(store), "--json", *groups, *LEXICAL, QUESTION]) == 0
    queries = write(tmp_path / "q.jsonl", json.dumps({"id": "q1", "question": QUESTION, "principal": principal,
                                                      "answerable": False}) + "\n")
    run = tmp_path / "run"
    assert main(["run", "--store", str(store), "--queries", str(queries), "--out", str(run), *LEXICAL]) == 0
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "spans.jsonl")]) == 0
    files = sorted(p for p in run.iterdir() if p.is_file()) + [tmp_path / "spans.jsonl"]
    assert {p.name for p in files} >= {"traces.jsonl", "diagnosis.jsonl", "metrics.json", "report.html",
                                       "spans.jsonl"}
    # run.db (SQLite, with pickled results) too: its strings are UTF-8 bytes
    return capsys.readouterr().out + "".join(p.read_bytes().decode("utf-8", "replace") for p in files)


@pytest.mark.parametrize("groups", [["public"], ["public", "staff"], ["hr", "public"]])
def test_a_superseding_version_the_asker_may_not_read_is_never_named(tmp_path, legal, capsys, groups):
    everything = _outputs(tmp_path, legal, {"user": "u", "groups": groups}, capsys)
    assert "superseded: version v1 of legal/settlement.md; no current version the asker may read" in everything
    assert SECRET_VERSION not in everything and "Contoso" not in everything and "greywhale" not in everything


def test_the_legal_group_is_told_the_current_version(tmp_path, legal, capsys):
    # the same outputs do name it to whoever may read it: the test above can fail
    everything = _outputs(tmp_path, legal, {"user": "u", "groups": ["public", "legal"]}, capsys)
    assert f"superseded: version v1 of legal/settlement.md; the current version is {SECRET_VERSION}" in everything


def test_governance_removes_an_unreadable_candidate_without_a_record(legal, caplog):
    with SQLiteStore(legal, "read") as store:
        secret = store.chunks("legal/settlement.md", SECRET_VERSION)[0]
        public = store.chunks("shipping.md")[0]
        ranked = Ranked("custom-rerank", StageKind.RERANK, tuple(
            Candidate(c.id, c.doc_id, c.version, c.start, c.end, rank, 1.0) for rank, c in
            enumerate([secret, public], start=1)))
        with caplog.at_level(logging.ERROR, logger="ragdx.access"):
            governed = Governance(store).run(Query("q1", QUESTION, Principal("u", ("public",))), ranked)
    assert [c.doc_id for c in governed.items] == ["shipping.md"] and governed.dropped == ()
    assert f"({secret.doc_id}@{SECRET_VERSION}) for query q1, which the principal may not read" in caplog.text


def _imported(tmp_path, legal, stages) -> tuple[dict, str]:
    queries = write(tmp_path / "q.jsonl", json.dumps({"id": "q1", "question": QUESTION, "answerable": False,
                                                      "principal": {"groups": ["public"]}}) + "\n")
    trace = {"query_id": "q1", "stages": stages, "answer": {"text": "I cannot answer.", "abstained": True}}
    traces = write(tmp_path / "t.jsonl", json.dumps(trace) + "\n")
    out = tmp_path / "d"
    assert main(["diagnose", "--traces", str(traces), "--queries", str(queries), "--out", str(out),
                 "--store", str(legal)]) == 0
    diagnosis = json.loads((out / "diagnosis.jsonl").read_text())
    written = "".join((out / name).read_text(encoding="utf-8") for name in ("diagnosis.jsonl", "metrics.json",
                                                                           "report.html"))
    return diagnosis, written


def test_an_imported_trace_with_restricted_chunks_in_the_context_is_a_leak(tmp_path, legal):
    with SQLiteStore(legal, "read") as store:
        ids = [c.id for c in store.chunks("legal/settlement.md", SECRET_VERSION)]
    diagnosis, written = _imported(tmp_path, legal, [
        {"name": "search", "kind": "retrieval", "items": [{"id": i} for i in ids]},
        {"name": "ctx", "kind": "context", "items": [{"id": i} for i in ids]}])
    assert diagnosis["outcome"] == "leak"  # before: correct_abstention
    assert "Contoso" not in written and "900 EUR" not in written  # before: the chunk's text, from the store


def test_an_imported_trace_that_only_retrieved_restricted_chunks_shows_none_of_their_text(tmp_path, legal):
    with SQLiteStore(legal, "read") as store:
        ids = [c.id for c in store.chunks("legal/settlement.md", SECRET_VERSION)]
        public = store.chunks("shipping.md")[0].id
    diagnosis, written = _imported(tmp_path, legal, [
        {"name": "search", "kind": "retrieval", "items": [{"id": i} for i in [*ids, public]]},
        {"name": "ctx", "kind": "context", "items": [{"id": public}]}])
    assert diagnosis["outcome"] == "correct_abstention"  # nothing restricted reached the context
    assert "Contoso" not in written and "900 EUR" not in written
    assert "Parcels are delivered within 3 business days." in written  # a readable chunk's text is shown
