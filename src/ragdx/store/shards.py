"""Sharding in the PostgreSQL store (docs/postgres.md): which server holds each hash part of the
per-document tables, and the fan-out that sends a search to every shard at once, over
connections of ragdx's own (one thread per shard), for the coordinator to merge. The SQLite
store is one file, so this concern has one dialect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from ragdx.errors import StoreError

if TYPE_CHECKING:
    from ragdx.store.postgres import PostgresStore


def _server_conninfo(conn: Any, server: str, where: str) -> str:
    """How to reach a shard, from its foreign server and user mapping on the coordinator."""
    from psycopg.conninfo import make_conninfo
    row = conn.execute("SELECT s.srvoptions, u.umoptions FROM pg_foreign_server s LEFT JOIN "
                       "pg_user_mappings u ON u.srvid = s.oid AND u.usename = current_user "
                       "WHERE s.srvname = %s", (server,)).fetchone()
    if row is None:
        raise StoreError(f"{where}: the shard server {server!r} recorded in the store is "
                         "not defined on the coordinator")
    options = dict(o.split("=", 1) for o in (row[0] or []) + (row[1] or []))
    keep = {k: v for k, v in options.items() if k in ("host", "port", "dbname", "user", "password")}
    return make_conninfo("", **keep)


def pg_partitions(self: PostgresStore) -> dict[int, str | None]:
    """Each hash part and the foreign server holding it (None: this server)."""
    return dict(self._all("SELECT part, server FROM {s}.partitions ORDER BY part"))


def _pg_shard_conninfo(self: PostgresStore, server: str) -> str:
    """How to reach a shard, from its foreign server and user mapping on the coordinator."""
    with self._conn() as conn:
        return _server_conninfo(conn, server, self.where)


def _pg_on_each_shard(self: PostgresStore, statements: Callable[[int], list[str]]) -> None:
    """Run DDL on every shard for each part it holds (committed at once, idempotently: an
    empty table left by a failed transaction on the coordinator is harmless)."""
    import psycopg  # the store is open: the extra is installed
    by_server: dict[str, list[int]] = {}
    for part, server in self.partitions().items():
        if server is not None:
            by_server.setdefault(server, []).append(part)
    for server, parts in by_server.items():
        with psycopg.connect(self._shard_conninfo(server), autocommit=True, **self._connect_args) as conn:
            with conn.transaction():
                for part in parts:
                    for statement in statements(part):
                        conn.execute(statement)


def _pg_on_servers(self: PostgresStore, job: Callable[[Any, list[int]], Any],
                   parts: Sequence[int] | None = None, *, each_part: bool = False) -> list[Any]:
    """``job(connection, parts)`` on each shard server for the parts it holds (of ``parts``,
    when given), the servers in parallel (the first on this thread, the others on threads,
    each with a connection of its own): ragdx's fan-out. ``each_part``: one job per part
    instead, all at once (a shard's parts are searched at the same time, each by a backend of
    its own, not one after the other in one statement)."""
    jobs: dict[tuple[str, int], list[int]] = {}  # (server, part or -1) -> its parts
    for part, server in self._parts.items():
        if parts is None or part in parts:
            jobs.setdefault((server, part if each_part else -1), []).append(part)
    if self._fan_pool is None:
        from concurrent.futures import ThreadPoolExecutor
        self._fan_pool = ThreadPoolExecutor(max_workers=len(self._parts), thread_name_prefix="ragdx-shard")

    def run(key: tuple[str, int], parts: list[int]) -> Any:
        pool = self._shard_pool(key[0])
        with pool.connection() as conn:
            return job(conn, parts)
    # the first job runs on this thread: one hand-off fewer per fan-out (each costs a wake-up,
    # which on a loaded machine is a wait for a core)
    (first, first_parts), *others = jobs.items()
    futures = [self._fan_pool.submit(run, server, parts) for server, parts in others]
    try:
        here = run(first, first_parts)
    except BaseException:
        for future in futures:
            future.exception()  # the other servers' jobs end before the error is raised
        raise
    return [here, *(f.result() for f in futures)]


def _pg_shard_pool(self: PostgresStore, server: str) -> Any:
    with self._pools_lock:  # not self._lock: a writer holds that while it fans out
        pool = self._shard_pools.get(server)
        if pool is None:
            from psycopg_pool import ConnectionPool
            pool = self._shard_pools[server] = ConnectionPool(
                self._shard_conninfo(server), min_size=1, max_size=self._pool.max_size,
                kwargs={"autocommit": True, **self._connect_args}, configure=self._configure,
                open=True, name=f"ragdx:{self.schema}:{server}")
        return pool


def _pg_fan(self: PostgresStore, sql: Callable[[str], str], args: Sequence[Any] | dict | None = None, *,
            binary: bool = False, no_sort: bool = False, parts: Sequence[int] | None = None) -> list[tuple]:
    """The rows of ``sql(suffix)`` over every part (``suffix`` names a part's tables: ``""``
    on one server, ``_p<n>`` sharded). Sharded, each shard server answers for its parts,
    all servers at once; inside this thread's writing transaction, its connection to the
    coordinator reads them all (through postgres_fdw), so the transaction's rows are seen.
    ``no_sort``: the planner may not sort (``enable_sort`` off for this query), so an
    ``ORDER BY`` that an index serves is read from the index. ``parts``: only these parts
    (sharded)."""
    if self._writing():
        self._flush()  # this transaction's buffered rows are read too

    def run(conn: Any, query: str) -> list[tuple]:
        query = query.replace("{s}", self.schema)
        if not no_sort:
            return conn.cursor(binary=binary).execute(query, args).fetchall()
        with conn.transaction():  # (a savepoint inside the writing transaction)
            conn.execute("SET LOCAL enable_sort = off")
            rows = conn.cursor(binary=binary).execute(query, args).fetchall()
            conn.execute("SET LOCAL enable_sort = on")
        return rows
    if list(self._parts.values()) == [None]:
        with self._conn() as conn:
            return run(conn, sql(""))

    def union(parts: list[int]) -> str:
        return " UNION ALL ".join(f"({sql(f'_p{p}')})" for p in parts)
    if self._writing():
        return run(self._tx, union([p for p in self._parts if parts is None or p in parts]))
    found = self._on_servers(lambda conn, held: run(conn, union(held)), parts, each_part=True)
    return [row for rows in found for row in rows]


def _pg_analyze(self: PostgresStore) -> None:
    """After a commit, refresh the planner's statistics (:func:`_pg_analyze_all`) when the chunks
    grew by a tenth since last time: a store searched right after a large ingest is otherwise
    planned blind until autovacuum looks."""
    rows = int(self._one("SELECT coalesce(sum(n_rows), 0) FROM {s}.corpus")[0])
    last = self._one("SELECT value FROM {s}.meta WHERE key = 'analyzed_rows'")
    if last is not None and rows <= int(last[0]) * 1.1:
        return
    self._analyze_all()
    with self._pool.connection() as conn:
        conn.execute(f"INSERT INTO {self.schema}.meta VALUES ('analyzed_rows', %s) ON CONFLICT (key) "
                     "DO UPDATE SET value = EXCLUDED.value", (str(rows),))


def _pg_analyze_all(self: PostgresStore) -> None:
    """Refresh the planner's statistics of the store's tables on every server. One server: every
    table (on none, a BM25 search of a store just filled, the Python docs' 33,783 chunks, took
    33 ms a question against 4 ms). Sharded: each shard's part tables, which the shard plans its
    part of a search with, and the coordinator's view of the chunks, access and vectors (without
    row counts, it would fetch every row of a part to sort it locally rather than ship the sort
    and limit to the shard; postgres_fdw reads every row of a foreign table to sample it, so the
    other tables are left)."""
    import psycopg  # the store is open: the extra is installed
    local = ("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
             "AND c.relkind = 'r' ORDER BY 1")
    servers = sorted({server for server in self._parts.values() if server is not None})
    for conninfo in [None, *(self._shard_conninfo(server) for server in servers)]:
        with (self._pool.connection() if conninfo is None else
              psycopg.connect(conninfo, autocommit=True, **self._connect_args)) as conn:
            if conninfo is None and servers:
                tables = ["chunks", "acl", *self._vec_tables()]
            else:
                tables = [t for (t,) in conn.execute(local, (self.schema,))]
            with conn.transaction():
                conn.execute("SET LOCAL statement_timeout = 0")  # the store's own maintenance, not a search
                conn.execute(f"ANALYZE {', '.join(f'{self.schema}.{t}' for t in tables)}")


def _pg_parts_of(self: PostgresStore, rowids: list[int]) -> dict[int, int]:
    """Each chunk row's part (hash of its doc_id, chosen by PostgreSQL's partitioning)."""
    if list(self._parts.values()) == [None]:
        return dict.fromkeys(rowids, 0)
    rows = self._tx.execute(f"SELECT rowid, tableoid::regclass::text FROM {self.schema}.chunks "
                            "WHERE rowid = ANY(%s)", (rowids,)).fetchall()
    return {rowid: int(name.rsplit("_p", 1)[1]) for rowid, name in rows}
