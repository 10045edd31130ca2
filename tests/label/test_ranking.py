"""How ``ragdx label`` ranks the statements that state a claim: the pair scorer reads each under
its headings, and among statements stating the claim as well, the page the question alone points
to wins (``page_prior``)."""

from __future__ import annotations

import json
from pathlib import Path

from ragdx.label import Labeller
from ragdx.label.propose import question_parts
from ragdx.label.readers import EvalCase
from ragdx.stages.bm25 import BM25Retriever
from ragdx.store.sqlite import SQLiteStore
from ragdx.text import split_question
from tests.conftest import write
from tests.label.test_places import _store as _store_of


class _Reading:
    """A pair scorer that scores every pair alike and keeps what it was given to read."""

    config = {"name": "reading"}

    def __init__(self) -> None:
        self.read: list[str] = []

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.read += texts
        return [0.0] * len(texts)


def _store(tmp_path: Path) -> SQLiteStore:
    from ragdx.ingest.ingestor import Ingestor
    folder = tmp_path / "corpus"
    # the same words on two pages: the release notes (first by name) and the reference page the
    # question's words point to
    write(folder / "notes" / "changes.md", "# Changes in 2.0\n\nWidgets now time out after 30 seconds.\n")
    write(folder / "ref" / "widgets.md", "# Widget settings\n\n## How long a widget waits\n\n"
                                         "Widgets time out after 30 seconds.\n")
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(folder)
    return store


CASE = EvalCase(id="q1", question="How long does a widget wait?", reference="30 seconds.")


def test_the_page_the_question_points_to_wins_a_tie(tmp_path: Path) -> None:
    store = _store(tmp_path)
    bm25 = BM25Retriever(store, top_k=20, current_only=False)
    alone = Labeller(store, [bm25], page_prior=0.0).run(CASE)
    led = Labeller(store, [bm25]).run(CASE)
    # both statements hold the claim's words ("30", "second": 0.75) and "widget" of the
    # question's other two ("widget", "wait": 0.25 / 2): 0.875 each; the tie goes to the first
    # page by name without the prior, to the page the question ranks first with it
    assert [(g.places[0].doc, g.score) for g in alone.groups] == [("notes/changes.md", 0.875)]
    assert Labeller(store, [bm25])._prior(CASE) == {"ref/widgets.md": 1.0, "notes/changes.md": 0.5}
    assert [(g.places[0].doc, g.places[0].text, g.score) for g in led.groups] == [
        ("ref/widgets.md", "Widgets time out after 30 seconds.", 0.875)]


def test_the_pair_scorer_reads_each_statement_under_its_headings(tmp_path: Path) -> None:
    store = _store(tmp_path)
    reading = _Reading()
    Labeller(store, [BM25Retriever(store, top_k=20, current_only=False)], reading).run(CASE)
    assert sorted(reading.read) == ["Changes in 2.0\nWidgets now time out after 30 seconds.",
                                    "Widget settings > How long a widget waits\nWidgets time out after 30 seconds."]


# two API entries of one reference page, each a signature line and a sentence, as the HTML parser
# reads a <dl>: each entry is a chunk whose heading is its signature
SPINNERS = """<html><head><title>Spinners</title></head><body><h1>Spinners</h1>
<dl><dt>widgets.spin(speed)</dt><dd><p>Widgets spin widgets for 30 seconds at most.</p></dd></dl>
<dl><dt>gadgets.spin(speed)</dt><dd><p>A call spins for 30 seconds.</p></dd></dl></body></html>"""
SPIN = EvalCase(id="q2", question="How long do widgets spin under gadgets.spin()?", reference="30 seconds.")


def test_the_entry_of_the_api_the_question_names_is_searched_and_wins(tmp_path: Path) -> None:
    from ragdx.ingest.ingestor import Ingestor
    write(tmp_path / "corpus" / "spin.html", SPINNERS)
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(tmp_path / "corpus")
    # one chunk deep, BM25 finds only the widgets.spin entry (its words, "widgets" twice)
    bm25 = BM25Retriever(store, top_k=1, current_only=False)
    # the claim's words ("30", "second") in both sentences: 0.75; of the question's other words
    # (widget, spin, under, gadget) the widgets sentence holds two (0.25 * 2/4), the gadgets one
    # "spins" (0.25 * 1/4)
    alone = Labeller(store, [bm25], api=0.0).run(SPIN)
    assert [(g.places[0].text, g.score) for g in alone.groups] == [
        ("Widgets spin widgets for 30 seconds at most.", 0.875)]
    # the question names gadgets.spin: its entry's first statements join the candidates, and they
    # rank with 0.15 more (0.8125 + 0.15 > 0.875); the score the thresholds read stays its own
    named = Labeller(store, [bm25]).run(SPIN)
    assert [(g.places[0].text, g.score) for g in named.groups] == [("A call spins for 30 seconds.", 0.8125)]


def test_a_place_scoring_045_states_the_claim(tmp_path: Path) -> None:
    from ragdx.ingest.ingestor import Ingestor
    write(tmp_path / "corpus" / "gears.md", "# Gears\n\nWidgets rotate clockwise.\n")
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(tmp_path / "corpus")
    case = EvalCase(id="q3", question="Do gears turn widgets?", reference="Sprockets rotate.")
    # the claim's words (sprocket, rotate): one held, 0.75 * 1/2; the question's others (gear,
    # turn, widget): one held, 0.25 * 1/3; 0.4583 is at least min_score (0.45), below the old 0.5
    (group,) = Labeller(store, [BM25Retriever(store, top_k=20, current_only=False)]).run(case).groups
    assert (group.places[0].text, round(group.score, 4)) == ("Widgets rotate clockwise.", 0.4583)


def test_a_label_ending_in_a_colon_under_an_entry_is_read_as_the_entry() -> None:
    from ragdx.text import documents_name as _documents
    names = frozenset({"widgets.spin"})
    # a parameter's line stands under "Parameters:" under the signature: the entry's all the same
    assert _documents("Spinners > widgets.spin(speed) > Parameters:", names) is True
    assert _documents("Spinners > widgets.spin(speed) > Parameters: > Returns:", names) is True
    # a heading of its own under the entry ("Notes") is another entry; a label alone names nothing
    assert _documents("Spinners > widgets.spin(speed) > Notes", names) is False
    assert _documents("Parameters:", names) is False
    assert _documents("Spinners > gadgets.spin(speed) > Parameters:", names) is False


def test_a_statement_holding_the_claims_code_word_for_word_ranks_higher(tmp_path: Path) -> None:
    from ragdx.ingest.ingestor import Ingestor
    from ragdx.label.propose import _code
    folder = tmp_path / "corpus"
    write(folder / "loops.md", "# Loops\n\nA warning comes in some versions when no loop runs.\n\n"
                               "Tasks wait.\n\n"
                               "With no loop set, the call returns what get_policy().get_loop() returns.\n")
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(folder)
    case = EvalCase(id="q1", question="What does it return with no loop?",
                    reference="The result of get_policy().get_loop(), with a warning in some versions.")
    assert _code(case.reference or "") == {"get_policy().get_loop()"}
    bm25 = BM25Retriever(store, top_k=20, current_only=False)
    # the claim's stems: loop, policy, result, some, version, warn; the question's others: no, return.
    # "A warning comes ...": 4/6 of the claim's, 1/2 of the question's: 0.75 * 4/6 + 0.25 * 1/2 = 0.625;
    # "With no loop set ...": 2/6 and 2/2: 0.75 * 2/6 + 0.25 = 0.5, and it holds the claim's code
    # word for word: ranked at 0.5 + 0.15 = 0.65, above 0.625 (its score stays its own)
    plain = Labeller(store, [bm25], code=0.0).run(case)
    coded = Labeller(store, [bm25]).run(case)
    assert [(g.places[0].text, g.score) for g in plain.groups] == [
        ("A warning comes in some versions when no loop runs.", 0.625)]
    assert [(g.places[0].text, g.score) for g in coded.groups] == [
        ("With no loop set, the call returns what get_policy().get_loop() returns.", 0.5)]


def _optimize_store(tmp_path: Path) -> SQLiteStore:
    from ragdx.ingest.ingestor import Ingestor
    folder = tmp_path / "corpus"
    cmdline = write(folder / "cmdline.md", "# Command line options\n\n## -O\n\nRemove assert statements and any "
                                           "code conditional on the value of __debug__.\n")
    reference = write(folder / "reference.md", "# The assert statement\n\nThe code generator emits no code for an "
                                               "assert statement when optimization is requested.\n")
    manifest = write(tmp_path / "manifest.jsonl", "".join(json.dumps(row) + "\n" for row in [
        {"doc_id": "cmdline.md", "path": str(cmdline), "version": "3.9", "status": "superseded"},
        {"doc_id": "cmdline.md", "path": str(cmdline), "version": "3.11"},
        {"doc_id": "reference.md", "path": str(reference), "version": "3.11"}]))
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(manifest)
    return store


OPTIMIZE = EvalCase(id="q3", question="Which command-line option removes assert statements, and what does the "
                                      "code generator emit for them then?",
                    reference="-O; no code is emitted for assert statements.")


class _Knowing:
    """A pair scorer standing in for the cross-encoder: logit 4 for the statement that answers
    the part "which option" (asked alone) and for the code generator's sentence (asked whole), -4
    for every other pair."""

    config = {"name": "knowing"}
    PART = "Which command-line option removes assert statements?"

    def score(self, query: str, texts: list[str]) -> list[float]:
        return [4.0 if (query.startswith(self.PART) and "Remove assert" in t)
                or (not query.startswith(self.PART) and "code generator" in t) else -4.0 for t in texts]


def test_each_part_of_a_compound_question_finds_the_page_its_terse_reference_leaves_implicit(tmp_path: Path) -> None:
    store = _optimize_store(tmp_path)
    bm25 = BM25Retriever(store, top_k=20, current_only=False)
    alone = Labeller(store, [bm25], _Knowing(), parts=False).run(OPTIMIZE)
    assert [g.places[0].doc for g in alone.groups] == ["reference.md"]
    both = Labeller(store, [bm25], _Knowing()).run(OPTIMIZE)
    # the reference read with the part "Which command-line option removes assert statements?":
    # the option's own page, which no group cites yet, is a group of its own
    assert [(g.places[0].doc, g.claims) for g in both.groups] == [
        ("reference.md", ("-O; no code is emitted for assert statements.",)),
        ("cmdline.md", ("Which command-line option removes assert statements?",))]
    assert both.groups[1].places[0].text.startswith("Remove assert statements and any code")
    # the question names no version: the same words in the page's other version are an alternative
    assert [(p.doc, p.version) for p in both.groups[1].places] == [("cmdline.md", "3.11"), ("cmdline.md", "3.9")]
    # its words: 3 of the reference's 6 stems (code, stat, assert) x 0.75, and 1 of the part's 4
    # others (remov of command, line, option, remov) x 0.25: 0.4375; half that and half
    # sigmoid(4) = 0.98201: 0.70976, above weak (0.7)
    assert round(both.groups[1].score, 4) == 0.7098
    assert "the reference read for the question's part" in both.groups[1].reason


def test_a_sentence_naming_the_version_the_asker_runs_is_no_part() -> None:
    question = "We're on Python 3.11. What does the code generator emit for an assert statement?"
    assert split_question(question) == ("We're on Python 3.11.",
                                         "What does the code generator emit for an assert statement?")
    assert question_parts(question) == ["What does the code generator emit for an assert statement?"]
    # a premise without a version is a part: a multi-hop question's bridge
    assert question_parts("Python's sqlite3 opens transactions implicitly; when does such a transaction "
                          "start in SQLite?") == ["Python's sqlite3 opens transactions implicitly.",
                                                  "When does such a transaction start in SQLite?"]


class _Scripted:
    """A pair scorer giving each statement holding a key the key's logit (others -9); with
    ``alone_only``, only when it reads the claim alone (a query not opening with the question)."""

    config = {"name": "scripted"}

    def __init__(self, logits: dict[str, float], question: str = "", alone_only: bool = False) -> None:
        self.logits, self.question, self.alone_only = logits, question, alone_only

    def score(self, query: str, texts: list[str]) -> list[float]:
        if self.alone_only and query.startswith(self.question):
            return [-9.0] * len(texts)
        return [next((v for k, v in self.logits.items() if k in t), -9.0) for t in texts]


def test_the_page_prior_lifts_no_statement_far_below_the_best(tmp_path: Path) -> None:
    import math
    # the question's words find the frobnicator's page only (prior 1.0); the claim's, the auto
    # file's page too (prior 0). With the scorer alone (scorer_weight 1): 0.46 and 0.72
    store = _store_of(tmp_path, {"frob.md": "# Frobnicator\n\nThe frobnicator keeps many things written.\n",
                              "auto.md": "# Auto file\n\nSettings are written to an auto file.\n"})
    case = EvalCase(id="q1", question="Where does the frobnicator keep its state?",
                    reference="It writes them to an auto file.")
    logit = {"keeps many": math.log(0.46 / 0.54), "auto file.": math.log(0.72 / 0.28)}
    bm25 = BM25Retriever(store, top_k=20, current_only=False)
    assert Labeller(store, [bm25])._prior(case) == {"frob.md": 1.0}

    def place(within: float) -> str:
        proposal = Labeller(store, [bm25], _Scripted(logit), scorer_weight=1.0, within=within,
                            min_score=0.4).run(case)
        return proposal.groups[0].places[0].text
    # lifted by 0.3, the loose statement (0.76) passes the one that states the claim (0.72) ...
    assert place(1.0) == "The frobnicator keeps many things written."
    # ... unless only statements within 0.25 of the best (0.72 - 0.25 = 0.47) are lifted
    assert place(0.25) == "Settings are written to an auto file."


def test_a_claim_that_stands_on_its_own_is_read_alone_too(tmp_path: Path) -> None:
    store = _store_of(tmp_path, {"agg.md": "# Aggregates\n\nA sum of no rows returns null, not zero.\n"})
    case = EvalCase(id="q1", question="My SELECT sum(amount) matches nothing. Do I get 0 back?",
                    reference="The sum over zero input rows returns a null value instead of zero.")
    scorer = _Scripted({"returns null": 3.0}, question=case.question, alone_only=True)
    bm25 = BM25Retriever(store, top_k=20, current_only=False)
    # read after the question only, the scorer gives -9 and the words (half the score) stay below
    # min_score; read alone too (eight content words, at least 6), the higher reading counts
    after = Labeller(store, [bm25], scorer, alone=0).run(case)
    both = Labeller(store, [bm25], scorer).run(case)
    assert (after.groups, [c.text for c in after.unsupported]) == ((), [case.reference])
    assert [g.places[0].text for g in both.groups] == ["A sum of no rows returns null, not zero."]


def test_the_packaged_cross_encoder_reads_a_paraphrase_alone_better() -> None:
    """Hand-checked on the PostgreSQL manual (docs/benchmarks.md, issue 27's tenth round): after the
    asker's question, ms-marco-MiniLM reads the reference's paraphrase as off topic."""
    from tests.conftest import require_models
    require_models()
    from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER, CrossEncoder
    question = "My SELECT sum(amount) ... WHERE matches nothing. Do I get 0 back?"
    claim = "sum over no rows returns NULL (use coalesce to get 0);"
    texts = ["9.21. Aggregate Functions\nIn particular, sum of no rows returns null, not zero as one might expect, "
             "and array_agg returns null rather than an empty array when there are no input rows.",
             "41.4. Expressions\n(If it produces no rows, the result is taken as NULL.)"]
    scorer = CrossEncoder(DEFAULT_CROSS_ENCODER)
    after, alone = scorer.score(f"{question} {claim}", texts), scorer.score(claim, texts)
    assert after[0] < 0 < alone[0]  # about -7.7 and 4.9
    assert alone[0] - alone[1] > 3  # the aggregate sentence first by far (4.9 against 0.0)


class _Sentence:
    """A pair scorer that reads the unlogged table's two statements: logit 4 for "emptied" after a
    query saying it, and for "not replicated" only after the reference's whole sentence; -9 otherwise."""

    config = {"name": "sentence"}
    SENTENCE = "After a crash an unlogged table is emptied automatically, and its data is never sent to standbys."

    def __init__(self) -> None:
        self.queries: list[str] = []

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.queries.append(query)
        return [4.0 if ("emptied" in t and "emptied" in query) or ("not replicated" in t and query == self.SENTENCE)
                else -9.0 for t in texts]


def test_a_short_clause_is_read_by_the_pair_scorer_in_its_sentence(tmp_path: Path) -> None:
    store = _store_of(tmp_path, {"unlogged.md": "# Unlogged tables\n\nAn unlogged table is emptied after a crash.\n\n"
                                                "Writes to them skip the log.\n\n"
                                                "The contents of an unlogged table are not replicated to standby "
                                                "servers.\n"})
    case = EvalCase(id="q1", question="What happens to an unlogged table after a crash, and is it replicated?",
                    reference=_Sentence.SENTENCE)
    bm25 = BM25Retriever(store, top_k=20, current_only=False)

    def run(alone: int) -> tuple[list[tuple[str, float]], list[str], list[str]]:
        scorer = _Sentence()
        proposal = Labeller(store, [bm25], scorer, alone=alone, weak=0.0).run(case)
        return [(g.places[0].text, round(g.score, 4)) for g in proposal.groups], [c.text for c in proposal.unsupported], \
            scorer.queries
    # the first clause (5 content words: crash, unlogged, table, emptied, automatically) has 4 in
    # the statement: 0.75 * 4/5, and none of the question's other two (happen, replicated): words
    # 0.6, with the scorer's sigmoid(4) 0.7910.
    # Both clauses have fewer than 6 content words, and each is read alone within its sentence;
    # "and its data is never sent to standbys." (4) only there does the scorer know the statement: words 0.75 * 1/4 (standby) + 0.25 * 3/5 (of
    # the question's unlogged, table, replicated; not happen, crash) = 0.3375, with sigmoid(4)
    # 0.6598; read after the question only (alone=0), with sigmoid(-9): 0.1688, unsupported
    places, unsupported, queries = run(6)
    assert places == [("An unlogged table is emptied after a crash.", 0.7910),
                      ("The contents of an unlogged table are not replicated to standby servers.", 0.6598)]
    assert (unsupported, queries.count(_Sentence.SENTENCE)) == ([], 2)
    places, unsupported, queries = run(0)
    assert (places, unsupported) == ([("An unlogged table is emptied after a crash.", 0.7910)],
                                     ["and its data is never sent to standbys."])
    assert _Sentence.SENTENCE not in queries


def test_a_statement_under_the_entry_of_the_claims_keywords_ranks_higher(tmp_path: Path) -> None:
    store = _store_of(tmp_path, {"trunc.md": "# Truncate\n\n## Notes\n\nSequences owned by columns restart on demand "
                                             "only.\n\n## RESTART IDENTITY\n\nRestart sequences owned by columns.\n"})
    case = EvalCase(id="q1", question="How do I make the counters start over?",
                    reference="Add RESTART IDENTITY to restart the sequences owned by columns.")
    bm25 = BM25Retriever(store, top_k=20, current_only=False)
    # the claim's stems: add, restart, identity, sequence, own, column; each statement holds four
    # (restart, sequence, own, column) and none of the question's: 0.75 * 4/6 = 0.5 both. The one
    # under the entry RESTART IDENTITY holds the claim's keywords, read under its heading: ranked
    # 0.15 higher; without headings the tie goes to the first on the page
    under = Labeller(store, [bm25]).run(case)
    bare = Labeller(store, [bm25], headings=False).run(case)
    assert [(g.places[0].text, g.score) for g in under.groups] == [("Restart sequences owned by columns.", 0.5)]
    assert [(g.places[0].text, g.score) for g in bare.groups] == [
        ("Sequences owned by columns restart on demand only.", 0.5)]


def test_a_group_whose_place_holds_the_claims_keywords_is_anchored() -> None:
    from ragdx.label.propose import Place, ProposedGroup, _anchored

    def group(text: str) -> ProposedGroup:
        return ProposedGroup(("REINDEX SYSTEM does not support it.",), (Place("a.md", "1", 0, len(text), text, True),),
                             0.6, "", True)
    assert _anchored(group("REINDEX SYSTEM cannot run concurrently."))
    assert not _anchored(group("System catalogs cannot be reindexed concurrently."))
    assert not _anchored(group("REINDEX SYSTEMS cannot run concurrently."))  # whole words only
    # a run too short to be code anchors nothing ("NOT IN" in "NOT INHERIT")
    assert not _anchored(ProposedGroup(("Avoid NOT IN with nulls.",), (Place(
        "a.md", "1", 0, 10, "A NOT INHERIT constraint is not propagated.", True),), 0.6, "", True))


def test_another_page_is_an_alternative_only_when_it_states_the_claims_numbers(tmp_path: Path) -> None:
    store = _store_of(tmp_path, {"quality.md": "# Quality\n\nQuality defects may be refunded within 90 days of "
                                               "delivery.\n",
                                 "faulty.md": "# Faulty items\n\nFaulty items can be refunded for up to 90 days "
                                              "after delivery.\n",
                                 "refund.md": "# Refunds\n\nRefunds are accepted within 30 days of delivery.\n"})
    case = EvalCase(id="q1", question="Can I get a refund for a defect after 35 days?",
                    reference="Quality defects can be refunded for up to 90 days.")
    # the scorer alone (scorer_weight 1): sigmoid(3.0) 0.953, sigmoid(2.8) 0.943, sigmoid(2.5) 0.924;
    # the two others are within 0.2 of the best, but the 30-day rule does not state the claim's 90
    scorer = _Scripted({"Quality defects": 3.0, "Faulty items": 2.8, "30 days": 2.5})
    bm25 = BM25Retriever(store, top_k=20, current_only=False)
    (group,) = Labeller(store, [bm25], scorer, scorer_weight=1.0).run(case).groups
    assert sorted(p.doc for p in group.places) == ["faulty.md", "quality.md"]  # first: the page prior's
