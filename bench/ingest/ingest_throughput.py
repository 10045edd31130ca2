"""Ingest throughput on a real documentation corpus: the Python 3.11 HTML docs (Debian's
``python3-doc``, about 530 pages, 50 MB of Sphinx HTML).

Reproduce, from the repository root::

    .venv/bin/python bench/ingest/ingest_throughput.py

(``apt-get install python3-doc`` first if ``/usr/share/doc/python3-doc/html`` is missing.)

What it measures, ``--repeat`` times, each time into a fresh temporary store:

- the full ingest (``Ingestor(store).run(manifest)``): seconds, documents/s, MB/s, chunks/s;
- re-ingesting the same manifest into the filled store, where every document is unchanged;
- where the time goes, by timing the phases on their own: reading the files, ``parse`` from
  ``ragdx.ingest.parsers``, chunking the parsed documents, and the store's inserts alone; the
  store write (with hashing and bookkeeping) is the full ingest minus read, parse and chunk.

Figures are medians over the repeats, in wall-clock seconds and in CPU seconds: the ingest is
single-threaded and CPU-bound, so its CPU time is its cost even on a shared machine, where
other processes inflate wall time; the breakdown is in CPU seconds. Peak RSS is
``resource.getrusage`` after the first full ingest. The git commit measured (and any
uncommitted change under src/) is recorded.

Only the ``.html`` pages are ingested (not ``_sources/*.txt`` nor ``_static/``): the script
writes a temporary manifest (CONTRACTS.md) listing them, ``doc_id`` being the path relative to
the html folder. A table goes to stdout, progress to stderr, and everything to the
JSON file named by ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import ragdx
from ragdx.ingest.chunk import ChunkerConfig, StructureChunker
from ragdx.ingest.ingestor import Ingestor
from ragdx.ingest.parsers import parse
from ragdx.store.sqlite import SQLiteStore
from ragdx.types import Document

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    DEFAULT_HTML, MB, REPO, Stopwatch, code_version, html_pages, label_table, machine, peak_rss_mb, store_bytes,
    write_manifest, write_result,
)

DEFAULT_OUT = REPO / "bench" / "results" / "ingest_throughput.json"










def time_phases(pages: list[Path], html_dir: Path, config: ChunkerConfig,
                db: Path) -> dict[str, object]:
    """Read, parse, chunk and insert every page, timing each phase over the whole corpus."""
    with Stopwatch() as read:
        data = [p.read_bytes() for p in pages]
    with Stopwatch() as parsing:
        parsed = [parse(blob, "html", str(p)) for blob, p in zip(data, pages)]
    # the same Document the Ingestor builds (content hash as version) before chunking
    docs = [Document(doc_id=p.relative_to(html_dir).as_posix(), version=h[:12], content_hash=h,
                     path=str(p), title=pd.title, format="html")
            for p, (_, pd), h in zip(pages, parsed, (hashlib.sha256(b).hexdigest() for b in data))]
    chunker = StructureChunker(config)
    with Stopwatch() as chunking:
        chunked = [chunker.run(doc, pd) for doc, (_, pd) in zip(docs, parsed)]
    # the store's part of an ingest of new documents: one transaction of inserts (the Ingestor
    # also looks up each doc_id's stored versions, which this leaves out)
    config_json = json.dumps(asdict(config), sort_keys=True)
    with SQLiteStore(db) as store, Stopwatch() as insert:
        with store.transaction():
            for doc, (raw, pd), ck in zip(docs, parsed, chunked):
                store.insert_version(doc, raw, pd, ck.sections, ck.chunks, config_json)
    return {"read": read.times(), "parse": parsing.times(), "chunk": chunking.times(),
            "insert": insert.times(), "chunks": sum(len(c.chunks) for c in chunked),
            "parsed_bytes": sum(len(pd.text.encode()) for _, pd in parsed)}


def _median(runs: list[dict], key: str, clock: str) -> float:
    return statistics.median(r[key][clock] for r in runs)


def run(html_dir: Path, pages: list[Path], repeat: int) -> dict[str, object]:
    load_before = os.getloadavg()[0]
    total_bytes = sum(p.stat().st_size for p in pages)
    config = ChunkerConfig()
    full, phases = [], []
    rss_before = peak_rss_mb()
    rss_ingest = None
    with tempfile.TemporaryDirectory(prefix="ragdx-bench-") as tmp:
        manifest = Path(tmp) / "manifest.jsonl"
        write_manifest(pages, html_dir, manifest)
        for i in range(repeat):
            db = Path(tmp) / f"store-{i}.db"
            with SQLiteStore(db) as store:
                with Stopwatch() as ingest:
                    report = Ingestor(store, config).run(manifest, allow_outside=True)
                if rss_ingest is None:
                    rss_ingest = peak_rss_mb()
                version = store.index_version
                with Stopwatch() as again:
                    second = Ingestor(store, config).run(manifest, allow_outside=True)
                changed = store.index_version != version
            # measured closed: an open store also holds a write-ahead log as large as its data
            full.append({"ingest": ingest.times(), "again": again.times(),
                         "documents": report.documents, "chunks": report.chunks,
                         "unchanged": second.count("unchanged"), "index_version_changed": changed,
                         "store_bytes": store_bytes(db)})
            for f in Path(tmp).glob(f"store-{i}.db*"):
                f.unlink()  # one store's worth of disk at a time
            phases.append(time_phases(pages, html_dir, config, db))
            for f in Path(tmp).glob(f"store-{i}.db*"):
                f.unlink()
            ph = phases[-1]
            print(f"repeat {i + 1}/{repeat} (wall/cpu s): ingest {ingest.wall:.2f}/{ingest.cpu:.2f}, "
                  f"re-ingest {again.wall:.2f}/{again.cpu:.2f}, "
                  + ", ".join(f"{k} {ph[k]['wall']:.2f}/{ph[k]['cpu']:.2f}"
                              for k in ("parse", "chunk", "insert")), file=sys.stderr)

    documents, chunks = full[0]["documents"], full[0]["chunks"]
    ingest = {clock: _median(full, "ingest", clock) for clock in ("wall", "cpu")}
    again = {clock: _median(full, "again", clock) for clock in ("wall", "cpu")}
    # the breakdown is in CPU seconds, which other processes on a shared machine cannot inflate
    cpu = {k: _median(phases, k, "cpu") for k in ("read", "parse", "chunk", "insert")}
    write = max(0.0, ingest["cpu"] - cpu["read"] - cpu["parse"] - cpu["chunk"])
    breakdown = {"read_s": cpu["read"], "parse_s": cpu["parse"], "chunk_s": cpu["chunk"],
                 "write_and_other_s": write}
    return {
        "benchmark": "ingest_throughput",
        "command": ".venv/bin/python bench/ingest/ingest_throughput.py",
        "ragdx_version": ragdx.__version__,
        "code": code_version(),
        "machine": machine() | {"load_average_1min": {"before": load_before,
                                                       "after": os.getloadavg()[0]}},
        "corpus": {"html_dir": str(html_dir), "pages": len(pages), "bytes": total_bytes,
                   "mb": total_bytes / MB, "parsed_text_mb": phases[0]["parsed_bytes"] / MB},
        "config": {"repeat": repeat, "chunker": asdict(config)},
        "ingest": {
            "documents": documents, "chunks": chunks,
            "seconds": ingest["wall"], "cpu_seconds": ingest["cpu"],
            "seconds_each": [r["ingest"]["wall"] for r in full],
            "cpu_seconds_each": [r["ingest"]["cpu"] for r in full],
            "documents_per_s": documents / ingest["wall"],
            "mb_per_s": total_bytes / MB / ingest["wall"],
            "chunks_per_s": chunks / ingest["wall"],
            "per_cpu_second": {"documents": documents / ingest["cpu"],
                               "mb": total_bytes / MB / ingest["cpu"],
                               "chunks": chunks / ingest["cpu"]},
            "store_mb": full[0]["store_bytes"] / MB,
        },
        "breakdown_cpu": breakdown | {
            "shares": {k: v / ingest["cpu"] for k, v in breakdown.items()},
            "insert_measured_s": cpu["insert"],
            "note": "CPU seconds, medians; each phase timed on its own over the whole corpus; "
                    "write_and_other = ingest - read - parse - chunk (store write, hashing, "
                    "manifest, version look-ups); insert_measured = the store inserts alone, in "
                    "one transaction into a fresh store"},
        "reingest_unchanged": {
            "seconds": again["wall"], "cpu_seconds": again["cpu"],
            "seconds_each": [r["again"]["wall"] for r in full],
            "unchanged": full[0]["unchanged"], "of": documents,
            "index_version_changed": any(r["index_version_changed"] for r in full),
            "cpu_fraction_of_full_ingest": again["cpu"] / ingest["cpu"],
        },
        "memory": {"peak_rss_mb_before": rss_before, "peak_rss_mb_after_ingest": rss_ingest},
        "checks": {"phase_chunks_match_ingest": all(p["chunks"] == chunks for p in phases),
                   "same_chunks_every_repeat": all(r["chunks"] == chunks for r in full)},
    }


def table(result: dict) -> str:
    c, i, b, r, m = (result["corpus"], result["ingest"], result["breakdown_cpu"],
                     result["reingest_unchanged"], result["memory"])
    mach, code, n = result["machine"], result["code"], result["config"]["repeat"]
    pc = i["per_cpu_second"]
    rows = [
        ("machine", f"{mach['cpu_model']}, {mach['nproc']} cores, Python {mach['python']}"),
        ("load average", f"{mach['load_average_1min']['before']:.2f} before, "
                         f"{mach['load_average_1min']['after']:.2f} after (1 min)"),
        ("ragdx", f"{result['ragdx_version']} at {(code['git_commit'] or 'unknown commit')[:10]}"
                  + (f" + {len(code['uncommitted_src_changes'])} uncommitted src changes"
                     if code["uncommitted_src_changes"] else "")),
        ("corpus", f"{c['pages']} HTML pages, {c['mb']:.1f} MB"),
        ("parsed text", f"{c['parsed_text_mb']:.1f} MB ({c['parsed_text_mb'] / c['mb']:.0%} of the HTML)"),
        ("chunks", f"{i['chunks']:,} (max_tokens {result['config']['chunker']['max_tokens']})"),
        (f"ingest, median of {n}", f"{i['seconds']:.2f} s wall, {i['cpu_seconds']:.2f} s CPU  "
                                   f"(wall each: {', '.join(f'{s:.2f}' for s in i['seconds_each'])})"),
        ("  documents/s", f"{i['documents_per_s']:.1f} wall, {pc['documents']:.1f} per CPU s"),
        ("  MB/s", f"{i['mb_per_s']:.2f} wall, {pc['mb']:.2f} per CPU s"),
        ("  chunks/s", f"{i['chunks_per_s']:,.0f} wall, {pc['chunks']:,.0f} per CPU s"),
        ("breakdown (CPU s)", ""),
        ("  read files", f"{b['read_s']:.2f} s  ({b['shares']['read_s']:.0%})"),
        ("  parse", f"{b['parse_s']:.2f} s  ({b['shares']['parse_s']:.0%})"),
        ("  chunk", f"{b['chunk_s']:.2f} s  ({b['shares']['chunk_s']:.0%})"),
        ("  store write + other", f"{b['write_and_other_s']:.2f} s  "
                                  f"({b['shares']['write_and_other_s']:.0%}, derived)"),
        ("    of which inserts", f"{b['insert_measured_s']:.2f} s  (measured alone)"),
        ("store size", f"{i['store_mb']:.1f} MB"),
        ("peak RSS", f"{m['peak_rss_mb_after_ingest']:.0f} MB "
                     f"(before ingest {m['peak_rss_mb_before']:.0f} MB)"),
        ("re-ingest, unchanged", f"{r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s CPU "
                                 f"({r['cpu_fraction_of_full_ingest']:.0%} of a full ingest's CPU); "
                                 f"{r['unchanged']}/{r['of']} unchanged, index_version changed: "
                                 f"{r['index_version_changed']}"),
    ]
    return label_table(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML,
                    help=f"the Sphinx HTML folder (default {DEFAULT_HTML})")
    ap.add_argument("--repeat", type=int, default=3, help="fresh-store repeats (default 3)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="the JSON results file (default bench/results/ingest_throughput.json)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, not {args.repeat}")
    if not args.html_dir.is_dir():
        print(f"error: {args.html_dir} is missing: the benchmark needs the Python HTML docs; "
              "install them with: apt-get install python3-doc (or pass --html-dir)", file=sys.stderr)
        return 2
    pages = html_pages(args.html_dir)
    if not pages:
        print(f"error: no .html pages under {args.html_dir}; apt-get install python3-doc "
              "(or pass --html-dir)", file=sys.stderr)
        return 2
    result = run(args.html_dir, pages, args.repeat)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
