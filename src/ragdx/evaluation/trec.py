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


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a TREC run file: ``query_id Q0 doc_id rank score tag``."""
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    for number, parts in _lines(path, "run file"):
        if len(parts) != 6:
            raise InputError(f"expected 6 fields 'query_id Q0 doc_id rank score tag', got {len(parts)}",
                             file=str(path), line=number)
        qid, _, doc, _, score, _ = parts
        try:
            value = float(score)
        except ValueError:
            raise InputError(f"score {score!r} is not a number", file=str(path), line=number) from None
        if doc in run.setdefault(qid, {}):
            raise InputError(f"document {doc!r} is listed twice for query {qid!r}", file=str(path), line=number)
        run[qid][doc] = value
    return run


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read a TREC qrels file: ``query_id iteration doc_id relevance``."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    for number, parts in _lines(path, "qrels file"):
        if len(parts) != 4:
            raise InputError(f"expected 4 fields 'query_id iteration doc_id relevance', got {len(parts)}",
                             file=str(path), line=number)
        qid, _, doc, rel = parts
        try:
            value = int(rel)
        except ValueError:
            raise InputError(f"relevance {rel!r} is not an integer", file=str(path), line=number) from None
        if doc in qrels.setdefault(qid, {}):
            raise InputError(f"document {doc!r} is judged twice for query {qid!r}", file=str(path), line=number)
        qrels[qid][doc] = value
    return qrels


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
