"""A real LlamaIndex query engine over the bundled refund example, recorded for ragdx and diagnosed.

    pip install 'ragdx[llamaindex]'
    python examples/llamaindex_refund.py [OUT_FOLDER] [--fault NAME ...]

Indexing: the corpus (parsed by ragdx, as a reader would) is split by LlamaIndex's
``SentenceSplitter`` into ``TextNode``s of a ``VectorStoreIndex`` with hashing embeddings (a
deterministic ``BaseEmbedding``, no model). Querying: a ``RetrieverQueryEngine`` whose retriever is
a ``QueryFusionRetriever`` (reciprocal rank) over ``BM25Retriever`` and the index's vector
retriever, whose node postprocessors are a status filter, an access filter and a context cut, and
whose compact response synthesizer asks a stand-in LLM that reads its prompt
(examples/refund_standin.py). ragdx's span handler (:mod:`ragdx.integrations.llamaindex`) on
LlamaIndex's instrumentation records what each of them returned as ``traces.jsonl``; ``ragdx
diagnose`` reads it. ``--fault`` breaks one stage.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core import Document, PromptTemplate, Settings, VectorStoreIndex, get_response_synthesizer
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.retrievers.bm25 import BM25Retriever

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refund_standin import ABSTAIN, example_main, queries, query_for, refund_sources, stand_in_answer  # noqa: E402

from ragdx.integrations.llamaindex import RagdxSpanHandler, write_chunks  # noqa: E402
from ragdx.testing.encoders import HashingEncoder  # noqa: E402

FAULTS = {
    "retrieval": "both retrievers return 1 node",
    "fusion": "the fusion retriever keeps 1 node",
    "chunking": "the splitter cuts 12-word chunks without overlap (quotes cut across chunks)",
    "context": "the context cut keeps 15 words",
    "stale": "the status filter keeps superseded versions",
    "leak": "the access filter ignores access groups",
    "invent": "the LLM adds a clause no source states",
    "drop": "the LLM states only the first group",
    "distract": "the LLM answers from another document",
    "miscite": "the LLM cites the wrong document",
}
PROMPT = PromptTemplate("Answer from the sources only.\n{context_str}\nQuestion: {query_str}\n")
_SOURCE = re.compile(r"<source id=\"([^\"]+)\">\n(.*?)\n</source>", re.S)


class HashingEmbedding(BaseEmbedding):
    """Deterministic embeddings (ragdx's hashing encoder): no model to download."""

    dim: int = 256

    def _vectors(self, texts: list[str], kind: str = "passage") -> list[list[float]]:
        return HashingEncoder(dim=self.dim).encode(texts, kind=kind).vectors.tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vectors([query], "query")[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vectors([text])[0]


class StandInLLM(CustomLLM):
    """An LLM without a model: it reads the sources and the question from its prompt and answers
    like refund_standin.py's generator, citing each statement's sources by id in its text (and its
    claims in ``additional_kwargs``, which the directly captured trace reads)."""

    fault: str | None = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=100_000, num_output=512, model_name="stand-in")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        question = prompt.rsplit("Question: ", 1)[-1].strip()
        answer = stand_in_answer(query_for(question), _SOURCE.findall(prompt), self.fault)
        # it cites as LLMs asked to cite do: each statement ends with the ids of its sources
        text = " ".join(f"{c['text'].rstrip('.')} [{', '.join(c['citations'])}]." for c in answer["claims"]) \
            or answer["text"]
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        return CompletionResponse(text=text, additional_kwargs={"claims": answer["claims"], **usage})

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        yield self.complete(prompt, formatted=formatted, **kwargs)


# words as tokens: LlamaIndex's default tokenizer (tiktoken) would download its encoding
Settings.tokenizer, Settings.llm, Settings.embed_model = str.split, StandInLLM(), HashingEmbedding()


@dataclass
class AskerQuery(QueryBundle):
    """A question with its asker's access groups, which the access filter reads."""

    groups: list[str] = field(default_factory=list)


class StatusFilter(BaseNodePostprocessor):
    """Keeps the current versions."""

    keep_superseded: bool = False

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None):
        return [n for n in nodes if self.keep_superseded or n.node.metadata.get("status", "current") == "current"]


class AccessFilter(BaseNodePostprocessor):
    """Keeps the nodes the asker may read."""

    check_access: bool = True

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None):
        groups = set(getattr(query_bundle, "groups", None) or [])
        return [n for n in nodes if not self.check_access or set(n.node.metadata.get("acl", ["public"])) & groups]


class ContextCut(BaseNodePostprocessor):
    """Keeps nodes in rank order while they fit a word budget."""

    max_words: int = 600

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None):
        used = itertools.accumulate(len(n.node.get_content().split()) for n in nodes)  # words up to each node
        return [n for n, words in zip(nodes, used) if words <= self.max_words]


def index(sources, fault: str | None = None) -> VectorStoreIndex:
    """The vector index: the corpus split by LlamaIndex's SentenceSplitter, with embeddings. Each
    node's metadata carries doc, version, status, acl, its start in the document and its id; the
    LLM sees only the id, around the text (``<source id="...">``), the embedder only the text."""
    chunking = fault == "chunking"
    splitter = SentenceSplitter(chunk_size=12 if chunking else 80, chunk_overlap=0 if chunking else 20,
                                id_func=lambda n, doc: f"{doc.doc_id}#{n}")
    documents = [Document(text=s.text, metadata=dict(s.meta), id_=f"{s.meta['doc']}@{s.meta['version']}",
                          excluded_embed_metadata_keys=list(s.meta), excluded_llm_metadata_keys=list(s.meta))
                 for s in sources]
    with contextlib.redirect_stdout(io.StringIO()):  # it prints a warning per document for chunks under 50 words
        nodes = splitter.get_nodes_from_documents(documents)
    for node in nodes:
        node.metadata |= {"start": node.start_char_idx, "chunk_id": node.node_id}
        node.excluded_embed_metadata_keys = list(node.metadata)
        node.excluded_llm_metadata_keys = [k for k in node.metadata if k != "chunk_id"]
        node.metadata_template, node.text_template = "{value}", "<source id=\"{metadata_str}\">\n{content}\n</source>"
    return VectorStoreIndex(nodes, embed_model=Settings.embed_model)


def nodes_of(index: VectorStoreIndex) -> list[TextNode]:
    """The index's nodes (the splitter's chunks), in document order."""
    return sorted(index.docstore.docs.values(), key=lambda n: (n.ref_doc_id, n.start_char_idx or 0))


def build(index: VectorStoreIndex, fault: str | None = None) -> RetrieverQueryEngine:
    """The query engine, with one fault when asked."""
    top_k = 1 if fault == "retrieval" else 8
    fusion = QueryFusionRetriever([BM25Retriever.from_defaults(nodes=nodes_of(index), similarity_top_k=top_k),
                                   index.as_retriever(similarity_top_k=top_k)],
                                  mode="reciprocal_rerank", num_queries=1, use_async=False,
                                  similarity_top_k=1 if fault == "fusion" else 10)
    llm = StandInLLM(fault=fault if fault in ("invent", "drop", "distract", "miscite") else None)
    synthesizer = get_response_synthesizer(llm=llm, response_mode="compact", text_qa_template=PROMPT)
    synthesizer._empty_response = ABSTAIN  # no node left: LlamaIndex answers without the LLM; say what it would
    return RetrieverQueryEngine(retriever=fusion, response_synthesizer=synthesizer, node_postprocessors=[
        StatusFilter(keep_superseded=fault == "stale"), AccessFilter(check_access=fault != "leak"),
        ContextCut(max_words=15 if fault == "context" else 600)])


def ask(engine: RetrieverQueryEngine, query: dict) -> Any:
    """Run one question of the query set through the engine, with its asker's groups."""
    return engine.query(AskerQuery(query["question"], groups=query["principal"]["groups"]))


def run(out: Path, fault: str | None = None, *, chunks: bool = True) -> Path:
    """Index, run every question with the stage recorder on, and return the traces file."""
    out.mkdir(parents=True, exist_ok=True)
    idx = index(refund_sources(out), fault)
    engine = build(idx, fault)
    traces = out / "traces.jsonl"
    traces.unlink(missing_ok=True)
    if chunks:
        write_chunks(nodes_of(idx), out / "chunks.jsonl")
    handler = RagdxSpanHandler(traces, chunks=nodes_of(idx) if chunks else None)
    dispatcher = get_dispatcher()  # the root dispatcher: every LlamaIndex module's spans reach it
    dispatcher.add_span_handler(handler)
    try:
        for query in queries():
            with handler.query(query["id"], query["question"]):
                ask(engine, query)
    finally:
        dispatcher.span_handlers.remove(handler)
    return traces


if __name__ == "__main__":
    sys.exit(example_main(sys.argv[1:], FAULTS, run, "llamaindex"))
