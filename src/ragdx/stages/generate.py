"""Generators: from a context to an answer whose every claim cites the units it rests on.

- :class:`ExtractiveGenerator` (the default): offline and deterministic. It answers with the
  context's own sentences that best answer the question — by the question's content words they
  hold and, given the dense encoder, by meaning, ordered by a learned reader when it has one
  (:mod:`ragdx.stages.reader`) — each cited, with the exception that follows a
  rule, and abstains, naming what is missing, when no sentence scores enough. Sentences
  of a passage flagged as instruction-like (``ContextUnit.flagged``), or that read like
  instructions to the system, or hold a citation marker of their own (``[S1]``), are never used
  (:mod:`ragdx.stages.injection`).
- :class:`ChatGenerator`: any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp's
  server, Ollama, a hosted API), with timeouts, retries with exponential backoff, and token and
  cost accounting.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import os
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ragdx.errors import ChatError, ConfigError
from ragdx.protocols import Encoder, PairScorer, Store
from ragdx.stages._sentences import sentence_vectors
from ragdx.stages.answerable import ABSTAINED_BY_NAME, Answerability, NameCoverage, without_names
from ragdx.stages.assemble import render_prompt
from ragdx.stages.injection import barred_statements, citation_like, instruction_like
from ragdx.stages.reader import ReaderWeights, SentenceFacts, feature_matrix
from ragdx.text import (LIST_ITEM, SIGNATURE, STOPWORDS, api_names, asked_quantity, asking, asks_default, content_terms,
                        documents_name, names_another, numbered_ids, sentences, split_question, statement_spans,
                        statements, states_default, states_quantity, stem)
from ragdx.types import Answer, Claim, Context, ContextUnit, DocStatus, Query, StageKind, Usage, VersionFilter

_CITATION = re.compile(r"\[(S\d+)\]")
_ABSTAIN = re.compile(r"\b(cannot|can't|can not|unable to) (answer|tell|say)|\bdo(es)? not (contain|say|cover|"
                      r"mention)|\bnot enough information\b|\bno information\b|\binsufficient\b",
                      re.IGNORECASE)


def question_weights(question: str) -> dict[str, float]:
    """Stemmed content terms of a question with their weight: 2 for terms with a digit (codes,
    amounts), 1 for the rest."""
    return {stem(t): 2.0 if any(ch.isdigit() for ch in t) else 1.0 for t in content_terms(question)}


#: the fewest words a statement needs to be an answer: a list entry that is only a name is not one
MIN_WORDS = 3

#: a sentence that limits the one before it: a rule's exception must travel with the rule
EXCEPTION_LIKE = re.compile(r"\b(?:except|unless|however|but|only (?:if|when)|not|no longer|cannot|"
                            r"instead|exception|excluding|apart from|other than)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Candidate:
    unit: ContextUnit
    text: str
    covered: frozenset[str]
    score: float
    density: float  # covered question terms per word: among equal scores, the more focused
    index: int = 0  # the statement's position in its unit
    content: float = 0.0  # the score before the unit's rank prior: what abstention compares
    lexical: float = 0.0  # the weighted share of the question's terms it holds
    cosine: float = 0.0  # its cosine with the question (0 without an encoder)
    table_row: bool = False
    leads: bool = True  # it may open an answer (:func:`_may_lead`)
    fragment: bool = False  # a list item finishing the sentence that leads into the list (:func:`_continues`)
    heading: tuple[str, ...] = ()  # the headings it stands under (:meth:`ExtractiveGenerator.entries`)


class ExtractiveGenerator:
    """Answers with the context's best sentences, cited; abstains when they cover too little.

    A sentence's lexical score is the weighted share of the question's content terms it contains
    (:func:`question_weights`). Given an encoder, its score blends that with the cosine of the
    sentence's and the question's vectors (``semantic_weight`` of it), so an answer phrased in
    other words than the question is still found (a sentence-level dense retrieval over the
    context, as in Karpukhin et al., "Dense Passage Retrieval", EMNLP 2020). The best sentence
    must reach ``min_coverage``; further sentences are taken while they score at least
    ``keep_ratio`` of the best, up to ``max_sentences``, each time from a unit not cited yet when
    one qualifies (with a learned reader, a unit already cited counts ``reader_same_unit`` of a
    sentence's probability); equal scores go to the denser sentence (more question terms per word). A
    chosen sentence whose next sentence limits it (``except``, ``unless``, ``however``, ...)
    brings that sentence too, so a rule is never cited without its exception; one that ends with
    a colon brings what it announces. A question that asks several things is answered in each
    part (:func:`ragdx.text.split_question`). A question that asks for an amount ("How many
    bytes ...", "... in milliseconds?") is answered only by a sentence that states a number with
    that unit (:func:`ragdx.text.asked_quantity`): when the chosen sentences state none, the best
    one that does and reaches ``min_coverage`` is put first; related sentences without the figure
    are no answer. A table row is read with its header (``column: value``). When the context flags a
    conflict, both conflicting statements are given and the answer says the sources disagree.

    Args:
        min_coverage: the least score the best sentence must reach (fit it on a validation set:
            ``ragdx fit generation``).
        keep_ratio: further sentences must score at least this share of the best one.
        max_sentences: the most sentences in an answer, besides the exceptions they bring, a
            part of the question left unanswered, and a sentence stating the amount asked for.
        encoder: the dense encoder, to score sentences by meaning (None: words only).
        semantic_weight: the share of the score that is the cosine (with an encoder).
        rank_weight: a prior for the sentences of better-ranked units, added to the score to
            order them: ``rank_weight / log2(1 + rank)`` (retrieval ranked whole passages with
            more context than one sentence has). Abstention compares the score without it.
        tie_ratio: a further sentence must state a term of the question that no sentence chosen
            before states, unless it scores at least this share of the best (a near tie the
            scores cannot settle); 0: every sentence reaching ``keep_ratio`` qualifies.
        reader: a model that reads the question with each sentence in its local context (its
            heading; a table row with its header): a cross-encoder (Nogueira & Cho, "Passage
            Re-ranking with BERT", 2019). It reads the ``reader_depth`` best sentences by the
            blend above, and its score, ``sigmoid(logit / reader_scale)``, is ``reader_weight``
            of theirs (the others count it 0); abstention compares this combined score.
        weights: a learned reader (:mod:`ragdx.stages.reader`): given, it orders the sentences by
            the probability it gives each (from their words, meaning, place and, when it reads
            one, the ``reader``'s logit for the ``reader_depth`` best by words and meaning),
            instead of the blend and the rank prior; abstention still compares the blend. A reader
            fitted with the cross-encoder's features needs the ``reader``.
        reader_keep: with ``weights``, a further sentence's least share of the first's probability.
        reader_same_unit: with ``weights``, the share of its probability that a further sentence of
            a unit already cited counts when the next is chosen (1: the reader's order alone).
        store: given, the generator abstains when one of the question's distinctive names (a
            function, an extension, a product, a version) or words occurs nowhere the asker may
            read, naming it (:class:`ragdx.stages.answerable.Answerability`); None: no such check.
        name_only_cosine: chosen statements that share only the question's names with it answer
            nothing it asks, unless one's cosine with it reaches this
            (:meth:`ragdx.stages.answerable.Answerability.asked_of_names`).
        background_share: with a store, a word-shaped name of the question held by this share of
            the store's documents is what the sources are about ("Northwind Outfitters" in its
            own policies): the cross-encoder also reads the question without it, each sentence
            keeping its better reading, and a further statement that holds no other word of the
            question is padding (:meth:`ragdx.stages.answerable.NameCoverage.background`; 0: off).
    """

    kind = StageKind.GENERATION

    def __init__(self, *, min_coverage: float = 0.5, keep_ratio: float = 0.6, max_sentences: int = 3,
                 encoder: Encoder | None = None, semantic_weight: float = 0.5, rank_weight: float = 0.0,
                 tie_ratio: float = 0.0, reader: PairScorer | None = None, reader_weight: float = 0.5,
                 reader_depth: int = 40, reader_scale: float = 1.0, store: Store | None = None,
                 weights: ReaderWeights | None = None, reader_keep: float = 0.0, reader_same_unit: float = 0.5,
                 name_only_cosine: float = 0.7, background_share: float = 0.25, name: str = "extractive") -> None:
        self.min_coverage, self.keep_ratio, self.max_sentences = min_coverage, keep_ratio, max_sentences
        self.rank_weight, self.tie_ratio = rank_weight, tie_ratio
        self.reader, self.reader_depth, self.reader_scale = reader, reader_depth, reader_scale
        self.reader_weight = reader_weight if reader is not None and weights is None else 0.0
        if weights is not None and weights.cross and reader is None:
            raise ConfigError("the generator's learned reader reads a cross-encoder's score, and none was given")
        self.weights, self.reader_keep, self.reader_same_unit = weights, reader_keep, reader_same_unit
        self.store, self.name_only_cosine, self.background_share = store, name_only_cosine, background_share
        self.names = NameCoverage(store, encoder) if store is not None else None
        self.answerability = Answerability(self.names)
        self.encoder = encoder
        self.semantic_weight = semantic_weight if encoder is not None else 0.0
        self.name = name

    @property
    def config(self) -> dict[str, Any]:
        return {"method": "extractive", "min_coverage": self.min_coverage,
                "keep_ratio": self.keep_ratio, "max_sentences": self.max_sentences,
                "semantic_weight": self.semantic_weight, "rank_weight": self.rank_weight,
                "tie_ratio": self.tie_ratio, "reader_weight": self.reader_weight,
                "reader_depth": self.reader_depth, "reader_scale": self.reader_scale,
                "reader": dict(self.reader.config) if self.reader is not None else None,
                "learned": {"weights": self.weights.digest, "cross": self.weights.cross}
                if self.weights is not None else None,
                "reader_keep": self.reader_keep if self.weights is not None else None,
                "reader_same_unit": self.reader_same_unit if self.weights is not None else None,
                "check_names": self.names is not None, "name_only_cosine": self.name_only_cosine,
                "background_share": self.background_share if self.names is not None else None,
                "encoder": self.encoder.space.id if self.encoder is not None else None}

    def _meaning(self, question: str, texts: list[str]) -> list[float]:
        """Each text's cosine with the question, in the encoder's space (0 when negative).

        Sentence vectors are kept with the encoder's, shared with the sentence reranker
        (:func:`ragdx.stages._sentences.sentence_vectors`): the contexts of a run's questions share
        many units, and the reranker read most of their sentences already."""
        assert self.encoder is not None
        return [max(0.0, float(c)) for c in sentence_vectors(self.encoder).cosines(question, texts)]

    def _candidates(self, question: str, context: Context) -> list[_Candidate]:
        found = self._scored(question, context)
        if self.weights is not None and found:
            # the learned reader orders the sentences, reading what the question asks without the
            # version it names (the version chose the units); abstention still compares ``content``
            topic, read = self.as_read(question, context, found)
            chances = self.weights.probabilities(self.reader_rows(topic, read))
            found = [replace(c, score=float(p)) for c, p in zip(found, chances)]
        return sorted(found, key=lambda c: (-c.score, -c.density, c.unit.rank, c.unit.start))

    def entries(self, context: Context) -> dict[str, list[tuple[int, tuple[str, ...]]]]:
        """Each unit's chunks, in order, as (where it starts in the unit's text, its headings): a
        unit may run over several entries of a reference ("vacuum_cost_page_miss (integer)", then
        "vacuum_cost_limit (integer)"), and a sentence stands under the headings of the chunk it
        falls in. Empty without a store (each sentence then stands under its unit's headings)."""
        if self.store is None:
            return {}
        chunks = self.store.chunks_by_id([c for u in context.units for c in u.chunk_ids])
        return {u.id: sorted((max(0, c.start - u.start), c.heading_path) for c in
                             (chunks.get(i) for i in u.chunk_ids) if c is not None and c.heading_path)
                for u in context.units}

    def labels(self, context: Context) -> frozenset[str]:
        """The version labels a whole number in the question may name ("After moving to 17, ..."):
        the store's, or without a store the context's units'."""
        return self.store.version_labels() if self.store is not None else frozenset(u.version for u in context.units)

    def as_read(self, question: str, context: Context, found: list[_Candidate]) -> tuple[str, list[_Candidate]]:
        """What the learned reader reads: the question without the version it names
        (:meth:`ragdx.types.VersionFilter.topic`), and the candidates ``found`` for the question,
        each scored by words and meaning against that instead."""
        topic = VersionFilter.topic(question, known=self.labels(context))
        if topic == question:
            return question, found
        by_place = {(c.unit.id, c.index): c for c in self._scored(topic, context)}
        return topic, [by_place.get((c.unit.id, c.index), c) for c in found]

    def _scored(self, question: str, context: Context) -> list[_Candidate]:
        """The context's candidate sentences, scored by words and meaning (and the reader's share
        without learned weights), with the rank prior; those of the version the question names
        only, when one of them answers well enough."""
        weights = question_weights(question)
        total = sum(weights.values()) or 1.0
        # a version the question names ("the 2024-01 policy") is stated by the unit's version,
        # not by its sentences
        asked = VersionFilter.for_question(question, known=self.labels(context))
        version_terms = {stem(t) for label in asked.named for t in content_terms(label)}
        # a name the question asks about ("vacuum_cost_limit") is stated by the entry a sentence
        # stands under ("vacuum_cost_limit (integer)": "The default is 200.")
        names = api_names(question)
        entries = self.entries(context)
        found = []
        for unit in context.units:
            by_version = version_terms if asked.names(unit.version) else set()
            marks = entries.get(unit.id, [])
            barred = barred_statements(unit)  # a passage with an instruction in it is never quoted
            for index, said in enumerate(statement_spans(unit.text, unit.header_text)):
                text = said.text
                if _untrusted(text) or text in barred or text.endswith("?") \
                        or (len(text.split()) < MIN_WORDS and not SIGNATURE.search(text)) \
                        or (said.head is None and _title(unit.text, said.start, text)):
                    continue  # a document's instructions have no authority; a question, a bare
                    # name (a list of functions: "sqlite3session_create") or a title is no
                    # answer, unless it is a signature stating defaults
                at = bisect.bisect_right(marks, said.start, key=lambda m: m[0])
                heading = marks[at - 1][1] if at else unit.heading_path
                if at and heading and " ".join(text.split()) in " ".join(heading[-1].split()):
                    continue  # its own heading's words ("I lost my receipt. Can I still use ...?"): a title
                terms = {stem(t) for t in content_terms(text)} | by_version | _entry_terms(heading, names)
                covered = frozenset(t for t in weights if t in terms)
                score = sum(weights[t] for t in covered) / total
                if score > 0 or self.semantic_weight > 0:
                    density = len(covered) / max(1, len(text.split()))
                    found.append(_Candidate(unit, text, covered, score, density, index, lexical=score,
                                            table_row=said.head is not None,
                                            leads=_may_lead(text, unit.text, said.start), heading=heading,
                                            fragment=_continues(text, unit.text, said.start)))
        if self.semantic_weight > 0 and found:
            w = self.semantic_weight
            meaning = self._meaning(question, [c.text for c in found])
            # a sentence under the entry of a name asked about means what it says there ("The
            # default is 200." under "vacuum_cost_limit (integer)"): read in place too
            entry = [i for i, c in enumerate(found) if _entry_terms(c.heading, names)]
            for i, m in zip(entry, self._meaning(question, [_in_place(found[i]) for i in entry]) if entry else ()):
                meaning[i] = max(meaning[i], m)
            found = [replace(c, score=(1 - w) * c.score + w * m, cosine=m) for c, m in zip(found, meaning)]
        if self.reader is not None and self.weights is None and self.reader_weight > 0 and found:
            found = self._read(question, found)
        found = [replace(c, content=c.score, score=c.score + self.rank_weight / math.log2(1 + c.unit.rank))
                 for c in found]
        if asked.named:
            # a question that names a version is answered from that version when it can be
            of_version = [c for c in found if asked.names(c.unit.version)]
            if any(c.content >= self.min_coverage for c in of_version):
                found = of_version
        return found

    def reader_rows(self, question: str, found: list[_Candidate]) -> np.ndarray:
        """The learned reader's features of each candidate (:func:`ragdx.stages.reader.feature_matrix`):
        the cross-encoder, when the generator has one, reads the ``reader_depth`` best by
        ``content`` (words and meaning), each sentence after its heading."""
        weights = question_weights(question)
        total = sum(weights.values()) or 1.0
        heads: dict[tuple[str, ...], float] = {}
        for c in found:
            if c.heading not in heads:
                held = _terms(" ".join(c.heading))
                heads[c.heading] = sum(v for t, v in weights.items() if t in held) / total
        facts = [SentenceFacts(c.lexical, c.cosine, c.density, c.unit.rank, c.index, len(c.text.split()),
                               c.text.endswith(":"), any(ch.isdigit() for ch in c.text), c.table_row,
                               heads[c.heading]) for c in found]
        blend = [c.content for c in found]
        cross: list[float | None] | None = None
        if self.reader is not None:
            top = sorted(range(len(found)), key=lambda i: (-blend[i], -found[i].density,
                                                           found[i].unit.rank))[:self.reader_depth]
            texts = [_in_place(found[i]) for i in top]
            scores = self.reader.score(question, texts)
            # read without the names the sources as a whole are about too, and take the better
            # reading: the model leans on a company's name that every policy page holds
            aside = without_names(question, self.background(question))
            if aside != question:
                scores = np.maximum(scores, self.reader.score(aside, texts))
            read = dict(zip(top, (float(x) for x in scores)))
            cross = [read.get(i) for i in range(len(found))]
        return feature_matrix(facts, blend, cross)

    def _read(self, question: str, found: list[_Candidate]) -> list[_Candidate]:
        """The candidates' scores with the reader's share: the ``reader_depth`` best are read, each
        sentence after its heading (a table row already holds its header)."""
        assert self.reader is not None
        w = self.reader_weight
        top = sorted(range(len(found)), key=lambda i: (-found[i].score, -found[i].density,
                                                       found[i].unit.rank))[:self.reader_depth]
        texts = [_in_place(found[i]) for i in top]
        read = dict(zip(top, self.reader.score(question, texts)))
        return [replace(c, score=(1 - w) * c.score + w * _sigmoid(read[i] / self.reader_scale) if i in read
                        else (1 - w) * c.score) for i, c in enumerate(found)]

    def _next_key(self, c: _Candidate, units_used: set[str]) -> tuple[Any, ...]:
        """The order further statements are taken in. By the blend: from a unit not cited yet
        first (a question's evidence may be spread over several), then by score. With the learned
        reader: by its probability, a statement of a unit already cited counting
        ``reader_same_unit`` of it (1: no preference; 0: as the blend)."""
        again = c.unit.id in units_used
        if self.weights is None:
            return (again, -c.score, -c.density, c.unit.rank)
        return (-c.score * (self.reader_same_unit if again else 1.0), -c.density, c.unit.rank)

    def _older_differs(self, query: Query, first: Claim, context: Context) -> str:
        """For a question that names no version: a note naming each older version of the first
        claim's document, readable by the asker, whose text does not hold that claim's sentence
        (it follows that claim in the answer)."""
        assert self.store is not None
        unit = next(u for u in context.units if u.id == first.citations[0])
        sentence = " ".join(first.text.split())
        if sentence not in " ".join(unit.text.split()):
            return ""  # a table row read with its header is no sentence of the text to look for
        older = [v.document.version for v in self.store.versions(unit.doc_id)
                 if v.document.version != unit.version and v.document.status is not DocStatus.CURRENT
                 and self.store.readable(query.principal.groups, unit.doc_id, v.document.version)]
        differ = [v for v in older
                  if sentence not in " ".join(self.store.texts(unit.doc_id, v)[1].split())]
        return f"(Version {', '.join(differ)} of this page does not say this.)" if differ else ""

    def _part_scores(self, part: str, found: list[_Candidate]) -> list[float]:
        """Each candidate's score for one part of the question, as :meth:`_candidates` scores
        the whole question."""
        weights = question_weights(part)
        total = sum(weights.values()) or 1.0
        lexical = [sum(weights[t] for t in c.covered | _terms(c.text) if t in weights) / total for c in found]
        if self.semantic_weight <= 0:
            return lexical
        w = self.semantic_weight
        return [(1 - w) * lx + w * m for lx, m in zip(lexical, self._meaning(part, [c.text for c in found]))]

    def _uncovered_parts(self, question: str, found: list[_Candidate],
                         chosen: list[_Candidate]) -> list[_Candidate]:
        """For a question that asks several things, the best sentence for each part that no
        chosen sentence answers nearly as well (``keep_ratio`` of that part's best), so that
        "which version ..., and what exception ...?" is answered in both parts."""
        parts = split_question(question)
        if len(parts) < 2:
            return []
        added: list[_Candidate] = []
        for part in parts:
            scores = self._part_scores(part, found)
            by_text = {c.text: s for c, s in zip(found, scores)}
            best = max(range(len(found)), key=lambda i: (scores[i], -found[i].unit.rank))
            if scores[best] < self.min_coverage:
                continue  # the context does not answer this part: no sentence is forced in
            taken = chosen + added
            if max(by_text[c.text] for c in taken) < self.keep_ratio * scores[best] \
                    and all(found[best].text != c.text for c in taken):
                added.append(found[best])
        return added

    def best_score(self, query: Query, context: Context) -> float:
        """The best sentence's score without the rank prior (what ``min_coverage`` is compared
        with), 0 without one."""
        return max((c.content for c in self._candidates(query.question, context)), default=0.0)

    def background(self, question: str) -> tuple[str, ...]:
        """The question's names the sources as a whole are about (``background_share`` of the
        store's documents hold them: :meth:`ragdx.stages.answerable.NameCoverage.background`);
        none without a store, or when fewer than two of the question's words would be left ("What
        is Python?" is about Python)."""
        names = self.names.background(question, self.background_share) if self.names is not None else ()
        return names if len(content_terms(without_names(question, names))) >= 2 else ()

    def _abstain(self, why: str, missing: tuple[str, ...], started: float, by_name: bool = False) -> Answer:
        config = self.config | {ABSTAINED_BY_NAME: True} if by_name else self.config
        return Answer(self.name, f"I cannot answer this from the sources: {why}.", (), True, missing,
                      self.name, Usage(), config, time.perf_counter() - started)

    def run(self, query: Query, context: Context) -> Answer:
        started = time.perf_counter()
        found = self._candidates(query.question, context)
        top = max(found, key=lambda c: c.content, default=None)
        reach, covered = (top.content, top.covered) if top else (None, frozenset())
        asked = asking(query.question)
        if reach is not None and reach < self.min_coverage and asked != query.question and len(content_terms(asked)) >= 2:
            # the asker's situation holds words no source need hold ("My migration tool wraps every
            # script in BEGIN/COMMIT."): what it asks is covered well enough, or it is not
            part = max(self._scored(asked, context), key=lambda c: c.content, default=None)
            if part is not None and part.content > reach:
                reach, covered = part.content, part.covered
        verdict = self.answerability.run(query, context, reach, covered, self.min_coverage)
        if not verdict.answer:
            return self._abstain(verdict.why, verdict.missing, started, verdict.by_name)
        # a statement about another member of a family the question names one of ("Error RFD-4021
        # means ..." for a question on RFD-5003) answers no part of it
        asked_ids = numbered_ids(query.question)
        readable = [c for c in found if not names_another(c.text, asked_ids)] or found
        first = readable[0]
        chosen = [first]
        units_used = {first.unit.id}
        told = set(first.covered)
        # further statements that score well enough and say something not said yet, each time
        # from a unit not yet cited first
        best = first.score
        # with the learned reader: its probability against the first's
        floor = (self.reader_keep if self.weights is not None else self.keep_ratio) * best
        # a list item that finishes the sentence leading into its list ("... for example: - the
        # customer's refund request was rejected ...;") says nothing on its own
        rest = [c for c in readable[1:] if c.score >= floor and c.text != first.text and not c.fragment]
        while len(chosen) < self.max_sentences:
            rest = [c for c in rest if c.covered - told or c.score >= self.tie_ratio * best]
            if not rest:
                break
            cand = min(rest, key=lambda c: self._next_key(c, units_used))
            rest = [c for c in rest if c.text != cand.text]
            chosen.append(cand)
            units_used.add(cand.unit.id)
            told |= cand.covered
        # a further statement that holds no word of the question answers no part of it: chosen for
        # its meaning alone, it is padding ("Returns within Germany are free." for "How long is
        # store credit valid?"), and one in a conflict would bring a note on what was not asked
        # (nor, short of ``name_only_cosine``, are the names the sources as a whole are about:
        # "Applies to all orders placed on northwind-outfitters.example" answers nothing of "Does
        # Northwind Outfitters ship to Switzerland?")
        aside = {stem(w) for n in self.background(query.question) for w in content_terms(n)}
        chosen = chosen[:1] + [c for c in chosen[1:] if c.covered - aside
                               or (c.covered and c.cosine >= self.name_only_cosine > 0)]
        for cand in self._uncovered_parts(query.question, readable, chosen):
            chosen.append(cand)
            units_used.add(cand.unit.id)
        if asks_default(query.question):
            chosen = _with_defaults(chosen, readable, query.question)
            units_used = {c.unit.id for c in chosen}
        claims = _with_exceptions(_prose_first(chosen))
        unit = asked_quantity(query.question)
        if unit is not None and not any(states_quantity(c.text, unit) for c in claims):
            # the answer must be of the kind asked for: the best sentence that states the amount,
            # when it answers the question well enough on its own (with its exception, as any)
            stating = next((c for c in readable if c.content >= self.min_coverage and states_quantity(c.text, unit)),
                           None)
            if stating is None:
                amount = f"a number of {unit}s" if unit else "a number"
                return self._abstain(f"the sources found do not state {amount}", (amount,), started)
            chosen = [stating] + chosen
            units_used.add(stating.unit.id)
            claims = _with_exceptions(chosen)
        # statements that share only the question's names with it answer nothing it asks of them;
        # one stating a default ("datetime.isoformat(sep='T', ...)") answers a question asking one
        default = _DEFAULT_WORDS if asks_default(query.question) else frozenset()
        verdict = self.answerability.asked_of_names(
            query.question, [(c.covered | (default if states_default(c.text) or SIGNATURE.search(c.text) else set()),
                              c.cosine) for c in chosen], self.name_only_cosine)
        if not verdict.answer:
            return self._abstain(verdict.why, verdict.missing, started)
        prefix = ""
        asked_weights = question_weights(query.question)
        chosen_texts = {" ".join(c.text.split()) for c in claims}

        def about_the_question(statement: str) -> bool:
            """Whether a statement holds half the question's terms, by weight ("store" alone, of
            "... bought at a partner store?", does not make a store-credit statement one)."""
            held = {stem(t) for t in content_terms(statement)}
            return sum(w for t, w in asked_weights.items() if t in held) >= 0.5 * sum(asked_weights.values())
        for conflict in context.conflicts:
            # a conflict the answer touches: of a unit it cites, and about what the question asks
            # or what a claim says (a store-credit conflict in the gift-card unit is no note on
            # whether gift cards are refunded)
            if (conflict.units[0] in units_used or conflict.units[1] in units_used) and (
                    any(about_the_question(s) for s in conflict.statements)
                    or chosen_texts & set(conflict.statements)):
                for unit_id, statement in zip(conflict.units, conflict.statements):
                    if all(c.text != statement for c in claims) and not _untrusted(statement):
                        claims.append(Claim(statement, (unit_id,)))
                prefix = "The sources disagree. "
        asked = VersionFilter.for_question(query.question, known=self.labels(context)).named
        if asked:  # the version it answers from, said
            by_id = {u.id: u.version for u in context.units}
            versions = list(dict.fromkeys(by_id[c.citations[0]] for c in claims if by_id.get(c.citations[0])))
            if versions:
                prefix += f"Version {', '.join(versions)}: "
        said = [f"{c.text} [{c.citations[0]}]" for c in claims]
        if not asked and self.store is not None:
            older = self._older_differs(query, claims[0], context)
            said[0] += f" {older}" if older else ""
        text = prefix + " ".join(said)
        return Answer(self.name, text, tuple(claims), False, (), self.name, Usage(), self.config,
                      time.perf_counter() - started)


#: a line of an interactive session's transcript: a prompt (Python's, a shell's, SQLite's)
_PROMPT = re.compile(r"^[ \t]*(?:>>>|\$ |sqlite>|\w+=[#>] )", re.MULTILINE)  # psql: "test_pub=# CREATE ..."
#: a statement that sends the reader elsewhere, or trails off
_POINTER = re.compile(r"^see\b", re.IGNORECASE)  # "See ...", "See also ..."
#: a statement that leans on the one before it: a connective or a pronoun that refers back
_LEANS_BACK = re.compile(r"^(?:thus|therefore|hence|so|also|however|but|otherwise|instead|then|consequently|"
                         r"accordingly|in other words|as a result|in that case|in this case|this way|that way|"
                         r"they|these|those|such)\b(?!-)|^it is also\b|^(?:this|that) (?:is|was|means|also)\b",
                         re.IGNORECASE)


def _may_lead(sentence: str, text: str, start: int) -> bool:
    """Whether a statement (at ``start`` in its unit's ``text``) may open an answer: a sentence of
    prose, not a line of an interactive session's transcript (a block of the text with a prompt
    line, such as ``>>> foo()`` and the traceback it prints), a pointer elsewhere ("See also
    ..."), a sentence that leans on the one before it ("Thus, ...", "They are ...", "However,
    ...") or one that trails off ("..."). Such a statement may support an answer, but the
    answer's first sentence is the one a reader reads as the answer."""
    if _POINTER.match(sentence) or _LEANS_BACK.match(sentence) or sentence.rstrip().endswith(("\u2026", "...")) \
            or ">>>" in sentence:
        return False
    block_start = text.rfind("\n\n", 0, start)
    block_end = text.find("\n\n", start)
    block = text[block_start + 2 if block_start >= 0 else 0:block_end if block_end >= 0 else len(text)]
    return _PROMPT.search(block) is None


def _continues(sentence: str, text: str, start: int) -> bool:
    """Whether a statement (at ``start`` in its unit's ``text``) is a list item that finishes the
    sentence leading into its list: the line before the list ends with a colon, and the item opens
    in lower case and ends as a clause does (``;``, ``,``, "and", "or"), as in "Use a manual refund
    only when ..., for example: - the customer's refund request was rejected with error RFD-4021,
    ...;"."""
    line_start = text.rfind("\n", 0, start) + 1
    if not LIST_ITEM.match(text[line_start:start + 1]) or not sentence[:1].islower() \
            or re.search(r"(?:[;,]|\s(?:and|or))\s*$", sentence) is None:
        return False
    before = [line for line in text[:line_start].splitlines() if line.strip()]
    while before and LIST_ITEM.match(before[-1]):
        before.pop()
    return bool(before) and before[-1].rstrip().endswith(":")


#: the words of asking for a default ("set to out of the box", "default value")
_DEFAULT_WORDS = frozenset(stem(w) for w in "default value set setting out box".split())


def _entry(c: _Candidate) -> tuple[str, str, tuple[str, ...]]:
    """The entry a statement stands under: its document, version and headings."""
    return c.unit.doc_id, c.unit.version, c.heading


def _with_defaults(chosen: list[_Candidate], found: list[_Candidate], question: str) -> list[_Candidate]:
    """For a question asking for a default (:func:`ragdx.text.asks_default`): the answer's
    defaults are those of the entries it is about. A reference states a setting's default in a
    sentence that never names the setting ("The default value is four megabytes (4MB).", under
    "work_mem (integer)"), so a bare default of another entry ("The default value is 2MB." under
    "vacuum_buffer_usage_limit": no word of the question of its own) answers nothing and is left
    out, unless it opens the answer; and when no statement kept states a default, the best-read
    statement that does, under the entry of a statement chosen (the first such entry in the
    answer's order), follows that statement. When the question names a setting or a function
    whose own entry states a default ("the default vacuum_cost_limit": "The default is 200." under
    "vacuum_cost_limit (integer)"), that statement opens the answer: the default of a neighbouring
    entry that names it ("If -1 is specified (which is the default), the regular vacuum_cost_limit
    value will be used.") is no answer to it."""
    names = api_names(question)
    own = next((d for d in found if d.heading and states_default(d.text)
                and documents_name(" > ".join(d.heading), names)), None) if names else None
    if own is not None:
        chosen = [own, *(c for c in chosen if c.text != own.text)]
    asked = set(question_weights(question)) - _DEFAULT_WORDS
    about = [_entry(c) for i, c in enumerate(chosen) if i == 0 or not states_default(c.text)]
    kept = [c for i, c in enumerate(chosen)
            if i == 0 or not states_default(c.text) or _entry(c) in about or _terms(c.text) & asked]
    if any(states_default(c.text) for c in kept):
        return kept
    texts = {c.text for c in kept}
    for at, c in enumerate(kept):
        default = next((d for d in found if _entry(d) == _entry(c) and d.text not in texts and states_default(d.text)),
                       None)
        if default is not None:
            return [*kept[:at + 1], default, *kept[at + 1:]]
    return kept


def _prose_first(chosen: list[_Candidate]) -> list[_Candidate]:
    """The chosen statements with the first that may open an answer (:func:`_may_lead`) moved to
    the front, the others in their order; unchanged when none may (or the first may)."""
    lead = next((i for i, c in enumerate(chosen) if c.leads), 0)
    return [chosen[lead], *chosen[:lead], *chosen[lead + 1:]]


def _with_exceptions(chosen: list[_Candidate]) -> list[Claim]:
    """The chosen statements as claims, each followed by the statement after it when that one
    limits it (a rule's exception) or when it ends with a colon (what it announces)."""
    claims: list[Claim] = []
    for c in chosen:
        if any(c.text == claim.text for claim in claims):
            continue  # brought already, as the exception of the statement before it
        claims.append(Claim(c.text, (c.unit.id,)))
        following = _next_statement(c)
        if following is not None and (EXCEPTION_LIKE.search(following) or c.text.endswith(":")) \
                and all(following != claim.text for claim in claims):
            claims.append(Claim(following, (c.unit.id,)))
    return claims


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def _in_place(candidate: _Candidate) -> str:
    """A sentence as a reader sees it: after the heading of the section it stands in."""
    heading = candidate.heading[-1] if candidate.heading else ""
    return f"{heading}: {candidate.text}" if heading and heading not in candidate.text else candidate.text


def _terms(text: str) -> set[str]:
    return {stem(t) for t in content_terms(text)}


@functools.lru_cache(maxsize=4096)
def _entry_terms(heading: tuple[str, ...], names: frozenset[str]) -> frozenset[str]:
    """The words of the names whose entry the headings end in (:func:`ragdx.text.documents_name`)."""
    if not heading or not names:
        return frozenset()
    path = " > ".join(heading)
    return frozenset(stem(t) for n in names if documents_name(path, frozenset({n})) for t in content_terms(n))


def _next_statement(chosen: _Candidate) -> str | None:
    """The statement right after ``chosen`` in its unit, unless there is none or it is untrusted."""
    following = statements(chosen.unit.text, chosen.unit.header_text)[chosen.index + 1:chosen.index + 2]
    return following[0] if following and not _untrusted(following[0]) \
        and following[0] not in barred_statements(chosen.unit) else None


#: what ends a statement a sentence can be (a title has none of them)
_STOPS = (".", "!", "?", ":", ";", ")", '"', "'", "\u201d", "\u2019", "\u2026")


def _title(text: str, start: int, said: str) -> bool:
    """Whether a statement standing at ``start`` of ``text`` is a title, not a sentence: it has no
    final stop, does not end in a function word ("... executable, e.g. with" runs on into the
    code below it), and its paragraph is one line ("5. Your statutory rights", a numbered heading
    read as a list item) or short lines none of which ends with a stop ("NORTHWIND OUTFITTERS -
    WARRANTY TERMS" over "Version of 1 February 2026")."""
    words = said.split()
    if said.rstrip().endswith(_STOPS) or SIGNATURE.search(said) or not words or words[-1].lower() in STOPWORDS:
        return False  # a line that ends in "with" or "the" runs on into the block below it
    head = text.rfind("\n\n", 0, start)
    tail = text.find("\n\n", start)
    lines = [line.strip() for line in text[head + 2 if head >= 0 else 0:tail if tail >= 0 else len(text)].split("\n")
             if line.strip()]
    if len(lines) == 1:  # the statement is the whole line (a bullet aside), not the tail of a sentence before it
        return " ".join(LIST_ITEM.sub("", lines[0]).split()) == " ".join(said.split())
    return all(len(line) < 80 and not line.endswith(_STOPS) and not LIST_ITEM.match(line) for line in lines)


def _untrusted(sentence: str) -> bool:
    """A document's sentence that may not become an answer: an instruction to the system, or one
    holding a citation marker the system did not write."""
    return instruction_like(sentence) or citation_like(sentence)


class ChatClient:
    """A minimal OpenAI-compatible chat-completions client (standard library only).

    Args:
        base_url: the API's base, e.g. ``http://localhost:8000/v1``.
        model: the model name the endpoint expects.
        api_key: the bearer token; default the environment variable ``api_key_env``.
        api_key_env: where to read the key from when ``api_key`` is not given.
        timeout: seconds per request.
        max_retries: retries after the first attempt, on timeouts, 429 and 5xx.
        backoff: the first retry's delay in seconds, doubled each retry (a ``Retry-After`` header
            is honoured when larger).
        price_prompt_per_1k, price_completion_per_1k: prices per thousand tokens, for the cost.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 api_key_env: str = "RAGDX_LLM_API_KEY", timeout: float = 60.0, max_retries: int = 3,
                 backoff: float = 0.5, price_prompt_per_1k: float = 0.0,
                 price_completion_per_1k: float = 0.0, max_tokens: int = 512) -> None:
        if not base_url or not model:
            raise ConfigError("generation.base_url and generation.model must be set for the chat generator")
        self.base_url, self.model = base_url.rstrip("/"), model
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.prices = (price_prompt_per_1k, price_completion_per_1k)
        self.max_tokens = max_tokens

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, Usage]:
        """Send one chat request; returns the reply's text and its usage.

        Raises:
            ChatError: after the last retry, naming every attempt's failure.
        """
        body = json.dumps({"model": self.model, "messages": messages, "temperature": 0,
                           "max_tokens": self.max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        failures: list[str] = []
        started = time.perf_counter()
        for attempt in range(self.max_retries + 1):
            delay = self.backoff * (2 ** attempt)
            request = urllib.request.Request(f"{self.base_url}/chat/completions", body, headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    data = json.loads(response.read().decode("utf-8"))
                text = data["choices"][0]["message"]["content"] or ""
                usage = data.get("usage") or {}
                prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
                cost = prompt / 1000 * self.prices[0] + completion / 1000 * self.prices[1]
                return text, Usage(prompt, completion, cost, attempt + 1, time.perf_counter() - started)
            except urllib.error.HTTPError as exc:
                failures.append(f"attempt {attempt + 1}: HTTP {exc.code}")
                if exc.code != 429 and exc.code < 500:
                    break  # a client error will not go away by retrying
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    delay = max(delay, float(retry_after))
            except (urllib.error.URLError, socket.timeout, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                failures.append(f"attempt {attempt + 1}: {'timeout' if 'timed out' in str(reason) else reason}")
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                failures.append(f"attempt {attempt + 1}: malformed response ({exc})")
            if attempt < self.max_retries:
                time.sleep(delay)
        raise ChatError(f"chat completions at {self.base_url} failed: {'; '.join(failures)}")


class ChatGenerator:
    """Answers through a chat model, from a prompt that quotes the context as data.

    Args:
        client: the chat client.
    """

    kind = StageKind.GENERATION

    def __init__(self, client: ChatClient, name: str = "chat") -> None:
        self.client, self.name = client, name

    def run(self, query: Query, context: Context) -> Answer:
        started = time.perf_counter()
        config = {"method": "chat", "base_url": self.client.base_url, "model": self.client.model,
                  "timeout": self.client.timeout, "max_retries": self.client.max_retries}
        if not context.units:
            return Answer(self.name, "I cannot answer this from the sources: no source the asker may "
                          "read was found.", (), True, ("any source on the question",),
                          self.client.model, Usage(), config, time.perf_counter() - started)
        system, user = render_prompt(query, context)
        text, usage = self.client.complete([{"role": "system", "content": system},
                                            {"role": "user", "content": user}])
        claims = tuple(Claim(_CITATION.sub("", s).strip(), tuple(dict.fromkeys(_CITATION.findall(s))))
                       for s in sentences(text) if _CITATION.sub("", s).strip())
        abstained = not text.strip() or bool(_ABSTAIN.search(text)) and not any(c.citations for c in claims)
        missing = tuple(s for s in sentences(text) if _ABSTAIN.search(s)) if abstained else ()
        return Answer(self.name, text, () if abstained else claims, abstained, missing, self.client.model,
                      usage, config, time.perf_counter() - started)
