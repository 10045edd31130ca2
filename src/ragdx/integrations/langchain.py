"""A LangChain callback handler that writes ragdx's imported traces from a running chain (extra
``langchain``; docs/integrations.md).

::

    from ragdx.integrations.langchain import RagdxCallbackHandler

    handler = RagdxCallbackHandler("traces.jsonl", chunks=chunks)
    chain.invoke(inputs, config={"callbacks": [handler], "metadata": {"query_id": "q-refund-35d"}})

Each top-level run (one ``invoke``) is one query, named by the ``query_id`` of the run's
metadata. Its runs become stages: a retriever run is a retrieval channel (``fusion`` when it
wraps other retrievers, as ``EnsembleRetriever`` does), a run named in ``stages`` (a
``RunnableLambda``'s ``run_name``) is that stage, as is a run that passes documents on and whose
name says what it is (:func:`ragdx.traces.documents.kind_by_name`: "status_filter" is governance,
"context_cut" the context), its items the documents it returns (as a list,
or under ``documents``) and its dropped items the documents it received but did not return; a
chat model or LLM run gives the answer (its text, token usage, and ``claims`` with citations
when the model puts them in its response metadata). With ``chunks`` (the text splitter's
output), the chunks of every document a query touched are its ``parsing`` stage.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping, Sequence

from ragdx.traces.openinference import find_claims
from ragdx.errors import MissingExtraError
from ragdx.integrations import _recorder
from ragdx.integrations._recorder import TraceRecorder, item_of, kinds, ranked
from ragdx.text import is_abstention
from ragdx.traces.documents import kind_by_name
from ragdx.types import StageKind

try:
    from langchain_core.documents import Document as _Document
    from langchain_core.tracers.base import BaseTracer as _BaseTracer
except ImportError:  # pragma: no cover - exercised in the core environment
    raise MissingExtraError("langchain", "the LangChain callback handler (ragdx.integrations.langchain)") from None

__all__ = ["RagdxCallbackHandler", "document_to_item", "write_chunks"]

log = logging.getLogger("ragdx")


def document_to_item(doc: Any) -> dict[str, Any]:
    """A LangChain ``Document`` as an imported-trace item (its ``metadata`` gives doc, span,
    status; ``start_index`` from a splitter with ``add_start_index=True`` is the span's start)."""
    return item_of(getattr(doc, "page_content", None), getattr(doc, "metadata", None), getattr(doc, "id", None))


def write_chunks(documents: Iterable[Any], path: Any) -> int:
    """Write a text splitter's chunks for ``ragdx diagnose --chunks``, when the traces are
    OpenInference spans, which do not list them."""
    return _recorder.write_chunks(documents, document_to_item, path)


def _documents(value: Any) -> list[Any] | None:
    """The documents of a run's inputs or outputs: a list of them, or under ``documents``,
    ``output`` or ``input``."""
    if isinstance(value, Mapping):
        for key in ("documents", "output", "input", "context"):
            if key in value:
                found = _documents(value[key])
                if found is not None:
                    return found
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(d, _Document) for d in value):
        return list(value)
    return None


def _seconds(run: Any) -> float | None:
    if run.start_time is None or run.end_time is None:
        return None
    return (run.end_time - run.start_time).total_seconds()


class RagdxCallbackHandler(_BaseTracer):
    """Writes one imported trace per top-level run to ``path``.

    Args:
        path: the imported-trace file (appended to).
        stages: run name -> stage kind, for the runs that are not retrievers or models.
        chunks: the splitter's chunks, or a callable returning them (the parsing stage).
        abstained: says whether an answer text is an abstention (default: it is empty or opens as a
            refusal does, :func:`ragdx.text.is_abstention`).
        system: the system's name in the report.
    """

    def __init__(self, path: Any, *, stages: Mapping[str, str] | None = None,
                 chunks: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
                 abstained: Callable[[str], bool] | None = None, system: str = "langchain") -> None:
        super().__init__()
        self.recorder = TraceRecorder(path, system, document_to_item, chunks=chunks, chunker="TextSplitter")
        self.stages = kinds(stages)
        self.abstained = abstained or is_abstention

    def _persist_run(self, run: Any) -> None:
        query_id = (run.extra or {}).get("metadata", {}).get("query_id")
        if not isinstance(query_id, str) or not query_id:
            log.warning("ragdx: a LangChain run without a 'query_id' in its metadata was not traced "
                        "(invoke with config={'metadata': {'query_id': ...}})")
            return
        self.recorder.begin(query_id)
        for child in sorted(self._walk(run), key=lambda r: r.start_time):
            self._record(child)
        self.recorder.end()

    def _walk(self, run: Any) -> list[Any]:
        out = [run]
        for child in run.child_runs:
            out += self._walk(child)
        return out

    def _record(self, run: Any) -> None:
        name, kind = run.name, None
        if name in self.stages:
            kind = self.stages[name]
        elif run.run_type == "retriever":
            nested = any(r.run_type == "retriever" for r in self._walk(run)[1:])
            kind = StageKind.FUSION if nested else StageKind.RETRIEVAL
        elif run.run_type in ("llm", "chat_model"):
            self._answer(run)
            return
        elif _documents(run.inputs) is not None and _documents(run.outputs) is not None:  # it passes documents on
            kind = kind_by_name(name)
        if kind is None:
            return
        kept = ranked(_documents(run.outputs) or [], document_to_item)
        given = ranked(_documents(run.inputs) or [], document_to_item)
        if run.run_type == "retriever" and kind is StageKind.FUSION:
            given = [i for child in run.child_runs if child.run_type == "retriever"
                     for i in ranked(_documents(child.outputs) or [], document_to_item)]
        self.recorder.stage(name, kind, kept, given, f"cut by {name}", _seconds(run))

    def _answer(self, run: Any) -> None:
        outputs = run.outputs or {}
        generations = outputs.get("generations") or [[]]
        first = generations[0][0] if generations and generations[0] else None
        message = getattr(first, "message", None) if first is not None else None
        if isinstance(first, Mapping):
            text, message = first.get("text", ""), first.get("message")
        else:
            text = getattr(first, "text", "") if first is not None else ""
        if isinstance(message, Mapping):  # serialised (lc, type, id, kwargs)
            usage = message.get("kwargs", message).get("usage_metadata") or {}
        else:
            usage = getattr(message, "usage_metadata", None) or {}
        token_usage = (outputs.get("llm_output") or {}).get("token_usage") or {}
        self.recorder.answer(text or "", abstained=bool(self.abstained(text or "")),
                             prompt_tokens=int(usage.get("input_tokens") or token_usage.get("prompt_tokens") or 0),
                             completion_tokens=int(usage.get("output_tokens")
                                                   or token_usage.get("completion_tokens") or 0),
                             seconds=_seconds(run), claims=find_claims(
                                 message if isinstance(message, Mapping) else getattr(message, "response_metadata", None)))
