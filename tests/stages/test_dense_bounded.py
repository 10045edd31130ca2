"""The dense channel's bounded index (store/vectors.py, QuantizedIndex): exact scores, the same
results as exact search where the candidates hold every row, and an edit, a deletion and an
access revocation visible to the next search, patched in rather than read again."""

import dataclasses

import numpy as np
import pytest

from ragdx.errors import ConfigError
from ragdx.stages.dense import DenseRetriever
from ragdx.store.sqlite import SQLiteStore
from ragdx.store.vectors import DenseIndex, QuantizedIndex
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import DocStatus, EmbeddingSpace, Principal, Query, SpaceState, VersionFilter
from tests.store.test_keyword import add

SPACE = EmbeddingSpace("hand-made", "w0", 4)
PUBLIC = ("public",)
CURRENT = VersionFilter()


def put(store: SQLiteStore, doc_id: str, vector, version: str = "v1", acl=PUBLIC) -> None:
    """A one-chunk document with this vector in the space."""
    add(store, doc_id, f"text of {doc_id} {version}", version, acl)
    with store.transaction():
        store.write_vectors(SPACE.id, [(f"{doc_id}@{version}#0", f"h-{doc_id}-{version}",
                                        np.asarray(vector, np.float32).tobytes(), None)])


@pytest.fixture
def hand(tmp_path):
    """Five vectors whose dot products with Q are 0.8, 0.6, 0.6 (a tie), 0 and -1."""
    store = SQLiteStore(tmp_path / "store.db")
    with store.transaction():
        store.register_space(SPACE, "test")
        store.set_space_state(SPACE.id, SpaceState.ACTIVE, "test")
    put(store, "a", [0.6, 0.8, 0, 0])
    put(store, "b", [0.8, 0.6, 0, 0])
    put(store, "c", [0.6, 0, 0.8, 0])
    put(store, "d", [0, 0, 1, 0])
    put(store, "e", [-1, 0, 0, 0])
    yield store
    store.close()


Q = np.array([1, 0, 0, 0], np.float32)
F = np.float32  # scores are float32 dot products


def test_scores_and_order_are_exact_search_s(hand):
    index = QuantizedIndex.load(hand, SPACE.id, 4)
    expected = [("b@v1#0", float(F(0.8))), ("a@v1#0", float(F(0.6))), ("c@v1#0", float(F(0.6))),
                ("d@v1#0", 0.0), ("e@v1#0", -1.0)]
    assert index.nearest(Q, PUBLIC, 5) == expected  # the tie goes to the older row (a before c)
    assert index.nearest(Q, PUBLIC, 2) == expected[:2]
    assert index.nearest(Q, PUBLIC, 5) == DenseIndex.load(hand, SPACE.id, 4).nearest(Q, PUBLIC, 5)
    assert index.nearest(Q, ("staff",), 5) == []


def test_equals_exact_search_where_the_hamming_shortlist_holds_every_row(tmp_path):
    """600 random vectors of 384 dimensions (the default encoder's): for k = 10 the Hamming
    shortlist (16 x 42 rows) holds all 600, the int8 estimates keep 42 candidates, and the true
    top 10 are among them for each of 20 queries, with their exact scores. (Where the shortlist
    cuts, what it costs is measured: bench/million_chunks.py.)"""
    rng = np.random.default_rng(0)
    store = SQLiteStore(tmp_path / "store.db")
    space = EmbeddingSpace("random", "w0", 384)
    with store.transaction():
        store.register_space(space, "test")
        store.set_space_state(space.id, SpaceState.ACTIVE, "test")
    vectors = rng.standard_normal((600, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for i in range(len(vectors)):
        add(store, f"d{i}", f"doc {i}")
    with store.transaction():
        store.write_vectors(space.id, [(f"d{i}@v1#0", f"h{i}", v.tobytes(), None) for i, v in enumerate(vectors)])
    bounded, exact = QuantizedIndex.load(store, space.id, 384), DenseIndex.load(store, space.id, 384)
    assert bounded.rows == 600 < 16 * 42
    for q in rng.standard_normal((20, 384)).astype(np.float32):
        found, truth = bounded.nearest(q, PUBLIC, 10), exact.nearest(q, PUBLIC, 10)
        assert [c for c, _ in found] == [c for c, _ in truth]
        # float32 dot products: BLAS sums a matrix of 600 rows and one of 42 in other orders
        assert [s for _, s in found] == pytest.approx([s for _, s in truth], rel=1e-6, abs=1e-6)
    store.close()


def test_an_edit_a_deletion_and_a_revocation_are_patched_into_the_next_search(hand, tmp_path):
    reader = SQLiteStore(tmp_path / "store.db", mode="read")  # another connection, its own index
    index = QuantizedIndex.load(reader, SPACE.id, 4)
    assert [c for c, _ in index.nearest(Q, PUBLIC, 2)] == ["b@v1#0", "a@v1#0"]
    # a deletion
    with hand.transaction():
        hand.delete_document("b")
    index.refresh()
    assert [c for c, _ in index.nearest(Q, PUBLIC, 2)] == ["a@v1#0", "c@v1#0"]
    # an edit: a new version of d, nearer than any; the old one superseded
    put(hand, "d", [0.99, 0.1, 0, 0], version="v2")
    with hand.transaction():
        hand.set_status("d", "v1", DocStatus.SUPERSEDED, "edited")
    index.refresh()
    assert index.nearest(Q, PUBLIC, 2, CURRENT) == [("d@v2#0", float(F(0.99))), ("a@v1#0", float(F(0.6)))]
    assert "d@v1#0" not in [c for c, _ in index.nearest(Q, PUBLIC, 5, CURRENT)]
    assert "d@v1#0" in [c for c, _ in index.nearest(Q, PUBLIC, 5, VersionFilter(current_only=False))]
    # a revocation
    revoked = dataclasses.replace(hand.version("a", "v1").document, acl=("staff",))
    with hand.transaction():
        hand.update_attributes(revoked)
    index.refresh()
    assert [c for c, _ in index.nearest(Q, PUBLIC, 2, CURRENT)] == ["d@v2#0", "c@v1#0"]
    assert [c for c, _ in index.nearest(Q, ("staff",), 2, CURRENT)] == ["a@v1#0"]
    # patched, not read again: the deleted row and the re-read rows of d are still held, dead
    assert (index.size, index.rows) == (8, 5)
    reader.close()


def test_vectors_the_log_does_not_name_make_it_read_everything_again(hand, tmp_path):
    index = QuantizedIndex.load(hand, SPACE.id, 4)
    add(hand, "f", "text of f")  # logged: the next refresh reads f, which has no vector yet
    index.refresh()
    assert index.nearest(Q, PUBLIC, 1) == [("b@v1#0", float(F(0.8)))]
    with hand.transaction():  # a vector written without a log entry
        hand.write_vectors(SPACE.id, [("f@v1#0", "h-f", np.array([1, 0, 0, 0], np.float32).tobytes(), None)])
    assert not hand.log_entries(index.log_seq)
    index.refresh()
    assert index.nearest(Q, PUBLIC, 1) == [("f@v1#0", 1.0)]
    assert (index.size, index.rows) == (6, 6)  # read again in full: no dead row


def test_a_change_naming_no_document_makes_it_read_everything_again(hand):
    """As an index version switched in: every chunk and vector replaced, the count unchanged."""
    index = QuantizedIndex.load(hand, SPACE.id, 4)
    with hand.transaction():
        hand.write_vectors(SPACE.id, [("e@v1#0", "h-e2", np.array([1, 0, 0, 0], np.float32).tobytes(), None)])
        hand.log("index", None, None, "switched ix_0 -> ix_1")
    index.refresh()
    assert index.nearest(Q, PUBLIC, 1) == [("e@v1#0", 1.0)]
    # e's codes are its new vector's (the five rows are rescored from the store either way)
    assert (index.size, index.rows) == (5, 5) and index.codes[4].tolist() == [127, 0, 0, 0]


def test_the_dense_channel_searches_the_bounded_index_and_sees_a_deletion(small):
    store, encoder, _ = small
    bounded = DenseRetriever(store, encoder, top_k=5, search="quantized")
    exact = DenseRetriever(store, encoder, top_k=5, search="exact")
    public, staff = Principal("p", ("public",)), Principal("s", ("staff",))
    for principal in (public, staff):
        query = Query("q", "refund approval override code", principal)
        assert [(i.chunk_id, i.score) for i in bounded.run(query).items] == \
            [(i.chunk_id, i.score) for i in exact.run(query).items]
    assert "runbook.md" not in {i.doc_id for i in bounded.run(Query("q", "override code", public)).items}
    assert isinstance(bounded.index(), QuantizedIndex)
    with store.transaction():
        store.delete_document("refund.md")
    found = bounded.run(Query("q", "refunds accepted within 30 days", public)).items
    assert found and "refund.md" not in {i.doc_id for i in found}


def test_auto_searches_exactly_below_the_threshold_and_quantized_needs_row_reads(small):
    store, encoder, _ = small
    assert isinstance(DenseRetriever(store, encoder).index(), DenseIndex)  # 6 vectors: exact

    class NoRows:  # a store that cannot read its vectors by row
        def __getattr__(self, name):
            if name in ("vector_rows", "vectors_at"):
                raise AttributeError(name)
            return getattr(store, name)

    with pytest.raises(ConfigError, match="search 'quantized' needs a store"):
        DenseRetriever(NoRows(), encoder, search="quantized").index()
    assert isinstance(DenseRetriever(NoRows(), HashingEncoder(dim=128), search="auto").index(), DenseIndex)
