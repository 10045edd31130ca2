"""The pipeline as one ordered list of stages: validation, protocols, order followed everywhere,
and a user's own stages (examples/custom_stages.py) treated like ragdx's."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from ragdx import (
    FunctionRetriever, Pipeline, StageKind, build_pipeline, default_stages, load_queries, run_pipeline,
)
from ragdx.errors import ConfigError
from ragdx.experiments.run import run
from ragdx.protocols import STAGE_PROTOCOLS, DeepRetriever, Store
from tests.conftest import EXAMPLE

ROOT = Path(__file__).resolve().parents[1]
LEXICAL = ["retrieval.dense.enabled=false", "rerank.method=features"]  # a reranker in the list


def test_ragdx_stages_satisfy_their_kinds_protocols(example_store):
    from ragdx.config import load_settings
    from ragdx.testing.encoders import HashingEncoder
    stages = default_stages(example_store, load_settings(overrides=["rerank.method=features"]),
                            encoder=HashingEncoder())
    assert [s.kind for s in stages] == [StageKind.REWRITE, StageKind.RETRIEVAL, StageKind.RETRIEVAL, StageKind.FUSION,
                                        StageKind.RERANK, StageKind.GOVERNANCE, StageKind.CONTEXT,
                                        StageKind.GENERATION, StageKind.CITATION]
    for stage in stages:
        assert isinstance(stage, STAGE_PROTOCOLS[stage.kind]), stage.name
    assert [s.name for s in stages if isinstance(s, DeepRetriever)] == ["bm25", "dense"]
    assert isinstance(example_store, Store)


def _stages(store):
    """The default stages without the rewrite stage (the list's changes below index from bm25)."""
    from ragdx.config import load_settings
    return [s for s in default_stages(store, load_settings(overrides=LEXICAL)) if s.kind is not StageKind.REWRITE]


@pytest.mark.parametrize("change, message", [
    (lambda s: [s[2], *s[:2], *s[3:]], "stage 1 (bm25): a retrieval stage cannot come after a rerank stage; "
                                       "the order is rewrite -> retrieval -> fusion -> rerank -> governance"),
    (lambda s: s[:3] + [s[2]] + s[3:], "two stages are named 'features'"),
    (lambda s: [x for x in s if x.kind is not StageKind.RETRIEVAL], "at least one retrieval stage"),
    (lambda s: [x for x in s if x.kind is not StageKind.CONTEXT], "a generation stage needs a context stage"),
    (lambda s: s + [object()], "kind None is not a kind a pipeline runs"),
])
def test_a_bad_order_is_refused_with_the_stage_and_the_valid_order(example_store, change, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        Pipeline(change(_stages(example_store)), store=example_store)


def test_several_channels_need_a_fusion_stage(example_store):
    stages = _stages(example_store)
    extra = FunctionRetriever(example_store, lambda q, k: [], name="nothing")
    with pytest.raises(ConfigError, match="several retrieval channels need a fusion stage"):
        Pipeline([stages[0], extra, *stages[2:]], store=example_store)


def test_the_trace_the_diagnosis_and_the_funnel_follow_the_list(example_store, tmp_path):
    """Change the list (no reranker, no governance, a second channel) and every layer follows."""
    stages = _stages(example_store)
    chunks = {c.id: c for c in example_store.chunks()}
    exact = FunctionRetriever(example_store, lambda query, k: [(cid, 1.0) for cid, c in chunks.items()
                                                                if "35 days" in c.text][:k], name="exact")
    kept = [s for s in stages if s.kind not in (StageKind.RERANK, StageKind.GOVERNANCE)]
    pipeline = Pipeline([kept[0], exact, *kept[1:]], store=example_store)
    assert pipeline.kinds == (StageKind.RETRIEVAL, StageKind.FUSION, StageKind.CONTEXT, StageKind.GENERATION,
                              StageKind.CITATION)
    queries = load_queries(EXAMPLE / "queries.jsonl")
    result = run_pipeline(pipeline, queries, tmp_path / "run", progress=False)
    trace = json.loads((tmp_path / "run" / "traces.jsonl").read_text().splitlines()[0])
    assert [s["name"] for s in trace["stages"]] == ["bm25", "exact", "rrf", "context", "extractive", "verify"]
    answerable = next(d for d, q in zip(result.diagnoses, queries) if q.required and q.answerable)
    assert [s.name for s in answerable.stages] == ["retrieval", "rrf", "context"]
    assert [name for name, _ in answerable.stage("retrieval").channels] == ["bm25", "exact"]
    metrics = result.metrics.overall.metrics
    assert {"complete@retrieval:bm25", "complete@retrieval:exact", "complete@fusion", "complete@context"} \
        <= set(metrics)
    # a stage the pipeline does not have loses nothing: it carries the previous stage's value
    assert metrics["complete@rerank"].value == metrics["complete@fusion"].value
    assert metrics["complete@governance"].value == metrics["complete@fusion"].value
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert [(s["name"], s["kind"]) for s in manifest["stages"]] == [
        ("bm25", "retrieval"), ("exact", "retrieval"), ("rrf", "fusion"), ("context", "context"),
        ("extractive", "generation"), ("verify", "citation")]


def test_resume_follows_the_list(example_store):
    from ragdx.config import load_settings
    pipeline = build_pipeline(example_store, load_settings(overrides=LEXICAL))
    query = load_queries(EXAMPLE / "queries.jsonl")[0]
    base = pipeline.run(query)
    again = pipeline.resume(base, StageKind.CONTEXT)
    assert [s.stage for s in again.stages] == [s.stage for s in base.stages]
    assert [s is b for s, b in zip(again.stages, base.stages)] == [True] * 5 + [False] * 3
    assert again.notes[-1] == "reused from the baseline: rewrite, bm25, rrf, features, governance"


def _sections(page: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', page)


def test_the_user_stage_example_runs_and_reports_like_the_built_in_stages(tmp_path, example_store):
    spec = importlib.util.spec_from_file_location("custom_stages", ROOT / "examples" / "custom_stages.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    pipeline = example.main(tmp_path / "custom")
    assert [s.name for s in pipeline.stages] == ["rewrite", "overlap", "rrf", "governance", "context",
                                                 "first-sentence", "verify"]
    from ragdx.config import load_settings
    run(example_store, load_settings(overrides=["retrieval.dense.enabled=false"]),
        load_queries(EXAMPLE / "queries.jsonl"),
        tmp_path / "builtin", progress=False)
    custom, builtin = tmp_path / "custom" / "run", tmp_path / "builtin"
    assert sorted(p.name for p in custom.iterdir()) == sorted(p.name for p in builtin.iterdir())
    trace = json.loads((custom / "traces.jsonl").read_text().splitlines()[0])
    assert trace["stages"][1]["name"] == "overlap" and trace["stages"][1]["items"]
    custom_lines = [json.loads(line) for line in (custom / "diagnosis.jsonl").read_text().splitlines()]
    builtin_lines = [json.loads(line) for line in (builtin / "diagnosis.jsonl").read_text().splitlines()]
    assert len(custom_lines) == len(builtin_lines) == 20
    assert [sorted(d) for d in custom_lines] == [sorted(d) for d in builtin_lines]
    assert {d["first_failure"] for d in custom_lines} - {None} <= {k.value for k in StageKind}
    assert _sections((custom / "report.html").read_text()) == _sections((builtin / "report.html").read_text())
    ablation = json.loads((tmp_path / "custom" / "ablation" / "metrics.json").read_text())
    assert list(ablation["variants"]) == ["extractive"]
    # the variant changes generation only: everything before it is the baseline's own output
    assert ablation["variants"]["extractive"]["reused"] == ["context", "governance", "overlap", "rewrite", "rrf"]
