"""A cross-encoder fine-tuned on a corpus's own pairs, on CPU, and written as an int8 ONNX folder
that :class:`ragdx.encoders.cross.CrossEncoder` loads (extras ``dense``, ``onnx``, ``quantize``).

Two starting points, both offline:

- :func:`dequantise`: an int8 ONNX BERT sequence classifier (the packaged
  ms-marco-MiniLM-L-12-v2, exported by ``torch.onnx`` and quantised by onnxruntime's
  ``quantize_dynamic``) read back into a ``transformers`` ``BertForSequenceClassification``:
  each quantised initialiser is ``(q - zero_point) * scale``, each ``MatMulInteger``'s weight is
  the transpose of its ``Linear``'s, found by the node's name (``/bert/encoder/layer.N/...``);
- :func:`from_encoder`: a sentence-transformers BERT (all-MiniLM-L6-v2) with a new one-logit head.

:func:`fine_tune` trains with a listwise loss: each group's positive against its negatives,
softmax cross-entropy over the group's logits (the "localised contrastive estimation" of Gao et
al., "Rethink Training of BERT Rerankers in Multi-Stage Retrieval Pipeline", ECIR 2021), or a
pointwise one (binary cross-entropy of each text against its label: a classifier whose logit has
one scale across groups, as a support judgement needs), each pair tokenised by the model's own ``tokenizer.json`` exactly as the reader will read it.
:func:`export` writes ``model.onnx`` (opset 17, dynamic batch and sequence axes, output
``logits``) quantised by ``onnxruntime.quantization.quantize_dynamic`` (int8 weights), with the
``tokenizer.json`` beside it.
"""

from __future__ import annotations

import json
import math
import random
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ragdx.errors import ConfigError, MissingExtraError

__all__ = ["TrainResult", "dequantise", "export", "fine_tune", "from_encoder", "frozen_outputs", "score_pairs",
           "tokenizer_for"]

_WHAT = "training the cross-encoder"
_NODE = re.compile(r"^/((?:bert/|classifier).*?)/(?:Gemm_)?(?:MatMul|Gemm|Add|LayerNormalization|Gather)(?:_quant)?$")


def _imports() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingExtraError("dense", _WHAT) from None
    return torch, transformers


def _onnx() -> Any:
    try:
        import onnx
        import onnx.numpy_helper
    except ImportError:
        raise MissingExtraError("quantize", _WHAT) from None
    return onnx


def _dequantised(name: str, inits: dict[str, Any], onnx: Any) -> np.ndarray | None:
    """An initialiser's float value; a quantised one (``NAME_quantized`` with ``NAME_scale`` and
    ``NAME_zero_point``) as ``(q - zero_point) * scale``."""
    base = name[:-len("_quantized")] if name.endswith("_quantized") else name
    if base + "_quantized" not in inits:
        return onnx.numpy_helper.to_array(inits[name]).astype(np.float32) if name in inits else None
    q = onnx.numpy_helper.to_array(inits[base + "_quantized"]).astype(np.float32)
    scale = onnx.numpy_helper.to_array(inits[base + "_scale"]).astype(np.float32)
    zero = onnx.numpy_helper.to_array(inits[base + "_zero_point"]).astype(np.float32)
    if scale.ndim == 1 and q.ndim == 2 and scale.shape[0] == q.shape[1]:  # per output column
        return (q - zero[None, :]) * scale[None, :]
    return (q - zero) * scale


def dequantise(onnx_path: str | Path, *, num_heads: int = 12) -> Any:
    """The ``BertForSequenceClassification`` an int8 ONNX cross-encoder was quantised from, with
    its weights dequantised (see the module docstring).

    Args:
        onnx_path: the ONNX file (a BERT sequence classifier with one logit, exported by
            ``torch.onnx`` with its parameters' names).
        num_heads: attention heads (the file does not say; 12 for MiniLM-L12-H384 and BERT-base).

    Raises:
        ConfigError: a file that is not such a model, or a parameter the file does not hold.
    """
    torch, transformers = _imports()
    onnx = _onnx()
    path = Path(onnx_path)
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and others for a bad file
        raise ConfigError(f"{_WHAT}: cannot read {str(path)!r} ({exc})") from None
    inits = {i.name: i for i in model.graph.initializer}
    state: dict[str, np.ndarray] = {}
    # 1. initialisers named as the parameters they hold (a quantised one with its suffixes)
    for name in inits:
        key = re.sub(r"_(quantized|scale|zero_point)$", "", name)
        if key.startswith(("bert.", "classifier.")) and key not in state:
            value = _dequantised(key + "_quantized" if key + "_quantized" in inits else key, inits, onnx)
            if value is not None:
                state[key] = value
    # 2. the nodes that read them, by their names (/bert/encoder/layer.0/attention/self/query/MatMul):
    # a MatMul's weight is [in, out], a parameter's [out, in] (and quantize_dynamic keeps the name of
    # a Gemm's weight it transposed), so the node decides; an exporter that shares equal tensors
    # between parameters (zero biases, unit norms) leaves names only on the nodes
    def take(key: str, value: np.ndarray | None, override: bool = False) -> None:
        if value is not None and (override or key not in state):
            state[key] = value

    # the exporter shares equal initialisers through Identity nodes
    alias = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Identity" and n.input[0] in inits}
    for node in model.graph.node:
        found = _NODE.match(node.name)
        if found is None:
            continue
        prefix, op = found.group(1).replace("/", "."), node.op_type
        values = [_dequantised(alias.get(i, i), inits, onnx) if alias.get(i, i) in inits else None
                  for i in node.input]
        if op in ("MatMul", "MatMulInteger") and len(values) > 1 and values[1] is not None:
            take(f"{prefix}.weight", values[1].T, override=True)
        elif op == "Gemm" and values[1] is not None:
            trans_b = any(a.name == "transB" and a.i == 1 for a in node.attribute)
            take(f"{prefix}.weight", values[1] if trans_b else values[1].T, override=True)
            take(f"{prefix}.bias", values[2] if len(values) > 2 else None)
        elif op == "Add":
            take(f"{prefix}.bias", next((v for v in values if v is not None and v.ndim == 1), None))
        elif op == "LayerNormalization":
            take(f"{prefix}.weight", values[1])
            take(f"{prefix}.bias", values[2] if len(values) > 2 else None)
        elif op == "Gather" and values[0] is not None:
            take(f"{prefix}.weight", values[0])
    words = state.get("bert.embeddings.word_embeddings.weight")
    if words is None or "classifier.weight" not in state:
        raise ConfigError(f"{_WHAT}: {str(path)!r} is not a BERT sequence classifier exported with its "
                          "parameters' names (no bert.embeddings.word_embeddings or classifier weights)")
    hidden = words.shape[1]
    layers = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"bert\.encoder\.layer\.(\d+)\.", k)))
    config = transformers.BertConfig(
        vocab_size=words.shape[0], hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=num_heads,
        intermediate_size=state["bert.encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_position_embeddings=state["bert.embeddings.position_embeddings.weight"].shape[0],
        type_vocab_size=state["bert.embeddings.token_type_embeddings.weight"].shape[0],
        num_labels=state["classifier.weight"].shape[0], attn_implementation="eager")
    bert = transformers.BertForSequenceClassification(config)
    expected = {k for k in bert.state_dict() if not k.endswith("position_ids")}
    missing = sorted(expected - set(state))
    if missing:
        raise ConfigError(f"{_WHAT}: {str(path)!r} holds no value for {', '.join(missing[:4])}"
                          f"{' ...' if len(missing) > 4 else ''}")
    try:
        bert.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(state[k])) for k in expected}, strict=False)
    except RuntimeError as exc:  # a shape that does not fit
        raise ConfigError(f"{_WHAT}: {str(path)!r} does not fit a BERT of its own sizes ({exc})") from None
    return bert.eval()


def from_encoder(folder: str | Path) -> Any:
    """A sentence-transformers BERT (its transformer folder) with a new one-logit head."""
    _, transformers = _imports()
    from ragdx.encoders.int8 import _transformer_folder
    return transformers.BertForSequenceClassification.from_pretrained(
        str(_transformer_folder(Path(folder))), num_labels=1, attn_implementation="eager")


def tokenizer_for(path: str | Path, max_tokens: int) -> Any:
    """A ``tokenizer.json`` set as the reader sets it (:func:`ragdx.encoders.cross.load_tokenizer`)."""
    from ragdx.encoders.cross import load_tokenizer
    from ragdx.encoders.packaged import ModelFiles
    return load_tokenizer(ModelFiles(str(path), Path(path), Path(path), "folder"), max_tokens, _WHAT)


def _batch(tokenizer: Any, pairs: Sequence[tuple[str, str]], torch: Any) -> dict[str, Any]:
    found = tokenizer.encode_batch(list(pairs))
    width = max(len(f.ids) for f in found)
    ids = torch.zeros((len(found), width), dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, f in enumerate(found):
        ids[i, :len(f.ids)] = torch.tensor(f.ids)
        types[i, :len(f.ids)] = torch.tensor(f.type_ids)
        mask[i, :len(f.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def score_pairs(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], batch_size: int = 16) -> np.ndarray:
    """The model's logit for each (query, text) pair, in order."""
    torch, _ = _imports()
    out = []
    model.eval()
    with torch.no_grad():
        for at in range(0, len(pairs), batch_size):
            out.append(model(**_batch(tokenizer, pairs[at:at + batch_size], torch)).logits[:, 0].numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def _run_layers(layers: Sequence[Any], hidden: Any, mask: Any, torch: Any) -> Any:
    """``hidden`` through ``layers`` with padding ``mask`` (1 = a token), as the eager attention
    reads a mask: added to the scores, 0 for a token and the float minimum for padding."""
    additive = (1.0 - mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
    for layer in layers:
        out = layer(hidden, additive)
        hidden = out[0] if isinstance(out, tuple) else out  # transformers 4 returns a tuple
    return hidden


class _Split:
    """A model read in two parts: the embeddings and the ``below`` first layers once for each
    pair, kept (they are frozen: the same input gives the same output), and the rest on top.

    Each step then runs only the trained layers, forwards and backwards: freezing 10 of
    MiniLM-L12's 12 layers makes a step about six times cheaper than the whole model's."""

    def __init__(self, model: Any, tokenizer: Any, below: int, torch: Any, kept: dict | None = None) -> None:
        self.model, self.tokenizer, self.below, self.torch = model, tokenizer, below, torch
        self.kept: dict[tuple[str, str], Any] = {} if kept is None else kept

    def _lower(self, pairs: Sequence[tuple[str, str]]) -> None:
        torch, bert = self.torch, self.model.bert
        missing = [p for p in dict.fromkeys(pairs) if p not in self.kept]
        with torch.no_grad():
            for at in range(0, len(missing), 16):
                part = missing[at:at + 16]
                batch = _batch(self.tokenizer, part, torch)
                hidden = bert.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
                hidden = _run_layers(bert.encoder.layer[:self.below], hidden, batch["attention_mask"], torch)
                for i, pair in enumerate(part):
                    self.kept[pair] = hidden[i, :int(batch["attention_mask"][i].sum())].clone()

    def logits(self, pairs: Sequence[tuple[str, str]]) -> Any:
        torch, model = self.torch, self.model
        self._lower(pairs)
        parts = [self.kept[p] for p in pairs]
        width = max(len(h) for h in parts)
        hidden = torch.zeros((len(parts), width, parts[0].shape[1]))
        mask = torch.zeros((len(parts), width), dtype=torch.long)
        for i, h in enumerate(parts):
            hidden[i, :len(h)] = h
            mask[i, :len(h)] = 1
        hidden = _run_layers(model.bert.encoder.layer[self.below:], hidden, mask, torch)
        return model.classifier(model.dropout(model.bert.pooler(hidden)))[:, 0]


def frozen_outputs(model: Any, tokenizer: Any, groups: Sequence[Any], freeze_below: int) -> dict:
    """The outputs of ``model``'s embeddings and first ``freeze_below`` layers for every pair of
    ``groups``: what :func:`fine_tune` takes as ``frozen_outputs``, computed once before the runs
    that share it (each run's time budget then buys training steps only)."""
    torch, _ = _imports()
    split = _Split(model.eval(), tokenizer, freeze_below, torch)
    split._lower([(g.query, t) for g in groups for t in (g.positive, *g.negatives)])
    return split.kept


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What :func:`fine_tune` did: steps, groups read, seconds, and the mean loss of each tenth."""

    steps: int
    groups: int
    seconds: float
    losses: tuple[float, ...]


def fine_tune(model: Any, tokenizer: Any, groups: Sequence[Any], *, epochs: float = 1.0, batch_groups: int = 8,
              lr: float = 2e-5, seconds: float | None = None, seed: int = 0, threads: int = 2,
              freeze_below: int = 0, frozen_outputs: dict | None = None, loss: str = "listwise",
              log: Callable[[str], None] | None = None) -> TrainResult:
    """Train ``model`` in place on ``groups`` (:class:`ragdx.train.pairs.Group`): each step reads
    ``batch_groups`` groups, and each group's loss is the cross-entropy of its positive under a
    softmax over its texts' logits (``loss="listwise"``), or the mean binary cross-entropy of each
    text's logit against its label, 1 for the positive and 0 for a negative (``"pointwise"``: the
    logit then has one scale across groups, a probability after a sigmoid). AdamW with a linear warm-up over the first 10% of the steps
    and a linear decay; stops after ``epochs`` passes or ``seconds`` of training, whichever
    comes first. Deterministic for a seed (one thread count).

    ``freeze_below`` keeps the embeddings and the encoder's first that many layers as they are
    (no gradient, no update, no dropout), and computes their output once for each pair
    (:class:`_Split`): a step runs the upper layers only, which makes CPU training several times
    cheaper and keeps what the lower layers learnt from a large corpus when the training set is
    small. ``frozen_outputs`` (a dict, filled as pairs are read) shares those outputs between
    runs that start from the same weights with the same ``freeze_below`` (cross-validation's
    folds).

    Raises:
        ConfigError: no groups, a group without negatives, ``freeze_below`` beyond the model's
            layers, or a ``loss`` that is neither ``listwise`` nor ``pointwise``.
    """
    torch, transformers = _imports()
    if loss not in ("listwise", "pointwise"):
        raise ConfigError(f"{_WHAT}: loss must be 'listwise' or 'pointwise', not {loss!r}")
    if not groups:
        raise ConfigError(f"{_WHAT}: no training groups")
    bare = next((g for g in groups if not g.negatives), None)
    if bare is not None:
        raise ConfigError(f"{_WHAT}: the group of query {bare.query!r} has no negative")
    layers = model.bert.encoder.layer
    if not 0 <= freeze_below <= len(layers):
        raise ConfigError(f"{_WHAT}: freeze_below={freeze_below}, but the model has {len(layers)} layers "
                          f"(0 to {len(layers)} may be frozen)")
    frozen = [model.bert.embeddings, *layers[:freeze_below]] if freeze_below else []
    for part in frozen:
        part.requires_grad_(False)
    split = _Split(model, tokenizer, freeze_below, torch, frozen_outputs) if freeze_below else None
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    total = max(1, math.ceil(len(groups) * epochs / batch_groups))
    trained = [p for p in model.parameters() if p.requires_grad]  # the frozen parts left out
    optimiser = torch.optim.AdamW(trained, lr=lr, weight_decay=0.01)
    schedule = transformers.get_linear_schedule_with_warmup(optimiser, max(1, total // 10), total)
    model.train()
    for part in frozen:
        part.eval()
    started, losses, steps = time.perf_counter(), [], 0
    for step in range(total):
        batch = [groups[order[(step * batch_groups + i) % len(order)]] for i in range(batch_groups)]
        pairs, sizes = [], []
        for g in batch:
            texts = (g.positive, *g.negatives)
            pairs.extend((g.query, t) for t in texts)
            sizes.append(len(texts))
        logits = split.logits(pairs) if split else model(**_batch(tokenizer, pairs, torch)).logits[:, 0]
        if loss == "pointwise":
            labels = torch.tensor([float(i == 0) for n in sizes for i in range(n)])
            value = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        else:
            value = torch.stack([-torch.log_softmax(part, 0)[0] for part in torch.split(logits, sizes)]).mean()
        value.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        losses.append(value.item())
        steps = step + 1
        if log and steps % 10 == 0:
            log(f"  step {steps}/{total}, loss {np.mean(losses[-10:]):.3f}, {time.perf_counter() - started:.0f} s")
        if seconds is not None and time.perf_counter() - started > seconds:
            break
    model.eval()
    tenth = max(1, len(losses) // 10)
    return TrainResult(steps, steps * batch_groups, round(time.perf_counter() - started, 1),
                       tuple(round(float(np.mean(losses[i:i + tenth])), 4) for i in range(0, len(losses), tenth)))


def export(model: Any, tokenizer_json: str | Path, folder: str | Path, *, int8: bool = True) -> Path:
    """Write ``model`` to ``folder`` as ``model.onnx`` (int8 weights by onnxruntime's
    ``quantize_dynamic`` unless ``int8`` is false) with ``tokenizer.json`` copied beside it.

    Returns:
        The folder (what ``generation.reader_model`` takes).
    """
    torch, _ = _imports()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    ids = torch.tensor([[2, 5, 3, 6, 7, 3], [2, 5, 6, 3, 7, 3]])  # any ids: the axes are dynamic
    axes = {0: "batch", 1: "sequence"}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "model.onnx" if int8 else folder / "model.onnx"
        with torch.no_grad():
            torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(fp32),
                              input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["logits"],
                              dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                            "logits": {0: "batch"}},
                              opset_version=17, do_constant_folding=True, dynamo=False)
        if int8:
            try:
                from onnxruntime.quantization import QuantType, quantize_dynamic
            except ImportError:
                raise MissingExtraError("onnx", _WHAT) from None
            quantize_dynamic(str(fp32), str(folder / "model.onnx"), weight_type=QuantType.QInt8, per_channel=True)
    (folder / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
    return folder


def write_card(folder: str | Path, info: dict) -> None:
    """``training.json`` beside the model: how it was made (start, pairs, steps, timings)."""
    Path(folder, "training.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
