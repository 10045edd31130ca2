"""The checks an index version passes before it may go live (:func:`ragdx.index.versions.verify_index`
runs them on a copy of the store with the version live): BM25 latency against the live index,
permission probes, and the query set's required spans. Each returns its problems (each one
blocks the switch) and appends what it measured to ``notes``."""

from __future__ import annotations

import statistics
import time
from typing import Sequence

from ragdx.diagnosis.evidence import RESOLVED, EvidenceResolver
from ragdx.ingest.quotes import CoverageStatus
from ragdx.stages.bm25 import query_terms
from ragdx.protocols import IndexBuildStore
from ragdx.types import DocStatus, Query

__all__ = ["latency", "permission_probes", "spans"]


def _median_ms(store: IndexBuildStore, questions: Sequence[tuple[str, tuple[str, ...]]]) -> float:
    for question, groups in questions[:2]:  # warm: the keyword mirror is built at the first query
        store.bm25(query_terms(question), groups, 10)
    times = []
    for question, groups in questions:
        started = time.perf_counter()
        store.bm25(query_terms(question), groups, 10)
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times) if times else 0.0


def latency(live: IndexBuildStore, new: IndexBuildStore, queries: Sequence[Query], slowdown: float,
            notes: list[str]) -> list[str]:
    """BM25's median time per question on the new index against the live one's: a problem when
    slower than ``slowdown`` times the live median plus 10 ms."""
    questions = [(q.question, q.principal.groups) for q in queries]
    if not questions:  # no query set: the titles of up to 32 current documents, asked as public
        questions = [(v.document.title, ("public",)) for v in live.versions()
                     if v.document.status is DocStatus.CURRENT and v.document.title][:32]
    if not questions:
        return []
    live_ms, new_ms = _median_ms(live, questions), _median_ms(new, questions)
    notes.append(f"latency: BM25 median {new_ms:.2f} ms per question (live index {live_ms:.2f} ms), "
                 f"{len(questions)} questions")
    if new_ms > slowdown * live_ms + 10.0:
        return [f"latency: BM25 median {new_ms:.2f} ms per question, more than {slowdown:g} x the live "
                f"index's {live_ms:.2f} ms + 10 ms"]
    return []


def permission_probes(live: IndexBuildStore, new: IndexBuildStore, probes: int, notes: list[str]) -> list[str]:
    """Ask the text of restricted versions (cut as the live index cuts them) as ``public``: no
    chunk may come back that is of a restricted version, or that holds the words asked while
    its own version's text (in the live store) does not (restricted text under another name)."""
    acl = live.acl_table()
    closed = {key for key, groups in acl.items() if "public" not in groups}
    problems, asked = [], 0
    for doc_id, version in sorted(closed):
        if asked >= probes:
            break
        for chunk in live.chunks(doc_id, version)[:2]:
            asked += 1
            question = " ".join(chunk.text.split()[:12])
            for hit, _ in new.bm25(query_terms(question), ("public",), 20):
                where = f"{hit.doc_id}@{hit.version}"
                if (hit.doc_id, hit.version) in closed:
                    problems.append(f"permission: a public principal asking {question!r} reaches {where} "
                                    f"(chunk {hit.id}), which public may not read")
                elif question in " ".join(hit.text.split()) and \
                        question not in " ".join(live.texts(hit.doc_id, hit.version)[1].split()):
                    problems.append(f"permission: a public principal asking {question!r} reaches the text of "
                                    f"restricted {doc_id}@{version} in chunk {hit.id}, filed under {where}")
    notes.append(f"permission probes: {asked} restricted chunks asked as public"
                 + (", none reached" if not problems else ""))
    return problems


def spans(live: IndexBuildStore, new: IndexBuildStore, queries: Sequence[Query], notes: list[str]) -> list[str]:
    """Required spans that some chunk of the live index holds must be held in the new one."""
    problems, cut, checked = [], 0, 0
    for query in queries:
        for restricted in (False, True):
            before = EvidenceResolver(live).run(query, restricted=restricted).alternatives
            after = EvidenceResolver(new).run(query, restricted=restricted).alternatives
            for was, now in zip(before, after):
                if was.status is not RESOLVED or was.coverage is None or \
                        was.coverage.status is CoverageStatus.NONE:
                    continue
                checked += 1
                if now.status is not RESOLVED or now.coverage is None or \
                        now.coverage.status is CoverageStatus.NONE:
                    problems.append(f"spans: query {query.id!r}: {now.describe()} is held by the live index "
                                    f"and not by the new one ({now.note or 'no chunk holds it'})")
                elif was.coverage.status is CoverageStatus.FULL and now.coverage.status is CoverageStatus.PARTIAL:
                    cut += 1
    if queries:
        notes.append(f"spans: {checked} required spans held by the live index checked"
                     + (f"; {cut} of them now cut across two chunks" if cut else ""))
    return problems
