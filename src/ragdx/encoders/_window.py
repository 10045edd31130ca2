"""Where an encoder stops reading: the character offset after the last token inside its window."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

SPECIAL_TOKENS = 2  # BERT-style encoders spend two window places on [CLS] and [SEP]


def token_offsets(tokenizer: Any, texts: Sequence[str], limit: int) -> list[list[tuple[int, int]]]:
    """Character offsets of each text's first ``limit`` tokens (no special tokens), from a
    Hugging Face fast tokenizer or a ``tokenizers.Tokenizer``."""
    if not texts:
        return []
    if hasattr(tokenizer, "encode_batch"):  # tokenizers.Tokenizer
        found = tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [list(e.offsets[:limit]) for e in found]
    out = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True,
                    truncation=True, max_length=limit)
    return [list(map(tuple, o)) for o in out["offset_mapping"]]


def window_ends(tokenizer: Any, inputs: Sequence[str], max_tokens: int, prefix_len: int = 0,
                offsets: Sequence[Sequence[tuple[int, int]]] | None = None) -> tuple[int | None, ...]:
    """For each input, the offset (in the text after a prefix of ``prefix_len`` characters)
    where the encoder's window of ``max_tokens`` tokens ends, or ``None`` if it reads it all.
    ``offsets``: the inputs' token offsets when the caller has tokenised them already."""
    readable = max_tokens - SPECIAL_TOKENS
    ends: list[int | None] = []
    for found in offsets if offsets is not None else token_offsets(tokenizer, inputs, readable + 1):
        ends.append(max(0, found[readable - 1][1] - prefix_len) if len(found) > readable else None)
    return tuple(ends)


def tokenizer_name(tokenizer: Any, fallback: str) -> str:
    """A name for how a tokenizer cuts text: its model type and a hash of everything that decides
    its tokens (normaliser, pre-tokeniser, model with its vocabulary, added tokens), from a
    Hugging Face fast tokenizer, a ``tokenizers.Tokenizer`` or the text of a ``tokenizer.json``.
    Two backends that tokenise alike (sentence-transformers and the ONNX encoder on
    all-MiniLM-L6-v2's vocabulary) get the same name, so chunks counted by one stay valid for the
    other; truncation and padding do not count. ``fallback`` names a tokenizer that cannot be
    serialised (a slow one)."""
    try:
        if isinstance(tokenizer, str):
            spec = json.loads(tokenizer)
        else:
            spec = json.loads(getattr(tokenizer, "backend_tokenizer", tokenizer).to_str())
    except (AttributeError, TypeError, ValueError):
        return fallback
    decides = {key: spec.get(key) for key in ("normalizer", "pre_tokenizer", "model", "added_tokens")}
    digest = hashlib.sha256(json.dumps(decides, sort_keys=True).encode()).hexdigest()[:12]
    kind = str((spec.get("model") or {}).get("type") or "tokenizer").lower()
    return f"{kind}:{digest}"
