"""How ``ragdx label`` turns stated claims into required groups and each group into its
alternatives (docs/label.md): claims stated in one paragraph of one page, or in sentences one after
the other on a page, are one group (:func:`_groups`) when one chunk holds them (:func:`_one_chunk`),
its place one span over them (:func:`_span`); a group's alternatives, an OR, are the same words in
the page's other versions and on other pages (:func:`_elsewhere`), another version's statements
saying it in a few words otherwise (:func:`_similar`) and the other pages stating a claim about as
well, each taken with the list its sentence announces (:func:`_listed`). A group whose place holds
an amount, an API name or keywords of its claims word for word is anchored (:func:`_anchored`).

Each function here taking ``self`` is a :class:`~ragdx.label.propose.Labeller` method (the class
assigns it); this module imports only :mod:`ragdx.label.claims` and :mod:`ragdx.label.proposal` of
the labeller's.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from ragdx.ingest.quotes import find_quote
from ragdx.label.claims import _amounts, _code, _holds, _probe, _prose
from ragdx.label.proposal import Place, ProposedGroup, ReferenceClaim
from ragdx.text import api_names
from ragdx.types import DocStatus, Query, VersionFilter

if TYPE_CHECKING:
    from ragdx.label.propose import Labeller

#: a list item's line: "- ...", "* ...", "1. ...", "2) ..."
_ITEM = re.compile(r"\s*(?:[-*\u2022]|\d+[.)])\s+\S")


def _same_words(places: Sequence[Place]) -> str:
    """A group's reason's note of its alternatives beyond the first place."""
    return f"; the same words in {len(places) - 1} other place(s)" if len(places) > 1 else ""


def _anchored(group: ProposedGroup) -> bool:
    """Whether the group's place (its first) holds an amount, an API name or a run of upper-case
    keywords ("REINDEX SYSTEM") of its claims word for word."""
    claims, text = " ".join(group.claims), group.places[0].text if group.places else ""
    return bool(_amounts(claims) & _amounts(text)) or any(
        re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", text, re.IGNORECASE) for n in api_names(claims)) or any(
        _holds(text, k) for k in _code(claims) if " " in k)


#: what weighs against a claim as a contradiction, not as other words: a negation or an opposite word
_CONTRADICTIONS = ("negation_flip", "polarity_flips", "antonym")
_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")


def _doubted(self: Labeller, claims: str, place: str) -> str:
    """Why the support judgement doubts that a place states the claims: it judges them
    unsupported, and a number the claims write in digits is not the place's, or a negation or an
    opposite word weighs against them ("" when not: a paraphrase sharing few words is no doubt,
    nor a number word such as "once")."""
    probability, premise, parts = self.support.probability(claims, place)
    numbers = set(_DIGITS.findall(claims)) - set(_DIGITS.findall(place))
    if probability >= self.support.weights.uncertain or not (
            numbers or any(parts.get(k, 0.0) < 0 for k in _CONTRADICTIONS)):
        return ""
    return f"the support judgement doubts the place states it ({self.support.reason(probability, premise, parts, claims, place)})"


def _groups(self: Labeller, stated: list[tuple[ReferenceClaim, list[Place]]], named: VersionFilter
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
        doubt = _doubted(self, " ".join(c.text for c, _ in run), main.text)
        if doubt:
            review, reasons = True, f"{reasons}; {doubt}"
        reasons += _same_words(places_out)
        groups.append(ProposedGroup(tuple(c.text for c, _ in run), tuple(places_out), score, reasons, review))
        seen = {(p.doc, p.version, p.start) for p in places_out}
        candidates.append(tuple(p for _, o in run for p in o if (p.doc, p.version, p.start) not in seen))
    return groups, candidates


def _one_chunk(self: Labeller, places: Sequence[Place]) -> bool:
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


def _adjacent(self: Labeller, before: Place, after: Place) -> bool:
    """Whether only whitespace stands between two places of one page (in either order)."""
    a, b = sorted((before, after), key=lambda x: x.start)
    if b.start < a.end:
        return True
    text = self.store.texts(a.doc, a.version)[1]
    return not text[a.end:b.start].strip()


def _span(self: Labeller, places: Sequence[Place]) -> Place:
    """One place from the first of places of one page version to the end of the last."""
    first = places[0]
    start, end = min(p.start for p in places), max(p.end for p in places)
    text = self.store.texts(first.doc, first.version)[1]
    return Place(first.doc, first.version, start, end, text[start:end], first.current)


def _alternatives(self: Labeller, main: Place, named: VersionFilter, also: Sequence[Place] = ()) -> list[Place]:
    """A group's places: ``main``, the same words in its other versions and pages
    (:func:`_elsewhere`), then ``also`` on pages not among them; each runs to the end of the
    list it announces (``lists``)."""
    places = [main] + self._elsewhere(main, named)
    places += [p for p in also if all(p.doc != q.doc for q in places)]
    return [self._listed(p) for p in places] if self.lists else places


def _listed(self: Labeller, place: Place) -> Place:
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


def _paragraph(self: Labeller, place: Place) -> int:
    """The start of the paragraph of the first statement that holds the place's start or begins
    after it; -1 when none does."""
    for s in self.statements(place.doc, place.version):
        if s.place.start <= place.start < s.place.end or s.place.start >= place.start:
            return s.paragraph
    return -1


def _elsewhere(self: Labeller, main: Place, named: VersionFilter) -> list[Place]:
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


def _similar(self: Labeller, main: Place, version: str) -> Place | None:
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
