"""Reading a corpus manifest (JSONL) or a folder into validated entries (docs/formats.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ragdx._jsonl import Fields, control_character, iter_jsonl
from ragdx.errors import InputError
from ragdx.ingest.parsers import EXTENSIONS, FORMATS
from ragdx.types import DocStatus

_FIELDS = {"doc_id", "path", "version", "acl", "title", "updated_at", "status", "metadata", "format"}

MAX_TITLE_CHARS = 1_000
"""The longest ``title`` a manifest line may give (docs/formats.md, "Limits")."""
MAX_METADATA_BYTES = 65_536
"""The most ``metadata`` a manifest line may give, as compact JSON in UTF-8."""
MAX_FILE_BYTES = 256 * 1024 * 1024
"""The largest document file ingested (256 MiB)."""


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One document to ingest. ``origin`` names where it was declared (file and line)."""

    doc_id: str
    path: Path
    origin: str
    line: int | None = None
    version: str | None = None
    acl: tuple[str, ...] = ("public",)
    title: str | None = None
    updated_at: str | None = None
    status: DocStatus = DocStatus.CURRENT
    metadata: dict[str, Any] = field(default_factory=dict)
    format: str | None = None


def load_manifest(path: Path, *, allow_outside: bool = False) -> list[ManifestEntry]:
    """Read and validate every line of a manifest before anything is ingested.

    Args:
        allow_outside: accept a ``path`` outside the manifest's folder (``../``, an absolute
            path, a link leading out); refused by default, so a manifest cannot make ragdx read
            and store any file its user may read.

    Raises:
        InputError: naming the file, line and field of the first bad line: malformed JSON, a
            missing or mistyped field, an unknown status or format, a duplicate ``doc_id``, a
            path outside the manifest's folder, a title, metadata or file over its limit.
    """
    folder = path.parent.resolve()
    entries: list[ManifestEntry] = []
    seen: dict[str, tuple[int, str | None]] = {}
    for line, obj in iter_jsonl(path, what="manifest"):
        f = Fields(obj, str(path), line)
        f.check_known(_FIELDS, "put custom fields under 'metadata'")
        doc_id = f.ident("doc_id")
        rel = f.get("path", str)
        version = f.ident("version", default=None)
        if doc_id in seen:
            first_line, first_version = seen[doc_id]
            if version is None or first_version is None or version == first_version:
                raise f.error("doc_id", f"duplicate doc_id {doc_id!r} (first on line {first_line}); "
                              "one doc_id may appear twice only with two distinct explicit versions")
        seen[doc_id] = (line, version)
        updated_at = f.get("updated_at", str, default=None)
        if updated_at is not None:
            try:
                datetime.fromisoformat(updated_at.replace("Z", "+00:00"))
            except ValueError:
                raise f.error("updated_at", f"not an ISO 8601 date-time: {updated_at!r}") from None
        status = f.get("status", str, default="current")
        try:
            status_value = DocStatus.parse(status, what="status")
        except InputError as exc:
            raise f.error("status", exc.detail) from None
        fmt = f.get("format", str, default=None)
        if fmt is not None and fmt not in FORMATS:
            raise f.error("format", f"unknown format {fmt!r}; valid formats are {', '.join(FORMATS)}")
        doc_path = path.parent / rel
        if not allow_outside and not doc_path.resolve().is_relative_to(folder):
            raise f.error("path", f"{rel!r} lies outside the manifest's folder {folder}; move the file there, "
                          "or let the manifest name files anywhere: ragdx ingest --allow-outside")
        title = f.get("title", str, default=None)
        if title is not None and len(title) > MAX_TITLE_CHARS:
            raise f.error("title", f"{len(title):,} characters; a title may have at most {MAX_TITLE_CHARS:,}")
        metadata = f.get("metadata", dict, default={})
        size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > MAX_METADATA_BYTES:
            raise f.error("metadata", f"{size:,} bytes as JSON; metadata may have at most {MAX_METADATA_BYTES:,}")
        acl = f.str_list("acl", ("public",), ident=True)
        if not acl:
            raise f.error("acl", "must list at least one group (an empty acl would hide the document "
                          "from everyone)")
        entries.append(ManifestEntry(
            doc_id=doc_id, path=doc_path, origin=str(path), line=line, version=version,
            acl=acl, title=title, updated_at=updated_at, status=status_value, metadata=metadata, format=fmt))
    if not entries:
        raise InputError("the manifest lists no documents", file=str(path))
    return entries


def scan_folder(folder: Path) -> tuple[list[ManifestEntry], list[Path]]:
    """Every file of a known format below ``folder``; ``doc_id`` is its relative path.

    Returns:
        The entries, and the files skipped because no parser reads their format.
    """
    entries, skipped = [], []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        problem = control_character(rel.as_posix())
        if problem:  # the file name becomes the doc_id
            raise InputError(f"the file name {rel.as_posix()!r} {problem} (or bytes that are not "
                             "UTF-8); rename it, or list it in a manifest with a doc_id",
                             file=str(folder), field="doc_id")
        if path.suffix.lower() in EXTENSIONS:
            entries.append(ManifestEntry(doc_id=rel.as_posix(), path=path, origin=str(path)))
        else:
            skipped.append(path)
    if not entries:
        raise InputError(f"no documents of a known format ({', '.join(sorted(EXTENSIONS))}) "
                         "in the folder", file=str(folder))
    return entries, skipped


def load_source(path: Path, *, allow_outside: bool = False) -> tuple[list[ManifestEntry], list[Path]]:
    """A manifest file or a folder, as entries (and the folder's skipped files); ``allow_outside``:
    see :func:`load_manifest`."""
    if path.is_dir():
        return scan_folder(path)
    if not path.exists():
        raise InputError("no such manifest file or folder", file=str(path))
    if path.suffix.lower() not in (".jsonl", ".ndjson", ".json"):
        raise InputError("expected a manifest (.jsonl) or a folder", file=str(path))
    return load_manifest(path, allow_outside=allow_outside), []
