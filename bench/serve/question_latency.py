"""Where a question's time goes: the default pipeline of ``bench/quality/quality.py`` (the dev store, the
int8 encoder, the result cache off), run in-process over the dev set's fit half, with each
stage's wall and CPU seconds per question (p50, p90), the load average before and after, and a
digest of every answer, so that a speed change is checked to change no answer (``--compare``).

    nice -n 10 .venv/bin/python bench/serve/question_latency.py --limit 41 --out bench/results/question-latency.json
    nice -n 10 .venv/bin/python bench/serve/question_latency.py --limit 41 --compare bench/results/question-latency.json \
        --out /tmp/after.json
    nice -n 10 .venv/bin/python bench/serve/question_latency.py --limit 21 --profile 30   # cProfile, top 30 functions

The models load first (``Pipeline.warm_up``, as ``ragdx run`` does), and the first question is
run once before the clock starts (the title and heading index of the rewrite stage, the page
cache). CPU seconds are the process's (every thread: the encoder runs batches side by side on
two), so they are the cost even when other processes share the cores; wall seconds are what a
user waits. The machine is shared: the load average is recorded with the figures.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import DEVSET, INT8, REPO, code_version, label_table, machine, write_result

DEFAULT_OUT = REPO / "bench" / "results" / "question-latency.json"
SETTINGS = ["retrieval.dense.backend=onnx", f"retrieval.dense.model={INT8.relative_to(REPO)}",
            "cache.enabled=false"]


def quantiles(values: list[float]) -> dict[str, float]:
    """p50 and p90 (nearest rank on the sorted values) in milliseconds, and the mean."""
    s = sorted(values)
    return {"p50_ms": round(1000 * statistics.median(s), 1), "p90_ms": round(1000 * s[int(0.9 * (len(s) - 1))], 1),
            "mean_ms": round(1000 * statistics.fmean(s), 1), "n": len(s)}


class StageClock:
    """Wraps each stage's ``run`` to add its process CPU seconds to the question's record (the
    pipeline records wall seconds itself, in each stage's output)."""

    def __init__(self, pipeline) -> None:
        self.cpu: dict[str, float] = {}
        for stage in pipeline.stages:
            stage.run = self._timed(stage.name, stage.run)

    def _timed(self, name: str, run):
        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return run(*args, **kwargs)
            finally:
                self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - started
        return timed


def measure(args: argparse.Namespace) -> dict:
    from ragdx.build import build_pipeline, open_store
    from ragdx.config import load_settings
    from ragdx.queryset import load_queries

    queries = load_queries(args.queries)
    if args.offset or args.limit:
        queries = queries[args.offset:args.offset + args.limit if args.limit else None]
    settings = load_settings(None, SETTINGS + list(args.set or ()))
    load_before = os.getloadavg()
    with open_store(str(args.store), "read") as store:
        pipeline = build_pipeline(store, settings)
        pipeline.warm_up()
        clock = StageClock(pipeline)
        pipeline.run(queries[0])  # once before the clock: the page cache, the heading index
        clock.cpu.clear()
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        answers: dict[str, str] = {}
        profile = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        for query in queries[1:]:
            clock.cpu.clear()
            cpu_started = time.process_time()
            if profile is not None:
                profile.enable()
            trace = pipeline.run(query)
            if profile is not None:
                profile.disable()
            wall.setdefault("total", []).append(trace.seconds)
            cpu.setdefault("total", []).append(time.process_time() - cpu_started)
            for output in trace.stages:
                wall.setdefault(output.stage, []).append(output.seconds)
            for name, seconds in clock.cpu.items():
                cpu.setdefault(name, []).append(seconds)
            answers[query.id] = hashlib.sha256(trace.answer.text.encode()).hexdigest()[:16]
        elapsed = time.perf_counter() - started
    result = {
        "benchmark": "question_latency",
        "command": " ".join([".venv/bin/python", "bench/serve/question_latency.py", *sys.argv[1:]]),
        "label": args.label, "code": code_version(), "machine": machine(),
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
        "queries": {"path": str(args.queries), "timed": len(queries) - 1, "first_untimed": queries[0].id},
        "settings": SETTINGS + list(args.set or ()),
        "elapsed_s": round(elapsed, 1),
        "wall": {name: quantiles(v) for name, v in wall.items()},
        "cpu": {name: quantiles(v) for name, v in cpu.items()},
        "answers": answers,
    }
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.profile)
        result["profile"] = out.getvalue()
    return result


def table(r: dict, previous: dict | None) -> str:
    rows = [("load average (1, 5, 15 min)", f"before {r['load_average']['before']}, after {r['load_average']['after']}"),
            ("questions timed", str(r["queries"]["timed"]))]
    for name in r["wall"]:
        w, c = r["wall"][name], r["cpu"].get(name)
        line = f"wall p50 {w['p50_ms']:.0f} ms, p90 {w['p90_ms']:.0f} ms"
        if c:
            line += f"; cpu p50 {c['p50_ms']:.0f} ms, p90 {c['p90_ms']:.0f} ms"
        if previous and name in previous["wall"]:
            line += (f"  (before: wall p50 {previous['wall'][name]['p50_ms']:.0f} ms"
                     + (f", cpu p50 {previous['cpu'][name]['p50_ms']:.0f} ms" if name in previous["cpu"] else "")
                     + ")")
        rows.append((name, line))
    if previous:
        common = [q for q in r["answers"] if q in previous["answers"]]
        differ = [q for q in common if r["answers"][q] != previous["answers"][q]]
        rows.append(("answers the same as before", f"{len(common) - len(differ)} of {len(common)}"
                     + (f"; differ: {', '.join(differ)}" if differ else "")))
    text = label_table(rows)
    return text + ("\n\n" + r["profile"] if "profile" in r else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=Path, default=DEVSET / "queries.fit.jsonl",
                    help="the questions (default the dev set's fit half)")
    ap.add_argument("--store", type=Path, default=DEVSET / "store.db", help="the dev store of bench/quality/quality.py")
    ap.add_argument("--offset", type=int, default=0, help="skip this many questions first")
    ap.add_argument("--limit", type=int, default=41, help="this many questions (the first one untimed; default 41); 0: all")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="a ragdx setting (repeatable)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile the timed questions; print N functions")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--compare", type=Path, default=None, help="an earlier result: its figures and answers beside these")
    args = ap.parse_args(argv)
    if not args.store.is_file() or not INT8.is_file():
        print("error: the dev store or the int8 encoder is missing: run bench/quality/quality.py first", file=sys.stderr)
        return 2
    previous = json.loads(args.compare.read_text()) if args.compare else None
    result = measure(args)
    if previous is not None:
        result["compared_with"] = {"file": str(args.compare), "label": previous.get("label"),
                                   "git_commit": previous.get("code", {}).get("git_commit"),
                                   "load_average": previous.get("load_average")}
    write_result(args.out, result, table(result, previous))
    return 0


if __name__ == "__main__":
    sys.exit(main())
