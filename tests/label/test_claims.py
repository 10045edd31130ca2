"""How ``ragdx label`` splits a reference answer into claims (``split_claims``)."""

from __future__ import annotations

from ragdx.label import split_claims


def test_a_comma_clause_with_four_content_words_each_side_is_a_claim_of_its_own() -> None:
    # "ties go to the even choice": tie, go, even, choice (4); the rest: float, representation,
    # make, round, 2.675, 2, give, 2.67; "No:" has none, joins the first clause and is left out
    assert split_claims("No: ties go to the even choice, and float representation can make round(2.675, 2) "
                        "give 2.67.") == ["ties go to the even choice,",
                                          "and float representation can make round(2.675, 2) give 2.67."]


def test_a_reply_word_opening_a_claim_is_no_part_of_it() -> None:
    assert split_claims("No, sum over no rows returns NULL (use coalesce to get 0); only count returns 0.") == [
        "sum over no rows returns NULL (use coalesce to get 0);", "only count returns 0."]
    assert split_claims("Neither: schema changes are not replicated.") == ["schema changes are not replicated."]
    assert split_claims("No to both: schema changes are not replicated.") == ["schema changes are not replicated."]
    assert split_claims("Yes in both cases, the file is read again.") == ["the file is read again."]
    # a reply word without punctuation after it is a word of the claim; a reply alone is no claim
    assert split_claims("No restart is needed after editing the file.") == [
        "No restart is needed after editing the file."]
    assert split_claims("Yes.") == []


def test_a_reference_saying_the_sources_do_not_answer_abstains() -> None:
    from ragdx.label.propose import abstains
    for reference in ("The PostgreSQL manual does not cover pg_partman, a third-party extension.",
                      "The manual documents no setting named autovacuum_idle_timeout.",
                      "I don't know.", "This is not mentioned in the documentation.",
                      "The context does not say. It may be in the release notes.",
                      "There's no such setting in the PostgreSQL 17 manual.", "It is not a documented option."):
        assert abstains(reference), reference
    for reference in ("pg_dump does not block other users accessing the database.",
                      "Sequence data is not replicated.",
                      # a common noun is no source; an absence the reference states is an answer
                      "The returned text does not include the trailing newline.",
                      "os.wait() gives no information about resource usage.",
                      "There is no such thing as an unsigned int in PostgreSQL.",
                      # only the first sentence says whether the reference answers
                      "TRUNCATE does not fire ON DELETE triggers. The manual does not say more."):
        assert not abstains(reference), reference


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


def test_a_short_clause_is_read_in_the_sentence_it_came_from() -> None:
    from ragdx.label.propose import claim_sentences
    reference = ("No: after a crash or unclean shutdown an unlogged table is emptied automatically, and its data is "
                 "never sent to standbys.")
    claims = split_claims(reference)
    # the first clause has 7 content words (crash, unclean, shutdown, unlogged, table, emptied,
    # automatically), the second 4 (data, never, sent, standby): read in its sentence, without "No:"
    assert claims == ["after a crash or unclean shutdown an unlogged table is emptied automatically,",
                      "and its data is never sent to standbys."]
    assert claim_sentences(reference, claims, 6) == [claims[0], reference[4:]]
    assert claim_sentences(reference, claims, 8) == [reference[4:], reference[4:]]
    assert claim_sentences(reference, claims, 0) == claims  # nothing is read alone
    # a claim no sentence holds (a code block) is read as it is
    assert claim_sentences("Run this:\n\n    VACUUM FULL t;\n", ["VACUUM FULL t;"], 6) == ["VACUUM FULL t;"]


def test_a_claims_code_holds_its_runs_of_upper_case_keywords_and_its_calls_names() -> None:
    from ragdx.label.propose import _code
    # two upper-case words or more, one space apart; a single one ("SHARE") or a short run is none
    assert _code("CREATE INDEX CONCURRENTLY cannot run in a block; it takes an ACCESS  EXCLUSIVE lock, not SHARE.") \
        == {"CREATE INDEX CONCURRENTLY", "ACCESS EXCLUSIVE"}
    assert _code("Avoid NOT IN here.") == frozenset()  # "NOTIN": fewer than 6 characters
    # a call, and its name alone (a function table's row gives it its arguments)
    assert _code("Call pg_blocking_pids() with the PID.") == {"pg_blocking_pids()", "pg_blocking_pids"}


def test_a_statement_holds_the_claims_code_word_for_word() -> None:
    from ragdx.label.propose import _holds
    assert _holds("Use DROP TABLE to remove it.", "DROP TABLE")
    assert not _holds("DROP TABLESPACE removes a tablespace.", "DROP TABLE")
    assert not _holds("It takes a SHARE ROW EXCLUSIVE lock.", "ROW EXCLUSIVE")
    assert _holds("It takes a ROW EXCLUSIVE lock.", "ROW EXCLUSIVE")
    assert _holds("pg_blocking_pids ( integer ) \u2192 integer[] Returns ...", "pg_blocking_pids")
    assert not _holds("pg_safe_snapshot_blocking_pids ( integer ) \u2192 integer[]", "pg_blocking_pids")
    assert _holds("Call get_loop( ) then.", "get_loop()")  # a call, spaces aside


def test_a_clause_said_twice_is_read_in_its_own_sentence() -> None:
    from ragdx.label.propose import claim_sentences
    reference = ("No to both: on PostgreSQL 15 the default is off; it must be set in the file. "
                 "On PostgreSQL 16 the default is on; it must be set in the file.")
    claims = split_claims(reference)
    assert claims == ["on PostgreSQL 15 the default is off;", "it must be set in the file.",
                      "On PostgreSQL 16 the default is on;", "it must be set in the file."]
    first, second = "on PostgreSQL 15 the default is off; it must be set in the file.", \
        "On PostgreSQL 16 the default is on; it must be set in the file."
    assert claim_sentences(reference, claims, 6) == [first, first, second, second]
