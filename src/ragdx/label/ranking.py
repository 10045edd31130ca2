"""How ``ragdx label`` ranks a claim's candidate statements (docs/label.md): by the words they
share with the claim and the question (:func:`_words`), by the pair scorer's relevance of each,
read under its headings, to the question and claim (and to the claim alone), and, among those
scoring within ``within`` of the best, lifted by the page the question alone points to
(:func:`_prior`), by standing under the entry of an API the question or claim names
(:func:`_within_entry`) and by holding the claim's code word for word (:func:`_best`).

Each function here is a :class:`~ragdx.label.propose.Labeller` method (the class assigns it); this
module imports only :mod:`ragdx.label.claims`, :mod:`ragdx.label.proposal` and
:mod:`ragdx.label.candidates` of the labeller's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from ragdx.label.candidates import _Statement
from ragdx.label.claims import VERBATIM_WORDS, _code, _compact, _holds, _prose, _stems
from ragdx.label.proposal import Place
from ragdx.label.readers import EvalCase
from ragdx.text import api_names, documents_name
from ragdx.types import Query, VersionFilter

if TYPE_CHECKING:
    from ragdx.label.propose import Labeller


def _within_entry(heading: str, names: frozenset[str]) -> bool:
    """Whether a statement stands within the entry of one of the names: under it, at any depth (a
    command's own page, "pg_basebackup > Description", is the entry of pg_basebackup as a
    parameter's heading is the parameter's; :func:`ragdx.text.documents_name` reads the last)."""
    parts = heading.split(" > ")
    return any(documents_name(" > ".join(parts[:n]), names) for n in range(1, len(parts) + 1))


def _words(self: Labeller, claim: str, question: frozenset[str], s: _Statement) -> tuple[float, bool]:
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


def _best(self: Labeller, case: EvalCase, claim: str, near: Sequence[Place] = (), only_near: bool = False,
          sentence: str = "") -> tuple[list[tuple[float, _Statement]], str]:
    """The claim's candidate statements scored, best first, with how they were scored; the pair
    scorer reads ``sentence`` (:func:`ragdx.label.claims.claim_sentences`; default: the claim) when
    it reads without the question."""
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


def _prior(self: Labeller, case: EvalCase) -> dict[str, float]:
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
