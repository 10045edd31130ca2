"""A real Haystack 2 pipeline (examples/haystack_refund.py: BM25 and embedding retrievers, a
reciprocal-rank DocumentJoiner, a status filter, a context cut, a stand-in generator) over the
bundled example, traced by ragdx's tracer and by OpenInference's instrumentation, with a fault
injected at each stage: ragdx must name the stage of each fault, and both traces must give the
same diagnoses."""

from __future__ import annotations

import json
import re

import pytest

from tests.integrations.conftest import FAULT_STAGES, diagnose, example, expected_stage, key, require

_RUNS: dict[tuple, dict] = {}


@pytest.fixture(scope="module")
def hx():
    require("haystack")
    return example("haystack_refund")


@pytest.fixture(scope="module")
def runs(hx, tmp_path_factory):
    """Each fault's run, diagnosed (cached: a run takes about a second)."""
    def get(fault: str | None, *, chunks: bool = True) -> dict[str, dict]:
        if (fault, chunks) not in _RUNS:
            out = tmp_path_factory.mktemp(f"haystack-{fault}-{chunks}")
            traces = hx.run(out, fault, chunks=chunks)
            _RUNS[fault, chunks] = diagnose(traces, out / "store.db", out / "d")
            _RUNS[fault, chunks]["_out"] = out
        return _RUNS[fault, chunks]
    return get


@pytest.mark.parametrize("fault", list(FAULT_STAGES))
def test_each_fault_is_named_at_its_stage(runs, fault):
    stage, outcome = FAULT_STAGES[fault]
    base, broken = runs(None), runs(fault)
    changed = [q for q in base if q != "_out" and key(base[q]) != key(broken[q])]
    assert len(changed) >= 2, f"the {fault} fault changed {changed}: too few to test"
    for q in changed:
        assert broken[q]["first_failure"] == expected_stage(base[q], stage), (q, base[q], broken[q])
        if outcome is not None:
            assert broken[q]["outcome"] == outcome, (q, broken[q])


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_quotes_the_splitter_cut_are_parsing_losses_not_retrieval(hx, runs):
    """A required group every alternative of which no Haystack chunk holds whole (counted here from
    the document store itself) is lost at parsing, with chunk overlap as the hypothesis; without
    the chunk listing the same queries are blamed on retrieval (the issue's report)."""
    cut, plain = runs("chunking"), runs("chunking", chunks=False)
    store = hx.index(hx.refund_sources(cut["_out"] / "again"), "chunking")
    chunks = store.filter_documents()
    traces = {t["query_id"]: t for t in map(json.loads, (cut["_out"] / "traces.jsonl").read_text().splitlines())}
    expected = []
    for q in hx.queries():
        touched = {i.get("doc") for s in traces[q["id"]]["stages"] if s["kind"] != "parsing" for i in s["items"]}
        for group in q.get("required", []):
            whole = [a for a in group if any(_compact(a["quote"]) in _compact(c.content) for c in chunks
                                             if c.meta["doc"] == a["doc"])]
            if not whole and all(a["doc"] in touched for a in group):
                expected.append(q["id"])
                break
    assert len(expected) >= 5
    for qid in expected:
        d = cut[qid]
        assert d["first_failure"] == "parsing", (qid, d)
        loss = next(l for l in d["lost"] if l["stage"] == "parsing")
        assert "no single chunk holds it whole" in loss["reason"]
        assert "chunk overlap, or larger chunks at DocumentSplitter" in d["hypothesis"]
        assert plain[qid]["first_failure"] != "parsing"
    assert sum(1 for qid in expected if plain[qid]["first_failure"] == "retrieval") >= 3


def test_a_run_without_faults_is_mostly_supported(runs):
    base = runs(None)
    outcomes = [d["outcome"] for q, d in base.items() if q != "_out"]
    assert outcomes.count("supported") >= 12 and outcomes.count("correct_abstention") == 2


def _openinference_run(hx, out, fault):
    """The same pipeline run under OpenInference's Haystack instrumentation, its spans written as
    the collector's OTLP/JSON and as Phoenix's span JSON, with the chunks for --chunks."""
    from google.protobuf.json_format import MessageToJson
    from openinference.instrumentation import using_metadata
    from openinference.instrumentation.haystack import HaystackInstrumentor
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ragdx.integrations.haystack import write_chunks
    out.mkdir(parents=True, exist_ok=True)
    store = hx.index(hx.refund_sources(out), fault)
    pipe = hx.build(store, fault)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        for query in hx.queries():
            with using_metadata({"query_id": query["id"]}):
                hx.ask(pipe, query)
    finally:
        instrumentor.uninstrument()
    spans = exporter.get_finished_spans()
    otlp = out / "spans.otlp.jsonl"
    # one ExportTraceServiceRequest per line, as the collector's file exporter writes
    otlp.write_text("".join(MessageToJson(encode_spans(spans[i:i + 50]), indent=None) + "\n"
                            for i in range(0, len(spans), 50)))
    phoenix = out / "spans.phoenix.jsonl"
    phoenix.write_text("".join(json.dumps(_phoenix(s)) + "\n" for s in spans))
    write_chunks(store.filter_documents(), out / "chunks.jsonl")
    return otlp, phoenix


def _unflatten(attributes):
    """Phoenix keeps attributes nested (``retrieval.documents`` as a list of objects)."""
    root: dict = {}
    for name, value in attributes.items():
        parts = name.split(".")
        node = root
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            nxt = parts[n + 1] if not last else None
            if part.isdigit() and isinstance(node, list):
                i = int(part)
                while len(node) <= i:
                    node.append({})
                node[i] = value if last else node[i]
                node = node[i]
                continue
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, [] if nxt.isdigit() else {})
    return root


def _phoenix(span):
    """A span as Phoenix's span_to_json writes it."""
    from datetime import datetime, timezone
    attrs = dict(span.attributes)
    return {"name": span.name, "context": {"trace_id": f"{span.context.trace_id:032x}",
                                           "span_id": f"{span.context.span_id:016x}"},
            "span_kind": attrs.get("openinference.span.kind", "UNKNOWN"),
            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
            "start_time": datetime.fromtimestamp(span.start_time / 1e9, timezone.utc).isoformat(),
            "end_time": datetime.fromtimestamp(span.end_time / 1e9, timezone.utc).isoformat(),
            "status_code": span.status.status_code.name, "status_message": "",
            "attributes": _unflatten(attrs), "events": [], "conversation": None}


STAGES = ["--stage", "StatusFilter=governance", "--stage", "ContextCut=context", "--abstention", "^I don't know"]


@pytest.mark.parametrize("fault", [None, "chunking", *FAULT_STAGES])
def test_openinference_spans_give_the_same_diagnoses_as_the_tracer(hx, runs, tmp_path, fault):
    require("openinference.instrumentation.haystack", "opentelemetry.sdk")
    adapter = runs(fault)
    otlp, phoenix = _openinference_run(hx, tmp_path / "oi", fault)
    from_otlp = diagnose(otlp, tmp_path / "oi" / "store.db", tmp_path / "d1", *STAGES,
                         "--chunks", str(tmp_path / "oi" / "chunks.jsonl"))
    different = {q: (key(adapter[q]), key(d)) for q, d in from_otlp.items() if key(adapter[q]) != key(d)}
    assert different == {}
    report = (tmp_path / "d1" / "report.html").read_text()
    assert "<title>haystack: ragdx diagnosis of imported traces</title>" in report
    if fault is None:  # Phoenix's export reads the same
        from_phoenix = diagnose(phoenix, tmp_path / "oi" / "store.db", tmp_path / "d2", *STAGES,
                                "--chunks", str(tmp_path / "oi" / "chunks.jsonl"))
        assert {q: key(d) for q, d in from_phoenix.items()} == {q: key(d) for q, d in from_otlp.items()}
