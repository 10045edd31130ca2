"""An encoder encodes one question once per query, however many stages read its vector."""

import numpy as np
import pytest

from ragdx.encoders._memo import QueryMemo
from ragdx.types import EmbeddingSpace, Encoding

SPACE = EmbeddingSpace("m", "t", 2)


def counting():
    calls = []

    def encode(texts):
        calls.append(tuple(texts))
        return Encoding(SPACE, np.full((len(texts), 2), float(len(calls)), np.float32), tuple(None for _ in texts))
    return calls, encode


def test_a_question_is_encoded_once_and_its_vector_cannot_be_changed():
    memo, (calls, encode) = QueryMemo(size=2), counting()
    first = memo.get(["why?"], "query", lambda: encode(["why?"]))
    again = memo.get(["why?"], "query", lambda: encode(["why?"]))
    assert calls == [("why?",)] and again is first
    with pytest.raises(ValueError):
        again.vectors[0, 0] = 9.0


def test_passages_and_batches_are_not_kept_and_the_oldest_question_goes_first():
    memo, (calls, encode) = QueryMemo(size=2), counting()
    for _ in range(2):
        memo.get(["a passage"], "passage", lambda: encode(["a passage"]))
        memo.get(["q1", "q2"], "query", lambda: encode(["q1", "q2"]))
    assert len(calls) == 4
    for text in ("q1", "q2", "q3", "q1"):  # q1 was dropped for q3 (two kept)
        memo.get([text], "query", lambda t=text: encode([t]))
    assert calls[4:] == [("q1",), ("q2",), ("q3",), ("q1",)]

