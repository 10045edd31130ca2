"""What issue 13 asked of imported diagnosis: the system's own chunks, answers nobody verified, the
version wildcard, and hypotheses in the imported system's own words."""

from ragdx.diagnosis.evidence import RESOLVED, QueryEvidence, ResolvedAlternative
from ragdx.traces.jsonl import BY_TEXT, parse_trace, resolve_offline
from ragdx.diagnosis.locate import Diagnoser, ItemView, part_of
from ragdx.types import Alternative, Principal, Query, Span

RULE = "Refunds are accepted within 30 days of delivery."
EXCEPTION = "Quality defects may be refunded within 90 days of delivery."
DISTRACTOR = "Orders can be cancelled free of charge before they ship."
QUERY = Query("q1", "Refund after 35 days for a defect?", Principal(), True, (
    (Alternative(doc="policies/refund.md", quote="Refunds are accepted within 30 days of delivery"),),
    (Alternative(doc="policies/quality.md", quote="Quality defects may be refunded within 90 days"),)))


def view(stages, answer=None, system=None):
    obj = {"query_id": "q1", "stages": stages}
    if answer is not None:
        obj["answer"] = answer
    if system:
        obj["system"] = system
    return parse_trace(obj, "t.jsonl", 1)


def unit(doc, text, id=None):
    return {"id": id or doc, "doc": doc, "text": text}


def diagnose(trace, query=QUERY, system="haystack"):
    return Diagnoser(system=system).run(query, resolve_offline(query), trace)


BOTH = [unit("policies/refund.md", RULE), unit("policies/quality.md", EXCEPTION),
        unit("policies/cancellation.md", DISTRACTOR)]


def test_a_quote_cut_across_the_systems_chunks_is_a_parsing_loss_naming_the_chunks():
    # the framework's chunker cut the exception after "refunded": chunk 2 ends with the quote's
    # beginning, chunk 3 starts with its end; no chunk holds it whole
    chunks = [unit("policies/quality.md", "Quality policy.", "qd-1"),
              unit("policies/quality.md", "Report defects with photos. Quality defects may be refunded", "qd-2"),
              unit("policies/quality.md", "within 90 days of delivery. Keep the receipt.", "qd-3"),
              unit("policies/refund.md", RULE, "rp-1")]
    retrieved = [{"id": "rp-1", "doc": "policies/refund.md", "text": RULE},
                 {"id": "qd-2", "doc": "policies/quality.md", "text": chunks[1]["text"]}]
    t = view([{"name": "DocumentSplitter", "kind": "parsing", "items": chunks},
              {"name": "bm25", "kind": "retrieval", "items": retrieved},
              {"name": "ctx", "kind": "context", "items": retrieved}],
             {"text": "Refunds are accepted within 30 days of delivery."})
    d = diagnose(t)
    assert (d.first_failure, [(l.group, l.stage) for l in d.lost]) == ("parsing", [(1, "parsing")])
    assert d.lost[0].reason == ("policies/quality.md: no single chunk holds it whole; chunks 2 (qd-2) and 3 "
                                "(qd-3) of 3 together hold it; bm25 returned qd-2, which holds 69% of it")
    assert d.hypothesis == ("If one chunk holds group 1 (policies/quality.md) whole (chunk overlap, or larger "
                            "chunks at DocumentSplitter), retrieval can return it whole.")
    # the same trace without the chunk listing blames retrieval, and says what it did return
    d = diagnose(view(t_stages(t)[1:], {"text": "x"}))
    assert d.first_failure == "retrieval" and d.lost[0].reason.endswith("bm25 returned qd-2, which holds 69% of it")


def t_stages(t):
    return [{"name": s.name, "kind": s.kind.value, "items": [
        {"id": i.id, "doc": i.doc, "text": i.text} for i in s.items]} for s in t.stages]


def test_part_of_a_quote_is_measured_on_its_non_space_characters():
    alt = resolve_offline(QUERY).group(1)[0]
    quote = "Qualitydefectsmayberefundedwithin90days"  # 39 characters
    head = ItemView("a", text="... Quality defects may be refunded")
    assert part_of(alt, head) == (0.0, len("Qualitydefectsmayberefunded") / len(quote))
    assert part_of(alt, ItemView("b", text="within 90 days of delivery.")) == (
        len("Qualitydefectsmayberefunded") / len(quote), 1.0)
    assert part_of(alt, ItemView("c", text="defects may")) == (7 / 39, 17 / 39)
    assert part_of(alt, ItemView("d", text="days")) is None  # fewer than MIN_PART characters
    assert part_of(alt, ItemView("e", text=EXCEPTION)) is None  # holds it whole, not a part


def test_an_unverified_answer_is_checked_against_the_context_before_it_can_be_supported():
    ctx = [{"name": "ctx", "kind": "context", "items": BOTH}]
    good = diagnose(view(ctx, {"text": "Refunds are accepted within 30 days of delivery. Quality defects may be "
                                      "refunded within 90 days of delivery."}))
    assert (good.outcome, good.first_failure) == ("supported", None)
    assert good.notes == ("the answer carried no verdicts: ragdx checked 2 claims itself with its learned "
                          "checker against the context (2 supported)",)
    # both groups reached the context, but the answer uses only the rule: incomplete, at generation
    half = diagnose(view(ctx, {"text": "Refunds are accepted within 30 days of delivery."}))
    assert (half.outcome, half.first_failure) == ("incomplete", "generation")
    assert [(l.group, l.stage) for l in half.lost] == [(1, "generation")]
    # an answer taken from the wrong document is not supported either
    wrong = diagnose(view(ctx, {"text": "Orders can be cancelled free of charge before they ship."}))
    assert (wrong.outcome, wrong.first_failure) == ("incomplete", "generation")
    # a claim no unit supports is the generator's
    made_up = diagnose(view(ctx, {"text": "Refunds are accepted within 45 days of delivery."}))
    assert (made_up.outcome, made_up.first_failure) == ("unsupported", "generation")
    # a claim two of the three units state between them: the default judgement reads two statements
    # together and cites both; the lexical checker supports it by no one unit, and says so
    stitched = view(ctx, {"text": "Refunds are accepted within 30 days, and quality defects within 90 days of "
                                  "delivery."})
    together = diagnose(stitched)
    assert (together.outcome, together.first_failure) == ("supported", None)
    assert [c.citations for c in together.claims] == [("policies/refund.md", "policies/quality.md")]
    assert together.claims[0].reason.startswith("supported by policies/refund.md, policies/quality.md: support ")
    assert "(two statements together)" in together.claims[0].reason
    from ragdx.stages.verify import LexicalChecker
    words = Diagnoser(LexicalChecker(), system="haystack").run(QUERY, resolve_offline(QUERY), stitched)
    assert (words.outcome, words.first_failure) == ("unsupported", "generation")
    assert [(c.supported, c.reason) for c in words.claims] == [
        (False, "no one context unit supports it; all 3 together: 100% of the claim's content words are in the "
                "evidence")]


def test_an_answer_that_cannot_be_checked_is_never_supported():
    ids_only = [{"name": "ctx", "kind": "context", "items": [{"id": "rule", "doc": "policies/refund.md",
                                                              "text": RULE}, {"id": "exception"}]}]
    q = Query("q1", "?", Principal(), True, ((Alternative(id="rule"),), (Alternative(id="exception"),)))
    d = diagnose(view([{"name": "ctx", "kind": "context", "items": [{"id": "rule"}, {"id": "exception"}]}],
                      {"text": "Yes, within 90 days."}), query=q)
    assert (d.outcome, d.first_failure) == ("unverified", None)
    assert d.notes == ("the answer carries no citations or verdicts, and its context has no text: ragdx could "
                       "not check its 1 claim",)
    # a claim citing a unit without a text cannot be checked either
    d = diagnose(view(ids_only, {"text": "Yes.", "citations": ["exception"]}), query=q)
    assert d.outcome == "unverified"


def test_a_citation_to_the_right_chunk_that_does_not_support_the_claim_is_named():
    ctx = [{"name": "ctx", "kind": "context", "items": BOTH}]
    # the claim cites the rule, but only the exception says it: a citation failure
    d = diagnose(view(ctx, {"text": "x", "claims": [
        {"text": "Refunds are accepted within 30 days of delivery.", "citations": ["policies/refund.md"]},
        {"text": "Quality defects may be refunded within 90 days of delivery.",
         "citations": ["policies/refund.md"]}]}))
    assert (d.outcome, d.first_failure) == ("unsupported", "citation")
    # the claim cites the right unit but says what no unit says: the generator's
    d = diagnose(view(ctx, {"text": "x", "claims": [
        {"text": "Refunds are accepted within 30 days of delivery.", "citations": ["policies/refund.md"]},
        {"text": "Quality defects may be refunded within 120 days of delivery.",
         "citations": ["policies/quality.md"]}]}))
    assert (d.outcome, d.first_failure) == ("unsupported", "generation")


def test_an_item_span_without_a_version_matches_any_version():
    q = Query("q1", "?", Principal(), True, ((Alternative(doc="policies/refund.md", quote="x", version="2026-03"),),))
    evidence = QueryEvidence("q1", (ResolvedAlternative(0, 0, q.required[0][0], RESOLVED,
                                                        Span("policies/refund.md", "2026-03", 100, 140)),))
    t = view([{"name": "bm25", "kind": "retrieval", "items": [{"doc": "policies/refund.md", "start": 90, "end": 150}]},
              {"name": "ctx", "kind": "context", "items": []}])
    d = Diagnoser(system="s").run(q, evidence, t)
    assert d.stage("retrieval").groups_present == (0,)
    assert (d.first_failure, d.lost[0].stage) == ("context", "context")
    # a stated version other than the evidence's does not match
    t = view([{"name": "bm25", "kind": "retrieval", "items": [
        {"doc": "policies/refund.md", "version": "2024-01", "start": 90, "end": 150}]}])
    assert Diagnoser(system="s").run(q, evidence, t).stage("retrieval").groups_present == ()


def test_hypotheses_name_the_imported_systems_own_stages_not_ragdx_settings():
    t = view([{"name": "bm25", "kind": "retrieval", "items": BOTH},
              {"name": "ContextCut", "kind": "context", "items": BOTH[:1],
               "dropped": [dict(BOTH[1], reason="cut")]}], {"text": RULE})
    d = diagnose(t)
    assert d.first_failure == "context"
    assert d.hypothesis == ("If group 1 (policies/quality.md) reaches the context at ContextCut (a larger "
                            "budget, or a better order), the answer can use it.")
    assert "context.budget_tokens" in Diagnoser().run(QUERY, resolve_offline(QUERY), t).hypothesis
    assert resolve_offline(QUERY).group(0)[0].status == BY_TEXT


def test_the_claims_ragdx_checked_itself_and_an_unsupported_claims_reason_are_in_the_diagnosis():
    """Issue 28: an imported answer ragdx verified showed no claim verdict anywhere, and an
    unsupported outcome had no claim-level reason."""
    ctx = [{"name": "ctx", "kind": "context", "items": BOTH}]
    d = diagnose(view(ctx, {"text": "Refunds are accepted within 30 days of delivery. Refunds are accepted within "
                                    "45 days of delivery."}))
    assert d.outcome == "unsupported"
    [good, bad] = d.to_dict()["claims"]
    assert (good["text"], good["supported"], good["citations"]) == (
        "Refunds are accepted within 30 days of delivery.", True, ["policies/refund.md"])
    assert (bad["text"], bad["supported"], bad["citations"]) == (
        "Refunds are accepted within 45 days of delivery.", False, [])
    assert "45" in bad["reason"]  # the number no unit states is named
    # a trace that carried its own verdicts keeps them, and a supported answer adds nothing
    own = diagnose(view(ctx, {"text": "x", "claims": [
        {"text": RULE, "citations": ["policies/refund.md"], "supported": True},
        {"text": EXCEPTION, "citations": ["policies/quality.md"], "supported": True}]}))
    assert own.outcome == "supported" and own.claims == () and own.to_dict()["claims"] == []
