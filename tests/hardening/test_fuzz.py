"""Generated bad input for every file and setting ragdx reads: manifests, query sets, imported
traces, settings and store files. Whatever the input, a command returns 0 or 2 (an error that
names what is wrong) and never raises; a command that fails changes no store (issue 14, item 7).

The strategies are shared with ``measure`` (see the bottom), which counts tracebacks instead of
failing on the first.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragdx.cli import main
from ragdx.config import Settings, _keys
from ragdx.ingest.ingestor import Ingestor
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import write
from tests.hardening.conftest import LEXICAL, fingerprint

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- the inputs ------------------------------------------------------------------------------------

# text with what breaks naive code: control characters, lone surrogates, separators, long runs
_chars = st.characters(categories=["Cs", "Cc", "Cf", "Zs", "Zl", "Lu", "Ll", "Nd", "Po", "So"])
SPECIAL_TEXT = ["", " ", "\x00", "a\x00b", "\x1b[31mred\x1b[0m", "\ud800", "x\udfffy", "\u2028", "\u202e",
                "\ufeff", "..", "../../etc/passwd", "a" * 5000, "NaN", "-1", "public", "q1"]
text = st.one_of(st.text(_chars, max_size=20), st.sampled_from(SPECIAL_TEXT))
number = st.one_of(st.integers(), st.integers(min_value=10 ** 19, max_value=10 ** 30),
                   st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 2 ** 63]))
scalar = st.one_of(st.none(), st.booleans(), number, text)
value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) |
                     st.dictionaries(text, inner, max_size=3), max_leaves=8)

# lines no JSON encoder writes: deep nesting, a 5,000-digit integer, broken syntax, NUL
RAW_LINES = ["[" * 100_000, "{\"a\":" * 5000 + "1" + "}" * 5000, '{"doc_id": ' + "7" * 5000 + "}",
             '{"id": "q", "question": 1e999999}', "{", "[]", "null", '"x"', "\x00", '{"a": NaN}',
             '{"doc_id": "a", "path": "a.md"} trailing', '{"id": "q\\ud800"}', "\ufeff{}"]


def _line(obj: object) -> str:
    return json.dumps(obj)  # lone surrogates leave as \ud800 escapes; nan as NaN


def lines(objects: st.SearchStrategy) -> st.SearchStrategy:
    """A file's text: mostly generated objects, sometimes a raw bad line."""
    return st.lists(st.one_of(objects.map(_line), st.sampled_from(RAW_LINES)), min_size=1, max_size=4)\
        .map("\n".join)


def _maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(strategy, value)  # the right type, or anything at all


ident = st.one_of(st.sampled_from(["a", "b", "a.md", "policies/refund.md", "v1", "public", "staff"]), text)
manifest_entry = st.fixed_dictionaries(
    {"doc_id": _maybe(ident), "path": _maybe(st.sampled_from(["a.md", "b.html", "c.txt", "gone.md", "dir",
                                                               "", "../a.md"]))},
    optional={"version": _maybe(ident), "acl": _maybe(st.lists(ident, max_size=3)), "title": _maybe(text),
              "status": _maybe(st.sampled_from(["current", "superseded", "expired", "draft"])),
              "updated_at": _maybe(st.sampled_from(["2026-01-01", "2026-13-01", "yesterday"])),
              "metadata": value, "format": _maybe(st.sampled_from(["markdown", "html", "text", "pdf", "doc"])),
              "extra": value})
alternative = st.fixed_dictionaries({}, optional={
    "doc": _maybe(ident), "quote": _maybe(text), "start": _maybe(number), "end": _maybe(number),
    "id": _maybe(ident), "version": _maybe(ident)})
query = st.fixed_dictionaries(
    {"id": _maybe(ident), "question": _maybe(st.one_of(text, st.just("How long do refunds take?")))},
    optional={"principal": _maybe(st.fixed_dictionaries({}, optional={
        "user": _maybe(ident), "groups": _maybe(st.lists(ident, max_size=2))})),
        "answerable": _maybe(st.booleans()), "required": _maybe(st.lists(st.lists(alternative, max_size=2),
                                                                         max_size=2)),
        "answer": _maybe(text), "tags": _maybe(st.lists(text, max_size=2)), "metadata": value})
item = st.fixed_dictionaries({}, optional={
    "id": _maybe(ident), "doc": _maybe(ident), "version": _maybe(ident), "start": _maybe(number),
    "end": _maybe(number), "text": _maybe(text), "rank": _maybe(number), "score": _maybe(number),
    "readable": _maybe(st.booleans()), "status": _maybe(st.sampled_from(["current", "expired", "?"])),
    "reason": _maybe(text)})
trace = st.fixed_dictionaries(
    {"query_id": _maybe(st.sampled_from(["q1", "q2"]))},
    optional={"stages": _maybe(st.lists(st.fixed_dictionaries(
        {"kind": _maybe(st.sampled_from(["retrieval", "rerank", "context", "generation", "magic"]))},
        optional={"name": _maybe(text), "items": _maybe(st.lists(item, max_size=3)),
                  "dropped": _maybe(st.lists(item, max_size=2)), "seconds": _maybe(number)}), max_size=3)),
        "answer": _maybe(st.fixed_dictionaries({}, optional={
            "text": _maybe(text), "abstained": _maybe(st.booleans()),
            "citations": _maybe(st.lists(ident, max_size=2)), "seconds": _maybe(number),
            "claims": _maybe(st.lists(st.fixed_dictionaries({}, optional={
                "text": _maybe(text), "supported": _maybe(st.booleans()),
                "citations": _maybe(st.lists(ident, max_size=2))}), max_size=2)),
            "usage": _maybe(st.fixed_dictionaries({}, optional={"prompt_tokens": _maybe(number),
                                                               "cost": _maybe(number)}))}))})
setting_value = st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e999", "99999999999999999999", "-1", "0",
                                           "true", "[1, 2]", "{a = 1}", '"x"', "", "[" * 3000, "1.5",
                                           "'\\ud800'", "\"\\u0000\""]),
                          st.text(_chars, max_size=12).filter(lambda t: "\x00" not in t))
setting = st.tuples(st.one_of(st.sampled_from(_keys(Settings)), text.filter(lambda t: "\x00" not in t)),
                    setting_value).map(lambda kv: f"{kv[0]}={kv[1]}")
config_file = st.one_of(st.binary(max_size=60), st.sampled_from([
    b"seed = nan\n", b"[retrieval.bm25]\ntop_k = 99999999999999999999\n", b"[generation]\nmodel = \"caf\xe9\"\n",
    b"v = " + b"[" * 3000, b"[fusion]\nc = inf\n", b"[chunking]\nmax_tokens = 1e3\n", b"\xef\xbb\xbfseed = 1\n"]))

# -- running a command -----------------------------------------------------------------------------

DOCS = {"a.md": "# Refunds\n\nRefunds are accepted within 30 days of delivery.",
        "b.html": "<h1>Errors</h1><p>Error RFD-4021 means the refund window expired.</p>",
        "c.txt": "Parcels are delivered within 3 business days."}


def attempt(argv: list[str], stores: tuple[Path, ...] = ()) -> tuple[int, str]:
    """Run a command; any exception escapes (a traceback). Returns the exit code and stderr; a
    failing command must exit 2, say why, and leave every store as it was."""
    before = [fingerprint(s) if s.exists() else None for s in stores]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors: a message and exit 2, no traceback
            code = exc.code
    assert code in (0, 2), (argv, code, err.getvalue())
    if code:
        assert "error:" in err.getvalue(), err.getvalue()
        assert [fingerprint(s) if s.exists() else None for s in stores] == before, "a failed command changed a store"
    return code, err.getvalue()


@contextlib.contextmanager
def workspace() -> Path:
    """A folder with three small documents and a store holding the first (each example its own)."""
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        for doc, body in DOCS.items():
            write(root / doc, body)
        (root / "dir").mkdir()
        write(root / "seed.jsonl", '{"doc_id": "a", "path": "a.md"}\n')
        with SQLiteStore(root / "store.db") as store:
            Ingestor(store).run(root / "seed.jsonl")
        yield root


def check_manifest(text_: str, run: Callable = attempt) -> None:
    with workspace() as root:
        manifest = write(root / "m.jsonl", text_)
        store = root / "store.db"
        code, _ = run(["ingest", "--store", str(store), str(manifest), *LEXICAL], (store,))
        if code == 0:  # what was accepted can be listed and deleted
            run(["docs", "--store", str(store)], (store,))
            ids = [line["doc_id"] for line in map(json.loads, text_.splitlines())]
            assert run(["delete", "--store", str(store), *dict.fromkeys(ids)], (store,))[0] == 0


def check_queries(text_: str, run: Callable = attempt) -> None:
    with workspace() as root:
        queries = write(root / "q.jsonl", text_)
        store = root / "store.db"
        code, _ = run(["evidence", "--store", str(store), "--queries", str(queries)], (store,))
        if code == 0:
            run(["run", "--store", str(store), "--queries", str(queries), "--out", str(root / "run"), *LEXICAL],
                (store,))
            assert not list((root / "run").glob("*.tmp")), "a run left a temporary file"


def check_traces(text_: str, run: Callable = attempt) -> None:
    with workspace() as root:
        traces = write(root / "t.jsonl", text_)
        queries = write(root / "q.jsonl", '{"id": "q1", "question": "How long do refunds take?", '
                        '"required": [[{"doc": "a", "quote": "within 30 days"}]]}\n'
                        '{"id": "q2", "question": "Refunds?", "answerable": false}\n')
        store = root / "store.db"
        run(["diagnose", "--traces", str(traces), "--queries", str(queries), "--out", str(root / "d")])
        run(["diagnose", "--traces", str(traces), "--queries", str(queries), "--out", str(root / "e"),
             "--store", str(store)], (store,))


def check_settings(overrides: list[str], config: bytes | None, run: Callable = attempt) -> None:
    with workspace() as root:
        store = root / "store.db"
        extra = ["--config", str(write(root / "c.toml", config))] if config is not None else []
        sets = [a for o in overrides for a in ("--set", o)]
        run(["ask", "--store", str(store), *extra, *sets, *LEXICAL, "How long do refunds take?"], (store,))
        run(["ingest", "--store", str(store), *extra, *sets, *LEXICAL, str(root / "seed.jsonl")], (store,))


def check_export(traces: str, diagnoses: str, manifest: str | None, run: Callable = attempt) -> None:
    """A run folder whose files are not what 'ragdx run' wrote."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        write(folder / "traces.jsonl", traces)
        write(folder / "diagnosis.jsonl", diagnoses)
        if manifest is not None:
            write(folder / "manifest.json", manifest)
        run(["export", "--run", str(folder), "--out", str(folder / "spans.jsonl")])


# store files: each probe damages a copy of a good store in one way
def _sql(*statements: str) -> Callable[[Path], None]:
    def probe(path: Path) -> None:
        con = sqlite3.connect(str(path))
        for statement in statements:
            con.execute(statement)
        con.commit()
        con.close()
    return probe


def _bytes(offset: int, data: bytes) -> Callable[[Path], None]:
    def probe(path: Path) -> None:
        _sql("PRAGMA wal_checkpoint(TRUNCATE)")(path)
        with open(path, "r+b") as fh:
            fh.seek(min(offset, max(0, path.stat().st_size - 1)))
            fh.write(data)
    return probe


def _truncate(size: int) -> Callable[[Path], None]:
    def probe(path: Path) -> None:
        _sql("PRAGMA wal_checkpoint(TRUNCATE)")(path)
        with open(path, "r+b") as fh:
            fh.truncate(size)
    return probe


STORE_PROBES = {
    "schema_version text": _sql("UPDATE meta SET value = 'one' WHERE key = 'schema_version'"),
    "schema_version newer": _sql("UPDATE meta SET value = '99' WHERE key = 'schema_version'"),
    "schema_version gone": _sql("DELETE FROM meta WHERE key = 'schema_version'"),
    "index_version text": _sql("UPDATE meta SET value = 'x' WHERE key = 'index_version'"),
    "index_version gone": _sql("DELETE FROM meta WHERE key = 'index_version'"),
    "column dropped": _sql("ALTER TABLE documents DROP COLUMN title"),
    "table dropped": _sql("DROP TABLE tombstones"),
    "trigger dropped": _sql("DROP TRIGGER chunks_fts_insert"),
    "meta dropped": _sql("DROP TABLE meta"),
    "status unknown": _sql("PRAGMA ignore_check_constraints = 1",
                           "UPDATE documents SET status = 'draft'"),
    "metadata not JSON": _sql("UPDATE documents SET metadata = '{'"),
    "acl gone": _sql("DELETE FROM acl"),
    "chunk kind unknown": _sql("UPDATE chunks SET kind = 'poem'"),
    "heading path not JSON": _sql("UPDATE chunks SET heading_path = 'x'"),
    "text not UTF-8": _sql("UPDATE documents SET parsed_text = CAST(X'FF00FE' AS TEXT)"),
    "empty file": _truncate(0),
    "header only": _truncate(100),
    "half": _truncate(40_000),
    "header damaged": _bytes(0, b"not a database!!"),
}
store_probe = st.one_of(st.sampled_from(sorted(STORE_PROBES)).map(lambda k: (k, STORE_PROBES[k])),
                        st.tuples(st.integers(0, 300_000), st.binary(min_size=1, max_size=64))
                        .map(lambda t: (f"bytes at {t[0]}", _bytes(*t))),
                        st.integers(1, 300_000).map(lambda n: (f"truncated to {n}", _truncate(n))))


def check_store(probe: Callable[[Path], None], run: Callable = attempt) -> None:
    with workspace() as root:
        store = root / "store.db"
        probe(store)
        for argv in (["docs"], ["index", "status"], ["ask", *LEXICAL, "How long do refunds take?"],
                     ["evidence", "--queries", str(write(root / "q.jsonl", '{"id": "q", "question": "Refunds?", '
                                                      '"required": [[{"doc": "a", "quote": "30 days"}]]}\n'))],
                     ["delete", "a"], ["ingest", str(root / "seed.jsonl"), *LEXICAL]):
            run([argv[0], "--store", str(store), *argv[1:]], (store,))


# -- the tests -------------------------------------------------------------------------------------

@FUZZ
@given(lines(manifest_entry))
def test_manifests(text_):
    check_manifest(text_)


@FUZZ
@given(lines(query))
def test_query_sets(text_):
    check_queries(text_)


@FUZZ
@given(lines(trace))
def test_imported_traces(text_):
    check_traces(text_)


@FUZZ
@given(st.lists(setting, max_size=3), st.none() | config_file)
def test_settings(overrides, config):
    check_settings(overrides, config)


@FUZZ
@given(lines(trace), lines(st.dictionaries(st.sampled_from(["id", "outcome", "stages"]), value)),
       st.none() | value.map(_line) | st.sampled_from(RAW_LINES))
def test_run_folders_for_export(traces, diagnoses, manifest):
    check_export(traces, diagnoses, manifest)


@FUZZ
@given(store_probe)
def test_store_files(probe):
    check_store(probe[1])


@pytest.mark.parametrize("name", sorted(STORE_PROBES))
def test_each_store_probe(name):
    check_store(STORE_PROBES[name])


def test_a_folder_or_a_missing_file_as_store(tmp_path):
    for store in (tmp_path, tmp_path / "missing.db", Path("/dev/null")):
        for argv in (["docs"], ["delete", "a"]):
            assert attempt([argv[0], "--store", str(store), *argv[1:]])[0] == 2
    assert not (tmp_path / "missing.db").exists()
