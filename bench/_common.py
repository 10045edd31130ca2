"""What the benchmark scripts share: the Python docs corpus, the machine and code being
measured, timing, and writing results. Not a benchmark itself (run_all.py runs the area folders).

A script puts bench/ first on ``sys.path`` to import this module; another benchmark it imports by
its area, as a namespace package (``from retrieval.bm25_vs_bm25s import Rows``)."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import ragdx

REPO = Path(__file__).resolve().parent.parent
#: the dev set built by bench/quality/quality.py, and the int8 encoder its store was embedded with
DEVSET = REPO / "bench" / ".cache" / "devset"
INT8 = REPO / "bench" / ".cache" / "int8" / "all-MiniLM-L6-v2-int8.onnx"
DEFAULT_HTML = Path("/usr/share/doc/python3-doc/html")
MB = 1_000_000  # decimal megabytes, as throughput is usually quoted


def html_pages(html_dir: Path) -> list[Path]:
    """The HTML pages below ``html_dir``, skipping Sphinx's ``_sources``/``_static`` folders."""
    return sorted(p for p in html_dir.rglob("*.html")
                  if p.is_file() and not any(part.startswith(("_", "."))
                                             for part in p.relative_to(html_dir).parts[:-1]))


def chunk_pages(html_dir: Path, pages: list[Path], window_words: int = 0) -> tuple[list, list[str]]:
    """Each page parsed once, as the Ingestor does by default: every chunk, and (with
    ``window_words``) every window of that many consecutive words of the parsed text."""
    import hashlib

    from ragdx.ingest.chunk import StructureChunker
    from ragdx.ingest.parsers import parse
    from ragdx.types import Document
    chunker = StructureChunker()
    chunks: list = []
    windows: list[str] = []
    for page in pages:
        data = page.read_bytes()
        _, parsed = parse(data, "html", str(page))
        digest = hashlib.sha256(data).hexdigest()
        doc = Document(doc_id=page.relative_to(html_dir).as_posix(), version=digest[:12], content_hash=digest,
                       path=str(page), title=parsed.title, format="html")
        chunks += chunker.run(doc, parsed).chunks
        if window_words:
            tokens = parsed.text.split()
            windows += [" ".join(tokens[i:i + window_words])
                        for i in range(0, len(tokens) - window_words + 1, window_words)]
    return chunks, windows


def write_manifest(pages: list[Path], html_dir: Path, path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for page in pages:
            f.write(json.dumps({"doc_id": page.relative_to(html_dir).as_posix(),
                                "path": str(page)}) + "\n")


def peak_rss_mb() -> float:
    # ru_maxrss counts bytes on macOS, KiB on Linux
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024) / MB


def machine() -> dict[str, object]:
    fallback = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), fallback)
    return {"nproc": os.cpu_count(), "cpu_model": cpu, "platform": platform.platform(),
            "python": platform.python_version()}


def code_version() -> dict[str, object]:
    """The git commit of the ragdx being measured, and its uncommitted changes under src/."""
    where = Path(ragdx.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        changes = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--", "."],
                                 check=True, capture_output=True, text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {"git_commit": None, "uncommitted_src_changes": None}
    return {"git_commit": commit, "uncommitted_src_changes": [c.strip() for c in changes]}


def store_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


class Stopwatch:
    """Wall-clock and CPU seconds of a block. The ingest is single-threaded and CPU-bound, so its
    CPU time is its cost even when other processes compete for the cores (wall time is not)."""

    def __enter__(self) -> "Stopwatch":
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu

    def times(self) -> dict[str, float]:
        return {"wall": self.wall, "cpu": self.cpu}


def missing_modules(*names: str) -> str | None:
    """Which of these modules cannot be imported, said as the fix, or None."""
    import importlib.util
    absent = [n for n in names if importlib.util.find_spec(n) is None]
    if absent:
        return f"error: {', '.join(absent)} missing: make the full venv (make .venv/.installed)"
    return None


def missing_pages(html_dir: Path) -> str | None:
    """Why the corpus cannot be used, or None."""
    if not html_dir.is_dir() or not html_pages(html_dir):
        return (f"error: no HTML pages under {html_dir}; apt-get install python3-doc "
                "(or pass --html-dir)")
    return None


def label_table(rows: list[tuple[str, str]]) -> str:
    """Labels in an aligned column, each followed by its value."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}".rstrip() for k, v in rows)


def write_result(out: Path, result: dict, table: str) -> None:
    """Write the JSON result, print the table to stdout and where it went to stderr."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table)
    print(f"wrote {out}", file=sys.stderr)


def module_at(rev: str, path: str):
    """A module of ragdx (``path`` in the repository) as it was at a git revision, imported
    under another name: a benchmark's "before"."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"],
                            check=True, capture_output=True, text=True).stdout
    name = f"{Path(path).stem}_before"
    copy = REPO / "bench" / "results" / f".{name}_{rev.replace('~', '_').replace('/', '_')}.py"
    copy.write_text(source)
    spec = importlib.util.spec_from_file_location(name, copy)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    copy.unlink()
    return module


def st_embedding(folder: str, batch: int):
    """A LlamaIndex ``BaseEmbedding`` calling sentence-transformers on a local folder, as
    ``HuggingFaceEmbedding`` does (for a venv without llama-index-embeddings-huggingface);
    ``batch`` texts a call. llama-index-core is imported here, not at this module's import."""
    from typing import Any

    from llama_index.core.embeddings import BaseEmbedding
    from pydantic import PrivateAttr

    class STEmbedding(BaseEmbedding):
        _model: Any = PrivateAttr()

        def __init__(self, path: str, **kwargs: Any) -> None:
            super().__init__(model_name=path, **kwargs)
            from sentence_transformers import SentenceTransformer
            self._model = SentenceTransformer(path, device="cpu")

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return self._model.encode(texts, batch_size=self.embed_batch_size, normalize_embeddings=True).tolist()

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._get_text_embeddings([text])[0]

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        async def _aget_text_embedding(self, text: str) -> list[float]:
            return self._get_text_embedding(text)
    return STEmbedding(folder, embed_batch_size=batch)
