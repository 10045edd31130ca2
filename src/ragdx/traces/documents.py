"""How the frameworks' documents and components map to ragdx's: the one mapping of a document's
metadata to evidence, and of a component's name to a stage kind (:func:`kind_by_name`), shared by
the span reader (:mod:`ragdx.traces.openinference`), the framework adapters
(:mod:`ragdx.integrations`) and ``ragdx diagnose --chunks`` (docs/integrations.md, "OpenInference
spans").

A document's metadata gives its evidence: ``doc`` (or ``doc_id``, ``source``, ``file_path``,
``file_name``), ``version``, ``start`` (or Haystack's ``split_idx_start``, LangChain's
``start_index``, LlamaIndex's ``start_char_idx``) and ``end`` (or ``end_char_idx``; else start
plus the text's length), ``status`` and ``readable``; ``chunk_id`` names it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from ragdx.types import StageKind

__all__ = ["document_item", "framework_document", "kind_by_name"]

_DOC_KEYS = ("doc", "doc_id", "source", "file_path", "file_name")
_START_KEYS = ("start", "split_idx_start", "start_index", "start_char_idx")
_END_KEYS = ("end", "end_char_idx")
# a Haystack document's own fields, when Document.to_dict() flattened its meta beside them
_HAYSTACK_FIELDS = frozenset({"id", "content", "blob", "score", "embedding", "sparse_embedding", "dataframe",
                              "meta"})


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def document_item(text: str | None, meta: Mapping[str, Any], doc_id: Any = None, score: Any = None) -> dict[str, Any]:
    """An imported-trace item from a framework document's text, metadata, id and score (the one
    mapping of metadata to evidence, shared by the span reader and the framework adapters)."""
    meta = meta if isinstance(meta, Mapping) else {}
    item: dict[str, Any] = {}
    doc = next((meta[k] for k in _DOC_KEYS if isinstance(meta.get(k), str)), None)
    start = next((meta[k] for k in _START_KEYS if _int(meta.get(k)) is not None), None)
    end = next((meta[k] for k in _END_KEYS if _int(meta.get(k)) is not None), None)
    if end is None and start is not None and text:
        end = start + len(text)
    ident = meta.get("chunk_id") or doc_id or (f"{doc}[{start}:{end}]" if doc and start is not None else None)
    if ident is None and text is not None:
        ident = f"{doc or 'text'}#{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if ident is not None:
        item["id"] = str(ident)
    if doc is not None:
        item["doc"] = doc
        if start is not None and end is not None and 0 <= start < end:
            item |= {"start": start, "end": end}
        if isinstance(meta.get("version"), str):
            item["version"] = meta["version"]
    if text is not None:
        item["text"] = text
    if isinstance(meta.get("rank"), int) and meta["rank"] >= 1:
        item["rank"] = meta["rank"]
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        item["score"] = score
    if meta.get("status") in ("current", "superseded", "expired"):
        item["status"] = meta["status"]
    if isinstance(meta.get("readable"), bool):
        item["readable"] = meta["readable"]
    return item


def framework_document(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """An item from a framework's own document as JSON, by its own field names; None when
    ``obj`` is none of them:

    - Haystack 2 ``Document.to_dict()`` (``id``, ``content``, ``meta``, or the meta flattened
      beside them);
    - LlamaIndex ``TextNode`` (``id_``, ``text``, ``metadata``, ``start_char_idx``,
      ``end_char_idx``; ``model_dump()`` or ``to_dict()``);
    - LangChain ``Document`` (``page_content``, ``metadata``, ``id``; or ``dumpd``'s
      ``{"lc": 1, "kwargs": {...}}``).
    """
    if obj.get("lc") is not None and isinstance(obj.get("kwargs"), Mapping):
        obj = obj["kwargs"]
    if isinstance(obj.get("page_content"), str):
        return document_item(obj["page_content"], obj.get("metadata") or {}, obj.get("id"))
    if "id_" in obj and isinstance(obj.get("text"), str):
        meta = dict(obj.get("metadata") or {})
        for key in ("start_char_idx", "end_char_idx"):
            if _int(obj.get(key)) is not None:
                meta.setdefault(key, obj[key])
        return document_item(obj["text"], meta, obj.get("id_"))
    if isinstance(obj.get("content"), str) and "id" in obj:
        meta = obj.get("meta") if isinstance(obj.get("meta"), Mapping) else {
            k: v for k, v in obj.items() if k not in _HAYSTACK_FIELDS}
        return document_item(obj["content"], meta, obj.get("id"), obj.get("score"))
    return None


# what a component's name says it does, tried in this order ("fusion_cut" is fusion, "ContextCut" context)
_NAME_HINTS = (
    (StageKind.FUSION, re.compile(r"join|fus(e|ion)|merg|ensemble|combin|rrf", re.IGNORECASE)),
    (StageKind.RERANK, re.compile(r"rerank|reorder|rescor|rank", re.IGNORECASE)),
    (StageKind.GOVERNANCE, re.compile(r"filter|acl|access|permission|status|version|governance|auth|security",
                                      re.IGNORECASE)),
    (StageKind.CONTEXT, re.compile(r"cut|budget|truncat|trim|limit|window|context|pack|compress", re.IGNORECASE)),
)


def kind_by_name(name: str) -> StageKind | None:
    """The stage kind a component's name says it is, for a component that passes documents on
    (a retriever's, a reranker's or an LLM's kind comes from what it is): "DocumentJoiner" or
    "fusion_cut" fusion, "LLMRerank" rerank, "StatusFilter" or "acl_check" governance,
    "ContextCut" or "token_budget" the context; None when the name says none of these."""
    return next((kind for kind, pattern in _NAME_HINTS if pattern.search(name)), None)
