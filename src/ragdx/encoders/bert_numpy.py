"""A BERT sentence encoder's forward pass in numpy, for the queries of a sentence-transformers
model (all-MiniLM-L6-v2, ragdx's default) without torch.

Loading torch and sentence-transformers takes 4 to 5 s, ten times what encoding a query takes;
``ragdx ask`` paid it for every question. This reads the same model folder (``model.safetensors``,
``config.json``, ``tokenizer.json``, ``sentence_bert_config.json``, ``1_Pooling/config.json``,
``modules.json``) and runs the same computation: embeddings and their layer norm, each layer's
self-attention and feed-forward (GELU by ``erf``), then the pooling and the normalisation the
folder names. Its vectors lie in the same embedding space as sentence-transformers' (the same
weights, tokenizer and pooling): their cosine is at least 0.999999 on the bundled questions
(tests/encoders/test_bert_numpy.py); the difference is float32 rounding, as between two BLAS
libraries. :func:`supports` says which folders it reads: a BERT model whose modules are a
Transformer, a Pooling (mean or CLS) and optionally a Normalize.

Reference: Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL 2019; Reimers & Gurevych, "Sentence-BERT", EMNLP 2019.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["NumpyBert", "max_tokens", "pooling_config", "supports"]

_MODULES = {"sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize"}
_POOLING = ("pooling_mode_mean_tokens", "pooling_mode_cls_token")


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _modules(folder: Path) -> list[dict[str, Any]]:
    file = folder / "modules.json"
    return _json(file) if file.is_file() else []


def pooling_config(folder: Path) -> dict[str, Any]:
    """The folder's Pooling module's configuration ({} when it has none)."""
    pooling = next((m for m in _modules(folder) if m.get("type", "").endswith(".Pooling")), None)
    file = folder / (pooling or {}).get("path", "1_Pooling") / "config.json"
    return _json(file) if file.is_file() else {}


def max_tokens(folder: Path) -> int:
    """The model's window in word pieces (``sentence_bert_config.json``'s ``max_seq_length``; 512
    without one), as sentence-transformers reads it."""
    st = folder / "sentence_bert_config.json"
    return int(_json(st).get("max_seq_length", 512)) if st.is_file() else 512


def supports(folder: str | Path) -> bool:
    """Whether :class:`NumpyBert` reads this model folder: a BERT model in ``model.safetensors``
    with ``tokenizer.json``, whose sentence-transformers modules are a Transformer, a Pooling
    (mean or CLS tokens, one of them) and optionally a Normalize, and whose activation is GELU."""
    folder = Path(folder)
    try:
        if not all((folder / f).is_file() for f in ("model.safetensors", "tokenizer.json", "config.json")):
            return False
        modules = _modules(folder)
        config = _json(folder / "config.json")
        pooling = pooling_config(folder)
    except (OSError, ValueError):
        return False
    modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True]
    return (bool(modules) and {m.get("type") for m in modules} <= _MODULES
            and config.get("model_type") == "bert" and config.get("hidden_act") == "gelu"
            and len(modes) == 1 and modes[0] in _POOLING)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), in float64."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


class NumpyBert:
    """The forward pass of a sentence-transformers BERT folder (see :func:`supports`), one text
    at a time (queries: no padding, so no attention mask)."""

    def __init__(self, folder: str | Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
        folder = Path(folder)
        weights = load_file(str(folder / "model.safetensors"))
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in weights.items()}
        config = _json(folder / "config.json")
        self.heads, self.layers = int(config["num_attention_heads"]), int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_tokens = max_tokens(folder)
        self.cls = bool(pooling_config(folder).get("pooling_mode_cls_token"))
        self.normalize = any(m.get("type", "").endswith(".Normalize") for m in _modules(folder))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_tokens)
        # each linear layer's weight transposed once: x @ W.T + b as x @ Wt + b
        self.linear = {k.removesuffix(".weight"): (np.ascontiguousarray(v.T), self.w[k.removesuffix("weight") + "bias"])
                       for k, v in self.w.items() if k.endswith(".weight") and v.ndim == 2 and "embeddings" not in k}

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        weight, bias = self.linear[name]
        return x @ weight + bias

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 vector per text (normalised when the folder's modules say so)."""
        out = np.zeros((len(texts), self.w["embeddings.word_embeddings.weight"].shape[1]), np.float32)
        for row, encoding in enumerate(self.tokenizer.encode_batch(list(texts))):
            out[row] = self._one(np.asarray(encoding.ids, dtype=np.int64))
        return out

    def _one(self, ids: np.ndarray) -> np.ndarray:
        w, n = self.w, len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        heads = self.heads
        size = x.shape[-1] // heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._dense(x, p + f"attention.self.{m}").reshape(n, heads, size).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ v).transpose(1, 0, 2).reshape(n, heads * size)
            x = self._norm(self._dense(attended, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = self._dense(x, p + "intermediate.dense").astype(np.float64)
            h = (0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))).astype(np.float32)
            x = self._norm(self._dense(h, p + "output.dense") + x, p + "output.LayerNorm")
        pooled = x[0] if self.cls else x.mean(0)
        if self.normalize:
            pooled = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return pooled.astype(np.float32)
