"""Rechecking an answer's evidence (issue 25): the full check, which reads every cited span, against
the shortcut, which trusts an unchanged store id and index version.

Reproduce, from the repository root::

    .venv/bin/python bench/diagnosis/recheck.py [--rounds 200]

The store: the bundled example (``ragdx demo``'s corpus: 15 document versions) ingested into a temporary
store as the hardening tests do (default settings, dense channel off). Each of its 20 questions
is answered by the default lexical pipeline and bound to its evidence (``bind_evidence``); the
answers that cite something are rechecked. Measured, per answer, ``--rounds`` times each way
(medians, wall microseconds of this process; CPU time is too coarse for one call):

- **full**: ``recheck(store, binding)``: for every cited span, the version, its readability for
  the principal, its parsed text and the SHA-256 of the span, its status;
- **shortcut**: ``recheck(store, binding, shortcut=True)`` in the same store at the same index
  version: two reads of the store's ``meta`` table, no span read.

Both must say ``valid`` (the store is unchanged), and the full check is also run once against a
copy of the store rebuilt without the documents the answers cite, where it must find every span
``missing`` and the shortcut must not be taken. A table goes to stdout, everything to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ragdx.binding import RecheckStatus, SpanChange, bind_evidence, recheck
from ragdx.build import build_ingestor, build_pipeline
from ragdx.examples import example_dir
from ragdx.config import load_settings
from ragdx.queryset import load_queries
from ragdx.store.sqlite import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, label_table, machine, write_result  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "recheck.json"
SETTINGS = ["retrieval.dense.enabled=false"]


def timed(call, rounds: int) -> list[float]:
    """Microseconds of each of ``rounds`` calls."""
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1e6)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="timed rechecks of each answer, each way")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    example = example_dir()
    settings = load_settings(overrides=SETTINGS)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.db"
        with SQLiteStore(path) as store:
            build_ingestor(store, settings).run(example / "manifest.jsonl")
            pipeline = build_pipeline(store, settings)
            bindings = []
            for query in load_queries(example / "queries.jsonl"):
                before = store.index_version
                trace = pipeline.run(query)
                binding = bind_evidence(store, query.principal, trace.context, trace.answer, before)
                if binding.cited:
                    bindings.append((query.id, binding))
            full_us, short_us, spans = [], [], []
            for query_id, binding in bindings:
                full, short = recheck(store, binding), recheck(store, binding, shortcut=True)
                assert full.status is short.status is RecheckStatus.VALID and full.full and not short.full
                full_us.append(statistics.median(timed(lambda: recheck(store, binding), args.rounds)))
                short_us.append(statistics.median(timed(lambda: recheck(store, binding, shortcut=True),
                                                        args.rounds)))
                spans.append(len(binding.cited))
            cited_docs = sorted({c.doc_id for _, b in bindings for c in b.cited})
            index_version, versions = store.index_version, len(store.versions())
        # the same path, rebuilt without every cited document: the shortcut must not be taken
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        entries = [json.loads(line) for line in (example / "manifest.jsonl").read_text().splitlines()]
        kept = [e | {"path": str(example / e["path"])} for e in entries if e["doc_id"] not in cited_docs]
        manifest = Path(folder) / "kept.jsonl"
        manifest.write_text("".join(json.dumps(e) + "\n" for e in kept))
        with SQLiteStore(path) as rebuilt:
            build_ingestor(rebuilt, settings).run(manifest)
            found = [recheck(rebuilt, b, shortcut=True) for _, b in bindings]
            rebuilt_version = rebuilt.index_version
    missing = sum(1 for f in found for c in f.changed if c.reason is SpanChange.MISSING)
    full_checks = sum(1 for f in found if f.full)
    assert full_checks == len(found) == len(bindings) > 0 and missing == sum(spans), (missing, sum(spans))
    per_span = [f / s for f, s in zip(full_us, spans)]
    result = {
        "benchmark": "recheck", "machine": machine(), "code": code_version(), "rounds": args.rounds,
        "store": {"corpus": "the bundled example", "versions": versions, "settings": SETTINGS,
                  "index_version": index_version, "rebuilt_index_version": rebuilt_version},
        "answers": len(bindings), "cited_spans": sum(spans),
        "full_us": {"median": statistics.median(full_us), "max": max(full_us),
                    "per_span_median": statistics.median(per_span)},
        "shortcut_us": {"median": statistics.median(short_us), "max": max(short_us)},
        "ratio_median": statistics.median(f / s for f, s in zip(full_us, short_us)),
        "rebuilt_without_cited": {"answers": len(found), "spans_missing": missing,
                                  "checked_in_full": full_checks},
        "per_answer": [{"query": q, "spans": s, "full_us": f, "shortcut_us": c}
                       for (q, _), s, f, c in zip(bindings, spans, full_us, short_us)],
    }
    table = label_table([
        ("answers rechecked", f"{len(bindings)} ({sum(spans)} cited spans)"),
        ("full check, per answer", f"{result['full_us']['median']:.0f} us median, "
                                   f"{result['full_us']['max']:.0f} us max"),
        ("full check, per span", f"{result['full_us']['per_span_median']:.0f} us median"),
        ("shortcut, per answer", f"{result['shortcut_us']['median']:.0f} us median"),
        ("full / shortcut", f"{result['ratio_median']:.1f}x median"),
        ("rebuilt store", f"{missing} of {sum(spans)} spans missing, {full_checks} of {len(found)} "
                          f"checked in full (index version {rebuilt_version} as before: {index_version})"),
    ])
    write_result(args.out, result, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
