import json

import pytest

from ragdx.diagnosis.evidence import (
    BY_ID, DELETED, LOST_IN_PARSING, NOT_IN_SOURCE, NOT_STORED, RESOLVED, EvidenceResolver,
)
from ragdx.errors import InputError
from ragdx.ingest.chunk import ChunkerConfig
from ragdx.ingest.ingestor import Ingestor, delete_documents
from ragdx.queryset import load_queries, parse_query
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import EXAMPLE, write


def q(*groups, **extra):
    return parse_query({"id": "q1", "question": "?", "required": [list(g) for g in groups], **extra},
                       "queries.jsonl", 1)


def test_every_bundled_quote_resolves_whole_in_one_chunk(example_store):
    resolver = EvidenceResolver(example_store)
    for query in load_queries(EXAMPLE / "queries.jsonl"):
        for restricted in (False, True):
            evidence = resolver.run(query, strict=True, restricted=restricted)
            for alt in evidence.alternatives:
                _, parsed = example_store.texts(alt.span.doc_id, alt.span.version)
                assert " ".join(parsed[alt.span.start:alt.span.end].split()) == \
                    " ".join(alt.alternative.quote.split())
                assert alt.coverage.status == "full", (query.id, alt.describe())


def test_version_resolution(example_store):
    resolver = EvidenceResolver(example_store)
    quote = "Refunds are accepted within 30 days of delivery"
    current = resolver.run(q([{"doc": "policies/refund.md", "quote": quote}])).alternatives[0]
    assert (current.status, current.span.version, current.note) == (RESOLVED, "2026-03", "")
    pinned = resolver.run(q([{"doc": "policies/refund.md", "quote": quote, "version": "2024-01"}]))
    assert pinned.alternatives[0].status == NOT_IN_SOURCE
    old = resolver.run(q([{"doc": "policies/refund.md", "quote": "within 14 days of delivery"}]))
    assert old.alternatives[0].span.version == "2024-01"
    assert "found only in the superseded version 2024-01" in old.alternatives[0].note


def test_unresolvable_quote_names_query_doc_and_quote(example_store):
    query = q([{"doc": "policies/quality.md", "quote": "Quality defects are never refunded"}])
    evidence = EvidenceResolver(example_store).run(query)
    assert evidence.alternatives[0].status == NOT_IN_SOURCE
    with pytest.raises(InputError) as info:
        EvidenceResolver(example_store).run(query, strict=True)
    assert str(info.value) == ("query 'q1': group 0 alternative 0 (policies/quality.md quote "
                               "'Quality defects are never refunded'): quote 'Quality defects are "
                               "never refunded' not found in document 'policies/quality.md' "
                               "(any stored version)")


def test_parsing_loss_deleted_and_unknown(tmp_path):
    # the <nav> holds the words: in the source, dropped by the parser
    write(tmp_path / "p.html", "<nav>Refund desk opens at 9</nav><p>Body text.</p>")
    write(tmp_path / "gone.md", "Gone soon.")
    write(tmp_path / "m.jsonl", json.dumps({"doc_id": "p", "path": "p.html"}) + "\n"
          + json.dumps({"doc_id": "gone", "path": "gone.md"}) + "\n")
    with SQLiteStore(tmp_path / "s.db") as store:
        Ingestor(store).run(tmp_path / "m.jsonl")
        delete_documents(store, ["gone"])
        evidence = EvidenceResolver(store).run(q(
            [{"doc": "p", "quote": "Refund desk opens at 9"}], [{"doc": "gone", "quote": "Gone"}],
            [{"doc": "never", "quote": "x"}], [{"id": "chunk-7"}], [{"doc": "p", "start": 0, "end": 4}]))
        statuses = [a.status for a in evidence.alternatives]
        assert statuses == [LOST_IN_PARSING, DELETED, NOT_STORED, BY_ID, RESOLVED]
        assert len(evidence.problems()) == 3


def test_span_cut_across_chunks_is_partial(tmp_path):
    sentences = " ".join(f"Rule {i} applies to refunds of class {i}." for i in range(10))
    write(tmp_path / "a.md", "# Rules\n\n" + sentences)
    write(tmp_path / "m.jsonl", json.dumps({"doc_id": "a", "path": "a.md"}) + "\n")
    with SQLiteStore(tmp_path / "s.db") as store:
        Ingestor(store, ChunkerConfig(max_tokens=20)).run(tmp_path / "m.jsonl")
        quote = "Rule 1 applies to refunds of class 1. Rule 2 applies to refunds of class 2."
        alt = EvidenceResolver(store).run(q([{"doc": "a", "quote": quote}])).alternatives[0]
        assert alt.coverage.status == "partial" and len(alt.coverage.partial) == 2


@pytest.mark.parametrize("obj, expected", [
    ({"question": "?"}, "field 'id': required field is missing"),
    ({"id": "a", "question": "?", "answerable": "yes"}, "field 'answerable': expected true or false"),
    ({"id": "a", "question": "?", "required": [[]]}, "field 'required[0]': each required group"),
    ({"id": "a", "question": "?", "required": [[{"doc": "d"}]]},
     "field 'required[0][0]': an alternative needs 'quote', 'start' and 'end', or 'id'"),
    ({"id": "a", "question": "?", "required": [[{"doc": "d", "start": 5, "end": 2}]]},
     "field 'required[0][0]': offsets must satisfy 0 <= start < end, got 5..2"),
    ({"id": "a", "question": "?", "required": [[{"doc": "d", "quote": "x", "start": 1}]]},
     "field 'required[0][0]': give either 'quote' or 'start'/'end', not both"),
    ({"id": "a", "question": "?", "required": [[{"doc": "d", "start": True, "end": 2}]]},
     "field 'required[0][0].start': expected an integer, got true"),
    ({"id": "a", "question": "?", "principal": {"groups": "staff"}},
     "field 'principal.groups': expected a list"),
    ({"id": "a", "question": "?", "requried": []}, "field 'requried': unknown field"),
])
def test_bad_query_lines(tmp_path, obj, expected):
    path = write(tmp_path / "q.jsonl", json.dumps({"id": "ok", "question": "fine?"}) + "\n" + json.dumps(obj))
    with pytest.raises(InputError) as info:
        load_queries(path)
    assert f"q.jsonl:2 {expected}" in str(info.value)


def test_duplicate_query_id(tmp_path):
    path = write(tmp_path / "q.jsonl", '{"id": "a", "question": "?"}\n{"id": "a", "question": "!"}\n')
    with pytest.raises(InputError, match=r"q.jsonl:2 field 'id': duplicate query id 'a' \(first on line 1\)"):
        load_queries(path)


def test_query_defaults():
    query = parse_query({"id": "a", "question": "?"}, "f", 1)
    assert (query.principal.groups, query.answerable, query.required, query.tags) == (
        ("public",), True, (), ())
