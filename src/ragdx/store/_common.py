"""What both stores share below their concerns: how a store is opened (:class:`OpenMode`), the
clock their rows record, and how a row that does not decode is reported.

The stores are split by concern (docs/api.md, "The stores"): :mod:`~ragdx.store.sqlite` and
:mod:`~ragdx.store.postgres` hold each backend's connection and transactions, and each concern
module (``schema``, ``documents``, ``acl``, ``lexical``, ``spaces``, ``checks``, ``staging``,
``shards``) holds that concern's SQL for both dialects side by side. A concern's functions are
the store's methods: the store class assigns them (``readable = acl.sqlite_readable``), so their
first parameter is ``self``, the store, and they reach the connection through it.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from datetime import datetime, timezone
from typing import Any, Callable

from ragdx.errors import StoreError
from ragdx.types import ChoiceEnum


class OpenMode(ChoiceEnum):
    """How a store is opened.

    - ``read``: an existing ragdx store, read-only. Nothing is set up or migrated and no lock is
      taken, so readers work while another process writes (WAL readers see the last commit).
    - ``write``: an existing ragdx store, for writing; its schema is brought up to date and it
      must pass SQLite's quick integrity check first.
    - ``create``: like ``write``, and a missing file becomes a new store.
    """

    READ = "read"
    WRITE = "write"
    CREATE = "create"


def now() -> str:
    """The time a row records: UTC, to the second, ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def is_lock(exc: BaseException) -> bool:
    """Whether an SQLite error is another connection's lock ("database is locked", "... busy"):
    a wait that ran out, not damage."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def use_wal(db: Any, wait: float) -> None:
    """Put the SQLite file ``db`` (a connection, or a wrapper with its ``execute``) is open on in WAL mode, waiting up to ``wait`` seconds for
    another connection doing the same.

    SQLite answers ``PRAGMA journal_mode=WAL`` with "database is locked" at once, without its busy
    timeout, while another connection holds the file's lock; two processes opening one new file
    together (two ``ragdx run`` workers on one run folder, their shared result cache) meet this
    about every other time. So the pragma is tried again, with a growing pause, until ``wait``
    has passed; then the last error is raised.

    Raises:
        sqlite3.OperationalError: still locked after ``wait`` seconds, or any other failure.
    """
    deadline = time.monotonic() + max(0.0, wait)
    pause = 0.002
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if not is_lock(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def decoding(table: str) -> Callable[[Callable], Callable]:
    """A method that decodes rows of ``table``: a row that does not decode (a value outside its
    choices, JSON that does not parse) is a damaged store, said with a :class:`StoreError` that
    names the store (its ``where``: a file, or a DSN without its password)."""
    def wrap(method: Callable) -> Callable:
        @functools.wraps(method)
        def decode(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except (ValueError, TypeError, KeyError) as exc:
                raise StoreError(f"{self.where}: damaged store: a row of the table {table} cannot be "
                                 f"read ({exc})") from None
        return decode
    return wrap
