"""A real Haystack 2 pipeline over the bundled refund example, traced for ragdx and diagnosed.

    pip install 'ragdx[haystack]'
    python examples/haystack_refund.py [OUT_FOLDER] [--fault NAME ...]

Indexing: the corpus (parsed by ragdx, as a converter would) is split by Haystack's
``DocumentSplitter`` and written to an ``InMemoryDocumentStore`` with hashing embeddings (a
deterministic embedder, no model). Querying: ``InMemoryBM25Retriever`` and
``InMemoryEmbeddingRetriever`` -> a reciprocal-rank ``DocumentJoiner`` -> a status and access
filter -> a context cut -> ``PromptBuilder`` -> a stand-in generator (examples/refund_standin.py).
:class:`ragdx.integrations.haystack.RagdxTracer` writes ``traces.jsonl``; ``ragdx diagnose``
reads it. ``--fault`` breaks one stage on purpose (see ``FAULTS``) to see ragdx name it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no telemetry calls from an example

from haystack import Document, Pipeline, component, tracing  # noqa: E402
from haystack.components.builders import PromptBuilder  # noqa: E402
from haystack.components.joiners import DocumentJoiner  # noqa: E402
from haystack.components.preprocessors import DocumentSplitter  # noqa: E402
from haystack.components.retrievers.in_memory import (  # noqa: E402
    InMemoryBM25Retriever, InMemoryEmbeddingRetriever,
)
from haystack.document_stores.in_memory import InMemoryDocumentStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refund_standin import example_main, queries, query_for, refund_sources, stand_in_answer  # noqa: E402

from ragdx.testing.encoders import HashingEncoder  # noqa: E402

# what each fault changes; the stage ragdx should name is the key's
FAULTS = {
    "retrieval": "both retrievers return 1 document",
    "fusion": "the joiner keeps 1 document",
    "chunking": "the splitter cuts 12-word chunks without overlap (quotes cut across chunks)",
    "context": "the context cut keeps 15 words",
    "stale": "the filter keeps superseded versions",
    "leak": "the filter ignores access groups",
    "invent": "the generator adds a clause no source states",
    "drop": "the generator states only the first group",
    "distract": "the generator answers from another document",
    "miscite": "the generator cites the wrong document",
}


@component
class HashingTextEmbedder:
    """A deterministic query embedder (ragdx's hashing encoder): no model to download."""

    def __init__(self, dim: int = 256) -> None:
        self.encoder = HashingEncoder(dim=dim)

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return {"embedding": self.encoder.encode([text], kind="query").vectors[0].tolist()}


def embed(documents: list[Document], dim: int = 256) -> list[Document]:
    encoder = HashingEncoder(dim=dim)
    vectors = encoder.encode([d.content or "" for d in documents]).vectors
    return [Document(id=d.id, content=d.content, meta=d.meta, embedding=v.tolist()) for d, v in zip(documents, vectors)]


@component
class StatusFilter:
    """Keeps the current versions the asker may read."""

    def __init__(self, keep_superseded: bool = False, check_access: bool = True) -> None:
        self.keep_superseded, self.check_access = keep_superseded, check_access

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document], groups: list[str]) -> dict[str, Any]:
        kept = [d for d in documents if (self.keep_superseded or d.meta.get("status", "current") == "current")
                and (not self.check_access or set(d.meta.get("acl", ["public"])) & set(groups))]
        return {"documents": kept}


@component
class ContextCut:
    """Keeps documents in rank order while they fit a word budget."""

    def __init__(self, max_words: int = 600) -> None:
        self.max_words = max_words

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        kept, used = [], 0
        for d in documents:
            words = len((d.content or "").split())
            if used + words > self.max_words:
                break
            kept.append(d)
            used += words
        return {"documents": kept}


@component
class StandInGenerator:
    """Answers from its documents like a careful LLM, without a model (refund_standin.py); its
    claims and their citations go in the reply's meta, where ragdx reads them."""

    def __init__(self, fault: str | None = None) -> None:
        self.fault = fault

    @component.output_types(replies=list[str], meta=list[dict])
    def run(self, prompt: str, documents: list[Document], question: str) -> dict[str, Any]:
        answer = stand_in_answer(query_for(question), [(d.id, d.content or "") for d in documents], self.fault)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(answer["text"].split())}
        return {"replies": [answer["text"]], "meta": [{"claims": answer["claims"], "usage": usage}]}


def index(sources, fault: str | None = None) -> InMemoryDocumentStore:
    """The document store: the corpus split by Haystack's DocumentSplitter, with embeddings."""
    chunking = fault == "chunking"
    splitter = DocumentSplitter(split_by="word", split_length=12 if chunking else 80,
                                split_overlap=0 if chunking else 20)
    chunks = splitter.run([Document(content=s.text, meta=s.meta) for s in sources])["documents"]
    store = InMemoryDocumentStore()
    store.write_documents(embed(chunks))
    return store


def build(store: InMemoryDocumentStore, fault: str | None = None) -> Pipeline:
    """The query pipeline, with one fault when asked."""
    top_k = 1 if fault == "retrieval" else 8
    pipe = Pipeline()
    pipe.add_component("bm25", InMemoryBM25Retriever(store, top_k=top_k))
    pipe.add_component("embedder", HashingTextEmbedder())
    pipe.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=top_k))
    pipe.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion",
                                                top_k=1 if fault == "fusion" else 10))
    pipe.add_component("status", StatusFilter(keep_superseded=fault == "stale", check_access=fault != "leak"))
    pipe.add_component("cut", ContextCut(max_words=15 if fault == "context" else 600))
    pipe.add_component("prompt", PromptBuilder("{% for d in documents %}{{ d.content }}\n{% endfor %}Q: {{ question }}",
                                               required_variables=["question", "documents"]))
    pipe.add_component("llm", StandInGenerator(fault if fault in ("invent", "drop", "distract", "miscite") else None))
    pipe.connect("embedder.embedding", "dense.query_embedding")
    pipe.connect("bm25.documents", "joiner.documents")
    pipe.connect("dense.documents", "joiner.documents")
    pipe.connect("joiner.documents", "status.documents")
    pipe.connect("status.documents", "cut.documents")
    pipe.connect("cut.documents", "prompt.documents")
    pipe.connect("prompt.prompt", "llm.prompt")
    pipe.connect("cut.documents", "llm.documents")
    return pipe


def ask(pipe: Pipeline, query: dict) -> dict[str, Any]:
    """Run one question of the query set through the pipeline."""
    q = query["question"]
    return pipe.run({"bm25": {"query": q}, "embedder": {"text": q}, "prompt": {"question": q},
                     "llm": {"question": q}, "status": {"groups": query["principal"]["groups"]}})


def run(out: Path, fault: str | None = None, *, chunks: bool = True) -> Path:
    """Index, run every question with the ragdx tracer on, and return the traces file."""
    from ragdx.integrations.haystack import RagdxTracer
    out.mkdir(parents=True, exist_ok=True)
    store = index(refund_sources(out), fault)
    pipe = build(store, fault)
    traces = out / "traces.jsonl"
    traces.unlink(missing_ok=True)
    tracer = RagdxTracer(traces, pipeline=pipe, chunks=store.filter_documents if chunks else None)
    tracing.enable_tracing(tracer)
    try:
        for query in queries():
            with tracer.query(query["id"], query["question"]):
                ask(pipe, query)
    finally:
        tracing.disable_tracing()
    return traces


if __name__ == "__main__":
    sys.exit(example_main(sys.argv[1:], FAULTS, run, "haystack"))
