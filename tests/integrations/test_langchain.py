"""A real LangChain pipeline (examples/langchain_refund.py: a BM25 retriever and an in-memory vector
store fused by EnsembleRetriever, a top-k cut, a status filter, a context cut, a chat prompt and a
stand-in chat model) over the bundled example, traced by ragdx's callback handler and by
OpenInference's instrumentation, with a fault injected at each stage: ragdx must name the stage
of each fault, and both traces must give the same diagnoses."""

from __future__ import annotations

import pytest

from tests.integrations.conftest import (
    FAULT_STAGES, check_cut_quotes, check_fault, check_openinference, example, in_memory_provider, require,
    runner, write_span_files,
)


@pytest.fixture(scope="module")
def lc():
    require("langchain_core", "langchain_classic", "langchain_text_splitters")
    return example("langchain_refund")


@pytest.fixture(scope="module")
def runs(lc, tmp_path_factory):
    return runner(lc, "langchain", tmp_path_factory)


@pytest.mark.parametrize("fault", list(FAULT_STAGES))
def test_each_fault_is_named_at_its_stage(runs, fault):
    check_fault(runs(None), runs(fault), fault)


def test_quotes_the_splitter_cut_are_parsing_losses_not_retrieval(lc, runs):
    cut, plain = runs("chunking"), runs("chunking", chunks=False)
    chunks = lc.split(lc.refund_sources(cut["_out"] / "again"), "chunking")
    check_cut_quotes(cut, plain, [(c.metadata["doc"], c.page_content) for c in chunks], "TextSplitter", 6)


def test_a_run_without_faults_is_mostly_supported(runs):
    outcomes = [d["outcome"] for q, d in runs(None).items() if q != "_out"]
    assert outcomes.count("supported") >= 12 and outcomes.count("correct_abstention") == 2


@pytest.mark.parametrize("fault", [None, "chunking", *FAULT_STAGES])
def test_openinference_spans_give_the_same_diagnoses_as_the_handler(lc, runs, tmp_path, fault):
    require("openinference.instrumentation.langchain", "opentelemetry.sdk")
    from openinference.instrumentation.langchain import LangChainInstrumentor

    from ragdx.integrations.langchain import write_chunks
    out = tmp_path / "oi"
    out.mkdir()
    chunks = lc.split(lc.refund_sources(out), fault)
    chain = lc.build(chunks, fault)
    provider, exporter = in_memory_provider()
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        for query in lc.queries():
            lc.ask(chain, query)
    finally:
        instrumentor.uninstrument()
    write_chunks(chunks, out / "chunks.jsonl")
    otlp, phoenix = write_span_files(exporter.get_finished_spans(), out)
    check_openinference(runs(fault), otlp, phoenix, tmp_path, "langchain", fault)
