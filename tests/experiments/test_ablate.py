"""Ablations on the bundled example: one setting per variant, upstream outputs reused, paired
tests, readings, routing, and refusals that name the reason."""

import json

import pytest

from ragdx.config import load_settings
from ragdx.errors import ConfigError
from ragdx.experiments.ablate import Comparison, Variant, min_flips, parse_variant, readings
from ragdx.evaluation.significance import PairedTest
from ragdx.experiments.routing import routing_table
from ragdx.evaluation.layered import QueryValues
from ragdx.build import build_ingestor, build_pipeline
from ragdx.queryset import load_queries
from ragdx.experiments.ablate import ablate
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import StageKind
from tests.conftest import EXAMPLE

VARIANTS = ["no-dense:retrieval.dense.enabled=false", "small-budget:context.budget_tokens=250",
            "no-rerank:rerank.method=none"]


@pytest.fixture(scope="module")
def dense_example(tmp_path_factory):
    """The bundled example with dense vectors from the hashing encoder (no model needed); a seed
    that is not the default, so a test can tell that the comparisons use it."""
    settings = load_settings(overrides=["seed=7", "rerank.method=features", "context.budget_tokens=1200",
                                        "generation.semantic_weight=0"])  # hashing vectors carry no meaning
    encoder = HashingEncoder(dim=128)
    store = SQLiteStore(tmp_path_factory.mktemp("ablate") / "store.db")
    build_ingestor(store, settings, encoder).run(EXAMPLE / "manifest.jsonl")
    return store, settings, encoder


@pytest.fixture(scope="module")
def ablation(dense_example, tmp_path_factory):
    store, settings, encoder = dense_example
    out = tmp_path_factory.mktemp("ablation-out") / "ab"
    result = ablate(store, settings, load_queries(EXAMPLE / "queries.jsonl"), VARIANTS, out, progress=False,
                    encoder=encoder)
    return result, out


def test_variants_parse_to_one_stage_each():
    base = load_settings()
    variant, settings = parse_variant("small:context.budget_tokens=300", base)
    assert variant == Variant("small", ("context.budget_tokens=300",), (StageKind.CONTEXT,))
    assert settings.context.budget_tokens == 300 and base.context.budget_tokens == 6000
    variant, _ = parse_variant("deep:retrieval.bm25.top_k=300,retrieval.dense.top_k=300", base)
    assert variant.stages == (StageKind.RETRIEVAL,)  # two keys, one stage


@pytest.mark.parametrize("text, message", [
    ("both:context.budget_tokens=300,rerank.top_n=5", "changes more than one stage: rerank (rerank.top_n); "
                                                      "context (context.budget_tokens)"),
    ("chunks:chunking.max_tokens=100", "changes the chunks, and so the index"),
    ("typo:context.budget=300", "context.budget"),
    ("same:context.budget_tokens=6000", "would change nothing"),
    ("baseline:context.budget_tokens=300", "not be one of baseline"),
    ("..:context.budget_tokens=300", "must start with a letter or digit"),
    ("Report.html:context.budget_tokens=300", "not be one of"),
    ("no-colon", "expected NAME:key=value"),
    ("seed:seed=3", "not a pipeline stage setting"),
])
def test_bad_variants_are_refused_with_the_reason(text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_variant(text, load_settings())


def test_a_multi_stage_variant_runs_when_forced():
    variant, _ = parse_variant("both:context.budget_tokens=300,rerank.top_n=5", load_settings(), force=True)
    assert variant.start is StageKind.RERANK


@pytest.mark.parametrize("start", [StageKind.RETRIEVAL, StageKind.FUSION, StageKind.RERANK,
                                   StageKind.GOVERNANCE, StageKind.CONTEXT, StageKind.GENERATION,
                                   StageKind.CITATION])
def test_resuming_with_unchanged_settings_reproduces_the_run(dense_example, start):
    store, settings, encoder = dense_example
    pipeline = build_pipeline(store, settings, encoder=encoder)
    query = load_queries(EXAMPLE / "queries.jsonl")[0]
    base = pipeline.run(query)
    again = pipeline.resume(base, start)
    assert [s.stage for s in again.stages] == [s.stage for s in base.stages]
    assert [c.chunk_id for c in again.final.items] == [c.chunk_id for c in base.final.items]
    assert [u.id for u in again.context.units] == [u.id for u in base.context.units]
    assert again.answer.text == base.answer.text
    reused = [s.stage for s, b in zip(again.stages, base.stages) if s is b]
    # every stage before the start is reused, and so are the channels (their config is unchanged)
    expected = [s.stage for s in base.stages if s.kind.order < start.order or s.kind is StageKind.RETRIEVAL]
    assert expected and reused == expected


def test_each_variant_reuses_every_upstream_output(ablation):
    result, _ = ablation
    by = {v.variant.name: v for v in result.variants}
    assert by["small-budget"].reused == ("bm25", "dense", "features", "governance", "rewrite", "rrf")
    assert by["no-rerank"].reused == ("bm25", "dense", "rewrite", "rrf")
    assert by["no-dense"].reused == ("bm25", "rewrite")  # the BM25 channel's config is unchanged


def test_the_ablation_folder(ablation):
    result, out = ablation
    assert sorted(p.name for p in out.iterdir()) == ["baseline", "manifest.json", "metrics.json", "no-dense",
                                                     "no-rerank", "queries.jsonl", "report.html", "small-budget"]
    for name in ("baseline", "no-dense"):
        assert sorted(p.name for p in (out / name).iterdir()) == ["diagnosis.jsonl", "manifest.json",
                                                                  "metrics.json", "queries.jsonl", "report.html",
                                                                  "traces.jsonl"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["variants"]) == {"no-dense", "small-budget", "no-rerank"}
    for variant in metrics["variants"].values():
        assert variant["metrics"]["overall"]["queries"] == 20 and variant["comparisons"]
    assert metrics["baseline"]["overall"]["queries"] == 20 and metrics["routing"]["routes"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["variants"]["small-budget"] == ["context.budget_tokens=250"]
    # traces of a variant: no dense stage, and the same queries in the same order
    traces = [json.loads(line) for line in (out / "no-dense" / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 20 and all("dense" not in [s["name"] for s in t["stages"]] for t in traces)


def test_comparisons_carry_paired_tests_and_seeds(ablation, dense_example):
    result, out = ablation
    seed = dense_example[1].seed
    sampled = [c for v in result.variants for c in v.comparisons if c.test.test == "randomization"]
    assert sampled  # latencies differ on every query: more pairs than exact enumeration takes
    assert {c.test.seed for c in sampled} == {seed} and {c.to_dict()["seed"] for c in sampled} == {seed}
    written = json.loads((out / "metrics.json").read_text())["variants"]["small-budget"]["comparisons"]
    assert {c["seed"] for c in written if c["test"] == "randomization"} == {seed}
    for v in result.variants:
        for c in v.comparisons:
            assert 0 < c.test.p <= 1 and c.test.n > 0
            if c.test.test.startswith("mcnemar"):
                assert c.metric.startswith("complete@") or c.metric in (
                    "success", "supported", "answered", "correct_abstention", "wrong_abstention",
                    "hallucination", "leak", "stale")
        # a metric that did not move on any query has p = 1
        same = [c for c in v.comparisons if c.metric == "complete@source"]
        assert same and same[0].test.p == 1.0


def test_the_smaller_budget_loses_evidence_at_the_context_and_says_so(ablation):
    result, _ = ablation
    v = next(v for v in result.variants if v.variant.name == "small-budget")
    context = v.comparison("complete@context")
    assert context.delta < 0 and v.comparison("complete@governance").delta == 0
    assert any(r.startswith("The variant loses evidence: complete@context") for r in v.readings)
    assert v.first_failure.get("context", 0) > 0


def test_readings_for_constructed_deltas():
    def comp(name, a, b, p, detail=""):
        return Comparison(name, a, b, b - a, PairedTest("t", 20, b - a, p, detail=detail))
    variant = Variant("deeper", ("retrieval.bm25.top_k=300",), (StageKind.RETRIEVAL,))
    coverage_only = [comp("complete@retrieval", 0.6, 0.9, 0.01), comp("complete@context", 0.5, 0.5, 1.0),
                     comp("success", 0.5, 0.5, 1.0, "no query changed")]
    text = " ".join(readings(variant, coverage_only, {"retrieval": 6}, {"context": 6}))
    assert "coverage rose" in text and "bottleneck moved downstream, to assembly or generation" in text
    assert "First failures moved from retrieval (6) to context (+6)" in text
    slower = [comp("success", 0.5, 0.9, 0.001, "8 queries gained, 0 lost"),
              comp("latency_ms total", 100.0, 400.0, 0.001)]
    text = " ".join(readings(variant, slower, {}, {}))
    assert "Answers improved" in text and "route this variant only to the query types it helps" in text
    weak = [comp("success", 0.5, 0.6, 0.25, "2 queries gained, 0 lost")]
    text = " ".join(readings(variant, weak, {}, {}))
    assert f"at least {min_flips()} queries would have to flip" in text and min_flips() == 6
    assert "cannot be told apart" in " ".join(readings(variant, [comp("success", .5, .5, 1.0, "no query changed")],
                                                        {}, {}))


def test_routing_picks_the_cheapest_configuration_that_answers_as_well():
    def row(qid, tag, success, ms):
        return QueryValues(qid, (tag,), "supported" if success else "wrong_abstention", None,
                           {"success": float(success), "latency_ms total": ms, "cost": 0.0})
    base = [row("a", "easy", 1, 10), row("b", "easy", 1, 10), row("c", "hard", 0, 10), row("d", "hard", 1, 10)]
    costly = [row("a", "easy", 1, 100), row("b", "easy", 1, 100), row("c", "hard", 1, 100), row("d", "hard", 1, 100)]
    table = routing_table({"baseline": base, "costly": costly})
    assert {r.key: r.choice for r in table.routes} == {"easy": "baseline", "hard": "costly"}
    assert table.routed.success == 1.0 and table.routed.latency_ms == (10 + 10 + 100 + 100) / 4
    assert table.best_fixed == "costly" and table.latency_saved_ms == 100 - 55


def test_the_ablation_report_names_each_variant(ablation):
    _, out = ablation
    html = (out / "report.html").read_text()
    assert 'id="ablation"' in html and "Routing (by a query" in html
    for name in ("no-dense", "small-budget", "no-rerank"):
        assert f'<h3 class="variant">{name} ' in html


def test_the_queries_that_changed_outcome_are_listed(ablation):
    result, _ = ablation
    base = {r.id: r.outcome for r in result.baseline.rows}
    for v in result.variants:
        mine = {r.id: r.outcome for r in v.metrics.rows}
        assert list(v.changed) == [(q, base[q], mine[q]) for q in base if base[q] != mine[q]]
    small = next(v for v in result.variants if v.variant.name == "small-budget")
    assert small.changed  # a smaller budget changes some answers on the bundled example


def test_answers_that_change_both_ways_are_not_called_unchanged():
    variant = Variant("swap", ("generation.min_coverage=0.3",), (StageKind.GENERATION,))
    success = Comparison("success", 0.5, 0.5, 0.0, PairedTest("mcnemar (exact)", 6, 0.0, 1.0,
                                                               detail="3 queries gained, 3 lost"))
    text = " ".join(readings(variant, [success], {}, {}))
    assert "changed both ways with no net effect (3 queries gained, 3 lost)" in text
    assert "cannot be told apart" not in text and "no answer changed" not in text.lower()


def test_the_values_shown_are_over_the_paired_queries():
    from ragdx.experiments.ablate import compare

    def row(qid, faith):
        return QueryValues(qid, (), "supported", None, {"faithfulness": faith})
    base = [row("a", 1.0), row("b", 1.0), row("c", None), row("d", None)]
    variant = [row("a", 1.0), row("b", 1.0), row("c", 0.0), row("d", 0.0)]
    [c] = compare(base, variant)
    assert (c.baseline, c.variant, c.delta, c.test.n, c.test.p) == (1.0, 1.0, 0.0, 2, 1.0)
