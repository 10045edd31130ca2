"""``ragdx serve`` under load on loopback (issue 31): 200 traces per second for 60 s, nothing lost,
memory bounded; then a ``kill -9`` during load, and nothing acknowledged lost.

Reproduce, from the repository root::

    .venv/bin/python bench/serve/serve_load.py [--rate 200] [--seconds 60] [--kill-seconds 20]

The server: ``ragdx serve`` as a subprocess on a free loopback port, with the bundled example's
20 labelled questions (``--settle 1``, ``--orphan-after 5``), no store. The load:
:class:`ragdx.testing.otlp.Load`, one trace per request (OTLP/JSON, 4 spans: a chain, a
retriever with scores, the context, an LLM answer with its claim; about 3 KB), paced to
``--rate`` from 8 threads with a kept-alive connection each; the ``n``-th trace asks question
``n % 20``, labelled by its id. Every trace is diagnosed (they are all labelled) and gets the
label-free signals.

Measured: traces acknowledged per second (200 answered) over the load, the request latency (p50,
p99), the most traces waiting for diagnosis at once (sampled every 0.5 s), how long after the
load the last was diagnosed, and the peak resident memory of the server and its child processes
together (the diagnosis process, multiprocessing's resource tracker; sampled every 0.5 s through
the load and the drain, and compared between the first and the last 10 s of the load). Then checked: every acknowledged trace id is stored and
diagnosed with an outcome, and none was refused. Every ``--poison-every``-th trace (100: 1%) is a
poison (:func:`ragdx.testing.otlp.poison`, three kinds in turn): a lone surrogate or a stage kind
that does not exist must be refused (400), a parent cycle acknowledged and then set aside with its
reason; every good trace must still be diagnosed.

The crash round: a fresh server under the same load for ``--kill-seconds``; at half of it the
server gets SIGKILL; a new server on the same folder must then hold and diagnose every trace
that was acknowledged. A table goes to stdout, everything to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from ragdx.examples import example_dir
from ragdx.testing.otlp import Load, Server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO  # noqa: E402
QUERIES = example_dir() / "queries.jsonl"
LABELS = [json.loads(line) for line in QUERIES.read_text().splitlines() if line]
# a trace whose root never comes (a poison's parent cycle) is diagnosed, and set aside, after 5 s
ARGS = ("--queries", str(QUERIES), "--settle", "1", "--orphan-after", "5")
ENV = {"PYTHONPATH": str(REPO / "src")}


def rss(pid: int) -> int:
    """Resident bytes of a process and its children (from /proc)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) * 1024
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total


def check(server: Server, acknowledged: set[str], timeout: float, poisoned: set[str] = frozenset()) -> dict:
    """Wait until every acknowledged trace is diagnosed (or, a poison, set aside); what was found."""
    start = time.monotonic()
    rows = server.wait_diagnosed(len(acknowledged), timeout=timeout)
    drained = time.monotonic() - start
    stored = {r["trace_id"]: r for r in rows}
    good = acknowledged - poisoned
    missing = sorted(good - set(stored))
    undiagnosed = sorted(t for t in good if t in stored and not stored[t]["outcome"])
    bad = acknowledged & poisoned
    return {"stored": len(stored), "missing": missing[:20], "missing_count": len(missing),
            "undiagnosed_count": len(undiagnosed), "drain_seconds": round(drained, 2),
            "poison_acknowledged": len(bad), "poison_set_aside": sum(1 for t in bad if t in stored
                                                                      and stored[t].get("error")),
            "outcomes": {o: sum(1 for r in rows if r["outcome"] == o) for o in sorted({r["outcome"] for r in rows
                                                                                       if r["outcome"]})}}


def steady(rate: float, seconds: float, poison_every: int = 0) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server("--data", tmp, *ARGS, env=ENV)
        try:
            load = Load(server.url, LABELS, rate, seconds, workers=8, salt="steady", poison_every=poison_every)
            samples: list[tuple[float, int, int]] = []
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    status = server.status()
                    samples.append((time.monotonic(), rss(server.proc.pid), status["open"]))
                    done.wait(0.5)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            start = time.monotonic()
            load.run()
            elapsed = time.monotonic() - start
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:  # the drain, still sampled; the results are read after
                status = server.status()
                if status["diagnosed"] >= len(load.acknowledged) and status["open"] == 0:
                    break
                time.sleep(0.2)
            drain = time.monotonic() - start - elapsed
            done.set()
            sampler.join()
            result = check(server, set(load.acknowledged), timeout=300, poisoned=load.poisoned) | {
                "drain_seconds": round(drain, 2)}
            refused_good = [t for t, _ in load.refused if t not in load.poisoned]
            result |= {"poison_sent": len(load.poisoned), "poison_refused": sum(1 for t, code in load.refused
                                                                                if t in load.poisoned and code == 400),
                       "good_refused": len(refused_good)}
            latencies = sorted(load.latencies)
            return {"rate": rate, "seconds": seconds, "sent": len(load.acknowledged) + len(load.refused) + len(load.failed),
                    "acknowledged": len(load.acknowledged), "refused": len(load.refused), "failed": len(load.failed),
                    "acknowledged_per_second": round(len(load.acknowledged) / elapsed, 1),
                    "latency_ms_p50": round(statistics.median(latencies) * 1000, 2),
                    "latency_ms_p99": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 2),
                    "most_waiting": max(s[2] for s in samples), "peak_rss_mb": round(max(s[1] for s in samples) / 1e6, 1),
                    "rss_mb_first_10s": round(max(s[1] for s in samples if s[0] - start < 10) / 1e6, 1),
                    "rss_mb_last_10s_of_load": round(max(s[1] for s in samples if elapsed - 10 <= s[0] - start < elapsed)
                                                     / 1e6, 1),
                    **result}
        finally:
            server.stop()


def crash(rate: float, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server("--data", tmp, *ARGS, env=ENV)
        load = Load(server.url, LABELS, rate, seconds, workers=8, salt="crash")
        sender = threading.Thread(target=load.run)
        try:
            sender.start()
            time.sleep(seconds / 2)
            server.kill()
            time.sleep(0.5)
            load.stop()
            sender.join(60)
        finally:
            load.stop()
            server.stop()
        acknowledged = set(load.acknowledged)
        again = Server("--data", tmp, *ARGS, env=ENV)
        try:
            result = check(again, acknowledged, timeout=300)
        finally:
            again.stop()
        return {"acknowledged_before_kill": len(acknowledged), "in_flight_at_kill": len(load.failed), **result}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--kill-seconds", type=float, default=20)
    p.add_argument("--poison-every", type=int, default=100, help="every n-th trace a poison (100: 1%%; 0: none)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "serve_load.json"))
    args = p.parse_args(argv)
    load = steady(args.rate, args.seconds, args.poison_every)
    killed = crash(args.rate, args.kill_seconds)
    print(f"steady: {load['acknowledged']} of {load['sent']} traces acknowledged in {args.seconds:g} s "
          f"({load['acknowledged_per_second']}/s), refused {load['refused']}, failed {load['failed']}; "
          f"latency p50 {load['latency_ms_p50']} ms, p99 {load['latency_ms_p99']} ms; most waiting "
          f"{load['most_waiting']}; last diagnosed {load['drain_seconds']} s after the load; peak RSS "
          f"{load['peak_rss_mb']} MB (first 10 s: {load['rss_mb_first_10s']} MB, last 10 s: "
          f"{load['rss_mb_last_10s_of_load']} MB); missing {load['missing_count']}, "
          f"undiagnosed {load['undiagnosed_count']}; poison: {load['poison_sent']} sent, {load['poison_refused']} "
          f"refused (400), {load['poison_set_aside']} of {load['poison_acknowledged']} acknowledged set aside")
    print(f"kill -9: {killed['acknowledged_before_kill']} acknowledged before the kill, {killed['in_flight_at_kill']} "
          f"in flight; after restart missing {killed['missing_count']}, undiagnosed {killed['undiagnosed_count']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"steady": load, "kill": killed}, indent=2) + "\n")
    lost = load["missing_count"] + load["undiagnosed_count"] + killed["missing_count"] + killed["undiagnosed_count"]
    spoiled = load["good_refused"] + load["poison_acknowledged"] - load["poison_set_aside"]
    return 1 if lost or spoiled else 0


if __name__ == "__main__":
    sys.exit(main())
