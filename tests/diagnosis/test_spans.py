"""OpenInference spans read as imported traces: Phoenix's span JSON (nested attributes) and the
collector's OTLP/JSON, the component mapping, ids that take texts from the retriever span, and
`ragdx export` read back to the same diagnoses."""

import json

import pytest

from ragdx.cli import main
from ragdx.traces.openinference import read_any
from tests.conftest import write

RULE = "Refunds are accepted within 30 days of delivery."
EXCEPTION = "Quality defects may be refunded within 90 days of delivery."
QUERY = {"id": "q1", "question": "Refund after 35 days for a defect?", "required": [
    [{"doc": "policies/refund.md", "quote": "Refunds are accepted within 30 days of delivery"}],
    [{"doc": "policies/quality.md", "quote": "Quality defects may be refunded within 90 days"}]]}


def phoenix(name, span_id, parent, kind, attributes, start, end):
    return {"name": name, "context": {"trace_id": "t1", "span_id": span_id}, "span_kind": kind,
            "parent_id": parent, "start_time": f"2026-11-30T10:00:{start:06.3f}+00:00",
            "end_time": f"2026-11-30T10:00:{end:06.3f}+00:00", "status_code": "OK", "attributes": attributes}


def haystack_document(doc_id, text):
    return f"Document(id={doc_id}, content: '{text}', meta: {{}})"


def spans():
    """A Haystack-like run: a retriever, a joiner (CHAIN, documents as text), a filter the user
    maps, a prompt builder (LLM kind with a template: not the answer) and the generator."""
    meta = {"metadata": json.dumps({"query_id": "q1"})}
    docs = [{"document": {"id": "a", "content": RULE, "score": 2.0,
                          "metadata": json.dumps({"doc": "policies/refund.md"})}},
            {"document": {"id": "b", "content": EXCEPTION, "score": 1.0,
                          "metadata": json.dumps({"doc": "policies/quality.md", "status": "current"})}}]
    return [
        phoenix("Pipeline.run", "root", None, "CHAIN", {**meta, "openinference": {"span": {"kind": "CHAIN"}}}, 0, 9),
        phoenix("InMemoryBM25Retriever.run", "s1", "root", "RETRIEVER",
                {**meta, "openinference": {"span": {"kind": "RETRIEVER"}}, "retrieval": {"documents": docs}}, 1, 1.5),
        phoenix("DocumentJoiner.run", "s2", "root", "CHAIN",
                {**meta, "input": {"value": json.dumps({"documents": [[haystack_document("a", RULE),
                                                                       haystack_document("b", EXCEPTION)]]})},
                 "output": {"value": json.dumps({"documents": [haystack_document("a", RULE),
                                                                haystack_document("b", EXCEPTION)]})}}, 2, 2.25),
        phoenix("Cut.run", "s3", "root", "CHAIN",
                {**meta, "input": {"value": json.dumps({"documents": [haystack_document("a", RULE),
                                                                       haystack_document("b", EXCEPTION)]})},
                 "output": {"value": json.dumps({"documents": [haystack_document("a", RULE)]})}}, 3, 3.5),
        phoenix("PromptBuilder.run", "s4", "root", "LLM", {**meta, "llm": {"prompt_template": {"template": "x"}}}, 4, 4.1),
        phoenix("Generator.run", "s5", "root", "LLM",
                {**meta, "llm": {"output_messages": [{"message": {"content": RULE, "role": "assistant"}}],
                                 "token_count": {"prompt": 120, "completion": 9}}}, 5, 6),
    ]


def otlp(records):
    """The same spans as one OTLP/JSON line (attributes as key/value lists, flat keys)."""
    from ragdx.traces.spans import _flatten
    from ragdx.testing.otlp import any_value as value
    out = []
    for r in records:
        start = 1_700_000_000_000_000_000 + int(float(r["start_time"][17:23]) * 1e9)
        end = 1_700_000_000_000_000_000 + int(float(r["end_time"][17:23]) * 1e9)
        out.append({"traceId": "dDE=", "spanId": r["context"]["span_id"], "parentSpanId": r["parent_id"] or "",
                    "name": r["name"], "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
                    "attributes": [{"key": k, "value": value(v)} for k, v in _flatten(
                        {**r["attributes"], "openinference.span.kind": r["span_kind"]})]})
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                               "scopeSpans": [{"scope": {"name": "openinference.instrumentation.haystack"},
                                               "spans": out}]}]}


@pytest.mark.parametrize("fmt", ["openinference", "otlp"])
def test_spans_become_the_stages_the_components_are(tmp_path, fmt):
    records = spans()
    text = "".join(json.dumps(r) + "\n" for r in records) if fmt == "openinference" else json.dumps(otlp(records))
    path = write(tmp_path / "spans.jsonl", text)
    views, bad, system = read_any(path, stage_map={"Cut": "context"})
    assert bad == [] and len(views) == 1
    assert system == ("haystack" if fmt == "otlp" else None)
    view = views[0][1]
    assert [(s.name, s.kind.value) for s in view.stages] == [
        ("InMemoryBM25Retriever", "retrieval"), ("DocumentJoiner", "fusion"), ("Cut", "context")]
    assert view.stages[0].seconds == pytest.approx(0.5) and view.stages[2].seconds == pytest.approx(0.5)
    # the joiner and the cut name documents by id only: their texts come from the retriever span
    cut = view.stages[2]
    assert [(i.id, i.doc, i.text) for i in cut.items] == [("a", "policies/refund.md", RULE)]
    assert [(d.item.id, d.item.doc, d.reason) for d in cut.dropped] == [("b", "policies/quality.md", "not kept by Cut")]
    assert (view.answer.text, view.answer.prompt_tokens, view.answer.completion_tokens) == (RULE, 120, 9)
    assert view.answer.seconds == pytest.approx(1.0)


def test_spans_diagnosed_through_the_cli(tmp_path, capsys):
    write(tmp_path / "q.jsonl", json.dumps(QUERY) + "\n")
    write(tmp_path / "s.jsonl", "".join(json.dumps(r) + "\n" for r in spans()))
    assert main(["diagnose", "--traces", str(tmp_path / "s.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "o"), "--stage", "Cut=context", "--system", "refund-bot"]) == 0
    row = json.loads((tmp_path / "o" / "diagnosis.jsonl").read_text())
    assert (row["outcome"], row["first_failure"]) == ("incomplete", "context")
    assert row["lost"] == [{"group": 1, "stage": "context", "reason": "Cut: not kept by Cut"}]
    assert row["hypothesis"] == ("If group 1 (policies/quality.md) reaches the context at Cut (a larger budget, "
                                 "or a better order), the answer can use it.")
    html = (tmp_path / "o" / "report.html").read_text()
    assert "<title>refund-bot: ragdx diagnosis of imported traces</title>" in html
    assert "index version" not in html and "seed" not in html and "? of ?" not in html
    assert 'data-stage="rerank"' not in html and 'data-stage="fusion"' in html  # the system has no reranker
    assert "complete@rerank" not in html and "complete@fusion" in html
    # without the mapping the cut is the context all the same: its name says so (issue 50)
    assert main(["diagnose", "--traces", str(tmp_path / "s.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "o2")]) == 0
    again = json.loads((tmp_path / "o2" / "diagnosis.jsonl").read_text())
    assert (again["outcome"], again["first_failure"], again["lost"]) == (row["outcome"], row["first_failure"],
                                                                         row["lost"])
    assert again["stages"]["Cut"] == {"groups_present": [0], "kind": "context"}


def test_spans_without_a_query_id_are_reported_and_a_bad_mapping_exits_2(tmp_path, capsys):
    write(tmp_path / "q.jsonl", json.dumps(QUERY) + "\n")
    records = [dict(r, attributes={k: v for k, v in r["attributes"].items() if k != "metadata"}) for r in spans()]
    write(tmp_path / "s.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    assert main(["diagnose", "--traces", str(tmp_path / "s.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no trace could be read: 1 malformed line; the first: " in err
    assert "s.jsonl:1: trace t1 names no query id (set span metadata" in err
    assert main(["diagnose", "--traces", str(tmp_path / "s.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "o"), "--stage", "Cut=cutting"]) == 2
    assert "--stage 'Cut=cutting': the kind must be one of 'source'" in capsys.readouterr().err


def test_an_export_of_a_ragdx_run_reads_back_to_the_same_diagnoses(tmp_path, capsys):
    """ragdx's own run (hashing encoder), with a small context budget and rerank cut so that
    groups are lost at several stages, exported as OpenInference spans and diagnosed again."""
    from ragdx.build import build_ingestor
    from ragdx.config import load_settings
    from ragdx.experiments.run import run
    from ragdx.queryset import load_queries
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.testing.encoders import HashingEncoder
    from tests.conftest import EXAMPLE
    settings = load_settings(overrides=["context.budget_tokens=120", "rerank.method=features", "rerank.top_n=4"])
    encoder = HashingEncoder(dim=128)
    store = SQLiteStore(tmp_path / "store.db", "create")
    build_ingestor(store, settings, encoder).run(EXAMPLE / "manifest.jsonl")
    result = run(store, settings, load_queries(EXAMPLE / "queries.jsonl"), tmp_path / "run", progress=False,
                 encoder=encoder)
    store.close()
    assert main(["export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "spans.jsonl")]) == 0
    assert main(["diagnose", "--traces", str(tmp_path / "spans.jsonl"), "--queries", str(EXAMPLE / "queries.jsonl"),
                 "--store", str(tmp_path / "store.db"), "--out", str(tmp_path / "back")]) == 0

    def keys(path):
        return {d["id"]: (d["outcome"], d["first_failure"], [(l["group"], l["stage"]) for l in d["lost"]])
                for d in map(json.loads, path.read_text().splitlines())}
    before, after = keys(tmp_path / "run" / "diagnosis.jsonl"), keys(tmp_path / "back" / "diagnosis.jsonl")
    assert after == before
    stages = {l[1] for k in before.values() for l in k[2]}
    assert {"rerank", "context"} <= stages  # the losses the settings cause are read back too
    assert len(result.diagnoses) == 20
    assert "ragdx: 20 traces diagnosed" in capsys.readouterr().out
