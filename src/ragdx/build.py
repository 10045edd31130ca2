"""Building ragdx's own parts from settings: the encoder, the chunker, the ingestor and the
pipeline (its stages, in order). The one place that knows which class each setting names.

Everything built here can be replaced by a user's own object that satisfies the same protocol
(:mod:`ragdx.protocols`): pass your own stages to :class:`~ragdx.pipeline.Pipeline`, or build the
default ones with :func:`default_stages` and change the list.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from pathlib import Path
from typing import Any, Callable

from ragdx.config import DenseSettings, GenerationSettings, Settings
from ragdx.errors import ConfigError
from ragdx.executors import Executor, ParallelEncoder
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
from ragdx.ingest.embed import Embedder
from ragdx.ingest.ingestor import Ingestor
from ragdx.pipeline import Pipeline
from ragdx.protocols import Cache, Encoder, PairScorer, Stage, Store, TokenCounter, WritableStore
from ragdx.stages.assemble import ContextAssembler
from ragdx.stages.bm25 import BM25Retriever
from ragdx.stages.dense import DenseRetriever
from ragdx.stages.fuse import RRF, WeightedFusion
from ragdx.stages.generate import ChatClient, ChatGenerator, ExtractiveGenerator
from ragdx.stages.govern import Governance
from ragdx.stages.multihop import MultiHop
from ragdx.stages.reader import ReaderWeights
from ragdx.stages.rerank import CrossEncoderReranker, FeatureReranker, SentenceReranker
from ragdx.stages.rewrite import LlmRewriter, OfflineRewriter
from ragdx.stages.routed import RoutedRewrite
from ragdx.stages.verify import (
    ClaimVerifier, ClassifierChecker, LearnedChecker, LexicalChecker, LlmJudge, NliChecker, SupportChecker,
)
from ragdx.types import StageKind

log = logging.getLogger("ragdx")

__all__ = ["open_store", "cache_path", "open_cache", "build_encoder", "chunker_for", "build_ingestor", "default_stages",
           "build_pipeline"]


def open_store(location: str | Path, mode: str = "read") -> Store:
    """The store at ``location``: a ``postgresql://`` DSN opens a
    :class:`~ragdx.store.postgres.PostgresStore` (extra ``pg``), anything else a SQLite file.

    Args:
        location: a file path or a DSN.
        mode: ``read``, ``write`` (the store must exist) or ``create``.
    """
    from ragdx.store.postgres import PostgresStore, is_dsn
    if is_dsn(str(location)):
        return PostgresStore(str(location), mode)
    from ragdx.store.sqlite import SQLiteStore
    return SQLiteStore(location, mode)


def cache_path(location: str | Path, settings: Settings | None = None) -> Path | None:
    """Where the result cache of the store at ``location`` lives: ``cache.path`` if set, else the
    store's file with ``.cache`` added (``store.db.cache``); None for a PostgreSQL store without
    ``cache.path``."""
    from ragdx.store.postgres import is_dsn
    settings = settings or Settings()
    if settings.cache.path:
        return Path(settings.cache.path)
    return None if is_dsn(str(location)) else Path(f"{location}.cache")


def open_cache(location: str | Path, settings: Settings | None = None) -> Cache | None:
    """The result cache of the store at ``location`` (:class:`~ragdx.store.cache.SQLiteCache`),
    created when missing; None when ``cache.enabled`` is false or there is no cache path.

    Raises:
        StoreError: the cache file cannot be opened (a read-only folder, not a ragdx cache).
    """
    settings = settings or Settings()
    path = cache_path(location, settings)
    if not settings.cache.enabled or path is None:
        return None
    from ragdx.store.cache import SQLiteCache
    return SQLiteCache(path)


def build_encoder(dense: DenseSettings) -> Encoder:
    """The encoder the dense settings name (loaded lazily, on first use)."""
    common: dict[str, Any] = {"batch_size": dense.batch_size, "query_prefix": dense.query_prefix,
                              "passage_prefix": dense.passage_prefix}
    from ragdx.encoders.packaged import packaged
    found = packaged(dense.model)
    if found is not None and found.kind == "dense":
        if dense.backend != "onnx":
            raise ConfigError(f"retrieval.dense.model {dense.model!r} is a packaged int8 ONNX model: set "
                              "retrieval.dense.backend = 'onnx'")
        from ragdx.encoders.onnx import packaged_encoder
        # one text per pass: retrieval.dense.batch_size does not apply (see packaged_encoder)
        return packaged_encoder(dense.model, query_prefix=dense.query_prefix, passage_prefix=dense.passage_prefix)
    if dense.backend == "onnx":
        from ragdx.encoders.onnx import OnnxEncoder
        if dense.model.endswith(".onnx"):  # a file built by `ragdx build-encoder`, its vocab.txt beside it
            path = Path(dense.model)
            return OnnxEncoder(path.stem, model_path=path, vocab_path=path.parent / "vocab.txt", **common)
        return OnnxEncoder(dense.model if dense.model != "all-MiniLM-L6-v2" else "all-MiniLM-L6-v2-int8",
                           **common)
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    return SentenceTransformerEncoder(dense.model, runtime=dense.runtime, **common)


def chunker_for(settings: Settings, encoder: Encoder | None) -> tuple[ChunkerConfig, TokenCounter]:
    """The chunker config and token counter: by default the dense encoder's own tokenizer, so
    chunks fit the encoder's window."""
    mode = settings.chunking.tokenizer
    if mode == "encoder" and encoder is None:
        raise ConfigError("chunking.tokenizer is 'encoder' but the dense channel is off")
    counter: TokenCounter = encoder if encoder is not None and mode in ("auto", "encoder") \
        else RegexTokenCounter()
    config = ChunkerConfig(max_tokens=settings.chunking.max_tokens,
                           overlap_tokens=settings.chunking.overlap_tokens, tokenizer=counter.name)
    return config, counter


def build_embedder(dense: DenseSettings, encoder: Encoder | None = None, *,
                   backend: str | None = None) -> Embedder:
    """The embedder of the dense settings: their encoder (built when not given), passage prefix
    and backend name, as ingest and the index commands embed."""
    return Embedder(encoder if encoder is not None else build_encoder(dense), with_prefix=dense.with_prefix,
                    backend=backend or dense.backend, statements=dense.statement_vectors)


def build_ingestor(store: WritableStore, settings: Settings, encoder: Encoder | None = None, *,
                   workers: int = 1, executor: Executor | None = None,
                   encoder_factory: Callable[[], Encoder] | None = None) -> Ingestor:
    """An ingestor that chunks (and, with the dense channel on, embeds) as the settings say,
    parsing on ``workers`` processes.

    Args:
        executor: embed on its workers (:class:`~ragdx.executors.ParallelEncoder`); each builds
            the encoder once, from ``encoder_factory`` (default: the settings' encoder).
        encoder_factory: a picklable callable returning the encoder (with ``executor``).
    """
    dense = settings.retrieval.dense
    if encoder is None and encoder_factory is not None:
        encoder = encoder_factory()
    backend = type(encoder).__name__ if encoder is not None else dense.backend
    if dense.enabled and encoder is None:
        encoder = build_encoder(dense)
    if not dense.enabled:
        encoder = None
    config, counter = chunker_for(settings, encoder)
    if encoder is not None and executor is not None:
        encoder = ParallelEncoder(executor, encoder_factory or functools.partial(build_encoder, dense),
                                  local=encoder)
    embedder = build_embedder(dense, encoder, backend=backend) if encoder else None
    if isinstance(encoder, ParallelEncoder):  # a call fills every worker a few times over
        embedder.batch = max(embedder.batch, 4 * encoder.batch * max(1, executor.workers))
    return Ingestor(store, config, counter, embedder, workers=workers)


def default_stages(store: Store, settings: Settings, *, encoder: Encoder | None = None,
                   context_counter: TokenCounter | None = None) -> list[Stage]:
    """ragdx's own stages, in pipeline order, as the settings describe them.

    Args:
        store: the store the stages read.
        settings: the settings.
        encoder: the dense channel's encoder (built from the settings when None and needed).
        context_counter: the context budget's token counter (default: the encoder's tokenizer,
            or words and punctuation without a dense channel).
    """
    r = settings.retrieval
    # versions are checked inside retrieval, as access is, and again by governance
    current_only = r.versions == "current" and not settings.governance.allow_superseded
    stages: list[Stage] = []
    if r.bm25.enabled:
        stages.append(BM25Retriever(store, top_k=r.bm25.top_k, prefix_weight=r.bm25.prefix_weight,
                                    text_weight=r.bm25.text_weight, current_only=current_only))
    if r.dense.enabled:
        if encoder is None:
            raise ConfigError("the dense channel needs an encoder")
        stages.append(DenseRetriever(store, encoder, top_k=r.dense.top_k, search=r.dense.search,
                                     current_only=current_only))
    if not stages:
        raise ConfigError("no retrieval channel is enabled: set retrieval.bm25.enabled or "
                          "retrieval.dense.enabled to true")
    g = settings.generation
    client = None
    if g.method == "chat" or settings.verify.method == "llm" or settings.rewrite.rewriter == "llm":
        client = ChatClient(g.base_url, g.model, api_key_env=g.api_key_env, timeout=g.timeout,
                            max_retries=g.max_retries, max_tokens=g.max_tokens,
                            price_prompt_per_1k=g.price_prompt_per_1k,
                            price_completion_per_1k=g.price_completion_per_1k)
    stages = [_rewrite_stage(store, settings, client)] + stages
    f = settings.fusion
    stages.append(WeightedFusion.from_file(f.weights_file, f.top_k) if f.method == "weighted"
                  else RRF(f.c, f.top_k))
    rr = settings.rerank
    if rr.method == "sentences" and encoder is None:
        raise ConfigError("rerank.method 'sentences' needs the dense encoder: set retrieval.dense.enabled "
                          "= true, or rerank.method to 'auto', 'none', 'features' or 'cross-encoder'")
    if rr.method == "sentences" or rr.method == "auto" and encoder is not None:
        stages.append(SentenceReranker(store, encoder, top_n=rr.top_n, depth=rr.depth))
    elif rr.method == "features":
        stages.append(FeatureReranker.from_file(store, rr.weights_file, rr.top_n, encoder=encoder, depth=rr.depth)
                      if rr.weights_file else FeatureReranker(store, top_n=rr.top_n, encoder=encoder, depth=rr.depth))
    elif rr.method == "cross-encoder":
        from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER, CrossEncoder
        scorer = CrossEncoder(rr.model or DEFAULT_CROSS_ENCODER, max_tokens=rr.max_tokens, batch_size=rr.batch_size)
        stages.append(CrossEncoderReranker(store, scorer, top_n=rr.top_n, depth=rr.depth, combine=rr.combine))
    channels = [stage for stage in stages if stage.kind is StageKind.RETRIEVAL]
    stages.append(Governance(store, allow_superseded=settings.governance.allow_superseded,
                             withhold=channels if settings.governance.withhold else (),
                             withhold_depth=settings.governance.withhold_depth))
    c = settings.context
    if c.tokenizer == "encoder" and encoder is None and context_counter is None:
        raise ConfigError("context.tokenizer is 'encoder' but the dense channel is off")
    counter = context_counter or (encoder if encoder is not None and c.tokenizer in ("auto", "encoder")
                                  else RegexTokenCounter())
    stages.append(ContextAssembler(store, counter, budget_tokens=c.budget_tokens, expand=c.expand,
                                   min_tokens=c.min_tokens))
    reader, weights = None, None
    reads = g.method in ("extractive", "local")  # the local generator starts from the extractive one
    if reads and g.reader == "cross-encoder":
        from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER, CrossEncoder
        reader = CrossEncoder(g.reader_model or DEFAULT_CROSS_ENCODER, max_tokens=g.reader_max_tokens)
    elif reads and g.reader == "learned":
        reader, weights = learned_reader(g)
    extractive = ExtractiveGenerator(min_coverage=g.min_coverage, keep_ratio=g.keep_ratio,
                                     max_sentences=g.max_sentences, encoder=encoder,
                                     semantic_weight=g.semantic_weight, rank_weight=g.rank_weight,
                                     tie_ratio=g.tie_ratio, reader=reader, reader_weight=g.reader_weight, reader_depth=g.reader_depth,
                                     reader_scale=g.reader_scale, weights=weights, reader_keep=g.reader_keep,
                                     reader_same_unit=g.reader_same_unit, store=store if g.check_names else None,
                                     name_only_cosine=g.name_only_cosine, background_share=g.background_share)
    if g.method == "local":
        from ragdx.stages.local import LocalChatClient, LocalGenerator
        if not g.model:
            raise ConfigError("generation.method 'local' needs generation.model: a .gguf chat model file",
                              key="generation.model")
        local = LocalChatClient(g.model, threads=g.threads, context=g.context_tokens, max_tokens=g.max_tokens,
                                setting="generation.model")
        stages.append(LocalGenerator(local, extractive, feed=g.feed))
    else:
        stages.append(ChatGenerator(client) if g.method == "chat" and client else extractive)
    stages.append(ClaimVerifier(store, support_checker(settings, client)))
    return stages


def support_checker(settings: Settings, client: ChatClient | None = None) -> SupportChecker:
    """The support checker ``verify.method`` names: ``learned`` (the default), ``lexical``,
    ``classifier`` or ``nli`` (a model folder in ``verify.model``) or ``llm`` (a ``.gguf`` file in ``verify.model``, run here; else the chat
    endpoint; without one, the default)."""
    v = settings.verify
    if v.method == "lexical":
        return LexicalChecker()
    if v.method == "classifier":
        if not v.model:
            raise ConfigError("verify.model must name a support classifier's folder when verify.method is "
                              "'classifier' (bench/research/train_support.py makes one)", key="verify.model")
        from ragdx.stages.support import SupportClassifier
        return ClassifierChecker(SupportClassifier(v.model))
    if v.method == "nli":
        return NliChecker(v.model)
    if v.method == "llm" and v.model.lower().endswith(".gguf"):
        from ragdx.stages.local import LocalChatClient, LocalJudge
        return LocalJudge(LocalChatClient(v.model), v.threshold)
    if v.method == "llm" and client is not None:
        return LlmJudge(client)
    return LearnedChecker()


def learned_reader(g: GenerationSettings) -> tuple[PairScorer | None, ReaderWeights]:
    """The generator's learned reader (:mod:`ragdx.stages.reader`): the cross-encoder and the
    weights fitted with it when it can run here (a ``reader_model`` given, or the packaged model
    with the extras ``onnx`` and ``models``), else no model and the weights fitted without it,
    said on the log with the extra that would add it."""
    from ragdx.encoders.packaged import EXTRA, packaged_root
    from ragdx.stages.reader import READER_FILE, load_weights
    readers = load_weights(g.reader_weights or READER_FILE)
    runs = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))
    if runs and (g.reader_model or packaged_root() is not None):
        from ragdx.encoders.cross import DEFAULT_CROSS_ENCODER, CrossEncoder
        return CrossEncoder(g.reader_model or DEFAULT_CROSS_ENCODER, max_tokens=g.reader_max_tokens), readers["cross"]
    # on the verbose log, not as a warning: every command of a machine without the extra would print it;
    # the trace says it too (the generator's config: learned.cross false)
    log.debug("the generator's reader runs without its cross-encoder (words, meaning and place only): "
                "pip install 'ragdx[%s]' adds it", EXTRA if runs else f"onnx,{EXTRA}")
    return None, readers["plain"]


def _rewrite_stage(store: Store, settings: Settings, client: ChatClient | None) -> RoutedRewrite:
    """The rewrite stage: the rewriter and the multi-hop loop (over the pipeline's channels)."""
    w = settings.rewrite
    rewriter: Any = None
    if w.rewriter == "offline":
        rewriter = OfflineRewriter(store, entities=w.entities, expand=w.expand, hyde=w.hyde)
    elif w.rewriter == "llm" and client is not None:
        rewriter = LlmRewriter(client, hyde=w.hyde)
    loop = MultiHop(store, max_hops=w.max_hops, max_queries=w.max_queries,
                    budget_tokens=w.budget_tokens, budget_ms=w.budget_ms)
    return RoutedRewrite(rewriter, loop, route=w.route, rewrite_single=w.rewrite_single,
                         search_original=w.search_original)


def build_pipeline(store: Store, settings: Settings | None = None, *, encoder: Encoder | None = None,
                   context_counter: TokenCounter | None = None) -> Pipeline:
    """The pipeline the settings describe (defaults when None).

    Args:
        store: the store.
        settings: the settings.
        encoder: an encoder to use instead of the one the settings name (tests, custom models).
        context_counter: the context budget's token counter (an ablation keeps the baseline's).
    """
    settings = settings or Settings()
    if settings.retrieval.dense.enabled:
        encoder = encoder or build_encoder(settings.retrieval.dense)
    else:
        encoder = None
    stages = default_stages(store, settings, encoder=encoder, context_counter=context_counter)
    return Pipeline(stages, store=store, encoder=encoder, settings=settings)
