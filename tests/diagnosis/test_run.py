"""ragdx run on a small corpus: the run folder, the diagnosis, oracle substitution, export."""

import json

import pytest

from ragdx.config import load_settings
from ragdx.build import build_ingestor
from ragdx.queryset import parse_query
from ragdx.traces.export import spans
from ragdx.experiments.run import run
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from tests.conftest import write

DOCS = {
    "refund.md": "# Refund policy\n\nRefunds are accepted within 30 days of delivery.",
    "quality.md": "# Quality\n\nQuality defects may be refunded within 90 days of delivery.",
    "filler.md": "# Refund notes\n\n" + " ".join(["Refund requests about delivery are handled by the team."] * 12),
}
QUERY = {"id": "q-35d", "question": "Can I get a refund for a quality defect 35 days after delivery?",
         "required": [[{"doc": "refund.md", "quote": "Refunds are accepted within 30 days of delivery"}],
                      [{"doc": "quality.md", "quote": "Quality defects may be refunded within 90 days"}]]}


def setup(tmp_path, budget):
    lines = []
    for name, text in DOCS.items():
        write(tmp_path / name, text)
        lines.append(json.dumps({"doc_id": name, "path": name}))
    write(tmp_path / "m.jsonl", "\n".join(lines) + "\n")
    settings = load_settings(overrides=["chunking.tokenizer=regex", f"context.budget_tokens={budget}",
                                        "generation.semantic_weight=0",  # hashing vectors carry no meaning
                                        "context.expand=none", "rerank.method=none"])
    encoder = HashingEncoder(dim=64)
    store = SQLiteStore(tmp_path / "s.db")
    build_ingestor(store, settings, encoder).run(tmp_path / "m.jsonl")
    return store, settings, encoder


def test_run_folder_diagnosis_and_oracle_flip(tmp_path):
    store, settings, encoder = setup(tmp_path, budget=16)  # room for one unit only
    query = parse_query(QUERY, "q.jsonl", 1)
    result = run(store, settings, [query], tmp_path / "run", progress=False, oracle="context", encoder=encoder)
    [d] = result.diagnoses
    # the one unit that fits holds the quality exception: the answer cites it with support, but
    # the general rule (group 0) never reached the context
    assert (d.outcome, d.first_failure) == ("incomplete", "context")
    assert [(loss.group, loss.stage) for loss in d.lost] == [(0, "context")]
    assert d.lost[0].reason.startswith("context: cut by the token budget: rank")
    assert d.oracle == {"context": "supported", "flipped": True}
    assert "the failure lies upstream of generation" in d.notes[-1]
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert files == ["diagnosis.jsonl", "manifest.json", "metrics.json", "queries.jsonl", "report.html", "traces.jsonl"]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["embedding_space"]["model"] == "ragdx-hashing-64"
    assert manifest["settings"]["context"]["budget_tokens"] == 16
    trace = json.loads((tmp_path / "run" / "traces.jsonl").read_text())
    assert [s["kind"] for s in trace["stages"]] == ["rewrite", "retrieval", "retrieval", "fusion", "governance",
                                                    "context", "generation", "citation"]
    # OpenInference spans of the trace
    out = list(spans(trace, d.to_dict(), manifest["index_version"]))
    kinds = [s["span_kind"] for s in out]
    assert kinds == ["CHAIN", "CHAIN", "RETRIEVER", "RETRIEVER", "RERANKER", "RERANKER", "RETRIEVER", "LLM",
                     "EVALUATOR"]
    rewrite = out[1]["attributes"]
    assert rewrite["ragdx.stage.kind"] == "rewrite" and json.loads(rewrite["output.value"]) == [trace["question"]]
    assert json.loads(rewrite["ragdx.rewrite"])["route"] == "single"
    out = out[:1] + out[2:]
    root, bm25 = out[0]["attributes"], out[1]["attributes"]
    assert root["ragdx.first_failure"] == "context" and root["ragdx.index_version"] == 1
    assert "retrieval.documents.0.document.id" in bm25 and "retrieval.documents.0.document.score" in bm25
    fusion = out[3]["attributes"]
    assert "reranker.input_documents.0.document.id" in fusion
    assert "reranker.output_documents.0.document.id" in fusion
    assert all(s["parent_id"] == out[0]["context"]["span_id"] for s in out[1:])


def test_with_room_nothing_is_lost(tmp_path):
    store, settings, encoder = setup(tmp_path, budget=400)
    result = run(store, settings, [parse_query(QUERY, "q.jsonl", 1)], tmp_path / "run", progress=False,
                 encoder=encoder)
    [d] = result.diagnoses
    assert (d.outcome, d.first_failure, d.lost) == ("supported", None, ())


def test_traces_and_imported_traces_follow_their_json_schemas(tmp_path):
    import jsonschema
    from pathlib import Path
    schemas = Path(__file__).resolve().parents[2] / "docs" / "schemas"
    store, settings, encoder = setup(tmp_path, budget=400)
    run(store, settings, [parse_query(QUERY, "q.jsonl", 1)], tmp_path / "run", progress=False, encoder=encoder)
    trace = json.loads((tmp_path / "run" / "traces.jsonl").read_text())
    jsonschema.validate(trace, json.loads((schemas / "trace.schema.json").read_text()))
    imported = json.loads((schemas / "imported-trace.schema.json").read_text())
    from tests.diagnosis.test_imports import trace as imported_trace
    jsonschema.validate(imported_trace("q1", ["policy-current"]), imported)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"query_id": "q1", "stages": [{"kind": "magic"}]}, imported)
