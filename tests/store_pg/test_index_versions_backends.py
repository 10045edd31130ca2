"""Index versions on every backend (issue 53): the same tests on SQLite, on one PostgreSQL server
and on PostgreSQL sharded over two: build beside the live index, verify, switch, rollback (a
deletion or a revocation made meanwhile holds), drop, the vectors and the retention that follow
a switch, the CLI, and a `ragdx` command killed with SIGKILL at each step. After a switch, the
keyword channel of each backend answers as a SQLite store switched the same way answers."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragdx.build import build_ingestor, build_pipeline, open_store
from ragdx.cli import main
from ragdx.config import load_settings
from ragdx.errors import InputError, StoreError
from ragdx.index import versions as indexing
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter
from ragdx.ingest.ingestor import delete_documents
from ragdx.store.pg_admin import drop_store, setup_shards
from ragdx.store.postgres import PostgresStore
from ragdx.store.sqlite import INITIAL_INDEX, SQLiteStore
from ragdx.types import Principal, Query, SpaceState
from tests.conftest import snapshot, write
from tests.store.test_crash_index import CLI, OFF, TERMS, killed, sound
from tests.store_pg.conftest import with_schema
from tests.test_index_versions import DOCS, QUESTION, SETTINGS, SMALL, build, configs, found, manifest



@dataclass
class Backend:
    """A store of one backend, by where it is (a file path or a DSN: what ``--store`` takes)."""

    kind: str
    location: str

    def open(self, mode: str = "create") -> Any:
        return open_store(self.location, mode)


@pytest.fixture(params=["sqlite", "pg", "sharded"])
def backend(request, tmp_path):
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "s.db"))
        return
    made = request.getfixturevalue("pg_store_factory")(request.param)  # dropped at the end by the factory
    made.close()
    yield Backend(request.param, made.dsn)


@pytest.fixture
def store(backend, tmp_path):
    s = backend.open()
    ingest(s, tmp_path / "c")
    yield s
    s.close()


def ingest(store: Any, folder: Path, overrides: list[str] = (), **kw) -> None:
    build_ingestor(store, load_settings(overrides=[*SETTINGS, *overrides])).run(manifest(folder, **kw))


def ranked(store: Any, terms, groups=("public",)) -> list[tuple[str, float]]:
    return [(c.id, round(score, 9)) for c, score in store.bm25(terms, groups, 50)]


def execute(store: Any, sql: str, args: tuple = ()) -> list[tuple]:
    """Raw SQL on the store, outside its API (to stage a fault), in PostgreSQL's form."""
    if isinstance(store, SQLiteStore):
        with store._db:
            return store._db.execute(sql.replace("{s}.", "").replace("%s", "?"), args).fetchall()
    with store._pool.connection() as conn:
        cursor = conn.execute(sql.replace("{s}", store.schema), args)
        return cursor.fetchall() if cursor.description else []


def staged_rows(store: Any) -> dict[str, int]:
    return {table: execute(store, f"SELECT COUNT(*) FROM {{s}}.{table}")[0][0]
            for table in ("staged_versions", "staged_sections", "staged_chunks", "staged_vectors")}


def dump(backend: Backend) -> list[str]:
    """Every row of every table of the store, as text: equal dumps, equal stores."""
    if backend.kind == "sqlite":
        return snapshot(Path(backend.location))
    with backend.open("read") as store:
        tables = [t for (t,) in execute(store, "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON "
                                        "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN "
                                        "('r', 'p') AND NOT c.relispartition ORDER BY 1", (store.schema,))]
        return [f"{t}: {row}" for t in tables
                for row in sorted(r[0] for r in execute(store, f"SELECT x::text FROM {{s}}.{t} x"))]


def consistent(backend: Backend) -> Any:
    return sound(backend.open("write"))


@pytest.fixture
def reference(tmp_path):
    """A SQLite store with the same documents, switched to SMALL: what every backend must answer."""
    with SQLiteStore(tmp_path / "ref.db") as ref:
        ingest(ref, tmp_path / "ref")
        indexing.switch_index(ref, build(ref), force=True)
        yield {tuple(terms): ranked(ref, terms) for terms in TERMS}


# -- build, verify, switch, rollback, drop -------------------------------------------------------
def test_a_built_version_is_invisible_until_the_switch_and_then_answers_as_sqlite_does(store, reference):
    live_config, generation = configs(store), store.index_version
    before = {tuple(terms): ranked(store, terms) for terms in TERMS}
    index_id = build(store)
    assert store.index_version == generation and configs(store) == live_config and len(store.chunks()) == 6
    assert {tuple(terms): ranked(store, terms) for terms in TERMS} == before
    built = store.index_version_of(index_id)
    assert (built.state, built.versions, built.chunks) == (SpaceState.BUILT, 3, 7)
    check = indexing.verify_index(store, index_id)
    assert check.problems == () and check.state is SpaceState.VERIFIED
    assert check.notes[1] == "permission probes: 2 restricted chunks asked as public, none reached"
    assert indexing.switch_index(store, index_id) == INITIAL_INDEX
    assert store.index_version > generation
    assert configs(store) == {SMALL.id} and len(store.chunks()) == 7
    assert {tuple(terms): ranked(store, terms) for terms in TERMS} == reference
    assert store.verify() == []
    assert store.audit() == ([], [f"index version {INITIAL_INDEX} (retired) held beside the live one: 6 chunks "
                                  "of 3 versions, invisible to queries"])
    assert {v.id: v.state for v in store.index_versions()} == {INITIAL_INDEX: SpaceState.RETIRED,
                                                               index_id: SpaceState.ACTIVE}
    indexing.rollback_index(store)
    assert {tuple(terms): ranked(store, terms) for terms in TERMS} == before
    assert store.live_index().id == INITIAL_INDEX and store.verify() == []


def test_a_deleted_document_never_resurfaces_after_a_switch_or_a_rollback(store):
    index_id = build(store)
    assert found(store, ["refunds", "gift"]) == {"refund.md"}  # premise: found before the delete
    delete_documents(store, ["refund.md"])  # after the build: its staged rows go with it
    assert execute(store, "SELECT COUNT(*) FROM {s}.staged_chunks WHERE doc_id = 'refund.md'") == [(0,)]
    indexing.switch_index(store, index_id, force=True)
    assert found(store, ["refunds", "gift", "parcels"]) == {"shipping.md"}
    assert configs(store) == {SMALL.id} and store.chunks("refund.md") == []
    indexing.rollback_index(store)
    assert store.live_index().id == INITIAL_INDEX
    assert found(store, ["refunds", "gift", "parcels"]) == {"shipping.md"} and SMALL.id not in configs(store)
    assert store.chunks("refund.md") == [] and store.audit()[0] == []
    indexing.rollback_index(store)  # and back again
    assert found(store, ["refunds", "gift", "parcels"]) == {"shipping.md"} and configs(store) == {SMALL.id}


def test_a_revocation_holds_after_a_rollback_and_an_edit_is_chunked_with_the_old_settings(store, tmp_path):
    assert "salaries.md" in found(store, ["bonuses"], ("staff",))  # premise
    indexing.switch_index(store, build(store), force=True)
    docs = dict(DOCS, **{"shipping.md": DOCS["shipping.md"].replace("two weeks", "three weeks")})
    ingest(store, tmp_path / "c", ["chunking.max_tokens=12"], docs=docs, acl={"salaries.md": ["board"]})
    assert "salaries.md" not in found(store, ["bonuses"], ("staff",))
    indexing.rollback_index(store)
    assert "salaries.md" not in found(store, ["bonuses"], ("staff",))
    assert "salaries.md" in found(store, ["bonuses"], ("board",))
    current = store.latest("shipping.md").document.version
    assert {c.config_id for c in store.chunks("shipping.md", current)} == configs(store) - {SMALL.id}
    assert len(configs(store)) == 1 and store.verify() == []
    assert [c.text for c, _ in store.bm25(["three", "weeks"], ("public",), 1)] == \
        ["Abroad\n\nParcels abroad take three weeks and cost extra."]


def test_verify_reports_coverage_a_rebuild_adds_it_and_the_switch_chunks_what_came_after(store, tmp_path):
    index_id = build(store)
    more = dict(DOCS, **{"returns.md": "# Returns\n\nReturns go to the depot.\n"})
    ingest(store, tmp_path / "c", docs=more)
    check = indexing.verify_index(store, index_id)
    assert [p.split(" (first")[0] for p in check.problems] == [f"coverage: 1 current versions are not in {index_id}"]
    with pytest.raises(InputError, match="not verified"):
        indexing.switch_index(store, index_id)
    assert build(store) == index_id  # the same settings continue the same version
    assert indexing.verify_index(store, index_id).problems == ()
    ingest(store, tmp_path / "c", docs=dict(more, **{"depot.md": "# Depot\n\nThe depot opens at nine.\n"}))
    indexing.switch_index(store, index_id)
    assert {c.config_id for c in store.chunks("depot.md")} == {SMALL.id}
    assert found(store, ["depot"]) == {"returns.md", "depot.md"} and store.verify() == []


def test_verify_finds_restricted_text_filed_under_a_public_document(store):
    index_id = build(store)
    # the bug a probe guards: a staged chunk of salaries.md attributed to refund.md
    refund = store.latest("refund.md").document.version
    execute(store, "UPDATE {s}.staged_chunks SET doc_id = 'refund.md', version = %s WHERE index_id = %s AND "
            "doc_id = 'salaries.md'", (refund, index_id))
    execute(store, "UPDATE {s}.staged_sections SET doc_id = 'refund.md', version = %s WHERE index_id = %s AND "
            "doc_id = 'salaries.md'", (refund, index_id))
    check = indexing.verify_index(store, index_id)
    assert check.state is SpaceState.BUILT
    assert [p for p in check.problems if p.startswith("permission")] == [
        f"permission: a public principal asking {q!r} reaches the text of restricted salaries.md@"
        f"{store.latest('salaries.md').document.version} in chunk {cid}, filed under refund.md@{refund}"
        for q, cid in _probes(store, index_id)]


def _probes(store: Any, index_id: str) -> list[tuple[str, str]]:
    """The probe questions (the first 12 words of each live chunk of salaries.md) and the staged chunk
    holding each."""
    out = []
    for chunk in store.chunks("salaries.md"):
        question = " ".join(chunk.text.split()[:12])
        out += [(question, c.id) for c in store.staged_chunks(index_id) if question in " ".join(c.text.split())]
    return out


def test_a_version_that_is_not_live_is_dropped_with_everything_it_holds_and_the_live_one_never(store):
    live_chunks, generation = len(store.chunks()), store.index_version
    index_id = build(store)
    assert staged_rows(store)["staged_chunks"] == 7
    dropped = indexing.drop_index(store, index_id)
    assert (dropped.id, dropped.state, dropped.chunks) == (index_id, SpaceState.BUILT, 7)
    assert staged_rows(store) == dict.fromkeys(staged_rows(store), 0) and len(staged_rows(store)) == 4
    assert len(store.chunks()) == live_chunks and store.index_version == generation and store.verify() == []
    indexing.switch_index(store, build(store), force=True)
    with pytest.raises(InputError, match="is live"):
        indexing.drop_index(store, store.live_index().id)
    assert indexing.drop_index(store, INITIAL_INDEX).state is SpaceState.RETIRED
    with pytest.raises(InputError, match="no retired index version"):
        indexing.rollback_index(store)
    assert configs(store) == {SMALL.id}


def test_retention_is_applied_at_the_switch_and_the_text_stays_stored(backend, tmp_path):
    def add(store: Any, version: str, text: str) -> None:
        write(tmp_path / f"a{version}.txt", text)
        build_ingestor(store, load_settings(overrides=SETTINGS)).run(write(
            tmp_path / "m.jsonl", json.dumps({"doc_id": "a", "version": version, "path": f"a{version}.txt"}) + "\n"))

    with backend.open() as store:
        for version, text in (("1", "apple banana cherry kiwi"), ("2", "apple banana"), ("3", "apple fig")):
            add(store, version, text)
        live = ChunkerConfig.from_json(store.parse_configs()[0][0])  # the same chunker, another retention
        index_id = build(store, live, retain=0)  # a@3 is current: the one version it indexes
        assert store.index_version_of(index_id).chunks == 1
        add(store, "4", "apple grape")  # after the build: a@3 is superseded now
        indexing.switch_index(store, index_id, force=True)
        assert sorted({(c.doc_id, c.version) for c in store.chunks()}) == [("a", "4")]
        assert [(e.op, e.version) for e in store.log_entries()][-2:] == [("index", None), ("unindex", "3")]
        assert store.texts("a", "3")[1] == "apple fig" and store.verify() == []
        assert found(store, ["fig"]) == set() and found(store, ["grape"]) == {"a"}


def test_vectors_follow_the_chunks_through_a_switch_and_a_rollback(backend, tmp_path):
    from ragdx.ingest.embed import Embedder
    from ragdx.testing.encoders import HashingEncoder
    encoder = HashingEncoder()
    dense = ["chunking.tokenizer=regex", "rerank.method=none", "generation.semantic_weight=0"]
    with backend.open() as store:
        build_ingestor(store, load_settings(overrides=dense), encoder=encoder).run(manifest(tmp_path / "c"))
        space = store.active_space().id
        live = {c.id for c in store.chunks()}
        embedder = Embedder(encoder, backend="HashingEncoder")
        built = indexing.build_index(store, SMALL, RegexTokenCounter(), embedder=embedder)
        assert built.embedding.chunks == built.chunks == 7 and staged_rows(store)["staged_vectors"] == 7
        assert store.chunks_without_vectors(space) == []
        indexing.switch_index(store, built.index_id, force=True, embedder=embedder)
        new = {c.id for c in store.chunks()}
        assert store.chunks_without_vectors(space) == [] and new.isdisjoint(live)
        pipeline = build_pipeline(store, load_settings(overrides=dense), encoder=encoder)
        trace = pipeline.run(Query("q", QUESTION, Principal("ann", ("public",))))
        assert trace.stage("dense").items and {c.chunk_id for c in trace.stage("dense").items} <= new
        indexing.rollback_index(store, embedder=embedder)
        assert {c.id for c in store.chunks()} == live and store.chunks_without_vectors(space) == []
        assert store.audit()[0] == [] and store.verify() == []


def test_the_cli_builds_verifies_switches_rolls_back_and_drops(store, backend, capsys):
    s = ["--store", backend.location, "--set", "retrieval.dense.enabled=false"]
    assert main(["index", "build", "--chunks", *s, "--set", "chunking.max_tokens=12", "--set",
                 "chunking.tokenizer=regex"]) == 0
    assert "index ix_1: 3 versions chunked, 0 copied from the live index" in capsys.readouterr().out
    assert main(["index", "switch", *s, "--index", "ix_1"]) == 2
    assert "not verified" in capsys.readouterr().err
    assert main(["index", "verify", *s, "--index", "ix_1"]) == 0
    assert "index ix_1: verified" in capsys.readouterr().out
    assert main(["index", "switch", *s, "--index", "ix_1"]) == 0
    assert "live index: ix_1 (was ix_0)" in capsys.readouterr().out
    assert main(["index", "status", "--store", backend.location]) == 0
    out = capsys.readouterr().out
    assert "ix_1   active   3         7       max 12, overlap 0, regex:words+punct" in out
    keyword = "FTS5" if backend.kind == "sqlite" else "FTS5's BM25 from postings"
    assert f"7 chunks in 3 versions; BM25: {keyword}, in step with the store" in out
    assert main(["index", "rollback", "--chunks", *s]) == 0
    assert "live index: ix_0 (rolled back)" in capsys.readouterr().out
    assert main(["index", "drop", *s, "--index", "ix_1"]) == 0
    assert capsys.readouterr().out.strip() == "index ix_1 dropped (retired, 7 chunks); there is no rollback now"


# -- a command killed with SIGKILL at each step ---------------------------------------------------
@pytest.mark.parametrize("point", ["commit:3", "staged:1"])
def test_a_build_killed_midway_leaves_the_live_index_and_continues(store, backend, point):
    live = [(c.id, c.text) for c in store.chunks()]
    build_args = ["index", "build", "--chunks", "--store", backend.location, *OFF, "--set", "chunking.max_tokens=12"]
    killed(build_args, point)
    with consistent(backend) as again:
        assert [(c.id, c.text) for c in again.chunks()] == live
        [_, building] = again.index_versions()
        assert (building.state, building.versions) == (SpaceState.BUILDING, 0 if point == "commit:3" else 3)
    subprocess.run(CLI + build_args, check=True, capture_output=True)
    with consistent(backend) as again:
        [_, built] = again.index_versions()
        assert (built.id, built.state, built.versions, built.chunks) == ("ix_1", SpaceState.BUILT, 3, 7)


@pytest.mark.parametrize("point", ["commit", "committed"])
def test_a_switch_killed_is_all_or_nothing(store, backend, point):
    index_id = build(store)
    assert indexing.verify_index(store, index_id).problems == ()
    store.close()
    before = dump(backend)
    killed(["index", "switch", "--store", backend.location, "--index", index_id, *OFF], point)
    if point == "commit":
        assert dump(backend) == before
    with consistent(backend) as again:
        live = again.live_index().id
        assert live == (INITIAL_INDEX if point == "commit" else index_id)
        assert (configs(again) == {SMALL.id}) == (live == index_id) and len(configs(again)) == 1
        assert found(again, ["bonuses"], ("staff",)) == {"salaries.md"}


def test_a_rollback_killed_before_its_commit_leaves_the_switched_index(store, backend):
    indexing.switch_index(store, build(store), force=True)
    store.close()
    before = dump(backend)
    killed(["index", "rollback", "--chunks", "--store", backend.location, *OFF], "commit")
    assert dump(backend) == before
    with consistent(backend) as again:
        assert again.live_index().id == "ix_1" and configs(again) == {SMALL.id}


# -- PostgreSQL: a store of schema 3 ------------------------------------------------------------
def test_a_pg_store_of_schema_3_is_refused_read_only_and_migrated_when_opened_for_writing(pg_servers, tmp_path):
    dsn = with_schema(pg_servers[0], f"t_{uuid.uuid4().hex[:10]}")
    with PostgresStore(dsn) as store:
        ingest(store, tmp_path / "c")
        answers = ranked(store, ["parcels"])
        execute(store, "DROP TABLE {s}.staged_vectors, {s}.staged_chunks, {s}.staged_sections, "
                "{s}.staged_versions, {s}.index_versions")
        execute(store, "UPDATE {s}.meta SET value = '3' WHERE key = 'schema_version'")
    try:
        with pytest.raises(StoreError, match="store schema 3 is older than this ragdx's .* open it once for writing"):
            PostgresStore(dsn, "read")
        with PostgresStore(dsn, "write") as store:
            assert execute(store, "SELECT value FROM {s}.meta WHERE key = 'schema_version'") == [("4",)]
            assert [(v.id, v.state, v.chunks) for v in store.index_versions()] == [(INITIAL_INDEX, SpaceState.ACTIVE, 6)]
            assert ranked(store, ["parcels"]) == answers
            assert build(store) == "ix_1" and store.verify() == []
    finally:
        drop_store(dsn)


def test_a_sharded_switch_puts_each_chunk_on_its_documents_shard(pg_store_factory, tmp_path):
    store = pg_store_factory("sharded")
    ingest(store, tmp_path / "c")
    indexing.switch_index(store, build(store), force=True)
    parts = {doc: part for doc, part in execute(
        store, "SELECT DISTINCT doc_id, tableoid::regclass::text FROM {s}.documents")}
    chunk_parts = execute(store, "SELECT doc_id, tableoid::regclass::text FROM {s}.chunks")
    servers = {store.partitions()[int(part.rsplit("_p", 1)[1])] for part in parts.values()}
    assert len(chunk_parts) == 7 and len(servers) == 2  # premise: both shards hold documents
    assert {(doc, part.replace("chunks", "documents")) for doc, part in chunk_parts} == set(parts.items())


def test_a_sharded_verify_leaves_no_scratch_store_behind(pg_store_factory, pg_servers, tmp_path):
    store = pg_store_factory("sharded")
    ingest(store, tmp_path / "c")
    indexing.verify_index(store, build(store))
    assert scratch_schemas(pg_servers) == []
    import psycopg
    with psycopg.connect(pg_servers[0], autocommit=True) as conn:
        assert conn.execute("SELECT srvname FROM pg_foreign_server WHERE srvname LIKE '%ragdx_check%'").fetchall() == []


def test_setup_shards_and_drop_store_are_still_imported_from_the_store_module():
    from ragdx.store import pg_admin, postgres
    assert (postgres.setup_shards, postgres.drop_store) == (pg_admin.setup_shards, pg_admin.drop_store)
    with pytest.raises(AttributeError, match="has no attribute 'set_up_shards'"):
        postgres.set_up_shards  # noqa: B018


@pytest.mark.parametrize("command", ["verify", "drop"])
def test_a_verify_or_a_drop_killed_changes_nothing_and_the_next_verify_leaves_no_scratch_store(
        store, backend, command, request, tmp_path, monkeypatch):
    import tempfile
    scratch = tmp_path / "tmp"  # where SQLite's scratch folders go, in this process and the killed one
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    index_id = build(store)
    store.close()
    before = dump(backend)
    killed(["index", command, "--store", backend.location, "--index", index_id, *OFF], "commit")
    assert dump(backend) == before
    # premise: the killed verify left its scratch store (SQLite: a folder; PostgreSQL: a schema on every server)
    left = {"sqlite": 1, "pg": 1, "sharded": 3}[backend.kind] if command == "verify" else 0
    assert len(scratch_stores(backend, request, scratch)) == left
    with consistent(backend) as again:
        assert again.index_version_of(index_id).state is SpaceState.BUILT
        assert indexing.verify_index(again, index_id).problems == ()
    assert scratch_stores(backend, request, scratch) == []  # the next verify dropped it, and its own


def scratch_stores(backend: Backend, request, folder: Path) -> list[str]:
    if backend.kind == "sqlite":
        return [p.name for p in folder.glob("ragdx-verify-*")]
    return scratch_schemas(request.getfixturevalue("pg_servers"))


def scratch_schemas(servers: list[str]) -> list[str]:
    """The scratch stores' schemas on every server."""
    import psycopg
    found = []
    for dsn in servers:
        with psycopg.connect(dsn, autocommit=True) as conn:
            found += [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ragdx_check%'")]
    return found


def test_a_role_that_may_not_create_schemas_is_told_what_grant_verify_and_a_new_store_need(pg_servers, tmp_path):
    import psycopg
    role, schema = f"t_role_{uuid.uuid4().hex[:8]}", f"t_{uuid.uuid4().hex[:10]}"
    admin = with_schema(pg_servers[0], schema)
    for server in pg_servers:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN")  # no CREATE on the database: PostgreSQL's default
    try:
        with PostgresStore(admin) as store:
            ingest(store, tmp_path / "c", ["retrieval.dense.enabled=false"])
            index_id = build(store)
        with psycopg.connect(pg_servers[0], autocommit=True) as conn:
            conn.execute(f"ALTER SCHEMA {schema} OWNER TO {role}")
            for kind, owned in (("TABLE", "SELECT tablename FROM pg_tables WHERE schemaname = %s"),
                                ("SEQUENCE", "SELECT sequencename FROM pg_sequences WHERE schemaname = %s")):
                for (name,) in conn.execute(owned, (schema,)).fetchall():
                    conn.execute(f"ALTER {kind} {schema}.{name} OWNER TO {role}")
        as_role = psycopg.conninfo.make_conninfo(admin, user=role)
        before = dump(Backend("pg", admin))
        database = psycopg.conninfo.conninfo_to_dict(pg_servers[0])["dbname"]
        grant = f"ask the database's owner to run 'GRANT CREATE ON DATABASE {database} TO {role}'"
        with PostgresStore(as_role, "write") as store:
            with pytest.raises(StoreError, match=f"may not create schemas in the database '{database}'; the store "
                                                 f"is unchanged: {grant}$"):
                indexing.verify_index(store, index_id)
        assert dump(Backend("pg", admin)) == before
        fresh = psycopg.conninfo.make_conninfo(with_schema(pg_servers[0], f"t_{uuid.uuid4().hex[:10]}"), user=role)
        with pytest.raises(StoreError, match=f"the role '{role}' may not create the store's schema .* nothing was "
                                             f"made: {grant}, or name a schema that exists"):
            PostgresStore(fresh)
        with pytest.raises(StoreError, match=r"setting up shards creates the postgres_fdw extension, .* \(permission "
                                             r"denied for database ragdx\): run it as a role that may"):
            setup_shards(fresh, [psycopg.conninfo.make_conninfo(shard, user=role) for shard in pg_servers[1:]])
    finally:
        drop_store(admin)
        for server in pg_servers:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP ROLE {role}")


def test_messages_name_a_store_without_its_password():
    from ragdx.store.postgres import _redact
    assert _redact("postgresql://ann:s3cret@db:5432/ragdx") == "postgresql://ann:***@db:5432/ragdx"
    assert _redact("user=ann password=s3cret host=db") == "user=ann password=*** host=db"
    assert _redact("user=ann password='s3 cr\\'et' host=db") == "user=ann password=*** host=db"
