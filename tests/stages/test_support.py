"""Where a claim's support lies: statements with their offsets, the verifier's locator, and the
support spans ragdx's verifier records and its traces carry (issue 25, item 0)."""

import json

from ragdx.ingest.ingestor import Ingestor
from ragdx.stages.verify import ClaimVerifier, locate_support, support_spans
from ragdx.text import Statement, statement_spans, statements
from ragdx.tracefile import stage_to_dict
from ragdx.store.sqlite import SQLiteStore
from ragdx.types import Answer, Claim, Context, ContextUnit, Principal, Query, Span, Verdict
from tests.conftest import write

A = "Refunds are accepted within 30 days of delivery."     # 48 characters
B = "Quality defects may be refunded within 90 days."       # 47 characters
C = "Use the returns form to start."                          # 30 characters
TEXT = f"Refunds\n\n{A} {B}\n{C}\n\n- Keep the receipt.\n- Pack it well."


def test_statements_know_where_they_stand():
    # "Refunds" is a heading; A starts at 9, B at 9 + 48 + 1 = 58, C after the line break at 106;
    # the list starts at 136 + 2 = 138, its first item's text after "- " at 140 (17 characters), the
    # second item's line at 157 + 1 = 158, its text at 160 (13 characters)
    assert statement_spans(TEXT) == [Statement(9, 57, A), Statement(58, 105, B), Statement(106, 136, C),
                                     Statement(140, 157, "Keep the receipt."),
                                     Statement(160, 173, "Pack it well.")]
    assert statements(TEXT) == [s.text for s in statement_spans(TEXT)]
    assert TEXT[106:136] == C and TEXT[160:173] == "Pack it well."


def test_a_table_row_stands_on_its_line_with_its_header_row():
    table = "Method | Time\nPayPal | 3-5 days\nCard | 5-10 days"
    assert statement_spans(table) == [Statement(14, 31, "Method: PayPal; Time: 3-5 days", (0, 13)),
                                      Statement(32, 48, "Method: Card; Time: 5-10 days", (0, 13))]
    # a header row given apart sits before the text, as "{header}\n{text}" places it
    assert statement_spans("PayPal | 3-5 days", "Method | Time") == [
        Statement(0, 17, "Method: PayPal; Time: 3-5 days", (-14, -1))]


def test_a_quoted_claim_rests_where_the_quote_stands():
    assert locate_support(B, [(TEXT, "")]) == [(0, 58, 105)]
    assert locate_support("defects may be\nrefunded", [("x", ""), (TEXT, "")]) == [(1, 66, 89)]


def test_a_claim_in_other_words_rests_on_the_sentence_holding_most_of_its_words():
    # "refunds" and "30 days" are in A (3 content words: refund, 30, days); B holds refund and days
    assert locate_support("You get refunds for 30 days.", [(TEXT, "")]) == [(0, 9, 57)]


def test_a_claim_drawn_from_two_sentences_rests_on_both_and_one_shared_word_brings_none():
    # A holds refund, accepted, 30, days, delivery; C adds returns-form words: return, form, start (3 >= 2)
    claim = "Refunds are accepted within 30 days of delivery; start with the returns form."
    assert locate_support(claim, [(TEXT, "")]) == [(0, 9, 57), (0, 106, 136)]
    # B adds only "quality" (1 < 2): it does not join the support
    claim = "Refunds are accepted within 30 days of delivery, quality permitting."
    assert locate_support(claim, [(TEXT, "")]) == [(0, 9, 57)]
    assert locate_support("Shipping is free.", [(TEXT, "")]) == []


def test_a_table_row_claim_rests_on_its_row_and_its_header():
    unit = ContextUnit("S1", "help/timing.md", "v1", 120, 137, "PayPal | 3-5 days", "Timing", (), ("c1",), 1, 5,
                       header=(100, 113), header_text="Method | Time")
    assert locate_support("Method: PayPal; Time: 3-5 days", [(unit.text, unit.header_text)]) == [
        (0, 0, 13), (0, 14, 31)]
    assert support_spans("Method: PayPal; Time: 3-5 days", [unit]) == (
        Span("help/timing.md", "v1", 100, 113), Span("help/timing.md", "v1", 120, 137))


def test_the_verifier_records_each_claims_support_and_the_trace_carries_it(tmp_path):
    parsed = TEXT.split("\n\n- ")[0]    # the text file's parsed text: the heading and the paragraph
    write(tmp_path / "refund.txt", parsed + "\n")
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(write(tmp_path / "manifest.jsonl", json.dumps(
        {"doc_id": "policies/refund.txt", "path": "refund.txt", "version": "2026-03"}) + "\n"))
    assert store.texts("policies/refund.txt", "2026-03")[1] == parsed
    unit = ContextUnit("S1", "policies/refund.txt", "2026-03", 0, len(parsed), parsed, "Refunds", (), ("c1",), 1, 40)
    context = Context("ctx", (unit,), (), 1000, 40, "regex")
    answer = Answer("gen", f"{B} [S1]", (Claim(B, ("S1",)), Claim("Nothing cited.")), False)
    verification = ClaimVerifier(store).run(Query("q", "?", Principal("a", ("public",))), context, answer)
    store.close()
    assert [(c.verdict, c.support) for c in verification.checks] == [
        (Verdict.SUPPORTED, (Span("policies/refund.txt", "2026-03", 58, 105),)), (Verdict.UNSUPPORTED, ())]
    claims = json.loads(json.dumps(stage_to_dict(verification)))["claims"]
    assert [c["support"] for c in claims] == [
        [{"doc": "policies/refund.txt", "version": "2026-03", "start": 58, "end": 105}], []]
