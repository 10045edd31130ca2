"""Access control in the stores: each stored version's groups, and which chunks a principal's
groups may read (checked on every read, never cached past a change).

SQLite keeps one ``acl`` row per version and group; PostgreSQL one row per version with its
groups as an array, matched with ``&&``. Neither store writes groups onto chunk or vector rows,
so an access change rewrites the ``acl`` rows only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ragdx.types import Document, VersionFilter

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore
    from ragdx.store.sqlite import SQLiteStore


def _sqlite_write_acl(self: SQLiteStore, document: Document) -> None:
    self._write("DELETE FROM acl WHERE doc_id = ? AND version = ?",
                (document.doc_id, document.version))
    for group in sorted(set(document.acl)):
        self._write("INSERT INTO acl VALUES (?,?,?)", (document.doc_id, document.version, group))


def _pg_write_acl(self: PostgresStore, document: Document) -> None:
    self._write("UPDATE {s}.acl SET groups = %s WHERE doc_id = %s AND version = %s",
                (sorted(set(document.acl)), document.doc_id, document.version))


def sqlite_readable(self: SQLiteStore, groups: tuple[str, ...], doc_id: str, version: str) -> bool:
    """Whether a principal with these groups may read this version (checked on every read)."""
    marks = ",".join("?" * len(groups))
    return self._db.execute(
        f"SELECT 1 FROM acl WHERE doc_id = ? AND version = ? AND grp IN ({marks}) LIMIT 1",
        (doc_id, version, *groups)).fetchone() is not None


def pg_readable(self: PostgresStore, groups: tuple[str, ...], doc_id: str, version: str) -> bool:
    """Whether a principal with these groups may read this version (checked on every read)."""
    return self._one("SELECT 1 FROM {s}.acl WHERE doc_id = %s AND version = %s AND groups && %s",
                     (doc_id, version, list(groups))) is not None


def sqlite_acl_table(self: SQLiteStore) -> dict[tuple[str, str], frozenset[str]]:
    """Every version's access groups."""
    out: dict[tuple[str, str], set[str]] = {}
    for doc_id, version, grp in self._db.execute("SELECT doc_id, version, grp FROM acl"):
        out.setdefault((doc_id, version), set()).add(grp)
    return {k: frozenset(v) for k, v in out.items()}


def pg_acl_table(self: PostgresStore) -> dict[tuple[str, str], frozenset[str]]:
    """Every version's access groups."""
    return {(d, v): frozenset(g) for d, v, g in self._all("SELECT doc_id, version, groups FROM {s}.acl")}


def sqlite_readable_rowids(self: SQLiteStore, groups: tuple[str, ...], versions: VersionFilter | None = None) -> frozenset[int]:
    """Row ids of the searchable chunks (not duplicates) that these groups may read, of the
    versions the filter allows (all when None); cached until the store changes (bound to
    ``index_version``)."""
    readable = self._readable_rowids(groups)
    if versions is None or not versions.current_only:
        return readable
    key = ("versions", versions.named)
    cached = self._readable.get(key)
    if cached is None or cached[0] != self.index_version:
        rows = frozenset(r[0] for r in self._db.execute(
            "SELECT c.rowid, c.version, d.status FROM chunks c JOIN documents d ON d.doc_id = c.doc_id "
            "AND d.version = c.version WHERE c.duplicate_of IS NULL") if versions.allows(r[1], r[2]))
        cached = (self.index_version, rows)
        self._readable[key] = cached
    return readable & cached[1]


def _sqlite_readable_rowids(self: SQLiteStore, groups: tuple[str, ...]) -> frozenset[int]:
    key = (tuple(sorted(set(groups))), self.index_version)
    cached = self._readable.get(key[0])
    if cached is not None and cached[0] == key[1]:
        return cached[1]
    marks = ",".join("?" * len(key[0]))
    rows = frozenset(r[0] for r in self._db.execute(
        "SELECT c.rowid FROM chunks c WHERE c.duplicate_of IS NULL AND EXISTS (SELECT 1 FROM acl a "
        f"WHERE a.doc_id = c.doc_id AND a.version = c.version AND a.grp IN ({marks}))", key[0]))
    self._readable[key[0]] = (key[1], rows)
    return rows


def _sqlite_readable_versions(self: SQLiteStore, groups: tuple[str, ...]) -> list[tuple[str, str]]:
    marks = ",".join("?" * len(groups))
    return self._db.execute(f"SELECT DISTINCT doc_id, version FROM acl WHERE grp IN ({marks})",
                            groups).fetchall()


def pg_readable_many(self: PostgresStore, groups: tuple[str, ...], keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of these (doc_id, version) pairs the groups may read, in one query."""
    keys = list(dict.fromkeys(keys))
    if not keys or not groups:
        return set()
    # on every shard at once (through the coordinator's partitioned table, postgres_fdw would
    # ask the parts one after another)
    rows = self._fan(lambda sfx: f"SELECT a.doc_id, a.version FROM {{s}}.acl{sfx} a JOIN unnest(%(d)s::text[], "
                     "%(v)s::text[]) k(doc_id, version) ON a.doc_id = k.doc_id AND a.version = k.version "
                     "WHERE a.groups && %(g)s::text[]",
                     {"d": [k[0] for k in keys], "v": [k[1] for k in keys], "g": list(groups)})
    return {(r[0], r[1]) for r in rows}
