"""The statements ``ragdx label`` can choose from for a claim (docs/label.md): a page's statements
(:func:`statements`: sentences, list items, table rows, and the lines that read as code, a
signature or a table row that no statement covers), those of the chunks the channels find for the
question and the claim, with the first under the entry of an API either names
(:func:`_candidates`), a place narrowed to the sentence stating a terse claim (:func:`_narrowed`),
and the statements beside a place that state the claim's amounts (:func:`_numbered`).

Each function here is a :class:`~ragdx.label.propose.Labeller` method (the class assigns it); this
module imports only :mod:`ragdx.label.claims` and :mod:`ragdx.label.proposal` of the labeller's.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from ragdx.ingest.quotes import find_quote
from ragdx.label.claims import VERBATIM_WORDS, _amounts, _probe, _stems
from ragdx.label.proposal import Place
from ragdx.label.readers import EvalCase
from ragdx.text import api_names, documents_name, sentence_spans, statement_spans
from ragdx.types import DocStatus, Query

if TYPE_CHECKING:
    from ragdx.label.propose import Labeller

#: how many statements under the entry of an API the question or claim names join the candidates
#: (its signature and the first sentences that say what it does)
ENTRY_STATEMENTS = 3


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


def statements(self: Labeller, doc: str, version: str) -> list[_Statement]:
    """A page version's statements in the order of its text, each with its paragraph and the
    headings it stands under (cached; the cache is emptied past 256 pages)."""
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


def _candidates(self: Labeller, case: EvalCase, claim: str, near: Sequence[Place] = (), only_near: bool = False
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


def _narrowed(self: Labeller, place: Place, claim: str, question: str) -> Place:
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


def _numbered(self: Labeller, claim: str, place: Place) -> list[tuple[str, Place]]:
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
