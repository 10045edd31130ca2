"""What the result caches store, and what an entry depends on (the index version, the access scope,
the settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragdx.types.choices import ChoiceEnum


class CacheKind(ChoiceEnum):
    """What an entry holds: the ranked lists up to governance, or the whole trace with its binding."""

    RETRIEVAL = "retrieval"
    ANSWER = "answer"


@dataclass(frozen=True, slots=True)
class Dependencies:
    """What a cached result depends on (:mod:`ragdx.store.cache`, docs/formats.md "The result cache").

    Args:
        docs: the documents it read.
        terms: the question's terms as FTS5 indexes them (its keyword channels match on them).
        keyword: for a keyword channel whose list was full: its lowest score, its column weights
            (prefix, text), the question's phrases as FTS5 tokens, and each listed chunk's counts
            of those phrases per column with its length (:func:`ragdx.store.cache.listed_counts`): a chunk that
            scores below every listed chunk cannot enter the list.
        dense: per dense channel with a full list: (space id, lowest score, question vector).
        open: any new content invalidates it (a dense list that was not full, a channel of unknown kind).
        any_change: any change invalidates it (a withheld question).
    """

    docs: frozenset[str]
    terms: frozenset[str] = frozenset()
    keyword: tuple[float, tuple[float, float], tuple[str, ...], tuple[Any, ...]] | None = None
    dense: tuple[tuple[str, float, bytes], ...] = ()
    open: bool = False
    any_change: bool = False


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A cached result: its payload, the index version it was made at, and what making it took."""

    kind: CacheKind
    payload: Any
    made_at: int
    seconds: float
