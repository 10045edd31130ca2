"""PostgreSQL servers for the backend tests: a coordinator and two shards.

``RAGDX_PG_SERVERS`` names them (three comma-separated DSNs, coordinator first; ``.ci/run``
starts them and sets it). Without it, the session starts its own three servers with
``scripts/pg_cluster.sh`` on free loopback ports and stops them at the end. A developer may opt
out locally with ``RAGDX_SKIP_PG=1``; under CI (``CI`` set) nothing is skipped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg", reason="the 'pg' extra is not installed")

from ragdx.store.pg_admin import drop_store, setup_shards  # noqa: E402
from ragdx.store.postgres import PostgresStore  # noqa: E402

pytestmark = pytest.mark.pg

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000 and all(_closed(port + i) for i in range(3)):
            return port
    raise RuntimeError("no three free loopback ports in a row")


def _closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="session")
def pg_servers(tmp_path_factory: pytest.TempPathFactory):
    """The three servers' DSNs (database ``ragdx``): coordinator, shard 1, shard 2."""
    if os.environ.get("RAGDX_SKIP_PG") == "1" and not os.environ.get("CI"):
        pytest.skip("RAGDX_SKIP_PG=1: the PostgreSQL backend tests are skipped on this machine")
    given = os.environ.get("RAGDX_PG_SERVERS")
    if given:
        yield given.split(",")
        return
    folder = Path("/var/tmp") / f"ragdx-pg-test-{uuid.uuid4().hex[:8]}"
    port = str(_free_port())
    script = ROOT / "scripts" / "pg_cluster.sh"
    started = subprocess.run(["bash", str(script), "start", str(folder), port], capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"could not start PostgreSQL for the backend tests ({started.stderr.strip()}); run "
                    "scripts/pg_install.sh, or set RAGDX_SKIP_PG=1 to skip these tests locally")
    try:
        dsns = subprocess.run(["bash", str(script), "dsns", str(folder), port], capture_output=True,
                              text=True, check=True).stdout.strip()
        yield dsns.split(",")
    finally:
        subprocess.run(["bash", str(script), "stop", str(folder)], capture_output=True)
        subprocess.run(["rm", "-rf", str(folder)])


def with_schema(dsn: str, schema: str) -> str:
    return f"{dsn}?options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_store_factory(pg_servers):
    """Makes fresh stores (each in a schema of its own): ``make("pg")`` on one server,
    ``make("sharded")`` on the coordinator with the two shards. Dropped at the end."""
    made: list[str] = []
    stores: list[PostgresStore] = []

    def make(kind: str = "pg") -> PostgresStore:
        dsn = with_schema(pg_servers[0], f"t_{uuid.uuid4().hex[:10]}")
        made.append(dsn)
        store = setup_shards(dsn, pg_servers[1:]) if kind == "sharded" else PostgresStore(dsn)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()
    for dsn in made:
        drop_store(dsn)
