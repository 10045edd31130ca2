"""A pipeline with a retrieval cache and an answer cache (docs/formats.md, "The result cache").

:class:`CachedPipeline` runs like the pipeline it wraps, and keeps two kinds of result in a
:class:`~ragdx.protocols.Cache`:

- the **answer cache**: the whole trace with the evidence binding of its answer, keyed by the
  question, the principal's access groups (sorted) and a hash of every stage's settings. Before
  an answer is served, its evidence is rechecked (:func:`ragdx.binding.recheck`); an answer whose
  evidence no longer stands is dropped and computed again, never served;
- the **retrieval cache**: the ranked lists up to governance, keyed the same way with a hash of
  those stages' settings only, so a pipeline that differs after governance (another context
  budget, another generator) reuses them. Before they are served, every version the last list
  keeps must still be stored and readable by the asker.

Before every look-up the cache is brought up to date with the store's update log, which drops
exactly the entries a change could alter (:mod:`ragdx.store.cache`). A served trace names the
stages that came from the cache (``Trace.cached``) and says so in its notes; the pipeline's
:class:`CacheStats` count hits and the time they saved. A served stage took no time in this run:
its ``seconds`` are 0 (and a served answer's cost too), so a run's latency is its own, never the
run that computed the entry; the note keeps the original time.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ragdx.binding import bind_evidence, recheck
from ragdx.pipeline import Pipeline, StageOutput, Trace
from ragdx.protocols import Cache, Store
from ragdx.stages.bm25 import query_terms
from ragdx.store.cache import cache_key, fts5_terms, listed_counts
from ragdx.types import Answer, CacheKind, Context, Dependencies, DropCode, Query, Ranked, Rewritten, StageKind

__all__ = ["CacheStats", "CachedPipeline", "settings_hash", "dependencies"]

#: The settings sections that decide the ranked lists up to governance.
_RETRIEVAL_SECTIONS = ("chunking", "retrieval", "fusion", "rerank", "governance", "seed")


@dataclass
class CacheStats:
    """What a cached pipeline's look-ups found: answers served, retrievals reused, cached results
    whose recheck failed (recomputed), and the seconds the hits saved (their recorded time less the
    look-up's)."""

    lookups: int = 0
    answer_hits: int = 0
    retrieval_hits: int = 0
    stale: int = 0
    saved_seconds: float = 0.0

    @property
    def hit_rate(self) -> float:
        """The share of look-ups an answer served (0 when there was none)."""
        return self.answer_hits / self.lookups if self.lookups else 0.0

    def describe(self) -> str:
        return (f"cache: {self.answer_hits} of {self.lookups} answers from the answer cache "
                f"({100 * self.hit_rate:.0f}%), {self.retrieval_hits} retrievals from the retrieval cache, "
                f"{self.stale} cached results refused by their recheck; {self.saved_seconds:.2f} s saved")

    def to_dict(self) -> dict[str, Any]:
        return {"lookups": self.lookups, "answer_hits": self.answer_hits, "retrieval_hits": self.retrieval_hits,
                "stale": self.stale, "hit_rate": self.hit_rate, "saved_seconds": self.saved_seconds}


def _config(stage: Any) -> Any:
    config = getattr(stage, "config", None)
    return dict(config) if isinstance(config, Mapping) else None


@functools.lru_cache(maxsize=None)
def tree_digest(folder: str) -> str:
    """A digest of every Python source file under ``folder`` (their paths and bytes), once per
    process."""
    digest = hashlib.sha256()
    root = Path(folder)
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def code_digest(module: str) -> str:
    """What a stage's results depend on besides its config: its code. For a stage of ragdx, a
    digest of all of ragdx's source (a stage calls helpers of other modules: a changed number
    rule in :mod:`ragdx.text` changes the generator's answers); for another stage, a digest of
    its module's source, read again at each call (an edited custom stage; one imported from a
    zip too); the module's name when it has no source (defined in an interactive session)."""
    if module == "ragdx" or module.startswith("ragdx."):
        return tree_digest(str(Path(__file__).resolve().parent))
    found = sys.modules.get(module)
    try:
        source = inspect.getsource(found) if found is not None else None
    except (OSError, TypeError):
        source = None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16] if source is not None else module


def settings_hash(pipeline: Pipeline, upto: StageKind | None = None) -> str:
    """A hash of what decides a pipeline's result: each stage's name, kind, class, ``config`` and
    code (:func:`code_digest`), ragdx's version, and the settings it was built from
    (the ``cache`` section left out); with ``upto``, of the stages up to that kind only."""
    from ragdx import __version__
    stages = [s for s in pipeline.stages if upto is None or s.kind.order <= upto.order]
    body: dict[str, Any] = {"ragdx": __version__, "stages": [
        [s.name, s.kind.value, f"{type(s).__module__}.{type(s).__qualname__}", _config(s),
         code_digest(type(s).__module__)] for s in stages]}
    settings = pipeline.settings
    if settings is not None:
        tree = settings.to_dict() if hasattr(settings, "to_dict") else {"repr": repr(settings)}
        tree.pop("cache", None)
        body["settings"] = {k: v for k, v in tree.items() if upto is None or k in _RETRIEVAL_SECTIONS}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def dependencies(pipeline: Pipeline, query: Query, outputs: Sequence[StageOutput]) -> Dependencies:
    """What a result depends on: the documents its outputs read, the question's terms for a
    keyword channel (with its lowest score when its list was full), the lowest score and the question's vector of a dense channel whose list
    was full; ``open`` for a dense list that was not full or a channel of unknown kind;
    ``any_change`` for a withheld question, or one rewritten or answered by the multi-hop path."""
    docs = _documents(outputs)
    stages = {s.name: s for s in pipeline.stages}
    terms: frozenset[str] = frozenset()
    keyword: tuple[float, tuple[float, float], tuple[str, ...], tuple[Any, ...]] | None = None
    dense: list[tuple[str, float, bytes]] = []
    is_open = False
    for out in outputs:
        if not isinstance(out, Ranked) or out.kind is not StageKind.RETRIEVAL:
            continue
        config, stage = out.config, stages.get(out.stage)
        if "k1" in config:  # the keyword channel: what matches a term of the question may enter
            terms = frozenset(fts5_terms([query.question]))
            phrases = tuple(t for raw in query_terms(query.question) for t in sorted(fts5_terms([raw])))
            if out.items and len(out.items) >= int(config.get("top_k", 0)):
                floor = min(c.score for c in out.items)
                if keyword is None or floor < keyword[0]:
                    found = pipeline.store.chunks_by_id([c.chunk_id for c in out.items])
                    keyword = (floor, (float(config["prefix_weight"]), float(config["text_weight"])), phrases,
                               listed_counts([found[c.chunk_id] for c in out.items if c.chunk_id in found], phrases))
        elif "space" in config and getattr(stage, "encoder", None) is not None:
            if len(out.items) < int(config.get("top_k", 0)) or not out.items:
                is_open = True  # any readable chunk enters a list that is not full
            else:
                vector = np.asarray(stage.encoder.encode([query.question], kind="query").vectors[0], np.float32)
                dense.append((str(config["space"]), min(c.score for c in out.items), vector.tobytes()))
        else:
            is_open = True
    withheld = any(isinstance(o, Ranked) and o.kind is StageKind.GOVERNANCE
                   and any(d.code is DropCode.WITHHELD for d in o.dropped) for o in outputs)
    # a rewritten or multi-hop question searched texts besides its own and read what its hops
    # found (and a rewriter may read the corpus's headings): any change may alter it
    rewritten = any(isinstance(o, Rewritten) and (o.rewrites or o.hops) for o in outputs)
    return Dependencies(frozenset(docs), terms, keyword, tuple(dense), is_open, withheld or rewritten)


def _documents(outputs: Sequence[StageOutput]) -> set[str]:
    """The documents stage outputs read: their items, units and what they dropped."""
    docs: set[str] = set()
    for out in outputs:
        if isinstance(out, Ranked):
            docs |= {c.doc_id for c in out.items} | {d.doc_id for d in out.dropped}
        elif isinstance(out, Context):
            docs |= {u.doc_id for u in out.units} | {d.doc_id for d in out.dropped}
    return docs


def _served(stage: StageOutput) -> StageOutput:
    """A stage's output as the cache serves it: computed by another run, so it cost this one
    nothing (an answer's usage keeps its token counts, but no time, money or attempt)."""
    if isinstance(stage, Answer):
        return replace(stage, seconds=0.0, usage=replace(stage.usage, cost=0.0, attempts=0, seconds=0.0))
    return replace(stage, seconds=0.0)


def _still_readable(store: Store, query: Query, ranked: Sequence[StageOutput]) -> bool:
    """Whether every version the last cached list keeps is still stored and readable by the
    asker (the retrieval cache's check before it serves, as the answer cache's recheck)."""
    keys = sorted({(c.doc_id, c.version) for c in ranked[-1].items}) if ranked else []
    groups = query.principal.groups
    return all(store.version(*key) is not None and store.readable(groups, *key) for key in keys)


class CachedPipeline(Pipeline):
    """``pipeline`` with a retrieval cache and an answer cache kept in ``cache``.

    Args:
        pipeline: the pipeline to run on a miss (its stages, store, encoder and settings).
        cache: where results are kept (:class:`~ragdx.store.cache.SQLiteCache`).
    """

    def __init__(self, pipeline: Pipeline, cache: Cache) -> None:
        super().__init__(pipeline.stages, store=pipeline.store, encoder=pipeline.encoder,
                         settings=pipeline.settings)
        self.cache = cache
        self.stats = CacheStats()
        self._answer_hash = settings_hash(self)
        self._retrieval_hash = settings_hash(self, StageKind.GOVERNANCE)
        after = [s.kind for s in self.stages if s.kind.order > StageKind.GOVERNANCE.order]
        self._resume_at = after[0] if after else None

    def run(self, query: Query) -> Trace:
        """Serve the answer from the cache if it holds one that is still valid; else reuse the
        cached ranked lists if any, run the rest, and keep what was computed."""
        started = time.perf_counter()
        store, cache = self.store, self.cache
        made_at = store.index_version
        cache.sync(store)
        self.stats.lookups += 1
        if cache.synced_version != made_at:  # the store changed meanwhile: compute, keep nothing
            return super().run(query)
        groups = query.principal.groups
        answer_key = cache_key(query.question, groups, self._answer_hash)
        found = cache.get(CacheKind.ANSWER, answer_key)
        if found is not None:
            stages, binding = found.payload
            stages = tuple(_served(s) for s in stages)
            if recheck(store, binding, shortcut=True).valid:  # a binding ragdx made and kept
                seconds = time.perf_counter() - started
                self.stats.answer_hits += 1
                self.stats.saved_seconds += found.seconds - seconds
                return Trace(query, stages, seconds, (f"answer cache: served (made at index version "
                                                      f"{found.made_at} in {found.seconds:.3f} s)",),
                             tuple(s.stage for s in stages))
            cache.discard(CacheKind.ANSWER, answer_key)
            self.stats.stale += 1
        retrieval_key = cache_key(query.question, groups, self._retrieval_hash)
        reused = cache.get(CacheKind.RETRIEVAL, retrieval_key) if self._resume_at is not None else None
        if reused is not None and not _still_readable(store, query, reused.payload):
            cache.discard(CacheKind.RETRIEVAL, retrieval_key)
            self.stats.stale += 1
            reused = None
        if reused is not None:
            looked = time.perf_counter() - started
            resumed = self.resume(Trace(query, tuple(_served(s) for s in reused.payload), 0.0), self._resume_at)
            self.stats.retrieval_hits += 1
            self.stats.saved_seconds += reused.seconds - looked
            trace = Trace(query, resumed.stages, time.perf_counter() - started,
                          (f"retrieval cache: ranked lists served (made at index version {reused.made_at})",),
                          tuple(s.stage for s in reused.payload))
            depends = dependencies(self, query, trace.stages)
        else:
            trace = super().run(query)
            ranked = tuple(s for s in trace.stages if s.kind.order <= StageKind.GOVERNANCE.order)
            depends = dependencies(self, query, ranked)
            if self._resume_at is not None:
                cache.put(CacheKind.RETRIEVAL, retrieval_key, ranked, depends,
                          question=query.question, groups=groups, made_at=made_at,
                          seconds=sum(s.seconds for s in ranked), store=store)
            # the answer depends on what its lists depend on, and on the documents read after them
            depends = replace(depends, docs=depends.docs | _documents(trace.stages[len(ranked):]))
        binding = bind_evidence(store, query.principal, trace.context, trace.answer, made_at)
        cache.put(CacheKind.ANSWER, answer_key, (trace.stages, binding), depends,
                  question=query.question, groups=groups, made_at=made_at,
                  seconds=sum(s.seconds for s in trace.stages), store=store)
        return trace
