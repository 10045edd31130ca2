"""Audited rewriting: the diff of each rewrite, HyDE kept out of the evidence, the rewrite
counterfactual in the diagnosis, routing, and the LLM rewriter."""

import json
from dataclasses import replace

import pytest

from ragdx.build import build_pipeline
from ragdx.config import load_settings
from ragdx.diagnosis.ours import diagnose_trace
from ragdx.errors import ConfigError
from ragdx.ingest.ingestor import Ingestor, delete_documents
from ragdx.pipeline import Pipeline
from ragdx.queryset import load_queries
from ragdx.stages.bm25 import BM25Retriever
from ragdx.stages.generate import ChatClient
from ragdx.stages.rewrite import LlmRewriter, OfflineRewriter, diff, hypothetical, markers, split_question
from ragdx.stages.routed import RoutedRewrite
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.chat import ChatServer
from ragdx.tracefile import trace_to_dict
from ragdx.types import Marker, MarkerKind, Principal, Query, Rewrite, RewriteKind, StageKind
from tests.conftest import EXAMPLE

LEXICAL = ["retrieval.dense.enabled=false"]


def example_query(qid):
    return next(q for q in load_queries(EXAMPLE / "queries.jsonl") if q.id == qid)


def test_a_rewrite_that_drops_the_negation_is_flagged():
    d = diff("Can't I get a refund?", "refund process")
    assert d.dropped == (Marker(MarkerKind.NEGATION, "Can't"),)
    assert d.flags == ("dropped the negation \"Can't\"",)
    assert d.entities_added == ("process",)
    # a negation written another way is kept, and nothing is flagged
    kept = diff("Can't I get a refund?", "cannot get a refund")
    assert kept.retained == (Marker(MarkerKind.NEGATION, "Can't"),) and kept.flags == ()


def test_markers_and_their_drops_by_kind():
    q = "Were all 3 parcels delivered before 2 March 2026?"
    assert markers(q) == (Marker(MarkerKind.DATE, "2 March 2026"), Marker(MarkerKind.NUMBER, "3"),
                          Marker(MarkerKind.QUANTIFIER, "all"))
    d = diff(q, "parcels delivered before March")
    assert [m.text for m in d.dropped] == ["2 March 2026", "3", "all"]
    assert d.flags == ("dropped the date '2 March 2026'",)  # numbers and quantifiers are listed, not flagged


def test_a_compound_question_splits_into_its_parts():
    q = ("What does passing deterministic=True to create_function allow, and where may SQLite only use "
         "deterministic functions?")
    assert split_question(q) == ("What does passing deterministic=True to create_function allow?",
                                 "Where may SQLite only use deterministic functions?")
    assert split_question("My refund failed with error RFD-4021. What does that mean?") == (
        "My refund failed with error RFD-4021.",)  # "What does that mean?" asks nothing of its own
    assert hypothetical("How long is the warranty?") == "The warranty."


def test_an_elision_or_a_line_of_sql_opens_no_question_and_a_question_mark_ends_one():
    # "..." ends no sentence, and WHERE in capitals is SQL, not a question word ("WHERE matches
    # nothing.?" was a part of its own)
    assert split_question("My SELECT sum(amount) ... WHERE matches nothing. Do I get 0 back?") == (
        "My SELECT sum(amount) ... WHERE matches nothing.", "Do I get 0 back?")
    assert split_question("When I run ALTER ROLE ... PASSWORD, which hashing method is used?") == (
        "When I run ALTER ROLE ... PASSWORD, which hashing method is used?",)
    # the last clause of a sentence that ends in a question mark asks, whatever its first word
    assert split_question("On version 15, does PostgreSQL reinitialize after a crash?") == (
        "On version 15, does PostgreSQL reinitialize after a crash?",)
    assert split_question("Deleting a customer takes seconds. Didn't the foreign key create an index?") == (
        "Deleting a customer takes seconds.", "Didn't the foreign key create an index?")


def test_entities_are_completed_from_the_heading_index_for_what_the_asker_may_read(example_store):
    rewriter = OfflineRewriter(example_store)
    public = Query("q", "Who approves a manual refund above the limit?")
    staff = replace(public, principal=Principal("sam", ("public", "staff")))
    assert rewriter.complete(public) == []  # the staff runbook's headings are not the public's
    assert rewriter.complete(staff) == ["When to use a manual refund"]
    # "Order NW-1042" adds nothing to the question; "Order NW-1024" names another number
    assert rewriter.complete(Query("q", "What does order NW-1042 contain?")) == []


def test_the_heading_index_is_read_again_after_a_deletion(tmp_path):
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(EXAMPLE / "manifest.jsonl")
    rewriter = OfflineRewriter(store)
    staff = Query("q", "Who approves a manual refund above the limit?", Principal("sam", ("public", "staff")))
    assert rewriter.complete(staff) == ["When to use a manual refund"]
    delete_documents(store, ["internal/refund-runbook.md"])
    assert rewriter.complete(staff) == []  # the deleted runbook's headings are gone with it


def test_a_hyde_passage_is_searched_with_but_never_reaches_the_context_or_a_citation(example_store):
    settings = load_settings(overrides=LEXICAL + ["rewrite.rewrite_single=true", "rewrite.hyde=true"])
    pipeline = build_pipeline(example_store, settings)
    query = Query("h", "How long does a refund to PayPal take once it has been approved?")
    trace = pipeline.run(query)
    rewritten = trace.rewritten
    passage = next(r for r in rewritten.rewrites if r.kind is RewriteKind.HYDE)
    assert passage.hypothetical and passage.text == "A refund to PayPal take once it has been approved."
    assert passage.text in rewritten.searches and trace.stage("bm25").config["searches"] == len(rewritten.searches)
    context, answer = trace.context, trace.answer
    texts = [u.text for u in context.units] + [answer.text] + [c.text for c in answer.claims]
    assert context.units and not any(passage.text in t for t in texts)
    # every unit is a span of a stored document, every citation one of those units
    for u in context.units:
        assert example_store.texts(u.doc_id, u.version)[1][u.start:u.end] == u.text
    assert set(answer.citations) <= {u.id for u in context.units}
    # the generator and the verifier were given the original question
    assert trace.query.question == query.question and rewritten.original == query.question
    stage = trace_to_dict(trace)["stages"][0]
    assert stage["kind"] == "rewrite" and {"kind": "hyde", "search_only": True, "hypothetical": True} \
        .items() <= stage["rewrites"][-1].items()


class Replace:
    """A rewriter that replaces the question with fixed words (as a careless model would)."""

    name = "replace"

    def __init__(self, text):
        self.text = text

    def rewrite(self, query):
        return (Rewrite(self.text, RewriteKind.EXPANSION, diff(query.question, self.text)),)


def test_the_counterfactual_names_rewrite_when_the_original_would_have_found_the_group(example_store):
    query = example_query("q-refund-35d")
    bm25 = BM25Retriever(example_store, top_k=8)
    base = build_pipeline(example_store, load_settings(overrides=LEXICAL))
    stages = [RoutedRewrite(Replace("refund process"), route="single", rewrite_single=True,
                            search_original=False), bm25, *base.stages[2:]]
    pipeline = Pipeline(stages, store=example_store)
    trace = pipeline.run(query)
    assert trace.rewritten.searches == ("refund process",)
    assert trace.rewritten.rewrites[0].diff.entities_added == ("process",)
    diagnosis = diagnose_trace(pipeline, trace)
    # the original's top 8 hold the quality exception (group 1), the rewrite's do not; neither
    # holds the 30-day rule (group 0), which is lost at retrieval
    presence = {p.name: p.groups_present for p in diagnosis.stages}
    assert presence["rewrite"] == (1,) and presence["retrieval"] == ()
    lost = {l.group: l for l in diagnosis.lost}
    assert lost[1].stage == "rewrite" and lost[1].reason == ("the original question's retrieval found it; the "
                                                             "rewritten question's did not")
    assert lost[0].stage == "retrieval"
    assert diagnosis.first_failure == "rewrite"
    assert diagnosis.hypothesis.startswith("If the original question is searched")


def test_a_simple_question_is_routed_single_and_searched_as_asked(example_store):
    settings = load_settings(overrides=LEXICAL)
    routed = build_pipeline(example_store, settings)
    plain = Pipeline(routed.stages[1:], store=example_store)
    query = example_query("q-warranty-length")
    trace = routed.run(query)
    assert trace.rewritten.route == "single" and trace.rewritten.searches == (query.question,)
    assert trace.rewritten.rewrites == () and trace.rewritten.hops == ()
    assert trace.stage("bm25").items == plain.run(query).stage("bm25").items
    multi = routed.run(example_query("q-order-quality-refund"))
    assert multi.rewritten.route == "multi-hop" and len(multi.rewritten.searches) > 1


def test_a_routed_question_is_decomposed_once(example_store, monkeypatch):
    routed = build_pipeline(example_store, load_settings(overrides=LEXICAL))
    loop = routed.stages[0].multihop
    calls = []
    decompose = loop.decompose
    monkeypatch.setattr(loop, "decompose", lambda query: calls.append(query.id) or decompose(query))
    trace = routed.run(example_query("q-order-quality-refund"))
    assert trace.rewritten.route == "multi-hop" and len(trace.rewritten.slots) > 1
    assert calls == ["q-order-quality-refund"]


def test_the_llm_rewriter_flags_what_the_model_dropped():
    reply = json.dumps({"entities": ["refund policy"], "sub_questions": [],
                        "hypothetical": "Refunds are possible within 30 days."})
    with ChatServer(reply) as server:
        rewriter = LlmRewriter(ChatClient(server.url, "m", max_retries=0))
        rewrites = rewriter.rewrite(Query("q", "Can't I get a refund after 40 days?"))
        sent = server.requests[0][2]["messages"][1]["content"]
    assert sent == "Can't I get a refund after 40 days?"
    assert [r.kind for r in rewrites] == [RewriteKind.ENTITY, RewriteKind.HYDE]
    assert rewrites[0].diff.entities_added == ("refund policy",) and rewrites[0].diff.flags == ()
    hyde = rewrites[1].diff
    assert hyde.flags == ("dropped the negation \"Can't\"",) and hyde.dropped[-1] == Marker(MarkerKind.NUMBER, "40")
    assert StageKind.REWRITE.order < StageKind.RETRIEVAL.order


def test_an_unknown_route_is_refused_with_the_valid_ones():
    with pytest.raises(ConfigError, match="rewrite stage 'rewrite': the route must be one of auto, single, "
                                          "multi-hop, not 'always'"):
        RoutedRewrite(route="always")
    with pytest.raises(ConfigError, match="setting 'rewrite.route' must be one of 'auto', 'single', 'multi-hop'"):
        load_settings(overrides=["rewrite.route=always"])


def test_a_split_part_is_not_flagged_for_the_negation_its_sibling_keeps(example_store):
    q = "Why can't I return a gift card, and how long does a refund to PayPal take?"
    parts = split_question(q)
    assert parts == ("Why can't I return a gift card?", "How long does a refund to PayPal take?")
    rewrites = OfflineRewriter(example_store, entities=False).rewrite(Query("q", q))
    assert [(r.kind, r.text, r.diff.flags) for r in rewrites] == [
        (RewriteKind.SPLIT, parts[0], ()), (RewriteKind.SPLIT, parts[1], ())]
    assert rewrites[0].diff.retained == (Marker(MarkerKind.NEGATION, "can't"),)
    assert rewrites[1].diff.retained == () and rewrites[1].diff.dropped == ()
    # a negation that no part keeps is still dropped, and flagged
    lost = diff(q, parts[1], sub_questions=(parts[1],), siblings=["How long does a refund take?"])
    assert lost.flags == ("dropped the negation \"can't\"",)


class Silent:
    """A rewriter that has nothing to add (as the offline one for a plain question)."""

    name = "silent"

    def rewrite(self, query):
        return ()


def test_a_question_with_no_rewrite_is_searched_as_asked_even_without_search_original(example_store):
    # rewrite_single with search_original off once searched nothing at all for such a question,
    # and the diagnosis blamed "the rewritten question's" retrieval (issue 51)
    query = example_query("q-refund-35d")
    stages = [RoutedRewrite(Silent(), route="single", rewrite_single=True, search_original=False),
              BM25Retriever(example_store, top_k=8)]
    trace = Pipeline(stages, store=example_store).run(query)
    assert trace.rewritten.searches == (query.question,)
    assert len(trace.stages[1].items) == 8
