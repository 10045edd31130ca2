"""A real LlamaIndex query engine (examples/llamaindex_refund.py: BM25 and vector retrievers, a
reciprocal-rank QueryFusionRetriever, status and access postprocessors, a context cut, a compact
synthesizer over a stand-in LLM that cites by id) over the bundled example, its stages captured
directly by ragdx's span handler (ragdx.integrations.llamaindex) and, separately, by OpenInference's LlamaIndex instrumentor, with a
fault injected at each stage: ragdx must name the stage of each fault, and the instrumentor's
raw spans, read with no flag, must give the same diagnoses (issue 50)."""

from __future__ import annotations

import pytest

from tests.integrations.conftest import (
    FAULT_STAGES, check_cut_quotes, check_fault, check_openinference, example, in_memory_provider, require,
    runner, write_span_files,
)

EXTRAS = "llamaindex"


@pytest.fixture(scope="module")
def li():
    require("llama_index.core", "llama_index.retrievers.bm25", extras=EXTRAS)
    return example("llamaindex_refund")


@pytest.fixture(scope="module")
def runs(li, tmp_path_factory):
    return runner(li, "llamaindex", tmp_path_factory)


@pytest.mark.parametrize("fault", list(FAULT_STAGES))
def test_each_fault_is_named_at_its_stage(runs, fault):
    check_fault(runs(None), runs(fault), fault)


def test_quotes_the_splitter_cut_are_parsing_losses_not_retrieval(li, runs):
    cut, plain = runs("chunking"), runs("chunking", chunks=False)
    nodes = li.nodes_of(li.index(li.refund_sources(cut["_out"] / "again"), "chunking"))
    check_cut_quotes(cut, plain, [(n.metadata["doc"], n.get_content()) for n in nodes], "SentenceSplitter", 6)


def test_a_run_without_faults_is_mostly_supported(runs):
    outcomes = [d["outcome"] for q, d in runs(None).items() if q != "_out"]
    assert outcomes.count("supported") >= 12 and outcomes.count("correct_abstention") == 2


def _openinference_run(li, out, fault):
    """The same engine run under OpenInference's LlamaIndex instrumentor, its spans written as the
    collector's OTLP/JSON and as Phoenix's span JSON, with the chunks for --chunks."""
    from openinference.instrumentation import using_metadata
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    from ragdx.integrations.llamaindex import write_chunks
    out.mkdir(parents=True, exist_ok=True)
    idx = li.index(li.refund_sources(out), fault)
    engine = li.build(idx, fault)
    provider, exporter = in_memory_provider()
    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        for query in li.queries():
            with using_metadata({"query_id": query["id"]}):
                li.ask(engine, query)
    finally:
        instrumentor.uninstrument()
    write_chunks(li.nodes_of(idx), out / "chunks.jsonl")
    return write_span_files(exporter.get_finished_spans(), out)


@pytest.mark.parametrize("fault", [None, "chunking", *FAULT_STAGES])
def test_openinference_spans_give_the_same_diagnoses_as_the_direct_capture(li, runs, tmp_path, fault):
    require("openinference.instrumentation.llama_index", "opentelemetry.sdk", extras=f"{EXTRAS},openinference")
    otlp, phoenix = _openinference_run(li, tmp_path / "oi", fault)
    check_openinference(runs(fault), otlp, phoenix, tmp_path, "llama_index", fault)
