"""Ingest on every core: the Python 3.11 HTML docs (about 530 pages) ingested keyword-only into a
fresh store, parsing on 1 process and on N, alternately.

Reproduce, from the repository root::

    .venv/bin/python bench/ingest/ingest_workers.py            # workers 1 and 2, 3 repeats each

Each run is ``build_ingestor(store, settings, workers=W).run(manifest)`` with the dense channel
off (the ingest the issue measured: parsing was 61% of it, on one core), into a new temporary
store. Reading, the store's look-ups, chunking and the one writer stay in the main process; the
workers parse (``ragdx.ingest.parsers.parse``), spawned per ingest (their start-up is inside the
time). Reported per worker count: the median wall seconds, documents/s, and the CPU seconds of
the main process and of its workers. The stores are checked to hold the same chunks. A table
goes to stdout, everything to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from ragdx.build import build_ingestor
from ragdx.config import load_settings
from ragdx.store.sqlite import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import (  # noqa: E402
    DEFAULT_HTML, REPO, Stopwatch, code_version, html_pages, machine, missing_pages, write_manifest, write_result,
)

DEFAULT_OUT = REPO / "bench" / "results" / "ingest_workers.json"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ingest(manifest: Path, workers: int, tmp: Path) -> dict[str, object]:
    path = tmp / f"store-{workers}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    settings = load_settings(overrides=["retrieval.dense.enabled=false"])
    before = children_cpu()
    with SQLiteStore(path) as store, Stopwatch() as clock:
        report = build_ingestor(store, settings, workers=workers).run(manifest, allow_outside=True)
    with SQLiteStore(path, mode="read") as store:
        digest = hash(tuple((c.id, c.text) for c in store.chunks()))
    return {"wall_s": clock.wall, "main_cpu_s": clock.cpu, "workers_cpu_s": children_cpu() - before,
            "documents": report.documents, "chunks": report.chunks, "digest": digest}


def run(html_dir: Path, counts: list[int], repeat: int) -> dict[str, object]:
    pages = html_pages(html_dir)
    with tempfile.TemporaryDirectory(prefix="ragdx-workers-") as tmp:
        manifest = Path(tmp) / "manifest.jsonl"
        write_manifest(pages, html_dir, manifest)
        runs: dict[int, list[dict]] = {n: [] for n in counts}
        for i in range(repeat):
            for n in counts if i % 2 == 0 else counts[::-1]:  # alternate who goes first
                print(f"repeat {i + 1}: {n} worker(s) ...", file=sys.stderr, flush=True)
                runs[n].append(ingest(manifest, n, Path(tmp)))
    digests = {r["digest"] for rs in runs.values() for r in rs}
    summary = {}
    for n, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        summary[str(n)] = {"wall_s": wall, "documents_per_s": rs[0]["documents"] / wall,
                           "main_cpu_s": statistics.median(r["main_cpu_s"] for r in rs),
                           "workers_cpu_s": statistics.median(r["workers_cpu_s"] for r in rs),
                           "wall_each": [r["wall_s"] for r in rs]}
    return {"benchmark": "ingest_workers", "command": ".venv/bin/python bench/ingest/ingest_workers.py",
            "code": code_version(), "machine": machine(),
            "corpus": {"html_dir": str(html_dir), "pages": len(pages),
                       "chunks": runs[counts[0]][0]["chunks"]},
            "same_chunks_every_run": len(digests) == 1, "repeat": repeat, "workers": summary,
            # the main process's (a forked child's maximum starts at its parent's, so workers' are not told apart)
            "peak_rss_mb": {"main_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1000},
            "load_average_end": os.getloadavg()}


def table(r: dict) -> str:
    m, base = r["machine"], r["workers"][min(r["workers"], key=int)]
    lines = [f"machine: {m['cpu_model']}, {m['nproc']} cores; {r['corpus']['pages']} pages, "
             f"{r['corpus']['chunks']:,} chunks; same chunks every run: {r['same_chunks_every_run']}", "",
             "workers   wall s (median)   documents/s   speed-up   CPU s main + workers"]
    for n, s in r["workers"].items():
        lines.append(f"  {n:>5}   {s['wall_s']:14.2f}   {s['documents_per_s']:11.1f}   "
                     f"{base['wall_s'] / s['wall_s']:7.2f}x   {s['main_cpu_s']:.1f} + {s['workers_cpu_s']:.1f}")
    rss = r["peak_rss_mb"]
    lines.append(f"peak RSS of the main process (Linux, over every run): {rss['main_process']:.0f} MB")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html-dir", type=Path, default=DEFAULT_HTML)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    problem = missing_pages(args.html_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    result = run(args.html_dir, args.workers, args.repeat)
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
