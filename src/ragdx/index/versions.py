"""Every index built beside the live one: a new chunker config, parser version or keyword setting
makes a new index version (docs/ingest.md, "Index versions"), held in the store beside the live
index and invisible to queries; :func:`verify_index` checks it, :func:`switch_index` makes it live
in one transaction, and :func:`rollback_index` returns to the version it replaced.

What a version holds is its chunks, sections, parses and vectors. Documents, access groups,
statuses and tombstones are the store's own and live in every version: a document deleted is
gone from every version at once (the staged rows cascade with it), an access change is read
from the one ACL table, and a version ingested after a version was built is chunked with that
version's settings when it is switched to. So a switch or a rollback never brings back a deleted
document or a revoked permission, and every switch logs one change of no document, which drops
every cached result and rebuilds the keyword mirror.

Kept: the live version, the one it replaced (the rollback target), and a version being built
(or whose build was stopped: building again with its settings continues it); a switch drops
every other. Retention: a version's ``retain_superseded`` is how many superseded or expired versions
of each document stay indexed (searchable by a question naming them, and counted in BM25's N,
average length and document frequencies); the others leave the live index at each ingest and
switch, their text still stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ragdx._faults import fault_point
from ragdx.errors import ConfigError, InputError, StoreError
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter, StructureChunker, TokenCounter
from ragdx.ingest.embed import EmbedStats, Embedder
from ragdx.ingest.parsers import parse, parser_id
from ragdx.index import checks
from ragdx.protocols import IndexBuildStore
from ragdx.store.staging import index_settings
from ragdx.store.vectors import check_space
from ragdx.types import DocStatus, IndexSettings, IndexVersion, Query, SpaceState, StoredVersion

__all__ = ["IndexBuild", "IndexCheck", "build_index", "verify_index", "switch_index", "rollback_index",
           "rollback_target", "needs_embedder"]

log = logging.getLogger("ragdx.index")

#: Versions parsed and chunked, and chunks embedded, per transaction of a build (a killed build
#: keeps what it committed).
BATCH = 200


@dataclass(frozen=True, slots=True)
class IndexBuild:
    """What :func:`build_index` did: versions parsed and chunked, copied from the live index
    (same chunker and parser), held without chunks (retention), and the chunks the version holds."""

    index_id: str
    chunked: int
    copied: int
    unindexed: int
    chunks: int
    embedding: EmbedStats | None
    seconds: float
    state: SpaceState


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """What :func:`verify_index` found: problems (each one blocks the switch), and notes."""

    index_id: str
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    state: SpaceState


def _building(store: object) -> IndexBuildStore:
    """The store, when index versions can be built in it (:class:`ragdx.protocols.IndexBuildStore`)."""
    if not isinstance(store, IndexBuildStore):
        raise StoreError(f"{type(store).__name__} keeps no index versions (ragdx.protocols.IndexBuildStore): "
                         "build a new store beside it and move readers to it once it is checked")
    return store


def build_index(store: IndexBuildStore, config: ChunkerConfig, counter: TokenCounter, *,
                embedder: Embedder | None = None, retain_superseded: int | None = None,
                retain_all: bool = False, batch: int = BATCH) -> IndexBuild:
    """Build an index version beside the live one: every stored version parsed by today's parsers
    and chunked with ``config`` (copied from the live index where it already is), held out of
    queries until :func:`switch_index`. Building again with the same settings continues a build
    that was stopped, and adds the versions ingested since.

    Args:
        store: the store.
        config: the chunker's settings.
        counter: the token counter ``config.tokenizer`` names.
        embedder: the active space's embedder (needed when the store has an active space).
        retain_superseded: superseded or expired versions of a document kept indexed (None: as
            the live index keeps them).
        retain_all: keep every superseded and expired version indexed (overrides the above).
        batch: versions chunked, and chunks embedded, per committed transaction.

    Raises:
        InputError: the live index already has these settings; a negative retention.
        ConfigError: the store has an active embedding space and no embedder is given, or the
            counter is not the one the config names.
        StoreError: the store keeps no index versions, or the version was dropped while it was built.
    """
    started = time.perf_counter()
    store = _building(store)
    if retain_all:
        retain_superseded = None
    elif retain_superseded is None:
        retain_superseded = store.live_index().retain_superseded
    if retain_superseded is not None and retain_superseded < 0:
        raise InputError(f"retain_superseded must be 0 or more, not {retain_superseded}", field="retain")
    if counter.name != config.tokenizer:
        raise ConfigError(f"the chunker counts in {config.tokenizer!r} but the counter is {counter.name!r}")
    parsers = _parsers(store)
    settings = index_settings(config.to_json(), parsers, retain_superseded)
    live = store.live_index()
    if settings == live.settings or (live.settings.chunker is None and settings == _as_ingested(store, live)):
        raise InputError(f"the live index {live.id} already has these settings: nothing to build "
                         "(change chunking.*, --retain, or the parsers)")
    embedder = _check_embedder(store, embedder, "index build")
    with store.transaction():
        # a build with the settings of a version under way continues it; the live version's and
        # the retired one's (the rollback target) are never rebuilt in place: a new version
        same = [v for v in store.index_versions(counted=False) if v.settings == settings
                and v.state not in (SpaceState.ACTIVE, SpaceState.RETIRED)]
        index_id = same[0].id if same else store.register_index(settings)
        store.set_index_state(index_id, SpaceState.BUILDING)
    indexed = _indexed(store, retain_superseded)
    todo = store.unstaged_versions(index_id)
    with store.transaction():
        _still_there(store, index_id)
        copied = store.stage_from_live(index_id, config.to_json(), sorted(parsers.items()),
                                       [(v.document.doc_id, v.document.version) for v in todo
                                        if (v.document.doc_id, v.document.version) in indexed])
    chunked, unindexed = _stage(store, index_id, store.unstaged_versions(index_id), config, counter, indexed,
                                batch)
    embedding = _embed(store, index_id, embedder, batch)
    with store.transaction():
        _still_there(store, index_id)
        store.set_index_state(index_id, SpaceState.BUILT, was=SpaceState.BUILDING)
    built = _version(store, index_id)
    log.info("index %s built: %d versions chunked, %d copied, %d unindexed", index_id, chunked, copied, unindexed)
    return IndexBuild(index_id, chunked, copied, unindexed, built.chunks, embedding,
                      time.perf_counter() - started, built.state)


def verify_index(store: IndexBuildStore, index_id: str, queries: Sequence[Query] = (), *,
                 probes: int = 32, slowdown: float = 2.0) -> IndexCheck:
    """Check an index version built beside the live one, and mark it ``verified`` when nothing
    is wrong:

    - coverage: every current version is in it (with chunks);
    - vectors: every chunk has one in the active space;
    - the store's own invariants, on a copy of the store with this version live (each chunk's
      text is its span of its version's parsed text, FTS5's integrity check);
    - latency: BM25's median time per question against the live index's (a problem when slower
      than ``slowdown`` times the live median plus 10 ms);
    - permission probes: the text of up to ``probes`` chunks of versions the ``public`` group
      may not read, asked as ``public``, returns none of them;
    - the query set's required spans (and restricted ones) that resolve to chunks in the live
      index resolve to chunks in this one.

    Raises:
        InputError: no such index version, or it is the live one (audit that with ``--live``).
    """
    store = _building(store)
    target = _version(store, index_id)
    if target.state is SpaceState.ACTIVE:
        raise InputError(f"{index_id} is the live index: audit it with 'ragdx index verify --live'")
    problems, notes = [], []
    missing = [v for v in store.unstaged_versions(index_id) if v.document.status is DocStatus.CURRENT]
    if missing:
        first = missing[0].document
        problems.append(f"coverage: {len(missing)} current versions are not in {index_id} (first: "
                        f"{first.doc_id}@{first.version}); build it again with the same settings to add them")
    active = store.active_space()
    if active is not None:
        lacking = store.staged_chunks(index_id, without_vector_in=active.id)
        if lacking:
            problems.append(f"vectors: {len(lacking)} chunks have no vector in the active space {active.id} "
                            f"(first: {lacking[0].id})")
    with store.materialized(index_id) as shadow:
        problems += [f"store check of {index_id}: {p}" for p in shadow.verify()]
        problems += checks.latency(store, shadow, queries, slowdown, notes)
        problems += checks.permission_probes(store, shadow, probes, notes)
        problems += checks.spans(store, shadow, queries, notes)
    with store.transaction():
        if not problems:  # only a version nobody rebuilt meanwhile: it is still 'built'
            store.set_index_state(index_id, SpaceState.VERIFIED, was=SpaceState.BUILT)
        else:  # a failed check takes back an earlier 'verified'
            store.set_index_state(index_id, SpaceState.BUILT, was=SpaceState.VERIFIED)
    return IndexCheck(index_id, tuple(problems), tuple(notes), _version(store, index_id).state)


def switch_index(store: IndexBuildStore, index_id: str, *, force: bool = False,
                 counter: TokenCounter | None = None, embedder: Embedder | None = None) -> str:
    """Make an index version live in one transaction; the live one is retired (kept for a
    rollback) and every other version is dropped, except one being built. Versions ingested since the version was built
    are parsed and chunked with its settings first (``counter`` counts in its tokenizer: needed
    when that is not words and punctuation), inside the same transaction, and the retention of
    the version is applied. An embedding space that is not active and lacks vectors of the new
    live chunks goes back from ``verified`` to ``built`` (verify it again).

    Returns:
        The id of the version replaced.

    Raises:
        InputError: no such version, or it is not verified (without ``force``).
        ConfigError: chunks need vectors in the active space and no embedder is given.
    """
    store = _building(store)
    with store.transaction():  # checks, versions added since, the swap and the retention: all or nothing
        target = _version(store, index_id, counted=False)
        if target.state is SpaceState.ACTIVE:
            return index_id
        if target.state not in (SpaceState.VERIFIED, SpaceState.RETIRED) and not force:
            raise InputError(f"index {index_id} is {target.state}, not verified: run 'ragdx index verify "
                             f"--index {index_id}' first (or switch with --force)")
        if target.state is SpaceState.BUILDING:
            raise InputError(f"index {index_id} is being built, or its build was stopped: build it to the end "
                             "('ragdx index build --chunks' with its settings) before switching to it")
        todo = store.unstaged_versions(index_id)
        if todo:
            config = _config_of(store, target)
            _stage(store, index_id, todo, config, _counter(config, counter),
                   _indexed(store, target.retain_superseded), BATCH)
        _embed(store, index_id, embedder, BATCH)
        old = store.switch_index(index_id)
        _demote_spaces(store, index_id)
        store.apply_retention()
    log.info("index %s is live (was %s)", index_id, old)
    return old


def drop_index(store: IndexBuildStore, index_id: str) -> IndexVersion:
    """Delete an index version that is not live: a build stopped half-way, a version that failed
    its verify, or the retired one (then there is no rollback). A build of it still running in
    another process stops at its next step, saying so.

    Returns:
        The version dropped, with the counts it had.

    Raises:
        InputError: no such version, or it is the live one.
    """
    store = _building(store)
    with store.transaction():
        target = _version(store, index_id)
        if target.state is SpaceState.ACTIVE:
            raise InputError(f"index {index_id} is live (queries search it): switch to another version "
                             "before dropping it")
        store.drop_index(index_id)
    log.info("index %s dropped (%s, %d chunks)", index_id, target.state, target.chunks)
    return target


def rollback_index(store: IndexBuildStore, *, counter: TokenCounter | None = None,
                   embedder: Embedder | None = None) -> str:
    """Return to the index version the live one replaced (see :func:`switch_index`): deletions,
    access and status changes made since are the store's own, so they hold after it.

    Returns:
        The id of the version now live.
    """
    target = rollback_target(store)
    switch_index(store, target, force=True, counter=counter, embedder=embedder)
    return target


def rollback_target(store: IndexBuildStore) -> str:
    """The index version a rollback returns to (the retired one)."""
    retired = [v for v in _building(store).index_versions(counted=False) if v.state is SpaceState.RETIRED]
    if not retired:
        raise InputError("no retired index version to roll back to ('ragdx index status' lists them)")
    return retired[-1].id


def needs_embedder(store: IndexBuildStore, index_id: str | None = None) -> bool:
    """Whether a build (``index_id`` None) or a switch to ``index_id`` makes chunks that need
    vectors in the store's active space: a build whenever there is one, a switch when versions
    were ingested since the build or chunks lack a vector. Only then need the encoder be loaded."""
    store = _building(store)
    active = store.active_space()
    if active is None or index_id is None:
        return active is not None
    return bool(store.unstaged_versions(index_id) or store.staged_chunks(index_id, without_vector_in=active.id))


# -- building blocks ------------------------------------------------------------------------
def _version(store: IndexBuildStore, index_id: str, counted: bool = True) -> IndexVersion:
    found = store.index_version_of(index_id, counted=counted)
    if found is None:
        raise InputError(f"no index version {index_id!r}; versions: "
                         f"{', '.join(v.id for v in store.index_versions(counted=False))}")
    return found


def _still_there(store: IndexBuildStore, index_id: str) -> None:
    """Inside a build's transaction: the version being built is still there."""
    if store.index_version_of(index_id, counted=False) is None:
        raise StoreError(f"index version {index_id} was dropped while it was being built (by another process): "
                         "nothing of it is left; build it again")


def _demote_spaces(store: IndexBuildStore, index_id: str) -> None:
    """After a switch: a verified space that is not active and lacks vectors of the new live
    chunks is no longer what was verified."""
    for space, _, state, _ in store.spaces():
        if state is SpaceState.VERIFIED:
            missing = len(store.chunks_without_vectors(space.id))
            if missing:
                store.set_space_state(space.id, SpaceState.BUILT, f"index switch to {index_id}: {missing} "
                                      "chunks have no vector here; build and verify the space again")


def _parsers(store: IndexBuildStore) -> dict[str, str]:
    """Today's parser of each format the store holds."""
    return {fmt: parser_id(fmt) for fmt in sorted({v.document.format for v in store.versions()})}


def _as_ingested(store: IndexBuildStore, live: IndexVersion) -> IndexSettings | None:
    """The settings the live index as ingested would have, if every version was chunked with one
    config and parsed by today's parsers (else None)."""
    rows = store.parse_configs()
    configs = {r[0] for r in rows}
    if len(configs) != 1 or any(parser_id(fmt) != parser for _, fmt, parser, _ in rows):
        return None
    return index_settings(configs.pop(), {fmt: parser for _, fmt, parser, _ in rows}, live.retain_superseded)


def _indexed(store: IndexBuildStore, retain: int | None) -> set[tuple[str, str]]:
    """The versions an index with this retention indexes: every current one, and the newest
    ``retain`` others of each document (all when None)."""
    out, others = set(), Counter()
    for stored in sorted(store.versions(), key=lambda v: -v.seq):
        doc = stored.document
        if doc.status is not DocStatus.CURRENT:
            others[doc.doc_id] += 1
            if retain is not None and others[doc.doc_id] > retain:
                continue
        out.add((doc.doc_id, doc.version))
    return out


def _config_of(store: IndexBuildStore, target: IndexVersion) -> ChunkerConfig:
    """The chunker config of an index version: its own, or (the first version, as ingested) the
    one most of its versions were chunked with."""
    recorded = target.settings.chunker
    if recorded is None:
        held = store.parse_configs(target.id)
        if not held:
            raise InputError(f"index {target.id} holds no version to take a chunker config from")
        recorded = held[0][0]
    config = ChunkerConfig.from_json(recorded)
    if json.loads(config.to_json()) != json.loads(recorded):
        raise ConfigError(f"index {target.id} was chunked by chunking algorithm {json.loads(recorded).get('algorithm')}, "
                          "which this ragdx no longer has: build a new index version instead")
    return config


def _counter(config: ChunkerConfig, counter: TokenCounter | None) -> TokenCounter:
    if config.tokenizer == RegexTokenCounter.name:
        return RegexTokenCounter()
    if counter is None or counter.name != config.tokenizer:
        raise ConfigError(f"versions ingested since this index version was built must be chunked counting in "
                          f"{config.tokenizer!r}: give the settings whose encoder that is")
    return counter


def _check_embedder(store: IndexBuildStore, embedder: Embedder | None, stage: str) -> Embedder | None:
    """The embedder of the store's active space, checked against it; None when the store has no
    active space."""
    active = store.active_space()
    if active is None:
        return None
    if embedder is None:
        raise ConfigError(f"{stage}: the store's active embedding space {active.id} ({active.model_id}) "
                          "serves dense retrieval, and new chunks need its vectors: run with the dense "
                          f"channel on (its model {active.model_id!r})")
    check_space(embedder.space, active, stage)
    return embedder


def _reparse(store: IndexBuildStore, stored: StoredVersion):
    """A stored version parsed again by today's parser: from its stored raw text, or (a PDF,
    whose raw text is extracted, not the file) from its file, which must still hold its bytes."""
    doc = stored.document
    if doc.format == "pdf":
        path = Path(doc.path)
        data = path.read_bytes() if path.is_file() else b""
        if hashlib.sha256(data).hexdigest() != doc.content_hash:
            raise InputError(f"{doc.doc_id}@{doc.version}: a PDF is parsed again from its file, which is "
                             "missing or holds other bytes now", file=str(path))
    else:
        data = store.texts(doc.doc_id, doc.version)[0].encode("utf-8")
    return parse(data, doc.format, doc.path)[1]


def _stage(store: IndexBuildStore, index_id: str, todo: Sequence[StoredVersion], config: ChunkerConfig,
           counter: TokenCounter, indexed: set[tuple[str, str]], batch: int) -> tuple[int, int]:
    """Parse and chunk ``todo`` into an index version (those ``indexed`` leaves out are held
    without chunks), committed every ``batch`` versions (joined to the caller's transaction
    when there is one); a version deleted since it was read is left out (it is in no version).
    Returns (versions chunked, versions held without chunks)."""
    chunker = StructureChunker(config, counter)
    config_json = config.to_json()
    chunked = unindexed = 0
    for i in range(0, len(todo), batch):
        prepared = []
        for stored in todo[i:i + batch]:
            doc = stored.document
            if (doc.doc_id, doc.version) in indexed:
                parsed = _reparse(store, stored)
                prepared.append((doc, parsed, chunker.run(doc, parsed)))
            else:
                prepared.append((doc, None, None))
        with store.transaction():
            _still_there(store, index_id)
            for doc, parsed, out in prepared:
                if store.version(doc.doc_id, doc.version) is None:
                    log.info("%s@%s was deleted while %s was built: left out", doc.doc_id, doc.version, index_id)
                elif out is None:
                    store.stage_unindexed(index_id, doc.doc_id, doc.version)
                    unindexed += 1
                else:
                    store.stage_version(index_id, doc.doc_id, doc.version, parsed, out.sections, out.chunks,
                                        config_json)
                    chunked += 1
        fault_point("staged")
    return chunked, unindexed


def _embed(store: IndexBuildStore, index_id: str, embedder: Embedder | None, batch: int) -> EmbedStats | None:
    """Vectors in the active space for the version's chunks that have none (reused by input),
    committed every ``batch`` chunks (joined to the caller's transaction when there is one)."""
    active = store.active_space()
    todo = store.staged_chunks(index_id, without_vector_in=active.id) if active is not None else []
    if not todo:
        return None
    made = _check_embedder(store, embedder, f"index {index_id}: {len(todo)} chunks without a vector")
    if made is None:  # no active space (todo would be empty): nothing to embed
        return None
    totals = [0, 0, 0, 0, 0.0]
    for i in range(0, len(todo), batch):
        rows, stats = made.run(store, todo[i:i + batch])
        with store.transaction():
            _still_there(store, index_id)
            store.stage_vectors(index_id, active.id, rows)
        fault_point("embedded")
        totals = [a + b for a, b in zip(totals, (stats.chunks, stats.encoded, stats.reused, stats.truncated,
                                                 stats.seconds))]
    return EmbedStats(*totals)
