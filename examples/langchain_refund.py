"""A real LangChain pipeline over the bundled refund example, traced for ragdx and diagnosed.

    pip install 'ragdx[langchain]'
    python examples/langchain_refund.py [OUT_FOLDER] [--fault NAME ...]

Indexing: the corpus (parsed by ragdx, as a document loader would) is split by LangChain's
``RecursiveCharacterTextSplitter`` into an ``InMemoryVectorStore`` with hashing embeddings (a
deterministic ``Embeddings``, no model) and a BM25 keyword retriever. Querying: both retrievers
fused by ``EnsembleRetriever`` (weighted reciprocal rank) -> a top-k cut -> a status and access
filter -> a context cut -> a chat prompt -> a stand-in chat model that reads its prompt
(examples/refund_standin.py). :class:`ragdx.integrations.langchain.RagdxCallbackHandler`
writes ``traces.jsonl``; ``ragdx diagnose`` reads it. ``--fault`` breaks one stage on purpose.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from langchain_classic.retrievers import EnsembleRetriever
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refund_standin import example_main, queries, query_for, refund_sources, stand_in_answer  # noqa: E402

from ragdx.testing.encoders import HashingEncoder  # noqa: E402

FAULTS = {
    "retrieval": "both retrievers return 1 document",
    "fusion": "the fused list is cut to 1 document",
    "chunking": "the splitter cuts 60-character chunks without overlap (quotes cut across chunks)",
    "context": "the context cut keeps 15 words",
    "stale": "the filter keeps superseded versions",
    "leak": "the filter ignores access groups",
    "invent": "the model adds a clause no source states",
    "drop": "the model states only the first group",
    "distract": "the model answers from another document",
    "miscite": "the model cites the wrong document",
}
_WORD = re.compile(r"\w+")


class HashingEmbeddings(Embeddings):
    """Deterministic embeddings (ragdx's hashing encoder): no model to download."""

    def __init__(self, dim: int = 256) -> None:
        self.encoder = HashingEncoder(dim=dim)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encoder.encode(texts).vectors.tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encoder.encode([text], kind="query").vectors[0].tolist()


class KeywordRetriever(BaseRetriever):
    """Okapi BM25 (k1 1.2, b 0.75) over the chunks: Robertson and Zaragoza, "The Probabilistic
    Relevance Framework: BM25 and Beyond" (2009)."""

    documents: list[Document]
    k: int = 8

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        docs = [Counter(w.lower() for w in _WORD.findall(d.page_content)) for d in self.documents]
        avg = sum(sum(c.values()) for c in docs) / max(1, len(docs))
        terms = {w.lower() for w in _WORD.findall(query)}
        df = {t: sum(1 for c in docs if t in c) for t in terms}
        scores = []
        for n, c in enumerate(docs):
            size = sum(c.values())
            score = sum(math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5)) * c[t] * 2.2
                        / (c[t] + 1.2 * (0.25 + 0.75 * size / avg)) for t in terms if c[t])
            if score > 0:
                scores.append((score, n))
        return [self.documents[n] for _, n in sorted(scores, key=lambda s: (-s[0], s[1]))[:self.k]]


KeywordRetriever.model_rebuild()  # resolve its annotations here, however the module was loaded


class StandInChatModel(BaseChatModel):
    """A chat model without a model: it reads the sources and the question from its prompt and
    answers like refund_standin.py's generator, putting its claims in the response metadata."""

    fault: str | None = None

    @property
    def _llm_type(self) -> str:
        return "stand-in"

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        prompt = "\n".join(str(m.content) for m in messages)
        question = str(messages[-1].content).removeprefix("Question: ").strip()
        sources = re.findall(r"<source id=\"([^\"]+)\">\n(.*?)\n</source>", prompt, flags=re.S)
        answer = stand_in_answer(query_for(question), sources, self.fault)
        usage = {"input_tokens": len(prompt.split()), "output_tokens": len(answer["text"].split()),
                 "total_tokens": len(prompt.split()) + len(answer["text"].split())}
        message = AIMessage(answer["text"], response_metadata={"claims": answer["claims"]}, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


def split(sources, fault: str | None = None) -> list[Document]:
    """The corpus split by LangChain's RecursiveCharacterTextSplitter, each chunk with an id."""
    chunking = fault == "chunking"
    splitter = RecursiveCharacterTextSplitter(chunk_size=60 if chunking else 500,
                                              chunk_overlap=0 if chunking else 100, add_start_index=True)
    chunks = splitter.split_documents([Document(page_content=s.text, metadata=dict(s.meta)) for s in sources])
    for n, chunk in enumerate(chunks):
        chunk.metadata["chunk_id"] = f"{chunk.metadata['doc']}@{chunk.metadata['version']}#{n}"
    return chunks


def build(chunks: list[Document], fault: str | None = None):
    """The chain, with one fault when asked: ``invoke({"question", "groups"})`` -> the answer."""
    k = 1 if fault == "retrieval" else 8
    dense = InMemoryVectorStore(HashingEmbeddings())
    dense.add_documents(chunks, ids=[c.metadata["chunk_id"] for c in chunks])
    ensemble = EnsembleRetriever(retrievers=[KeywordRetriever(documents=chunks, k=k),
                                             dense.as_retriever(search_kwargs={"k": k})],
                                 weights=[0.5, 0.5], id_key="chunk_id")
    keep = 1 if fault == "fusion" else 10
    budget = 15 if fault == "context" else 600

    def retrieve(state: dict) -> dict:
        return {**state, "documents": ensemble.invoke(state["question"])}

    def fusion_cut(state: dict) -> dict:
        return {**state, "documents": state["documents"][:keep]}

    def status_filter(state: dict) -> dict:
        return {**state, "documents": [
            d for d in state["documents"]
            if (fault == "stale" or d.metadata.get("status", "current") == "current")
            and (fault == "leak" or set(d.metadata.get("acl", ["public"])) & set(state["groups"]))]}

    def context_cut(state: dict) -> dict:
        kept, used = [], 0
        for d in state["documents"]:
            words = len(d.page_content.split())
            if used + words > budget:
                break
            kept.append(d)
            used += words
        return {**state, "documents": kept}

    def sources(state: dict) -> dict:
        return {"sources": "\n".join(f"<source id=\"{d.metadata['chunk_id']}\">\n{d.page_content}\n</source>"
                                     for d in state["documents"]), "question": state["question"]}

    prompt = ChatPromptTemplate.from_messages([("system", "Answer from the sources only.\n{sources}"),
                                               ("human", "Question: {question}")])
    model = StandInChatModel(fault=fault if fault in ("invent", "drop", "distract", "miscite") else None)
    return (RunnableLambda(retrieve).with_config(run_name="retrieve")
            | RunnableLambda(fusion_cut).with_config(run_name="fusion_cut")
            | RunnableLambda(status_filter).with_config(run_name="status_filter")
            | RunnableLambda(context_cut).with_config(run_name="context_cut")
            | RunnableLambda(sources).with_config(run_name="sources") | prompt | model)


def run(out: Path, fault: str | None = None, *, chunks: bool = True) -> Path:
    """Split, run every question with the ragdx callback handler, and return the traces file."""
    from ragdx.integrations.langchain import RagdxCallbackHandler
    out.mkdir(parents=True, exist_ok=True)
    pieces = split(refund_sources(out), fault)
    chain = build(pieces, fault)
    traces = out / "traces.jsonl"
    traces.unlink(missing_ok=True)
    handler = RagdxCallbackHandler(traces, chunks=pieces if chunks else None)
    for query in queries():
        ask(chain, query, {"callbacks": [handler]})
    return traces


def ask(chain, query: dict, config: dict | None = None) -> Any:
    """Run one question of the query set through the chain, its id in the run's metadata."""
    config = dict(config or {}, metadata={"query_id": query["id"]})
    return chain.invoke({"question": query["question"], "groups": query["principal"]["groups"]}, config=config)


if __name__ == "__main__":
    sys.exit(example_main(sys.argv[1:], FAULTS, run, "langchain"))
