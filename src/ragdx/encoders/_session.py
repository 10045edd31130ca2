"""onnxruntime sessions as ragdx's ONNX models run them (extra ``onnx``): CPU only, sequential
execution, a bounded number of intra-op threads that do not spin between runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ragdx.errors import ConfigError, MissingExtraError

__all__ = ["available_threads", "new_session"]


def available_threads() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def new_session(data: bytes, threads: int, what: str, path: str | Path) -> Any:
    """An onnxruntime session of a model's bytes with ``threads`` intra-op threads.

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
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors for a bad file
        raise ConfigError(f"{what}: cannot load ONNX model {str(path)!r} ({exc})") from None
