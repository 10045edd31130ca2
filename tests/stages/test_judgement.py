"""The learned support judgement (issue 48): premises, feature rows, the shipped weights, the
checker's verdicts, and how the diagnosis checks an answer in people's own words with it."""

import json

import numpy as np
import pytest

from ragdx.diagnosis.locate import AnswerView, Diagnoser, ItemView, StageView, answer_claims
from ragdx.errors import ConfigError
from ragdx.stages.support import (
    FEATURES, Premise, SupportModel, SupportWeights, features, load_support_weights, premises,
)
from ragdx.stages.verify import LearnedChecker, LexicalChecker
from ragdx.text import is_reply, unreplied
from ragdx.types import StageKind, Verdict

A = "Refunds are accepted within 30 days of delivery."
B = "Quality defects may be refunded within 90 days."
C = "Use the returns form to start."
EVIDENCE = f"{A} {B}\n{C}"


def row(claim: str, premise: Premise, evidence: str = EVIDENCE) -> dict[str, float]:
    return dict(zip(FEATURES, features(claim, premise, evidence)))


def test_a_reply_word_is_no_claim():
    assert unreplied("No. Autovacuum can't see temporary tables.") == "Autovacuum can't see temporary tables."
    assert unreplied("Yes, it is.") == "Yes, it is."  # nothing would remain but stopwords
    assert is_reply("Yes.") and is_reply(" No to both: ") and not is_reply("No fee is charged.")
    # "Yes." is a sentence of its own, and no claim; "No." reads as an abbreviation, so its sentence
    # goes on (the checker sets the reply word aside: unreplied)
    assert answer_claims("Yes. Refunds take 30 days.\n\nYes.") == ["Refunds take 30 days."]
    assert answer_claims("No. Refunds take 30 days.") == ["No. Refunds take 30 days."]


def test_premises_are_the_best_statements_and_the_best_two_together():
    claim = "You can get a refund for quality defects up to 90 days after delivery."
    # stems wanted: refund, quality, defect, 90, days, delivery; B holds 5, A holds 3 (refund, days,
    # delivery), C none; A adds "delivery" to B: the pair is A then B, in the evidence's order
    assert premises(claim, EVIDENCE) == [Premise(B), Premise(A), Premise(C), Premise(f"{A} {B}", True, (A, B))]
    assert premises(claim, EVIDENCE, top=1) == [Premise(B), Premise(f"{A} {B}", True, (A, B))]
    # a claim B holds whole: no other statement adds a word, so no pair
    assert premises("Quality defects: refunded within 90 days.", EVIDENCE, top=1) == [Premise(B)]
    assert premises("anything", "   ") == []
    # a paragraph without its final stop (a unit cut from a text) is a statement; a heading is not
    assert premises("Refunds take 30 days.", "Refund policy\n\nRefunds are accepted within 30 days of delivery",
                    top=1) == [Premise("Refunds are accepted within 30 days of delivery")]
    # a quote of several statements rests on itself
    assert premises(f"{A} {B}", EVIDENCE) == [Premise(f"{A} {B}")]


def test_a_feature_row_by_hand():
    claim = "You can get a refund for quality defects up to 90 days after delivery."
    r = row(claim, Premise(B))
    assert r["cover"] == 5 / 6 and r["missing_numbers"] == 0 and r["missing_names"] == 0
    assert r["negation_flip"] == r["polarity_flips"] == r["antonym"] == r["widened"] == 0.0
    assert r["log_words"] == pytest.approx(np.log1p(14)) and r["pair"] == 0.0 and r["numbers_elsewhere"] == 0
    # against A: 30 is stated, 90 is not
    r = row(claim, Premise(A))
    assert r["cover"] == 3 / 6 and r["missing_numbers"] == 1


def test_the_corruptions_show_in_the_row():
    assert row("Refunds are accepted within 60 days of delivery.", Premise(A))["missing_numbers"] == 1
    assert row("Refunds are accepted within eight days.", Premise(A))["missing_numbers"] == 1  # a number word
    assert row("Refunds are accepted within 30 days.", Premise(A))["missing_numbers"] == 0
    # 90 is in the evidence (B), not in the premise A; 60 is nowhere
    r = row("Refunds are accepted within 90 days or 60 days.", Premise(A))
    assert r["missing_numbers"] == 2 and r["numbers_elsewhere"] == 1
    # "one", "once" and "single" in a claim are pronouns and adverbs more often than numbers
    assert row("Once delivered, each one may be refunded within 30 days.", Premise(A))["missing_numbers"] == 0
    flipped = row("Refunds are not accepted within 30 days of delivery.", Premise(A))
    assert flipped["negation_flip"] == 1.0 and flipped["polarity_flips"] == 1.0
    assert row("Refunds are accepted within 30 days before delivery.",
               Premise("Refunds are accepted within 30 days after delivery."), "x")["antonym"] == 1.0
    assert row("Refunds are always accepted.", Premise(A))["widened"] == 1.0
    assert row("Call os.path.join() first.", Premise("Call os.path.split() first."), "Call os.path.split() first.")[
        "missing_names"] == 2  # missing from the premise, and from the whole evidence


def test_a_clause_negated_against_its_premise_clause():
    # the clause "the command isn't attempted" aligns with "no attempt will be made to execute the
    # command" (stems command, attempt): both negate; "it can be switched back" aligns with "it
    # cannot be switched back" (switch, back) and differs
    premise = Premise("If a trigger fails, no attempt will be made to execute the command itself.")
    assert row("Once a trigger fails, the command itself isn't attempted.", premise, premise.text)["polarity_flips"] == 0
    assert row("Once a trigger fails, the command itself is attempted.", premise, premise.text)["polarity_flips"] == 1
    switch = Premise("Once in non-blocking mode, the device cannot be switched back to blocking.")
    assert row("The device can be switched back to blocking.", switch, switch.text)["polarity_flips"] == 1
    # a whole premise's negation elsewhere ("not recommended") is no flip of a clause that does not align
    pw = Premise("Use of PGPASSWORD is not recommended; instead use a password file.")
    r = row("A password file is the suggested alternative.", pw, pw.text)
    assert r["polarity_flips"] == 0 and r["negation_flip"] == 1.0


def test_a_table_cell_ends_a_clause():
    # a row cut from its table (a splitter's word window) reads as one run of text: the fee
    # cell's "none" negates nothing of the cell before it
    rows = Premise("Payment method | Refund processing time | Fee PayPal | 3-5 business days | none Klarna | 1-2 days")
    assert row("PayPal refunds take 3-5 business days.", rows, rows.text)["polarity_flips"] == 0


def test_a_scope_widened_and_one_traded_for_its_like():
    some = Premise("On some systems, reading the clock slows queries down.")
    assert row("On every system, reading the clock slows queries down.", some, some.text)["widened"] == 1.0
    every = Premise("RELEASE SAVEPOINT also destroys all savepoints established after it.")
    assert row("Releasing a savepoint also destroys every savepoint established after it.", every,
               every.text)["widened"] == 0.0  # "every" for "all"
    # a negated clause's "any" states no scope: "doesn't guarantee any ordering"
    assert row("PostgreSQL doesn't guarantee any ordering.", Premise("The order is unspecified."), "x")["widened"] == 0.0


def test_a_hyphenated_word_or_an_abbreviation_is_no_name():
    siglen = Premise("The default length of siglen is 12 bytes on a value that is not NULL.")
    r = row("A 12-byte signature on a non-NULL value, e.g. siglen.", siglen, siglen.text)
    assert r["missing_names"] == 0  # not "-byte", "-null" nor "e.g"; NULL is a name the premise holds
    llvm = Premise("Build with --with-llvm.")
    assert row("Pass --with-llvm to configure.", llvm, llvm.text)["missing_names"] == 0
    assert row("Pass --with-perl to configure.", llvm, llvm.text)["missing_names"] == 2  # an option is a name


def weights(threshold: float = 0.5) -> SupportWeights:
    """Hand-set weights: the log-odds are 8 * (cover - 0.75) - 10 * missing_numbers - 10 * negation_flip."""
    coef = {"cover": 8.0, "missing_numbers": -10.0, "negation_flip": -10.0}
    n = len(FEATURES)
    return SupportWeights(FEATURES, (0.0,) * n, (1.0,) * n, tuple(coef.get(f, 0.0) for f in FEATURES), -6.0,
                          threshold, 0.3)


def test_the_checker_reads_a_paraphrase_and_catches_a_number_and_a_negation():
    checker = LearnedChecker(SupportModel(weights()))
    # cover 1 (B plus A's "delivery" in the pair): log-odds 8 * 0.25 = 2 -> p = 0.881
    verdict, reason = checker.judge("No. Quality defects get refunded up to 90 days after delivery.", EVIDENCE)
    assert verdict is Verdict.SUPPORTED and reason == "support 0.88 (two statements together)"
    verdict, reason = checker.judge("Quality defects get refunded up to 60 days after delivery.", EVIDENCE)
    assert verdict is Verdict.UNSUPPORTED and "a number the closest statement does not state" in reason
    verdict, _ = checker.judge("Quality defects are not refunded within 90 days.", EVIDENCE)
    assert verdict is Verdict.UNSUPPORTED
    assert checker.judge("Yes.", EVIDENCE)[0] is Verdict.UNCERTAIN


def test_the_shipped_weights_weigh_each_corruption_against_a_claim():
    shipped = load_support_weights()
    assert shipped.features == FEATURES and 0.0 < shipped.uncertain <= shipped.threshold < 1.0
    coef = dict(zip(shipped.features, shipped.coef))
    # more of the claim's words in its closest statement raises the probability; a number the
    # evidence does not state, a changed negation, an opposite word and a wider scope lower it
    assert coef["cover"] > 0
    assert max(coef["numbers_elsewhere"], coef["polarity_flips"], coef["antonym"], coef["widened"]) < 0
    checker = LearnedChecker()
    assert checker.judge(A, EVIDENCE)[0] is Verdict.SUPPORTED  # a quote
    assert checker.judge("Refunds are accepted within 45 days of delivery.", EVIDENCE)[0] is not Verdict.SUPPORTED
    assert checker.judge("Refunds are not accepted within 30 days of delivery.", EVIDENCE)[0] is not Verdict.SUPPORTED


def test_bad_weights_name_the_file(tmp_path):
    bad = tmp_path / "support.json"
    bad.write_text(json.dumps({"judgement": {"features": ["nope"], "mean": [0], "scale": [1], "coef": [1],
                                             "intercept": 0, "threshold": 0.5, "uncertain": 0.3}}))
    with pytest.raises(ConfigError, match="support.json.*unknown features"):
        load_support_weights(bad)
    bad.write_text(json.dumps({"judgement": {"features": ["cover"], "mean": [0], "scale": [1], "coef": [1],
                                             "intercept": 0, "threshold": 0.2, "uncertain": 0.3}}))
    with pytest.raises(ConfigError, match="uncertain 0.3 and threshold 0.2"):
        load_support_weights(bad)


def context(*texts: str) -> StageView:
    return StageView("contexts", StageKind.CONTEXT, tuple(ItemView(f"c{n}", text=t) for n, t in enumerate(texts)))


def test_a_claim_two_units_support_together_is_supported_and_cites_both():
    # B alone holds 5 of the claim's 6 stems: p = 1 / (1 + e^-(8 * (5/6 - 0.75))) = 0.66 < 0.8
    checker = LearnedChecker(SupportModel(weights(threshold=0.8)))
    answer = AnswerView("Yes. Quality defects get refunded up to 90 days after delivery.", False, ())
    checked, notes = Diagnoser(checker).check_answer(answer, context(A, B, C))
    (claim,) = checked.claims
    assert claim.supported is True and claim.citations == ("c0", "c1")
    assert claim.reason == "supported by c0, c1: support 0.88 (two statements together)"
    assert notes == ["the answer carried no verdicts: ragdx checked 1 claim itself with its learned checker "
                     "against the context (1 supported)"]
    # the lexical checker never reads two units as one support
    checked, _ = Diagnoser(LexicalChecker()).check_answer(answer, context(A, B, C))
    assert checked.claims[0].supported is False


def test_the_default_checker_is_the_learned_one():
    from ragdx.build import support_checker
    from ragdx.config import load_settings
    assert support_checker(load_settings(None, [])).name == "learned"
    assert support_checker(load_settings(None, ["verify.method=lexical"])).name == "lexical"
