"""A pipeline is one ordered list of stages; running it records every artifact.

The list is the only place a pipeline's order is written: running, resuming from a stage
(ablations), the evidence funnel and the diagnosis all follow it. A stage is any object that
satisfies the protocol of its kind (:mod:`ragdx.protocols`): ragdx's own, or a user's. What a
stage is given follows from its kind: a retrieval channel the query, fusion every channel's
list, rerank, governance and context the latest ranked list, generation the context, citation
the context and the answer.

The pipeline never mutates its inputs: each stage returns a new frozen artifact, and the
:class:`Trace` keeps all of them, dropped items and reasons included. Building a pipeline from
settings is :func:`ragdx.build.build_pipeline`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypeVar

from ragdx.errors import ConfigError
from ragdx.protocols import (
    STAGE_PROTOCOLS, Assembler, Encoder, Fuser, Generator, QueryRewriter, Reranker, Retriever, Stage, Store, Verifier,
)
from ragdx.types import Answer, Context, Query, Ranked, Rewritten, StageKind, Verification

if TYPE_CHECKING:  # for the annotation only: the settings tree sits below every layer, but is not needed here
    from ragdx.config import Settings

StageOutput = Rewritten | Ranked | Context | Answer | Verification
_O = TypeVar("_O", Rewritten, Ranked, Context, Answer, Verification)

__all__ = ["Trace", "Pipeline", "StageOutput"]


@dataclass(frozen=True, slots=True)
class Trace:
    """Every stage's artifact for one query, in pipeline order: the rewrites (if the pipeline
    rewrites), the ranked lists of retrieval, fusion, reranking and governance, then the context,
    the answer and its verification.
    ``cached`` names the stages whose output a cache served (:mod:`ragdx.caching`)."""

    query: Query
    stages: tuple[StageOutput, ...]
    seconds: float
    notes: tuple[str, ...] = field(default=())
    cached: tuple[str, ...] = field(default=())

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
    def rewritten(self) -> Rewritten | None:
        return next((s for s in self.stages if isinstance(s, Rewritten)), None)

    @property
    def context(self) -> Context | None:
        return next((s for s in self.stages if isinstance(s, Context)), None)

    @property
    def answer(self) -> Answer | None:
        return next((s for s in self.stages if isinstance(s, Answer)), None)

    @property
    def verification(self) -> Verification | None:
        return next((s for s in self.stages if isinstance(s, Verification)), None)


class _Run:
    """What the stages have produced so far for one query, and what the next stage is given."""

    def __init__(self, query: Query, rewriter: QueryRewriter | None = None,
                 channels: tuple[Retriever, ...] = ()) -> None:
        self.query = query
        self.rewriter, self.channels = rewriter, channels
        self.outputs: list[StageOutput] = []

    def last(self, cls: type[_O]) -> _O | None:
        return next((o for o in reversed(self.outputs) if isinstance(o, cls)), None)

    def call(self, stage: Stage) -> StageOutput:
        kind, q = stage.kind, self.query
        rewritten = self.last(Rewritten)
        if kind is StageKind.REWRITE:
            return stage.run(q, self.channels)
        if kind is StageKind.RETRIEVAL:
            # a rewritten question is searched as its rewrite stage says (every text it lists)
            if rewritten is not None and rewritten.searches != (q.question,):
                return self.rewriter.search(stage, q, rewritten)
            return stage.run(q)
        if kind is StageKind.FUSION:
            return stage.run([o for o in self.outputs if o.kind is StageKind.RETRIEVAL])
        if kind in (StageKind.RERANK, StageKind.GOVERNANCE, StageKind.CONTEXT):
            return stage.run(q, self.last(Ranked))
        if kind is StageKind.GENERATION:
            answer = stage.run(q, self.last(Context))
            # the rewrite stage may add to the answer (a multi-hop answer states its slots' facts)
            return self.rewriter.answer(answer, self.last(Context), rewritten) if rewritten is not None else answer
        return stage.run(q, self.last(Context), self.last(Answer))


class Pipeline:
    """An ordered list of stages over one store.

    Args:
        stages: the stages, in the order they run. Their kinds must follow
            :class:`~ragdx.types.StageKind`'s order (at most one rewrite stage, several retrieval
            channels, then at most one stage of each later kind); several channels need a fusion stage; a generator needs a
            context stage before it, and a verifier a generator.
        store: the store the stages read (the diagnosis reads it too).
        encoder: the dense encoder, if a stage uses one (recorded in the run's manifest).
        settings: the settings the stages were built from, if any (recorded in the manifest).

    Raises:
        ConfigError: naming the stage that is out of order, of no known kind, or missing its
            ``run``, and the valid order.
    """

    def __init__(self, stages: Sequence[Stage], *, store: Store, encoder: Encoder | None = None,
                 settings: Settings | None = None) -> None:
        self.stages: tuple[Stage, ...] = tuple(stages)
        self.store = store
        self.encoder = encoder
        self.settings = settings
        _check_order(self.stages)

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(f'{s.name}:{s.kind.value}' for s in self.stages)})"

    # the stages by kind, for the parts of ragdx that need one (the diagnosis, ablations)
    def of_kind(self, kind: StageKind) -> tuple[Stage, ...]:
        return tuple(s for s in self.stages if s.kind is kind)

    def _one(self, kind: StageKind) -> Any:
        found = self.of_kind(kind)
        return found[0] if found else None

    @property
    def rewriter(self) -> QueryRewriter | None:
        return self._one(StageKind.REWRITE)

    @property
    def channels(self) -> tuple[Retriever, ...]:
        return self.of_kind(StageKind.RETRIEVAL)

    @property
    def fusion(self) -> Fuser | None:
        return self._one(StageKind.FUSION)

    @property
    def reranker(self) -> Reranker | None:
        return self._one(StageKind.RERANK)

    @property
    def assembler(self) -> Assembler | None:
        return self._one(StageKind.CONTEXT)

    @property
    def generator(self) -> Generator | None:
        return self._one(StageKind.GENERATION)

    @property
    def verifier(self) -> Verifier | None:
        return self._one(StageKind.CITATION)

    @property
    def kinds(self) -> tuple[StageKind, ...]:
        """The kinds this pipeline runs, in order, each once."""
        return tuple(dict.fromkeys(s.kind for s in self.stages))

    def warm_up(self) -> None:
        """Load every model now (the encoder's, a cross-encoder's), so that no query's latency
        includes a model load."""
        if self.encoder is not None:
            self.encoder.encode(["warm up"], kind="query")
        for stage in self.stages:
            load = getattr(stage, "warm_up", None)
            if load is not None:
                load()

    def retrieve(self, query: Query) -> list[Ranked]:
        """Each retrieval channel's ranked list."""
        return [channel.run(query) for channel in self.channels]

    def run(self, query: Query) -> Trace:
        """Run every stage for one query."""
        started = time.perf_counter()
        state = _Run(query, self.rewriter, self.channels)
        for stage in self.stages:
            state.outputs.append(state.call(stage))
        return Trace(query, tuple(state.outputs), time.perf_counter() - started)

    def resume(self, base: Trace, start: StageKind) -> Trace:
        """Run from stage kind ``start`` on, reusing ``base``'s output of every earlier stage (and
        of any retrieval channel whose name and config are unchanged). A reused output keeps its
        recorded time, so the trace's ``seconds`` is what the whole pipeline would take.

        Used by ablations: a context-budget variant does not recompute retrieval.
        """
        state = _Run(base.query, self.rewriter, self.channels)
        previous = {s.stage: s for s in base.stages}
        reused = []
        for stage in self.stages:
            old = previous.get(stage.name)
            keep = old is not None and old.kind is stage.kind and (
                stage.kind.order < start.order
                or stage.kind is StageKind.RETRIEVAL and start is StageKind.RETRIEVAL
                and _same_setup(old.config, stage.config))
            if keep:
                reused.append(old.stage)
                state.outputs.append(old)
            else:
                state.outputs.append(state.call(stage))
        note = f"reused from the baseline: {', '.join(reused)}" if reused else ""
        return Trace(base.query, tuple(state.outputs), sum(s.seconds for s in state.outputs),
                     base.notes + ((note,) if note else ()))


def _same_setup(recorded: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether a recorded output's config holds the stage's config (a stage may add what one
    query's run held to it, as the dense channel adds its shortlist: not part of its setup)."""
    return all(k in recorded and recorded[k] == v for k, v in config.items())


def _check_order(stages: tuple[Stage, ...]) -> None:
    order = " -> ".join(k.value for k in STAGE_PROTOCOLS)
    seen: list[StageKind] = []
    names: set[str] = set()
    for n, stage in enumerate(stages):
        kind = getattr(stage, "kind", None)
        name = getattr(stage, "name", None)
        what = f"stage {n} ({name or type(stage).__name__})"
        if kind not in STAGE_PROTOCOLS:
            raise ConfigError(f"{what}: kind {kind!r} is not a kind a pipeline runs; valid kinds: "
                              + ", ".join(k.value for k in STAGE_PROTOCOLS))
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{what}: a stage needs a non-empty string 'name' (how traces call it)")
        if name in names:
            raise ConfigError(f"{what}: two stages are named {name!r}; names identify stages in traces")
        names.add(name)
        if not callable(getattr(stage, "run", None)):
            raise ConfigError(f"{what}: a {kind.value} stage needs a run method "
                              f"({STAGE_PROTOCOLS[kind].__name__} protocol, ragdx.protocols)")
        if seen and kind.order < seen[-1].order:
            raise ConfigError(f"{what}: a {kind.value} stage cannot come after a {seen[-1].value} stage; "
                              f"the order is {order}")
        if seen and kind is seen[-1] and kind is not StageKind.RETRIEVAL:
            raise ConfigError(f"{what}: a second {kind.value} stage; only retrieval channels may repeat")
        seen.append(kind)
    if StageKind.RETRIEVAL not in seen:
        raise ConfigError("a pipeline needs at least one retrieval stage (retrieval.bm25.enabled or "
                          "retrieval.dense.enabled)")
    if seen.count(StageKind.RETRIEVAL) > 1 and StageKind.FUSION not in seen \
            and any(k.order > StageKind.FUSION.order for k in seen):
        raise ConfigError("several retrieval channels need a fusion stage to make one list")
    needs = {StageKind.GENERATION: StageKind.CONTEXT, StageKind.CITATION: StageKind.GENERATION}
    for kind, before in needs.items():
        if kind in seen and before not in seen:
            raise ConfigError(f"a {kind.value} stage needs a {before.value} stage before it")
