"""How ``ragdx label`` splits a reference answer into claims (``split_claims``)."""

from __future__ import annotations

from ragdx.label import split_claims


def test_a_comma_clause_with_four_content_words_each_side_is_a_claim_of_its_own() -> None:
    # "ties go to the even choice": tie, go, even, choice (4); the rest: float, representation,
    # make, round, 2.675, 2, give, 2.67; "No:" has none and joins the first clause
    assert split_claims("No: ties go to the even choice, and float representation can make round(2.675, 2) "
                        "give 2.67.") == ["No: ties go to the even choice,",
                                          "and float representation can make round(2.675, 2) give 2.67."]


def test_a_comma_clause_with_fewer_content_words_stays_with_its_sentence() -> None:
    # "The default is DEFERRED": default, deferred (2 content words)
    reference = "The default is DEFERRED, which in SQLite means the transaction starts only when the database is " \
                "first accessed."
    assert split_claims(reference) == [reference]
    # a comma before a word other than and / but / which / while / so is no clause boundary
    assert split_claims("Widgets time out after thirty seconds, then gadgets retry the request twice.") == [
        "Widgets time out after thirty seconds, then gadgets retry the request twice."]


def test_a_number_glued_to_its_unit_is_the_number_and_the_unit() -> None:
    from ragdx.label.propose import _stems
    # "4MB" meets "4 MB"; a version number and a word with digits inside stay whole
    assert _stems("about 4MB in size") == {"4", "mb", "size"}
    assert _stems("sqlite3 3.11 and 2.5x") == {"sqlite3", "3.11", "2.5", "x"}


def test_a_numbers_thousands_separators_are_no_word_boundary() -> None:
    from ragdx.label.propose import _stems
    # "1,000,000 bytes" is not the first words of "1,000,000,000 bytes": one number each
    assert _stems("1,000,000 bytes.") == {"1000000", "byte"}
    assert _stems("a string or BLOB of 1,000,000,000 bytes") == {"string", "blob", "1000000000", "byte"}
    # a comma before a space, or before fewer or more than three digits, still parts two numbers
    assert _stems("round(2.675, 2) of (1,2) and 12,3456") == {"round", "2.675", "2", "1", "12", "3456"}
