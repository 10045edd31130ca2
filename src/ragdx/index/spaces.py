"""The dense index as a maintained data product: build a new embedding space beside the active
one, verify it, switch to it, and roll back if needed.

A space moves ``building`` -> ``built`` -> ``verified`` -> ``active`` -> ``retired``. Only one
space is active; the dense channel searches nothing else. Deletions reach every space at once
(vectors are deleted with their chunks) and access groups are read live from the store, so a
rollback never brings back a deleted document or a revoked permission.
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace

import numpy as np

from ragdx.errors import ConfigError, InputError
from ragdx.ingest.embed import EmbedStats, Embedder, fill_statements, passage_input
from ragdx.protocols import WritableStore
from ragdx.types import SpaceState

log = logging.getLogger("ragdx.index")


def build_space(store: WritableStore, embedder: Embedder) -> EmbedStats:
    """Embed every chunk that has no vector in the embedder's space yet (reusing vectors of
    identical inputs), beside whatever space is active, then the statements of every chunk that
    has no statement vectors there (where the store keeps them: :func:`fill_statements`, their
    figures in the result's ``statements``). A new space ends ``built``."""
    space = embedder.space
    todo = store.chunks_without_vectors(space.id)
    log.info("building space %s: %d chunks to embed", space.id, len(todo))
    rows, stats = embedder.run(store, todo)
    with store.transaction():
        store.register_space(space, embedder.backend)
        store.write_vectors(space.id, rows)
        if store.space_state(space.id) is SpaceState.BUILDING:
            store.set_space_state(space.id, SpaceState.BUILT, f"{len(rows)} vectors")
    return replace(stats, statements=fill_statements(store, embedder))


def verify_space(store: WritableStore, space_id: str, embedder: Embedder | None = None,
                 sample: int = 16, seed: int = 0) -> list[str]:
    """Check a space: every chunk has a vector of the right dimension and norm, and (with an
    embedder of the same space) a random sample re-encodes to the stored vectors. FTS5's own
    integrity check runs too. Marks a ``built`` space ``verified`` when nothing is wrong.

    Returns:
        The problems found (empty when the space is sound).
    """
    spaces = {s.id: (s, state) for s, _, state, _ in store.spaces()}
    if space_id not in spaces:
        raise InputError(f"no embedding space {space_id!r}; spaces: {sorted(spaces) or 'none'}")
    space, state = spaces[space_id]
    problems = []
    missing = store.chunks_without_vectors(space_id)
    if missing:
        problems.append(f"{len(missing)} chunks have no vector in {space_id} (first: {missing[0].id})")
    ids, _, blobs, _ = store.vector_table(space_id)
    bad_dim = [cid for cid, blob in zip(ids, blobs) if len(blob) != 4 * space.dim]
    if bad_dim:
        problems.append(f"{len(bad_dim)} vectors are not of dimension {space.dim} (first: {bad_dim[0]})")
    elif ids and space.normalized:
        norms = np.linalg.norm(np.frombuffer(b"".join(blobs), np.float32).reshape(len(ids), space.dim), axis=1)
        off = int(np.sum(np.abs(norms - 1.0) > 1e-3))
        if off:
            problems.append(f"{off} vectors are not unit-length in a normalised space")
    if embedder is not None and ids and not bad_dim:
        if embedder.space.id != space_id:
            raise ConfigError(f"the encoder's space {embedder.space.id} is not {space_id}: it cannot "
                              "re-check that space's vectors")
        picked = random.Random(seed).sample(range(len(ids)), min(sample, len(ids)))
        chunks = store.chunks_by_id([ids[i] for i in picked])
        texts = [passage_input(chunks[ids[i]], embedder.with_prefix)[0] for i in picked]
        fresh = embedder.encoder.encode(texts, kind="passage").vectors
        stored = np.stack([np.frombuffer(blobs[i], np.float32) for i in picked])
        worst = float(np.min(np.sum(fresh * stored, axis=1) /
                             (np.linalg.norm(fresh, axis=1) * np.linalg.norm(stored, axis=1) + 1e-12)))
        if worst < 0.999:
            problems.append(f"re-encoding {len(picked)} sampled chunks gives other vectors (lowest "
                            f"cosine {worst:.4f}): the encoder is not the one that built {space_id}")
    problems += store.fts_problems()
    if not problems and state is SpaceState.BUILT:
        with store.transaction():
            store.set_space_state(space_id, SpaceState.VERIFIED, "verify passed")
    return problems


def switch_space(store: WritableStore, space_id: str, *, force: bool = False) -> None:
    """Make a verified space the active one; the previously active space is retired."""
    state = store.space_state(space_id)
    if state is None:
        raise InputError(f"no embedding space {space_id!r}")
    if state is SpaceState.ACTIVE:
        return
    if state not in (SpaceState.VERIFIED, SpaceState.RETIRED) and not force:
        raise InputError(f"space {space_id} is {state}, not verified: run 'ragdx index verify' first "
                         "(or switch with --force)")
    missing = store.chunks_without_vectors(space_id)
    if missing and not force:  # the chunks changed since it was verified (an index switch)
        raise InputError(f"space {space_id} has no vector for {len(missing)} chunks of the live index (first: "
                         f"{missing[0].id}): build it again ('ragdx index build'), verify it, then switch "
                         "(or switch with --force)")
    with store.transaction():
        active = store.active_space()
        if active is not None:
            store.set_space_state(active.id, SpaceState.RETIRED, f"replaced by {space_id}")
        store.set_space_state(space_id, SpaceState.ACTIVE, f"switched from {active.id if active else 'none'}")


def rollback_space(store: WritableStore) -> str:
    """Re-activate the most recently retired space. Chunks added since it was retired have no
    vector there: they are reported (build the space again to add them).

    Returns:
        The re-activated space's id.
    """
    retired = [e for e in reversed(store.log_entries()) if e.op == "space" and "-> retired" in e.detail]
    if not retired:
        raise InputError("no retired embedding space to roll back to")
    space_id = retired[0].detail.split(" ", 1)[0]
    switch_space(store, space_id, force=True)
    missing = store.chunks_without_vectors(space_id)
    if missing:
        log.warning("rolled back to %s; %d chunks added since have no vector there (run 'ragdx index "
                    "build' with that space's settings)", space_id, len(missing))
    return space_id
