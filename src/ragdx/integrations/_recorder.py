"""What every adapter shares: one query's stages recorded as the framework runs them, and written
as one line of ragdx's imported-trace format (docs/schemas/imported-trace.schema.json).

An adapter turns each framework document into an item with
:func:`ragdx.traces.documents.document_item` (the same metadata mapping the OpenInference reader
uses, so both give the same diagnoses), records the documents a stage received but did not
return as ``dropped``, and, when it is given the framework's chunks, lists the chunks of every
document the query touched as a ``parsing`` stage.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ragdx.traces.documents import document_item
from ragdx.errors import InputError
from ragdx.types import StageKind

Item = dict[str, Any]
ToItem = Callable[[Any], Item]


def kinds(stages: Mapping[str, str] | None) -> dict[str, StageKind]:
    """A component-name -> stage-kind mapping, each kind checked.

    Raises:
        InputError: naming the component and the valid kinds.
    """
    return {name: StageKind.parse(kind, what=f"the stage kind of {name!r}")
            for name, kind in (stages or {}).items()}


def ranked(docs: Iterable[Any], to_item: ToItem) -> list[Item]:
    """Items of a ranked list, each with its 1-based rank."""
    return [dict(to_item(d), rank=n) for n, d in enumerate(docs, start=1)]


def dropped(given: Sequence[Item], kept: Sequence[Item], reason: str) -> list[Item]:
    """The items a stage received but did not return, once each, with the reason."""
    ids = {i.get("id") for i in kept}
    out, seen = [], set()
    for item in given:
        if item.get("id") not in ids and item.get("id") not in seen:
            seen.add(item.get("id"))
            out.append({k: v for k, v in item.items() if k != "rank"} | {"reason": reason})
    return out


class TraceRecorder:
    """Records one query at a time and appends its trace to a JSONL file.

    Args:
        path: the imported-trace file to write (created, or appended to).
        system: the system's name (the report's title).
        chunks: the framework's chunks (its documents after splitting), or a callable returning
            them; the chunks of every document a query touched become its ``parsing`` stage.
        to_item: turns one framework document into an item.
        chunker: the name of the parsing stage (the framework's splitter).
    """

    def __init__(self, path: str | Path, system: str, to_item: ToItem, *,
                 chunks: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
                 chunker: str = "chunker") -> None:
        self.path, self.system, self.to_item = Path(path), system, to_item
        self.chunks, self.chunker = chunks, chunker
        self.lock = threading.Lock()
        self.current: dict[str, Any] | None = None
        self.written = 0

    def begin(self, query_id: str, question: str | None = None) -> None:
        if not isinstance(query_id, str) or not query_id:
            raise InputError(f"a query id must be a non-empty string, not {query_id!r}")
        self.current = {"query_id": query_id, "system": self.system, "stages": []}
        if question is not None:
            self.current["question"] = question

    @property
    def active(self) -> bool:
        return self.current is not None

    def stage(self, name: str, kind: StageKind, items: list[Item], given: Sequence[Item] = (), reason: str = "",
              seconds: float | None = None, extra_dropped: Sequence[Item] = ()) -> None:
        if self.current is None:
            return
        stage: dict[str, Any] = {"name": name, "kind": kind, "items": items}
        cut = dropped(given, items, reason or f"not kept by {name}") + list(extra_dropped)
        if cut:
            stage["dropped"] = cut
        if seconds is not None:
            stage["seconds"] = seconds
        with self.lock:
            self.current["stages"].append(stage)

    def answer(self, text: str, *, abstained: bool = False, prompt_tokens: int = 0, completion_tokens: int = 0,
               seconds: float | None = None, claims: Any = None) -> None:
        """The answer; ``claims``: what the generator says it claims, ``[{"text", "citations"}]``
        with citations naming context items (a generator's reply metadata, when it cites)."""
        if self.current is None:
            return
        answer: dict[str, Any] = {"text": text, "abstained": abstained,
                                  "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}
        found = cited_claims(claims)
        if found:
            answer["claims"] = found
        if seconds is not None:
            answer["seconds"] = seconds
        self.current["answer"] = answer

    def _parsing(self, stages: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self.chunks is None:
            return None
        touched = {i["doc"] for s in stages for i in (*s["items"], *s.get("dropped", ())) if "doc" in i}
        chunks = self.chunks() if callable(self.chunks) else self.chunks
        items = [i for i in map(self.to_item, chunks) if i.get("doc") in touched]
        return {"name": self.chunker, "kind": "parsing", "items": items} if items else None

    def end(self) -> dict[str, Any] | None:
        """Write the query's trace (one line) and return it."""
        trace, self.current = self.current, None
        if trace is None:
            return None
        parsing = self._parsing(trace["stages"])
        if parsing is not None:
            trace["stages"].insert(0, parsing)
        # the pipeline order of kinds; stages of one kind keep the order they ran in
        trace["stages"].sort(key=lambda s: StageKind(s["kind"]).order)
        with self.lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(trace) + "\n")
            self.written += 1
        return trace


def item_of(text: Any, meta: Any, doc_id: Any = None, score: Any = None) -> Item:
    """:func:`document_item` for framework values that may be ``None``."""
    return document_item(text if isinstance(text, str) else None, meta if isinstance(meta, Mapping) else {},
                         doc_id, score)


def cited_claims(claims: Any) -> list[dict[str, Any]]:
    """Claims a generator put in its reply's metadata (``[{"text", "citations"}]``), checked."""
    if not isinstance(claims, list):
        return []
    return [{"text": c["text"], "citations": [str(x) for x in c.get("citations") or []]}
            for c in claims if isinstance(c, Mapping) and isinstance(c.get("text"), str)]


def write_chunks(documents: Iterable[Any], to_item: ToItem, path: str | Path) -> int:
    """Write a framework's chunks as ``ragdx diagnose --chunks`` reads them (one item per line);
    returns how many were written."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for doc in documents:
            item = to_item(doc)
            if "doc" in item:
                fh.write(json.dumps(item) + "\n")
                n += 1
    return n
