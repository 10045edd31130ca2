"""Tiny random transformer models written to a folder, to exercise model-loading code paths
offline (no cross-encoder or NLI model ships on PyPI). Their outputs are meaningless but
deterministic for a seed. Needs the ``dense`` extra (transformers, torch)."""

from __future__ import annotations

import re
from pathlib import Path

from ragdx.errors import MissingExtraError

_WORDS = ("refund refunds accepted within days delivery quality defect defects may be the a of "
          "is error code window expired payment provider timeout approval team lead eur 30 90 "
          "500 can i get for after what does mean").split()


def tiny_bert(folder: str | Path, *, num_labels: int = 1, seed: int = 0,
              labels: tuple[str, ...] = (), layers: int = 1) -> Path:
    """Write a random BERT sequence classifier of ``layers`` layers (one by default; a
    cross-encoder or an NLI model shape).

    Args:
        folder: where to write it (created).
        num_labels: 1 for a relevance score (cross-encoder), 3 for NLI.
        seed: the random seed of the weights.
        labels: label names (e.g. ``("contradiction", "entailment", "neutral")``).
        layers: encoder layers.

    Returns:
        The folder, loadable by ``sentence_transformers.CrossEncoder`` and ``transformers``.
    """
    try:
        import torch
        from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast
    except ImportError:
        raise MissingExtraError("dense", "the tiny test models") from None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(_WORDS)), "?", ".", ",", "-"]
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=128,
                        num_labels=num_labels)
    if labels:
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: i for i, name in enumerate(labels)}
    BertForSequenceClassification(config).save_pretrained(folder)
    # transformers 5 takes the vocabulary as ``vocab`` (4.x: ``vocab_file``); a keyword it does not
    # know is swallowed by **kwargs and leaves an empty vocabulary that reads every word as [UNK]
    import inspect
    keyword = "vocab" if "vocab" in inspect.signature(BertTokenizerFast.__init__).parameters else "vocab_file"
    tokenizer = BertTokenizerFast(**{keyword: str(vocab_file)}, do_lower_case=True, model_max_length=128)
    if tokenizer.convert_tokens_to_ids("refund") == tokenizer.unk_token_id:
        raise RuntimeError("the tiny tokenizer lost its vocabulary")
    tokenizer.save_pretrained(folder)
    return folder


def words(text: str) -> list[str]:
    """The words of the tiny models' vocabulary found in a text (to write test inputs)."""
    return [w for w in re.findall(r"\w+", text.lower()) if w in _WORDS]
