"""Traces as OpenInference spans, one JSON object per line, for an OTLP collector or Arize Phoenix.

Each query becomes a CHAIN span (input: the question, output: the answer) with children: a
RETRIEVER span per retrieval channel (``retrieval.documents.N.document.{id,score,content,
metadata}``), a RERANKER span per fusion, rerank and governance stage
(``reranker.input_documents`` / ``reranker.output_documents``, ``reranker.query``,
``reranker.top_k``), a RETRIEVER span for the assembled context, an LLM span for the answer (``llm.model_name``,
``llm.token_count.*``) and an EVALUATOR span for the claims' verdicts. ``ragdx diagnose`` reads
these spans back (:mod:`ragdx.diagnosis.spans`) to the same diagnoses. ragdx's own facts go under
``ragdx.``: the query id, each stage's name, kind and seconds, the answer's claims, the channel,
each document's rank at earlier stages, whether it holds a required evidence group, whether it
was truncated, the index version, the diagnosis.

Semantic conventions: https://github.com/Arize-ai/openinference (``openinference.span.kind``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

from ragdx.errors import InputError
from ragdx.types import StageKind


def _id(*parts: object, n: int = 16) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:n]


def _documents(prefix: str, items: list[dict], texts: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        key = f"{prefix}.{i}.document"
        out[f"{key}.id"] = item["id"]
        if "score" in item:
            out[f"{key}.score"] = item["score"]
        if item.get("text") or item["id"] in texts:
            out[f"{key}.content"] = item.get("text") or texts[item["id"]]
        out[f"{key}.metadata"] = json.dumps({k: item[k] for k in ("doc", "version", "start", "end", "rank")
                                             if k in item})
        history = item.get("history") or []
        if history:
            out[f"ragdx.{key}.history"] = json.dumps(history)
        if item.get("truncated") is not None:
            out[f"ragdx.{key}.truncated"] = item["truncated"]
    return out


def spans(trace: dict, diagnosis: dict | None = None, index_version: int | None = None) -> Iterator[dict]:
    """The OpenInference spans of one ragdx trace (a ``traces.jsonl`` line)."""
    trace_id = _id(trace["query_id"], trace.get("question", ""), n=32)
    root = _id(trace_id, "root")
    stages = trace["stages"]
    answer = next((s for s in stages if s["kind"] == StageKind.GENERATION), None)
    texts = {u["id"]: u.get("text", "") for s in stages if s["kind"] == "context" for u in s["items"]}
    root_attrs: dict[str, Any] = {"openinference.span.kind": "CHAIN", "input.value": trace.get("question", ""),
                                  "output.value": answer["text"] if answer else "",
                                  "ragdx.query_id": trace["query_id"], "ragdx.system": "ragdx",
                                  "ragdx.principal.groups": json.dumps(trace.get("principal", {}).get("groups", []))}
    if index_version is not None:
        root_attrs["ragdx.index_version"] = index_version
    if diagnosis is not None:
        root_attrs |= {"ragdx.outcome": diagnosis["outcome"], "ragdx.first_failure": diagnosis["first_failure"] or "",
                       "ragdx.hypothesis": diagnosis["hypothesis"]}
        presence = diagnosis.get("stages", {})
    else:
        presence = {}
    yield {"name": "rag", "context": {"trace_id": trace_id, "span_id": root}, "parent_id": None,
           "span_kind": "CHAIN", "attributes": root_attrs}
    previous: list[dict] = []
    for n, stage in enumerate(stages):
        attrs: dict[str, Any] = {"ragdx.stage": stage["name"], "ragdx.stage.kind": stage["kind"]}
        if stage.get("seconds") is not None:
            attrs["ragdx.seconds"] = stage["seconds"]
        key = StageKind.RETRIEVAL.value if stage["kind"] == StageKind.RETRIEVAL else stage["name"]
        if key in presence:
            attrs["ragdx.evidence_groups_present"] = json.dumps(presence[key]["groups_present"])
        kind = stage["kind"]
        if kind in (StageKind.RETRIEVAL, StageKind.CONTEXT):
            attrs |= {"openinference.span.kind": "RETRIEVER", "input.value": trace.get("question", ""),
                      "ragdx.channel": stage["name"]}
            attrs |= _documents("retrieval.documents", stage.get("items", []), texts)
        elif kind in (StageKind.FUSION, StageKind.RERANK, StageKind.GOVERNANCE):
            attrs |= {"openinference.span.kind": "RERANKER", "reranker.query": trace.get("question", ""),
                      "reranker.top_k": len(stage.get("items", []))}
            attrs |= _documents("reranker.input_documents", previous, texts)
            attrs |= _documents("reranker.output_documents", stage.get("items", []), texts)
        elif kind == StageKind.REWRITE:  # what was searched instead of (or besides) the question, and every hop
            attrs |= {"openinference.span.kind": "CHAIN", "input.value": stage.get("original", ""),
                      "output.value": json.dumps(stage.get("searches", [])),
                      "ragdx.rewrite": json.dumps({k: stage.get(k) for k in ("route", "rewrites", "slots", "hops",
                                                                             "stopped")})}
        elif kind == StageKind.GENERATION:
            usage = stage.get("usage", {})
            attrs |= {"openinference.span.kind": "LLM", "llm.model_name": stage.get("model", ""),
                      "llm.token_count.prompt": usage.get("prompt_tokens", 0),
                      "llm.token_count.completion": usage.get("completion_tokens", 0),
                      "output.value": stage.get("text", ""), "ragdx.abstained": stage.get("abstained", False),
                      "ragdx.claims": json.dumps([{"text": c.get("text", ""), "citations": c.get("citations", [])}
                                                  for c in stage.get("claims", [])])}
        else:
            attrs |= {"openinference.span.kind": "EVALUATOR",
                      "output.value": json.dumps([c.get("verdict") for c in stage.get("claims", [])]),
                      "ragdx.claims": json.dumps([{k: c[k] for k in ("text", "citations", "verdict", "reason",
                                                                      "support") if k in c}
                                                  for c in stage.get("claims", [])])}
        if stage.get("dropped"):
            attrs["ragdx.dropped"] = json.dumps([{k: d[k] for k in ("id", "doc", "version", "start", "end", "rank",
                                                                    "reason") if k in d}
                                                 for d in stage["dropped"]])
        yield {"name": stage["name"], "context": {"trace_id": trace_id, "span_id": _id(trace_id, n, stage["name"])},
               "parent_id": root, "span_kind": attrs["openinference.span.kind"], "attributes": attrs}
        if stage.get("items") and kind != StageKind.GENERATION:
            previous = stage["items"]


def _json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the run file: {exc}", file=str(path)) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"not a JSON line: {exc}", file=str(path), line=number) from None
        if not isinstance(obj, dict):
            raise InputError("a line must be a JSON object", file=str(path), line=number)
        yield number, obj


def export_run(folder: Path) -> Iterator[dict]:
    """Every span of a run folder's traces (``ragdx export``), with each query's diagnosis.

    Raises:
        InputError: the folder holds no ``traces.jsonl``, or a run file is not what ragdx wrote
            (naming the file and the line).
    """
    traces_path, diagnosis_path = folder / "traces.jsonl", folder / "diagnosis.jsonl"
    if not traces_path.is_file():
        raise InputError(f"{traces_path} not found: --run must be a run folder from 'ragdx run'")
    index_version = None
    manifest_path = folder / "manifest.json"
    if manifest_path.is_file():
        try:
            index_version = json.loads(manifest_path.read_text(encoding="utf-8")).get("index_version")
        except (ValueError, UnicodeDecodeError, AttributeError, RecursionError) as exc:
            raise InputError(f"not a run manifest: {exc}", file=str(manifest_path)) from None
    diagnoses = {}
    if diagnosis_path.is_file():
        diagnoses = {d["id"]: d for _, d in _json_lines(diagnosis_path) if isinstance(d.get("id"), str)}
    for number, trace in _json_lines(traces_path):
        try:
            yield from spans(trace, diagnoses.get(trace.get("query_id")), index_version)
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"not a ragdx trace: missing or malformed {exc}", file=str(traces_path),
                             line=number) from None
