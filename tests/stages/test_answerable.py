"""Answerability by distinctive names: a question naming what nothing the asker may read mentions
is abstained on, naming it; a name only a restricted document holds counts as absent."""

from ragdx.stages.answerable import Answerability, NameCoverage, distinctive_names, is_version, without_names
from ragdx.stages.generate import ExtractiveGenerator
from ragdx.types import Context, ContextUnit, Principal, Query


def one_unit(text: str, doc: str, heading: str) -> Context:
    """A context of one unit holding ``text`` (its words as its tokens)."""
    words = len(text.split())
    return Context("context", (ContextUnit("S1", doc, "v", 0, len(text), text, heading, (), ("c1",), 1, words),),
                   (), 1200, words, "words")


def test_the_shapes_of_a_name():
    assert distinctive_names("How many bytes does uuid.uuid4() read from os.urandom()?") == ("uuid.uuid4", "os.urandom")
    assert distinctive_names("What is the default thread switch interval of PyPy?") == ("PyPy",)
    assert distinctive_names("How do I write a stored procedure in SQLite's PL/SQL dialect?") == ("SQLite", "PL/SQL")
    assert distinctive_names("In SQLite 3.34.1, is the conflict target of an UPSERT required?") == \
        ("SQLite", "3.34.1", "UPSERT")
    assert distinctive_names("What does --strict do to the cached_statements of \"my table\"?") == \
        ("--strict", "cached_statements", "my table")
    # a capitalised word opening the question, a stop capital and an abbreviation are no names
    assert distinctive_names("Which Tcl version, e.g. the newest, does Windows bundle?") == ("Tcl", "Windows")
    assert distinctive_names("Is there an equivalent of C\u2019s \u201c?:\u201d ternary operator?") == ()
    assert is_version("3.9") and not is_version("3") and not is_version("os.path")
    # the asker's own columns and values passed to a call are no names; the call's own name is
    assert distinctive_names("What does position('x' in some_string) give when it is missing?") == ()
    assert distinctive_names("What chunk_time_interval goes to create_hypertable(my_table, Sensor_Time)?") == \
        ("chunk_time_interval", "create_hypertable")
    # a numbered identifier is one name, its letters and number together (a CVE's two numbers are none)
    assert distinctive_names("What does error RFD-9999 mean for order NW-1024 over IPv6 in utf-8?") == \
        ("RFD-9999", "NW-1024", "IPv6", "utf-8")


def test_names_of_the_askers_situation_are_theirs(small):
    store, _, _ = small
    names = NameCoverage(store)
    # refund_log is named by the sentence telling the asker's situation, not by the one that asks
    assert names.absent("We keep every refund in refund_log. Within how many days are refunds accepted?",
                        ("public",)) == ()
    assert names.absent("Within how many days does refund_log accept refunds?", ("public",)) == ("refund_log",)
    # a value or a function passed to a call is the asker's own, wherever the question names it again
    question = ("In COALESCE(cached_value, expensive_function()), does expensive_function() run when "
                "cached_value is set?")
    assert distinctive_names(question) == ("COALESCE",)
    assert distinctive_names("Does expensive_function() run?") == ("expensive_function",)


def test_the_askers_literals_amounts_and_compared_columns_are_theirs(small):
    store, _, _ = small
    names = NameCoverage(store)
    groups = ("public",)
    # a column their SQL compares, a single-quoted literal, an amount with its unit: none is looked up
    assert names.absent("Is a refund WHERE created_at > 5 accepted within 30 days?", groups) == ()
    assert names.absent("Is a refund dated '2024-05-01 Europe/Paris' accepted within 30 days?", groups) == ()
    assert names.absent("Are refunds above 48GB on a 64GB server accepted within 30 days?", groups) == ()
    # the same names asked about are looked up
    assert names.absent("Is created_at accepted within 30 days?", groups) == ("created_at",)
    assert names.absent("Are refunds from Europe/Paris accepted within 30 days?", groups) == ("Europe/Paris",)
    assert names.absent("Are refunds for vec0 accepted within 30 days?", groups) == ("vec0",)


def test_a_question_whose_situation_the_sources_do_not_hold_is_answered_by_what_it_asks():
    text = "Refunds are accepted within 30 days of delivery."
    ctx = one_unit(text, "refund.md", "Refund policy")
    told = "Our migration tool wraps every script in one big batch."
    query = Query("q", f"{told} Within how many days are refunds accepted?", Principal("u", ("public",)))
    # the whole question's words: the sentence holds 3 of 10 (0.3); the asking sentence's, 3 of 3
    answer = ExtractiveGenerator(min_coverage=0.5).run(query, ctx)
    assert not answer.abstained and [c.text for c in answer.claims] == [text]
    # a question asked in one sentence is judged by all of it
    alone = Query("q", "Within how many days does our migration tool accept wrapped scripts?",
                  Principal("u", ("public",)))
    assert ExtractiveGenerator(min_coverage=0.5).run(alone, ctx).abstained


def test_covered_reads_only_what_the_groups_may_read(small):
    store, _, _ = small
    names = NameCoverage(store)
    # OVERRIDE-77 is in the staff-only runbook; RFD-4021 in a public page
    assert names.uncovered(("RFD-4021", "OVERRIDE-77", "PayPal"), ("public",)) == ("OVERRIDE-77", "PayPal")
    assert names.uncovered(("RFD-4021", "OVERRIDE-77", "PayPal"), ("public", "staff")) == ("PayPal",)


def test_a_name_nothing_mentions_is_abstained_on_by_name(small):
    store, _, _ = small
    text = "Refunds are accepted within 30 days of delivery."
    ctx = one_unit(text, "refund.md", "Refund policy")
    query = Query("q", "Within how many days does PayPal accept refunds after delivery?", Principal("u", ("public",)))
    without = ExtractiveGenerator(min_coverage=0.3).run(query, ctx)
    assert not without.abstained and [c.text for c in without.claims] == [text]
    answer = ExtractiveGenerator(min_coverage=0.3, store=store).run(query, ctx)
    assert answer.abstained and answer.missing == ("PayPal",)
    assert answer.text == "I cannot answer this from the sources: no source the asker may read mentions PayPal."
    named = Query("q", "Within how many days does Refund policy accept refunds after delivery?",
                  Principal("u", ("public",)))
    assert not ExtractiveGenerator(min_coverage=0.3, store=store).run(named, ctx).abstained


def test_an_older_version_that_does_not_say_it_is_named(tmp_path):
    import json

    from ragdx.build import build_ingestor
    from ragdx.config import load_settings
    from ragdx.store.sqlite import SQLiteStore
    from tests.conftest import write

    new = "# Cache\n\nThe default cache holds 128 statements per connection."
    old = "# Cache\n\nThe default cache holds 100 statements per connection."
    write(tmp_path / "new.md", new)
    write(tmp_path / "old.md", old)
    write(tmp_path / "staff.md", old)
    rows = [{"doc_id": "cache", "path": "old.md", "version": "1", "status": "superseded", "acl": ["public"]},
            {"doc_id": "cache", "path": "staff.md", "version": "1.5", "status": "superseded", "acl": ["staff"]},
            {"doc_id": "cache", "path": "new.md", "version": "2", "acl": ["public"]}]
    manifest = write(tmp_path / "manifest.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    store = SQLiteStore(tmp_path / "store.db")
    build_ingestor(store, load_settings(overrides=["chunking.tokenizer=regex", "retrieval.dense.enabled=false"]),
                   None).run(manifest)
    sentence = "The default cache holds 128 statements per connection."
    current = ContextUnit("S1", "cache", "2", 0, len(sentence), sentence, "Cache", ("Cache",), ("c1",), 1, 8)
    ctx = Context("context", (current,), (), 1200, 8, "words")
    gen = ExtractiveGenerator(min_coverage=0.3, store=store)
    answer = gen.run(Query("q", "How many statements does the default cache hold?", Principal("u", ("public",))), ctx)
    # version 1 (public) says 100; version 1.5 says so too, but the asker may not read it
    assert answer.text == f"{sentence} [S1] (Version 1 of this page does not say this.)"
    same = gen.run(Query("q", "How many statements does the default cache hold?", Principal("u", ("staff",))),
                   ctx)
    assert same.text == f"{sentence} [S1] (Version 1.5 of this page does not say this.)"
    # a version number is covered by a document version's label, though no text holds it
    assert NameCoverage(store).uncovered(("1.5", "7.1"), ("public",)) == ("7.1",)
    store.close()


def test_the_settings_build_the_reader_and_the_name_check(small):
    from ragdx.build import build_pipeline
    from ragdx.config import with_overrides
    from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER

    store, encoder, settings = small
    plain = build_pipeline(store, with_overrides(settings, ["generation.reader=none"]), encoder=encoder).generator
    assert plain.reader is None and plain.reader_weight == 0.0 and plain.names is not None
    read = build_pipeline(store, with_overrides(settings, ["generation.reader=cross-encoder", "generation.reader_depth=12",
                                                           "generation.check_names=false"]), encoder=encoder).generator
    assert (read.reader.model, read.reader.max_tokens, read.reader_weight, read.reader_depth) == \
        (DEFAULT_CROSS_ENCODER, 128, 0.5, 12)
    assert read.names is None


class Vocabulary:
    """A general vocabulary's tokenizer: a word it holds is one piece, any other word three."""

    name = "test-vocabulary"

    def __init__(self, words):
        self.words = set(words)

    def count(self, text):
        return sum(1 if w in self.words else 3 for w in text.split())


def test_an_uncommon_word_no_source_holds_is_a_name(small):
    store, _, _ = small
    question = "Are refunds via pydantic accepted for parcels sent abroad?"
    # refunds, accepted, parcels: in the corpus; via, sent, abroad: common words the corpus lacks;
    # pydantic: neither in the corpus nor whole in the vocabulary
    common = {"via", "sent", "abroad"}
    assert NameCoverage(store, Vocabulary(common)).absent(question, ("public",)) == ("pydantic",)
    assert NameCoverage(store, Vocabulary(common | {"pydantic"})).absent(question, ("public",)) == ()
    # without a vocabulary only a word with a digit can be a name; a number is an amount
    assert NameCoverage(store).absent("Are refunds accepted 45 days after delivery via zx81?", ("public",)) == ("zx81",)


def test_a_tool_no_source_mentions_is_abstained_on_by_name_and_a_present_one_answers(small):
    store, _, _ = small
    text = "Refunds are accepted within 30 days of delivery."
    ctx = one_unit(text, "refund.md", "Refund policy")
    gen = ExtractiveGenerator(min_coverage=0.3, store=store)
    answer = gen.run(Query("q", "Within how many days are refunds accepted after delivery through zx81?",
                           Principal("u", ("public",))), ctx)
    assert answer.abstained and answer.missing == ("zx81",)
    assert answer.text == "I cannot answer this from the sources: no source the asker may read mentions zx81."
    # RFD-4021 and the words are all in the corpus: answered
    present = gen.run(Query("q", "Within how many days are refunds accepted after delivery, unless RFD-4021?",
                            Principal("u", ("public",))), ctx)
    assert not present.abstained and [c.text for c in present.claims] == [text]


def test_joined_names_are_held_as_written_quoted_terms_and_files_by_their_parts(small):
    store, _, _ = small
    names = NameCoverage(store)
    # "payment provider" is prose in errors.md; payment_provider is held nowhere as written
    assert names.absent("What does payment_provider return?", ("public",)) == ("payment_provider",)
    # a quoted phrase no page holds, whose words are all held; a file named by its module's stem
    assert names.absent('When does "the delivery window" close?', ("public",)) == ()
    assert names.absent("Where is the refund.md file?", ("public",)) == ()
    assert names.absent("Where is the warranty.md file?", ("public",)) == ("warranty.md",)


def test_a_numbered_identifier_nothing_mentions_is_abstained_on_by_name(small):
    store, _, _ = small
    text = "Error RFD-4021 means that the refund window for this order has expired."
    ctx = one_unit(text, "errors.md", "Refund errors")
    gen = ExtractiveGenerator(min_coverage=0.1, store=store)
    # the letters alone (RFD) are in a public page; RFD-9999 is in none
    unknown = gen.run(Query("q", "What does error RFD-9999 mean?", Principal("u", ("public",))), ctx)
    assert unknown.abstained and unknown.missing == ("RFD-9999",)
    known = gen.run(Query("q", "What does error RFD-4021 mean?", Principal("u", ("public",))), ctx)
    assert not known.abstained and [c.text for c in known.claims] == [text]


PRICE_MATCH = "Does Northwind Outfitters match a lower price I find at another shop?"


def test_statements_sharing_only_the_names_answer_nothing_asked_of_them():
    asked = ("match", "lower", "price", "find", "another", "shop")
    names_only = Answerability.asked_of_names(PRICE_MATCH, [(frozenset({"northwind", "outfitter"}), 0.5)], 0.7)
    assert not names_only.answer and names_only.missing == asked
    assert names_only.why == ("the sources found mention Northwind, Outfitters but do not cover: "
                              "match, lower, price, find, another, shop")
    # a statement that states a word asked ("price", stemmed), or one close in meaning, answers
    assert Answerability.asked_of_names(PRICE_MATCH, [(frozenset({"northwind"}), 0.5),
                                                      (frozenset({"pric"}), 0.1)], 0.7).answer
    assert Answerability.asked_of_names(PRICE_MATCH, [(frozenset({"northwind"}), 0.71)], 0.7).answer
    assert not Answerability.asked_of_names(PRICE_MATCH, [(frozenset({"northwind"}), 0.69)], 0.7).answer
    # a question mostly of names: what it asks is in them ("write" is 1 of its 4 words)
    assert Answerability.asked_of_names("In SQLite 3.40, can I write IS DISTINCT FROM?",
                                        [(frozenset({"sqlit", "distinct"}), 0.2)], 0.7).answer
    # quoted terms are the asker's phrase, not names: nothing here is named
    assert Answerability.asked_of_names("How do I tell \u201cincomplete input\u201d from \u201cinvalid input\u201d?",
                                        [(frozenset(), 0.0)], 0.7).answer


def test_the_generator_abstains_on_statements_sharing_only_the_names():
    text = "All Northwind Outfitters products come with a 2-year warranty from the date of delivery."
    ctx = one_unit(text, "warranty.md", "Warranty")
    query = Query("q", PRICE_MATCH, Principal("u", ("public",)))
    # no encoder: the statement's cosine is 0; its words are 2 of the question's 8 (0.25)
    answer = ExtractiveGenerator(min_coverage=0.2).run(query, ctx)
    assert answer.abstained and answer.missing == ("match", "lower", "price", "find", "another", "shop")
    assert answer.text.startswith("I cannot answer this from the sources: the sources found mention Northwind")
    off = ExtractiveGenerator(min_coverage=0.2, name_only_cosine=0.0).run(query, ctx)
    assert not off.abstained and [c.text for c in off.claims] == [text]


def acme_store(tmp_path):
    """Four documents: "Acme" in two (one of them holds it in two chunks, and once in the heading
    only), "Zurich" in one, the store's other versions and access aside."""
    import json

    from ragdx.build import build_ingestor
    from ragdx.config import load_settings
    from ragdx.store.sqlite import SQLiteStore
    from tests.conftest import write

    docs = {"shipping.md": "# Shipping\n\nWe ship to all countries of the Union, Zurich included.",
            "refund.md": "# Acme refunds\n\nAt Acme we want you to be happy.\n\n## Window\n\n"
                         "Acme refunds within 30 days.",
            "warranty.md": "# Warranty\n\nAll Acme products carry a 2-year warranty.",
            "api.md": "# API\n\nCall round() to round a refund amount."}
    rows = []
    for name, text in docs.items():
        write(tmp_path / name, text)
        rows.append({"doc_id": name, "path": name, "acl": ["staff" if name == "warranty.md" else "public"]})
    manifest = write(tmp_path / "manifest.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    store = SQLiteStore(tmp_path / "store.db")
    build_ingestor(store, load_settings(overrides=["chunking.tokenizer=regex", "chunking.max_tokens=16",
                                                   "retrieval.dense.enabled=false"]), None).run(manifest)
    return store


def test_document_frequency_counts_documents_not_chunks(tmp_path):
    store = acme_store(tmp_path)
    assert len([c for c in store.chunks("refund.md") if "Acme" in c.text]) >= 2  # counted once all the same
    # over every document, whoever may read it (warranty.md is staff-only), as BM25's statistics
    # are; a phrase (several tokens) and an absent word count 0; "acme" is "Acme" folded
    assert store.document_frequency(["Acme", "Zurich", "acme", "Acme refunds", "Zug"]) == \
        (4, {"Acme": 2, "Zurich": 1, "acme": 2, "Acme refunds": 0, "Zug": 0})
    store.close()


def test_background_names_are_word_shaped_names_most_documents_hold(tmp_path):
    store = acme_store(tmp_path)
    names = NameCoverage(store)
    question = "Does Acme ship to Zurich, and does round() round the amount?"
    # Acme in 2 of 4 documents (0.5), Zurich in 1 (0.25); round() is a code name, never background
    assert names.background(question, 0.5) == ("Acme",)
    assert names.background(question, 0.25) == ("Acme", "Zurich")
    assert names.background(question, 0.51) == ()
    assert names.background(question, 0.0) == ()
    assert without_names(question, ("Acme",)) == "Does ship to Zurich, and does round() round the amount?"
    store.close()


class EntityLeaning:
    """A cross-encoder that leans on a company's name as ms-marco-MiniLM-L-12-v2 does: for a
    question naming Acme, a sentence naming it scores 2 and each other question word a sentence
    holds 0.5; for a question without the name, each word 1.5."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @property
    def config(self) -> dict:
        return {"model": "entity-leaning"}

    def score(self, query: str, texts):
        import numpy as np

        from ragdx.text import content_terms
        self.asked.append(query)
        named = "acme" in query.lower()
        words = set(content_terms(query)) - {"acme"}
        return np.array([(2.0 if named and "acme" in t.lower() else 0.0)
                         + (0.5 if named else 1.5) * len(words & set(content_terms(t))) for t in texts])


SHIP = "We ship to all countries of the Union, Zurich included."
HAPPY = "At Acme we want you to be happy."


def acme_context() -> Context:
    happy = ContextUnit("S1", "refund.md", "v", 0, len(HAPPY), HAPPY, "Acme refunds", (), ("c1",), 1, 8)
    ship = ContextUnit("S2", "shipping.md", "v", 0, len(SHIP), SHIP, "Shipping", (), ("c2",), 2, 10)
    return Context("context", (happy, ship),
                   (), 1200, 18, "words")


def test_the_reader_also_reads_the_question_without_its_background_names(tmp_path):
    from ragdx.stages.reader import FEATURES, ReaderWeights

    store = acme_store(tmp_path)
    question = "Does Acme ship to Zurich?"
    # the reader's probability follows the cross-encoder's logit alone
    n = len(FEATURES)
    weights = ReaderWeights(FEATURES, (0.0,) * n, (1.0,) * n,
                            tuple(5.0 if f == "cross_gap" else 0.0 for f in FEATURES), 0.0)
    # Acme is in half the documents: the better of two readings; "Does ship to Zurich?" gives the
    # shipping sentence 1.5 x 2 = 3 against 0.5 x 2 = 1 with the name, and the other sentence 0
    # against 2. Off: one reading, and the sentence naming Acme first
    for share, cross, first in ((0.5, {HAPPY: 2.0, SHIP: 3.0}, SHIP), (0.0, {HAPPY: 2.0, SHIP: 1.0}, HAPPY)):
        scorer = EntityLeaning()
        gen = ExtractiveGenerator(min_coverage=0.1, max_sentences=1, reader=scorer, weights=weights, store=store,
                                  background_share=share)
        found = gen._scored(question, acme_context())
        rows = gen.reader_rows(question, found)
        gaps = {c.text: round(float(r[FEATURES.index("cross_gap")]), 6) for c, r in zip(found, rows)}
        best = max(cross.values())
        assert gaps == {k: v - best for k, v in cross.items()}
        assert scorer.asked == ([question, "Does ship to Zurich?"] if share else [question])
        answer = gen.run(Query("q", question, Principal("u", ("public",))), acme_context())
        assert [c.text for c in answer.claims] == [first]
    store.close()


def test_a_further_statement_holding_only_background_names_is_padding(tmp_path):
    store = acme_store(tmp_path)
    query = Query("q", "Does Acme ship to Zurich?", Principal("u", ("public",)))
    # by words alone: the shipping sentence holds ship and zurich (2 of 3), the other acme (1 of 3)
    on = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.0, max_sentences=2, store=store, background_share=0.5)
    assert on.background(query.question) == ("Acme",)
    assert [c.text for c in on.run(query, acme_context()).claims] == [SHIP]
    off = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.0, max_sentences=2, store=store, background_share=0.0)
    assert [c.text for c in off.run(query, acme_context()).claims] == [SHIP, HAPPY]
    # a question about the background name itself keeps it: "What is Acme?" would be left one word
    assert on.background("What is Acme?") == () and on.background("Where does Acme ship parcels?") == ("Acme",)
    store.close()
