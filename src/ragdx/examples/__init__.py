"""The bundled example: the refund scenario (13 documents, 14 versions, 18 questions)."""

from pathlib import Path

__all__ = ["example_dir"]


def example_dir() -> Path:
    """The bundled example's folder (``manifest.jsonl``, ``queries.jsonl``, ``corpus/``)."""
    return Path(__file__).parent / "refund"
