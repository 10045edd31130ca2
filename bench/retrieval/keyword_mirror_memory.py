"""The keyword mirror's build memory: what building the posting matrix from FTS5 holds at its peak,
phase by phase, against what the finished mirror keeps.

Reproduce, from the repository root::

    .venv/bin/python bench/quality/quality.py --half fit     # once: the dev set's store (70,594 chunks)
    .venv/bin/python bench/retrieval/keyword_mirror_memory.py

The mirror is built from ``--store`` (read only) in this process, with ``tracemalloc`` on (numpy's
arrays are traced): the chunk rows, then the postings read from FTS5's ``instance`` vocabulary,
then the matrix put together. Each phase's peak and what it holds after are in MB; the ratio of
the build's peak to the finished mirror's size is what scales with the corpus (a million chunks
hold about fifteen times the dev set's postings).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tracemalloc
from pathlib import Path

from ragdx.store import keyword

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, Stopwatch, code_version, label_table, machine, write_result  # noqa: E402

DEFAULT_STORE = REPO / "bench" / ".cache" / "devset" / "store.db"
DEFAULT_OUT = REPO / "bench" / "results" / "keyword_mirror_memory.json"


def _mb(n: int) -> float:
    return round(n / 2 ** 20, 1)


def measure(store: Path) -> dict:
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    db.execute("BEGIN")  # one read transaction, as the store builds it
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.ragdx_vocab USING "
               "fts5vocab(main, chunks_fts, 'instance')")
    phases = {}
    tracemalloc.start()
    with Stopwatch() as clock:
        rows = keyword._chunk_rows(db, "")
        held, peak = tracemalloc.get_traced_memory()
        phases["chunk rows"] = {"held_mb": _mb(held), "peak_mb": _mb(peak)}
        tracemalloc.reset_peak()
        postings = keyword._read_postings(db, "temp.ragdx_vocab")
        held, peak = tracemalloc.get_traced_memory()
        phases["postings read"] = {"held_mb": _mb(held), "peak_mb": _mb(peak)}
        tracemalloc.reset_peak()
        index = keyword.KeywordIndex(1.2, 0.75)
        index._append(rows, postings)
        n_postings = int(postings.rowid.size)
        del rows, postings
        held, peak = tracemalloc.get_traced_memory()
        phases["matrix"] = {"held_mb": _mb(held), "peak_mb": _mb(peak)}
    tracemalloc.stop()
    db.close()
    top = max(p["peak_mb"] for p in phases.values())
    return {"machine": machine(), "code": code_version(), "store": str(store), "rows": index.rows,
            "postings": n_postings, "seconds": round(clock.wall, 1), "phases": phases,
            "mirror_mb": phases["matrix"]["held_mb"], "build_peak_mb": top,
            "peak_over_mirror": round(top / phases["matrix"]["held_mb"], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=DEFAULT_STORE)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if not args.store.is_file():
        print(f"no store at {args.store}: run bench/quality/quality.py --half fit first", file=sys.stderr)
        return 2
    r = measure(args.store)
    rows = [("rows / postings", f"{r['rows']:,} / {r['postings']:,}")]
    rows += [(name, f"peak {p['peak_mb']} MB, holds {p['held_mb']} MB after") for name, p in r["phases"].items()]
    rows.append(("build peak / finished mirror", f"{r['build_peak_mb']} / {r['mirror_mb']} MB = x{r['peak_over_mirror']}"))
    write_result(args.out, r, label_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
