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

Where the code lives: reading the reference (``ragdx.label.claims``), what is proposed and how it is
written (``ragdx.label.proposal``), the statements a claim can choose from
(``ragdx.label.candidates``), how they are ranked (``ragdx.label.ranking``), and how stated claims
become groups and their alternatives (``ragdx.label.grouping``). Each of those modules' functions
taking ``self`` is a :class:`Labeller` method, which the class assigns (as the stores assign their
concerns'); this module holds the labeller's settings and :meth:`Labeller.run`, which ties them
together, and re-exports the names callers import from here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from ragdx.diagnosis.evidence import RESOLVED, EvidenceResolver
from ragdx.label import candidates, grouping, ranking
from ragdx.label.candidates import _Statement
from ragdx.label.claims import (
    VERBATIM_WORDS, _amounts, _code, _compact, _holds, _stems, abstains, claim_sentences, question_parts, split_claims,
)
from ragdx.label.grouping import _anchored, _same_words
from ragdx.label.proposal import Place, Proposal, ProposedGroup, ReferenceClaim
from ragdx.label.readers import EvalCase
from ragdx.stages.support import SupportModel
from ragdx.protocols import PairScorer, Retriever, Store
from ragdx.stages.answerable import NameCoverage
from ragdx.text import is_reply
from ragdx.types import Principal, VersionFilter

__all__ = ["ReferenceClaim", "Place", "ProposedGroup", "Proposal", "Labeller", "abstains", "split_claims"]
# also importable from here, as before the labeller was split by concern: claim_sentences, question_parts,
# _amounts, _anchored, _code, _holds, _stems (tests import them)


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
        support: the support judgement (:mod:`ragdx.stages.support`, the verifier's): a group whose
            place it judges unsupported for a number, a name, a negation or an opposite word of the
            claims that the place does not share is marked ``needs_review`` (a PayPal refund's "3 to
            5 business days" placed on "released within 2 business days").
    """

    def __init__(self, store: Store, channels: Sequence[Retriever], scorer: PairScorer | None = None, *,
                 min_score: float = 0.45, review_score: float = 0.7, margin: float = 0.05, rescore: int = 12,
                 scorer_weight: float = 0.5, tie: float = 0.2, adjacent: bool = True, weak: float = 0.7,
                 headings: bool = True, page_prior: float = 0.3, lines: bool = True, api: float = 0.15,
                 neighbour: float = 0.05, lists: bool = True, similar: float = 0.8,
                 code: float = 0.15, parts: bool = True, alone: int = 6, numbers: bool = True, within: float = 0.25,
                 narrow: bool = True, chunked: bool = True, support: SupportModel | None = None) -> None:
        self.store, self.channels, self.scorer = store, list(channels), scorer
        self.support = support or SupportModel()
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

    # -- the concerns' functions, the labeller's methods -------------------------------------------
    statements = candidates.statements
    _candidates = candidates._candidates
    _narrowed = candidates._narrowed
    _numbered = candidates._numbered
    _words = ranking._words
    _best = ranking._best
    _prior = ranking._prior
    _groups = grouping._groups
    _one_chunk = grouping._one_chunk
    _adjacent = grouping._adjacent
    _span = grouping._span
    _alternatives = grouping._alternatives
    _listed = grouping._listed
    _paragraph = grouping._paragraph
    _elsewhere = grouping._elsewhere
    _similar = grouping._similar

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
