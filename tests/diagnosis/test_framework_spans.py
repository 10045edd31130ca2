"""Spans as the frameworks write them (issue 50): each channel's table from its own list, a
trace without its answer, abstentions and stage kinds read from what the spans record, and the
frameworks' own chunk dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragdx.experiments.imported import prepare_views
from ragdx.queryset import load_queries
from ragdx.traces.openinference import read_any
from tests.conftest import EXAMPLE, write

QUESTION = "I changed my mind about a tent that was delivered 60 days ago. Will my refund request be approved?"


def _span(name: str, kind: str, span_id: str, attributes: dict, parent: str | None = "root", trace: str = "t1") -> dict:
    return {"name": name, "span_kind": kind, "context": {"trace_id": trace, "span_id": span_id},
            "parent_id": parent, "attributes": {"openinference.span.kind": kind, **attributes}}


def _retrieved(chunks: list[tuple[str, str, int, int, float]]) -> dict:
    """``retrieval.documents`` of chunks ``(id, doc, start, end, score)`` as OpenInference lists them."""
    return {"retrieval.documents": [{"document": {"id": i, "score": score, "content": None,
                                                  "metadata": json.dumps({"doc": doc, "start": start, "end": end})}}
                                    for i, doc, start, end, score in chunks]}


def test_each_channel_keeps_its_own_ranks_and_scores(example_store, tmp_path):
    """Two channels list one chunk at different ranks: each stage keeps its own rank and score
    once the items' spans are read against the store (which read the chunk once per query and
    gave every later stage the first stage's item)."""
    chunk = next(c for c in example_store.chunks() if c.doc_id == "policies/refund.md")
    other = next(c for c in example_store.chunks() if c.doc_id == "help/faq.html")
    a = (chunk.id, chunk.doc_id, chunk.span.start, chunk.span.end)
    b = (other.id, other.doc_id, other.span.start, other.span.end)
    spans = [_span("rag", "CHAIN", "root", {"input.value": QUESTION, "metadata": json.dumps({"query_id": "q-refund-35d"})},
                   parent=None),
             _span("bm25", "RETRIEVER", "s1", _retrieved([(*b, 9.5), (*a, 5.25)])),
             _span("dense", "RETRIEVER", "s2", _retrieved([(*a, 0.5625), (*b, 0.25)]))]
    write(tmp_path / "spans.jsonl", "".join(json.dumps(s) + "\n" for s in spans))
    views, bad, _ = read_any(tmp_path / "spans.jsonl")
    assert bad == []
    queries = load_queries(EXAMPLE / "queries.jsonl")
    (_, view), = prepare_views(views, queries, example_store, source="spans")[0]
    lists = {s.name: [(i.id, i.rank, i.score, i.text is not None) for i in s.items] for s in view.stages}
    assert lists == {"bm25": [(other.id, 1, 9.5, True), (chunk.id, 2, 5.25, True)],
                     "dense": [(chunk.id, 1, 0.5625, True), (other.id, 2, 0.25, True)]}


def _haystack_repr(ids: list[str]) -> list[str]:
    return [f"Document(id={i}, content: '...', meta: {{}})" for i in ids]


def _component(name: str, span_id: str, given, kept, trace: str = "t1") -> dict:
    return _span(name, "CHAIN", span_id, {"input.value": json.dumps({"documents": given}),
                                           "output.value": json.dumps({"documents": kept})}, trace=trace)


def _records(spans: list[dict]):
    from ragdx.traces.spans import _Place, _record
    return [_record(s, _Place("spans", n)) for n, s in enumerate(spans, 1)]


def test_components_whose_names_say_nothing_get_their_kind_from_what_they_did():
    """Over the whole file: several lists merged is fusion; documents left out between kept ones
    is governance, though the same component once dropped only the last (a cut's sign); a text
    shortened is the context, though it also kept a leading part; reordered is rerank; a
    component that never changed its documents is no stage, unless its name says what it is."""
    from ragdx.traces.openinference import infer_stage_kinds
    texts = {"a": "Refunds are accepted within 30 days.", "b": "Quality defects: 90 days.", "c": "Gift cards."}

    def docs(*ids, short=()):
        return [{"id": i, "content": texts[i][:9] if i in short else texts[i]} for i in ids]

    spans = [_component("StepA.run", "1", [_haystack_repr(["a", "b"]), _haystack_repr(["c"])], _haystack_repr(["a", "b", "c"])),
             _component("StepB.run", "2", _haystack_repr(["a", "b", "c"]), _haystack_repr(["a", "c"])),
             _component("StepB.run", "3", _haystack_repr(["a", "b", "c"]), _haystack_repr(["a", "b"]), trace="t2"),
             _component("StepC.run", "4", docs("a", "b", "c"), docs("a", "b", short=("b",))),
             _component("StepC.run", "5", docs("a", "b", "c"), docs("a"), trace="t2"),
             _component("StepD.run", "6", _haystack_repr(["a", "b"]), _haystack_repr(["b", "a"])),
             _component("StepE.run", "7", _haystack_repr(["a", "b"]), _haystack_repr(["a", "b"])),
             _component("AclCheck.run", "8", _haystack_repr(["a", "b"]), _haystack_repr(["a", "b"])),
             _component("Mapped.run", "9", _haystack_repr(["a", "b"]), _haystack_repr(["b"])),
             _span("root", "CHAIN", "root", {}, parent=None)]
    assert infer_stage_kinds(_records(spans), {"Mapped": "rerank"}) == {
        "StepA": "fusion", "StepB": "governance", "StepC": "context", "StepD": "rerank", "AclCheck": "governance"}


def test_a_name_says_what_a_component_is_before_what_it_did():
    """LangChain's "fusion_cut" keeps its fused list's top: a cut by what it did, fusion by name."""
    from ragdx.traces.openinference import infer_stage_kinds
    spans = [_component("fusion_cut", "1", _haystack_repr(["a", "b", "c"]), _haystack_repr(["a"])),
             _component("ContextCut._postprocess_nodes", "2", _haystack_repr(["a", "b"]), _haystack_repr(["a", "b"])),
             _component("status_filter", "3", _haystack_repr(["a", "b"]), _haystack_repr(["a", "b"]))]
    assert infer_stage_kinds(_records(spans), {}) == {"fusion_cut": "fusion", "ContextCut": "context",
                                                      "status_filter": "governance"}


RULE = "Refunds are accepted within 30 days of delivery."
EXCEPTION = "Quality defects may be refunded within 90 days of delivery."


def _one_query(tmp_path: Path, *children: dict) -> dict:
    """``ragdx diagnose`` (no flags) of q-refund-35d's spans: a root and ``children``; its diagnosis."""
    import contextlib
    import io

    from ragdx.cli import main
    spans = [_span("query", "CHAIN", "root", {"input.value": "Can I get a refund for a quality problem 35 days "
                                                             "after delivery?",
                                              "metadata": json.dumps({"query_id": "q-refund-35d"})}, parent=None),
             *children]
    write(tmp_path / "spans.jsonl", "".join(json.dumps(s) + "\n" for s in spans))
    query = next(line for line in (EXAMPLE / "queries.jsonl").read_text().splitlines() if '"q-refund-35d"' in line)
    write(tmp_path / "q.jsonl", query + "\n")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["diagnose", "--traces", str(tmp_path / "spans.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                     "--out", str(tmp_path / "d")]) == 0
    return json.loads((tmp_path / "d" / "diagnosis.jsonl").read_text())


def _retriever(span_id: str = "r") -> dict:
    return _span("retrieve", "RETRIEVER", span_id, {"retrieval.documents": [
        {"document": {"id": "rule", "content": RULE, "metadata": json.dumps({"doc": "policies/refund.md"})}},
        {"document": {"id": "exception", "content": EXCEPTION, "metadata": json.dumps({"doc": "policies/quality.md"})}}]})


def test_a_trace_without_its_answer_is_never_supported(tmp_path):
    """The evidence is all there, but no span carries an answer: no_answer at generation, and
    a note names the stages the trace held (it was called supported, "Nothing was lost")."""
    d = _one_query(tmp_path, _retriever())
    assert (d["outcome"], d["first_failure"], d["lost"]) == ("no_answer", "generation", [])
    assert d["notes"][0] == ("the trace holds no answer: no generator's span (an LLM span carrying output messages, "
                             "or an answer) was found; its stages: retrieve (retrieval)")
    assert d["hypothesis"].startswith("The trace holds no answer: if the generator's span is recorded")


def _context() -> dict:
    docs = [{"id": "rule", "content": RULE, "meta": {"doc": "policies/refund.md"}},
            {"id": "exception", "content": EXCEPTION, "meta": {"doc": "policies/quality.md"}}]
    return _component("context_window", "c", docs, docs)


def _llm(text: str) -> dict:
    return _span("generate", "LLM", "g", {"llm.output_messages": [{"message": {"role": "assistant", "content": text}}]})


def test_an_answer_that_declines_is_an_abstention_without_a_flag(tmp_path):
    """Spans never say whether the system abstained: an answer that opens as a refusal does is
    one; one that answers "No." and says why is not."""
    declined = _one_query(tmp_path / "a", _retriever(), _context(), _llm("I'm sorry, but I cannot answer that from the "
                                                             "provided context."))
    assert (declined["outcome"], declined["first_failure"]) == ("wrong_abstention", "generation")
    answered = _one_query(tmp_path / "b", _retriever(), _context(), _llm(f"No. {RULE}"))
    assert (answered["outcome"], answered["first_failure"]) == ("incomplete", "generation")


def test_chunks_read_from_the_frameworks_own_document_dumps(tmp_path):
    """--chunks takes Haystack's Document.to_dict() (its meta flattened, or not), LlamaIndex's
    TextNode.to_dict() and LangChain's Document (model_dump, and dumpd) by their own field names;
    a document whose metadata names no document is refused with its line and what to add."""
    from ragdx.errors import InputError
    from ragdx.traces.jsonl import read_chunks
    text = "Refunds are accepted within 30 days."
    lines = [
        {"doc": "policies/refund.md", "split_idx_start": 120, "id": "h1", "content": text, "blob": None,
         "score": None, "embedding": None, "sparse_embedding": None},
        {"id": "h2", "content": text, "meta": {"file_path": "policies/refund.md", "split_idx_start": 120}},
        {"id_": "n1", "embedding": None, "metadata": {"file_path": "policies/refund.md"}, "relationships": {},
         "text": text, "mimetype": "text/plain", "start_char_idx": 120, "end_char_idx": 156, "class_name": "TextNode"},
        {"id": "x1", "metadata": {"source": "policies/refund.md", "start_index": 120}, "page_content": text,
         "type": "Document"},
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"],
         "kwargs": {"id": "x2", "metadata": {"source": "policies/refund.md"}, "page_content": text, "type": "Document"}},
    ]
    write(tmp_path / "chunks.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    got = [(c.id, c.doc, (c.span.start, c.span.end) if c.span else None, c.text) for c in read_chunks(tmp_path / "chunks.jsonl")]
    assert got == [("h1", "policies/refund.md", (120, 156), text), ("h2", "policies/refund.md", (120, 156), text),
                   ("n1", "policies/refund.md", (120, 156), text), ("x1", "policies/refund.md", (120, 156), text),
                   ("x2", "policies/refund.md", None, text)]
    write(tmp_path / "bad.jsonl", json.dumps(lines[0]) + "\n" + json.dumps({"id": "h3", "content": text, "meta": {}}) + "\n")
    with pytest.raises(InputError) as caught:
        read_chunks(tmp_path / "bad.jsonl")
    assert str(caught.value).startswith(f"{tmp_path / 'bad.jsonl'}:2 field 'doc': a chunk needs its 'doc' (or, in a "
                                        "framework's document, metadata naming it:"), str(caught.value)


def test_an_answer_cites_by_the_ids_written_in_its_text():
    """One claim per statement; a citation after a statement's stop is that statement's; a
    bracket that names no known id stays in the text; a reply word alone is no claim."""
    from ragdx.traces.openinference import inline_claims
    text = (f"Yes. {RULE[:-1]} [rule]. {EXCEPTION} [exception, rule] Gift cards are final [see FAQ]. "
            'Amounts are in minor units [api#0]. "currency": "EUR" [api#1].')
    assert inline_claims(text, ["rule", "exception", "api#0", "api#1"]) == [
        {"text": RULE, "citations": ["rule"]}, {"text": EXCEPTION, "citations": ["exception", "rule"]},
        {"text": "Gift cards are final [see FAQ].", "citations": []},
        {"text": "Amounts are in minor units.", "citations": ["api#0"]},
        {"text": '"currency": "EUR".', "citations": ["api#1"]}]
    assert inline_claims("Refunds take 30 days [1].", ["rule"]) is None
