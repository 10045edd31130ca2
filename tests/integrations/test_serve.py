"""``ragdx serve`` end to end: the LangChain example app, instrumented with OpenInference's
LangChain instrumentor and the standard OTLP HTTP exporter, sends its traces to a ``ragdx serve``
this test starts as a subprocess; the live diagnoses must be the ones ``ragdx diagnose`` gives on
the same spans. Then the UI in headless Chromium (open a trace, open a compare view), and a
restart that finds every diagnosis again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragdx.testing.otlp import Server
from tests.integrations.conftest import QUERIES, diagnose, example, in_memory_provider, require, write_span_files

ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
STAGES = ["--stage", "fusion_cut=fusion", "--stage", "status_filter=governance", "--stage", "context_cut=context",
          "--abstention", "^I don't know"]
OFF_SET = "Do you sell gift cards for the refund shop?"  # not a labelled question


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The LangChain app's 18 questions (ids in span metadata), 2 of them again without an id, and
    one question outside the query set, sent to ragdx serve; the same spans kept in memory."""
    require("langchain_core", "langchain_classic", "openinference.instrumentation.langchain", "opentelemetry.sdk",
            "opentelemetry.exporter.otlp.proto.http", "starlette", "uvicorn", extras="serve,langchain,openinference")
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ragdx.integrations.langchain import write_chunks
    lc = example("langchain_refund")
    out = tmp_path_factory.mktemp("serve")
    chunks = lc.split(lc.refund_sources(out))
    write_chunks(chunks, out / "chunks.jsonl")
    (out / "data" / "runs").mkdir(parents=True)
    server = Server("--data", str(out / "data"), "--queries", str(QUERIES), "--store", str(out / "store.db"),
                    "--chunks", str(out / "chunks.jsonl"), "--settle", "0.5", *STAGES, env=ENV)
    try:
        provider, memory = in_memory_provider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=server.url + "/v1/traces")))
        chain = lc.build(chunks)
        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        questions = lc.queries()
        try:
            for query in questions:
                lc.ask(chain, query)
            for query in questions[:2]:  # no id: matched by the question's text
                chain.invoke({"question": query["question"], "groups": query["principal"]["groups"]})
            chain.invoke({"question": OFF_SET, "groups": ["public"]})
        finally:
            instrumentor.uninstrument()
            provider.force_flush()
            provider.shutdown()
        rows = server.wait_diagnosed(len(questions) + 3)
        yield {"server": server, "rows": rows, "out": out, "spans": memory.get_finished_spans(),
               "questions": questions}
    finally:
        server.stop()


def test_live_diagnoses_equal_ragdx_diagnose_on_the_same_spans(served, tmp_path):
    out = served["out"]
    otlp, _ = write_span_files(served["spans"], tmp_path)
    offline = diagnose(otlp, out / "store.db", tmp_path / "d", *STAGES, "--chunks", str(out / "chunks.jsonl"))
    rows = served["rows"]
    ids = [q["id"] for q in served["questions"]]
    live = {}
    for r in rows:
        if r["labelled"]:
            live.setdefault(r["query_id"], []).append(r["diagnosis"])
    assert sorted(live) == sorted(ids)
    # every question once by id; the first two twice (the second time by text): all equal offline
    assert {q: len(v) for q, v in live.items()} == {q: 2 if q in ids[:2] else 1 for q in ids}
    for qid in ids:
        for d in live[qid]:
            assert d == offline[qid], qid
    outcomes = [offline[q]["outcome"] for q in ids]
    assert outcomes.count("supported") >= 12  # the example without faults: the comparison is not vacuous


def test_unlabelled_traffic_gets_label_free_signals(served):
    (row,) = [r for r in served["rows"] if not r["labelled"]]
    assert (row["question"], row["query_id"]) == (OFF_SET, "trace:" + row["trace_id"])
    assert (row["outcome"], row["diagnosis"], row["abstained"], row["claims"]) == (None, None, 1, 0)
    labelled = [r for r in served["rows"] if r["labelled"]]
    # the abstentions counted without labels are the ones the diagnoses found
    assert sorted(r["query_id"] for r in labelled if r["abstained"]) == sorted(
        r["query_id"] for r in labelled if r["diagnosis"]["outcome"] in ("correct_abstention", "wrong_abstention"))
    # a supported answer's claims are supported by the text they cite, by ragdx's own check too
    supported = [r for r in labelled if r["outcome"] == "supported"]
    assert supported and [r["claims_supported"] for r in supported] == [r["claims"] for r in supported]
    assert min(r["claims"] for r in supported) >= 1


def test_the_ui_opens_a_trace_and_a_compare_view(served, tmp_path):
    from ragdx.testing.browser import Browser, find_chromium
    if find_chromium() is None:
        if os.environ.get("RAGDX_REQUIRE_BROWSER"):
            pytest.fail("RAGDX_REQUIRE_BROWSER is set but no Chromium is installed")
        pytest.skip("no Chromium")
    server = served["server"]
    # a run folder to compare the live window with: ragdx diagnose of the same spans
    otlp, _ = write_span_files(served["spans"], tmp_path)
    diagnose(otlp, served["out"] / "store.db", served["out"] / "data" / "runs" / "offline", *STAGES,
             "--chunks", str(served["out"] / "chunks.jsonl"))
    qid = served["questions"][0]["id"]
    with Browser() as browser:
        page = browser.open(server.url + "/")
        assert page.evaluate("document.querySelectorAll('a.window-link').length") == 1
        page.click("a.window-link", navigates=True)
        page.wait("document.querySelectorAll('a.trace-link').length > 0")
        assert page.evaluate("document.querySelectorAll('a.trace-link').length") == len(served["questions"]) + 3
        window_page = page.evaluate("location.href")
        page.click("#window-report", navigates=True)  # the window as a run report: each question's latest trace
        assert page.evaluate("document.title") == "langchain: ragdx diagnosis of imported traces"
        assert page.evaluate("document.querySelectorAll('details.q').length") == len(served["questions"])
        page = browser.open(window_page)
        href = page.evaluate(f"[...document.querySelectorAll('tr')].find(r => r.textContent.includes('{qid}'))"
                             ".querySelector('a.trace-link').getAttribute('href')")
        page.click(f"a.trace-link[href='{href}']", navigates=True)
        page.wait("document.querySelector('details.q') !== null")
        assert page.evaluate("document.querySelector('details.q').id") == f"q-{qid}"
        stages = page.evaluate("[...document.querySelectorAll('details.q .stage')].map(s => s.textContent)")
        assert any(s.startswith("context_cut") for s in stages) and stages[-1].startswith("answer")
        page = browser.open(server.url + "/")
        window = page.evaluate("document.querySelector('#new option[value^=window]').value")
        page.evaluate(f"document.getElementById('base').value = 'run:offline';"
                      f"document.getElementById('new').value = '{window}'")
        page.click("#compare-button", navigates=True)
        assert page.evaluate("document.title") == "ragdx compare"
        assert page.evaluate("document.querySelector('h1').textContent") == f"ragdx compare: offline → {window[7:]}"
        # the same diagnoses on both sides: every question paired, none moved
        assert f"{len(served['questions'])} questions paired" in page.evaluate("document.body.innerText")
        assert page.evaluate("document.querySelector('#moved h2').textContent") == "Questions that changed (0)"
        assert not [r for r in page.requests if not r.startswith(server.url) and not r.startswith("data:")]
        assert not page.errors


def test_a_restart_keeps_every_diagnosis(served):
    server = served["server"]
    before = sorted((r["trace_id"], r["outcome"]) for r in served["rows"])
    server.stop()
    out = served["out"]
    again = Server("--data", str(out / "data"), "--queries", str(QUERIES), "--store", str(out / "store.db"),
                   "--chunks", str(out / "chunks.jsonl"), *STAGES, env=ENV)
    try:
        assert sorted((r["trace_id"], r["outcome"]) for r in again.results()) == before
    finally:
        again.stop()
