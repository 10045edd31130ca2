"""The framework tests: real Haystack and LangChain pipelines over the bundled example (the
examples in examples/), with faults injected at each stage. They skip when a framework is not
installed (the core environment), and fail instead when RAGDX_REQUIRE_FRAMEWORKS is set (CI)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import sys
from pathlib import Path

import pytest

from ragdx.cli import main
from ragdx.examples import example_dir
from ragdx.types import StageKind

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUERIES = example_dir() / "queries.jsonl"
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")


def require(*modules: str, extras: str = "haystack,langchain") -> None:
    """Skip the test unless the modules import; with RAGDX_REQUIRE_FRAMEWORKS set, fail instead."""
    missing = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        if os.environ.get("RAGDX_REQUIRE_FRAMEWORKS"):
            pytest.fail(f"RAGDX_REQUIRE_FRAMEWORKS is set but {', '.join(missing)} is not installed "
                        f"(make test installs the extras {extras} into .venv)")
        pytest.skip(f"{', '.join(missing)} not installed (pip install 'ragdx[{extras}]')")


def example(name: str):
    """An example script of examples/, imported as a module."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # instrumentations patch a component class through its module's name
    spec.loader.exec_module(module)
    return module


def diagnose(traces: Path, store: Path, out: Path, *extra: str) -> dict[str, dict]:
    """``ragdx diagnose`` of a traces file against the example's queries; each query's diagnosis."""
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["diagnose", "--traces", str(traces), "--queries", str(QUERIES), "--store", str(store),
                     "--out", str(out), *extra])
    assert code == 0
    return {d["id"]: d for d in map(json.loads, (out / "diagnosis.jsonl").read_text().splitlines())}


def key(d: dict) -> tuple:
    """What two diagnoses of one query must agree on: the outcome, the first failure, and each
    lost group's stage (reasons name each system's own components, so they may differ)."""
    return d["outcome"], d["first_failure"], tuple((l["group"], l["stage"]) for l in d["lost"])


def expected_stage(baseline: dict, stage: str) -> str:
    """The first failure a fault at ``stage`` must give a query: that stage, unless the query
    already lost evidence earlier without the fault (an earlier loss stays the first; an answer's
    failure is judged anew)."""
    before = baseline["first_failure"]
    if before is not None and StageKind(before).order < min(StageKind(stage).order, StageKind.GENERATION.order):
        return before
    return stage


# fault -> the stage ragdx must name, and the outcome every changed query must have (None: any)
FAULT_STAGES = {
    "retrieval": ("retrieval", None), "fusion": ("fusion", None), "context": ("context", None),
    "stale": ("governance", "stale"), "leak": ("governance", "leak"), "invent": ("generation", "unsupported"),
    "drop": ("generation", "incomplete"), "distract": ("generation", None), "miscite": ("citation", "unsupported"),
}


def validate(traces: Path) -> None:
    """Every line an adapter wrote follows the imported-trace schema."""
    import jsonschema
    schema = json.loads((EXAMPLES.parent / "docs" / "schemas" / "imported-trace.schema.json").read_text())
    lines = traces.read_text().splitlines()
    assert len(lines) == len(QUERIES.read_text().splitlines())
    for line in lines:
        jsonschema.validate(json.loads(line), schema)


def runner(module, name: str, tmp_path_factory):
    """``get(fault, chunks=True)``: an example's run with that fault, diagnosed (cached per module:
    a run takes a second or two)."""
    cache: dict[tuple, dict] = {}

    def get(fault: str | None, *, chunks: bool = True) -> dict[str, dict]:
        if (fault, chunks) not in cache:
            out = tmp_path_factory.mktemp(f"{name}-{fault}-{chunks}")
            traces = module.run(out, fault, chunks=chunks)
            validate(traces)
            cache[fault, chunks] = diagnose(traces, out / "store.db", out / "d")
            cache[fault, chunks]["_out"] = out
        return cache[fault, chunks]
    return get


def check_openinference(adapter: dict, otlp: Path, phoenix: Path, tmp_path: Path, system: str,
                        fault: str | None) -> None:
    """The spans as the instrumentor wrote them (OTLP/JSON, with the chunks for --chunks), read
    with no --stage or --abstention flag, give the directly captured run's diagnoses; without a
    fault, Phoenix's JSON gives the same as OTLP's."""
    chunks = ["--chunks", str(otlp.parent / "chunks.jsonl")]
    from_otlp = diagnose(otlp, otlp.parent / "store.db", tmp_path / "d1", *chunks)
    different = {q: (key(adapter[q]), key(d)) for q, d in from_otlp.items() if key(adapter[q]) != key(d)}
    assert different == {}
    report = (tmp_path / "d1" / "report.html").read_text()
    assert f"<title>{system}: ragdx diagnosis of imported traces</title>" in report
    if fault is None:
        from_phoenix = diagnose(phoenix, otlp.parent / "store.db", tmp_path / "d2", *chunks)
        assert {q: key(d) for q, d in from_phoenix.items()} == {q: key(d) for q, d in from_otlp.items()}


def write_span_files(spans, out: Path) -> tuple[Path, Path]:
    """Finished OpenTelemetry spans written as the collector's file exporter writes them (one
    OTLP/JSON ExportTraceServiceRequest per line; protobuf's JSON gives ids in base64 where the
    collector writes hex: ragdx treats ids as opaque) and as Phoenix's span JSON."""
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    otlp = out / "spans.otlp.jsonl"
    otlp.write_text("".join(MessageToJson(encode_spans(spans[i:i + 50]), indent=None) + "\n"
                            for i in range(0, len(spans), 50)))
    phoenix = out / "spans.phoenix.jsonl"
    phoenix.write_text("".join(json.dumps(_phoenix(s)) + "\n" for s in spans))
    return otlp, phoenix


def in_memory_provider():
    """An OpenTelemetry tracer provider whose spans stay in memory, and its exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def check_fault(base: dict, broken: dict, fault: str) -> None:
    """Every query the fault changed is diagnosed at the fault's stage (and with its outcome)."""
    stage, outcome = FAULT_STAGES[fault]
    changed = [q for q in base if q != "_out" and key(base[q]) != key(broken[q])]
    assert len(changed) >= 2, f"the {fault} fault changed {changed}: too few to test"
    for q in changed:
        assert broken[q]["first_failure"] == expected_stage(base[q], stage), (q, base[q], broken[q])
        if outcome is not None:
            assert broken[q]["outcome"] == outcome, (q, broken[q])


def _compact(text: str) -> str:
    return "".join(text.split())


def check_cut_quotes(cut: dict, plain: dict, chunks: list[tuple[str, str]], chunker: str, least: int) -> None:
    """A required group every alternative of which no chunk (``(doc, text)``, counted here from the
    framework's own chunks) holds whole, in documents the query touched, is lost at parsing with
    chunk overlap as the hypothesis; without the chunk listing the same queries are not."""
    traces = {t["query_id"]: t for t in map(json.loads, (cut["_out"] / "traces.jsonl").read_text().splitlines())}
    expected = []
    for line in QUERIES.read_text().splitlines():
        q = json.loads(line)
        touched = {i.get("doc") for s in traces[q["id"]]["stages"] if s["kind"] != "parsing" for i in s["items"]}
        for group in q.get("required", []):
            whole = [a for a in group if any(_compact(a["quote"]) in _compact(text) for doc, text in chunks
                                             if doc == a["doc"])]
            if not whole and all(a["doc"] in touched for a in group):
                expected.append(q["id"])
                break
    assert len(expected) >= least, expected
    for qid in expected:
        d = cut[qid]
        assert d["first_failure"] == "parsing", (qid, d)
        loss = next(l for l in d["lost"] if l["stage"] == "parsing")
        assert "no single chunk holds it whole" in loss["reason"]
        assert f"chunk overlap, or larger chunks at {chunker}" in d["hypothesis"]
        assert plain[qid]["first_failure"] != "parsing"
    assert sum(1 for qid in expected if plain[qid]["first_failure"] == "retrieval") >= least // 2


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


