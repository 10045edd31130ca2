"""Oracle substitution: replace the context with the gold evidence and keep the generator fixed.

If a query's answer becomes supported with the gold context, its failure lay upstream (retrieval,
ranking, assembly); if it stays wrong, the generator is at fault. The gold context holds, for
each required group, the chunk that covers its first resolvable alternative whole (or the span
itself when no chunk does), in group order.
"""

from __future__ import annotations

import time

from ragdx.diagnosis.evidence import EvidenceResolver
from ragdx.ingest.chunk import TokenCounter
from ragdx.protocols import Store
from ragdx.types import Context, ContextUnit, Query


def gold_context(store: Store, query: Query, counter: TokenCounter,
                 resolver: EvidenceResolver | None = None) -> Context:
    """The context a perfect retriever and assembler would give for ``query``."""
    started = time.perf_counter()
    evidence = (resolver or EvidenceResolver(store)).run(query)
    units: list[ContextUnit] = []
    for g in sorted({a.group for a in evidence.alternatives}):
        alt = next((a for a in evidence.group(g) if a.span is not None), None)
        if alt is None or alt.span is None:
            continue
        span = alt.span
        chunk_ids: tuple[str, ...] = ()
        if alt.coverage is not None and alt.coverage.full:
            chunk = store.chunks_by_id([alt.coverage.full[0]])[alt.coverage.full[0]]
            span, chunk_ids = chunk.span, (chunk.id,)
        _, parsed = store.texts(span.doc_id, span.version)
        text = parsed[span.start:span.end]
        stored = store.version(span.doc_id, span.version)
        units.append(ContextUnit(f"S{len(units) + 1}", span.doc_id, span.version, span.start, span.end,
                                 text, stored.document.title if stored else "", (), chunk_ids,
                                 len(units) + 1, counter.count(text), flags=("oracle",)))
    tokens = sum(u.tokens for u in units)
    return Context("oracle-context", tuple(units), (), tokens, tokens, counter.name, (),
                   {"oracle": "context"}, time.perf_counter() - started)
