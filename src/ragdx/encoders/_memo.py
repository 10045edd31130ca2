"""The last questions an encoder encoded: one question is encoded once per query, not once per
stage that reads its vector (the dense channel, governance's withheld probe, the generator, the
cache's dependencies)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Sequence

from ragdx.types import Encoding

#: how many single-question encodings an encoder keeps
QUERY_MEMO = 64


class QueryMemo:
    """A small LRU of single-text ``query`` encodings, keyed by the text. Kept vectors are
    read-only, so a caller that would change one fails instead of changing every later answer."""

    def __init__(self, size: int = QUERY_MEMO) -> None:
        self.size = size
        self._kept: OrderedDict[str, Encoding] = OrderedDict()

    def get(self, texts: Sequence[str], kind: str, encode: Callable[[], Encoding]) -> Encoding:
        if kind != "query" or len(texts) != 1:
            return encode()
        text = texts[0]
        kept = self._kept.get(text)
        if kept is None:
            kept = encode()
            kept.vectors.setflags(write=False)
            self._kept[text] = kept
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        self._kept.move_to_end(text)
        return kept
