"""TREC run and qrels files, so ragdx interoperates with trec_eval, ranx and ir_measures users.

- run: ``query_id Q0 doc_id rank score tag`` per line (whitespace-separated);
- qrels: ``query_id iteration doc_id relevance`` per line.

A malformed line is an error naming the file, the line and what is wrong; a document listed
twice for one query is an error too (trec_eval would silently keep one).
"""

from __future__ import annotations

from pathlib import Path
from ragdx._jsonl import read_text
from ragdx.errors import InputError
from ragdx.evaluation.measures import Qrels, Run, ranking


def _lines(path: Path, what: str):
    for number, line in enumerate(read_text(path, what=what).splitlines(), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line.split()


def _read_table(path: Path, what: str, columns: str, value_at: int, convert, value_name: str) -> dict[str, dict]:
    """Whitespace-separated rows of the named columns: the query is the first, the document the
    third, the value at ``value_at`` (converted). A document twice for one query is an error."""
    width = len(columns.split())
    table: dict[str, dict] = {}
    for number, parts in _lines(path, what):
        if len(parts) != width:
            raise InputError(f"expected {width} fields '{columns}', got {len(parts)}", file=str(path), line=number)
        qid, doc, raw = parts[0], parts[2], parts[value_at]
        try:
            value = convert(raw)
        except ValueError:
            kind = "a number" if convert is float else "an integer"
            raise InputError(f"{value_name} {raw!r} is not {kind}", file=str(path), line=number) from None
        if doc in table.setdefault(qid, {}):
            raise InputError(f"document {doc!r} is listed twice for query {qid!r}", file=str(path), line=number)
        table[qid][doc] = value
    return table


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a TREC run file: ``query_id Q0 doc_id rank score tag``."""
    return _read_table(Path(path), "run file", "query_id Q0 doc_id rank score tag", 4, float, "score")


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read a TREC qrels file: ``query_id iteration doc_id relevance``."""
    return _read_table(Path(path), "qrels file", "query_id iteration doc_id relevance", 3, int, "relevance")


def write_run(run: Run, path: str | Path, tag: str = "ragdx") -> None:
    """Write a run in TREC format, ranked as trec_eval ranks it."""
    with open(path, "w", encoding="utf-8") as fh:
        for qid in sorted(run):
            for rank, doc in enumerate(ranking(run[qid]), start=1):
                fh.write(f"{qid} Q0 {doc} {rank} {run[qid][doc]!r} {tag}\n")


def write_qrels(qrels: Qrels, path: str | Path) -> None:
    """Write qrels in TREC format."""
    with open(path, "w", encoding="utf-8") as fh:
        for qid in sorted(qrels):
            for doc in sorted(qrels[qid]):
                fh.write(f"{qid} 0 {doc} {qrels[qid][doc]}\n")
