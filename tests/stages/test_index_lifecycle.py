"""Embedding spaces: build beside, verify, switch, rollback; deletions and revocations stay."""

import json

import pytest

from ragdx.errors import InputError, SpaceMismatchError
from ragdx.index import spaces as index
from ragdx.ingest.embed import Embedder
from ragdx.ingest.ingestor import delete_documents
from ragdx.build import build_ingestor, build_pipeline
from ragdx.stages.dense import DenseRetriever
from ragdx.testing.encoders import HashingEncoder
from ragdx.types import Principal, Query
from tests.conftest import write

Q = Query("q", "refund window delivery", Principal("sam", ("public", "staff")))


def test_build_verify_switch_rollback(small):
    store, old_encoder, settings = small
    old = old_encoder.space.id
    new_encoder = HashingEncoder(dim=96, seed=3)
    stats = index.build_space(store, Embedder(new_encoder))
    assert stats.encoded == stats.chunks == len([c for c in store.chunks() if not c.duplicate_of])
    states = {s.id: state for s, _, state, _ in store.spaces()}
    assert states == {old: "active", new_encoder.space.id: "built"}
    # the dense channel still searches the old space only; the new encoder is refused until switch
    with pytest.raises(SpaceMismatchError):
        DenseRetriever(store, new_encoder).run(Q)
    with pytest.raises(InputError, match="not verified"):
        index.switch_space(store, new_encoder.space.id)
    assert index.verify_space(store, new_encoder.space.id, Embedder(new_encoder)) == []
    index.switch_space(store, new_encoder.space.id)
    assert store.active_space().id == new_encoder.space.id
    assert DenseRetriever(store, new_encoder).run(Q).items

    # delete a document and revoke access to another, then roll back to the old space
    delete_documents(store, ["shipping.md"])
    corpus = store.path.parent / "corpus"
    lines = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines()]
    for line in lines:
        if line["doc_id"] == "refund.md":
            line["acl"] = ["staff"]
    write(corpus / "manifest.jsonl", "\n".join(json.dumps(x) for x in lines if x["doc_id"] != "shipping.md"))
    build_ingestor(store, settings, new_encoder).run(corpus / "manifest.jsonl")
    assert index.rollback_space(store) == old
    public = DenseRetriever(store, old_encoder).run(Query("q", "refund delivery parcels", Principal()))
    docs = {c.doc_id for c in public.items}
    assert "shipping.md" not in docs      # the deletion stays deleted
    assert "refund.md" not in docs        # the revocation stays revoked
    assert "errors.md" in docs


def test_verify_catches_a_wrong_encoder_and_missing_vectors(small):
    store, encoder, _ = small
    sid = encoder.space.id
    assert index.verify_space(store, sid, Embedder(encoder)) == []
    impostor = HashingEncoder(dim=128, seed=0)
    impostor.encode = lambda texts, kind="passage": HashingEncoder(dim=128, seed=9).encode(texts, kind=kind)
    problems = index.verify_space(store, sid, Embedder(impostor))
    assert problems and "re-encoding" in problems[0]
    store._db.execute("DELETE FROM vectors WHERE rowid IN (SELECT rowid FROM vectors LIMIT 1)")
    assert "1 chunks have no vector" in index.verify_space(store, sid)[0]


def test_pipeline_runs_after_switch(small):
    store, _, settings = small
    new_encoder = HashingEncoder(dim=64, seed=5)
    index.build_space(store, Embedder(new_encoder))
    index.switch_space(store, new_encoder.space.id, force=True)
    trace = build_pipeline(store, settings, encoder=new_encoder).run(Q)
    assert trace.stage("dense").config["space"] == new_encoder.space.id
