"""onnxruntime sessions as ragdx's ONNX models run them (extra ``onnx``): CPU only, sequential
execution, a bounded number of intra-op threads that do not spin between runs, integer matmuls
computed exactly on every CPU (:func:`exact_integer`); and their inputs, token id rows padded to a
batch."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragdx.errors import ConfigError, MissingExtraError

__all__ = ["available_threads", "cache_dir", "exact_integer", "new_session", "pad"]


def available_threads() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


#: the integer matmuls whose weights :func:`exact_integer` moves to uint8: the input of the
#: weights and of their zero point
_INTEGER_MATMULS = {("", "MatMulInteger"): (1, 3), ("com.microsoft", "MatMulIntegerToFloat"): (1, 5)}


def exact_integer(data: bytes) -> bytes:
    """The model with the int8 weights of its integer matmuls stored as uint8 (each weight and its
    zero point plus 128): the same integers, so the same products, on every CPU.

    onnxruntime multiplies uint8 activations by int8 weights, on x86-64 CPUs with AVX2 but without
    VNNI, with ``vpmaddubsw``, which adds each pair of products in a saturating 16-bit integer
    (255 x 127 x 2 > 32,767): a quantised model's outputs then depend on the CPU (measured here:
    14% of a layer's largest output; a dev set's answers changed). Its uint8 x uint8 kernels widen to
    16 bits first and do not saturate (onnxruntime's quantization docs: on such CPUs, use U8U8 or
    reduce the weights' range). Models without int8 weights come back unchanged.
    """
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        return data  # (the extra brings onnx; without it the model runs as it is)
    try:
        model = onnx.load_from_string(data)
    except Exception:  # not a model: onnxruntime says so, naming the file
        return data
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    moved: dict[str, str] = {}

    def as_uint8(name: str) -> str:
        if name not in moved:
            value = numpy_helper.to_array(weights[name]).astype(np.int16) + 128
            new = f"{name}_u8"
            graph.initializer.append(numpy_helper.from_array(value.astype(np.uint8), new))
            moved[name] = new
        return moved[name]

    changed = False
    for node in graph.node:
        at = _INTEGER_MATMULS.get((node.domain, node.op_type))
        if at is None or len(node.input) <= at[0]:
            continue
        w, z = at
        b = weights.get(node.input[w])
        if b is None or b.data_type != onnx.TensorProto.INT8:
            continue
        zero = node.input[z] if len(node.input) > z and node.input[z] else ""
        if zero and (zero not in weights or weights[zero].data_type != onnx.TensorProto.INT8):
            continue  # a zero point computed at run time: left as it is
        if not zero:  # int8's default zero point 0 is uint8's 128
            zero = "ragdx_zero_int8"
            if zero not in weights:
                weights[zero] = numpy_helper.from_array(np.array(0, np.int8), zero)
                graph.initializer.append(weights[zero])
        inputs = list(node.input) + [""] * (z + 1 - len(node.input))
        inputs[w], inputs[z] = as_uint8(node.input[w]), as_uint8(zero)
        del node.input[:]
        node.input.extend(inputs)
        changed = True
    if not changed:
        return data
    used = {i for n in graph.node for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model.SerializeToString()


_REWRITE = b"ragdx exact_integer 1\n"  # a new rewrite gets a new number: the cached bytes are its output


def cache_dir() -> Path | None:
    """Where ragdx keeps what it derives from a model file, to derive it once per machine:
    ``$RAGDX_CACHE_DIR``, else ``$XDG_CACHE_HOME/ragdx``, else ``~/.cache/ragdx``; None when
    ``RAGDX_CACHE_DIR`` is set empty (no cache)."""
    given = os.environ.get("RAGDX_CACHE_DIR")
    if given is not None:
        return Path(given) if given else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ragdx"


def exact_integer_cached(data: bytes) -> bytes:
    """:func:`exact_integer`'s output, kept in :func:`cache_dir` under the SHA-256 of the model's
    bytes (an empty file: the model needs no rewrite): loading the model again reads it instead of
    importing onnx and rewriting (0.6 s of a question's 1.3 s, measured). A cache that cannot be
    read or written is passed by; a file is written whole or not at all (renamed into place)."""
    folder = cache_dir()
    if folder is None:
        return exact_integer(data)
    path = folder / "onnx" / f"{hashlib.sha256(_REWRITE + data).hexdigest()}.onnx"
    with contextlib.suppress(OSError):
        return path.read_bytes() or data
    out = exact_integer(data)
    if out is data and importlib.util.find_spec("onnx") is None:
        return out  # not rewritten for want of onnx: nothing to keep
    part = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".part") as fh:
            part = fh.name
            fh.write(b"" if out is data else out)
        os.replace(part, path)
    except OSError:  # a full or read-only disk: the model is used as rewritten, the half-written part removed
        if part is not None:
            with contextlib.suppress(OSError):
                os.unlink(part)
    return out


def new_session(data: bytes, threads: int, what: str, path: str | Path) -> Any:
    """An onnxruntime session of a model's bytes with ``threads`` intra-op threads, its integer
    matmuls made exact (:func:`exact_integer`, cached: :func:`exact_integer_cached`).

    Raises:
        MissingExtraError: onnxruntime is not installed.
        ConfigError: the bytes are not a model onnxruntime loads (``path`` names it).
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise MissingExtraError("onnx", what) from None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = threads
    # Threads that spin between runs burn a core the rest of an ingest (parsing, the store)
    # could use; measured here, spinning cost 15-20% more CPU per text for no consistent
    # wall-time gain.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(exact_integer_cached(data), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors for a bad file
        raise ConfigError(f"{what}: cannot load ONNX model {str(path)!r} ({exc})") from None


def pad(rows: Sequence[Sequence[int]], width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token id rows padded with 0 to the longest (or to ``width``), and their attention mask."""
    width = width or max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask
