"""BM25 and dense channels: OR semantics, FTS5 syntax safety, permissions, spaces, freshness."""

import pytest

from ragdx.errors import SpaceMismatchError
from ragdx.ingest.ingestor import delete_documents
from ragdx.build import build_ingestor, build_pipeline
from ragdx.stages.bm25 import BM25Retriever, query_terms
from ragdx.store.sqlite import match_expression
from ragdx.stages.dense import DenseRetriever
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import Principal, Query
from tests.conftest import write

PUBLIC = Principal("alice", ("public",))
STAFF = Principal("sam", ("public", "staff"))


def ask(text, principal=PUBLIC):
    return Query("q", text, principal)


def test_match_expression_quotes_every_term():
    assert query_terms('What does "RFD-4021" mean? NEAR(a b) * -x col:val AND') == [
        "what", "does", "rfd", "4021", "mean", "near", "a", "b", "x", "col", "val", "and"]
    assert match_expression(query_terms('say "hi"')) == '"say" OR "hi"'
    assert match_expression(query_terms("?! *")) is None
    assert match_expression(['a"b']) == '"a""b"'


def test_bm25_or_semantics_and_syntax_never_breaks(small):
    store, _, _ = small
    bm25 = BM25Retriever(store)
    # an AND query would need every word; OR finds the chunk with the rare terms
    top = bm25.run(ask("Which unknownword does refund error RFD-4021 mean")).items[0]
    assert top.doc_id == "errors.md"
    hostile = ['"', "*", "NEAR(refund", 'refund" OR "x', "-refund", "refund:", "AND OR NOT", "(((",
               "^refund", "{refund}", "refund*", "'; DROP TABLE chunks; --", "\u0000refund"]
    for text in hostile:
        result = bm25.run(ask(text))  # no exception
        assert all(item.doc_id != "runbook.md" for item in result.items)
    assert bm25.run(ask("refund:")).items, "syntax characters are ignored, the word is searched"
    assert bm25.run(ask("?!")).items == ()


def test_restricted_chunk_never_reaches_a_public_principal(small):
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    question = "What is the secret override code for refunds above 500 EUR approval?"
    public = pipeline.run(ask(question, PUBLIC))
    for stage in public.ranked:
        seen = [i.doc_id for i in stage.items] + [d.doc_id for d in stage.dropped]
        assert "runbook.md" not in seen, stage.stage
    assert all(u.doc_id != "runbook.md" for u in public.context.units)
    assert "OVERRIDE-77" not in public.answer.text
    staff = pipeline.run(ask(question, STAFF))
    assert staff.stage("bm25").items[0].doc_id == "runbook.md"
    assert staff.stage("dense").items[0].doc_id == "runbook.md"


def test_dense_query_against_another_space_is_refused(small):
    store, encoder, _ = small
    other = HashingEncoder(dim=128, seed=1)  # same dimension, different space
    with pytest.raises(SpaceMismatchError, match=r"weights_hash: 'seed1' vs 'seed0'.*the retrieval.dense settings "
                       r"the store was ingested with"):
        DenseRetriever(store, other).run(ask("refund"))
    prompt = HashingEncoder(dim=128, query_prefix="query: ")
    with pytest.raises(SpaceMismatchError, match="query_prefix"):
        DenseRetriever(store, prompt).run(ask("refund"))
    # and an ingest with another space is refused before anything is written
    before = store.index_version
    with pytest.raises(SpaceMismatchError):
        build_ingestor(store, small[2], other).run(store.path.parent / "corpus" / "manifest.jsonl")
    assert store.index_version == before


def test_chunk_longer_than_the_window_is_flagged_with_its_offset(tmp_path):
    from ragdx.config import load_settings
    from ragdx.store.sqlite import SQLiteStore
    words = " ".join(f"w{i}" for i in range(60))
    write(tmp_path / "long.md", words)
    write(tmp_path / "m.jsonl", '{"doc_id": "long", "path": "long.md"}\n')
    encoder = HashingEncoder(dim=32, max_tokens=22)  # reads 20 tokens
    settings = load_settings(overrides=["chunking.tokenizer=regex", "chunking.max_tokens=100"])
    with SQLiteStore(tmp_path / "s.db") as store:
        report = build_ingestor(store, settings, encoder).run(tmp_path / "m.jsonl")
        assert report.embedding.truncated == 1
        chunk = store.chunks("long")[0]
        end = store.window_end(encoder.space.id, chunk.id)
        assert chunk.text[:end] == " ".join(f"w{i}" for i in range(20))  # the window's last word


def test_chunker_respects_the_encoder_window_by_default(tmp_path):
    from ragdx.config import load_settings
    from ragdx.store.sqlite import SQLiteStore
    write(tmp_path / "long.md", " ".join(f"w{i}." for i in range(300)))
    write(tmp_path / "m.jsonl", '{"doc_id": "long", "path": "long.md"}\n')
    encoder = HashingEncoder(dim=32, max_tokens=64)
    settings = load_settings(overrides=["chunking.max_tokens=50", "retrieval.dense.with_prefix=false"])
    with SQLiteStore(tmp_path / "s.db") as store:
        report = build_ingestor(store, settings, encoder).run(tmp_path / "m.jsonl")
        assert report.embedding.truncated == 0
        assert {c.config_id for c in store.chunks()} and all(
            encoder.count(c.text) <= 50 for c in store.chunks())


def test_edit_and_delete_are_visible_to_the_next_query(small, tmp_path):
    store, encoder, settings = small
    pipeline = build_pipeline(store, settings, encoder=encoder)
    assert pipeline.run(ask("parcels delivered business days")).stage("bm25").items[0].doc_id == "shipping.md"
    dense_before = pipeline.run(ask("parcels delivered business days")).stage("dense").items[0]
    assert dense_before.doc_id == "shipping.md"
    # edit: new content, new version; the old version stays searchable but is superseded
    corpus = store.path.parent / "corpus"
    write(corpus / "shipping.md", "# Shipping\n\nParcels now arrive by drone within 2 hours.")
    build_ingestor(store, settings, encoder).run(corpus / "manifest.jsonl")
    after = pipeline.run(ask("drone"))
    assert after.stage("bm25").items[0].doc_id == "shipping.md"
    assert after.stage("dense").items[0].version != dense_before.version
    # delete: gone from both channels at once
    delete_documents(store, ["shipping.md"])
    gone = pipeline.run(ask("parcels drone delivered shipping"))
    for stage in gone.ranked:
        assert all(i.doc_id != "shipping.md" for i in stage.items), stage.stage


def test_unchanged_content_is_not_re_encoded(small):
    store, encoder, settings = small
    corpus = store.path.parent / "corpus"
    calls = encoder.calls
    again = build_ingestor(store, settings, encoder).run(corpus / "manifest.jsonl")
    assert encoder.calls == calls and again.embedding.encoded == 0  # nothing parsed, nothing encoded
    assert {a.action for a in again.actions} == {"unchanged"} and again.chunks == len(store.chunks())
    # a new version that changes one section: only that section's chunk is encoded
    text = (corpus / "refund.md").read_text()
    write(corpus / "refund.md", text.replace("within 90 days", "within 120 days"))
    edit = build_ingestor(store, settings, encoder).run(corpus / "manifest.jsonl")
    assert [a.action for a in edit.actions if a.doc_id == "refund.md"] == ["add"]
    # only refund.md is read again; of its two chunks (one per section) only the edited one is new
    assert len(store.chunks("refund.md", store.latest("refund.md").document.version)) == 2
    assert (edit.embedding.encoded, edit.embedding.reused) == (1, 1)
    # and of the statement vectors, the edited chunk's one statement (the other chunk's are reused)
    said = edit.embedding.statements
    assert (said.chunks, said.encoded, said.reused) == (2, 1, 1)
    assert encoder.calls == calls + 1 + 1


def test_hnsw_search_matches_exact_on_a_small_index_and_filters_access(small):
    pytest.importorskip("hnswlib")
    store, encoder, _ = small
    exact = DenseRetriever(store, encoder, top_k=5)
    approx = DenseRetriever(store, encoder, top_k=5, search="hnsw")
    for principal in (PUBLIC, STAFF):
        q = ask("refund approval team lead override code", principal)
        e, a = exact.run(q), approx.run(q)
        assert [c.chunk_id for c in a.items] == [c.chunk_id for c in e.items]
        assert [round(c.score, 5) for c in a.items] == [round(c.score, 5) for c in e.items]
        if principal is PUBLIC:
            assert all(c.doc_id != "runbook.md" for c in a.items)
    assert approx.config["search"] == "hnsw"


def test_bm25_finds_readable_items_below_many_unreadable_ones(tmp_path):
    from ragdx.config import load_settings
    from ragdx.store.sqlite import SQLiteStore
    lines = []
    for i in range(300):  # staff-only documents that match better than the public one
        write(tmp_path / f"s{i}.md", f"override override override code {i}")
        lines.append(f'{{"doc_id": "s{i}", "path": "s{i}.md", "acl": ["staff"]}}')
    write(tmp_path / "p.md", "The override code is printed on the receipt, next to other long words.")
    lines.append('{"doc_id": "p", "path": "p.md"}')
    write(tmp_path / "m.jsonl", "\n".join(lines) + "\n")
    settings = load_settings(overrides=["retrieval.dense.enabled=false"])
    with SQLiteStore(tmp_path / "s.db") as store:
        build_ingestor(store, settings).run(tmp_path / "m.jsonl")
        found = BM25Retriever(store, top_k=3).run(ask("override code"))
        assert [c.doc_id for c in found.items] == ["p"]
        staff = BM25Retriever(store, top_k=3).run(ask("override code", STAFF))
        assert len(staff.items) == 3 and all(c.doc_id.startswith("s") for c in staff.items)


def test_a_deeper_copy_shares_the_loaded_vectors(small):
    store, encoder, _ = small
    dense = DenseRetriever(store, encoder, top_k=2)
    probe = dense.deeper(1)                      # made before any query, as governance makes it
    assert [c.chunk_id for c in probe.run(Query("q", "refund", PUBLIC)).items] == \
        [c.chunk_id for c in dense.run(Query("q", "refund", PUBLIC)).items][:1]
    assert probe.index() is dense.index()
