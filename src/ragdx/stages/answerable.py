"""Answerability by the question's distinctive names: a question about a tool, an extension, a
function or a version that nothing the asker may read mentions cannot be answered from the
sources, however many sentences on nearby subjects the context holds.

A distinctive name is what a person would look up verbatim: a dotted or called name
(``os.urandom()``), snake_case, a numbered identifier (``RFD-4021``, ``IPv6``), CamelCase, an
option (``--strict``), an ALL-CAPS identifier
(``MERGE``, ``PL/SQL``), a quoted term, a version number (``3.34.1``), or a capitalised word that
does not open the question (``PyPy``, ``Tcl``). A name is covered when some chunk the asker may
read holds it as a phrase (the store's keyword index, read with the principal's groups:
:meth:`ragdx.protocols.Store.bm25`), or, for a version number, when a document version's label
starts with it. The idea is the "unanswerable by missing entity" check of question-answering
systems (Rajpurkar et al., "Know What You Don't Know: Unanswerable Questions for SQuAD", ACL
2018, whose plausible-but-unanswerable questions mostly swap in an entity the paragraph lacks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ragdx.protocols import Store, TokenCounter
from ragdx.text import NUMBERED_ID, asking, content_terms, stem
from ragdx.types import Context, Query

_VERSION = r"\d+(?:\.\d+)+"
#: the name shapes, longest first so that ``os.urandom()`` is one name, not ``os`` and ``urandom``
_NAME = re.compile("|".join((
    r"(?P<quoted>\"[^\"]{2,60}\"|\u201c[^\u201d]{2,60}\u201d)",
    r"(?<![\w.-])(?P<option>--?[a-z][\w-]+)",
    r"(?P<dotted>\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?)",
    r"(?P<called>\b[A-Za-z_]\w*\(\))",
    r"(?P<slashed>\b[A-Z][A-Za-z]*/[A-Z][A-Za-z]*\b)",
    r"(?P<snake>\b[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+\b)",
    rf"(?P<numbered>{NUMBERED_ID})",  # after snake_case, which takes an underscore's
    rf"(?P<version>(?<![\w.]){_VERSION}(?![\w]))",
    r"(?P<camel>\b[A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b)",
    r"(?P<caps>\b[A-Z][A-Z0-9]{1,}\b)",
    r"(?P<capital>\b[A-Z][a-z][a-z0-9]+\b)",
)))

#: capitalised words that name nothing (they open clauses or are common in questions)
STOP_CAPITALS = frozenset("""According After Also And Before But Can Could Did Do Does For From Has Have How
If In Is It May Must On Or Should Since The Then There These This Those To Under Was Were What When Where Which
While Who Whom Whose Why Will With Would Yes No""".split())


#: a file name's extension: a page describes the module ``math`` without naming ``math.py``
_FILE = re.compile(r"\.(?:py[cdiwz]?|txt|md|rst|c|h|db|cfg|ini|toml|json|csv|html?|so|dll|exe|zip|sh|bat)$")


#: a call's arguments in a question (``position('x' in some_string)``, ``sum(amount)``): the
#: asker's own columns and values, not names a source would hold
_ARGUMENTS = re.compile(r"\b[A-Za-z_][\w.]*\(((?:[^()]|\([^()]*\))+)\)")  # one call nested in another
_VALUES = frozenset({"snake", "camel", "caps", "capital"})


@dataclass(frozen=True, slots=True)
class Name:
    """A distinctive name of a question and its shape: ``quoted``, ``option``, ``dotted``,
    ``called``, ``slashed``, ``snake``, ``numbered``, ``version``, ``camel``, ``caps``, ``capital``, or ``file``
    (a dotted name ending in a file extension)."""

    text: str
    kind: str


def question_names(question: str) -> tuple[Name, ...]:
    """The question's distinctive names with their shapes, in order, each once (without quotes,
    a possessive or a trailing ``()``). An identifier passed to a call the question writes out is
    the asker's own (``position('x' in some_string)``): not a name; the call's own name is.

    >>> [n.text for n in question_names("What does position('x' in some_string) give with create_hypertable()?")]
    ['create_hypertable']
    """
    names: dict[str, Name] = {}
    arguments = [m.span(1) for m in _ARGUMENTS.finditer(question)]
    # the asker's own values and functions passed to a call ("position('x' in some_string)",
    # "COALESCE(cached_value, expensive_function())"), wherever the question names them again
    passed = {m.group() for m in _NAME.finditer(question)
              if (m.lastgroup in _VALUES or m.lastgroup == "called")
              and any(a <= m.start() and m.end() <= b for a, b in arguments)}
    for match in _NAME.finditer(question):
        kind, text = match.lastgroup or "", match.group()
        if kind == "capital" and (match.start() == 0 or text in STOP_CAPITALS):
            continue
        if text in passed:
            continue
        if kind == "dotted" and all(len(part) == 1 for part in text.split(".")):
            continue  # an abbreviation ("e.g.", "i.e."), not a name
        text = text.strip("\"\u201c\u201d")
        text = re.sub(r"\(\)$", "", text)
        text = re.sub(r"['\u2019]s$", "", text)
        if kind == "dotted" and _FILE.search(text):
            kind = "file"
        if re.search(r"[^\W_]", text):  # punctuation alone ("?:") has no word to look up
            names.setdefault(text, Name(text, kind))
    return tuple(names.values())


#: the name shapes that are words, which may name what the sources as a whole are about
#: (:meth:`NameCoverage.background`)
WORD_SHAPES = frozenset({"capital", "caps", "camel"})


def without_names(question: str, names: Sequence[str]) -> str:
    """The question with these names (and their possessive) taken out.

    >>> without_names("Does Northwind Outfitters ship to Switzerland?", ["Northwind", "Outfitters"])
    'Does ship to Switzerland?'
    """
    for name in names:
        question = re.sub(rf"(?<![\w.-]){re.escape(name)}(?:['\u2019]s)?(?![\w-])", "", question)
    return re.sub(r"\s+([?.,!;:])", r"\1", " ".join(question.split()))


def distinctive_names(question: str) -> tuple[str, ...]:
    """The question's distinctive names, in order, each once (:func:`question_names`).

    >>> distinctive_names("How many bytes does uuid.uuid4() read from os.urandom()?")
    ('uuid.uuid4', 'os.urandom')
    """
    return tuple(n.text for n in question_names(question))


def is_version(name: str) -> bool:
    """Whether a name is a version number (``3.9``, ``3.34.1``)."""
    return re.fullmatch(_VERSION, name) is not None


#: how many chunks holding a joined code name's phrase are searched for the name as written
EXACT_DEPTH = 50
_NUMBER = re.compile(r"\d+(?:\.\d+)*")
#: an amount with its unit ("48GB", "256mb", "5s", "10ms"): a value the asker gives, not a name
_AMOUNT = re.compile(r"\d+(?:\.\d+)?(?:[kmgtp]i?b|[kmgt]|b|ms|us|s|sec|min|h|d|%)", re.IGNORECASE)
#: what the asker writes as their own values: a single-quoted literal ('bob%', '2024-05-01 10:00
#: Europe/Paris'), and a column their SQL compares ("WHERE created_at > now()")
_LITERAL = re.compile(r"(?<![\w'\u2019])'[^'\n]{1,80}'(?![\w'])")
_SQL_COLUMN = re.compile(r"\b(?:WHERE|BY|ON|AND|OR)\s+[A-Za-z_][\w.]*")
_JOINED = re.compile(r"[^\W_][._][^\W_]")


class NameCoverage:
    """Which of a question's distinctive names nothing the asker may read mentions.

    Args:
        store: the store, read through its keyword index with the asker's groups.
        vocabulary: a general vocabulary's tokenizer (the dense encoder's WordPiece): a word the
            sources never hold is a name when it splits into several pieces (``pydantic``,
            ``httpx``), not when it is a common word the sources happen to lack (``abroad``).
            None: only a word with a digit (``vec0``) can be such a name.
    """

    def __init__(self, store: Store, vocabulary: TokenCounter | None = None) -> None:
        self.store = store
        self.vocabulary = vocabulary
        self._shares: tuple[int, dict[str, float]] = (-1, {})  # (index version, name -> share)

    def background(self, question: str, share: float) -> tuple[str, ...]:
        """The question's names that the sources as a whole are about: word-shaped names
        (capitalised, all capitals, camel case; :data:`WORD_SHAPES`) held by at least ``share`` of
        the store's documents. A company's name in its own support pages ("Does Northwind
        Outfitters ship to Switzerland?"), a product's in its manual: naming it tells no document
        from another, and a cross-encoder reading the question leans on it all the same (it
        scores a sentence naming the company above the one on shipping to Switzerland). A code
        name (``round()``, ``os.path``) is never background. Shares are kept per index version.
        Empty when ``share`` is 0 or the store cannot count documents."""
        count = getattr(self.store, "document_frequency", None)
        names = [n.text for n in question_names(question) if n.kind in WORD_SHAPES]
        if share <= 0 or count is None or not names:
            return ()
        version = self.store.index_version
        if self._shares[0] != version:
            self._shares = (version, {})
        shares = self._shares[1]
        wanted = [n for n in names if n not in shares]
        if wanted:
            total, held = count(wanted)
            shares.update({n: held.get(n, 0) / total if total else 0.0 for n in wanted})
        return tuple(n for n in names if shares[n] >= share)

    def covered(self, name: str, groups: tuple[str, ...]) -> bool:
        """Whether some chunk these groups may read holds ``name`` as a phrase (or, for a version
        number, some document version is labelled with it). A code name joined by ``.`` or ``_``
        must be held as written (case aside): the keyword index reads ``PYTHON_GIL`` as the
        phrase "python gil", which prose holds; the best :data:`EXACT_DEPTH` chunks holding the
        phrase are searched for it."""
        if is_version(name):
            # labels are not content: no access check needed
            if any(label == name or label.startswith(name + ".") for label in self.store.version_labels()):
                return True
        elif _JOINED.search(name):
            wanted = name.lower()
            return any(wanted in chunk.text.lower()
                       for chunk, _ in self.store.bm25([name], groups, EXACT_DEPTH, versions=None))
        return bool(self.store.bm25([name], groups, 1, versions=None))

    def uncovered(self, names: Sequence[str], groups: tuple[str, ...]) -> tuple[str, ...]:
        """The names that nothing these groups may read mentions, in the question's order."""
        return tuple(n for n in names if not self.covered(n, groups))

    def absent(self, question: str, groups: tuple[str, ...]) -> tuple[str, ...]:
        """What the question names that nothing these groups may read mentions: its distinctive
        names, then its words.

        Two shapes are weaker evidence than a code name, and are checked by their parts: a quoted
        term is the asker's own phrase ("incomplete input"), absent only when one of its words is;
        a file name (``math.py``) is covered by its stem too, since a page describes the module
        without naming its file. An uncommon lower-case word no readable chunk holds
        (``pydantic``, ``httpx``, ``vec0``: see ``vocabulary``) names a tool or a product as
        surely as a capitalised one; words of
        the names already checked are not looked up again, and numbers are amounts the question
        asks about ("35 days after delivery"), not names.
        """
        # a name only the asker's situation holds is theirs ("I'm partitioning by created_at."), and so
        # are their literals and the columns their SQL compares
        asked = _SQL_COLUMN.sub(" ", _LITERAL.sub(" ", asking(question)))
        names = [n for n in question_names(question) if n.text in asked]
        missing = [n.text for n in names if n.kind not in ("quoted", "file") and not self.covered(n.text, groups)]
        missing += [n.text for n in names if n.kind == "file" and not self.covered(n.text, groups)
                    and not self.covered(_FILE.sub("", n.text), groups)]
        named = {w for n in names if n.kind != "quoted" for w in content_terms(n.text)}
        missing += [w for w in content_terms(asked)
                    if w not in named and self._uncommon(w) and not self.covered(w, groups)]
        return tuple(missing)

    def _uncommon(self, word: str) -> bool:
        """Whether a word could name something: not a number, and with a digit or, given a
        vocabulary, not one of its pieces."""
        if _NUMBER.fullmatch(word) or _AMOUNT.fullmatch(word):
            return False
        if any(ch.isdigit() for ch in word):
            return True
        return self.vocabulary is not None and self.vocabulary.count(word) > 1


#: the answer's config key saying it abstained because the sources never mention a name the
#: question asks about: no fact found for a part of the question may answer it then
#: (:func:`ragdx.stages.multihop.answer_with_slots`)
ABSTAINED_BY_NAME = "abstained_by_name"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether to answer; when not, why, and the names or words the sources do not cover."""

    answer: bool
    why: str = ""
    missing: tuple[str, ...] = ()
    by_name: bool = False  # not answered because the sources never mention what the question names


class Answerability:
    """The decision to answer at all, made before any sentence is chosen.

    Two signals, in order, then a third once the statements are chosen:

    1. **Names** (with ``names``): what the question names that nothing the asker may read
       mentions (:meth:`NameCoverage.absent`). A question about a tool, an extension or a
       function no source names is not answered, however well sentences on nearby subjects score;
       the abstention names it.
    2. **Scores**: the best sentence's score (the generator's blend of word coverage, meaning and,
       with a reader, the cross-encoder) must reach ``min_coverage``, the threshold that ``ragdx
       fit generation`` fits on a validation set under a hallucination limit; the abstention
       names the question's words the best sentence does not state.
    3. **What is asked of the names** (:meth:`asked_of_names`): when at least half of a question's
       words ask something of its names, chosen statements that share only the names with it
       ("All Northwind Outfitters products come with a 2-year warranty." for "Does Northwind
       Outfitters match a lower price I find at another shop?") answer nothing it asks, unless
       one means it closely (cosine at least ``name_only_cosine``: "It can be a surprise to get
       the UnboundLocalError ..." for "Why am I getting an UnboundLocalError when the variable
       has a value?").

    Args:
        names: the store's name coverage (None: no name check).
    """

    def __init__(self, names: NameCoverage | None) -> None:
        self.names = names

    def run(self, query: Query, context: Context, best: float | None, covered: frozenset[str],
            min_coverage: float) -> Verdict:
        """Whether to answer ``query`` from ``context``, given the best sentence's score and the
        question's (stemmed) terms it covers.

        Args:
            query: the question and its asker.
            context: the context the answer would come from.
            best: the best sentence's score (None: the context has no sentence that could answer).
            covered: the stemmed question terms the best sentence states.
            min_coverage: the least score that answers.
        """
        if self.names is not None:
            absent = self.names.absent(query.question, query.principal.groups)
            if absent:
                return Verdict(False, "no source the asker may read mentions " + ", ".join(absent), absent, True)
        if not context.units:
            missing = tuple(content_terms(query.question))
            return Verdict(False, "no source the asker may read was found", missing or ("any source on the question",))
        if best is None or best < min_coverage:
            missing = tuple(t for t in content_terms(query.question) if stem(t) not in covered)
            return Verdict(False, "the sources found do not cover: " + ", ".join(missing),
                           missing or ("any source on the question",))
        return Verdict(True)

    @staticmethod
    def asked_of_names(question: str, chosen: Sequence[tuple[frozenset[str], float]],
                       name_only_cosine: float) -> Verdict:
        """Whether the chosen statements answer what the question asks of its names.

        Args:
            question: the question.
            chosen: each chosen statement's stemmed question terms (what it states of the
                question, its version and entry included) and its cosine with the question.
            name_only_cosine: the least cosine that lets a statement sharing only names answer.
        """
        names = [n for n in question_names(question) if n.kind != "quoted"]  # a quoted term is the asker's phrase
        named = {stem(w) for n in names for w in content_terms(n.text)}
        terms = content_terms(question)
        asked = [t for t in terms if stem(t) not in named]
        if not named or 2 * len(asked) < len(terms):
            return Verdict(True)  # no names, or a question that is mostly names ("In SQLite 3.40, can I
            # write IS DISTINCT FROM?"): what it asks of them is in its names
        asked_stems = {stem(t) for t in asked}
        if any(covered & asked_stems or cosine >= name_only_cosine for covered, cosine in chosen):
            return Verdict(True)
        return Verdict(False, "the sources found mention " + ", ".join(n.text for n in names)
                       + " but do not cover: " + ", ".join(asked), tuple(asked))
