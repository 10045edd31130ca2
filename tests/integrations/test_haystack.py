"""A real Haystack 2 pipeline (examples/haystack_refund.py: BM25 and embedding retrievers, a
reciprocal-rank DocumentJoiner, a status filter, a context cut, a stand-in generator) over the
bundled example, traced by ragdx's tracer and by OpenInference's instrumentation, with a fault
injected at each stage: ragdx must name the stage of each fault, and both traces must give the
same diagnoses."""

from __future__ import annotations

import pytest

from tests.integrations.conftest import (
    FAULT_STAGES, check_cut_quotes, check_fault, check_openinference, example, in_memory_provider, require,
    runner, write_span_files,
)

@pytest.fixture(scope="module")
def hx():
    require("haystack")
    return example("haystack_refund")


@pytest.fixture(scope="module")
def runs(hx, tmp_path_factory):
    return runner(hx, "haystack", tmp_path_factory)


@pytest.mark.parametrize("fault", list(FAULT_STAGES))
def test_each_fault_is_named_at_its_stage(runs, fault):
    check_fault(runs(None), runs(fault), fault)


def test_quotes_the_splitter_cut_are_parsing_losses_not_retrieval(hx, runs):
    """Without the chunk listing the same queries are blamed on retrieval (the issue's report)."""
    cut, plain = runs("chunking"), runs("chunking", chunks=False)
    store = hx.index(hx.refund_sources(cut["_out"] / "again"), "chunking")
    check_cut_quotes(cut, plain, [(c.meta["doc"], c.content) for c in store.filter_documents()],
                     "DocumentSplitter", 6)


def test_a_run_without_faults_is_mostly_supported(runs):
    base = runs(None)
    outcomes = [d["outcome"] for q, d in base.items() if q != "_out"]
    assert outcomes.count("supported") >= 12 and outcomes.count("correct_abstention") == 2


def _openinference_run(hx, out, fault):
    """The same pipeline run under OpenInference's Haystack instrumentation, its spans written as
    the collector's OTLP/JSON and as Phoenix's span JSON, with the chunks for --chunks."""
    from openinference.instrumentation import using_metadata
    from openinference.instrumentation.haystack import HaystackInstrumentor

    from ragdx.integrations.haystack import write_chunks
    out.mkdir(parents=True, exist_ok=True)
    store = hx.index(hx.refund_sources(out), fault)
    pipe = hx.build(store, fault)
    provider, exporter = in_memory_provider()
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        for query in hx.queries():
            with using_metadata({"query_id": query["id"]}):
                hx.ask(pipe, query)
    finally:
        instrumentor.uninstrument()
    write_chunks(store.filter_documents(), out / "chunks.jsonl")
    return write_span_files(exporter.get_finished_spans(), out)


@pytest.mark.parametrize("fault", [None, "chunking", *FAULT_STAGES])
def test_openinference_spans_give_the_same_diagnoses_as_the_tracer(hx, runs, tmp_path, fault):
    require("openinference.instrumentation.haystack", "opentelemetry.sdk")
    otlp, phoenix = _openinference_run(hx, tmp_path / "oi", fault)
    check_openinference(runs(fault), otlp, phoenix, tmp_path, "haystack", fault)


def test_two_imported_runs_are_compared_and_the_fusion_fault_is_named(runs, tmp_path, capsys):
    """ragdx compare on two diagnoses of a third-party system's traces: the faultless run against
    the run whose DocumentJoiner drops evidence."""
    from ragdx.cli import main
    base, faulty = runs(None), runs("fusion")
    code = main(["compare", str(base["_out"] / "d"), str(faulty["_out"] / "d"), "--fail-on", "complete@fusion:-0"])
    out = capsys.readouterr().out
    at_fusion = [q for q, d in faulty.items() if q != "_out" and d["first_failure"] == "fusion"
                 and base[q]["first_failure"] != "fusion"]
    assert code == 1 and at_fusion
    assert f"NEW loses evidence at fusion on {len(at_fusion)} question" in out
    assert f"\n- ⚠ {at_fusion[0]}: " in out and "FAILED complete@fusion:-0" in out
    assert main(["compare", str(base["_out"] / "d"), str(base["_out"] / "d")]) == 0
    assert "no difference" in capsys.readouterr().out
