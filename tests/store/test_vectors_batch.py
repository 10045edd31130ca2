"""VectorBatch, the record a VectorRowStore yields: its four columns are of one length."""

import pytest

from ragdx.types import VectorBatch


def test_a_batch_whose_columns_differ_in_length_is_refused():
    batch = VectorBatch((1, 2), (("a", "v1"), ("b", "v1")), (False, True), (b"\0" * 4, b"\0" * 4))
    assert len(batch) == 2
    with pytest.raises(ValueError, match=r"differ in length \(2, 2, 2, 1\)"):
        VectorBatch((1, 2), (("a", "v1"), ("b", "v1")), (False, True), (b"\0" * 4,))
