"""A LlamaIndex span handler that writes ragdx's imported traces from a running query engine
(extra ``llamaindex``; docs/integrations.md).

::

    from llama_index.core.instrumentation import get_dispatcher
    from ragdx.integrations.llamaindex import RagdxSpanHandler

    handler = RagdxSpanHandler("traces.jsonl", chunks=nodes)   # nodes: the index's nodes
    get_dispatcher().add_span_handler(handler)
    with handler.query("q-refund-35d", question):
        engine.query(question)

LlamaIndex's instrumentation tells a span handler when each call ends, with its instance and its
result. A retriever's ``retrieve`` is a retrieval channel, or fusion when it called other
retrievers (``QueryFusionRetriever``); a node postprocessor's ``_postprocess_nodes`` is the
stage ``stages`` names (class name -> kind), else what its class name says
(:func:`ragdx.traces.documents.kind_by_name`: ``StatusFilter`` governance, ``ContextCut`` the
context, ``...Rerank`` rerank), else rerank. A stage's items are the nodes it returned, its
dropped items those it was given and did not return. The synthesizer's ``synthesize`` gives the
answer, with the claims its LLM's last completion carries (``additional_kwargs["claims"]``,
``[{"text", "citations"}]``), else the ids the answer cites in its text
(:func:`ragdx.traces.openinference.inline_claims`), and the nodes it read are the context when
no postprocessor is one. With ``chunks`` (the index's nodes), the chunks of every document a
query touched are its ``parsing`` stage.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, Callable, Iterator, Mapping, Sequence

from ragdx.errors import MissingExtraError
from ragdx.integrations import _recorder
from ragdx.integrations._recorder import TraceRecorder, item_of, kinds, ranked
from ragdx.text import is_abstention
from ragdx.traces.documents import kind_by_name
from ragdx.traces.openinference import inline_claims
from ragdx.types import StageKind

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.instrumentation.span import SimpleSpan
    from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
    from llama_index.core.llms.llm import LLM
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from pydantic import PrivateAttr
except ImportError:  # pragma: no cover - exercised in the core environment
    raise MissingExtraError("llamaindex", "the LlamaIndex span handler (ragdx.integrations.llamaindex)") from None

__all__ = ["RagdxSpanHandler", "node_to_item", "write_chunks"]


def node_to_item(node: Any) -> dict[str, Any]:
    """A LlamaIndex node (or ``NodeWithScore``) as an imported-trace item: its metadata gives doc,
    span, status; its ``start_char_idx`` its start when the metadata has none."""
    inner = getattr(node, "node", node)
    meta = dict(getattr(inner, "metadata", None) or {})
    for key in ("start_char_idx", "end_char_idx"):
        if isinstance(getattr(inner, key, None), int):
            meta.setdefault(key, getattr(inner, key))
    return item_of(inner.get_content(), meta, getattr(inner, "node_id", None), getattr(node, "score", None))


def write_chunks(nodes: Any, path: Any) -> int:
    """Write LlamaIndex's chunks (the index's nodes) for ``ragdx diagnose --chunks``, when the
    traces are OpenInference spans, which do not list them."""
    return _recorder.write_chunks(nodes, node_to_item, path)


class RagdxSpanHandler(BaseSpanHandler[SimpleSpan]):
    """Writes one imported trace per :meth:`query` block to ``path``.

    Args:
        path: the imported-trace file (appended to).
        stages: class name -> stage kind, over what the class is and its name says.
        chunks: the index's nodes, or a callable returning them (the parsing stage).
        abstained: says whether an answer text is an abstention (default: it is empty or opens as a
            refusal does, :func:`ragdx.text.is_abstention`).
    """

    _recorder: Any = PrivateAttr()
    _kinds: Any = PrivateAttr()
    _abstained: Any = PrivateAttr()
    _outputs: Any = PrivateAttr(default_factory=dict)  # a retrieve span's id -> the lists retrieved below it
    _reply: Any = PrivateAttr(default=None)  # the LLM's last completion

    def __init__(self, path: Any, *, stages: Mapping[str, str] | None = None,
                 chunks: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
                 abstained: Callable[[str], bool] | None = None, system: str = "llamaindex") -> None:
        super().__init__(open_spans={}, completed_spans=[], dropped_spans=[], current_span_ids={})
        self._recorder = TraceRecorder(path, system, node_to_item, chunks=chunks, chunker="SentenceSplitter")
        self._kinds = kinds(stages)
        self._abstained = abstained or is_abstention

    @contextlib.contextmanager
    def query(self, query_id: str, question: str | None = None) -> Iterator[None]:
        """Record the engine's calls inside the block as the trace of ``query_id``."""
        self._recorder.begin(query_id, question)
        self._outputs, self._reply = {}, None
        try:
            yield
        finally:
            self._recorder.end()
            with self.lock:  # what LlamaIndex keeps of each span ended is not needed after the query
                self.completed_spans.clear()
                self.dropped_spans.clear()

    def new_span(self, id_: str, bound_args: Any, instance: Any = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> SimpleSpan:
        return SimpleSpan(id_=id_, parent_id=parent_span_id, tags=tags or {})

    def prepare_to_drop_span(self, id_: str, bound_args: Any, instance: Any = None, err: Any = None,
                             **kwargs: Any) -> SimpleSpan | None:
        return self.open_spans.get(id_)

    def prepare_to_exit_span(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None,
                             **kwargs: Any) -> SimpleSpan | None:
        span = self.open_spans.get(id_)
        if not self._recorder.active:
            return span
        seconds = (datetime.now() - span.start_time).total_seconds() if span is not None else None
        method, name = id_.split("-", 1)[0].rsplit(".", 1)[-1], type(instance).__name__  # "Class.method-<uuid>"
        if isinstance(instance, BaseRetriever) and method == "retrieve":
            top_k = getattr(instance, "similarity_top_k", None) or getattr(instance, "_similarity_top_k", None)
            self._retrieved(span, name, result, seconds, top_k if isinstance(top_k, int) else None)
        elif isinstance(instance, BaseNodePostprocessor) and method == "_postprocess_nodes":
            kind = self._kinds.get(name) or kind_by_name(name) or StageKind.RERANK
            self._recorder.stage(name, kind, ranked(result or [], node_to_item),
                                 ranked(bound_args.arguments.get("nodes") or [], node_to_item), f"not kept by {name}",
                                 seconds)
        elif isinstance(instance, LLM) and method in ("complete", "chat"):
            self._reply = result
        elif method in ("synthesize", "asynthesize"):
            self._answer(str(result), bound_args.arguments.get("nodes") or [], seconds)
        return span

    def _retrieved(self, span: SimpleSpan | None, name: str, result: Any, seconds: float | None,
                   top_k: int | None) -> None:
        """A retriever's list: a channel, or fusion over the lists retrieved below it."""
        kept = ranked(result or [], node_to_item)
        below = self._outputs.pop(span.id_, []) if span is not None else []
        kind = self._kinds.get(name) or (StageKind.FUSION if below else StageKind.RETRIEVAL)
        reason = f"cut by {name}" + (f" (top_k {top_k})" if top_k is not None else "")
        self._recorder.stage(name, kind, kept, below, reason, seconds)
        parent = self._retriever_above(span)
        if parent is not None:
            self._outputs.setdefault(parent, []).extend(kept)

    def _retriever_above(self, span: SimpleSpan | None) -> str | None:
        """The id of the nearest open ``retrieve`` span above ``span`` (a fusion retriever's)."""
        parent = span.parent_id if span is not None else None
        while parent is not None:
            if parent.split("-", 1)[0].endswith(".retrieve"):
                return parent
            above = self.open_spans.get(parent)
            parent = above.parent_id if above is not None else None
        return None

    def _answer(self, text: str, nodes: Sequence[Any], seconds: float | None) -> None:
        """The synthesizer's answer: claims from the LLM's reply, else the ids cited in its text;
        the nodes it read are the context when no postprocessor was."""
        read = ranked(nodes, node_to_item)
        if not any(s["kind"] == StageKind.CONTEXT for s in self._recorder.current["stages"]):  # type: ignore[index]
            self._recorder.stage("synthesizer", StageKind.CONTEXT, read, (), "", None)
        extra = getattr(self._reply, "additional_kwargs", None) or {}
        claims = extra.get("claims") or inline_claims(text, [i["id"] for i in read if "id" in i])
        self._recorder.answer(text, abstained=bool(self._abstained(text)), claims=claims,
                              prompt_tokens=int(extra.get("prompt_tokens") or 0),
                              completion_tokens=int(extra.get("completion_tokens") or 0), seconds=seconds)
