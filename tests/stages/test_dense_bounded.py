"""The dense channel's bounded index (store/vectors.py, QuantizedIndex): exact scores, the same
results as exact search where the candidates hold every row, and an edit, a deletion and an
access revocation visible to the next search, patched in rather than read again."""

import dataclasses
import json

import numpy as np
import pytest

from ragdx.diagnosis.ours import _deep_search
from ragdx.errors import ConfigError
from ragdx.stages import dense as dense_stage
from ragdx.stages.dense import DenseRetriever
from ragdx.store.sqlite import SQLiteStore
from ragdx.store.vectors import DenseIndex, QuantizedIndex
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import DocStatus, EmbeddingSpace, Encoding, Principal, Query, SpaceState, VersionFilter
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
    cuts, what it costs is measured: bench/scale/million_chunks.py.)"""
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
    refunds = Query("q", "refunds accepted within 30 days", public)
    assert "refund.md" in {i.doc_id for i in bounded.run(refunds).items}  # premise: found before the delete
    with store.transaction():
        store.delete_document("refund.md")
    found = bounded.run(refunds).items
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
        DenseRetriever(NoRows(), encoder, search="quantized")  # refused when built, before a query
    assert isinstance(DenseRetriever(NoRows(), HashingEncoder(dim=128), search="auto").index(), DenseIndex)


def test_rows_tied_at_the_hamming_cut_pass_whatever_a_patch_did_to_their_places(tmp_path):
    """x has the best vector; 700 others share its sign bits (Hamming distance 0 from the query,
    as x). A status write that changes nothing re-reads x's row, which a patch puts after the
    others: every row at the cut distance still reaches the int8 pass, so x stays first, as a
    fresh load finds it (before the fix, o32 came first: x was cut by its place)."""
    store = SQLiteStore(tmp_path / "store.db")
    with store.transaction():
        store.register_space(SPACE, "test")
        store.set_space_state(SPACE.id, SpaceState.ACTIVE, "test")
    add(store, "x", "text x")
    for i in range(700):
        add(store, f"o{i}", f"text {i}")
    with store.transaction():
        store.write_vectors(SPACE.id, [("x@v1#0", "hx", np.array([1, .1, .1, .1], np.float32).tobytes(), None)] +
                            [(f"o{i}@v1#0", f"h{i}", np.array([.5, .1, .1, .1], np.float32).tobytes(), None)
                             for i in range(700)])
    q = np.array([1, 1, 1, 1], np.float32) / 2
    best = [("x@v1#0", pytest.approx(0.65, rel=1e-6))]  # (1 + 0.3) / 2, in float32
    index = QuantizedIndex.load(store, SPACE.id, 4)
    assert index.sizes(701, 1) == (33, 528)  # the shortlist is cut: 528 of 701 rows
    assert index.nearest(q, PUBLIC, 1) == best
    with store.transaction():
        store.set_status("x", "v1", DocStatus.CURRENT, "re-affirmed")
    index.refresh()
    rows = index._rows
    assert rows.rowid[rows.size - 1] == 1 and rows.dead[0]  # x's row now last, its old place dead
    assert index.nearest(q, PUBLIC, 1) == best
    assert index.search(q, PUBLIC, 1)[1] == {"readable": 701, "shortlist": 701, "pool": 33}
    assert QuantizedIndex.load(store, SPACE.id, 4).nearest(q, PUBLIC, 1) == best
    store.close()


def test_a_refresh_inside_the_stores_write_transaction_is_not_taken_as_its_generation(hand):
    """The first search runs inside a transaction that deletes a, then rolls back; the next
    transaction deletes e and reuses the rolled-back log seq. a must be back, e gone (before
    the fix a stayed missing: the index held the rolled-back state as the store's)."""
    with pytest.raises(RuntimeError, match="roll back"):
        with hand.transaction():
            hand.delete_document("a")
            index = QuantizedIndex.load(hand, SPACE.id, 4)
            assert [c for c, _ in index.nearest(Q, PUBLIC, 5)] == ["b@v1#0", "c@v1#0", "d@v1#0", "e@v1#0"]
            assert (index.index_version, index.log_seq) == (-1, 0)
            raise RuntimeError("roll back")
    with hand.transaction():
        hand.delete_document("e")
    assert hand.log_entries()[-1].seq == 8  # the rolled-back delete's seq (2 space entries, 5 adds), used again
    index.refresh()
    assert [c for c, _ in index.nearest(Q, PUBLIC, 5)] == ["b@v1#0", "a@v1#0", "c@v1#0", "d@v1#0"]
    assert index.index_version == hand.index_version


def _x(store: SQLiteStore) -> None:
    """x: the best dot product with Q (0.99) but sign bits 1111, three from Q's 1000; a, b, c
    and e are at distance 1 and d at 2."""
    put(store, "x", [0.99, 0.05, 0.05, 0.05])


def test_the_hamming_shortlist_cuts_at_a_distance_and_keeps_every_row_at_it(hand, monkeypatch):
    _x(hand)
    index = QuantizedIndex.load(hand, SPACE.id, 4)
    distance = index.hamming(Q)[:index.size]
    assert distance.tolist() == [1, 1, 1, 2, 1, 3]  # a b c d e x, in row order
    allowed = index.allowed(PUBLIC)
    assert index._shortlist(distance, allowed[:index.size], 3).tolist() == [0, 1, 2, 4]  # all four at 1
    assert index._shortlist(distance, allowed[:index.size], 5).tolist() == [0, 1, 2, 3, 4]
    # a shortlist of 3 and a pool of 2 drop x, which exact search ranks first
    monkeypatch.setattr(QuantizedIndex, "sizes", lambda self, readable, k: (2, 3))
    found, held = index.search(Q, PUBLIC, 1)
    assert found == [("b@v1#0", float(F(0.8)))] and held == {"readable": 6, "shortlist": 4, "pool": 2}
    assert index.scan(Q, PUBLIC, 2) == [("x@v1#0", float(F(0.99))), ("b@v1#0", float(F(0.8)))]
    assert index.scan(Q, PUBLIC, 9) == DenseIndex.load(hand, SPACE.id, 4).nearest(Q, PUBLIC, 9)


class _Fixed:
    """An encoder of the hand-made space whose every query is Q."""
    space, name = SPACE, "fixed"

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, texts, *, kind="passage") -> Encoding:
        return Encoding(SPACE, np.tile(Q, (len(texts), 1)), (None,) * len(texts))


def test_the_trace_says_the_shortlist_and_the_diagnosis_says_it_dropped_a_chunk(hand, monkeypatch):
    _x(hand)
    monkeypatch.setattr(QuantizedIndex, "sizes", lambda self, readable, k: (2, 3))
    channel = DenseRetriever(hand, _Fixed(), top_k=1, search="quantized")
    query = Query("q", "anything", Principal("p", PUBLIC))
    ran = channel.run(query)
    assert [i.chunk_id for i in ran.items] == ["b@v1#0"]
    assert {k: ran.config[k] for k in ("search", "searched", "readable", "shortlist", "pool")} == \
        {"search": "quantized", "searched": "quantized", "readable": 6, "shortlist": 4, "pool": 2}
    json.dumps(ran.config)  # a trace holds it
    deep = channel.deeper(5, exact=True).run(query)
    assert [i.chunk_id for i in deep.items][:2] == ["x@v1#0", "b@v1#0"] and deep.config["searched"] == "exact scan"
    assert _deep_search(channel, query, {"x@v1#0"}) == (
        "dense rank 1 (top_k 1) in an exact search; the channel's bounded or approximate search "
        "dropped it (its shortlist: see the stage's config)")
    assert _deep_search(channel, query, {"d@v1#0"}) == "dense rank 5 (top_k 1)"  # x b a c d e
    assert channel.deeper(1).run(query).config["searched"] == "quantized"  # governance's probe: the channel's own


def test_a_filtered_principal_over_a_mostly_restricted_store_gets_a_shortlist_of_its_own_rows(hand, monkeypatch):
    """a, b and c (Hamming distance 1 from Q) are staff's; the public principal reads d (2),
    e (1) and x (3). A shortlist of 2 is cut among the public rows: e, then d at the cut
    distance 2, never the nearer staff rows; the int8 pool of 1 keeps d."""
    _x(hand)
    for doc in "abc":
        revoked = dataclasses.replace(hand.version(doc, "v1").document, acl=("staff",))
        with hand.transaction():
            hand.update_attributes(revoked)
    index = QuantizedIndex.load(hand, SPACE.id, 4)
    allowed = index.allowed(PUBLIC)[:index.size]
    assert allowed.tolist() == [False, False, False, True, True, True]
    assert index._shortlist(index.hamming(Q)[:index.size], allowed, 2).tolist() == [3, 4]  # d, e
    monkeypatch.setattr(QuantizedIndex, "sizes", lambda self, readable, k: (1, 2))
    assert index.search(Q, PUBLIC, 1) == ([("d@v1#0", 0.0)], {"readable": 3, "shortlist": 2, "pool": 1})
    # staff: a, b and c, all at distance 1, all pass; b has the best estimate
    assert index.search(Q, ("staff",), 1) == ([("b@v1#0", float(F(0.8)))], {"readable": 3, "shortlist": 3, "pool": 1})


def test_auto_chooses_the_bounded_index_above_the_threshold(small, monkeypatch):
    store, encoder, _ = small
    count = store.vector_count(store.active_space().id)
    monkeypatch.setattr(dense_stage, "EXACT_UP_TO", count - 1)
    channel = DenseRetriever(store, encoder, top_k=3)
    assert isinstance(channel.index(), QuantizedIndex)
    assert channel.run(Query("q", "refund", Principal("p", PUBLIC))).config["searched"] == "quantized"
    monkeypatch.setattr(dense_stage, "EXACT_UP_TO", count)
    channel = DenseRetriever(store, encoder, top_k=3)
    assert channel.run(Query("q", "refund", Principal("p", PUBLIC))).config["searched"] == "exact"


def test_the_bounded_index_follows_a_switch_and_a_rollback(tmp_path):
    from ragdx.build import build_ingestor
    from ragdx.config import load_settings
    from ragdx.index import versions as indexing
    from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
    from ragdx.ingest.embed import Embedder
    from tests.stages.conftest import make_corpus
    encoder = HashingEncoder(dim=128)
    store = SQLiteStore(tmp_path / "store.db")
    build_ingestor(store, load_settings(overrides=["rerank.method=none", "chunking.tokenizer=regex"]),
                   encoder).run(make_corpus(tmp_path / "corpus"))
    channel = DenseRetriever(store, encoder, top_k=50, search="quantized")
    query = Query("q", "refunds accepted within 30 days", Principal("p", PUBLIC))
    space = store.active_space().id

    def served() -> set[str]:
        return {i.chunk_id for i in channel.run(query).items}

    def readable() -> set[str]:
        return {c.id for c in store.chunks() if c.duplicate_of is None and "public" in store.version(
            c.doc_id, c.version).document.acl}

    live = served()
    assert live and live == readable() & set(store.vector_table(space)[0])
    embedder = Embedder(encoder, backend="HashingEncoder")
    built = indexing.build_index(store, ChunkerConfig(max_tokens=12), RegexTokenCounter(),
                                 embedder=embedder)
    assert served() == live  # built beside the live index: nothing served changed
    indexing.switch_index(store, built.index_id, force=True, embedder=embedder)
    switched = served()
    assert switched == readable() and switched.isdisjoint(live)
    assert channel.index().rows == store.vector_count(space)
    indexing.rollback_index(store, embedder=embedder)
    assert served() == live


def test_a_search_reads_one_state_and_never_a_row_id_another_chunk_reused(hand):
    index = QuantizedIndex.load(hand, SPACE.id, 4)
    held = index._rows
    dead, codes = held.dead.copy(), held.codes.copy()
    # e (the newest row) deleted and z added: SQLite gives z's chunk e's row id
    with hand.transaction():
        hand.delete_document("e")
    put(hand, "z", [1, 0, 0, 0])
    assert hand.vectors_at(SPACE.id, [5])[5][:3] == ("z@v1#0", "z", "v1")
    # not refreshed: the index still holds row 5 as e's; the store's row 5 is z's, not returned
    assert index.nearest(Q, PUBLIC, 9) == [("b@v1#0", float(F(0.8))), ("a@v1#0", float(F(0.6))),
                                           ("c@v1#0", float(F(0.6))), ("d@v1#0", 0.0)]
    index.refresh()
    assert index.nearest(Q, PUBLIC, 1) == [("z@v1#0", 1.0)]
    # the refresh built a new state: the one a search in progress holds is as it was
    assert index._rows is not held and (held.dead == dead).all() and (held.codes == codes).all()
    assert held.size == 5 and index.size == 6


def test_a_resumed_run_reuses_the_dense_list_whose_config_holds_what_its_query_ran(small):
    from ragdx.build import build_pipeline
    from ragdx.types import StageKind
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    base = pipeline.run(Query("q", "refunds accepted within 30 days", Principal("p", PUBLIC)))
    assert base.stage("dense").config["searched"] == "exact" and "searched" not in next(c for c in pipeline.channels if c.name == "dense").config
    again = pipeline.resume(base, StageKind.RETRIEVAL)
    assert again.stage("dense") is base.stage("dense")


@pytest.mark.parametrize("kept, held", [(4_096, (5, 4)), (0, (4, 4))])
def test_dead_rows_are_kept_up_to_dead_kept_then_everything_is_read_again(hand, monkeypatch, kept, held):
    """One deletion leaves one dead row of five: kept under the default (4,096, an eighth of the
    rows being 0 here), read again in full when no dead row may be kept."""
    monkeypatch.setattr(QuantizedIndex, "DEAD_KEPT", kept)
    index = QuantizedIndex.load(hand, SPACE.id, 4)
    with hand.transaction():
        hand.delete_document("b")
    index.refresh()
    assert (index.size, index.rows) == held
    assert [c for c, _ in index.nearest(Q, PUBLIC, 2)] == ["a@v1#0", "c@v1#0"]
