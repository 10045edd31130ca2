"""Issue 25, item 0: a required group counts as used only when a claim states it. A cited unit that
holds the required sentence is not enough when every claim rests on other sentences of it."""

import pytest

from ragdx.diagnosis.evidence import RESOLVED, QueryEvidence, ResolvedAlternative
from ragdx.traces.jsonl import parse_trace, resolve_offline
from ragdx.diagnosis.locate import STATED_NOT, UNCITED, AnswerView, ClaimView, Diagnoser, ItemView, StageView, TraceView
from ragdx.errors import InputError
from ragdx.types import Alternative, Principal, Query, Span, StageKind, Verdict

DOC, OTHER = "pg/functions-matching.html", "pg/citext.html"
# one 2,000-character-style unit of the manual: the required sentence among others
LIKE = "The LIKE expression returns true if the string matches the supplied pattern."
ILIKE = ("The key word ILIKE can be used instead of LIKE to make the match case-insensitive according to "
         "the active locale.")
TEXT = ("Pattern Matching\n\n" + LIKE + " If pattern does not contain percent signs or underscores, then the "
        "pattern only represents the string itself. " + ILIKE + " The operator ~~ is equivalent to LIKE.")
START = 1000                     # the unit's place in the parsed text of DOC
AT = TEXT.index(ILIKE)           # 205 = 18 + 76 + 1 + 109 + 1: where the required sentence starts
REQUIRED = Span(DOC, "17", START + AT, START + AT + len(ILIKE))   # [1205, 1318): 113 characters
QUERY = Query("q", "How do I match a pattern case-insensitively?", Principal(), True,
              ((Alternative(doc=DOC, quote=ILIKE),),))
EVIDENCE = QueryEvidence("q", (ResolvedAlternative(0, 0, QUERY.required[0][0], RESOLVED, REQUIRED),))


def unit(text=TEXT, id="S1", doc=DOC, start=START, version="17"):
    return ItemView(id, Span(doc, version, start, start + len(text)), text, 1, doc)


def trace(*claims, units=None):
    context = StageView("context", StageKind.CONTEXT, tuple(units or [unit()]))
    retrieval = StageView("bm25", StageKind.RETRIEVAL, context.items)
    return TraceView("q", (retrieval, context), AnswerView(" ".join(c.text for c in claims), False, claims))


def diagnose(t, checker=None, evidence=EVIDENCE, system=None):
    return Diagnoser(checker, system=system).run(QUERY, evidence, t)


def test_the_hand_computed_offsets_of_the_example():
    assert (AT, len(ILIKE), REQUIRED.start, REQUIRED.end) == (205, 113, 1205, 1318)


def test_a_unit_cited_for_another_sentence_does_not_state_the_required_one():
    d = diagnose(trace(ClaimView(LIKE, ("S1",), True)))
    assert (d.outcome, d.first_failure) == ("incomplete", "generation")
    assert [(l.group, l.stage, l.reason) for l in d.lost] == [
        (0, "generation", "in the context and in a cited unit, but no claim states it")]
    assert d.hypothesis == ("If the answer states group 0 (pg/functions-matching.html) in a claim drawn from it, "
                            "citing the unit that holds it, it becomes supported: try a stronger generator, or "
                            "the gold context (ragdx run --oracle context).")


def test_the_same_answer_with_a_claim_stating_the_sentence_is_supported():
    d = diagnose(trace(ClaimView(LIKE, ("S1",), True), ClaimView(ILIKE, ("S1",), True)))
    assert (d.outcome, d.first_failure, d.lost) == ("supported", None, ())


def test_a_claim_drawn_from_the_sentence_in_other_words_states_it_where_it_rests():
    # not a quote: the locator finds the sentence holding most of its words, the ILIKE sentence
    claim = ClaimView("Use ILIKE instead of LIKE for a case-insensitive match.", ("S1",), True)
    assert diagnose(trace(claim)).outcome == "supported"


def test_recorded_support_decides_and_its_edges_are_half_open():
    # ragdx's verifier records where each claim rests; the required span is [1205, 1318)
    def outcome(start, end, version="17"):
        claim = ClaimView(LIKE, ("S1",), True, support=(Span(DOC, version, start, end),))
        return diagnose(trace(claim)).outcome
    assert outcome(1018, 1205) == "incomplete"     # ends where the required sentence starts
    assert outcome(1018, 1206) == "supported"      # one character of it
    assert outcome(1318, 1350) == "incomplete"     # starts where it ends
    assert outcome(1317, 1350) == "supported"
    assert outcome(1018, 1206, version="16") == "incomplete"   # another version of the document
    assert outcome(1018, 1206, version="*") == "supported"     # a version the trace does not say


def test_a_claim_citing_no_unit_that_holds_the_group_keeps_the_uncited_reason():
    other = unit("Case-insensitive matching of text values is also offered by the citext module.", "S2", OTHER, 0)
    claim = ClaimView("Case-insensitive matching of text values is also offered by the citext module.", ("S2",), True)
    d = diagnose(trace(claim, units=[unit(), other]))
    assert (d.outcome, d.first_failure) == ("incomplete", "generation")
    assert [l.reason for l in d.lost] == [UNCITED]


def test_the_same_rule_stated_from_another_page_counts_by_the_checker():
    # the claim rests on another page's sentence that says what the required one says: the lexical
    # checker finds 8 of its 9 content words in the required sentence (89% >= 80%)
    said = "ILIKE makes a LIKE match case-insensitive according to the active locale."
    other = unit(said, "S2", OTHER, 0)
    d = diagnose(trace(ClaimView(said, ("S2",), True), units=[unit(), other]))
    assert (d.outcome, d.first_failure, d.lost) == ("supported", None, ())


class Judge:
    """A checker that finds support only where it was told to (the strongest one available stands
    in for an NLI model or an LLM judge)."""

    name = "judge"

    def __init__(self, pairs):
        self.pairs, self.calls = set(pairs), []

    def judge(self, claim, evidence):
        self.calls.append((claim, evidence))
        if (claim, evidence) in self.pairs:
            return Verdict.SUPPORTED, "told so"
        return Verdict.UNSUPPORTED, "not told so"


def test_a_paraphrase_the_configured_checker_judges_the_same_fact_counts():
    said = "Matching without regard to case follows the locale when you write ILIKE."
    other = unit(said, "S2", OTHER, 0)
    t = trace(ClaimView(said, ("S2",), True), units=[unit(), other])
    assert diagnose(t).outcome == "incomplete"           # lexically: 5 of 10 words
    judge = Judge({(said, ILIKE)})
    assert diagnose(t, judge).outcome == "supported"
    assert judge.calls == [(said, ILIKE)]
    # the claim supporting the required text counts as stating it too
    assert diagnose(t, Judge({(ILIKE, said)})).outcome == "supported"


def test_each_unstated_group_is_lost_with_its_own_reason():
    second = "Character classes are written in brackets."
    query = Query("q", "?", Principal(), True, ((Alternative(doc=DOC, quote=ILIKE),),
                                               (Alternative(doc=OTHER, quote=second),)))
    other = unit(second, "S2", OTHER, 0)
    evidence = QueryEvidence("q", (ResolvedAlternative(0, 0, query.required[0][0], RESOLVED, REQUIRED),
                                   ResolvedAlternative(1, 0, query.required[1][0], RESOLVED,
                                                       Span(OTHER, "17", 0, len(second)))))
    d = Diagnoser().run(query, evidence, trace(ClaimView(LIKE, ("S1",), True), units=[unit(), other]))
    assert [(l.group, l.reason) for l in d.lost] == [(0, STATED_NOT), (1, UNCITED)]


# -- imported traces: no support offsets, so ragdx locates each claim's support itself -----------

def imported(claims, items=None):
    return parse_trace({"query_id": "q", "stages": [
        {"name": "ctx", "kind": "context", "items": items or [{"id": "u1", "doc": DOC, "text": TEXT}]}],
        "answer": {"text": "...", "claims": claims}}, "t.jsonl", 3)


def test_an_imported_answer_citing_the_unit_for_another_sentence_is_incomplete():
    t = imported([{"text": LIKE, "citations": ["u1"], "supported": True}])
    d = Diagnoser(system="haystack").run(QUERY, resolve_offline(QUERY), t)
    assert (d.outcome, d.first_failure, [l.reason for l in d.lost]) == ("incomplete", "generation", [STATED_NOT])
    assert d.hypothesis == ("If the answer states group 0 (pg/functions-matching.html) in a claim drawn from it, "
                            "citing the item that holds it, it becomes supported: try a stronger generator, or "
                            "give it the required evidence alone.")


def test_an_imported_answer_ragdx_verifies_itself_is_judged_by_the_same_rule():
    # no verdicts: ragdx checks the claim against the cited text (supported), then where it rests
    t = imported([{"text": LIKE, "citations": ["u1"]}])
    d = Diagnoser(system="haystack").run(QUERY, resolve_offline(QUERY), t)
    assert (d.outcome, [l.reason for l in d.lost]) == ("incomplete", [STATED_NOT])
    t = imported([{"text": LIKE, "citations": ["u1"]}, {"text": ILIKE, "citations": ["u1"]}])
    assert Diagnoser(system="haystack").run(QUERY, resolve_offline(QUERY), t).outcome == "supported"


def test_an_imported_claims_support_spans_are_read_and_used():
    item = {"id": "u1", "doc": DOC, "version": "17", "start": START, "end": START + len(TEXT), "text": TEXT}
    t = imported([{"text": LIKE, "citations": ["u1"], "supported": True,
                   "support": [{"doc": DOC, "version": "17", "start": 1300, "end": 1318}]}], [item])
    assert t.answer.claims[0].support == (Span(DOC, "17", 1300, 1318),)
    assert diagnose(t).outcome == "supported"     # the trace says the claim rests on [1300, 1318)
    t = imported([{"text": LIKE, "citations": ["u1"], "supported": True,
                   "support": [{"doc": DOC, "start": 1018, "end": 1094}]}], [item])
    assert t.answer.claims[0].support == (Span(DOC, "*", 1018, 1094),)
    assert diagnose(t).outcome == "incomplete"


@pytest.mark.parametrize("support, field, message", [
    ([{"doc": DOC, "start": 9, "end": 3}], "answer.claims[0].support[0]",
     "a span needs 'doc' and 0 <= start < end, got start 9, end 3"),
    ([{"doc": DOC, "start": 3}], "answer.claims[0].support[0]", "a span needs both 'start' and 'end'"),
    ([{"doc": DOC}], "answer.claims[0].support[0]", "a support span needs 'doc', 'start' and 'end'"),
    (["u1"], "answer.claims[0].support[0]", 'expected an object, got "u1"'),
    ({"doc": DOC}, "answer.claims[0].support", "expected a list"),
])
def test_a_bad_support_field_names_file_line_and_field(support, field, message):
    with pytest.raises(InputError) as exc:
        imported([{"text": LIKE, "citations": ["u1"], "supported": True, "support": support}])
    assert (exc.value.file, exc.value.line, exc.value.field) == ("t.jsonl", 3, field)
    assert message in str(exc.value)


def test_a_cited_item_without_text_or_support_cannot_show_the_group_stated():
    # a span-only context item and verdicts from the system: nothing says where the claim rests
    item = {"id": "u1", "doc": DOC, "version": "17", "start": START, "end": START + len(TEXT)}
    t = imported([{"text": "Some claim.", "citations": ["u1"], "supported": True}], [item])
    evidence = QueryEvidence("q", (ResolvedAlternative(0, 0, Alternative(doc=DOC, start=1205, end=1318),
                                                       RESOLVED, REQUIRED),))
    d = Diagnoser(system="s").run(QUERY, evidence, t)
    assert (d.outcome, d.first_failure) == ("unverified", None)
    assert d.notes == ("a cited item holds a required group but has no text, and no claim records where its "
                       "support lies: ragdx cannot tell whether a claim states the group",)
