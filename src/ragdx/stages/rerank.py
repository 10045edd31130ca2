"""Reranking the fused candidates; the ``top_n`` best go on, the rest are dropped with their rank.

Reranking reorders what was recalled; it cannot recover what no channel found. Three backends:

- :class:`SentenceReranker` (the default with a dense encoder): reciprocal rank fusion of the
  fused rank and the rank by each candidate's best sentence, by meaning. It reorders without
  cutting at the defaults (``top_n`` is the fusion depth), so it never loses what fusion kept.
- :class:`FeatureReranker` (the offline default): a linear model over features of each
  candidate: its fused rank, the share of the question's content terms in its text and in
  its headings, and whether exact tokens of the question (codes, numbers such as ``RFD-4021``)
  appear verbatim. Its default weights are an unfitted prior; fit them on a validation set
  (:func:`ragdx.experiments.fit.fit_reranker`) for a real model.
- :class:`CrossEncoderReranker`: an ONNX cross-encoder (:mod:`ragdx.encoders.cross`; the packaged
  int8 ms-marco-MiniLM-L-12-v2 with the extra ``models``), alone or fused with the fused rank.
  Nogueira & Cho, "Passage Re-ranking with BERT", 2019.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from ragdx.errors import ConfigError
from ragdx.ingest.embed import chunk_statements
from ragdx.text import content_terms
from ragdx.protocols import Encoder, PairScorer, Store
from ragdx.stages._sentences import sentence_vectors
from ragdx.stages.fuse import RRF_C
from ragdx.types import Candidate, Chunk, DropCode, Dropped, Provenance, Query, Ranked, StageKind

def _rerank(name: str, ranked: Ranked, scores: Sequence[float], top_n: int, config: dict,
            started: float) -> Ranked:
    """Order by the new score (ties: the earlier rank), keep ``top_n``, drop the rest with reasons."""
    order = sorted(range(len(ranked.items)), key=lambda i: (-scores[i], ranked.items[i].rank))
    items, dropped = [], []
    for new_rank, i in enumerate(order, start=1):
        c = ranked.items[i]
        if new_rank > top_n:
            dropped.append(Dropped(c.chunk_id, c.doc_id, c.version, c.start, c.end,
                                   f"below the rerank cut: reranked to {new_rank} of "
                                   f"{len(order)} (from {c.rank}), rerank.top_n {top_n}", new_rank, DropCode.CUT))
            continue
        items.append(Candidate(c.chunk_id, c.doc_id, c.version, c.start, c.end, new_rank,
                               float(scores[i]), c.history + (Provenance(name, new_rank, float(scores[i])),)))
    return Ranked(name, StageKind.RERANK, tuple(items), tuple(dropped), config,
                  time.perf_counter() - started)


FEATURES = ("fused_rank", "term_coverage", "heading_coverage", "exact_tokens", "bm25_rank", "dense_rank",
            "dense_cosine", "sentence_sim", "sentence_rank")
#: the features that need the dense encoder (:class:`SentenceSimilarity`)
SENTENCE_FEATURES = ("sentence_sim", "sentence_rank")
#: An unfitted prior: the four first features count once, the channel features not at all. Fit real
#: weights on a validation set.
PRIOR_WEIGHTS = {"fused_rank": 1.0, "term_coverage": 1.0, "heading_coverage": 1.0, "exact_tokens": 1.0,
                 "bias": 0.0}
#: the channels whose own rank (and, for dense, cosine) are features: ragdx's channel names
CHANNEL_FEATURES = {"bm25": "bm25_rank", "dense": "dense_rank"}


_EXACT = re.compile(r"\b[\w.-]*\d[\w.-]*\b")  # tokens with a digit: codes, versions, amounts


def features(question: str, chunk: Chunk, fused_rank: int, history: Sequence[Provenance] = (),
             sentence: tuple[float, int] | None = None) -> dict[str, float]:
    """The feature values of one candidate, each in [0, 1]: ``history`` gives its rank in each
    retrieval channel (``bm25_rank``, ``dense_rank``: 1/log2(1 + rank), 0 when the channel did
    not find it) and the dense channel's cosine (``dense_cosine``, 0 when below 0 or absent);
    ``sentence`` its best sentence's cosine and rank (:func:`sentence_ranks`: ``sentence_sim``,
    0 when below 0, and ``sentence_rank`` as 1/log2(1 + rank); both 0 when not scored)."""
    terms = content_terms(question)
    body = set(content_terms(chunk.text))
    heads = set(content_terms(chunk.prefix + " " + " ".join(chunk.heading_path)))
    exact = _EXACT.findall(question)
    values = {
        "fused_rank": 1.0 / math.log2(1 + fused_rank),
        "term_coverage": sum(t in body for t in terms) / len(terms) if terms else 0.0,
        "heading_coverage": sum(t in heads for t in terms) / len(terms) if terms else 0.0,
        "exact_tokens": sum(t in chunk.text for t in exact) / len(exact) if exact else 0.0,
        "bm25_rank": 0.0, "dense_rank": 0.0, "dense_cosine": 0.0,
        "sentence_sim": max(0.0, sentence[0]) if sentence else 0.0,
        "sentence_rank": 1.0 / math.log2(1 + sentence[1]) if sentence else 0.0,
    }
    for step in history:
        if step.stage in CHANNEL_FEATURES:
            values[CHANNEL_FEATURES[step.stage]] = 1.0 / math.log2(1 + step.rank)
            if step.stage == "dense":
                values["dense_cosine"] = max(0.0, min(1.0, step.score))
    return values


class SentenceSimilarity:
    """Each chunk's best sentence's cosine with a question: the largest over its statements
    (:func:`ragdx.text.statements`; a chunk without one, such as a heading, counts as one
    sentence), in the encoder's space. Sentence vectors are kept with the encoder's, shared with
    the extractive generator (:func:`ragdx.stages._sentences.sentence_vectors`), and read from the
    store's statement vectors where it keeps them (computed at ingest); only the rest are encoded.

    The maximum over parts follows ColBERT's MaxSim (Khattab & Zaharia, "ColBERT: Efficient and
    Effective Passage Search via Contextualized Late Interaction over BERT", SIGIR 2020), here over
    sentences rather than tokens: a chunk's one sentence that answers is not diluted by the rest.

    Args:
        encoder: the dense encoder.
        store: the store whose statement vectors are read (None: every statement is encoded).
    """

    def __init__(self, encoder: Encoder, store: Store | None = None) -> None:
        self.encoder, self.store = encoder, store

    def run(self, question: str, chunks: Sequence[Chunk]) -> list[float]:
        parts = [chunk_statements(c) for c in chunks]
        flat = [t for texts in parts for t in texts]
        vectors = sentence_vectors(self.encoder)
        if self.store is not None:
            vectors.read(self.store, chunks, parts)
        cosines = vectors.cosines(question, flat)
        out, at = [], 0
        for texts in parts:
            out.append(float(cosines[at:at + len(texts)].max()))
            at += len(texts)
        return out


def sentence_ranks(similarity: SentenceSimilarity, question: str, items: Sequence[Candidate],
                   chunks: dict[str, Chunk], depth: int) -> list[tuple[float, int] | None]:
    """Each of the ``depth`` first candidates' best-sentence cosine and its rank among them (ties:
    the better fused rank); None for the candidates below ``depth``."""
    head = items[:depth]
    sims = similarity.run(question, [chunks[c.chunk_id] for c in head])
    by_sim = sorted(range(len(head)), key=lambda i: (-sims[i], i))
    rank = {i: r for r, i in enumerate(by_sim, start=1)}
    return [(sims[i], rank[i]) if i < len(head) else None for i in range(len(items))]


class SentenceReranker:
    """Reorders the fused candidates by reciprocal rank fusion of two ranks: the fused rank, and
    the rank by :class:`SentenceSimilarity` among the ``depth`` best fused candidates. A
    candidate below ``depth`` is not encoded and counts its fused rank twice, so it stays below
    every scored one. ``score = 1/(c + fused rank) + 1/(c + sentence rank)`` (Cormack, Clarke &
    Büttcher, SIGIR 2009; the sentence score follows Khattab & Zaharia's MaxSim, SIGIR 2020).

    Measured on the dev set's fit half (docs/benchmarks.md, "Third round"): the required
    evidence reaches a 3,000-token context for 108 of 131 questions, against 99 in fused order.

    Args:
        store: the store, to read each candidate's text.
        encoder: the dense encoder.
        top_n: how many candidates go on (at least the fusion depth: none is dropped).
        depth: how many of the best fused candidates are scored by their sentences.
        c: the reciprocal rank constant.
    """

    kind = StageKind.RERANK

    def __init__(self, store: Store, encoder: Encoder, *, top_n: int = 150, depth: int = 75,
                 c: float = RRF_C, name: str = "sentences") -> None:
        if depth < 1 or c < 0:
            raise ConfigError(f"the sentence reranker needs rerank.depth >= 1 and c >= 0, not {depth} and {c}")
        self.store, self.top_n, self.depth, self.c, self.name = store, top_n, depth, c, name
        self.similarity = SentenceSimilarity(encoder, store)

    def run(self, query: Query, ranked: Ranked) -> Ranked:
        started = time.perf_counter()
        chunks = self.store.chunks_by_id([c.chunk_id for c in ranked.items[:self.depth]])
        found = sentence_ranks(self.similarity, query.question, ranked.items, chunks, self.depth)
        scores = [1.0 / (self.c + i) + 1.0 / (self.c + (s[1] if s else i))
                  for i, s in enumerate(found, start=1)]
        config = {"method": "sentences", "top_n": self.top_n, "depth": self.depth, "c": self.c,
                  "encoder": self.similarity.encoder.space.id}
        return _rerank(self.name, ranked, scores, self.top_n, config, started)


class FeatureReranker:
    """A linear model over :data:`FEATURES` (see the module docstring).

    Args:
        store: the store, to read each candidate's text.
        top_n: how many candidates go on.
        weights: a weight per feature and a ``bias``; default :data:`PRIOR_WEIGHTS`.
        fitted_on: what the weights were fitted on (recorded in traces); empty for the prior.
        encoder: the dense encoder, for :data:`SENTENCE_FEATURES` (needed when they weigh).
        depth: how many of the best fused candidates get sentence features.
    """

    kind = StageKind.RERANK

    def __init__(self, store: Store, *, top_n: int = 10, weights: dict[str, float] | None = None,
                 fitted_on: str = "", name: str = "features", encoder: Encoder | None = None,
                 depth: int = 75) -> None:
        self.store, self.top_n, self.name, self.depth = store, top_n, name, depth
        self.weights = dict(weights or PRIOR_WEIGHTS)
        unknown = set(self.weights) - set(FEATURES) - {"bias"}
        if unknown:
            raise ConfigError(f"rerank weights name unknown features {sorted(unknown)}; "
                              f"features are {', '.join(FEATURES)} and bias")
        if encoder is None and any(self.weights.get(f) for f in SENTENCE_FEATURES):
            raise ConfigError(f"rerank weights weigh {', '.join(SENTENCE_FEATURES)}, which need the dense "
                              f"encoder: set retrieval.dense.enabled = true")
        self.similarity = SentenceSimilarity(encoder, store) if encoder is not None else None
        self.fitted_on = fitted_on

    @classmethod
    def from_file(cls, store: Store, path: str | Path, top_n: int = 10, *, encoder: Encoder | None = None,
                  depth: int = 75) -> "FeatureReranker":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(store, top_n=top_n, weights=data["weights"], fitted_on=data.get("fitted_on", ""),
                       encoder=encoder, depth=depth)
        except FileNotFoundError:
            raise ConfigError(f"rerank.weights_file not found: {path}") from None
        except OSError as exc:  # a folder, no permission
            raise ConfigError(f"rerank.weights_file {path}: cannot read it: {exc.strerror}",
                              key="rerank.weights_file") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"rerank.weights_file {path} is not a fitted reranker: {exc}") from None

    def score(self, values: dict[str, float]) -> float:
        return self.weights.get("bias", 0.0) + sum(self.weights.get(f, 0.0) * v for f, v in values.items())

    def run(self, query: Query, ranked: Ranked) -> Ranked:
        started = time.perf_counter()
        chunks = self.store.chunks_by_id([c.chunk_id for c in ranked.items])
        found = (sentence_ranks(self.similarity, query.question, ranked.items, chunks, self.depth)
                 if self.similarity is not None else [None] * len(ranked.items))
        scores = [self.score(features(query.question, chunks[c.chunk_id], c.rank, c.history, s))
                  for c, s in zip(ranked.items, found)]
        config = {"method": "features", "top_n": self.top_n, "weights": self.weights,
                  "fitted_on": self.fitted_on or "unfitted prior"}
        if self.similarity is not None:
            config |= {"depth": self.depth, "encoder": self.similarity.encoder.space.id}
        return _rerank(self.name, ranked, scores, self.top_n, config, started)


class CrossEncoderReranker:
    """A cross-encoder scores each (question, candidate text) pair among the ``depth`` best fused
    candidates (:class:`ragdx.encoders.cross.CrossEncoder`: an ONNX model on onnxruntime; the
    packaged int8 ms-marco-MiniLM-L-12-v2 by default, extra ``models``). The text scored is the
    candidate's prefix (its headings) and text, cut to ``max_tokens`` with the question.

    ``combine`` says what the score orders:

    - ``alone``: the cross-encoder's logit; the candidates below ``depth`` are not scored and are
      dropped, with that reason (Nogueira & Cho, "Passage Re-ranking with BERT", 2019);
    - ``rrf``: reciprocal rank fusion of the fused rank and the cross-encoder's rank among the
      ``depth`` scored, as :class:`SentenceReranker` fuses its sentence rank
      (``1/(c + fused rank) + 1/(c + cross-encoder rank)``; Cormack, Clarke & Büttcher, SIGIR
      2009); a candidate below ``depth`` counts its fused rank twice and is kept.

    The trace's config names the model, the hash of its files and where they came from; each
    kept candidate's ``score`` is the combined score, and for ``rrf`` the config keeps every
    scored candidate's logit (``logits``, by chunk id).

    Args:
        store: the store, to read each candidate's text.
        scorer: the cross-encoder (:class:`ragdx.encoders.cross.CrossEncoder`, or any
            :class:`~ragdx.protocols.PairScorer`).
        top_n: how many candidates go on.
        depth: how many of the best fused candidates are scored (the candidate count).
        combine: ``alone`` or ``rrf``.
        c: the reciprocal rank constant of ``rrf``.
    """

    kind = StageKind.RERANK
    COMBINE = ("alone", "rrf")

    def __init__(self, store: Store, scorer: PairScorer, *, top_n: int = 10, depth: int = 75,
                 combine: str = "alone", c: float = RRF_C, name: str = "cross-encoder") -> None:
        if combine not in self.COMBINE:
            raise ConfigError(f"rerank.combine must be one of {', '.join(self.COMBINE)}, not {combine!r}")
        if depth < 1 or c < 0:
            raise ConfigError(f"the cross-encoder reranker needs rerank.depth >= 1 and c >= 0, not {depth} and {c}")
        self.store, self.scorer, self.top_n, self.depth = store, scorer, top_n, depth
        self.combine, self.c, self.name = combine, c, name

    def warm_up(self) -> None:
        """Load the model now rather than on the first query."""
        self.scorer.warm_up()

    @property
    def config(self) -> dict[str, object]:
        config: dict[str, object] = {"method": "cross-encoder", **self.scorer.config, "top_n": self.top_n,
                                     "depth": self.depth, "combine": self.combine}
        return config | ({"c": self.c} if self.combine == "rrf" else {})

    def run(self, query: Query, ranked: Ranked) -> Ranked:
        started = time.perf_counter()
        head = ranked.items[:self.depth]
        chunks = self.store.chunks_by_id([c.chunk_id for c in head])
        texts = [f"{chunks[c.chunk_id].prefix}\n{chunks[c.chunk_id].text}".strip() for c in head]
        logits = [float(x) for x in self.scorer.score(query.question, texts)]
        config = self.config
        if self.combine == "alone":
            scored = Ranked(ranked.stage, ranked.kind, head, ranked.dropped, ranked.config, ranked.seconds)
            out = _rerank(self.name, scored, logits, self.top_n, config, started)
            unscored = tuple(Dropped(c.chunk_id, c.doc_id, c.version, c.start, c.end,
                                     f"not scored: fused rank {c.rank}, below rerank.depth {self.depth}", c.rank,
                                     DropCode.NOT_SCORED)
                             for c in ranked.items[self.depth:])
            return replace(out, dropped=out.dropped + unscored)
        by_logit = sorted(range(len(head)), key=lambda i: (-logits[i], i))
        ce_rank = {i: r for r, i in enumerate(by_logit, start=1)}
        scores = [1.0 / (self.c + i) + 1.0 / (self.c + ce_rank.get(i - 1, i))
                  for i in range(1, len(ranked.items) + 1)]
        config["logits"] = {c.chunk_id: x for c, x in zip(head, logits)}
        return _rerank(self.name, ranked, scores, self.top_n, config, started)
