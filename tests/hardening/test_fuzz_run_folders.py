"""Generated damage to run folders of 'ragdx run' and to settings files (issue 25): a finished and an
unfinished run folder are damaged in structured ways (files truncated, deleted, garbage appended
or written over; run.db truncated, overwritten, a table dropped, rows deleted, values of the
wrong type), then resumed. Every case ends with exit 0 and a correct repair, or exit 2 and a
message naming the damaged file; never a traceback, never a silent drop; each within a time and
memory bound. Settings files are mutated line by line: each is read correctly (every value in
its range) or refused with a message naming the file (and the key's line when it is there).

The cases that once failed are kept as explicit examples (ONCE_FAILED, ONCE_FAILED_CONFIGS).
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ragdx.config import Settings, load_settings
from ragdx.errors import ConfigError, InputError
from tests.hardening.bounds import bounded
from tests.hardening.conftest import RUN_QUERIES, copy_run, corrupt_page, query_ids, ragdx

FUZZ = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate],  # a failure is reported as found: shrinking re-runs take minutes
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
SECONDS = 60.0  # a loaded two-core machine; a case takes about a second
GROWTH_MB = 512
PUBLISHED = ("traces.jsonl", "diagnosis.jsonl")  # what each published item appends a line to
SUMMARY = ("manifest.json", "metrics.json", "report.html")  # written once every item is settled

Damage = tuple[str, str, Callable[[Path], None]]  # (the file damaged, what was done, how)


# -- damage ----------------------------------------------------------------------------------------

def _sql(*statements: str, params: tuple = ()) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        con = sqlite3.connect(str(run / "run.db"))
        for statement in statements:
            con.execute(statement, params if "?" in statement else ())
        con.commit()
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    return damage


def _truncate(name: str, size: int) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        path = run / name
        if not path.exists():  # an unfinished run may have published nothing yet
            return
        with open(path, "r+b") as fh:
            fh.truncate(min(size, path.stat().st_size))
    return damage


def _overwrite(name: str, fraction: float, data: bytes) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        path = run / name
        if not path.exists():
            return
        with open(path, "r+b") as fh:
            fh.seek(int(path.stat().st_size * fraction))
            fh.write(data)
    return damage


def _append(name: str, data: bytes) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        with open(run / name, "ab") as fh:
            fh.write(data)
    return damage


def _delete(name: str) -> Callable[[Path], None]:
    return lambda run: (run / name).unlink(missing_ok=True)


garbage = st.one_of(st.binary(min_size=1, max_size=64),
                    st.sampled_from([b"\x00" * 4096, b"\xff" * 8192, b'{"query_id": "q"}\n', b"\n\n", b"not json"]))
json_value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                      max_size=3), max_leaves=6)
# text no JSON decoder reads as the value it should be, or as anything at all
json_text = st.one_of(json_value.map(json.dumps), st.sampled_from(["", "{", "[1, 2", "nan", "\x00", "{}" * 3]))
INVALID_STATES = ["", "done", "PUBLISHED", "queued ", "7"]

# files of the folder: damage to them is always repaired from run.db (exit 0)
file_damage = st.one_of(
    st.tuples(st.sampled_from(PUBLISHED), st.integers(0, 20_000)).map(
        lambda t: (t[0], f"truncated to {t[1]}", _truncate(*t))),
    st.tuples(st.sampled_from(PUBLISHED), garbage).map(lambda t: (t[0], "appended", _append(*t))),
    st.tuples(st.sampled_from(PUBLISHED), st.floats(0, 0.99), garbage).map(
        lambda t: (t[0], f"overwritten at {t[1]:.2f}", _overwrite(*t))),
    st.sampled_from(PUBLISHED + SUMMARY).map(lambda n: (n, "deleted", _delete(n))),
)

# run.db: repaired or refused naming run.db (exit 0 or 2)
db_damage = st.one_of(
    st.integers(0, 60_000).map(lambda n: ("run.db", f"truncated to {n}", _truncate("run.db", n))),
    st.tuples(st.floats(0, 0.99), garbage).map(lambda t: ("run.db", f"overwritten at {t[0]:.2f}",
                                                         _overwrite("run.db", *t))),
    st.sampled_from(["run", "items", "checkpoints", "events"]).map(
        lambda t: ("run.db", f"table {t} dropped", _sql(f"DROP TABLE {t}"))),
    st.integers(0, RUN_QUERIES - 1).map(lambda n: ("run.db", f"item {n} deleted", _sql(f"DELETE FROM items WHERE n = {n}"))),
    st.sampled_from(INVALID_STATES).map(lambda s: ("run.db", f"state {s!r}",
                                                   _sql("UPDATE items SET state = ? WHERE n = 1", params=(s,)))),
    st.tuples(st.sampled_from(["sizes", "fingerprint", "invocation", "submitted_at"]), json_text).map(
        lambda t: ("run.db", f"run.{t[0]} = {t[1][:20]!r}",
                   _sql("UPDATE run SET value = ? WHERE key = ?", params=(t[1], t[0])))),
    st.tuples(st.sampled_from(["trace", "diagnosis"]), json_text).map(
        lambda t: ("run.db", f"checkpoint {t[0]} = {t[1][:20]!r}",
                   _sql(f"UPDATE checkpoints SET {t[0]} = ? WHERE n = 0", params=(t[1],)))),
    st.one_of(st.binary(max_size=40), st.just(b"")).map(
        lambda b: ("run.db", f"checkpoint objects = {b[:10]!r}",
                   _sql("UPDATE checkpoints SET objects = ? WHERE n = 0", params=(b,)))),
    st.sampled_from(["'x'", "1.5", "X'00'"]).map(
        lambda v: ("run.db", f"checkpoint index_version = {v}",
                   _sql("PRAGMA ignore_check_constraints = 1", f"UPDATE checkpoints SET index_version = {v}"))),
    st.just(("run.db", "deleted", _delete("run.db"))),
)


# -- the check -------------------------------------------------------------------------------------

def check_run(kind: str, damage: Damage, runs: dict[str, Path]) -> None:
    """Damage a copy of the ``kind`` run folder, resume it, and hold the outcome to the contract."""
    name, what, how = damage
    with tempfile.TemporaryDirectory() as tmp:
        run = copy_run(runs[kind], Path(tmp) / "run")
        for wal in ("run.db-wal", "run.db-shm"):
            (run / wal).unlink(missing_ok=True)
        how(run)
        damaged = (run / name).read_bytes() if (run / name).exists() else None
        # bounded in time and in this process's growth (its lifetime peak is not this case's: an
        # earlier test of the same session may have loaded a model)
        with bounded(seconds=SECONDS, megabytes=GROWTH_MB):
            code, out, err = ragdx(["run", "--resume", str(run), "-q"])  # a traceback fails the test
        if name != "run.db":
            assert code == 0, (kind, name, what, err)  # a published or summary file is always repaired
        assert code in (0, 2), (kind, name, what, code, err)
        if code == 2:
            assert err.startswith("ragdx run: error: ") and str(run / "run.db") in err, (kind, name, what, err)
            return
        every = sorted(query_ids(runs["finished"] / "traces.jsonl"))
        con = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
        try:  # every item published, as the repaired files say
            items = con.execute("SELECT query_id FROM items WHERE state = 'published' ORDER BY query_id").fetchall()
        finally:
            con.close()
        assert [q for (q,) in items] == every, (kind, name, what)
        for published in PUBLISHED:  # every query once: nothing dropped, nothing doubled
            assert sorted(query_ids(run / published)) == every, (kind, name, what, published)
        for summary in SUMMARY:
            assert (run / summary).is_file(), (kind, name, what, summary)
        metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
        assert sorted(metrics["per_query"]) == every, (kind, name, what)
        if name in PUBLISHED and kind == "finished":  # written again exactly as published
            assert (run / name).read_bytes() == (runs["finished"] / name).read_bytes(), (kind, what)
            if damaged != (runs["finished"] / name).read_bytes():  # and said, when the damage changed it
                assert f"{run / name} " in err and "written again from the published checkpoints" in err


@pytest.fixture(scope="module")
def runs(finished_run: Path, unfinished_run: Path) -> dict[str, Path]:
    return {"finished": finished_run, "unfinished": unfinished_run}


@FUZZ
@given(st.sampled_from(["finished", "unfinished"]), file_damage)
def test_damaged_published_and_summary_files_are_repaired(runs, kind, damage):
    check_run(kind, damage, runs)


@FUZZ
@given(st.sampled_from(["finished", "unfinished"]), db_damage)
def test_a_damaged_run_db_is_repaired_or_refused_naming_it(runs, kind, damage):
    check_run(kind, damage, runs)


# cases that once failed (a traceback, a silent drop or a message naming the store), kept
ONCE_FAILED: list[tuple[str, Damage]] = [
    ("unfinished", ("run.db", "garbage pickle", _sql("UPDATE checkpoints SET objects = X'00112233'"))),
    ("unfinished", ("run.db", "trace not JSON", _sql("UPDATE checkpoints SET trace = '{not json'"))),
    ("unfinished", ("run.db", "trace of the wrong shape", _sql("UPDATE checkpoints SET trace = json_set(trace, '$.evidence', 5)"))),
    ("finished", ("run.db", "sizes not JSON", _sql("UPDATE run SET value = 'zz' WHERE key = 'sizes'"))),
    ("unfinished", ("run.db", "sizes gone", _sql("DELETE FROM run WHERE key = 'sizes'"))),
    ("finished", ("run.db", "items table dropped", _sql("DROP TABLE items"))),
    ("unfinished", ("run.db", "items table dropped", _sql("DROP TABLE items"))),
    ("finished", ("run.db", "overwritten mid-file", lambda run: corrupt_page(run / "run.db", "items"))),
    ("finished", ("run.db", "emptied", _truncate("run.db", 0))),
    ("finished", ("run.db", "invocation of the wrong type", _sql("UPDATE run SET value = '{\"store\": 5}' "
                                                                  "WHERE key = 'invocation'"))),
    ("finished", ("run.db", "invocation without a store", _sql("UPDATE run SET value = '{}' WHERE key = 'invocation'"))),
    ("finished", ("run.db", "fingerprint emptied", _sql("UPDATE run SET value = '{}' WHERE key = 'fingerprint'"))),
    ("finished", ("run.db", "fingerprint a list", _sql("UPDATE run SET value = '[]' WHERE key = 'fingerprint'"))),
    ("finished", ("run.db", "an item in no known state", _sql("UPDATE items SET state = 'done' WHERE n = 1"))),
    ("finished", ("traces.jsonl", "truncated", _truncate("traces.jsonl", 100))),
    ("finished", ("traces.jsonl", "deleted", _delete("traces.jsonl"))),
    ("finished", ("diagnosis.jsonl", "garbage appended", _append("diagnosis.jsonl", b"garbage\n"))),
    ("finished", ("report.html", "deleted", _delete("report.html"))),
]


@pytest.mark.parametrize("kind, damage", ONCE_FAILED, ids=[f"{k}: {d[0]} {d[1]}" for k, d in ONCE_FAILED])
def test_each_run_folder_case_that_once_failed(runs, kind, damage):
    check_run(kind, damage, runs)


# -- settings files --------------------------------------------------------------------------------

def _toml_value(value: object) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def full_config() -> list[str]:
    """Every setting at its default, as a TOML file's lines (tables and dotted keys)."""
    lines: list[str] = []

    def table(prefix: str, values: dict) -> None:
        scalars = {k: v for k, v in values.items() if not isinstance(v, dict)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in scalars.items())
        for k, v in values.items():
            if isinstance(v, dict):
                table(f"{prefix}.{k}" if prefix else k, v)
    data = Settings().to_dict()
    lines.extend(f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict))
    table("", {k: v for k, v in data.items() if isinstance(v, dict)})
    return [line for line in lines if line]


VALUES = ['"x"', "-1", "1e400", "nan", "inf", "true", "[1]", "{a = 1}", "2.5", "7", "0", "99999999999999999999",
          '"weighted"', '""', "1979-05-27", "0.5"]
GARBAGE_LINES = ["[[", "x = ", "= 1", "\x00", "[generation", "generation.min_coverage = 0.4", "a.b.c = 1",
                 "[retrieval.dense]", "'quoted key' = 1"]


def _set_value(lines: list[str], k: int, value: str) -> list[str]:
    line = lines[k % len(lines)]
    if "=" not in line:
        return lines
    return lines[:k % len(lines)] + [line.split("=", 1)[0] + "= " + value] + lines[k % len(lines) + 1:]


mutation = st.one_of(
    st.tuples(st.integers(0, 200), st.sampled_from(VALUES)).map(lambda t: lambda ls: _set_value(ls, *t)),
    st.integers(0, 200).map(lambda k: lambda ls: ls[:k % len(ls)] + ls[k % len(ls) + 1:]),
    st.integers(0, 200).map(lambda k: lambda ls: ls[:k % len(ls)] + [ls[k % len(ls)]] + ls[k % len(ls):]),
    st.tuples(st.integers(0, 200), st.sampled_from(GARBAGE_LINES)).map(
        lambda t: lambda ls: ls[:t[0] % len(ls)] + [t[1]] + ls[t[0] % len(ls):]),
)


def check_config(text: str | bytes) -> None:
    """Read a settings file: correct (every number in range) or a ConfigError naming the file and,
    for a key set on a line of it, that line."""
    from ragdx.config import ranges
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "settings.toml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        started = time.perf_counter()
        try:
            loaded = load_settings(path)
        except (ConfigError, InputError) as exc:
            assert exc.exit_code == 2
            message = str(exc)
            assert message.startswith(str(path)) or message.startswith(f"config file not found: {path}"), message
            key = getattr(exc, "key", None)
            leaf = key.split(".")[-1] if key else None
            decoded = text if isinstance(text, str) else text.decode("utf-8", "replace")
            if leaf and re.search(rf"^\s*{re.escape(leaf)}\s*=", decoded, re.M) and decoded.count(f"{leaf} =") == 1:
                assert re.match(rf"{re.escape(str(path))}:\d+: ", message), message
        else:
            for key, (low, high) in ranges().items():
                assert low <= loaded.get(key) <= high, key
        assert time.perf_counter() - started < 5.0


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_settings_files(mutations):
    lines = full_config()
    for mutate in mutations:
        lines = mutate(lines) or lines
    check_config("\n".join(lines) + "\n")


ONCE_FAILED_CONFIGS = [
    "[generation]\nmin_coverage = 2.5\n",        # accepted: every answer abstained
    "[generation]\nkeep_ratio = 7\n",
    '[fusion]\nmethod = "weighted"\n',         # IsADirectoryError: '.'
    '[generation]\nmin_coverage = "high"\n',   # the message named neither the file nor the line
    "generation = { keep_ratio = 7 }\n",
]


@pytest.mark.parametrize("text", ONCE_FAILED_CONFIGS)
def test_each_settings_file_that_once_failed(text):
    check_config(text)
    with pytest.raises(ConfigError):
        load_settings_from(text)


def load_settings_from(text: str) -> Settings:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(text, encoding="utf-8")
        return load_settings(path)


def test_the_unmutated_settings_file_reads_as_the_defaults():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "settings.toml"
        path.write_text("\n".join(full_config()) + "\n", encoding="utf-8")
        assert load_settings(path) == Settings()
