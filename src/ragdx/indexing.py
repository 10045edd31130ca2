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

Kept: the live version and the one it replaced (the rollback target); a switch drops every
other. Retention: a version's ``retain_superseded`` is how many superseded or expired versions
of each document stay indexed (searchable by a question naming them, and counted in BM25's N,
average length and document frequencies); the others leave the live index at each ingest and
switch, their text still stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ragdx._faults import fault_point
from ragdx.diagnosis.evidence import RESOLVED, EvidenceResolver
from ragdx.errors import ConfigError, InputError, StoreError
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter, StructureChunker, TokenCounter
from ragdx.ingest.embed import EmbedStats, Embedder
from ragdx.ingest.parsers import parse, parser_id
from ragdx.ingest.quotes import CoverageStatus
from ragdx.stages.bm25 import query_terms
from ragdx.store.sqlite import IndexVersion, SQLiteStore, index_body
from ragdx.store.vectors import check_space
from ragdx.types import DocStatus, Query, SpaceState, StoredVersion

__all__ = ["IndexBuild", "IndexCheck", "build_index", "verify_index", "switch_index", "rollback_index",
           "needs_encoder", "live_retention"]

log = logging.getLogger("ragdx.index")

#: Versions parsed and chunked per transaction of a build (a killed build keeps what it committed).
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


def _sqlite(store: object) -> SQLiteStore:
    if not isinstance(store, SQLiteStore):
        raise StoreError(f"index versions are built in the SQLite store only; {type(store).__name__} "
                         "re-chunks in place at ingest (docs/postgres.md): build a new store beside it")
    return store


def build_index(store: SQLiteStore, config: ChunkerConfig, counter: TokenCounter, *,
                embedder: Embedder | None = None, retain_superseded: int | None = None) -> IndexBuild:
    """Build an index version beside the live one: every stored version parsed by today's parsers
    and chunked with ``config`` (copied from the live index where it already is), held out of
    queries until :func:`switch_index`. Building again with the same settings continues a build
    that was stopped, and adds the versions ingested since.

    Args:
        store: the store.
        config: the chunker's settings.
        counter: the token counter ``config.tokenizer`` names.
        embedder: the active space's encoder (needed when the store has an active space).
        retain_superseded: superseded or expired versions of a document kept indexed (None: all).

    Raises:
        InputError: the live index already has these settings; a negative retention.
        ConfigError: the store has an active embedding space and no embedder is given, or the
            counter is not the one the config names.
        StoreError: the store is not an SQLite store.
    """
    started = time.perf_counter()
    store = _sqlite(store)
    if retain_superseded is not None and retain_superseded < 0:
        raise InputError(f"retain_superseded must be 0 or more, not {retain_superseded}", field="retain")
    if counter.name != config.tokenizer:
        raise ConfigError(f"the chunker counts in {config.tokenizer!r} but the counter is {counter.name!r}")
    parsers = _parsers(store)
    body = index_body(json.loads(config.to_json()), parsers, retain_superseded)
    live = store.live_index()
    if body == live.body or (live.body["chunker"] is None and body == _as_ingested(store, live)):
        raise InputError(f"the live index {live.id} already has these settings: nothing to build "
                         "(change chunking.*, --retain, or the parsers)")
    _check_embedder(store, embedder, "index build")
    with store.transaction():
        same = [v for v in store.index_versions() if v.body == body and v.state is not SpaceState.ACTIVE]
        index_id = same[0].id if same else store.register_index(body)
        store.set_index_state(index_id, SpaceState.BUILDING)
    indexed = _indexed(store, retain_superseded)
    todo = store.unstaged_versions(index_id)
    with store.transaction():
        copied = store.stage_from_live(index_id, config.to_json(), sorted(parsers.items()),
                                       [(v.document.doc_id, v.document.version) for v in todo
                                        if (v.document.doc_id, v.document.version) in indexed])
    chunked, unindexed = _stage(store, index_id, store.unstaged_versions(index_id), config, counter, indexed)
    embedding = _embed(store, index_id, embedder)
    with store.transaction():
        store.set_index_state(index_id, SpaceState.BUILT)
    built = store.index_version_of(index_id)
    assert built is not None
    log.info("index %s built: %d versions chunked, %d copied, %d unindexed", index_id, chunked, copied, unindexed)
    return IndexBuild(index_id, chunked, copied, unindexed, built.chunks, embedding,
                      time.perf_counter() - started, built.state)


def verify_index(store: SQLiteStore, index_id: str, queries: Sequence[Query] = (), *,
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
    store = _sqlite(store)
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
    with tempfile.TemporaryDirectory(prefix="ragdx-verify-") as tmp:
        shadow = store.materialize(index_id, Path(tmp) / "candidate.db")
        try:
            problems += [f"store check of {index_id}: {p}" for p in shadow.verify()]
            problems += _latency(store, shadow, queries, slowdown, notes)
            problems += _permission_probes(store, shadow, probes, notes)
            problems += _spans(store, shadow, queries, notes)
        finally:
            shadow.close()
    if not problems and target.state is SpaceState.BUILT:
        with store.transaction():
            store.set_index_state(index_id, SpaceState.VERIFIED)
    return IndexCheck(index_id, tuple(problems), tuple(notes), _version(store, index_id).state)


def switch_index(store: SQLiteStore, index_id: str, *, force: bool = False,
                 counter: TokenCounter | None = None, embedder: Embedder | None = None) -> str:
    """Make an index version live in one transaction; the live one is retired (kept for a
    rollback) and every other version is dropped. Versions ingested since the version was built
    are parsed and chunked with its settings first (``counter`` counts in its tokenizer: needed
    when that is not words and punctuation), inside the same transaction, and the retention of
    the version is applied.

    Returns:
        The id of the version replaced.

    Raises:
        InputError: no such version, or it is not verified (without ``force``).
    """
    store = _sqlite(store)
    target = _version(store, index_id)
    if target.state is SpaceState.ACTIVE:
        return index_id
    if target.state not in (SpaceState.VERIFIED, SpaceState.RETIRED) and not force:
        raise InputError(f"index {index_id} is {target.state}, not verified: run 'ragdx index verify "
                         f"--index {index_id}' first (or switch with --force)")
    if needs_encoder(store, index_id):
        _check_embedder(store, embedder, "index switch")
    with store.transaction():  # versions added since, the swap and the retention: all or nothing
        todo = store.unstaged_versions(index_id)
        if todo:
            config = _config_of(store, target)
            _stage(store, index_id, todo, config, _counter(config, counter),
                   _indexed(store, target.retain_superseded))
        _embed(store, index_id, embedder)
        old = store.switch_index(index_id)
        store.apply_retention()
    log.info("index %s is live (was %s)", index_id, old)
    return old


def rollback_index(store: SQLiteStore, *, counter: TokenCounter | None = None,
                   embedder: Embedder | None = None) -> str:
    """Return to the index version the live one replaced (see :func:`switch_index`): deletions,
    access and status changes made since are the store's own, so they hold after it.

    Returns:
        The id of the version now live.
    """
    store = _sqlite(store)
    retired = [v for v in store.index_versions() if v.state is SpaceState.RETIRED]
    if not retired:
        raise InputError("no retired index version to roll back to ('ragdx index status' lists them)")
    switch_index(store, retired[-1].id, force=True, counter=counter, embedder=embedder)
    return retired[-1].id


def live_retention(store: SQLiteStore) -> int | None:
    """The live index version's ``retain_superseded`` (what a build keeps unless told otherwise)."""
    return _sqlite(store).live_index().retain_superseded


def needs_encoder(store: SQLiteStore, index_id: str) -> bool:
    """Whether switching to an index version has chunks to embed (versions ingested since it
    was built, or chunks without a vector in the active space): only then is the encoder loaded."""
    store = _sqlite(store)
    active = store.active_space()
    return active is not None and bool(store.unstaged_versions(index_id)
                                       or store.staged_chunks(index_id, without_vector_in=active.id))


# -- building blocks ------------------------------------------------------------------------
def _version(store: SQLiteStore, index_id: str) -> IndexVersion:
    found = store.index_version_of(index_id)
    if found is None:
        raise InputError(f"no index version {index_id!r}; versions: "
                         f"{', '.join(v.id for v in store.index_versions())}")
    return found


def _parsers(store: SQLiteStore) -> dict[str, str]:
    """Today's parser of each format the store holds."""
    return {fmt: parser_id(fmt) for fmt in sorted({v.document.format for v in store.versions()})}


def _as_ingested(store: SQLiteStore, live: IndexVersion) -> dict | None:
    """The body the live index as ingested would have, if every version was chunked with one
    config and parsed by today's parsers (else None)."""
    rows = store.parse_configs()
    configs = {r[0] for r in rows}
    if len(configs) != 1 or any(parser_id(fmt) != parser for _, fmt, parser, _ in rows):
        return None
    return index_body(json.loads(configs.pop()), {fmt: parser for _, fmt, parser, _ in rows},
                      live.retain_superseded)


def _indexed(store: SQLiteStore, retain: int | None) -> set[tuple[str, str]]:
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


def _config_of(store: SQLiteStore, target: IndexVersion) -> ChunkerConfig:
    """The chunker config of an index version: its own, or (the first version, as ingested) the
    one most of its versions were chunked with."""
    body = target.body["chunker"]
    if body is None:
        held = store.parse_configs(target.id)
        if not held:
            raise InputError(f"index {target.id} holds no version to take a chunker config from")
        body = json.loads(held[0][0])
    config = ChunkerConfig(**{k: v for k, v in body.items() if k != "algorithm"})
    if json.loads(config.to_json()) != body:
        raise ConfigError(f"index {target.id} was chunked by chunking algorithm {body.get('algorithm')}, "
                          "which this ragdx no longer has: build a new index version instead")
    return config


def _counter(config: ChunkerConfig, counter: TokenCounter | None) -> TokenCounter:
    if config.tokenizer == RegexTokenCounter.name:
        return RegexTokenCounter()
    if counter is None or counter.name != config.tokenizer:
        raise ConfigError(f"versions ingested since this index version was built must be chunked counting in "
                          f"{config.tokenizer!r}: give the settings whose encoder that is")
    return counter


def _check_embedder(store: SQLiteStore, embedder: Embedder | None, stage: str) -> None:
    active = store.active_space()
    if active is None:
        return
    if embedder is None:
        raise ConfigError(f"{stage}: the store's active embedding space {active.id} ({active.model_id}) "
                          "serves dense retrieval, and new chunks need its vectors: run with the dense "
                          f"channel on (its model {active.model_id!r})")
    check_space(embedder.space, active, stage)


def _reparse(store: SQLiteStore, stored: StoredVersion):
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


def _stage(store: SQLiteStore, index_id: str, todo: Sequence[StoredVersion], config: ChunkerConfig,
           counter: TokenCounter, indexed: set[tuple[str, str]]) -> tuple[int, int]:
    """Parse and chunk ``todo`` into an index version (those ``indexed`` leaves out are held
    without chunks), committed every :data:`BATCH` versions (joined to the caller's transaction
    when there is one). Returns (versions chunked, versions held without chunks)."""
    chunker = StructureChunker(config, counter)
    config_json = config.to_json()
    chunked = unindexed = 0
    for i in range(0, len(todo), BATCH):
        prepared = []
        for stored in todo[i:i + BATCH]:
            doc = stored.document
            if (doc.doc_id, doc.version) in indexed:
                parsed = _reparse(store, stored)
                prepared.append((doc, parsed, chunker.run(doc, parsed)))
            else:
                prepared.append((doc, None, None))
        with store.transaction():
            for doc, parsed, out in prepared:
                if out is None:
                    store.stage_unindexed(index_id, doc.doc_id, doc.version)
                    unindexed += 1
                else:
                    store.stage_version(index_id, doc.doc_id, doc.version, parsed, out.sections, out.chunks,
                                        config_json)
                    chunked += 1
        fault_point("staged")
    return chunked, unindexed


def _embed(store: SQLiteStore, index_id: str, embedder: Embedder | None) -> EmbedStats | None:
    """Vectors in the active space for the version's chunks that have none (reused by input)."""
    active = store.active_space()
    if active is None or embedder is None:
        return None
    todo = store.staged_chunks(index_id, without_vector_in=active.id)
    rows, stats = embedder.run(store, todo)
    with store.transaction():
        store.stage_vectors(index_id, active.id, rows)
    return stats


def _median_ms(store: SQLiteStore, questions: Sequence[tuple[str, tuple[str, ...]]]) -> float:
    for question, groups in questions[:2]:  # warm: the keyword mirror is built at the first query
        store.bm25(query_terms(question), groups, 10)
    times = []
    for question, groups in questions:
        started = time.perf_counter()
        store.bm25(query_terms(question), groups, 10)
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times) if times else 0.0


def _latency(live: SQLiteStore, new: SQLiteStore, queries: Sequence[Query], slowdown: float,
             notes: list[str]) -> list[str]:
    questions = [(q.question, q.principal.groups) for q in queries]
    if not questions:  # no query set: the titles of up to 32 current documents, asked as public
        questions = [(v.document.title, ("public",)) for v in live.versions()
                     if v.document.status is DocStatus.CURRENT and v.document.title][:32]
    if not questions:
        return []
    live_ms, new_ms = _median_ms(live, questions), _median_ms(new, questions)
    notes.append(f"latency: BM25 median {new_ms:.2f} ms per question (live index {live_ms:.2f} ms), "
                 f"{len(questions)} questions")
    if new_ms > slowdown * live_ms + 10.0:
        return [f"latency: BM25 median {new_ms:.2f} ms per question, more than {slowdown:g} x the live "
                f"index's {live_ms:.2f} ms + 10 ms"]
    return []


def _permission_probes(live: SQLiteStore, new: SQLiteStore, probes: int, notes: list[str]) -> list[str]:
    """Ask the text of restricted versions (cut as the live index cuts them) as ``public``: no
    chunk may come back that is of a restricted version, or that holds the words asked while
    its own version's text (in the live store) does not (restricted text under another name)."""
    acl = live.acl_table()
    closed = {key for key, groups in acl.items() if "public" not in groups}
    problems, asked = [], 0
    for doc_id, version in sorted(closed):
        if asked >= probes:
            break
        for chunk in live.chunks(doc_id, version)[:2]:
            asked += 1
            question = " ".join(chunk.text.split()[:12])
            for hit, _ in new.bm25(query_terms(question), ("public",), 20):
                where = f"{hit.doc_id}@{hit.version}"
                if (hit.doc_id, hit.version) in closed:
                    problems.append(f"permission: a public principal asking {question!r} reaches {where} "
                                    f"(chunk {hit.id}), which public may not read")
                elif question in " ".join(hit.text.split()) and \
                        question not in " ".join(live.texts(hit.doc_id, hit.version)[1].split()):
                    problems.append(f"permission: a public principal asking {question!r} reaches the text of "
                                    f"restricted {doc_id}@{version} in chunk {hit.id}, filed under {where}")
    notes.append(f"permission probes: {asked} restricted chunks asked as public"
                 + (", none reached" if not problems else ""))
    return problems


def _spans(live: SQLiteStore, new: SQLiteStore, queries: Sequence[Query], notes: list[str]) -> list[str]:
    """Required spans that some chunk of the live index holds must be held in the new one."""
    problems, cut, checked = [], 0, 0
    for query in queries:
        for restricted in (False, True):
            before = EvidenceResolver(live).run(query, restricted=restricted).alternatives
            after = EvidenceResolver(new).run(query, restricted=restricted).alternatives
            for was, now in zip(before, after):
                if was.status is not RESOLVED or was.coverage is None or \
                        was.coverage.status is CoverageStatus.NONE:
                    continue
                checked += 1
                if now.status is not RESOLVED or now.coverage is None or \
                        now.coverage.status is CoverageStatus.NONE:
                    problems.append(f"spans: query {query.id!r}: {now.describe()} is held by the live index "
                                    f"and not by the new one ({now.note or 'no chunk holds it'})")
                elif was.coverage.status is CoverageStatus.FULL and now.coverage.status is CoverageStatus.PARTIAL:
                    cut += 1
    if queries:
        notes.append(f"spans: {checked} required spans held by the live index checked"
                     + (f"; {cut} of them now cut across two chunks" if cut else ""))
    return problems
