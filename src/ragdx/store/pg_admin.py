"""Setting up and removing PostgreSQL stores from the shell (``make pg`` uses it)::

    python -m ragdx.store.pg_admin init DSN [--shard DSN ...] [--parts-per-shard N] [--if-missing]
    python -m ragdx.store.pg_admin drop DSN
"""

from __future__ import annotations

import sys
from typing import Sequence

from ragdx.errors import StoreError
from ragdx.store.postgres import PostgresStore, drop_store, setup_shards
from ragdx.store.sqlite import OpenMode


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
