"""A Haystack 2 tracer that writes ragdx's imported traces from a running pipeline (extra
``haystack``; docs/integrations.md).

::

    from haystack import tracing
    from ragdx.integrations.haystack import RagdxTracer

    tracer = RagdxTracer("traces.jsonl", pipeline=pipe, chunks=document_store.filter_documents)
    tracing.enable_tracing(tracer)
    with tracer.query("q-refund-35d"):
        pipe.run({...})

Each component run becomes a stage, by the ``stages`` mapping (component name or class name ->
stage kind) or by its class: a ``...Retriever`` is a retrieval channel, a ``DocumentJoiner`` is
fusion, a ``...Ranker`` is rerank, a component that passes documents on is what its name or
class says (:func:`ragdx.traces.documents.kind_by_name`: a "status" filter is governance, a
"cut" the context), a prompt builder is the context (unless another component is), a
``...Generator`` gives the answer (its ``replies`` and token ``usage``). A stage's items
are the ``documents`` it returns; the documents it received but did not return are dropped
(a joiner's or ranker's cut, a filter's removals), with the component's ``top_k`` in the
reason. With ``deeper=N`` and the pipeline, a retriever is run a second time with ``top_k=N``
(tracing paused) so the documents its own ``top_k`` cut are recorded as dropped, with their rank.
With ``chunks`` (the document store's documents, or a callable returning them), the chunks of
every document a query touched are its ``parsing`` stage.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

from ragdx.errors import MissingExtraError
from ragdx.integrations import _recorder
from ragdx.integrations._recorder import TraceRecorder, item_of, kinds, ranked
from ragdx.text import is_abstention
from ragdx.traces.documents import kind_by_name
from ragdx.types import StageKind

try:
    from haystack import tracing as _tracing
except ImportError:  # pragma: no cover - exercised in the core environment
    raise MissingExtraError("haystack", "the Haystack tracer (ragdx.integrations.haystack)") from None

__all__ = ["RagdxTracer", "document_to_item", "write_chunks"]

_INPUT, _OUTPUT = "haystack.component.input", "haystack.component.output"
_BUILDERS = ("PromptBuilder", "ChatPromptBuilder")


def document_to_item(doc: Any) -> dict[str, Any]:
    """A Haystack ``Document`` as an imported-trace item (its ``meta`` gives doc, span, status)."""
    return item_of(getattr(doc, "content", None), getattr(doc, "meta", None), getattr(doc, "id", None),
                   getattr(doc, "score", None))


def write_chunks(documents: Any, path: Any) -> int:
    """Write Haystack's chunks (``document_store.filter_documents()``) for ``ragdx diagnose
    --chunks``, when the traces are OpenInference spans, which do not list them."""
    return _recorder.write_chunks(documents, document_to_item, path)


def _documents(value: Any) -> list[Any] | None:
    """The documents of a component's input or output (a joiner receives lists of lists)."""
    docs = value.get("documents") if isinstance(value, Mapping) else None
    if not isinstance(docs, list):
        return None
    flat: list[Any] = []
    for d in docs:
        flat.extend(d if isinstance(d, list) else [d])
    return [d for d in flat if hasattr(d, "content") and hasattr(d, "id")]


@contextlib.contextmanager
def _untraced() -> Iterator[None]:
    """OpenTelemetry instrumentation (OpenInference's) suppressed, when it is installed: the
    deeper search is ragdx's, not the pipeline's."""
    try:
        from opentelemetry import context
    except ImportError:
        yield
        return
    token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        yield
    finally:
        context.detach(token)


class _Span(_tracing.Span):
    def __init__(self, tags: dict[str, Any]) -> None:
        self.tags = dict(tags)

    def set_tag(self, key: str, value: Any) -> None:
        self.tags[key] = value

    def set_content_tag(self, key: str, value: Any) -> None:
        self.tags[key] = value  # ragdx needs the documents, whatever the content-tracing switch says


class RagdxTracer(_tracing.Tracer):
    """Writes one imported trace per :meth:`query` block to ``path``.

    Args:
        path: the imported-trace file (appended to).
        pipeline: the pipeline, to read a component's ``top_k`` and to search deeper.
        stages: component name (or class name) -> stage kind, over the defaults.
        chunks: the framework's chunks, or a callable returning them (the parsing stage).
        deeper: run each retriever again with this ``top_k`` to record what its cut dropped (0: no).
        abstained: says whether an answer text is an abstention (default: it is empty or opens as a
            refusal does, :func:`ragdx.text.is_abstention`).
        system: the system's name in the report.
    """

    def __init__(self, path: Any, *, pipeline: Any = None, stages: Mapping[str, str] | None = None,
                 chunks: Sequence[Any] | Callable[[], Sequence[Any]] | None = None, deeper: int = 0,
                 abstained: Callable[[str], bool] | None = None, system: str = "haystack") -> None:
        self.recorder = TraceRecorder(path, system, document_to_item, chunks=chunks, chunker="DocumentSplitter")
        self.pipeline, self.stages, self.deeper = pipeline, kinds(stages), deeper
        self.abstained = abstained or is_abstention
        self._current: _Span | None = None
        self._paused = False
        self._builders: list[tuple[str, list[dict], float]] = []

    @contextlib.contextmanager
    def query(self, query_id: str, question: str | None = None) -> Iterator[None]:
        """Record the pipeline runs inside the block as the trace of ``query_id``."""
        self.recorder.begin(query_id, question)
        self._builders = []
        try:
            yield
        finally:
            if not any(s["kind"] == "context" for s in self.recorder.current["stages"]):  # type: ignore[index]
                for name, items, seconds in self._builders:  # a prompt builder is the context only then
                    self.recorder.stage(name, "context", items, seconds=seconds)
            self.recorder.end()

    @contextlib.contextmanager
    def trace(self, operation_name: str, tags: dict[str, Any] | None = None,
              parent_span: Any = None) -> Iterator[_Span]:
        span = _Span(tags or {})
        previous, self._current = self._current, span
        started = time.perf_counter()
        try:
            yield span
        finally:
            self._current = previous
            if operation_name == "haystack.component.run" and self.recorder.active and not self._paused:
                self._component(span.tags, time.perf_counter() - started)

    def current_span(self) -> _Span | None:
        return self._current

    def _kind(self, name: str, cls: str, inputs: Any, output: Any) -> StageKind | None:
        if name in self.stages or cls in self.stages:
            return self.stages.get(name) or self.stages[cls]
        if cls.endswith("Retriever"):
            return StageKind.RETRIEVAL
        if cls == "DocumentJoiner":
            return StageKind.FUSION
        if cls.endswith("Ranker"):
            return StageKind.RERANK
        if "Generator" in cls or isinstance(output, Mapping) and "replies" in output:
            return StageKind.GENERATION
        if _documents(inputs) is not None and _documents(output) is not None:  # it passes documents on
            return kind_by_name(name) or kind_by_name(cls)
        return None

    def _component(self, tags: dict[str, Any], seconds: float) -> None:
        name, cls = str(tags.get("haystack.component.name", "")), str(tags.get("haystack.component.type", ""))
        inputs, output = tags.get(_INPUT) or {}, tags.get(_OUTPUT) or {}
        if name not in self.stages and cls not in self.stages and cls in _BUILDERS:
            # what a prompt builder is given is the context
            self._builders.append((name, ranked(_documents(inputs) or [], document_to_item), seconds))
            return
        kind = self._kind(name, cls, inputs, output)
        if kind is None:
            return
        if kind is StageKind.GENERATION:
            self._answer(output, seconds)
            return
        given = ranked(_documents(inputs) or [], document_to_item)
        kept = ranked(_documents(output) or [], document_to_item)
        top_k = self._top_k(name, inputs)
        reason = f"cut by {name}" + (f" (top_k {top_k})" if top_k is not None else "")
        deeper = self._deeper(name, inputs, kept, top_k) if kind is StageKind.RETRIEVAL else []
        self.recorder.stage(name, kind, kept, given, reason, seconds, deeper)

    def _top_k(self, name: str, inputs: Mapping[str, Any]) -> int | None:
        if isinstance(inputs.get("top_k"), int):
            return inputs["top_k"]
        component = self.pipeline.get_component(name) if self.pipeline is not None else None
        top_k = getattr(component, "top_k", None)
        return top_k if isinstance(top_k, int) else None

    def _deeper(self, name: str, inputs: Mapping[str, Any], kept: list[dict], top_k: int | None) -> list[dict]:
        """What the retriever's own top_k cut: the retriever run again, ``deeper`` deep."""
        if not self.deeper or self.pipeline is None or top_k is None or self.deeper <= top_k:
            return []
        component = self.pipeline.get_component(name)
        self._paused = True
        with _untraced():
            try:
                deep = component.run(**{**dict(inputs), "top_k": self.deeper}).get("documents") or []
            finally:
                self._paused = False
        ids = {i["id"] for i in kept}
        return [dict(i, reason=f"below top_k {top_k} of {name} (rank {i['rank']})")
                for i in ranked(deep, document_to_item) if i["id"] not in ids]

    def _answer(self, output: Mapping[str, Any], seconds: float) -> None:
        replies = output.get("replies") or [""]
        reply = replies[0]
        text = reply if isinstance(reply, str) else (getattr(reply, "text", None) or "")
        meta = output.get("meta") or [{}]
        first = meta[0] if isinstance(meta, list) and meta and isinstance(meta[0], Mapping) else {}
        reply_meta = getattr(reply, "meta", None) or {}
        usage = first.get("usage") or reply_meta.get("usage") or {}
        self.recorder.answer(text, abstained=bool(self.abstained(text)),
                             prompt_tokens=int(usage.get("prompt_tokens") or 0),
                             completion_tokens=int(usage.get("completion_tokens") or 0), seconds=seconds,
                             claims=first.get("claims") or reply_meta.get("claims"))
