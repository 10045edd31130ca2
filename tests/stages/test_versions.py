"""Versions are checked inside retrieval, as access is: a search returns the versions in force and
those the question names; governance, the verifier and the diagnosis treat a named version as
asked for, not as stale."""

import pytest

from ragdx.build import build_pipeline
from ragdx.config import load_settings
from ragdx.stages.bm25 import BM25Retriever, query_terms
from ragdx.types import DocStatus, Principal, Query, VersionFilter

PUBLIC = Principal("alice", ("public",))
OLD = "Refunds are accepted within 14 days of delivery."     # policies/refund.md@2024-01 (superseded)
NEW = "Refunds are accepted within 30 days of delivery."     # policies/refund.md@2026-03 (current)


@pytest.mark.parametrize("question, named", [
    ("In SQLite 3.34.1, is the conflict target required?", ("3.34.1",)),
    ("What did the 2024-01 refund policy say?", ("2024-01",)),
    ("What changed in Python 3.9 and 3.11?", ("3.9", "3.11")),
    ("What does error RFD-4021 mean, and is 1.5x the limit?", ()),
    # a value passed to a call names no version; a version after the call does
    ("Does round(2.5) give 2 or 3?", ()),
    ("Does connect(timeout=5.0) wait in Python 3.9?", ("3.9",)),
    ("Is print(round(2.5), 3.11) the same?", ()),
    # a quoted literal is the asker's data; an apostrophe inside a word opens none
    ("We insert '2024-03-10 08:00:00+05' into a timestamp column. Is the +05 used?", ()),
    ('Does `3.11` in "requires-python" name a version?', ()),
    ("I'm on Python 3.9 and it's slow: why?", ("3.9",)),
    ("We insert \u20182024-03-10\u2019 into it. Is the +05 used?", ()),
    # no literal crosses clause punctuation or runs over six words
    ("Since the '90s we ran it; on Python 3.11 do the admins' scripts break?", ("3.11",)),
    ("Why does 'pip install fail on Python 3.11 for the admins' accounts?", ("3.11",)),
])
def test_the_versions_a_question_names(question, named):
    assert VersionFilter.for_question(question).named == named


@pytest.mark.parametrize("question, topic", [
    ("In SQLite 3.34.1, is the conflict target required?", "is the conflict target required?"),
    ("After upgrading to Python 3.11, how can zip() raise an error?", "how can zip() raise an error?"),
    ("What does Python 3.9's random.gauss() take?", "What does Python random.gauss() take?"),
    ("What did the 2024-01 refund policy say?", "What did the refund policy say?"),
    # no version: unchanged (an ISO number, an amount and an error code are no versions)
    ("Which ISO 8601 inputs are refused, and is 1.5x the limit for RFD-4021?",
     "Which ISO 8601 inputs are refused, and is 1.5x the limit for RFD-4021?"),
])
def test_what_a_question_asks_without_the_version_it_names(question, topic):
    assert VersionFilter.topic(question) == topic


MAJORS = ("15", "17")


@pytest.mark.parametrize("question, named", [
    ("On version 15, what does VACUUM FULL lock?", ("15",)),
    ("After moving to 17, how is a role granted?", ("17",)),
    ("In PostgreSQL 17 what changed for MERGE?", ("17",)),
    ("What changed between 15 and 17?", ("15", "17")),
    ("Is 15 or later required?", ("15",)),
    ("What did v15 default to?", ("15",)),
    ("Does PG17 still ship pg_standby?", ("17",)),
    ("Is sha256 or md5 the default on pg15?", ("15",)),
    ("Is 17's planner different?", ("17",)),
    ("Since 15, is CREATE on the public schema revoked?", ("15",)),
    # numbers that count or measure are no versions, nor is a number no label starts with
    ("What does Table 17 show?", ()),
    ("Why wait 15 seconds before retrying?", ()),
    ("What are the 17 rules?", ()),
    ("What is the limit of 17?", ()),
    ("After moving to 16, how is a role granted?", ()),
])
def test_a_whole_number_names_a_version_only_when_the_store_has_it(question, named):
    assert VersionFilter.for_question(question, known=MAJORS).named == named
    assert VersionFilter.for_question(question, known=("15.4", "17.2")).named == named  # a major's minors
    assert VersionFilter.for_question(question).named == ()  # the store's labels unknown: none


@pytest.mark.parametrize("question, topic", [
    ("On version 15, what does VACUUM FULL lock?", "what does VACUUM FULL lock?"),
    ("After moving to 17, how is a role granted?", "how is a role granted?"),
    ("Is 17's planner different from 15's planner?", "Is planner different from planner?"),
    ("Why wait 15 seconds before retrying?", "Why wait 15 seconds before retrying?"),
])
def test_what_a_question_asks_without_the_whole_number_version_it_names(question, topic):
    assert VersionFilter.topic(question, known=MAJORS) == topic


def test_a_number_every_label_starts_with_names_no_version():
    # "Python 3" of a store holding 3.9.2 and 3.11.2 tells neither apart: no version is named
    assert VersionFilter.for_question("In Python 3, how does zip() stop?", known=("3.9.2", "3.11.2")).named == ()
    assert VersionFilter.for_question("In Python 3, how does zip() stop?", known=("2.7.18", "3.11.2")).named == ("3",)


MANUAL_15 = ("# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples.\n\n"
             "VACUUM reads tables through a fixed ring buffer of 256 kB; its size cannot be changed.\n")
MANUAL_17 = ("# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples.\n\n"
             "VACUUM reads tables through a ring buffer whose size vacuum_buffer_usage_limit sets, "
             "2 MB by default.\n")


def test_a_question_naming_a_major_version_is_answered_from_that_version(tmp_path):
    """A manual in versions 15 (superseded) and 17 (current), asked as a user would: "On version
    15, ..." is answered from 15, says so, is supported and diagnosed as supported; "After moving
    to 17, ..." from 17; the question naming no version, or a number that measures, from 17 alone."""
    import json

    from ragdx.build import build_ingestor
    from ragdx.diagnosis.evidence import EvidenceResolver
    from ragdx.diagnosis.ours import diagnose_trace
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.types import Alternative
    from tests.conftest import write
    old_sentence = "VACUUM reads tables through a fixed ring buffer of 256 kB; its size cannot be changed."
    write(tmp_path / "docs" / "vacuum-15.md", MANUAL_15)
    write(tmp_path / "docs" / "vacuum-17.md", MANUAL_17)
    write(tmp_path / "docs" / "manifest.jsonl", "".join(json.dumps(line) + "\n" for line in [
        {"doc_id": "sql-vacuum", "path": "vacuum-15.md", "version": "15", "status": "superseded"},
        {"doc_id": "sql-vacuum", "path": "vacuum-17.md", "version": "17", "status": "current"}]))
    settings = load_settings(overrides=["retrieval.dense.enabled=false", "rerank.method=none",
                                        "chunking.tokenizer=regex"])
    with SQLiteStore(tmp_path / "s.db", "create") as store:
        build_ingestor(store, settings).run(tmp_path / "docs" / "manifest.jsonl")
        assert store.version_labels() == frozenset({"15", "17"})
        pipeline = build_pipeline(store, settings)

        def ask(question, required=()):
            trace = pipeline.run(Query("q", question, PUBLIC, required=required))
            return trace, {u.version for u in trace.context.units}, trace.answer.text

        required = ((Alternative(doc="sql-vacuum", quote=old_sentence, version="15"),),)
        trace, versions, text = ask("On version 15, how large is the ring buffer VACUUM reads tables through?",
                                    required)
        assert "15" in versions and text.startswith("Version 15: ") and "256 kB" in text
        assert trace.verification.supported
        diagnosis = diagnose_trace(pipeline, trace, EvidenceResolver(store))
        assert (diagnosis.outcome, diagnosis.first_failure) == ("supported", None)
        _, versions, text = ask("After moving to 17, how large is the ring buffer VACUUM reads tables through?")
        assert versions == {"17"} and text.startswith("Version 17: ") and "2 MB" in text
        for question in ("How large is the ring buffer VACUUM reads tables through?",
                         "With 15 tables, how large is the ring buffer VACUUM reads tables through?"):
            _, versions, text = ask(question)
            assert versions == {"17"} and "2 MB" in text and "256 kB" not in text, question


def test_two_doc_sites_side_by_side_answer_from_the_version_named(tmp_path):
    """The same manual kept the other common way, each version its own documents and both current
    (two doc sites): "On version 15, ..." is answered from 15's page alone, 17's copy dropped by
    governance with its code and the copy it yields to; a claim citing 17's copy is unsupported;
    a page of 17 with no copy in 15 stays."""
    import json

    from ragdx.build import build_ingestor
    from ragdx.diagnosis.evidence import EvidenceResolver
    from ragdx.diagnosis.ours import diagnose_trace
    from ragdx.stages.verify import ClaimVerifier
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.types import Alternative, Claim, DropCode, StageKind
    from tests.conftest import write
    old_sentence = "VACUUM reads tables through a fixed ring buffer of 256 kB; its size cannot be changed."
    write(tmp_path / "docs" / "vacuum-15.md", MANUAL_15)
    write(tmp_path / "docs" / "vacuum-17.md", MANUAL_17)
    write(tmp_path / "docs" / "new-17.md", "# MERGE\n\nVACUUM reads tables through MERGE RETURNING lists too.\n")
    write(tmp_path / "docs" / "manifest.jsonl", "".join(json.dumps(line) + "\n" for line in [
        {"doc_id": "pg-15/sql-vacuum", "path": "vacuum-15.md", "version": "15"},
        {"doc_id": "pg-17/sql-vacuum", "path": "vacuum-17.md", "version": "17"},
        {"doc_id": "pg-17/sql-merge", "path": "new-17.md", "version": "17"}]))
    settings = load_settings(overrides=["retrieval.dense.enabled=false", "rerank.method=none",
                                        "chunking.tokenizer=regex"])
    with SQLiteStore(tmp_path / "s.db", "create") as store:
        build_ingestor(store, settings).run(tmp_path / "docs" / "manifest.jsonl")
        pipeline = build_pipeline(store, settings)
        required = ((Alternative(doc="pg-15/sql-vacuum", quote=old_sentence, version="15"),),)
        trace = pipeline.run(Query("q", "On version 15, how large is the ring buffer VACUUM reads tables through?",
                                   PUBLIC, required=required))
        assert {u.doc_id for u in trace.context.units} == {"pg-15/sql-vacuum", "pg-17/sql-merge"}
        assert "256 kB" in trace.answer.text and "2 MB" not in trace.answer.text
        assert trace.verification.supported
        governance = next(s for s in trace.stages if s.kind is StageKind.GOVERNANCE)
        [dropped] = {(d.doc_id, d.code, d.reason) for d in governance.dropped}
        assert dropped == ("pg-17/sql-vacuum", DropCode.OTHER_VERSION, "other version: pg-17/sql-vacuum is "
                           "version 17; the question names 15, which pg-15/sql-vacuum holds")
        diagnosis = diagnose_trace(pipeline, trace, EvidenceResolver(store))
        assert (diagnosis.outcome, diagnosis.first_failure) == ("supported", None)
        later = pipeline.run(Query("q2", "After moving to 17, how large is the ring buffer VACUUM reads tables "
                                   "through?", PUBLIC))
        assert "pg-17/sql-vacuum" in {u.doc_id for u in later.context.units} and "2 MB" in later.answer.text
        assert "pg-15/sql-vacuum" not in {u.doc_id for u in later.context.units}
        # an imported answer that quotes 17's copy to a question about 15
        unit = next(u for u in later.context.units if u.doc_id == "pg-17/sql-vacuum")
        check = ClaimVerifier(store).check(
            Query("q3", "We're on 15. How large is VACUUM's ring buffer?", PUBLIC), later.context,
            Claim("VACUUM reads tables through a ring buffer, 2 MB by default.", (unit.id,)))
        assert (check.verdict.value, check.reason) == ("unsupported", f"cites {unit.id}: pg-17/sql-vacuum is "
                                                       "version 17; the question names 15, which pg-15/sql-vacuum holds")


@pytest.mark.parametrize("doc_id, version, named, twins", [
    ("postgresql-17/x.html", "17", ("15",), ("postgresql-15/x.html",)),
    ("docs/3.11/library/zip.html", "3.11", ("3.9", "3.10"), ("docs/3.9/library/zip.html", "docs/3.10/library/zip.html")),
    ("postgresql-17/x.html", "17", ("17",), ()),         # the version asked for
    ("postgresql/x.html", "17", ("15",), ()),            # no label in the id: one id holds the versions
    ("postgresql-170/x.html", "17", ("15",), ()),        # a label only where it stands whole
    ("v17.1/x.html", "17", ("15",), ()),
    ("postgresql-17/x.html", "17", (), ()),              # the question names none
])
def test_the_ids_of_a_page_in_the_versions_named(doc_id, version, named, twins):
    assert VersionFilter(named=named).twins(doc_id, version) == twins


def test_a_named_version_is_allowed_and_its_leading_parts_name_it():
    f = VersionFilter.for_question("How did Python 3.9 do it?")
    assert f.allows("3.9.2", DocStatus.SUPERSEDED) and f.allows("3.11.2", DocStatus.CURRENT)
    assert not f.allows("3.10.1", DocStatus.SUPERSEDED) and not f.allows("3.91", DocStatus.SUPERSEDED)
    assert VersionFilter(current_only=False).allows("1.0", DocStatus.EXPIRED)


def _texts(store, ranked):
    chunks = store.chunks_by_id([c.chunk_id for c in ranked.items])
    return [chunks[c.chunk_id].text for c in ranked.items]


def test_retrieval_returns_current_versions_unless_one_is_named(example_store):
    channel = BM25Retriever(example_store, top_k=50)
    plain = channel.run(Query("q", "How many days after delivery are refunds accepted?", PUBLIC))
    assert {c.version for c in plain.items if c.doc_id == "policies/refund.md"} == {"2026-03"}
    named = channel.run(Query("q", "In the 2024-01 policy, how many days after delivery were refunds accepted?",
                              PUBLIC))
    assert {c.version for c in named.items if c.doc_id == "policies/refund.md"} == {"2024-01", "2026-03"}
    everything = BM25Retriever(example_store, top_k=50, current_only=False).run(
        Query("q", "How many days after delivery are refunds accepted?", PUBLIC))
    assert {c.version for c in everything.items if c.doc_id == "policies/refund.md"} == {"2024-01", "2026-03"}
    # the same ranking as a search of every version, less the versions not allowed
    expected = [c.chunk_id for c in everything.items if c.version != "2024-01"]
    assert len(expected) > 10 and [c.chunk_id for c in plain.items][:len(expected)] == expected
    assert example_store.bm25(query_terms("refunds"), ("public",), 5) == example_store.bm25(
        query_terms("refunds"), ("public",), 5, (0.5, 1.0), VersionFilter(current_only=False))


def test_a_question_about_a_named_old_version_is_answered_from_it_and_not_stale(example_store):
    from ragdx.diagnosis.evidence import EvidenceResolver
    from ragdx.diagnosis.ours import diagnose_trace
    from ragdx.types import Alternative
    settings = load_settings(overrides=["retrieval.dense.enabled=false", "rerank.method=none"])
    pipeline = build_pipeline(example_store, settings)
    question = "Under the 2024-01 refund policy, within how many days of delivery were refunds accepted?"
    query = Query("q", question, PUBLIC, required=((Alternative(doc="policies/refund.md", quote=OLD,
                                                               version="2024-01"),),))
    trace = pipeline.run(query)
    assert "2024-01" in {u.version for u in trace.context.units}          # governance kept it
    assert OLD in [c.text for c in trace.answer.claims]
    assert trace.verification.supported                                   # the verifier accepts it
    diagnosis = diagnose_trace(pipeline, trace, EvidenceResolver(example_store))
    assert (diagnosis.outcome, diagnosis.first_failure) == ("supported", None)
    # the same words without naming the version: the old policy is never in the context
    other = pipeline.run(Query("q", "Within how many days of delivery are refunds accepted?", PUBLIC))
    assert "2024-01" not in {u.version for u in other.context.units}
    assert NEW in [c.text for c in other.answer.claims]


def test_the_dense_channel_filters_versions_the_same_way(tmp_path):
    from ragdx.build import build_ingestor
    from ragdx.stages.dense import DenseRetriever
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.testing.encoders import HashingEncoder
    from tests.conftest import EXAMPLE
    encoder = HashingEncoder(dim=64)
    with SQLiteStore(tmp_path / "s.db", "create") as store:
        build_ingestor(store, load_settings(overrides=["chunking.tokenizer=regex"]), encoder).run(
            EXAMPLE / "manifest.jsonl")
        def versions(question, **kw):
            ranked = DenseRetriever(store, encoder, top_k=500, **kw).run(Query("q", question, PUBLIC))
            return {c.version for c in ranked.items if c.doc_id == "policies/refund.md"}
        assert versions("How many days after delivery are refunds accepted?") == {"2026-03"}
        assert versions("Under the 2024-01 policy, how many days were refunds accepted?") == {"2024-01", "2026-03"}
        assert versions("How many days after delivery are refunds accepted?", current_only=False) == {
            "2024-01", "2026-03"}
