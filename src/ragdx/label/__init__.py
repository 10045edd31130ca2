"""From the evaluation sets teams already have to evidence labels (``ragdx label``, docs/label.md):
readers for RAGAS, DeepEval, plain and Hugging Face datasets; the labeller that proposes each
question's required evidence from its reference answer; the review page and its decisions."""

from __future__ import annotations

from typing import Any

from ragdx.label.propose import Labeller, Place, Proposal, ProposedGroup, ReferenceClaim, split_claims
from ragdx.label.readers import DatasetFormat, EvalCase, EvalSet, case_trace, read_eval_set

__all__ = ["ReferenceClaim", "Labeller", "Place", "Proposal", "ProposedGroup", "split_claims", "DatasetFormat",
           "EvalCase", "EvalSet", "case_trace", "read_eval_set", "build_labeller", "SCORERS"]

#: the scorers ``ragdx label --scorer`` takes: ``auto`` is the cross-encoder where the ``models``
#: extra is installed, else the words alone
SCORERS = ("auto", "cross-encoder", "words")


def build_labeller(store: Any, settings: Any, scorer: str = "auto", **options: Any) -> Labeller:
    """A labeller over the store with the channels the settings enable (searching every version,
    ``label.depth``-deep is their ``top_k``) and the strongest scorer available.

    Raises:
        ConfigError: an unknown scorer.
        MissingExtraError: ``cross-encoder`` asked for without the ``models`` extra.
    """
    from ragdx.build import build_encoder
    from ragdx.errors import ConfigError
    from ragdx.stages.bm25 import BM25Retriever
    from ragdx.stages.dense import DenseRetriever
    if scorer not in SCORERS:
        raise ConfigError(f"--scorer must be one of {', '.join(SCORERS)}, not {scorer!r}")
    r = settings.retrieval
    depth = options.pop("depth", 20)
    channels: list[Any] = []
    if r.bm25.enabled:
        channels.append(BM25Retriever(store, top_k=depth, prefix_weight=r.bm25.prefix_weight,
                                      text_weight=r.bm25.text_weight, current_only=False))
    if r.dense.enabled and store.active_space() is not None:
        channels.append(DenseRetriever(store, build_encoder(r.dense), top_k=depth, search=r.dense.search,
                                       current_only=False))
    pair = None
    if scorer != "words":
        from ragdx.encoders.packaged import packaged_root
        if scorer == "auto" and packaged_root() is None:
            pair = None
        else:
            from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER, CrossEncoder
            pair = CrossEncoder(DEFAULT_CROSS_ENCODER)
    return Labeller(store, channels, pair, **options)
