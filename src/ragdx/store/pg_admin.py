"""Setting up and removing PostgreSQL stores: :func:`setup_shards` (a sharded store), :func:`drop_store`,
and the same from the shell (``make pg`` uses it)::

    python -m ragdx.store.pg_admin init DSN [--shard DSN ...] [--parts-per-shard N] [--if-missing]
    python -m ragdx.store.pg_admin drop DSN
"""

from __future__ import annotations

import sys
import uuid
from contextlib import contextmanager
from typing import Iterator, Sequence

from ragdx.errors import InputError, StoreError
from ragdx.store._common import OpenMode
from ragdx.store.postgres import PostgresStore, _psycopg, _reason, _redact, _schema_of
from ragdx.store.schema import local_part_ddl
from ragdx.store.shards import _server_conninfo

__all__ = ["setup_shards", "drop_store", "scratch_store", "drop_scratch_stores", "main"]

#: the advisory lock a scratch store's maker holds while it lives (with the hash of its schema)
_SCRATCH_LOCK = 0x72616763  # "ragc"
_SCRATCH_PREFIX = "ragdx_check_"


def _options(options: dict[str, str]) -> str:
    """An OPTIONS list of quoted literals (DDL takes no parameters)."""
    return ", ".join(f"{key} '{str(value).replace(chr(39), chr(39) * 2)}'" for key, value in options.items())


def setup_shards(dsn: str, shards: Sequence[str], *, parts_per_shard: int = 2) -> PostgresStore:
    """Create a sharded store: the coordinator at ``dsn`` records each shard as a
    ``postgres_fdw`` server (``extensions 'vector'``, so pgvector's operators run on the shard)
    and spreads ``parts_per_shard`` hash parts per shard over them, round robin.

    Args:
        dsn: the coordinator's DSN (its schema must not hold a store yet).
        shards: each shard server's DSN (the same user must be able to log in on each).
        parts_per_shard: hash parts per shard (more parts spread better when a shard is added).

    Returns:
        The store, open for writing.

    Raises:
        StoreError: a server is unreachable or lacks pgvector, or the schema already holds a store.
    """
    psycopg = _psycopg()
    from psycopg.conninfo import conninfo_to_dict
    if not shards:
        raise InputError("a sharded store needs at least one shard DSN", field="shards")
    schema = _schema_of(dsn)
    probe = PostgresStore.__new__(PostgresStore)
    probe.dsn, probe.where, probe.schema, probe.mode = dsn, _redact(dsn), schema, OpenMode.CREATE
    try:
        coordinator = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise StoreError(f"{_redact(dsn)}: cannot connect to PostgreSQL: {_reason(exc)}") from None
    try:
        with coordinator:
            if coordinator.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                                   "table_name = 'meta'", (schema,)).fetchone():
                raise StoreError(f"{_redact(dsn)}: the schema {schema!r} already holds a store; shards are "
                                 "set up when a store is created")
            coordinator.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw SCHEMA public")
            parts: dict[int, str] = {}
            servers = []
            for i, shard in enumerate(shards):
                info = conninfo_to_dict(shard)
                where = _redact(shard)
                try:
                    with psycopg.connect(shard, autocommit=True, connect_timeout=5) as conn:
                        probe.where = where
                        PostgresStore._require_vector(probe, conn)
                        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                        conn.execute(f"CREATE SCHEMA {schema}")
                        dbname = conn.info.dbname
                        conn.execute(f"ALTER DATABASE {dbname} SET hnsw.iterative_scan = 'strict_order'")
                        conn.execute(f"ALTER DATABASE {dbname} SET hnsw.ef_search = 200")
                except psycopg.OperationalError as exc:
                    raise StoreError(f"{where}: cannot connect to the shard: {_reason(exc)}") from None
                server = f"ragdx_{schema}_shard{i + 1}"
                options = {"host": info.get("host") or "127.0.0.1", "port": str(info.get("port") or 5432),
                           "dbname": info.get("dbname") or "postgres"}
                coordinator.execute(f"DROP SERVER IF EXISTS {server} CASCADE")
                # fdw_tuple_cost 0.2: PostgreSQL 17's default (0.01 before), so the planner ships ORDER BY and
                # LIMIT to the shard rather than fetch every row of a part to sort it here
                options.update(extensions="vector", fetch_size="200", batch_size="200", fdw_tuple_cost="0.2")
                coordinator.execute(f"CREATE SERVER {server} FOREIGN DATA WRAPPER postgres_fdw "
                                    f"OPTIONS ({_options(options)})")
                mapping = {"user": info.get("user") or coordinator.info.user}
                if info.get("password"):
                    mapping["password"] = info["password"]
                coordinator.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {server} "
                                    f"OPTIONS ({_options(mapping)})")
                servers.append((server, shard))
            for part in range(len(shards) * parts_per_shard):
                parts[part] = servers[part % len(servers)][0]
            for server, shard in servers:
                with psycopg.connect(shard, autocommit=True, connect_timeout=5) as conn, conn.transaction():
                    for part in (p for p, s in parts.items() if s == server):
                        for statement in local_part_ddl(schema, part):
                            conn.execute(statement)
            probe._create(coordinator, parts)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StoreError(f"{_redact(dsn)}: setting up shards creates the postgres_fdw extension, a foreign server and "
                         "a user mapping per shard on the coordinator, and a schema on each shard, and a role "
                         f"lacks a privilege for it ({str(exc).splitlines()[0]}): run it as a role that may (the "
                         "servers' superuser), then use the store with any role that owns its schema") from None
    return PostgresStore(dsn, OpenMode.WRITE)


def drop_store(dsn: str) -> None:
    """Remove a store: its schema on the coordinator and on every shard, and its shard servers.
    Reads only the ``partitions`` table, so a store of an older schema version can be dropped.

    Raises:
        StoreError: the server is unreachable, or its schema holds no ragdx store.
    """
    psycopg = _psycopg()
    schema, where = _schema_of(dsn), _redact(dsn)
    try:
        coordinator = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise StoreError(f"{where}: cannot connect to PostgreSQL: {_reason(exc)}") from None
    with coordinator as conn:
        if not conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                            "table_name = 'partitions'", (schema,)).fetchone():
            raise StoreError(f"{where}: no ragdx store in the schema {schema!r}")
        servers = [r[0] for r in conn.execute(f"SELECT DISTINCT server FROM {schema}.partitions "
                                              "WHERE server IS NOT NULL ORDER BY 1")]
        shards = [_server_conninfo(conn, server, where) for server in servers]
        for conninfo in shards:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as shard:
                shard.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for server in servers:
            conn.execute(f"DROP SERVER IF EXISTS {server} CASCADE")



@contextmanager
def scratch_store(store: PostgresStore) -> Iterator[PostgresStore]:
    """A new, empty store in a schema of its own (``ragdx_check_<random>``) on the same servers as
    ``store`` and sharded as it is: what ``ragdx index verify`` fills and checks. Dropped (with its
    shard schemas and foreign servers) when the block ends. While it lives, this process holds an
    advisory lock on its name; scratch stores nobody holds (a verify killed before it could drop
    its own) are dropped first."""
    from psycopg.conninfo import make_conninfo
    psycopg = _psycopg()
    drop_scratch_stores(store.dsn)
    name = f"{_SCRATCH_PREFIX}{uuid.uuid4().hex[:16]}"
    dsn = make_conninfo(store.dsn, options=f"-csearch_path={name}")
    servers = sorted({server for server in store.partitions().values() if server is not None})
    with psycopg.connect(store.dsn, autocommit=True, connect_timeout=5) as holder:
        user, db = holder.info.user, holder.info.dbname
        if not holder.execute("SELECT has_database_privilege(current_user, current_database(), 'CREATE')").fetchone()[0]:
            raise StoreError(f"{store.where}: ragdx index verify checks an index version on a scratch copy in a schema "
                             f"of its own, and the role {user!r} may not create schemas in the database {db!r}; the "
                             f"store is unchanged: ask the database's owner to run 'GRANT CREATE ON DATABASE {db} TO "
                             f"{user}'")
        holder.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (_SCRATCH_LOCK, name))
        shadow = None
        try:
            try:
                shadow = setup_shards(dsn, [store._shard_conninfo(s) for s in servers],
                                      parts_per_shard=len(store.partitions()) // len(servers)) \
                    if servers else PostgresStore(dsn, OpenMode.CREATE)
            except StoreError as exc:
                raise StoreError(f"ragdx index verify checks an index version on a scratch copy in a schema of its "
                                 f"own on the store's servers, and could not make one; the store is unchanged: "
                                 f"{exc}") from None
            yield shadow
        finally:
            if shadow is not None:
                shadow.close()
            _drop_scratch(holder, dsn, name)


def drop_scratch_stores(dsn: str) -> list[str]:
    """Drop the scratch stores on the server of ``dsn`` that no process holds (left by a verify that
    was killed); returns their schemas."""
    from psycopg.conninfo import make_conninfo
    dropped = []
    with _psycopg().connect(dsn, autocommit=True, connect_timeout=5) as conn:
        for (name,) in conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s) "
                                    "ORDER BY 1", (_SCRATCH_PREFIX,)).fetchall():
            if conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_SCRATCH_LOCK, name)).fetchone()[0]:
                _drop_scratch(conn, make_conninfo(dsn, options=f"-csearch_path={name}"), name)
                dropped.append(name)
    return dropped


def _drop_scratch(conn, dsn: str, name: str) -> None:
    """Drop a scratch store (half made: its schema), and release its lock, held on ``conn``."""
    try:
        drop_store(dsn)
    except StoreError:  # killed before its tables were made, or never made
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_SCRATCH_LOCK, name))

def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ragdx.store.pg_admin init DSN [--shard DSN ...]``: create a store (sharded
    when shards are given); ``drop DSN``: remove a store's schema from the coordinator and shards."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m ragdx.store.pg_admin")
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="create a store, sharded over the given servers")
    init.add_argument("dsn")
    init.add_argument("--shard", action="append", default=[], metavar="DSN")
    init.add_argument("--parts-per-shard", type=int, default=2)
    init.add_argument("--if-missing", action="store_true", help="do nothing when the store exists")
    drop = sub.add_parser("drop", help="remove the store (its schema) on the coordinator and shards")
    drop.add_argument("dsn")
    args = parser.parse_args(argv)
    if args.command == "init":
        if args.if_missing:
            try:
                PostgresStore(args.dsn, OpenMode.READ).close()
                return 0
            except StoreError as exc:
                if "no ragdx store" not in str(exc):
                    raise
        store = setup_shards(args.dsn, args.shard, parts_per_shard=args.parts_per_shard) if args.shard \
            else PostgresStore(args.dsn, OpenMode.CREATE)
        print(f"{store.where}: {len(store.partitions())} parts", file=sys.stderr)
        store.close()
        return 0
    drop_store(args.dsn)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except StoreError as exc:
        print(f"ragdx: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
