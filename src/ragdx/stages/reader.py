"""The extractive generator's learned reader: which of the context's sentences answer a question.

Each candidate sentence is described by a few numbers (:data:`FEATURES`): how much of the
question it holds (weighted content-term coverage, its density), its cosine with the question in
the dense encoder's space, its place in the order those two give, the rank of its unit in the
context and its position in the unit, its length, whether it announces a list (ends with a
colon), states a number, is a table row, how much of the question its section's heading holds,
and, when a cross-encoder is at hand, the cross-encoder's reading of the question with the
sentence in place (after its heading; a table row with its header). A logistic regression over
them (Cox, "The regression analysis of binary sequences", JRSS B 1958) gives each sentence the
probability that it states required evidence; the generator puts the most probable first.

The weights are a few dozen floats fitted on the dev set's fit half by
``bench/quality/train_reader.py`` and shipped as ``reader.json`` beside this module: one set with the
cross-encoder (extra ``models``), one without; a machine without the extra reads with the second.
Fitting is numpy only (:func:`fit_logistic`, Newton's method with an L2 penalty), so a test
refits the shipped weights from the shipped feature table and compares.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragdx.errors import ConfigError

__all__ = ["FEATURES", "READER_FILE", "ReaderWeights", "SentenceFacts", "feature_matrix", "fit_logistic",
           "fit_standardised", "newton_logistic", "load_weights"]

READER_FILE = Path(__file__).with_name("reader.json")

#: the features, in the order of a row of :func:`feature_matrix`; the cross-encoder's three last
FEATURES = ("lexical", "cosine", "density", "blend_gap", "blend_rank", "unit_rank", "position",
            "log_words", "announces", "number", "table_row", "heading_cover",
            "cross", "cross_gap", "read")
WITHOUT_CROSS = FEATURES[:-3]


@dataclass(frozen=True, slots=True)
class SentenceFacts:
    """What the reader knows of one candidate sentence (the generator's ``_Candidate`` has these)."""

    lexical: float      # the weighted share of the question's content terms it holds
    cosine: float       # its cosine with the question (0 without an encoder)
    density: float      # question terms it holds per word
    unit_rank: int      # its unit's rank in the context (1 = first)
    index: int          # its position among its unit's statements (0 = first)
    words: int
    announces: bool     # ends with a colon: it introduces what follows
    number: bool        # holds a digit
    table_row: bool     # a table row read with its header
    heading_cover: float  # the share of the question's content terms its unit's headings hold


def feature_matrix(facts: Sequence[SentenceFacts], blend: Sequence[float],
                   cross: Sequence[float | None] | None = None) -> np.ndarray:
    """The rows of :data:`FEATURES` for one question's candidates.

    Args:
        facts: each candidate's facts.
        blend: each candidate's score by words and meaning (what the generator ranks by without
            a reader): the features ``blend_gap`` (its distance below the best) and ``blend_rank``
            (``1 / (1 + place)`` in that order) come from it.
        cross: each candidate's cross-encoder logit, None for a sentence it did not read (the
            deeper ones); None: no cross-encoder (the three last columns are 0).
    """
    n = len(facts)
    if n == 0:
        return np.zeros((0, len(FEATURES)))
    b = np.asarray(blend, float)
    order = np.argsort(-b, kind="stable")
    place = np.empty(n)
    place[order] = np.arange(n)
    rows = np.zeros((n, len(FEATURES)))
    rows[:, 0] = [f.lexical for f in facts]
    rows[:, 1] = [f.cosine for f in facts]
    rows[:, 2] = [min(1.0, f.density) for f in facts]
    rows[:, 3] = b - b.max()
    rows[:, 4] = 1.0 / (1.0 + place)
    rows[:, 5] = [1.0 / math.log2(1 + f.unit_rank) for f in facts]
    rows[:, 6] = [1.0 / (1 + f.index) for f in facts]
    rows[:, 7] = [math.log1p(f.words) for f in facts]
    rows[:, 8] = [f.announces for f in facts]
    rows[:, 9] = [f.number for f in facts]
    rows[:, 10] = [f.table_row for f in facts]
    rows[:, 11] = [f.heading_cover for f in facts]
    if cross is not None:
        read = [x is not None for x in cross]
        if any(read):
            logits = np.array([x if x is not None else 0.0 for x in cross], float)
            best = max(x for x in cross if x is not None)
            rows[:, 12] = np.where(read, 1.0 / (1.0 + np.exp(-np.clip(logits, -60, 60))), 0.0)
            rows[:, 13] = np.where(read, logits - best, 0.0)
            rows[:, 14] = read
    return rows


@dataclass(frozen=True, slots=True)
class ReaderWeights:
    """A fitted reader: the features it uses, their standardisation, and its coefficients.

    Args:
        features: the names it reads (:data:`FEATURES` or :data:`WITHOUT_CROSS`).
        mean, scale: each feature's mean and standard deviation on the training rows.
        coef: one coefficient per feature, on the standardised values.
        intercept: the bias.
    """

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float

    @property
    def cross(self) -> bool:
        """Whether it reads the cross-encoder's score."""
        return "cross" in self.features

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """Each row's probability of stating required evidence."""
        at = [FEATURES.index(f) for f in self.features]
        z = (rows[:, at] - np.asarray(self.mean)) / np.asarray(self.scale)
        return 1.0 / (1.0 + np.exp(-np.clip(z @ np.asarray(self.coef) + self.intercept, -60, 60)))

    @property
    def digest(self) -> str:
        """The first 16 hex digits of a SHA-256 over the weights as :meth:`to_dict` writes them:
        what a trace and the result cache's key record of them."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(self.features), "mean": [round(x, 6) for x in self.mean],
                "scale": [round(x, 6) for x in self.scale], "coef": [round(x, 6) for x in self.coef],
                "intercept": round(self.intercept, 6)}


def newton_logistic(z: np.ndarray, y: np.ndarray, penalty: np.ndarray, *, sample_weight: np.ndarray | None = None,
                    iterations: int = 50, tol: float = 1e-10) -> np.ndarray:
    """The coefficients of a logistic regression of ``y`` on the columns of ``z`` by Newton's
    method (iteratively reweighted least squares), each coefficient under its own L2 ``penalty``
    (0 for an intercept column), each row counted ``sample_weight`` times (default once).
    Deterministic: the same rows give the same coefficients. The reader's fit and the feature
    reranker's (:func:`ragdx.experiments.fit.fit_reranker`) both use it."""
    weight = np.ones(len(y)) if sample_weight is None else sample_weight
    w = np.zeros(z.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -60, 60)))
        grad = z.T @ (weight * (p - y)) + penalty * w
        hess = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < tol:
            break
    return w


def fit_logistic(rows: np.ndarray, labels: np.ndarray, features: Sequence[str], l2: float = 1.0,
                 iterations: int = 50) -> ReaderWeights:
    """A logistic regression on the named columns of ``rows``, standardised, by Newton's method
    (iteratively reweighted least squares) with an L2 penalty ``l2`` on the coefficients (not the
    intercept). Deterministic: the same rows give the same weights.

    Raises:
        ConfigError: no rows, or labels of one class only.
    """
    mean, scale, w = fit_standardised(rows[:, [FEATURES.index(f) for f in features]], labels, l2, iterations)
    return ReaderWeights(tuple(features), tuple(float(v) for v in mean), tuple(float(v) for v in scale),
                         tuple(float(v) for v in w[1:]), float(w[0]))


def fit_standardised(x: np.ndarray, labels: np.ndarray, l2: float = 1.0,
                     iterations: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fit_logistic` on any columns: each column's mean and standard deviation (1 where it
    is constant), and the coefficients on the standardised columns, the intercept first.

    Raises:
        ConfigError: no rows, or labels of one class only.
    """
    y = np.asarray(labels, float)
    if len(y) == 0 or y.min() == y.max():
        raise ConfigError("the reader needs positive and negative sentences to fit")
    mean, scale = x.mean(0), x.std(0)
    scale[scale == 0] = 1.0
    z = np.hstack([np.ones((len(y), 1)), (x - mean) / scale])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    return mean, scale, newton_logistic(z, y, penalty, iterations=iterations)


def load_weights(path: str | Path = READER_FILE) -> dict[str, ReaderWeights]:
    """The fitted readers of a weights file, by name (``cross``: with the cross-encoder;
    ``plain``: without).

    Raises:
        ConfigError: an unreadable file, or one whose features or lengths do not fit.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        out = {}
        for name in ("cross", "plain"):
            d = data["readers"][name]
            w = ReaderWeights(tuple(d["features"]), tuple(d["mean"]), tuple(d["scale"]), tuple(d["coef"]),
                              float(d["intercept"]))
            if set(w.features) - set(FEATURES) or not (
                    len(w.features) == len(w.mean) == len(w.scale) == len(w.coef)):
                raise ValueError(f"reader {name!r}: unknown features or lengths that differ")
            out[name] = w
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"generation.reader_weights: cannot read {str(path)!r} ({exc})") from None
