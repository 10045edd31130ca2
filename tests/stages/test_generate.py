"""The extractive generator: sentences chosen by meaning, exceptions that travel with their rule,
and an abstention threshold fitted on a validation set."""

import numpy as np
import pytest

from ragdx.stages.generate import ExtractiveGenerator, question_weights
from ragdx.types import Context, ContextUnit, EmbeddingSpace, Encoding, Principal, Query


class LookupEncoder:
    """An encoder whose vectors are given: each text's vector is the one of the first key it
    contains (so a test decides what 'means the same')."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = {k: np.asarray(v, dtype=np.float32) for k, v in vectors.items()}
        self.calls = 0

    @property
    def space(self) -> EmbeddingSpace:
        return EmbeddingSpace("lookup", "test", 3)

    @property
    def name(self) -> str:
        return "lookup"

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, texts, *, kind="passage") -> Encoding:
        self.calls += 1
        rows = [next((v for k, v in self.vectors.items() if k in t), np.zeros(3, np.float32)) for t in texts]
        return Encoding(self.space, np.vstack(rows), tuple(None for _ in texts))


def unit(uid, text, rank=1):
    return ContextUnit(uid, "doc", "v", 0, len(text), text, "Doc", (), (f"c-{uid}",), rank, len(text.split()))


def context(*units):
    return Context("context", tuple(units), (), 1200, sum(u.tokens for u in units), "words")


QUESTION = "How fast are exceptions?"
PARAPHRASE = "A try block costs almost nothing when nothing is raised."   # no word of the question
DISTRACTOR = "Exceptions are classes that derive from BaseException."    # shares 'exceptions'
ENCODER = {"How fast": [1, 0, 0], "try block": [0.9, 0.1, 0], "derive from": [0, 1, 0]}


def test_by_words_alone_the_shared_word_wins():
    gen = ExtractiveGenerator(min_coverage=0.1)
    answer = gen.run(Query("q", QUESTION), context(unit("S1", PARAPHRASE), unit("S2", DISTRACTOR, 2)))
    # question terms: fast, exception -> the distractor covers 1 of 2
    assert question_weights(QUESTION) == {"fast": 1.0, "exception": 1.0}
    assert [c.text for c in answer.claims] == [DISTRACTOR]


def test_by_meaning_the_paraphrase_wins():
    encoder = LookupEncoder(ENCODER)
    gen = ExtractiveGenerator(min_coverage=0.1, semantic_weight=0.8, max_sentences=1, encoder=encoder)
    ctx = context(unit("S1", PARAPHRASE), unit("S2", DISTRACTOR, 2))
    # scores: paraphrase 0.2 * 0 + 0.8 * cos(q, [0.9, 0.1, 0]) = 0.8 * 0.99388 = 0.7951;
    # distractor 0.2 * 0.5 + 0.8 * 0 = 0.1
    cos = 0.9 / np.hypot(0.9, 0.1)
    assert gen.best_score(Query("q", QUESTION), ctx) == pytest.approx(0.8 * cos, rel=1e-6)
    answer = gen.run(Query("q", QUESTION), ctx)
    assert [(c.text, c.citations) for c in answer.claims] == [(PARAPHRASE, ("S1",))]
    assert answer.config["semantic_weight"] == 0.8 and answer.config["encoder"] == encoder.space.id


def test_without_an_encoder_meaning_has_no_weight():
    assert ExtractiveGenerator(semantic_weight=0.8).semantic_weight == 0.0


def test_a_rule_brings_its_exception():
    rule = "Refunds are accepted within 30 days of delivery."
    exception = "However, quality defects may be refunded within 90 days."
    unrelated = "Parcels are shipped every weekday."
    gen = ExtractiveGenerator(min_coverage=0.3, max_sentences=1)
    answer = gen.run(Query("q", "Within how many days are refunds accepted after delivery?"),
                     context(unit("S1", f"{rule} {exception} {unrelated}")))
    assert [(c.text, c.citations) for c in answer.claims] == [(rule, ("S1",)), (exception, ("S1",))]


def test_a_sentence_that_limits_nothing_is_not_brought():
    gen = ExtractiveGenerator(min_coverage=0.3, max_sentences=1)
    answer = gen.run(Query("q", "Within how many days are refunds accepted after delivery?"),
                     context(unit("S1", "Refunds are accepted within 30 days of delivery. Parcels ship daily.")))
    assert [c.text for c in answer.claims] == ["Refunds are accepted within 30 days of delivery."]


def test_below_the_threshold_it_abstains():
    gen = ExtractiveGenerator(min_coverage=0.6)
    answer = gen.run(Query("q", QUESTION, Principal()), context(unit("S2", DISTRACTOR)))
    assert answer.abstained and answer.claims == () and gen.best_score(Query("q", QUESTION),
                                                                       context(unit("S2", DISTRACTOR))) == 0.5


def test_sentence_vectors_are_encoded_once():
    encoder = LookupEncoder(ENCODER)
    gen = ExtractiveGenerator(min_coverage=0.1, semantic_weight=0.8, encoder=encoder)
    ctx = context(unit("S1", PARAPHRASE), unit("S2", DISTRACTOR, 2))
    first = gen.run(Query("q", QUESTION), ctx)
    assert encoder.calls == 2            # the question, then both sentences
    again = gen.run(Query("q2", QUESTION), ctx)
    assert encoder.calls == 3            # only the question: the sentences are known
    assert again.claims == first.claims


# the rank prior: words alone score the second unit's sentence higher (both question terms
# against one); the first-ranked unit's sentence wins once its prior outweighs the gap
RANKED_QUESTION = "When are refunds approved?"     # content terms: refunds, approved
FIRST = "Refunds need a signed form."              # 1/2
SECOND = "Refunds are approved by the team lead."  # 2/2


@pytest.mark.parametrize("rank_weight, first_cited", [(0.0, "S2"), (1.3, "S2"), (1.4, "S1")])
def test_the_rank_prior_orders_sentences_by_their_units_rank(rank_weight, first_cited):
    # S1 (rank 1) scores 1/2 + w / log2(2), S2 (rank 2) 1 + w / log2(3): S1 leads when
    # w (1 - 1 / log2 3) > 1/2, that is w > 1.355
    gen = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.0, max_sentences=2, rank_weight=rank_weight)
    answer = gen.run(Query("q", RANKED_QUESTION), context(unit("S1", FIRST, 1), unit("S2", SECOND, 2)))
    assert answer.claims[0].citations == (first_cited,)


def test_abstention_compares_the_score_without_the_rank_prior():
    # half the question's terms is below 0.6 however large the prior
    gen = ExtractiveGenerator(min_coverage=0.6, rank_weight=5.0)
    ctx = context(unit("S1", FIRST, 1))
    assert gen.best_score(Query("q", RANKED_QUESTION), ctx) == 0.5
    assert gen.run(Query("q", RANKED_QUESTION), ctx).abstained


def test_a_question_asking_for_an_amount_needs_a_sentence_stating_it():
    question = "How many bytes does the header use?"
    vague = "The header uses a compact layout."
    figure = "The header uses 100 bytes."
    gen = ExtractiveGenerator(min_coverage=0.1)
    refused = gen.run(Query("q", question), context(unit("S1", vague)))
    assert refused.abstained and refused.missing == ("a number of bytes",)
    assert refused.text == "I cannot answer this from the sources: the sources found do not state a number of bytes."
    named = gen.run(Query("q", question), context(unit("S1", "The header of sqlite3 uses a compact layout of bytes.")))
    assert named.abstained  # the digit of a name states no amount
    answered = gen.run(Query("q", question), context(unit("S1", figure)))
    assert not answered.abstained and answered.claims[0].text == figure


def test_an_amount_asked_for_is_taken_from_a_sentence_stating_it_when_the_best_states_none():
    question = "How many people use it?"
    best = "People use it."                               # every question term, densest: chosen first
    figure = "In most years, 40 people use it at work."  # the same terms, and the amount
    gen = ExtractiveGenerator(min_coverage=0.5, max_sentences=1)
    answer = gen.run(Query("q", question), context(unit("S1", best), unit("S2", figure, rank=2)))
    assert not answer.abstained
    assert [c.text for c in answer.claims] == [figure, best]
    assert answer.claims[0].citations == ("S2",)
    # a sentence stating the amount must still answer the question well enough on its own
    weak = "In 2021, 40 visitors came."
    refused = gen.run(Query("q", question), context(unit("S1", best), unit("S2", weak, rank=2)))
    assert refused.abstained and refused.missing == ("a number",)


def test_the_sentence_stating_the_amount_brings_its_exception():
    figure, exception = "In most years, 40 people use it at work.", "Except in winter, when none do."
    gen = ExtractiveGenerator(min_coverage=0.5, max_sentences=1)
    answer = gen.run(Query("q", "How many people use it?"),
                     context(unit("S1", "People use it."), unit("S2", f"{figure} {exception}", rank=2)))
    assert [(c.text, c.citations) for c in answer.claims] == [
        (figure, ("S2",)), (exception, ("S2",)), ("People use it.", ("S1",))]


def test_a_chosen_sentence_that_is_the_exception_of_the_one_before_is_cited_once():
    figure, exception = "In most years, 40 people use it.", "However, people use it at work only in winter."
    gen = ExtractiveGenerator(min_coverage=0.5, max_sentences=1)
    answer = gen.run(Query("q", "How many people use it at work?"), context(unit("S1", f"{figure} {exception}")))
    assert [c.text for c in answer.claims] == [figure, exception]
    assert answer.text == f"{figure} [S1] {exception} [S1]"


def test_a_bare_name_from_a_list_is_no_answer():
    # a function list's entry names the question's term exactly, and scores it in full
    names = unit("S1", "- sqlite3session_create\n- sqlite3session_delete", 1)
    sentence = unit("S2", "Call sqlite3session_create to create a new session object.", 2)
    gen = ExtractiveGenerator(min_coverage=0.1, max_sentences=3)
    answer = gen.run(Query("q", "What does sqlite3session_create do?"), context(names, sentence))
    assert [c.citations for c in answer.claims] == [("S2",)]
    alone = gen.run(Query("q", "What does sqlite3session_create do?"), context(names))
    assert alone.abstained


def test_a_count_of_something_that_is_not_a_measure_is_answered_by_any_number():
    question = "How many people are using Python?"
    stated = "There are probably millions of people using Python, though an exact count is hard."
    gen = ExtractiveGenerator(min_coverage=0.1)
    answer = gen.run(Query("q", question), context(unit("S1", stated)))
    assert not answer.abstained and answer.claims[0].text == stated
    vague = gen.run(Query("q", question), context(unit("S1", "Python is used by many companies.")))
    assert vague.abstained and vague.missing == ("a number",)


def test_a_signature_stating_defaults_is_an_answer():
    sig = "datetime.isoformat(sep='T', timespec='auto')"
    gen = ExtractiveGenerator(min_coverage=0.1)
    answer = gen.run(Query("q", "What separator does datetime.isoformat put by default?"),
                     context(unit("S1", sig + "\n\nReturn a string representing the date.")))
    assert answer.claims[0].text == sig


def test_each_part_of_a_question_is_answered():
    question = "Which SQLite version does sqlite3 need for deterministic functions, and what exception does it raise otherwise?"
    version = [unit(f"V{i}", text, i) for i, text in enumerate((
        "Deterministic functions need SQLite version 3.8.3 or newer in sqlite3.",
        "SQLite version 3.8.3 added deterministic functions.",
        "The sqlite3 module checks the SQLite version for deterministic functions."), 1)]
    raises = unit("E1", "Otherwise NotSupportedError is the exception it will raise.", 4)
    # the whole question's best sentences all speak of the version; 2 sentences leave no room
    alone = ExtractiveGenerator(min_coverage=0.1, max_sentences=2)
    whole = alone.run(Query("q", question), context(*version, raises))
    cited = [c.citations[0] for c in whole.claims]
    assert "E1" in cited and len(cited) == 3
    assert cited[:2] == ["V1", "V3"]  # 6 and 5 of the 9 question terms; V2 has 4


def test_each_further_statement_comes_from_a_unit_not_yet_cited_first():
    question = "How are refunds for damaged parcels paid abroad?"  # refund, damag, parcel, paid, abroad
    a = unit("A", "Refunds for damaged parcels are paid abroad by transfer.", 1)               # 5 of 5
    b = unit("B", "Refunds for damaged parcels are paid in euros. Damaged parcels abroad get refunds.", 2)  # 4, 4
    c = unit("C", "Parcels abroad are paid by card.", 3)                                         # 3 of 5
    gen = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.5, max_sentences=3)
    answer = gen.run(Query("q", question), context(a, b, c))
    # after A's and B's best, C's statement (0.6) goes before B's second one (0.8): C is not cited yet
    assert [c.citations[0] for c in answer.claims] == ["A", "B", "C"]


def test_a_statement_that_announces_what_follows_brings_it():
    text = "To make a script executable, run these two commands:\n\n$ chmod +x script.py\n$ ./script.py"
    gen = ExtractiveGenerator(min_coverage=0.1, max_sentences=1)
    answer = gen.run(Query("q", "How do I make a script executable?"), context(unit("S1", text)))
    assert [c.text for c in answer.claims] == ["To make a script executable, run these two commands:",
                                               "$ chmod +x script.py $ ./script.py"]


PROSE = "An assignment makes a variable local to its function."  # local, variable: 2 of 3


@pytest.mark.parametrize("before", [
    # a line of an interactive session: its block has a prompt line
    "results in an error:\n\n>>> foo()\nUnboundLocalError: local variable referenced before assignment\n\n",
    "See also the local variable UnboundLocalError entry.\n\n",             # a pointer elsewhere
    # trailing off (after a sentence of no question word: one short line would be a heading)
    "You may wonder what happened here. Surely a local variable is never an UnboundLocalError\u2026\n\n",
    # leaning on a sentence before it: a connective, a pronoun that refers back
    "Thus, reading the local variable first raises UnboundLocalError.\n\n",
    "They make the local variable raise UnboundLocalError.\n\n",
])
def test_an_answer_opens_with_a_sentence_of_prose(before):
    question = "Why is the local variable an UnboundLocalError?"  # local, variable, unboundlocalerror
    gen = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.5, max_sentences=3)
    answer = gen.run(Query("q", question), context(unit("S1", before + PROSE)))
    # the other statement covers 3 of 3 and is chosen first (1.0 against 0.667); the prose one leads
    top = [s for s in answer.claims if s.text != PROSE]
    assert [c.text for c in answer.claims] == [PROSE, top[0].text] and len(top) == 1
    assert "UnboundLocalError" in top[0].text and answer.text.startswith(PROSE)


def test_a_word_that_only_begins_like_a_connective_does_not_lean_back():
    from ragdx.stages.generate import _may_lead
    assert not _may_lead("So the call fails.", "So the call fails.", 0)
    assert _may_lead("So-called magic methods are looked up on the type.", "x", 0)
    assert _may_lead("Sometimes the first call fails.", "x", 0)  # a whole word only: "so" is not "sometimes"


def test_a_line_of_a_psql_session_does_not_open_an_answer():
    from ragdx.stages.generate import _may_lead
    session = ("test_pub=# CREATE TABLE parent(a int PRIMARY KEY) PARTITION BY RANGE(a);\nCREATE TABLE\n"
               "postgres=> SELECT 1;")
    assert not _may_lead("test_pub=# CREATE TABLE parent(a int PRIMARY KEY) PARTITION BY RANGE(a);", session, 0)
    # an equals sign in prose, or a setting written out, is no prompt
    prose = "Set work_mem=# of bytes you want, or write a=b in the file."
    assert _may_lead(prose, prose, 0)


def test_the_reranker_and_the_generator_encode_a_sentence_once():
    from ragdx.stages._sentences import sentence_vectors
    from ragdx.stages.rerank import SentenceSimilarity
    from ragdx.types import Chunk, ChunkKind
    encoder = LookupEncoder(ENCODER)
    chunk = Chunk("c1", "doc", "v", 0, len(PARAPHRASE), PARAPHRASE, ChunkKind.TEXT, (), "s1")
    SentenceSimilarity(encoder).run(QUESTION, [chunk])
    shared = sentence_vectors(encoder)
    assert shared.encoded == 1
    gen = ExtractiveGenerator(min_coverage=0.1, semantic_weight=0.8, encoder=encoder)
    answer = gen.run(Query("q", QUESTION), context(unit("S1", PARAPHRASE)))
    assert answer.claims[0].text == PARAPHRASE and shared.encoded == 1  # the reranker's vector, reused


def test_a_call_with_more_sentences_than_the_cache_keeps_scores_them_all():
    from ragdx.stages._sentences import SentenceVectors
    encoder = LookupEncoder(ENCODER)
    kept = SentenceVectors(encoder, size=1)
    cosines = kept.cosines(QUESTION, [PARAPHRASE, DISTRACTOR])
    assert len(cosines) == 2 and cosines[0] > 0.9 and cosines[1] == 0.0
    assert len(kept._kept) == 1


def test_a_further_sentence_must_say_something_not_said_yet():
    question = "Are refunds of damaged parcels accepted after delivery?"
    first = "Refunds are accepted for 30 days after delivery."            # refund, accept, delivery: 3 of 5
    again = "Refunds are accepted after delivery in every case."          # the same 3 terms: nothing new
    longer = "Damaged parcels are replaced."                              # damaged, parcel: both new
    units = context(unit("S1", first), unit("S2", again, 2), unit("S3", longer, 3))
    # scores 0.6, 0.6 (equal density: the better-ranked unit first), 0.4 (keep_ratio 0.5 keeps all)
    old = ExtractiveGenerator(min_coverage=0.3, keep_ratio=0.5, max_sentences=3).run(Query("q", question), units)
    assert [c.text for c in old.claims] == [first, again, longer]
    new = ExtractiveGenerator(min_coverage=0.3, keep_ratio=0.5, max_sentences=3, tie_ratio=1.01)
    assert [c.text for c in new.run(Query("q", question), units).claims] == [first, longer]
    # a near tie (0.6 >= 0.9 * 0.6) is kept though it says nothing new
    tie = ExtractiveGenerator(min_coverage=0.3, keep_ratio=0.5, max_sentences=3, tie_ratio=0.9)
    assert [c.text for c in tie.run(Query("q", question), units).claims] == [first, again, longer]


def versioned(uid, version, text, rank):
    return ContextUnit(uid, "sqlite3.html", version, 0, len(text), text, "sqlite3", (), (f"c-{uid}",), rank,
                       len(text.split()))


def test_a_question_naming_a_version_is_answered_from_it_and_says_so():
    current = versioned("S1", "3.11.2", "The default cache holds 128 statements per connection.", 1)
    older = versioned("S2", "3.9.2", "The default cache holds 100 statements per connection.", 2)
    gen = ExtractiveGenerator(min_coverage=0.3, max_sentences=2)
    answer = gen.run(Query("q", "In Python 3.9, how many statements does the default cache hold?"),
                     context(current, older))
    assert [c.citations for c in answer.claims] == [("S2",)]
    assert answer.text == "Version 3.9.2: The default cache holds 100 statements per connection. [S2]"
    # unnamed: both versions' sentences compete, and no version is said
    plain = gen.run(Query("q", "How many statements does the default cache hold?"), context(current, older))
    assert plain.text.startswith("The default cache holds 128")


class FixedReader:
    """A reader whose logits are given per sentence (and that records what it read)."""

    config = {"model": "fixed"}

    def __init__(self, logits: dict[str, float]) -> None:
        self.logits, self.read = logits, []

    def score(self, query, texts):
        self.read.extend(texts)
        return [next((v for k, v in self.logits.items() if k in t), -10.0) for t in texts]


def test_the_reader_reorders_the_best_sentences_and_sets_the_score_abstention_compares():
    question = "How fast are exceptions in Python?"              # fast, exception, python
    fast = "A try block is fast when nothing is raised."       # fast: 1 of 3, 9 words
    reader = FixedReader({"try block": 2.0})
    heading = ContextUnit("S1", "doc", "v", 0, len(fast), fast, "Doc", ("Performance",), ("c1",), 1, 9)
    ctx = context(heading, unit("S2", DISTRACTOR, 2))          # exception: 1 of 3, 7 words (denser: first)
    gen = ExtractiveGenerator(min_coverage=0.1, max_sentences=1, reader=reader, reader_weight=0.5, reader_depth=1)
    # depth 1 reads the distractor alone (logit -10); the unread sentence counts the reader 0
    assert gen.best_score(Query("q", question), ctx) == pytest.approx(0.5 / 3 + 0.5 / (1 + np.exp(10)))
    assert reader.read == [DISTRACTOR]
    deeper = ExtractiveGenerator(min_coverage=0.1, max_sentences=1, reader=reader, reader_weight=0.5, reader_depth=2)
    answer = deeper.run(Query("q", question), ctx)
    # read after its heading: 0.5 / 3 + 0.5 * sigmoid(2) = 0.6071 against 0.5 / 3 + 0.5 * sigmoid(-10)
    assert [c.text for c in answer.claims] == [fast]
    assert "Performance: " + fast in reader.read
    assert deeper.best_score(Query("q", question), ctx) == pytest.approx(0.5 / 3 + 0.5 / (1 + np.exp(-2)))


SETTINGS_PAGE = """<html><body><h1>Resource consumption</h1><h2>Cost-based vacuum delay</h2>
<p>During VACUUM the system keeps an internal count of the cost of the I/O it performs.</p>
<dl>
<dt>vacuum_cost_delay (floating point)</dt><dd><p>The amount of time that the process will sleep
when the cost limit has been exceeded. The default value is zero, which disables the cost-based
vacuum delay feature.</p></dd>
<dt>vacuum_cost_limit (integer)</dt><dd><p>This is the accumulated cost that will cause the
vacuuming process to sleep for vacuum_cost_delay. The default is 200.</p></dd>
<dt>autovacuum_vacuum_cost_limit (integer)</dt><dd><p>Specifies the cost limit value that will be
used in automatic VACUUM operations. If -1 is specified (which is the default), the regular
vacuum_cost_limit value will be used.</p></dd>
</dl></body></html>"""


def test_a_sentence_under_the_entry_of_the_name_asked_about_states_it(tmp_path):
    """A reference page's entries ("vacuum_cost_limit (integer)") are headings of their own; a
    unit may run over several. "The default is 200." states vacuum_cost_limit's default because it
    stands under that entry, though it never names it; the sentence that names it under another
    entry ("autovacuum_vacuum_cost_limit") does not answer. Words alone, no model."""
    import json

    from ragdx.build import build_ingestor, build_pipeline
    from ragdx.config import load_settings
    from ragdx.store.sqlite import SQLiteStore
    from tests.conftest import write
    write(tmp_path / "docs" / "runtime-config.html", SETTINGS_PAGE)
    write(tmp_path / "docs" / "manifest.jsonl", json.dumps({"doc_id": "runtime-config.html",
                                                            "path": "runtime-config.html"}) + "\n")
    settings = load_settings(overrides=["retrieval.dense.enabled=false", "rerank.method=none",
                                        "chunking.tokenizer=regex", "generation.semantic_weight=0"])
    with SQLiteStore(tmp_path / "s.db", "create") as store:
        build_ingestor(store, settings).run(tmp_path / "docs" / "manifest.jsonl")
        trace = build_pipeline(store, settings).run(Query("q", "What is the default vacuum_cost_limit?",
                                                          Principal("a", ("public",))))
        (u,) = [u for u in trace.context.units if "The default is 200." in u.text]
        assert "autovacuum_vacuum_cost_limit" in u.text  # one unit over the entries
        assert [c.text for c in trace.answer.claims][0] == "The default is 200."
        generator = build_pipeline(store, settings).generator
        headings = {c.text: c.heading[-1] for c in generator._scored("What is the default vacuum_cost_limit?",
                                                                    trace.context)}
        assert headings["The default is 200."] == "vacuum_cost_limit (integer)"
        assert headings["If -1 is specified (which is the default), the regular vacuum_cost_limit value will "
                        "be used."] == "autovacuum_vacuum_cost_limit (integer)"


def test_a_question_asking_a_default_gets_the_default_of_the_entry_it_is_about():
    """A reference states a setting's default in a sentence that never names the setting, under
    the setting's entry. Asked for work_mem's default, the answer brings the default of the entry
    its first statement stands under, and leaves out another entry's default."""
    from ragdx.stages.generate import _Candidate, _with_defaults
    page = unit("S1", "Sets the base maximum amount of memory. The default value is four megabytes (4MB). "
                      "The default value is 2MB.")

    def cand(text, heading, score):
        return _Candidate(page, text, frozenset(), score, 0.1, heading=("19.4. Resource Consumption", heading))

    sets = cand("Sets the base maximum amount of memory.", "work_mem (integer)", 0.9)
    own = cand("The default value is four megabytes (4MB).", "work_mem (integer)", 0.1)
    other = cand("The default value is 2MB.", "vacuum_buffer_usage_limit (integer)", 0.5)
    named = cand("The maximum amount of memory defaults to 8MB on small builds.", "Limits", 0.4)
    found = [sets, other, named, own]
    asked = "What is the maximum amount of memory set to out of the box?"
    assert [c.text for c in _with_defaults([sets, other], found, asked)] == [sets.text, own.text]
    # the first statement is what the reader found best: kept, even as another entry's default
    assert [c.text for c in _with_defaults([other, sets], found, asked)] == [other.text, sets.text]
    # another entry's default that states what is asked in its own words is no stray
    assert [c.text for c in _with_defaults([sets, named], found, asked)] == [sets.text, named.text]
    # no default under the entries chosen: nothing is added
    assert _with_defaults([sets], [sets, other], asked) == [sets]
    # the question names a setting whose own entry states its default: that statement opens the
    # answer, before a neighbouring entry's default that names the setting
    limit = cand("The default is 200.", "vacuum_cost_limit (integer)", 0.1)
    auto = cand("If -1 is specified (which is the default), the regular vacuum_cost_limit value will be used.",
                "autovacuum_vacuum_cost_limit (integer)", 0.6)
    assert [c.text for c in _with_defaults([auto], [auto, limit], "What is the default vacuum_cost_limit?")] == \
        [limit.text, auto.text]


def test_the_generator_answers_a_question_for_a_default_with_its_entrys_default():
    """Through ``run``: one sentence allowed, the best by words is the setting's description; the
    question asks for its default, so the default stated under the same entry follows it (words
    only: a sentence sharing no word with the question is no candidate at all)."""
    entry = ContextUnit("S1", "runtime-config.html", "17", 0, 120,
                        "Sets the base maximum amount of query memory. The maximum is four megabytes (4MB) by default.",
                        "Resource Consumption", ("work_mem (integer)",), ("c-S1",), 1, 18)
    other = ContextUnit("S2", "runtime-config.html", "17", 200, 240, "Its default value is 2MB.",
                        "Resource Consumption", ("vacuum_buffer_usage_limit (integer)",), ("c-S2",), 2, 5)
    gen = ExtractiveGenerator(min_coverage=0.1, max_sentences=1)
    question = "What is the maximum query memory set to out of the box?"
    answer = gen.run(Query("q", question, Principal("a", ("public",))), context(entry, other))
    assert [c.text for c in answer.claims] == ["Sets the base maximum amount of query memory.",
                                               "The maximum is four megabytes (4MB) by default."]
    plain = gen.run(Query("q", "What is the maximum query memory?", Principal("a", ("public",))), context(entry, other))
    assert [c.text for c in plain.claims] == ["Sets the base maximum amount of query memory."]


def test_a_title_is_no_answer():
    warranty = ("NORTHWIND OUTFITTERS - WARRANTY TERMS\nVersion of 1 February 2026\n\n"
                "All products come with a 2-year warranty from the date of delivery.\n\n"
                "5. Your statutory rights\n\nReturns within Germany are free.")
    gen = ExtractiveGenerator(min_coverage=0.1, max_sentences=3)
    answer = gen.run(Query("q", "How long is the warranty on Northwind Outfitters products?"),
                     context(unit("S1", warranty)))
    # the title block (short lines, no stop) and the numbered heading are no statements to quote
    assert [c.text for c in answer.claims] == ["All products come with a 2-year warranty from the date of delivery."]


def test_a_statement_about_another_member_of_the_family_asked_about_is_left_out():
    question = "I got error RFD-5003 on my refund. What should I do?"
    codes = unit("S1", "Error RFD-5003 means that the payment provider timed out on your refund. "
                       "Do not submit the refund request again. "
                       "Error RFD-4021 means that the refund window for your refund has expired. "
                       "Your refund is retried automatically within 24 hours.")
    # by words, the RFD-4021 sentence (error, refund) outscores the retry one (refund): it is about another code
    gen = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.0, max_sentences=3)
    answer = gen.run(Query("q", question), context(codes))
    assert [c.text for c in answer.claims] == [
        "Error RFD-5003 means that the payment provider timed out on your refund.",
        "Do not submit the refund request again.",
        "Your refund is retried automatically within 24 hours."]


def test_an_answer_does_not_open_with_another_member_of_the_family_asked_about():
    question = "How was order NW-1024 paid?"  # order, nw, 1024 (twice: a number), paid
    other = unit("S1", "Order NW-1042 was paid by credit card.", 1)
    asked = unit("S2", "NW-1024 was paid with PayPal.", 2)
    encoder = LookupEncoder({"How was order": [1, 0, 0], "credit card": [1, 0, 0], "PayPal": [0, 1, 0]})
    gen = ExtractiveGenerator(min_coverage=0.1, semantic_weight=0.8, max_sentences=1, encoder=encoder)
    # by meaning, the other order's sentence leads: 0.2 * 3/5 + 0.8 * 1 = 0.92 against 0.2 * 4/5 + 0 = 0.16
    found = gen._candidates(question, context(other, asked))
    assert [(c.unit.id, round(c.score, 6)) for c in found] == [("S1", 0.92), ("S2", 0.16)]
    answer = gen.run(Query("q", question), context(other, asked))
    assert [(c.text, c.citations) for c in answer.claims] == [("NW-1024 was paid with PayPal.", ("S2",))]


def test_a_further_statement_holding_no_word_of_the_question_is_left_out():
    question = "How long is store credit valid?"  # long, store, credit, valid
    text = "Store credit is valid for 24 months. Returns within Germany are free."
    encoder = LookupEncoder({"How long": [1, 0, 0], "Store credit": [1, 0, 0], "Returns within": [0.8, 0.6, 0]})
    gen = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.0, semantic_weight=0.8, max_sentences=2,
                              encoder=encoder)
    # by meaning the second sentence qualifies: 0.2 * 0 + 0.8 * 0.8 = 0.64, above keep_ratio's 0
    found = gen._candidates(question, context(unit("S1", text)))
    assert [(c.text, round(c.score, 6), sorted(c.covered)) for c in found][1] == (
        "Returns within Germany are free.", 0.64, [])
    answer = gen.run(Query("q", question), context(unit("S1", text)))
    assert [c.text for c in answer.claims] == ["Store credit is valid for 24 months."]


def test_a_list_item_finishing_its_lead_in_sentence_is_no_further_statement():
    from ragdx.stages.generate import _continues
    runbook = ("## When to use a manual refund\n\nUse a manual refund only when the automatic refund flow cannot be "
               "used, for example:\n\n- the customer's refund request was rejected with error RFD-4021, but a team "
               "lead has given approval for an exception;\n- the order was split across several payment methods;\n\n"
               "## Approval limits\n\nRefunds above 500 EUR need approval from a team lead.\n"
               "Refunds above 2000 EUR also need sign-off from the finance team.")
    item = ("the customer's refund request was rejected with error RFD-4021, but a team lead has given approval "
            "for an exception;")
    assert _continues(item, runbook, runbook.index(item))
    # a sentence of prose, an item that is a sentence of its own, an item of a list no sentence
    # leads into (a parameter's entry), or the same words outside a list: none finishes a lead-in
    later = "Refunds above 2000 EUR also need sign-off from the finance team."
    assert not _continues(later, runbook, runbook.index(later))
    listed = "- Refunds are free.\n- name is the thread name;\n"
    assert not _continues("Refunds are free.", listed, 2)
    assert not _continues("name is the thread name;", listed, listed.index("name is"))
    prose = "Use it when: the flow fails;"
    assert not _continues("the flow fails;", prose, prose.index("the flow"))
    # through ``run``: by words the item ranks second (refund, approval, team, lead: 4 of 6, against 3 for
    # the 2000 EUR rule); the answer takes the rule
    gen = ExtractiveGenerator(min_coverage=0.1, keep_ratio=0.0, max_sentences=2)
    answer = gen.run(Query("q", "Above which amount does a refund need approval from a team lead?"),
                     context(unit("S1", runbook)))
    assert [c.text for c in answer.claims] == ["Refunds above 500 EUR need approval from a team lead.", later]
