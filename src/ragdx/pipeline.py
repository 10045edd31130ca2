"""Building the stages from settings, and running them in order, recording every artifact.

The pipeline never mutates its inputs: each stage returns a new frozen artifact, and the
:class:`Trace` keeps all of them, dropped items and reasons included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragdx.config import DenseSettings, Settings
from ragdx.errors import ConfigError
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter, TokenCounter
from ragdx.ingest.embed import Embedder
from ragdx.ingest.ingestor import Ingestor
from ragdx.protocols import Encoder
from ragdx.stages.assemble import ContextAssembler
from ragdx.stages.bm25 import BM25Retriever
from ragdx.stages.dense import DenseRetriever
from ragdx.stages.fuse import RRF, WeightedFusion
from ragdx.stages.generate import ChatClient, ChatGenerator, ExtractiveGenerator
from ragdx.stages.govern import Governance
from ragdx.stages.rerank import CrossEncoderReranker, FeatureReranker
from ragdx.stages.verify import ClaimVerifier, LexicalChecker, LlmJudge, NliChecker
from ragdx.store.sqlite import SQLiteStore
from ragdx.types import Answer, Context, Query, Ranked, StageKind, Verification

StageOutput = Ranked | Context | Answer | Verification

__all__ = ["Trace", "Pipeline", "build_encoder", "build_ingestor", "chunker_for"]


def build_encoder(dense: DenseSettings) -> Encoder:
    """The encoder the dense settings name (loaded lazily, on first use)."""
    common: dict[str, Any] = {"batch_size": dense.batch_size, "query_prefix": dense.query_prefix,
                              "passage_prefix": dense.passage_prefix}
    if dense.backend == "onnx":
        from ragdx.encoders.onnx import OnnxEncoder
        if dense.model.endswith(".onnx"):  # a file built by `ragdx build-encoder`, its vocab.txt beside it
            path = Path(dense.model)
            return OnnxEncoder(path.stem, model_path=path, vocab_path=path.parent / "vocab.txt", **common)
        return OnnxEncoder(dense.model if dense.model != "all-MiniLM-L6-v2" else "all-MiniLM-L6-v2-int8",
                           **common)
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    return SentenceTransformerEncoder(dense.model, **common)


def chunker_for(settings: Settings, encoder: Encoder | None) -> tuple[ChunkerConfig, TokenCounter]:
    """The chunker config and token counter: by default the dense encoder's own tokenizer, so
    chunks fit the encoder's window."""
    mode = settings.chunking.tokenizer
    if mode == "encoder" and encoder is None:
        raise ConfigError("chunking.tokenizer is 'encoder' but the dense channel is off")
    counter: TokenCounter = encoder if encoder is not None and mode in ("auto", "encoder") \
        else RegexTokenCounter()  # type: ignore[assignment]
    config = ChunkerConfig(max_tokens=settings.chunking.max_tokens,
                           overlap_tokens=settings.chunking.overlap_tokens, tokenizer=counter.name)
    return config, counter


def build_ingestor(store: SQLiteStore, settings: Settings, encoder: Encoder | None = None) -> Ingestor:
    """An ingestor that chunks (and, with the dense channel on, embeds) as the settings say."""
    dense = settings.retrieval.dense
    backend = type(encoder).__name__ if encoder is not None else dense.backend
    if dense.enabled and encoder is None:
        encoder = build_encoder(dense)
    if not dense.enabled:
        encoder = None
    config, counter = chunker_for(settings, encoder)
    embedder = Embedder(encoder, with_prefix=dense.with_prefix, backend=backend) if encoder else None
    return Ingestor(store, config, counter, embedder)


@dataclass(frozen=True, slots=True)
class Trace:
    """Every stage's artifact for one query, in pipeline order: the ranked lists of retrieval,
    fusion, reranking and governance, then the context, the answer and its verification."""

    query: Query
    stages: tuple[StageOutput, ...]
    seconds: float
    notes: tuple[str, ...] = field(default=())

    def stage(self, name: str) -> StageOutput:
        for output in self.stages:
            if output.stage == name:
                return output
        raise KeyError(f"no stage {name!r} in this trace; stages: {[s.stage for s in self.stages]}")

    @property
    def ranked(self) -> tuple[Ranked, ...]:
        return tuple(s for s in self.stages if isinstance(s, Ranked))

    @property
    def final(self) -> Ranked:
        """The last ranked list (what reached assembly)."""
        return self.ranked[-1]

    @property
    def context(self) -> Context | None:
        return next((s for s in self.stages if isinstance(s, Context)), None)

    @property
    def answer(self) -> Answer | None:
        return next((s for s in self.stages if isinstance(s, Answer)), None)

    @property
    def verification(self) -> Verification | None:
        return next((s for s in self.stages if isinstance(s, Verification)), None)


class Pipeline:
    """The retrieval pipeline the settings describe: channels, fusion, reranking.

    Args:
        store: the store.
        settings: the settings (defaults when None).
        encoder: an encoder to use instead of the one the settings name (tests, custom models).
    """

    def __init__(self, store: SQLiteStore, settings: Settings | None = None, *,
                 encoder: Encoder | None = None, context_counter: TokenCounter | None = None) -> None:
        self.store = store
        self.settings = settings = settings or Settings()
        r = settings.retrieval
        self.channels: list[Any] = []
        if r.bm25.enabled:
            self.channels.append(BM25Retriever(store, top_k=r.bm25.top_k,
                                               prefix_weight=r.bm25.prefix_weight,
                                               text_weight=r.bm25.text_weight))
        self.encoder = None
        if r.dense.enabled:
            self.encoder = encoder or build_encoder(r.dense)
            self.channels.append(DenseRetriever(store, self.encoder, top_k=r.dense.top_k,
                                                search=r.dense.search))
        if not self.channels:
            raise ConfigError("no retrieval channel is enabled: set retrieval.bm25.enabled or "
                              "retrieval.dense.enabled to true")
        f = settings.fusion
        self.fusion = WeightedFusion.from_file(f.weights_file, f.top_k) if f.method == "weighted" \
            else RRF(f.c, f.top_k)
        rr = settings.rerank
        self.reranker: Any = None
        if rr.method == "features":
            self.reranker = FeatureReranker.from_file(store, rr.weights_file, rr.top_n) \
                if rr.weights_file else FeatureReranker(store, top_n=rr.top_n)
        elif rr.method == "cross-encoder":
            self.reranker = CrossEncoderReranker(store, rr.model, top_n=rr.top_n,
                                                 batch_size=rr.batch_size)

        self.governance = Governance(store, allow_superseded=settings.governance.allow_superseded)
        c = settings.context
        counter = context_counter or (self.encoder if self.encoder is not None and c.tokenizer in
                                      ("auto", "encoder") else RegexTokenCounter())
        if c.tokenizer == "encoder" and self.encoder is None and context_counter is None:
            raise ConfigError("context.tokenizer is 'encoder' but the dense channel is off")
        self.assembler = ContextAssembler(store, counter, budget_tokens=c.budget_tokens,  # type: ignore[arg-type]
                                          expand=c.expand, min_tokens=c.min_tokens)
        g = settings.generation
        client = None
        if g.method == "chat" or settings.verify.method == "llm":
            client = ChatClient(g.base_url, g.model, api_key_env=g.api_key_env, timeout=g.timeout,
                                max_retries=g.max_retries, max_tokens=g.max_tokens,
                                price_prompt_per_1k=g.price_prompt_per_1k,
                                price_completion_per_1k=g.price_completion_per_1k)
        self.generator: Any = ChatGenerator(client) if g.method == "chat" and client else \
            ExtractiveGenerator(min_coverage=g.min_coverage, keep_ratio=g.keep_ratio,
                                max_sentences=g.max_sentences)
        v = settings.verify
        checker: Any = LexicalChecker()
        if v.method == "nli":
            checker = NliChecker(v.model)
        elif v.method == "llm" and client is not None:
            checker = LlmJudge(client)
        self.verifier = ClaimVerifier(store, checker)

    def warm_up(self) -> None:
        """Load every model now (the encoder's, the cross-encoder's), so that no query's latency
        includes a model load."""
        if self.encoder is not None:
            self.encoder.encode(["warm up"], kind="query")
        load = getattr(self.reranker, "warm_up", None)
        if load is not None:
            load()

    def retrieve(self, query: Query) -> list[Ranked]:
        """Each channel's ranked list."""
        return [channel.run(query) for channel in self.channels]

    def rank(self, query: Query) -> list[Ranked]:
        """Every ranked list: the channels, the fusion, the reranking, then governance."""
        stages = self.retrieve(query)
        fused = self.fusion.run(stages)
        stages.append(fused)
        if self.reranker is not None:
            stages.append(self.reranker.run(query, fused))
        stages.append(self.governance.run(query, stages[-1]))
        return stages

    def answer(self, query: Query, ranked: Ranked) -> tuple[Context, Answer, Verification]:
        """Assembly, generation and verification from a governed ranked list."""
        context = self.assembler.run(query, ranked)
        answer = self.generator.run(query, context)
        return context, answer, self.verifier.run(query, context, answer)

    def run(self, query: Query) -> Trace:
        """Run every stage for one query."""
        started = time.perf_counter()
        stages: list[StageOutput] = list(self.rank(query))
        stages += self.answer(query, stages[-1])  # type: ignore[arg-type]
        return Trace(query, tuple(stages), time.perf_counter() - started)

    def resume(self, base: Trace, start: StageKind) -> Trace:
        """Run from stage ``start`` on, reusing ``base``'s output of every earlier stage (and of
        any retrieval channel whose name and config are unchanged). A reused output keeps its
        recorded time, so the trace's ``seconds`` is what the whole pipeline would take.

        Used by ablations: a context-budget variant does not recompute retrieval.
        """
        query = base.query
        stages: list[StageOutput] = [s for s in base.stages if s.kind.order < start.order]
        reused = [s.stage for s in stages]
        if start.order <= StageKind.RETRIEVAL.order:
            previous = {s.stage: s for s in base.ranked if s.kind is StageKind.RETRIEVAL}
            for channel in self.channels:
                old = previous.get(channel.name)
                if old is not None and dict(old.config) == channel.config:
                    stages.append(old)
                    reused.append(old.stage)
                else:
                    stages.append(channel.run(query))
        if start.order <= StageKind.FUSION.order:
            stages.append(self.fusion.run([s for s in stages if s.kind is StageKind.RETRIEVAL]))
        if start.order <= StageKind.RERANK.order and self.reranker is not None:
            stages.append(self.reranker.run(query, stages[-1]))
        if start.order <= StageKind.GOVERNANCE.order:
            stages.append(self.governance.run(query, stages[-1]))
        if start.order <= StageKind.CONTEXT.order:
            stages += self.answer(query, stages[-1])  # type: ignore[arg-type]
        elif start.order <= StageKind.GENERATION.order:
            context = base.context
            answer = self.generator.run(query, context)
            stages += [answer, self.verifier.run(query, context, answer)]
        elif start.order <= StageKind.CITATION.order:
            stages.append(self.verifier.run(query, base.context, base.answer))
        note = f"reused from the baseline: {', '.join(reused)}" if reused else ""
        return Trace(query, tuple(stages), sum(s.seconds for s in stages), base.notes + ((note,) if note else ()))
