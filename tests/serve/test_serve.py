"""``ragdx serve`` in process (Starlette's test client): the OTLP/HTTP receiver's encodings and
limits, live diagnosis and the label-free signals, the token and the loopback guard, and what the
UI may show of a restricted document."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import re
import time
from pathlib import Path


from ragdx.cli import main
from ragdx.examples import example_dir
from ragdx.serve.app import ServeConfig, build_app
from ragdx.serve.live import LiveDiagnoser, LiveSpec
from ragdx.serve.receiver import Limits
from ragdx.serve.spool import Spool
from ragdx.stages.verify import LearnedChecker
from ragdx.testing.otlp import request, trace, trace_id
from ragdx.types import Principal

LABELS = [json.loads(line) for line in (example_dir() / "queries.jsonl").read_text().splitlines() if line]
BY_ID = {q["id"]: q for q in LABELS}
JSON_TYPE = {"Content-Type": "application/json"}


@contextlib.contextmanager
def client(tmp_path: Path, store: Path | None = None, **config):
    from starlette.testclient import TestClient
    spec = LiveSpec(tmp_path / "data", example_dir() / "queries.jsonl", str(store) if store else None,
                    abstention="^I don't know", settle=0.05)
    app, live = build_app(ServeConfig(spec, **config))
    with TestClient(app, base_url="http://127.0.0.1:6006") as c:
        c.live = live
        yield c


def wait(c, count: int) -> list[dict]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = c.get("/api/status").json()
        if status["diagnosed"] >= count and status["open"] == 0:
            return c.get("/api/traces").json()
        time.sleep(0.05)
    raise AssertionError(c.get("/api/status").json())


def protobuf(obj: dict) -> bytes:
    """An OTLP/JSON request as the protobuf exporter sends it (ids as bytes)."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    obj = json.loads(json.dumps(obj))
    for span in obj["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return ParseDict(obj, ExportTraceServiceRequest()).SerializeToString()


def test_protobuf_and_json_store_the_same_spans_and_diagnoses(tmp_path):
    obj = request(trace(BY_ID["q-refund-35d"], 1))
    with client(tmp_path / "a") as a, client(tmp_path / "b") as b:
        r = a.post("/v1/traces", content=protobuf(obj), headers={"Content-Type": "application/x-protobuf"})
        assert (r.status_code, r.headers["content-type"], r.content) == (200, "application/x-protobuf", b"")
        r = b.post("/v1/traces", content=gzip.compress(json.dumps(obj).encode()),
                   headers=JSON_TYPE | {"Content-Encoding": "gzip"})
        assert (r.status_code, r.json()) == (200, {})
        from_protobuf, from_json = wait(a, 1), wait(b, 1)
    spans_a = Spool(tmp_path / "a" / "data" / "serve.db").spans(trace_id(1))
    spans_b = Spool(tmp_path / "b" / "data" / "serve.db").spans(trace_id(1))
    assert [s.span_id for s in spans_a] == [trace_id(1)[:12] + f"{k:04x}" for k in range(4)]
    assert spans_a == spans_b
    assert from_protobuf[0]["trace_id"] == trace_id(1)
    assert from_protobuf[0]["diagnosis"] == from_json[0]["diagnosis"]
    assert from_protobuf[0]["query_id"] == "q-refund-35d"


def test_refusals_say_what_is_wrong_and_store_nothing(tmp_path):
    good = json.dumps(request(trace(BY_ID["q-refund-35d"], 1))).encode()
    bad = request(trace(BY_ID["q-refund-35d"], 2))
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][3]["attributes"][2]["value"] = {"intValue": "many"}
    with client(tmp_path, limits=Limits(max_bytes=len(good) + 10, max_spans=4)) as c:
        r = c.post("/v1/traces", content=good, headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and "application/x-protobuf or application/json" in r.json()["message"]
        r = c.post("/v1/traces", content=good + b" " * 20, headers=JSON_TYPE)
        assert r.status_code == 413 and f"limit of {len(good) + 10}" in r.json()["message"]
        bomb = gzip.compress(b" " * 10_000)
        r = c.post("/v1/traces", content=bomb, headers=JSON_TYPE | {"Content-Encoding": "gzip"})
        assert r.status_code == 413 and "decompressed" in r.json()["message"]
        five = request([{"traceId": "ab" * 16, "spanId": f"{n:016x}", "name": "s"} for n in range(5)])
        r = c.post("/v1/traces", content=json.dumps(five).encode(), headers=JSON_TYPE)
        assert r.status_code == 413 and "5 spans, more than the limit of 4" in r.json()["message"]
        r = c.post("/v1/traces", content=json.dumps(bad).encode(), headers=JSON_TYPE)
        assert r.status_code == 400
        assert "resourceSpans[0].scopeSpans[0].spans[3].attributes[2].value.intValue" in r.json()["message"]
        r = c.post("/v1/traces", content=b"{not json", headers=JSON_TYPE)
        assert r.status_code == 400 and r.json()["message"].startswith("the body is not JSON")
        assert c.get("/api/status").json() == {"requests": 0, "spans": 0, "traces": 0, "open": 0, "diagnosed": 0,
                                               "set_aside": 0}


def test_labels_by_id_or_text_and_signals_without_labels(tmp_path):
    answered = BY_ID["q-warranty-length"]
    unanswerable = BY_ID["q-price-match"]
    stranger = {"id": "-", "question": "Where is my parcel?", "answer": "It ships in 3 days."}
    spans = (trace(answered, 1, score=7.25) + trace(answered, 2, labelled=False)
             + trace(unanswerable, 3) + trace(stranger, 4, labelled=False, score=2.5))
    with client(tmp_path) as c:
        assert c.post("/v1/traces", content=json.dumps(request(spans)).encode(), headers=JSON_TYPE).status_code == 200
        rows = {r["trace_id"]: r for r in wait(c, 4)}
        page = c.get(f"/trace/{trace_id(4)}").text
    one, two, three, four = (rows[trace_id(n)] for n in (1, 2, 3, 4))
    assert (one["query_id"], one["labelled"], two["query_id"], two["labelled"]) == (answered["id"], 1, answered["id"], 1)
    assert one["diagnosis"] == two["diagnosis"]  # the same spans but the id: the same diagnosis
    assert (one["outcome"], three["outcome"]) == ("supported", "correct_abstention")
    # the retrieval span's top score; the one claim cites the quote, which states it
    assert (one["retrieval_score"], one["abstained"], one["claims"], one["claims_supported"]) == (7.25, 0, 1, 1)
    assert (three["abstained"], three["claims"]) == (1, 0)
    assert (four["labelled"], four["query_id"], four["question"]) == (0, "trace:" + trace_id(4), "Where is my parcel?")
    assert (four["outcome"], four["diagnosis"], four["retrieval_score"], four["abstained"]) == (None, None, 2.5, 0)
    # "It ships in 3 days." against the distractor "Opening hours are nine to five on weekdays."
    verdict, reason = LearnedChecker().judge("It ships in 3 days.", "Opening hours are nine to five on weekdays.")
    assert verdict.value == "unsupported" and (four["claims"], four["claims_supported"]) == (1, 0)
    assert f"unsupported: {reason}".replace("'", "&#x27;") in page  # the drill-down shows ragdx's verdict

def test_a_span_arriving_after_the_diagnosis_reopens_the_trace(tmp_path):
    q = BY_ID["q-warranty-length"]
    spans = trace(q, 1)
    with client(tmp_path) as c:
        c.post("/v1/traces", content=json.dumps(request(spans[:3])).encode(), headers=JSON_TYPE)
        (first,) = wait(c, 1)
        assert (first["abstained"], first["claims"]) == (None, 0)  # no answer yet
        c.post("/v1/traces", content=json.dumps(request(spans[3:])).encode(), headers=JSON_TYPE)
        time.sleep(0.3)
        (again,) = wait(c, 1)
    assert (again["abstained"], again["claims"], again["claims_supported"], again["outcome"]) == (0, 1, 1, "supported")


def test_saving_a_result_is_refused_when_spans_arrived_meanwhile(tmp_path):
    from ragdx.traces.openinference import otlp_spans
    spool = Spool(tmp_path / "serve.db")
    records, _ = otlp_spans(request(trace(BY_ID["q-warranty-length"], 1)), "test")
    spool.add(records[:2], None, 10)
    ((tid, count, _, _),) = spool.ready(0, 0)
    spool.add(records[2:], None, 10)
    assert spool.save(tid, count, {"query_id": "x", "labelled": 0, "seen": 0.0}) is False
    assert spool.counts()["open"] == 1 and spool.results() == []
    ((_, count, _, _),) = spool.ready(0, 0)
    assert count == 4 and spool.save(tid, count, {"query_id": "x", "labelled": 0, "seen": 0.0}) is True
    assert spool.counts()["open"] == 0 and [r["query_id"] for r in spool.results()] == ["x"]


def test_a_token_guards_every_request_and_loopback_needs_a_loopback_host(tmp_path):
    body = json.dumps(request(trace(BY_ID["q-warranty-length"], 1))).encode()
    with client(tmp_path, token="s3cret") as c:
        assert c.get("/").status_code == 401
        assert c.post("/v1/traces", content=body, headers=JSON_TYPE).status_code == 401
        assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/v1/traces", content=body, headers=JSON_TYPE | {"Authorization": "Bearer s3cret"}
                      ).status_code == 200
        r = c.get("/?token=s3cret", follow_redirects=False)
        assert r.status_code == 303 and r.headers["set-cookie"].startswith("ragdx_token=s3cret; HttpOnly")
        assert r.headers["location"] == "/"
        # back to this server's page, never to another host (an open redirect, issue 51)
        for path, back in (("//evil.example/", "/evil.example/"), ("/\\evil.example/x", "/evil.example/x"),
                           ("/trace/ab%20c", "/trace/ab%20c")):
            c.cookies.clear()  # each asks with the token, not the cookie the one before set
            r = c.get(f"{str(c.base_url).rstrip('/')}{path}?token=s3cret", follow_redirects=False)
            assert (r.status_code, r.headers["location"]) == (303, back), path
        c.cookies.set("ragdx_token", "s3cret")
        assert c.get("/").status_code == 200
        assert c.get("/", headers={"Host": "evil.example:6006"}).status_code == 403


def test_listening_beyond_loopback_needs_a_token(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAGDX_SERVE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--data", str(tmp_path)]) == 2
    assert "--host 0.0.0.0: listening beyond loopback needs --token" in capsys.readouterr().err
    assert not (tmp_path / "serve.db").exists()


def test_the_ui_shows_a_restricted_text_only_with_the_servers_access(tmp_path, example_store):
    staff = BY_ID["q-manual-refund-approval-staff"]  # its principal is staff: the trace may hold the runbook
    quote = staff["required"][0][0]["quote"]
    assert staff["required"][0][0]["doc"] == "internal/refund-runbook.md"
    pages = {}
    for groups in (("public",), ("public", "staff")):
        with client(tmp_path / groups[-1], store=example_store.path, principal=Principal("ragdx-serve", groups)) as c:
            c.post("/v1/traces", content=json.dumps(request(trace(staff, 1))).encode(), headers=JSON_TYPE)
            (row,) = wait(c, 1)
            assert row["outcome"] == "supported"  # the staff principal may read it: no leak
            pages[groups[-1]] = c.get(f"/trace/{trace_id(1)}").text
    # the runbook's text is an item of the retriever and of the context: withheld from a public
    # server in both (the query set's own quote and the app's answer are shown to both)
    withheld = "[withheld: this server may not read it]"
    assert (pages["public"].count(withheld), pages["staff"].count(withheld)) == (2, 0)
    assert pages["staff"].count(quote) - pages["public"].count(quote) == 2


def test_no_page_shows_a_restricted_text_to_a_public_server(tmp_path, example_store):
    # every route a browser can reach, for a server started as a public principal, after a staff
    # question's trace that holds the runbook: the window report once showed it (issue 51)
    staff = BY_ID["q-manual-refund-approval-staff"]
    secret = "Refunds above 2000 EUR also need sign-off from the finance team."
    assert secret in (example_dir() / "corpus" / "staff-refund-runbook.md").read_text()
    with client(tmp_path, store=example_store.path, principal=Principal("ragdx-serve", ("public",))) as c:
        c.post("/v1/traces", content=json.dumps(request(trace(staff, 1))).encode(), headers=JSON_TYPE)
        wait(c, 1)
        index = c.get("/").text
        (window,) = set(re.findall(r'href="(/window/\d+)"', index))
        start = window.rsplit("/", 1)[1]
        pages = {path: c.get(path) for path in (
            "/", "/api/traces", "/api/status", f"/trace/{trace_id(1)}", window, f"{window}/report",
            f"/compare?base=window:{start}&new=window:{start}")}
    assert {path: r.status_code for path, r in pages.items()} == dict.fromkeys(pages, 200)
    assert [path for path, r in pages.items() if "finance team" in r.text] == []
    assert "[withheld: this server may not read it]" in pages[f"{window}/report"].text


def test_a_window_or_run_that_is_not_there_is_a_404_not_a_traceback(tmp_path):
    with client(tmp_path) as c:
        (tmp_path / "data" / "runs" / "empty").mkdir(parents=True)
        (tmp_path / "data" / "runs" / "empty" / "diagnosis.jsonl").write_text("")  # a run, without its report
        answers = {path: c.get(path) for path in (
            "/window/0/report", "/window/99999999999999999999", "/window/99999999999999999999/report",
            "/window/" + "9" * 400, "/runs/empty/report", "/runs/nothing/report")}
    assert {path: r.status_code for path, r in answers.items()} == dict.fromkeys(answers, 404)
    assert answers["/window/0/report"].text == "window 0 has no labelled trace"
    assert answers["/window/99999999999999999999"].text == (
        "no window at /window/99999999999999999999: a window starts at a time, in seconds")
    assert answers["/runs/empty/report"].text.startswith("the run folder 'empty' has no report.html")


def test_a_request_no_store_can_keep_is_refused_and_every_trace_after_it_is_diagnosed(tmp_path):
    # 'spans' that is no list was a 500 with a traceback; a lone surrogate was acknowledged with 200,
    # then stopped the live diagnosis for good on UnicodeEncodeError in the spool (issue 51)
    q = BY_ID["q-warranty-length"]
    bad = [b'{"resourceSpans":[{"scopeSpans":[{"spans":5}]}]}',
           json.dumps(request(trace(q, 1))).replace('"How', '"\\udfffHow', 1).encode()]
    assert b"\\udfff" in bad[1]
    with client(tmp_path) as c:
        answers = [c.post("/v1/traces", content=body, headers=JSON_TYPE) for body in bad]
        assert [r.status_code for r in answers] == [400, 400]
        assert answers[0].json()["message"] == ("OTLP request:1 field 'resourceSpans[0].scopeSpans[0].spans': "
                                                "expected a list of objects, got 5")
        assert answers[1].json()["message"].startswith("the body holds text that is not Unicode: a lone surrogate")
        assert c.post("/v1/traces", content=json.dumps(request(trace(q, 2))).encode(),
                      headers=JSON_TYPE).status_code == 200
        (row,) = wait(c, 1)
    assert (row["trace_id"], row["outcome"]) == (trace_id(2), "supported")


class _Unkeepable(LiveDiagnoser):
    """The live diagnosis, except that the first trace's result holds a text no store can keep."""

    def diagnose(self, tid, spans, system):
        result = super().diagnose(tid, spans, system)
        return result | {"question": "q\udfff"} if tid == trace_id(1) else result


def test_a_diagnosis_no_store_can_keep_is_set_aside_and_the_others_are_saved(tmp_path):
    # one unsavable result made the whole batch fail, and the loop retried it forever (issue 51)
    from ragdx.traces.openinference import otlp_spans
    spool = Spool(tmp_path / "serve.db")
    for n in (1, 2):
        records, _ = otlp_spans(request(trace(BY_ID["q-warranty-length"], n)), "test")
        spool.add(records, None, 10)
    live = _Unkeepable(spool, [], settle=0.0)
    assert live.step() == 2
    rows = {r["trace_id"]: r for r in spool.results()}
    assert rows[trace_id(1)]["error"].startswith("set aside: its diagnosis could not be kept (UnicodeEncodeError")
    assert rows[trace_id(2)]["error"] is None
    assert (spool.counts()["diagnosed"], spool.counts()["set_aside"], spool.counts()["open"]) == (2, 1, 0)


def test_poison_traces_are_refused_or_set_aside_and_every_good_one_is_diagnosed(tmp_path):
    """The load benchmark's poisons (ragdx.testing.otlp.poison): a lone surrogate and a stage kind
    that does not exist are refused; a parent cycle is acknowledged, then set aside with its reason
    when its root never comes; the good traces around them are all diagnosed (issue 51)."""
    from starlette.testclient import TestClient

    from ragdx.testing.otlp import POISONS, poison
    q = BY_ID["q-warranty-length"]
    spec = LiveSpec(tmp_path / "data", example_dir() / "queries.jsonl", None, settle=0.05, orphan_after=0.3)
    app, _ = build_app(ServeConfig(spec))
    with TestClient(app, base_url="http://127.0.0.1:6006") as c:
        codes = {kind: c.post("/v1/traces", content=poison(q, n, kind), headers=JSON_TYPE).status_code
                 for n, kind in enumerate(POISONS, start=10)}
        good = [c.post("/v1/traces", content=json.dumps(request(trace(q, n))).encode(), headers=JSON_TYPE)
                for n in (1, 2, 3)]
        assert codes == {"cycle": 200, "surrogate": 400, "kind": 400} and [r.status_code for r in good] == [200] * 3
        rows = {r["trace_id"]: r for r in wait(c, 4)}
        status = c.get("/api/status").json()
    assert [rows[trace_id(n)]["outcome"] for n in (1, 2, 3)] == ["supported"] * 3
    assert rows[trace_id(10)]["outcome"] is None and "form a cycle" in rows[trace_id(10)]["error"]
    assert (status["diagnosed"], status["set_aside"], status["open"]) == (4, 1, 0)
