"""Proposing a question's required evidence from its reference answer (``ragdx label``).

The reference answer is split into atomic claims (:func:`split_claims`: its sentences, and each
run of code-like lines as one claim). For each claim, the store's retrieval channels search with
the question and the claim together, over every version and every access group; the statements
of the chunks found (sentences, list items, table rows: :func:`ragdx.text.statement_spans`) are
scored against the claim by the words they share with it (the lines no statement covers that
read as code, a signature or a table row are statements too, and so are the first statements under
the entry of an API the question or claim names, which rank ``api`` higher) and, where a pair scorer is given (the
packaged cross-encoder), by its relevance of the statement, read under its headings, to the
question and claim, and, for a claim that can stand alone, to the claim alone (a short clause
within its sentence: :func:`claim_sentences`). A prose claim that quotes code (an API call, a
setting, a command's upper-case keywords: :func:`_code`) ranks the statements holding that code word
for word under their headings higher (``code``). Statements are ranked by that score plus a prior
for their page: how high the channels rank the page for the question alone (``page_prior``), so
that among pages stating the claim about as well the one the question points to wins. The best
statement states the claim when it scores at least ``min_score``; below, the claim is listed as an
``unsupported_reference``. Claims stated in one paragraph of one page, or in sentences one after
the other on a page, become one group (one span over them); the places stating the same words
elsewhere (another page, or another version when the question names none, in a few words otherwise
too) are its alternatives, an OR. Two statements side by side that state a claim about as well are
one place, and so is a sentence ending in a colon with the list after it. A group whose score is below
``review_score``, or whose runner-up from another place scores within ``margin`` of it, is marked
``needs_review``. Groups scoring below ``weak`` are left out when another group scores ``weak``
or more (``weak_groups``). A compound question with fewer groups than parts has its reference
looked for with each part as the question (``parts``): a place on a page no group cites, scoring
``weak`` or more, is a group of its own (a multi-hop question's terse reference states its bridge
only implicitly). The required evidence is an AND of the groups.

Every alternative is written as ``doc``, ``version`` and ``quote`` (the statement's exact words),
and resolved against the store before it is written: a proposal never names a span that does
not resolve.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from ragdx.diagnosis.evidence import RESOLVED, EvidenceResolver
from ragdx.ingest.quotes import find_quote
from ragdx.label.readers import EvalCase
from ragdx.protocols import PairScorer, Retriever, Store
from ragdx.queryset import parse_query
from ragdx.stages.answerable import NameCoverage
from ragdx.text import (
    api_names, content_terms, documents_name, is_reply, sentence_spans, split_question, statement_spans, stem,
    unreplied,
)
from ragdx.types import DocStatus, Principal, Query, VersionFilter

__all__ = ["ReferenceClaim", "Place", "ProposedGroup", "Proposal", "Labeller", "abstains", "split_claims"]

_SPACE = re.compile(r"\s+")
#: the fewest words a claim needs to be found by its words alone ("1,000,000 bytes." stands in many places)
VERBATIM_WORDS = 5
#: how many statements under the entry of an API the question or claim names join the candidates
#: (its signature and the first sentences that say what it does)
ENTRY_STATEMENTS = 3
_PROSE_END = re.compile(r"[.!?:]['\")\]]*$")


def _compact(text: str) -> str:
    return _SPACE.sub("", text)


def _probe(text: str) -> str:
    """The longest run of the text without whitespace: a text lacking it cannot hold the quote."""
    return max(text.split(), key=len, default="")


_CLAUSE = re.compile(r"(?<=[;:])\s+")
#: a comma before "and", "but", "which", "while" or "so" ends a clause ("ties go to the even
#: choice, and float representation can make round(2.675, 2) give 2.67" is two statements)
_COMMA = re.compile(r"(?<=,)\s+(?=(?:and|but|which|while|so)\s)")
#: the fewest content words each comma clause needs for the sentence to be split there
CLAUSE_WORDS = 4


def _clauses(sentence: str) -> list[str]:
    """A sentence apart at ``;`` and ``:``, and each piece apart at its comma clauses when every
    clause has at least ``CLAUSE_WORDS`` content words."""
    out = []
    for piece in _CLAUSE.split(sentence):
        parts = _COMMA.split(piece)
        out += parts if all(len(content_terms(p)) >= CLAUSE_WORDS for p in parts) else [piece]
    return out


#: the sources, as a reference answer names them ("the PostgreSQL manual", "the given context")
_SOURCE = r"(?:the|these|this|our|your|any)\s+(?:[\w-]+\s+){0,2}?(?:manual|documentation|docs|sources?|context|corpus)"
#: a reference answer saying the sources do not answer ("The manual does not cover pg_partman.",
#: "The documentation documents no setting named ...", "There's no such setting ...", "I don't
#: know."): its question is one the system should abstain on
ABSTAINING = re.compile(
    rf"\b{_SOURCE}\s+(?:does|do|did)\s*(?:not|n't)\s+(?:cover|mention|document|describe|discuss|address|say|state|"
    r"contain|include|provide|specify|list|name|explain)\b"
    rf"|\b{_SOURCE}\s+(?:documents|describes|mentions|lists|names|has|contains|provides|gives)\s+no\b"
    r"|\bnot\s+(?:covered|mentioned|documented|described|discussed|addressed|stated|found|specified)\s+(?:in|by)\s+"
    rf"{_SOURCE}"
    r"|^\s*(?:i\s+(?:do\s*not|don't)\s+know|unanswerable|not\s+answerable)\b"
    r"|\bthere(?:\s+is|'s|\u2019s)\s+no\s+such\b[^.;]*\b(?:manual|documentation|docs|sources?|context)\b"
    r"|\b(?:is|are)(?:\s+not|n't|n\u2019t)\s+(?:a\s+)?documented\b"
    r"|\b(?:cannot|can't|can\s+not)\s+be\s+answered\b",
    re.IGNORECASE)


def abstains(reference: str) -> bool:
    """Whether a reference answer's first sentence says the sources do not answer the question."""
    text = " ".join(reference.split())
    first = next((text[a:b] for a, b in sentence_spans(text)), text)
    return bool(ABSTAINING.search(first))


def _joined(pieces: list[str], least: int = 3) -> list[str]:
    """Pieces with fewer than ``least`` content words joined to the next ("Yes." or "No:" is no
    claim of its own; the last joins the one before)."""
    out: list[str] = []
    carry = ""
    for piece in pieces:
        piece = f"{carry} {piece}".strip() if carry else piece
        if len(content_terms(piece)) < least:
            carry = piece
            continue
        out.append(piece)
        carry = ""
    if carry:
        if out:
            out[-1] = f"{out[-1]} {carry}"
        else:
            out.append(carry)
    return out


def split_claims(reference: str) -> list[str]:
    """The atomic claims of a reference answer: the sentences of its prose lines, each apart at
    ``;`` and ``:`` into clauses, and at a comma before "and", "but", "which", "while" or "so" when
    each side has four content words or more (a piece with fewer than three content words joins
    the next; a reply word opening a claim, "No:" or "Yes,", left out, and a reply alone is no
    claim), and each run of other lines (code, a command, a table; blank lines inside it kept) as one claim."""
    claims: list[str] = []
    block: list[str] = []

    def flush() -> None:
        text = "\n".join(block).strip()
        if text and content_terms(text) and not is_reply(text):
            claims.append(text)
        block.clear()

    for line in reference.splitlines():
        stripped = line.strip()
        prose = bool(stripped) and not line[:1].isspace() and (
            len(stripped.split()) >= 4 and bool(_PROSE_END.search(stripped)))
        if prose:
            flush()
            pieces = [c for a, b in sentence_spans(stripped) for c in _clauses(stripped[a:b])]
            claims.extend(unreplied(c) for c in _joined(pieces) if content_terms(c) and not is_reply(c))
        elif stripped or block:
            block.append(line)
    flush()
    return claims


def claim_sentences(reference: str, claims: Sequence[str], least: int) -> list[str]:
    """What the pair scorer reads of each claim when it reads it without the question: the claim,
    or, when it has fewer than ``least`` content words, the sentence of the reference it came from
    (its reply word left out): a clause split off at ``;``, ``:`` or a comma ("and its data is never
    sent to standbys") has its subject there. A claim no one sentence holds (pieces joined across
    sentences, a block of code) is read as it is."""
    sentences = [unreplied(line.strip()[a:b]) for line in reference.splitlines()
                 for a, b in sentence_spans(line.strip())]
    out, at = [], 0
    for claim in claims:  # in the reference's order: a clause said twice is read in its own sentence
        found = next((n for n in range(at, len(sentences)) if _compact(claim) in _compact(sentences[n])), None)
        if found is not None:
            at = found
        out.append(claim if len(_stems(claim)) >= least or found is None else sentences[found])
    return out


def _same_words(places: Sequence[Place]) -> str:
    """A group's reason's note of its alternatives beyond the first place."""
    return f"; the same words in {len(places) - 1} other place(s)" if len(places) > 1 else ""


def question_parts(question: str, known: Iterable[str] = ()) -> list[str]:
    """The parts of a compound question that need evidence of their own
    (:func:`ragdx.text.split_question`), without a sentence stating the version the asker runs
    ("We're on Python 3.9."): that is the version's context, which the version filter reads.
    ``known``: the store's version labels (``VersionFilter.for_question``)."""
    return [a for a in split_question(question)
            if a.endswith("?") or not VersionFilter.for_question(a, known=known).named]


@dataclass(frozen=True, slots=True)
class Place:
    """Where a claim is stated: ``[start, end)`` of a document version's parsed text."""

    doc: str
    version: str
    start: int
    end: int
    text: str
    current: bool = True

    def alternative(self) -> dict[str, Any]:
        return {"doc": self.doc, "version": self.version, "quote": self.text}


@dataclass(frozen=True, slots=True)
class ReferenceClaim:
    """One claim of the reference answer and the best place found stating it (None: none does)."""

    text: str
    score: float
    place: Place | None
    reason: str
    runner_up: float = 0.0
    also: tuple[Place, ...] = ()  # other pages stating it, scoring within ``tie`` of the best
    quoted: bool = False  # its place holds its words verbatim (whitespace aside)


@dataclass(frozen=True, slots=True)
class ProposedGroup:
    """One required group: the claims it stands for, its places (an OR), its score and why."""

    claims: tuple[str, ...]
    places: tuple[Place, ...]
    score: float
    reason: str
    needs_review: bool

    def to_dict(self) -> dict[str, Any]:
        return {"claims": list(self.claims), "score": round(self.score, 4), "reason": self.reason,
                "needs_review": self.needs_review, "alternatives": [p.alternative() for p in self.places]}


@dataclass(frozen=True, slots=True)
class Proposal:
    """What ``ragdx label`` proposes for one case: the groups (an AND), the claims no source states,
    and whether a person should look at it."""

    case: EvalCase
    groups: tuple[ProposedGroup, ...]
    unsupported: tuple[ReferenceClaim, ...] = ()
    note: str = ""
    restricted: bool = False
    candidates: tuple[tuple[Place, ...], ...] = field(default=())  # per group: other places to choose from
    weak: tuple[ProposedGroup, ...] = ()  # groups left out: below ``weak`` while another group is not
    # the reference says the sources do not answer (:func:`abstains`), and no source names what it asks
    abstains: bool = False
    review: bool = False  # a person should look whatever the scores (the reference was a bare reply)

    @property
    def answerable(self) -> bool:
        return bool(self.groups) and not self.restricted

    @property
    def needs_review(self) -> bool:
        return self.review or bool(self.unsupported) or bool(self.weak) or any(g.needs_review for g in self.groups) \
            or not (self.groups or self.abstains)

    def to_line(self, groups: Sequence[ProposedGroup] | None = None) -> dict[str, Any]:
        """The proposal as a query-set line (docs/formats.md); the scores and reasons in
        ``metadata.label``."""
        groups = self.groups if groups is None else groups
        required = [[p.alternative() for p in g.places] for g in groups]
        principal = self.case.principal or Principal(user="anonymous", groups=("public",))
        line: dict[str, Any] = {"id": self.case.id, "question": self.case.question,
                                "principal": {"user": principal.user, "groups": list(principal.groups)},
                                "answerable": bool(groups) and not self.restricted,
                                "required": [] if self.restricted else required}
        if self.restricted:
            line["restricted_required"] = required
        if self.case.reference is not None:
            line["answer"] = self.case.reference
        if self.case.tags:
            line["tags"] = list(self.case.tags)
        line["metadata"] = {"label": {
            "needs_review": self.needs_review, "note": self.note,
            "groups": [g.to_dict() for g in groups],
            "unsupported_reference": [{"claim": c.text, "score": round(c.score, 4), "reason": c.reason}
                                      for c in self.unsupported],
            "candidates": [[p.alternative() for p in c] for c in self.candidates],
            "weak_groups": [g.to_dict() for g in self.weak]},
            "source": {"file": self.case.file, "line": self.case.line}}
        return line

    def query(self) -> Query:
        """The proposal as a validated query."""
        return parse_query(self.to_line(), self.case.file or "proposal", self.case.line or None)


@dataclass
class _Statement:
    place: Place
    paragraph: int  # the paragraph's start in the parsed text
    reads: str = ""  # what it states (a table row read with its header)
    heading: str = ""  # the headings it stands under (its chunk's prefix: "Exceptions > exception asyncio.TimeoutError")

    @property
    def scored(self) -> str:
        """What the pair scorer reads: the statement under its headings, as the pipeline's
        reranker reads a chunk ("A deprecated alias of TimeoutError." says nothing of asyncio;
        its heading does)."""
        return f"{self.heading}\n{self.place.text}".strip() if self.heading else self.place.text

    @property
    def terms(self) -> frozenset[str]:
        return _stems(self.reads or self.place.text)


_UNITS = r"kB|KB|MB|GB|TB|ms|us|min|bytes?"
#: an amount: a number of two digits or more ("1,600", "131072", "12.5"), or one with its unit ("4MB",
#: "8 kB"); units glued or after one space read alike. A version ("3.8.3") is none
_AMOUNT = re.compile(r"(?<![\w.])(\d[\d,]*\d(?:\.\d+)?|\d\.\d+|\d(?=\s?(?:" + _UNITS + r")\b))(?![\d.]*\.\d)"
                     r"(?:\s?(" + _UNITS + r")\b)?")


def _amounts(text: str, units: bool = True) -> frozenset[str]:
    """The text's amounts, thousands separators dropped and units lower-cased ("1,600" -> "1600",
    "4MB" and "4 MB" -> "4mb"); without ``units``, their numbers alone ("1,000,000 bytes" and
    "1000000" are one)."""
    return frozenset(m.group(1).replace(",", "") + ((m.group(2) or "").lower() if units else "")
                     for m in _AMOUNT.finditer(text))


def _anchored(group: ProposedGroup) -> bool:
    """Whether the group's place (its first) holds an amount, an API name or a run of upper-case
    keywords ("REINDEX SYSTEM") of its claims word for word."""
    claims, text = " ".join(group.claims), group.places[0].text if group.places else ""
    return bool(_amounts(claims) & _amounts(text)) or any(
        re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", text, re.IGNORECASE) for n in api_names(claims)) or any(
        _holds(text, k) for k in _code(claims) if " " in k)


def _prose(claim: str) -> bool:
    """Whether a claim is a sentence (not a run of code or table lines)."""
    text = claim.strip()
    return "\n" not in text and (bool(_PROSE_END.search(text)) or text.endswith(","))  # "," ends a clause


#: a line that is code or a signature, not a title: brackets, ``=``, ``;``, ``|``, ``>``, ``_`` or a dotted name
_CODE_LINE = re.compile(r"[()\[\]=;|<>_]|[a-z]\.[a-z]", re.IGNORECASE)


def _uncovered_lines(text: str, spans: Sequence[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The lines no statement covers that read as code, a signature or a table row (an API's
    signature line ``random.gauss(mu, sigma)``, ``sqlite> PRAGMA foreign_keys = ON;``, the first
    row of a table without a header, a one-line paragraph with a ``|`` in its prose), each a
    statement of its own: :func:`ragdx.text.statement_spans` reads them as headings or headers."""
    out: list[tuple[int, int, str]] = []
    covered = sorted((a, b) for a, b, _ in spans)
    pos = 0
    for line in text.split("\n"):
        stripped = line.strip()
        start = pos + len(line) - len(line.lstrip())
        end = start + len(stripped)
        pos += len(line) + 1
        if len(stripped) < 3 or not _CODE_LINE.search(stripped):
            continue
        k = bisect.bisect_left(covered, (end, end))
        if any(a < end and start < b for a, b in covered[max(0, k - 64):k]):
            continue
        out.append((start, end, stripped))
    return out


_SETTING = re.compile(r"[A-Za-z_][\w.]*\s*=\s*[\w.'\"]+")
#: a command's upper-case keywords, two or more ("CREATE INDEX CONCURRENTLY", "ACCESS EXCLUSIVE")
_KEYWORDS = re.compile(r"(?<![\w-])[A-Z]{2,}(?:\s+[A-Z]{2,})+(?![\w-])")


def _code(claim: str) -> frozenset[str]:
    """The claim's code, as a statement would hold it word for word (spaces aside): its API names
    with their calls' parentheses and what they chain ("get_event_loop_policy().get_event_loop()"),
    its settings ("strict=True", "foreign_keys = ON"), each spaces aside, the name of a call alone
    ("pg_blocking_pids" of "pg_blocking_pids()": a function table's row gives it its arguments), and
    its runs of upper-case keywords, one space apart ("CREATE INDEX CONCURRENTLY": a statement naming
    that command, not REINDEX's); :func:`_holds` says whether a statement holds one."""
    out = {_compact(m) for m in _SETTING.findall(claim)}
    for m in re.finditer(r"[A-Za-z_][\w.]*\(\)(?:\.[A-Za-z_]\w*\(\))*", claim):
        out.add(m.group())
        if m.group().count("(") == 1:  # the name alone too: a function table's row reads "pg_blocking_pids ( integer )"
            out.add(m.group()[:-2])
    out.update(" ".join(m.split()) for m in _KEYWORDS.findall(claim))
    return frozenset(x for x in out if len(_compact(x)) >= 6)


def _holds(text: str, code: str) -> bool:
    """Whether a text holds a piece of a claim's code (:func:`_code`) word for word: a run of
    keywords or a bare name as whole words ("DROP TABLE" is not in "DROP TABLESPACE", "ROW
    EXCLUSIVE" not in "SHARE ROW EXCLUSIVE", "pg_blocking_pids" not in
    "pg_safe_snapshot_blocking_pids"), a call or a setting spaces aside."""
    if " " in code:  # a run of keywords, not the end of a longer run ("ROW EXCLUSIVE" of "SHARE ROW EXCLUSIVE")
        words = r"\s+".join(map(re.escape, code.split()))
        return re.search(rf"(?<![\w.-])(?<![A-Z] ){words}(?![\w-])", text) is not None
    if re.fullmatch(r"[\w.]+", code):
        return re.search(rf"(?<![\w.-]){re.escape(code)}(?![\w-])", text) is not None
    return code in _compact(text)


def _within_entry(heading: str, names: frozenset[str]) -> bool:
    """Whether a statement stands within the entry of one of the names: under it, at any depth (a
    command's own page, "pg_basebackup > Description", is the entry of pg_basebackup as a
    parameter's heading is the parameter's; :func:`ragdx.text.documents_name` reads the last)."""
    parts = heading.split(" > ")
    return any(documents_name(" > ".join(parts[:n]), names) for n in range(1, len(parts) + 1))


@functools.lru_cache(maxsize=65536)
def _stems(text: str) -> frozenset[str]:
    """The stems of a text's content words; a number glued to its unit ("4MB") is the number and
    the unit, as "4 MB" is; a number's thousands separators are no boundary ("1,000,000" is
    1000000, not the first words of "1,000,000,000")."""
    out = set()
    for t in content_terms(_THOUSANDS.sub("", text)):
        glued = _GLUED.fullmatch(t)
        out.update((glued[1], stem(glued[2])) if glued else (stem(t),))
    return frozenset(out)


_GLUED = re.compile(r"(\d+(?:\.\d+)?)([a-z]+)")
#: a thousands separator: a comma between a digit and three digits that end the number's group
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
#: a list item's line: "- ...", "* ...", "1. ...", "2) ..."
_ITEM = re.compile(r"\s*(?:[-*\u2022]|\d+[.)])\s+\S")


class Labeller:
    """Proposes required evidence for evaluation cases against one store.

    Args:
        store: the store holding the corpus.
        channels: retrieval channels (ragdx's BM25 and dense retrievers), searched over every
            version; their ``top_k`` is how deep each looks per claim.
        scorer: a pair scorer (the cross-encoder), or None for the words alone.
        min_score: the least score of a place that states a claim.
        review_score: groups scoring below it are marked ``needs_review``.
        margin: a runner-up (another place, other words) within it marks the group ``needs_review``.
        rescore: how many statements per claim, best by words first, the scorer reads.
        scorer_weight: the scorer's share of a statement's score (the words' share is the rest).
        tie: another page whose statement scores within it of the best is an alternative too.
        adjacent: sentences of the reference stated one after the other on a page (white space
            between, neither a run of code lines) make one group, as one paragraph's do.
        weak: when some group scores at least it, the groups scoring below are left out of
            ``required`` (kept in ``weak_groups``), unless the group's place holds one of its claims'
            amounts or API names word for word (:func:`_anchored`); 0 keeps every group.
        headings: the pair scorer reads each statement under its headings (its chunk's prefix).
        page_prior: statements are ranked by their score plus this times the page's prior, 1 / (1 +
            the page's rank among the pages a channel finds for the question alone), the best over
            the channels; the score itself, which the thresholds read, is the statement's own.
        lines: the lines no statement covers that read as code, a signature or a table row are
            candidate statements too (``_uncovered_lines``).
        api: how much higher a statement under the entry of an API the question or claim names ranks.
        neighbour: a statement beside the best (only white space between) scoring within it of
            the best is part of the claim's place (0: the best alone).
        lists: a place whose sentence ends in a colon runs to the end of the list after it.
        similar: for a question naming no version, another version's statement sharing at least
            this share of a place's statement's content words (Jaccard) is an alternative, when
            that version lacks the same words (0: the same words only).
        code: how much higher a prose claim's statement ranks for each share of the claim's code
            (:func:`_code`: API calls, settings, runs of upper-case keywords) it holds word for word
            under its headings, spaces aside (0: none).
        parts: a compound question (:func:`ragdx.text.split_question`; a sentence naming only
            the version the asker runs is no part) with fewer groups than parts: the whole
            reference is looked for with each part as the question, and a place on a page no
            group cites, scoring at least ``weak``, is a group of its own (a multi-hop question's
            terse reference states its bridge only implicitly).
        alone: a claim of at least this many content words is read by the pair scorer alone as
            well as after the question, and scores the higher of the two; a shorter one is read so
            within the reference's sentence it came from (:func:`claim_sentences`), when that sentence
            has as many (0: after the question only).
        numbers: an amount of a claim (:func:`_amounts`: "4MB", "1600") that its place does not
            state, stated by another statement of the page, makes that statement a place of the
            claim too (a group of its own unless in the same paragraph).
        within: the page prior, the API entry's and the code's lift rank only statements scoring
            within this of the claim's best (a page the question points to lifts no statement that
            merely shares its words).
    """

    def __init__(self, store: Store, channels: Sequence[Retriever], scorer: PairScorer | None = None, *,
                 min_score: float = 0.45, review_score: float = 0.7, margin: float = 0.05, rescore: int = 12,
                 scorer_weight: float = 0.5, tie: float = 0.2, adjacent: bool = True, weak: float = 0.7,
                 headings: bool = True, page_prior: float = 0.3, lines: bool = True, api: float = 0.15,
                 neighbour: float = 0.05, lists: bool = True, similar: float = 0.8,
                 code: float = 0.15, parts: bool = True, alone: int = 6, numbers: bool = True, within: float = 0.25,
                 narrow: bool = True, chunked: bool = True) -> None:
        self.store, self.channels, self.scorer = store, list(channels), scorer
        self.min_score, self.review_score, self.margin = min_score, review_score, margin
        self.rescore, self.scorer_weight = rescore, scorer_weight if scorer is not None else 0.0
        self.tie = tie
        self.adjacent, self.weak, self.headings = adjacent, weak, headings
        self.page_prior, self.lines, self.api = page_prior, lines, api
        self.neighbour, self.lists, self.similar, self.code = neighbour, lists, similar, code
        self.parts, self.alone, self.numbers, self.within = parts, alone, numbers, within
        self.narrow, self.chunked = narrow, chunked
        self._prior_of: tuple[tuple[str, str], dict[str, float]] = (("", ""), {})  # the last case's
        groups = sorted({g for acl in store.acl_table().values() for g in acl})
        self.everyone = Principal("ragdx-label", tuple(groups) or ("public",))
        self.resolver = EvidenceResolver(store)
        self._statements: dict[tuple[str, str], list[_Statement]] = {}
        self._status = {(v.document.doc_id, v.document.version): v.document.status for v in store.versions()}
        self.labels = frozenset(version for _, version in self._status)

    @property
    def config(self) -> dict[str, Any]:
        return {"channels": [c.name for c in self.channels], "min_score": self.min_score,
                "review_score": self.review_score, "margin": self.margin, "rescore": self.rescore,
                "scorer_weight": self.scorer_weight, "tie": self.tie, "adjacent": self.adjacent, "weak": self.weak,
                "headings": self.headings, "page_prior": self.page_prior, "lines": self.lines, "api": self.api,
                "neighbour": self.neighbour, "lists": self.lists, "similar": self.similar, "code": self.code,
                "parts": self.parts, "alone": self.alone, "numbers": self.numbers, "within": self.within,
                "narrow": self.narrow, "chunked": self.chunked,
                "scorer": dict(self.scorer.config) if self.scorer is not None else None}

    # -- the store's statements ------------------------------------------------------------------
    def statements(self, doc: str, version: str) -> list[_Statement]:
        key = (doc, version)
        if key not in self._statements:
            text = self.store.texts(doc, version)[1]
            current = self._status.get(key) is DocStatus.CURRENT
            chunks = sorted(((c.start, c.end, c.prefix) for c in self.store.chunks(doc, version)))
            out = []
            n = 0
            spans = [(s.start, s.end, s.text) for s in statement_spans(text) if s.start >= 0]
            if self.lines:
                spans = sorted(spans + _uncovered_lines(text, spans))
            for start, end, reads in spans:
                paragraph = text.rfind("\n\n", 0, start) + 1
                while n + 1 < len(chunks) and chunks[n + 1][0] <= start:
                    n += 1
                heading = chunks[n][2] if self.headings and chunks and chunks[n][0] <= start < chunks[n][1] else ""
                out.append(_Statement(Place(doc, version, start, end, text[start:end], current),
                                      paragraph, reads, heading))
            if len(self._statements) > 256:
                self._statements.clear()
            self._statements[key] = out
        return self._statements[key]

    def _candidates(self, case: EvalCase, claim: str, near: Sequence[Place] = (), only_near: bool = False
                    ) -> tuple[list[_Statement], list[Place]]:
        """The statements of the chunks the channels find for the question and the claim, and the
        places in those pages that hold the claim's words verbatim (whitespace aside)."""
        search = f"{case.question} {claim}"
        found: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for channel in () if only_near else self.channels:
            ranked = channel.run(Query(f"{case.id}#label", search, self.everyone))
            for c in ranked.items:
                found.setdefault((c.doc_id, c.version), []).append((c.start, c.end))
        out, verbatim = [], []
        names = api_names(f"{case.question}\n{claim}")
        probe = _probe(claim)
        last = near[-1] if near else None
        for p in near:  # the pages the reference's other claims were found in
            found.setdefault((p.doc, p.version), [])
        for (doc, version), ranges in found.items():
            text = self.store.texts(doc, version)[1]
            if len(claim.split()) >= VERBATIM_WORDS and probe in text:
                hits = find_quote(text, claim)
                if last is not None and (last.doc, last.version) == (doc, version):  # the occurrence nearest the last claim
                    hits.sort(key=lambda h: abs(h[0] - last.end))
                verbatim += [Place(doc, version, a, b, text[a:b], self._status.get((doc, version)) is DocStatus.CURRENT)
                             for a, b in hits[:1]]
            entries: dict[str, int] = {}  # the first statements under the entry of a name asked about
            for s in self.statements(doc, version):
                if self.api and names and s.heading and documents_name(s.heading, names):
                    entries[s.heading] = entries.get(s.heading, 0) + 1
                    if entries[s.heading] <= ENTRY_STATEMENTS:
                        out.append(s)
                        continue
                if any(s.place.start < end and start < s.place.end for start, end in ranges):
                    out.append(s)
        return out, verbatim

    def _narrowed(self, place: Place, claim: str, question: str) -> Place:
        """A statement of several sentences or lines (a list item, a table's cell) narrowed to the
        one that holds every word of the claim the statement holds, when it holds any (the most of
        the question's words breaking a tie) and the same words stand nowhere earlier on the page:
        a terse claim states one of them, and a span over several may cross the chunks the
        pipeline cuts ("Zero." of a function table's three rows)."""
        pieces, at = [], 0
        for line in place.text.split("\n"):  # each line's sentences
            pieces += [(at + a, at + b) for a, b in sentence_spans(line) if line[a:b].strip()]
            at += len(line) + 1
        if len(pieces) < 2:
            return place
        terms, asked = _stems(claim), _stems(question)
        held = terms & _stems(place.text)
        best = max(pieces, key=lambda ab: (len(terms & _stems(place.text[ab[0]:ab[1]])),
                                           len(asked & _stems(place.text[ab[0]:ab[1]]))))
        if not held or held - _stems(place.text[best[0]:best[1]]):
            return place
        start, end = place.start + best[0], place.start + best[1]
        hits = find_quote(self.store.texts(place.doc, place.version)[1], place.text[best[0]:best[1]])
        if not hits or hits[0][0] != start:
            return place  # its words stand earlier on the page too: the quote would name that place
        return replace(place, start=start, end=end, text=place.text[best[0]:best[1]])

    def _numbered(self, claim: str, place: Place) -> list[tuple[str, Place]]:
        """For each amount of the claim (a number of two digits or more, or one with its unit:
        "4MB", "1600") that its place does not state: the statement of the same page that does and
        shares another of the claim's words, the one holding most of them."""
        held = _amounts(place.text)
        terms = _stems(claim)
        out: list[tuple[str, Place]] = []
        for number in _amounts(claim) - held:
            others = terms - _stems(number)  # "4MB" is the words "4" and "mb": no other word
            holding = [s for s in self.statements(place.doc, place.version) if number in _amounts(s.place.text)
                       and not s.place.text.rstrip().endswith("?") and others & s.terms]
            if holding:
                best = max(holding, key=lambda s: (len(terms & s.terms), -s.place.start))
                if all(best.place.start != p.start for _, p in out):
                    out.append((number, best.place))
        return out

    # -- scoring -----------------------------------------------------------------------------------
    def _words(self, claim: str, question: frozenset[str], s: _Statement) -> tuple[float, bool]:
        """How much of the claim's words (and, less, the question's) the statement holds; whether it
        holds the claim's words verbatim."""
        c, t = _compact(claim), _compact(s.place.text)
        if len(claim.split()) >= VERBATIM_WORDS and (c in t or (len(t) >= 24 and t in c)):
            return 1.0, True
        terms = _stems(claim)
        if not terms:
            return 0.0, False
        share = len(terms & s.terms) / len(terms)
        asked = question - terms
        q_share = len(asked & s.terms) / len(asked) if asked else share
        return 0.75 * share + 0.25 * q_share, False

    def _best(self, case: EvalCase, claim: str, near: Sequence[Place] = (), only_near: bool = False,
              sentence: str = "") -> tuple[list[tuple[float, _Statement]], str]:
        """The claim's candidate statements scored, best first, with how they were scored; the pair
        scorer reads ``sentence`` (:func:`claim_sentences`; default: the claim) when it reads
        without the question."""
        question = _stems(case.question)
        named = VersionFilter.for_question(case.question, current_only=False, known=self.labels)
        candidates, verbatim = self._candidates(case, claim, near, only_near)
        if named.named:
            pinned = {p.doc for p in verbatim if named.names(p.version)}
            verbatim = [p for p in verbatim if p.doc not in pinned or named.names(p.version)]
        if only_near:
            return [(1.0, _Statement(p, -1)) for p in verbatim], "the reference's words, verbatim"
        if verbatim:  # the reference quotes the page: the words are the place
            on = {(p.doc, p.version) for p in near}
            verbatim.sort(key=lambda p: ((p.doc, p.version) not in on, not p.current, p.doc, p.version))
            return [(1.0, _Statement(p, -1)) for p in verbatim], "the reference's words, verbatim"
        contexts = [_compact(c) for c in case.reference_contexts]
        names = api_names(f"{case.question}\n{claim}") if self.api else frozenset()

        code = _code(claim) if self.code and _prose(claim) else frozenset()  # prose quoting code

        def entry(s: _Statement) -> float:  # under the entry of a name asked about; holding the claim's code
            held = self.code * sum(1 for c in code if _holds(s.scored, c)) / len(code) if code else 0.0
            return held + (self.api if names and s.heading and _within_entry(s.heading, names) else 0.0)
        scored = []
        for s in candidates:
            if s.place.text.rstrip().endswith("?"):
                continue  # a question states nothing (a FAQ's question line echoes the asker's)
            words, verbatim = self._words(claim, question, s)
            if contexts and any(_compact(s.place.text) in c for c in contexts):
                words = min(1.0, words + 0.2)  # the reference's own context states it
            scored.append((words, verbatim, s))
        scored.sort(key=lambda x: (-(x[0] + entry(x[2])), not x[2].place.current))
        # a version the question names wins over the others of the same page
        if named.named:
            pinned = {s.place.doc for _, _, s in scored if named.names(s.place.version)}
            scored = [x for x in scored if x[2].place.doc not in pinned or named.names(x[2].place.version)]
        head = scored[:self.rescore]
        how = "words"
        out: list[tuple[float, _Statement]] = []
        if self.scorer is not None and head:
            how = "words and cross-encoder"
            texts = list(dict.fromkeys(s.scored for _, _, s in head))
            read = [float(x) for x in self.scorer.score(f"{case.question} {claim}", texts)]
            alone = sentence or claim
            if self.alone and len(_stems(alone)) >= self.alone:
                # a claim that stands on its own is read alone too: after a question about something
                # else ("Do I get 0 back?"), a paraphrase of the statement reads as another topic; a
                # clause is read in its sentence
                read = [max(a, float(b)) for a, b in zip(read, self.scorer.score(alone, texts))]
            logits = dict(zip(texts, read))
            for words, verbatim, s in head:
                relevance = 1.0 / (1.0 + math.exp(-logits[s.scored]))
                score = 1.0 if verbatim else (1 - self.scorer_weight) * words + self.scorer_weight * relevance
                out.append((score, s))
        else:
            out = [(1.0 if verbatim else words, s) for words, verbatim, s in head]
        # the page the question alone points to wins among statements that state the claim about as
        # well: the reference manual's page, not the release notes that restate it
        prior = self._prior(case) if self.page_prior else {}
        # (only among those scoring within ``within`` of the best: no prior lifts a loose statement
        # over one that states the claim)
        close = max((x[0] for x in out), default=0.0) - self.within

        def lift(x: tuple[float, _Statement]) -> float:
            return self.page_prior * prior.get(x[1].place.doc, 0.0) + entry(x[1]) if x[0] >= close else 0.0
        out.sort(key=lambda x: (-(x[0] + lift(x)),
                                not x[1].place.current,
                                x[1].place.doc, x[1].place.start))
        return out, how

    def _prior(self, case: EvalCase) -> dict[str, float]:
        """How strongly the question alone points to each page: 1 / (1 + its rank among the pages
        a channel finds for the question), the best over the channels."""
        if self._prior_of[0] != (case.id, case.question):
            prior: dict[str, float] = {}
            for channel in self.channels:
                pages: list[str] = []
                for c in channel.run(Query(f"{case.id}#question", case.question, self.everyone)).items:
                    if c.doc_id not in pages:
                        pages.append(c.doc_id)
                for r, doc in enumerate(pages):
                    prior[doc] = max(prior.get(doc, 0.0), 1.0 / (1.0 + r))
            self._prior_of = ((case.id, case.question), prior)
        return self._prior_of[1]

    # -- proposing -----------------------------------------------------------------------------------
    def run(self, case: EvalCase) -> Proposal:
        """Propose the case's required evidence.

        Returns:
            A :class:`Proposal`; with no reference answer, one with no groups (``answerable`` false,
            marked for review).
        """
        if not case.reference or not case.reference.strip():
            return Proposal(case, (), note="no reference answer: nothing to label; taken as a question "
                            "the system should abstain on")
        if abstains(case.reference):
            absent = NameCoverage(self.store).absent(case.question, self.everyone.groups)
            # no review when a name it asks about is in no source; otherwise a person checks the reference
            return Proposal(case, (), note="the reference answer says the sources do not answer it: taken as a "
                            "question the system should abstain on" + (
                                f" (no source mentions {', '.join(absent)})" if absent else
                                "; every name it asks about is in the sources: review"), abstains=bool(absent))
        named = VersionFilter.for_question(case.question, current_only=False, known=self.labels)
        claims: list[ReferenceClaim] = []
        others: list[list[Place]] = []
        amounts: list[tuple[ReferenceClaim, list[Place]]] = []
        # each claim once; a bare reply ("Yes.") states none: the question is what it affirms
        texts = list(dict.fromkeys(split_claims(case.reference)))
        bare = not texts and bool(is_reply(case.reference.strip()))
        texts = [case.question] if bare else texts
        for text, sentence in zip(texts, claim_sentences(case.reference, texts, self.alone)):
            scored, how = self._best(case, text, [c.place for c in claims if c.place is not None],
                                     sentence=sentence)
            if not scored or scored[0][0] < self.min_score:
                best = scored[0][0] if scored else 0.0
                where = f"; the best place, {scored[0][1].place.doc}@{scored[0][1].place.version}, scores " \
                    f"{best:.2f}" if scored else "; the channels found nothing"
                claims.append(ReferenceClaim(text, best, None, f"no statement in the store states it ({how}: below "
                                    f"{self.min_score}{where})"))
                others.append([])
                continue
            score, top = scored[0]
            quoted = top.paragraph == -1 or (len(text.split()) >= VERBATIM_WORDS
                                             and _compact(text) in _compact(top.place.text))
            place, joined = (self._narrowed(top.place, text, case.question) if self.narrow and not quoted
                             else top.place), None
            if self.neighbour and score < 1.0:
                # two statements side by side that state the claim about as well: the span covers both
                # (a terse claim often sums up a sentence and the one after it)
                joined = next((s for sc, s in scored[1:4] if sc >= score - self.neighbour
                               and _compact(s.place.text) != _compact(top.place.text)
                               and (s.place.doc, s.place.version) == (place.doc, place.version)
                               and self._adjacent(place, s.place)), None)
                if joined is not None:
                    place = self._span([place, joined.place])
            rival = next((sc for sc, s in scored[1:] if s is not joined
                          and _compact(s.place.text) != _compact(top.place.text)), 0.0)
            verbatim = score >= 1.0
            reason = ("the reference's words, verbatim" if verbatim else
                      f"{how}: {score:.2f}; the runner-up elsewhere {rival:.2f}")
            also = []
            stated = _amounts(text, units=False) & _amounts(top.place.text, units=False)  # an alternative states them
            for sc, s in scored[1:]:
                if sc < max(self.min_score, score - self.tie) or len(also) >= 2:
                    continue
                if s.place.doc != top.place.doc and all(p.doc != s.place.doc for p in also) \
                        and stated <= _amounts(s.place.text, units=False):
                    also.append(s.place)
            claims.append(ReferenceClaim(text, score, place, reason, rival, tuple(also), quoted))
            others.append([s.place for _, s in scored[1:6] if s is not joined
                           and _compact(s.place.text) != _compact(top.place.text)])
            for number, there in self._numbered(text, place) if self.numbers and not quoted else ():
                # the claim's amount is stated beside it on the page ("4MB by default, and it applies
                # per operation": the default is a sentence of its own); added after the second look
                # below, which reads ``claims`` in the reference's order
                amounts.append((ReferenceClaim(text, score, there, f"{how}: the claim's amount {number}, "
                                               f"stated on the page beside its place"), []))
        verbatim = [c.place for c in claims if c.place is not None and c.score >= 1.0]
        for n, text in enumerate(texts if verbatim else []):
            if claims[n].score >= 1.0:
                continue  # a second look, in the pages the other claims were quoted from
            scored, _ = self._best(case, text, verbatim, only_near=True)
            if scored and scored[0][0] >= 1.0:
                claims[n] = ReferenceClaim(text, 1.0, scored[0][1].place, "the reference's words, verbatim",
                                           quoted=True)
                others[n] = []
        stated = [(c, o) for c, o in [*zip(claims, others), *amounts] if c.place is not None]
        groups, candidates = self._groups(stated, named)
        weak: list[ProposedGroup] = []
        if self.weak and any(g.score >= self.weak for g in groups):
            # a reference's claim that fits a page only loosely, beside one that fits well, is more
            # often the answer's own gloss ("they are built in by default") than required evidence
            # unless its place holds the claim's amount or API name word for word (an anchor no gloss has)
            keep = [n for n, g in enumerate(groups) if g.score >= self.weak or _anchored(g)]
            weak = [g for n, g in enumerate(groups) if n not in keep]
            groups, candidates = [groups[n] for n in keep], [candidates[n] for n in keep]
        if self.parts:
            asked = question_parts(case.question, self.labels)
            if len(asked) > 1 and len(groups) < len(asked):
                pages = {p.doc for g in groups for p in g.places}
                for part in asked:
                    scored, how = self._best(replace(case, question=part), case.reference)
                    if not scored or scored[0][0] < self.weak or scored[0][1].place.doc in pages:
                        continue
                    score, top = scored[0]
                    places = self._alternatives(top.place, named)
                    groups.append(ProposedGroup((part,), tuple(places), score,
                                                f"{how}: {score:.2f}; the reference read for the question's part"
                                                + _same_words(places), score < self.review_score))
                    candidates.append(())
                    pages.add(top.place.doc)
        restricted = bool(groups) and case.principal is not None and not any(
            self.store.readable(case.principal.groups, p.doc, p.version) for g in groups for p in g.places)
        note = "" if groups else "no claim of the reference is stated in the store"
        if bare:
            note = f"the reference is a bare reply ({case.reference.strip()!r}): the question read as its claim"
        if restricted:
            note = "the evidence lies only in documents the principal may not read: answerable false"
        proposal = Proposal(case, tuple(groups), tuple(c for c in claims if c.place is None), note, restricted,
                            tuple(candidates), tuple(weak), review=bare)
        return self._check(proposal)

    def _groups(self, stated: list[tuple[ReferenceClaim, list[Place]]], named: VersionFilter
                ) -> tuple[list[ProposedGroup], list[tuple[Place, ...]]]:
        """Claims stated in one paragraph of one page made one group; each group's alternatives."""
        runs: list[list[tuple[ReferenceClaim, list[Place]]]] = []
        for claim, other in stated:
            p = claim.place
            assert p is not None
            para = self._paragraph(p)
            run = next((r for r in runs if r[0][0].place.doc == p.doc and r[0][0].place.version == p.version  # type: ignore[union-attr]
                        and (self._paragraph(r[0][0].place) == para  # type: ignore[arg-type]
                             or (self.adjacent and _prose(claim.text) and _prose(r[-1][0].text)
                                 and self._adjacent(r[-1][0].place, p)))  # type: ignore[arg-type]
                        and (all(c.quoted for c, _ in r + [(claim, other)])  # a quoted passage is one
                             or self._one_chunk([c.place for c, _ in r] + [p]))), None)  # type: ignore[misc]
            if run is None:
                runs.append([(claim, other)])
            else:
                run.append((claim, other))
        groups, candidates = [], []
        for run in runs:
            main = self._span([c.place for c, _ in run if c.place is not None])
            # another page stating one claim about as well: an alternative too
            places_out = self._alternatives(main, named, run[0][0].also if len(run) == 1 else ())
            score = min(c.score for c, _ in run)
            rival = max(c.runner_up for c, _ in run)
            review = score < self.review_score or (score < 1.0 and score - rival < self.margin)
            reasons = "; ".join(dict.fromkeys(c.reason for c, _ in run))
            reasons += _same_words(places_out)
            groups.append(ProposedGroup(tuple(c.text for c, _ in run), tuple(places_out), score, reasons, review))
            seen = {(p.doc, p.version, p.start) for p in places_out}
            candidates.append(tuple(p for _, o in run for p in o if (p.doc, p.version, p.start) not in seen))
        return groups, candidates

    def _one_chunk(self, places: Sequence[Place]) -> bool:
        """Whether one chunk of the page holds all the places: claims found by their meaning whose
        joined span would cross chunks stay groups of their own, a span no retrieval could return
        whole (a reference quoting a passage word for word stays one group: that passage is the
        evidence, and its loss at chunking is the diagnosis). True for a store that keeps no chunk
        boundaries (``chunked`` false)."""
        if not self.chunked:
            return True
        first = places[0]
        start, end = min(p.start for p in places), max(p.end for p in places)
        chunks = self.store.chunks(first.doc, first.version)
        return not chunks or any(c.start <= start and end <= c.end for c in chunks)

    def _adjacent(self, before: Place, after: Place) -> bool:
        """Whether only whitespace stands between two places of one page (in either order)."""
        a, b = sorted((before, after), key=lambda x: x.start)
        if b.start < a.end:
            return True
        text = self.store.texts(a.doc, a.version)[1]
        return not text[a.end:b.start].strip()

    def _span(self, places: Sequence[Place]) -> Place:
        """One place from the first of places of one page version to the end of the last."""
        first = places[0]
        start, end = min(p.start for p in places), max(p.end for p in places)
        text = self.store.texts(first.doc, first.version)[1]
        return Place(first.doc, first.version, start, end, text[start:end], first.current)

    def _alternatives(self, main: Place, named: VersionFilter, also: Sequence[Place] = ()) -> list[Place]:
        """A group's places: ``main``, the same words in its other versions and pages
        (:meth:`_elsewhere`), then ``also`` on pages not among them; each runs to the end of the
        list it announces (``lists``)."""
        places = [main] + self._elsewhere(main, named)
        places += [p for p in also if all(p.doc != q.doc for q in places)]
        return [self._listed(p) for p in places] if self.lists else places

    def _listed(self, place: Place) -> Place:
        """A place whose sentence ends in a colon, taken with the list that follows it: the
        sentence announces what the items state ("... with the following exceptions:")."""
        if not place.text.rstrip().endswith(":"):
            return place
        text = self.store.texts(place.doc, place.version)[1]
        pos = text.find("\n", place.end) + 1  # the start of the line after the sentence
        if pos == 0:
            return place
        end = place.end
        for line in text[pos:].split("\n"):
            start, pos = pos, pos + len(line) + 1
            if not line.strip():
                continue
            if not _ITEM.match(line):
                break
            end = start + len(line.rstrip())
        return place if end == place.end else Place(place.doc, place.version, place.start, end,
                                                    text[place.start:end], place.current)

    def _paragraph(self, place: Place) -> int:
        for s in self.statements(place.doc, place.version):
            if s.place.start <= place.start < s.place.end or s.place.start >= place.start:
                return s.paragraph
        return -1

    def _elsewhere(self, main: Place, named: VersionFilter) -> list[Place]:
        """The same words in another version of the page (when the question names none) or on
        another page whose statements share them (found by the BM25 channel)."""
        out: list[Place] = []
        for stored in self.store.versions(main.doc):
            version = stored.document.version
            if version == main.version or (named.named and not named.names(version)):
                continue
            text = self.store.texts(main.doc, version)[1]
            hits = find_quote(text, main.text) if _probe(main.text) in text else []
            current = stored.document.status is DocStatus.CURRENT
            if hits:
                out.append(Place(main.doc, version, hits[0][0], hits[0][1], text[hits[0][0]:hits[0][1]], current))
            elif self.similar and not named.named:
                near = self._similar(main, version)
                if near is not None:
                    out.append(replace(near, current=current))
        bm25 = next((c for c in self.channels if c.name == "bm25"), None)
        if bm25 is not None:
            for c in bm25.run(Query("label#elsewhere", main.text[:400], self.everyone)).items[:10]:
                if c.doc_id == main.doc or any(p.doc == c.doc_id for p in out):
                    continue
                if named.named and not named.names(c.version) and any(
                        named.names(v.document.version) for v in self.store.versions(c.doc_id)):
                    continue
                text = self.store.texts(c.doc_id, c.version)[1]
                hits = find_quote(text, main.text) if _probe(main.text) in text else []
                if hits:
                    out.append(Place(c.doc_id, c.version, hits[0][0], hits[0][1], text[hits[0][0]:hits[0][1]],
                                     self._status.get((c.doc_id, c.version)) is DocStatus.CURRENT))
        return out

    def _similar(self, main: Place, version: str) -> Place | None:
        """The statements of another version of the page that say what the place's statements say,
        in a few words otherwise (a footnote mark, a reworded clause): for each of the place's
        statements, the other version's statement sharing the most of its content words, when the
        two share at least ``similar`` of their words (Jaccard); one place from the first found to
        the end of the last."""
        mine = [s.terms for s in self.statements(main.doc, main.version)
                if s.place.start < main.end and main.start < s.place.end and s.terms]
        theirs = [s for s in self.statements(main.doc, version) if s.terms]
        found: list[Place] = []
        for terms in mine:
            best, share = None, 0.0
            for s in theirs:
                j = len(terms & s.terms) / len(terms | s.terms)
                if j > share:
                    best, share = s, j
            if best is not None and share >= self.similar:
                found.append(best.place)
        return self._span(found) if found else None

    def _check(self, proposal: Proposal) -> Proposal:
        """The proposal with only the alternatives that resolve to a span of the store (each is
        the store's own text, so all do; this is the guarantee, checked the way ``ragdx evidence
        --strict`` checks)."""
        evidence = self.resolver.run(proposal.query(), restricted=proposal.restricted)
        bad = {(a.group, a.index) for a in evidence.alternatives if a.status != RESOLVED}
        if not bad:
            return proposal
        groups = []
        for g, group in enumerate(proposal.groups):
            places = tuple(p for i, p in enumerate(group.places) if (g, i) not in bad)
            if places:
                groups.append(replace(group, places=places))
        return replace(proposal, groups=tuple(groups))
