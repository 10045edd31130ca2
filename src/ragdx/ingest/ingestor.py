"""Ingesting a manifest or a folder: read, parse and chunk everything first, then write it all
in one store transaction, so a bad file or a killed process leaves the store as it was."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Sequence

from ragdx.errors import ConfigError, InputError
from ragdx.ingest.chunk import ChunkedDocument, ChunkerConfig, StructureChunker, TokenCounter
from ragdx.ingest.embed import EmbedStats, Embedder, VectorRow, fill_statements
from ragdx.store.vectors import check_space
from ragdx.ingest.manifest import MAX_FILE_BYTES, ManifestEntry, load_source
from ragdx.ingest.parsers import detect_format, parse, parser_id
from ragdx.progress import Progress
from ragdx.protocols import VersionedIndexStore, WritableStore
from ragdx.types import ChoiceEnum, Document, DocStatus, ParsedDocument, StoredVersion

log = logging.getLogger("ragdx.ingest")

#: Below this many documents to parse, starting worker processes costs more than it saves.
PARALLEL_FROM = 64


@dataclass(frozen=True, slots=True)
class PreparedDocument:
    """A document read, parsed and chunked, ready to be written. When the store already holds
    this version with the same bytes, parser and chunker config, nothing is parsed or chunked
    (``parsed`` and ``chunked`` are None): only its attributes can change."""

    entry: ManifestEntry
    document: Document
    raw_text: str
    parsed: ParsedDocument | None
    chunked: ChunkedDocument | None
    size_bytes: int
    stored_chunks: int = 0


class Action(ChoiceEnum):
    """What ingesting one entry did to the store."""

    ADD = "add"              # a new document or version
    UPDATE = "update"        # attributes changed in place (acl, status, title, ...)
    RECHUNK = "rechunk"      # the same text chunked again (a new parser or chunker config)
    UNCHANGED = "unchanged"  # nothing to do


@dataclass(frozen=True, slots=True)
class IngestAction:
    """What ingesting one entry did (``action`` may be given as its string)."""

    doc_id: str
    version: str
    action: Action
    detail: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", Action.parse(self.action, what="ingest action"))


@dataclass(frozen=True, slots=True)
class IngestReport:
    """The outcome of one ingest."""

    actions: tuple[IngestAction, ...]
    skipped_files: tuple[str, ...]
    warnings: tuple[str, ...]
    documents: int
    bytes: int
    chunks: int
    seconds: float
    index_version: int
    embedding: EmbedStats | None = None

    def count(self, action: Action | str) -> int:
        return sum(1 for a in self.actions if a.action == action)


@dataclass(frozen=True, slots=True)
class _Read:
    """An entry read but not parsed: what a parsing worker needs (bytes, format, path)."""

    entry: ManifestEntry
    content_hash: str
    version: str
    job: tuple[bytes, str, str]


_Parsed = tuple[str, ParsedDocument] | InputError


def _parse(job: tuple[bytes, str, str]) -> _Parsed:
    """Parse one document's bytes (in a worker process): its raw text and parsed document, or the
    :class:`InputError` saying why not, as a value (an exception's keywords do not survive the
    trip back through pickle)."""
    try:
        return parse(*job)
    except InputError as exc:
        return exc


def _declared(entry: ManifestEntry, exc: InputError) -> InputError:
    """The error with the manifest line that declared the entry, when it came from a manifest."""
    if entry.line is None:
        return exc
    return InputError(f"{exc} (declared for doc_id {entry.doc_id!r})", file=entry.origin,
                      line=entry.line, field="path")


class Ingestor:
    """Reads, parses, chunks and stores documents.

    Args:
        store: the store to write to.
        config: the chunking settings.
        counter: the token counter ``config.tokenizer`` names (default: words and punctuation).
        embedder: computes the chunks' vectors for the dense channel (None: no vectors).
        workers: processes that parse (from 64 documents to parse on; the store is written by
            this process alone).
    """

    def __init__(self, store: WritableStore, config: ChunkerConfig | None = None,
                 counter: TokenCounter | None = None, embedder: Embedder | None = None, *,
                 workers: int = 1) -> None:
        if workers < 1:
            raise ConfigError(f"ingest workers must be at least 1, not {workers}")
        self.store = store
        self.workers = workers
        self.chunker = StructureChunker(config or ChunkerConfig(), counter)
        self.embedder = embedder
        self._config_json = self.chunker.config.to_json()

    def prepare(self, entry: ManifestEntry) -> PreparedDocument:
        """Read, decode, parse and chunk one entry.

        Raises:
            InputError: the file is missing or unreadable, of an unknown format, undecodable, or
                has no text; the message names the file and the manifest line that declared it.
        """
        read = self._read(entry, self._stored([entry]))
        if isinstance(read, PreparedDocument):
            return read
        return self._chunk(read, _parse(read.job))

    def prepare_all(self, entries: Sequence[ManifestEntry], progress: Progress | None = None) -> list[PreparedDocument]:
        """:meth:`prepare` for every entry, parsing on ``workers`` processes when there are enough
        documents to parse (reading, the store's look-ups and chunking stay in this process; the
        chunker may count in the encoder's tokenizer, which is not shipped to workers).

        Raises:
            InputError: as :meth:`prepare`, for the first bad entry in manifest order.
        """
        stored = self._stored(entries)
        reads = [self._read(entry, stored) for entry in entries]
        jobs = [r.job for r in reads if isinstance(r, _Read)]
        if self.workers > 1 and len(jobs) >= PARALLEL_FROM:
            # spawned, not forked: this process may hold an encoder's threads and locks
            pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
            chunksize = max(1, min(16, len(jobs) // (8 * self.workers)))
            parsed: Iterator[_Parsed] = pool.map(_parse, jobs, chunksize=chunksize)
        else:
            pool, parsed = None, map(_parse, jobs)
        try:
            out = []
            for read in reads:
                out.append(read if isinstance(read, PreparedDocument) else self._chunk(read, next(parsed)))
                if progress is not None:
                    progress.advance()
            return out
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)

    def _stored(self, entries: Sequence[ManifestEntry]) -> dict[tuple[str, str], StoredVersion]:
        """The stored versions of the entries' documents, by (doc_id, version): one look-up for
        the whole batch, not one per entry."""
        found = self.store.versions_of(list(dict.fromkeys(e.doc_id for e in entries)))
        return {(v.document.doc_id, v.document.version): v for vs in found.values() for v in vs}

    def _read(self, entry: ManifestEntry, known: dict[tuple[str, str], StoredVersion]) -> "PreparedDocument | _Read":
        """The entry's bytes, or the stored version when the store already holds these bytes
        parsed and chunked as this ingest would (``known``: the batch's stored versions)."""
        try:
            fmt = detect_format(str(entry.path), entry.format)
            try:
                size = entry.path.stat().st_size
                if size > MAX_FILE_BYTES and entry.path.is_file():
                    raise InputError(f"{size:,} bytes; a document file may have at most {MAX_FILE_BYTES:,}",
                                     file=str(entry.path))
                data = entry.path.read_bytes()
            except FileNotFoundError:
                raise InputError("file not found", file=str(entry.path)) from None
            except IsADirectoryError:
                raise InputError("is a directory, expected a file", file=str(entry.path)) from None
            except OSError as exc:
                raise InputError(f"cannot read file: {exc.strerror}", file=str(entry.path)) from None
        except InputError as exc:
            raise _declared(entry, exc) from None
        content_hash = hashlib.sha256(data).hexdigest()
        version = entry.version or content_hash[:12]
        stored = known.get((entry.doc_id, version))
        if (stored is not None and stored.document.content_hash == content_hash
                and stored.chunker_config == self._config_json and stored.parser == parser_id(fmt)
                and (entry.status is not DocStatus.CURRENT or self.store.chunk_count(entry.doc_id, version))):
            # (a current version whose chunks a retention took out is chunked again)
            document = Document(entry.doc_id, version, content_hash, str(entry.path),
                                entry.title or stored.document.title, entry.acl, entry.status,
                                entry.updated_at, entry.metadata, fmt)
            return PreparedDocument(entry, document, "", None, None, len(data),
                                    self.store.chunk_count(entry.doc_id, version))
        return _Read(entry, content_hash, version, (data, fmt, str(entry.path)))

    def _chunk(self, read: "_Read", outcome: "_Parsed") -> PreparedDocument:
        entry = read.entry
        if isinstance(outcome, InputError):
            raise _declared(entry, outcome)
        raw, parsed = outcome
        data, fmt, _ = read.job
        where = f"{entry.origin}:{entry.line}" if entry.line else entry.origin
        if not parsed.text.strip():
            raise InputError(f"empty document: no text after parsing {fmt} (doc_id {entry.doc_id!r}, "
                             f"declared at {where})", file=str(entry.path))
        document = Document(
            doc_id=entry.doc_id, version=read.version,
            content_hash=read.content_hash, path=str(entry.path), title=entry.title or parsed.title,
            acl=entry.acl, status=entry.status, updated_at=entry.updated_at,
            metadata=entry.metadata, format=fmt)
        return PreparedDocument(entry, document, raw, parsed, self.chunker.run(document, parsed),
                                len(data))

    def run(self, source: Path, *, allow_outside: bool = False) -> IngestReport:
        """Ingest a manifest or a folder: all of it, or (on any error) none of it.

        Args:
            allow_outside: a manifest may name files outside its folder
                (:func:`~ragdx.ingest.manifest.load_manifest`).

        Raises:
            InputError: any bad entry or file; the store is left unchanged.
            ConfigError: the store has an active embedding space and this ingest has no embedder:
                it would add or re-chunk versions without vectors there (see :meth:`_refuse_lost_vectors`).
        """
        started = time.perf_counter()
        entries, skipped = load_source(Path(source), allow_outside=allow_outside)
        for path in skipped:
            log.warning("skipped %s: no parser for its format", path)
        with Progress("parsing and chunking", len(entries), unit="documents") as progress:
            prepared = _supersede_earlier(self.prepare_all(entries, progress))
        self._refuse_lost_vectors(prepared)
        vectors: dict[str, VectorRow] = {}
        stats = None
        if self.embedder is not None:
            active = self.store.active_space()
            if active is not None:
                check_space(self.embedder.space, active, "ingest")
            chunks = [c for p in prepared if p.chunked for c in p.chunked.chunks if c.duplicate_of is None]
            log.info("embedding %d chunks", len(chunks))
            rows, stats = self.embedder.run(self.store, chunks)
            vectors = {row[0]: row for row in rows}
        log.info("writing %d documents", len(prepared))
        actions = []
        with self.store.transaction():
            # again inside: a dense ingest that activated a space meanwhile, or a switch, is seen
            self._refuse_lost_vectors(prepared)
            active = self.store.active_space()
            if self.embedder is not None and active is not None:
                check_space(self.embedder.space, active, "ingest")
            self._refuse_other_index(prepared)
            if self.embedder is not None and self.store.active_space() is None:
                space = self.embedder.space
                self.store.register_space(space, self.embedder.backend)
                self.store.set_space_state(space.id, "active", "first space of this store")
            # the batch's stored versions, read once under the write lock and kept up to date below
            written = _Written(self.store.versions_of(list(dict.fromkeys(p.document.doc_id for p in prepared))))
            with Progress("writing", len(prepared), unit="documents") as progress:
                for item in progress.iterate(prepared):
                    action = self._write(item, written)
                    actions.append(action)
                    if vectors and item.chunked and action.action in ("add", "rechunk"):
                        self.store.write_vectors(self.embedder.space.id, [
                            vectors[c.id] for c in item.chunked.chunks if c.id in vectors])
            if isinstance(self.store, VersionedIndexStore):
                self.store.apply_retention(sorted({p.document.doc_id for p in prepared}))
        if self.embedder is not None and stats is not None:
            # after the chunks commit, in batches of their own: any chunk of the space without
            # them (this ingest's, and those a killed fill left), so the store holds them whole
            stats = replace(stats, statements=fill_statements(self.store, self.embedder))
        warnings = tuple(f"{p.document.doc_id}: {w}" for p in prepared if p.parsed
                         for w in p.parsed.warnings)
        return IngestReport(tuple(actions), tuple(map(str, skipped)), warnings, len(prepared),
                            sum(p.size_bytes for p in prepared),
                            sum(len(p.chunked.chunks) if p.chunked else p.stored_chunks for p in prepared),
                            time.perf_counter() - started, self.store.index_version, stats)

    def _refuse_lost_vectors(self, prepared: list[PreparedDocument]) -> None:
        """Refuse an ingest without an embedder into a store whose dense channel is live: every
        version it adds would have no vector in the active space, and every version it re-chunks
        (without the encoder, the chunker counts in another tokenizer) would lose its vectors, so
        the dense channel would silently stop finding them. Checked before the work, and again
        inside the write transaction (a first dense ingest may activate a space meanwhile)."""
        active = self.store.active_space()
        if active is None or self.embedder is not None:
            return
        written = [p for p in prepared if p.chunked is not None]
        if not written:
            return  # attributes only: no chunk changes, no vector is lost
        stored = sum(1 for p in written if self.store.version(p.document.doc_id, p.document.version))
        what = ", ".join(part for part in (
            f"re-chunk {stored} stored versions (deleting their vectors)" if stored else "",
            f"add {len(written) - stored} versions without vectors" if len(written) > stored else "") if part)
        raise ConfigError(
            f"the dense channel is off (retrieval.dense.enabled=false), but the store's active embedding "
            f"space {active.id} ({active.model_id}) serves dense retrieval: this ingest would {what}, and "
            "the dense channel would not find them. Ingest with the dense channel on (the space's model "
            f"{active.model_id!r}); to leave the dense channel on purpose, ingest into a new store beside "
            "the live one (ragdx ingest --store NEW.db ...) and move readers to it once it is checked")

    def _refuse_other_index(self, prepared: list[PreparedDocument]) -> None:
        """Refuse to chunk into a live index built with other chunker settings or another parser
        of a format ('ragdx index build --chunks'): the live index would mix two chunkers or
        parsers, and a re-chunk would rewrite it in place instead of beside it. Called inside the
        write transaction, so the live index read is the one written to."""
        if not isinstance(self.store, VersionedIndexStore):
            return
        live = self.store.live_index()
        chunking = [p for p in prepared if p.chunked is not None]
        if not chunking:
            return
        how = "build a new index version beside the live one with 'ragdx index build --chunks'"
        if live.settings.chunker is not None and live.settings.chunker != self._config_json:
            theirs, mine = json.loads(live.settings.chunker), json.loads(self._config_json)
            differ = ", ".join(f"{k}: {theirs.get(k)!r} (live) vs {mine.get(k)!r}" for k in sorted(mine)
                               if theirs.get(k) != mine.get(k))
            raise ConfigError(f"the live index {live.id} was built with other chunker settings ({differ}): "
                              f"ingest with the live index's settings ('ragdx index status' shows them), or {how}")
        for item in chunking:
            fmt = item.document.format
            wanted = live.settings.parser(fmt)
            if wanted is not None and item.parsed is not None and item.parsed.parser != wanted:
                raise ConfigError(f"{item.document.doc_id}: the live index {live.id} parses {fmt} with "
                                  f"{wanted}, and this ragdx parses it with {item.parsed.parser}: {how}, "
                                  f"which parses every version again ({item.entry.origin})")

    def _write(self, item: PreparedDocument, written: "_Written") -> IngestAction:
        doc, store = item.document, self.store
        versions = written.of(doc.doc_id)
        stored = versions.get(doc.version)
        if stored is not None:
            if stored[0] != doc.content_hash:
                raise InputError(
                    f"version {doc.version!r} of {doc.doc_id!r} is already stored with different "
                    "content; give the changed document a new version", file=item.entry.origin,
                    line=item.entry.line, field="version")
            changed = store.update_attributes(doc)
            versions[doc.version] = (doc.content_hash, doc.status)
            action = IngestAction(doc.doc_id, doc.version, "update", ", ".join(changed)) \
                if changed else IngestAction(doc.doc_id, doc.version, "unchanged")
            if item.parsed is not None and item.chunked is not None:  # parser or chunker changed
                store.replace_chunks(doc, item.parsed, item.chunked.sections, item.chunked.chunks,
                                     self._config_json)
                action = IngestAction(doc.doc_id, doc.version, "rechunk", action.detail)
        else:
            assert item.parsed is not None and item.chunked is not None  # new versions are parsed
            store.insert_version(doc, item.raw_text, item.parsed, item.chunked.sections,
                                 item.chunked.chunks, self._config_json)
            versions[doc.version] = (doc.content_hash, doc.status)
            action = IngestAction(doc.doc_id, doc.version, "add")
        if doc.status is DocStatus.CURRENT:
            for other, (content_hash, status) in versions.items():
                if other != doc.version and status is DocStatus.CURRENT:
                    store.set_status(doc.doc_id, other, DocStatus.SUPERSEDED, f"version {doc.version} is current")
                    versions[other] = (content_hash, DocStatus.SUPERSEDED)
        return action


class _Written:
    """What the store holds of a batch's documents while the batch is written: each version's
    content hash and status, in ingestion order, read in one look-up at the start of the write
    transaction (under its lock, so no other writer changes them) and updated by every write
    the batch makes, instead of a look-up per document."""

    def __init__(self, stored: dict[str, list[StoredVersion]]) -> None:
        self._docs = {doc_id: {v.document.version: (v.document.content_hash, v.document.status) for v in vs}
                      for doc_id, vs in stored.items()}

    def of(self, doc_id: str) -> dict[str, tuple[str, DocStatus]]:
        """The document's versions (version -> (content hash, status)); the caller updates it."""
        return self._docs.setdefault(doc_id, {})


def _supersede_earlier(prepared: list[PreparedDocument]) -> list[PreparedDocument]:
    """Within one manifest, only the last current version of a doc_id stays current."""
    last_current = {p.document.doc_id: i for i, p in enumerate(prepared)
                    if p.document.status is DocStatus.CURRENT}
    return [replace(p, document=replace(p.document, status=DocStatus.SUPERSEDED))
            if p.document.status is DocStatus.CURRENT and last_current[p.document.doc_id] != i else p
            for i, p in enumerate(prepared)]


def delete_documents(store: WritableStore, doc_ids: list[str]) -> dict[str, list[str]]:
    """Delete documents (all versions) in one transaction: all of them, or none if one is unknown."""
    with store.transaction():
        return {doc_id: store.delete_document(doc_id) for doc_id in doc_ids}
