"""Text helpers: the stemmer's spelling folds, amounts asked and stated, statements, question parts."""

import pytest

from ragdx.text import (asked_quantity, asking, asks_default, content_terms, names_another, numbered_ids, row_cells,
                        split_question, statement_spans, states_default, statements, states_quantity, stem)


@pytest.mark.parametrize("british, american", [("behaviour", "behavior"), ("colours", "colors"),
                                               ("initialise", "initialize"), ("serialised", "serialized"),
                                               ("neighbours", "neighbors"), ("normalising", "normalizing")])
def test_british_spellings_meet_american_ones(british, american):
    assert stem(british) == stem(american)


@pytest.mark.parametrize("word, stemmed", [("hour", "hour"), ("four", "four"), ("your", "your"),
                                           ("flour", "flour"), ("raise", "rais")])
def test_words_that_only_look_british_are_left_alone(word, stemmed):
    assert stem(word) == stemmed


@pytest.mark.parametrize("question, unit", [("How many bytes does it use?", "byte"),
                                            ("How many times does it retry?", "time"),
                                            ("How many people use it?", ""),
                                            ("What latency does it add, in milliseconds?", "millisecond"),
                                            ("How long does it wait?", ""),
                                            ("Why is it slow?", None)])
def test_the_amount_a_question_asks_for(question, unit):
    assert asked_quantity(question) == unit


def test_number_words_state_an_amount():
    assert states_quantity("There are probably millions of users.", "")
    assert states_quantity("It retries twice.", "")
    assert not states_quantity("There are many users.", "")
    assert not states_quantity("It uses 16 kilobytes.", "byte")


@pytest.mark.parametrize("text, states", [
    ("It returns a 16-byte string.", True),
    ("SQLite will easily do 50,000 or more INSERT statements per second.", True),
    ("The limit is 2.5 seconds.", True),
    ("(up to 64)", True),
    ("It ends at 99.", True),
    ("It costs 3.5%.", True),
    ("It waits 30ms.", True),                         # a unit written on the number
    ("The cache is 2MB, or 512KiB.", True),
    ("It is 1.5x faster.", True),
    ("It takes 5-10 seconds.", True),                 # a range
    ("A value of -1 disables the limit.", True),      # a negative number
    ("It reads 1e6 rows.", True),
    ("on a 64-bit machine", True),
    ("Use the sqlite3 module.", False),              # a digit inside a name
    ("See bpo-32269 and gh-91827.", False),          # issue numbers
    ("Encode the text as utf-8.", False),
    ("On x86_64 machines only.", False),
    ("Pass it as the 3rd argument.", False),         # an ordinal
    ("Beginning with version 3.6.18, triggers were supported.", False),   # versions
    ("It was added in Python 3.11.", False),
    ("It speaks HTTP/1.1 only.", False),
    ("Released on 2009-09-11.", False),              # an ISO date
])
def test_a_number_in_a_name_a_version_or_a_date_is_no_amount(text, states):
    assert states_quantity(text, "") is states


def test_a_signature_with_defaults_is_a_statement_and_a_heading_is_not():
    text = "Introduction\n\ndatetime.isoformat(sep='T', timespec='auto')\n\nReturn a string."
    assert statements(text) == ["datetime.isoformat(sep='T', timespec='auto')", "Return a string."]


def test_filler_words_of_a_question_are_not_content():
    assert content_terms("My program is too slow. Why am I getting an error?") == [
        "program", "slow", "getting", "error"]


@pytest.mark.parametrize("question, asks", [
    ("What is work_mem set to out of the box?", True),
    ("How long does the launcher wait between runs by default?", True),
    ("What is the default value of vacuum_cost_limit?", True),
    ("How many workers run unless I set max_workers?", True),
    ("What does work_mem limit?", False),
    ("Why does the defaulted column stay empty?", False),
])
def test_a_question_asking_for_a_default(question, asks):
    assert asks_default(question) is asks


@pytest.mark.parametrize("text, states", [
    ("The default is one minute (1min).", True),
    ("The default value is four megabytes (4MB).", True),
    ("-1 (the default) disables logging statement durations.", True),
    ("Do not change the values of sequences. This is the default.", True),
    ("The timeout defaults to 5.0 seconds.", True),
    ("Autovacuum is enabled by default.", True),
    ("Default: 5", True),
    ("In the default configuration, autovacuuming is enabled.", False),
    ("Defaults are listed in the table below it.", False),
])
def test_a_statement_of_a_default(text, states):
    assert states_default(text) is states


@pytest.mark.parametrize("text, ids", [
    ("Error RFD-4021 or RFD-4090", {"rfd-": {"rfd-4021", "rfd-4090"}}),
    ("order NW-1024, bpo-46845 and SHA256", {"nw-": {"nw-1024"}, "bpo-": {"bpo-46845"}, "sha": {"sha256"}}),
    # a version, a range, a variable, a decimal and a word with a digit inside are no numbered identifiers
    ("Python 3.11, 3-5 days, x1, v2.5, utf8mb4", {}),
])
def test_numbered_identifiers_by_family(text, ids):
    assert numbered_ids(text) == {k: frozenset(v) for k, v in ids.items()}


def test_a_statement_naming_only_another_member_of_the_family_asked_about():
    asked = numbered_ids("I got error RFD-5003. What should I do?")
    assert names_another("Error RFD-4021 means that the refund window has expired.", asked)
    assert not names_another("Error RFD-5003 means that the provider timed out.", asked)
    assert not names_another("RFD-5003 is retried, unlike RFD-4021.", asked)  # it names the one asked too
    assert not names_another("Order NW-1042 was paid by card.", asked)        # another family
    assert not names_another("Error RFD-4021 means ...", {})                  # the question names none


def test_a_table_rows_cells_read_back_as_statement_spans_wrote_them():
    [row] = [s.text for s in statement_spans("Payment method | Fee\nPayPal | none")]
    assert row == "Payment method: PayPal; Fee: none"
    assert row_cells(row) == (("Payment method", "PayPal"), ("Fee", "none"))
    # prose with a colon, or one cell, is no row
    assert row_cells("Note: the fee is none; see the table.") == ()
    assert row_cells("Fee: none") == ()


@pytest.mark.parametrize("question, asked", [
    # the situation told, then the question
    ("I'm range-partitioning events by created_at and want PRIMARY KEY (id), but CREATE TABLE rejects it. Why?",
     "Why?"),
    # a sentence opening in lower case, as people type
    ("the query column in pg_stat_activity cuts our long ORM queries off halfway. any way to see the full text?",
     "any way to see the full text?"),
    # a question written with a full stop still asks, by its clause's question word
    ("If I set repo1-retention-full=2 in pgBackRest, how many full backups does it keep. Does it expire WAL?",
     "If I set repo1-retention-full=2 in pgBackRest, how many full backups does it keep. Does it expire WAL?"),
    # an elision ends no sentence; SQL's WHERE in capitals asks nothing
    ("My SELECT sum(amount) ... WHERE matches nothing. Do I get 0 back?", "Do I get 0 back?"),
    # nothing asks: the whole question
    ("Tell me about the GIL.", "Tell me about the GIL."),
])
def test_the_sentences_of_a_question_that_ask(question, asked):
    assert asking(question) == asked


@pytest.mark.parametrize("question, parts", [
    # a pronoun opening a part stands for the subject of the part before
    ("What is work_mem set to out of the box, and is that a cap for the whole query?",
     ("What is work_mem set to out of the box?", "Is work_mem a cap for the whole query?")),
    ("Where does ALTER SYSTEM SET save the new value, and is it in effect when the command returns?",
     ("Where does ALTER SYSTEM SET save the new value?", "Is ALTER SYSTEM SET in effect when the command returns?")),
    # "What about X?" asks the part before of X, in place of the subject X shares a word with
    ("Does VACUUM block my application's reads and writes? What about VACUUM FULL?",
     ("Does VACUUM block my application's reads and writes?",
      "Does VACUUM FULL block my application's reads and writes?")),
    # ... or, sharing none, after the part before
    ("Why does SELECT 7 / 2 give me 3 instead of 3.5? What about -7 / 2?",
     ("Why does SELECT 7 / 2 give me 3 instead of 3.5?",
      "Why does SELECT 7 / 2 give me 3 instead of 3.5? What about -7 / 2?")),
    # a function written with its arguments is a subject too (the API name before its parenthesis)
    ("I wrote int4range(1, 10) and Postgres shows it back as [1,11). Did it change my range?",
     ("I wrote int4range(1, 10) and Postgres shows it back as [1,11).", "Did int4range change my range?")),
    # no subject before (no code name, no capitalised SQL): the part is left as asked
    ("Can my app users still see rows? What about our admin superuser?",
     ("Can my app users still see rows?", "What about our admin superuser?")),
    # "it's" is no pronoun opening a question
    ("What does work_mem limit, and is it's value per query?",
     ("What does work_mem limit?", "Is it's value per query?")),
])
def test_a_part_of_a_compound_question_stands_alone(question, parts):
    assert split_question(question) == parts
