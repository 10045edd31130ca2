"""A ``kill -9`` of ``ragdx serve`` under load loses no acknowledged trace: every trace answered
200 is stored, and diagnosed once the server is started again (bench/serve/serve_load.py runs the
full-size version: 200 traces/s for 60 s)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


from ragdx.examples import example_dir
from ragdx.testing.otlp import Load, Server

ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
LABELS = [json.loads(line) for line in (example_dir() / "queries.jsonl").read_text().splitlines() if line]


def test_kill_9_under_load_loses_no_acknowledged_trace(tmp_path):
    args = ("--data", str(tmp_path), "--queries", str(example_dir() / "queries.jsonl"), "--settle", "0.2")
    server = Server(*args, env=ENV)
    load = Load(server.url, LABELS, rate=100, seconds=20, workers=4)
    sender = threading.Thread(target=load.run)
    try:
        sender.start()
        deadline = time.monotonic() + 20
        while len(load.acknowledged) < 150 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()  # SIGKILL: no shutdown, no flush
        time.sleep(0.2)  # the senders meet the dead server
        load.stop()
        sender.join(30)
    finally:
        load.stop()
        server.stop()
    acknowledged = set(load.acknowledged)
    assert len(acknowledged) >= 150 and not load.refused
    again = Server(*args, env=ENV)
    try:
        rows = again.wait_diagnosed(len(acknowledged), timeout=60)
    finally:
        again.stop()
    stored = {r["trace_id"] for r in rows}
    assert acknowledged - stored == set()
    assert load.failed  # the kill met requests in flight: it was under load
    diagnosed = [r for r in rows if r["trace_id"] in acknowledged and r["labelled"] == 1 and r["outcome"]]
    assert len(diagnosed) == len(acknowledged)
