"""`ragdx recheck` cannot be fooled (issue 25, items 1 and 6): an answer binds to the store's id
and index version; a recheck reads every cited span, so an answer whose evidence is gone, was
never there, or was altered is never `valid`; a malformed answer is refused (exit 2, naming the
file and the field), never a traceback. The fuzz test mutates a real answer; the cases that once
failed are kept in tests/hardening/recheck_corpus/ and replayed one by one."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragdx.binding import EvidenceBinding, RecheckStatus, SpanChange, bind_evidence, recheck
from ragdx.build import build_ingestor, build_pipeline
from ragdx.cli import RECHECK_CHANGED, main
from ragdx.config import load_settings
from ragdx.errors import InputError
from ragdx.ingest.ingestor import delete_documents
from ragdx.store.sqlite import SCHEMA_VERSION, SQLiteStore
from ragdx.types import Principal, Query
from tests.conftest import write
from tests.hardening.test_fuzz import ident, number, value
from tests.test_binding import QUESTION, SETTINGS, corpus
from tests.test_index_versions import schema_1

SETS = [a for s in SETTINGS for a in ("--set", s)]
CORPUS = Path(__file__).parent / "recheck_corpus"


def ragdx(*argv: str) -> tuple[int, dict | None, str]:
    """Run a command in this process: exit code, the JSON object it printed (None if none), stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, json.loads(out.getvalue()) if out.getvalue().startswith("{") else None, err.getvalue()


def remove_store(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".cache", ".cache-wal", ".cache-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def rebuild(path: Path, folder: Path, *, keep_refund: bool) -> None:
    """Remove the store and ingest again at the same path: refund.md and shipping.md, or
    shipping.md alone. Either way the new store's index version is 1 again, as the old one's was."""
    remove_store(path)
    manifest = corpus(folder)
    if not keep_refund:
        manifest = write(folder / "m.jsonl", manifest.read_text().splitlines()[1] + "\n")
    with SQLiteStore(path) as store:
        build_ingestor(store, load_settings(overrides=SETTINGS)).run(manifest)
        assert store.index_version == 1


@pytest.fixture
def asked(tmp_path) -> tuple[Path, Path, dict]:
    """A store of refund.md and shipping.md, and `ragdx ask --json`'s answer citing refund.md."""
    store = tmp_path / "s.db"
    assert ragdx("ingest", "--store", str(store), str(corpus(tmp_path)), *SETS)[0] == 0
    code, answer, err = ragdx("ask", "--store", str(store), "--json", *SETS, QUESTION)
    assert code == 0, err
    assert [c["doc"] for c in answer["evidence"]["cited"]] == ["refund.md"]
    return store, write(tmp_path / "answer.json", json.dumps(answer)), answer


def tampered(answer: dict, **fields) -> dict:
    out = copy.deepcopy(answer)
    out["evidence"]["cited"][0].update(fields)
    return out


def answered_read_only(store):
    trace = build_pipeline(store, load_settings(overrides=SETTINGS)).run(
        Query("q", QUESTION, Principal("ann", ("public",))))
    return trace, bind_evidence(store, trace.query.principal, trace.context, trace.answer)


# -- the answer records the store's identity -------------------------------------------------------

def test_an_answer_records_the_store_id_and_a_rebuilt_store_has_another(asked, tmp_path):
    store, _, answer = asked
    with SQLiteStore(store, "read") as opened:
        first = opened.store_id
    assert len(first) == 32 and set(first) <= set("0123456789abcdef")
    assert (answer["evidence"]["store_id"], answer["evidence"]["index_version"]) == (first, 1)
    rebuild(store, tmp_path, keep_refund=True)
    with SQLiteStore(store, "read") as opened:
        assert opened.store_id != first and len(opened.store_id) == 32 and opened.index_version == 1


def test_a_store_made_before_ids_gets_one_when_first_opened_for_writing(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        build_ingestor(store, load_settings(overrides=SETTINGS)).run(corpus(tmp_path))
        store._db.execute("DELETE FROM meta WHERE key = 'store_id'")
    with SQLiteStore(tmp_path / "s.db", "read") as old:  # read-only: nothing is written
        assert (old.store_id, old.index_version) == (None, 1)
        _, binding = answered_read_only(old)
        assert binding.store_id is None
        check = recheck(old, binding, shortcut=True)
        assert (check.full, check.status) == (True, RecheckStatus.VALID)  # no id: no shortcut, every span read
    with SQLiteStore(tmp_path / "s.db", "write") as opened:
        given_id = opened.store_id
        assert len(given_id) == 32 and opened.index_version == 1  # the id is no change a query sees
    with SQLiteStore(tmp_path / "s.db", "read") as again:
        assert again.store_id == given_id  # given once, kept


def test_a_schema_1_store_without_an_id_is_migrated_and_given_one(tmp_path):
    """The migration and the id, at the first open for writing, in that order; a reader changes
    neither."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        build_ingestor(store, load_settings(overrides=SETTINGS)).run(corpus(tmp_path))
        store._db.execute("DELETE FROM meta WHERE key = 'store_id'")
    schema_1(path)
    with SQLiteStore(path, "read") as old:
        assert (old.store_id, old._schema) == (None, 1)
    with SQLiteStore(path, "write") as opened:
        meta = dict(opened._db.execute("SELECT key, value FROM meta WHERE key != 'store_id'"))
        assert meta == {"schema_version": str(SCHEMA_VERSION), "index_version": "1"} and len(opened.store_id) == 32


# -- item 1: rechecks that read every span -----------------------------------------------------------

def test_a_store_rebuilt_at_the_same_path_without_the_cited_document(asked, tmp_path):
    """The probe: the same path, the same index version (1), the cited document gone. On main
    the unchanged index version made the answer `valid` without a look at its span."""
    store, answer_file, answer = asked
    rebuild(store, tmp_path, keep_refund=False)
    code, found, _ = ragdx("recheck", "--store", str(store), str(answer_file))
    assert (code, found["status"]) == (RECHECK_CHANGED, "evidence_changed_or_expired")
    assert (found["bound_index_version"], found["index_version"], found["checked"]) == (1, 1, "full")
    assert found["bound_store_id"] == answer["evidence"]["store_id"] != found["store_id"]
    assert [(c["doc"], c["reason"], c["detail"]) for c in found["changed"]] == [
        ("refund.md", "missing", "no such document in this store")]


def test_a_store_rebuilt_with_the_same_text_still_holds_the_evidence(asked, tmp_path):
    """Rebuilt with refund.md as it was: every span read and found, so `valid`, and the result
    says the answer was bound to another store."""
    store, answer_file, answer = asked
    rebuild(store, tmp_path, keep_refund=True)
    code, found, _ = ragdx("recheck", "--store", str(store), str(answer_file))
    assert (code, found["status"], found["changed"], found["checked"]) == (0, "valid", [], "full")
    with SQLiteStore(store, "read") as opened:
        check = recheck(opened, EvidenceBinding.from_trace(answer), shortcut=True)
        assert check.full and check.other_store
        assert check.describe() == (f"valid: 1 cited span(s) unchanged (in store {opened.store_id}; the answer "
                                    f"was bound to store {answer['evidence']['store_id']})")


def test_the_shortcut_holds_only_for_the_same_store_at_the_same_index_version(asked, tmp_path):
    store, _, answer = asked
    binding = EvidenceBinding.from_trace(answer)
    with SQLiteStore(store, "read") as opened:
        assert (recheck(opened, binding, shortcut=True).full, recheck(opened, binding).full) == (False, True)
    rebuild(store, tmp_path, keep_refund=False)
    with SQLiteStore(store, "read") as opened:
        found = recheck(opened, binding, shortcut=True)
        assert (found.full, found.status, [c.reason for c in found.changed]) == (
            True, RecheckStatus.CHANGED, [SpanChange.MISSING])


# the probe's tampering, on the store the answer was made from, at its index version (the case
# the unchecked shortcut called valid): the code and the changed reason, or the error
TAMPERED = {
    "no such document": ({"doc": "no/such/doc.md"}, RECHECK_CHANGED, "missing: no such document in this store"),
    "no such version": ({"version": "v999"}, RECHECK_CHANGED, "missing: no such version in this store (it holds {v})"),
    "all-zero sha256": ({"sha256": "0" * 64}, RECHECK_CHANGED,
                        "changed: the SHA-256 of the text at these offsets is not the one cited (the version "
                        "was re-parsed, or the answer was altered)"),
    "start after end": ({"start": 50, "end": 10}, 2,
                        "evidence.cited[0].end: 10 is not after start 50 (a span is start <= i < end, never empty)"),
    "negative start": ({"start": -1}, 2, "evidence.cited[0].start: -1 is negative"),
    "end of 10**9": ({"end": 10 ** 9}, 2, "evidence.cited[0].end: 1000000000 is past the end of refund.md@{v}'s "
                                          "text ({n} characters)"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_answer_is_never_valid(asked, case):
    store, answer_file, answer = asked
    fields, code, said = TAMPERED[case]
    with SQLiteStore(store, "read") as opened:
        version = answer["evidence"]["cited"][0]["version"]
        said = said.format(v=version, n=len(opened.texts("refund.md", version)[1]))
    bad = write(answer_file.with_name("bad.json"), json.dumps(tampered(answer, **fields)))
    got, found, err = ragdx("recheck", "--store", str(store), str(bad))
    assert got == code
    if code == 2:
        assert err == f"ragdx recheck: error: {bad}: {said}\n" and found is None
    else:
        assert found["status"] == "evidence_changed_or_expired" and found["checked"] == "full"
        assert [f"{c['reason']}: {c['detail']}" for c in found["changed"]] == [said]


def test_a_forged_store_id_does_not_make_a_missing_span_valid(asked):
    """The answer claims another store, or this one: either way the span is read."""
    store, answer_file, answer = asked
    for store_id in ("f" * 32, answer["evidence"]["store_id"], None):
        bad = tampered(answer, doc="no/such/doc.md")
        bad["evidence"]["store_id"] = store_id
        code, found, _ = ragdx("recheck", "--store", str(store), str(write(answer_file, json.dumps(bad))))
        assert (code, [c["reason"] for c in found["changed"]]) == (RECHECK_CHANGED, ["missing"])


def test_a_version_that_was_deleted_and_one_that_never_was(asked, tmp_path):
    store, _, answer = asked
    with SQLiteStore(store, "write") as opened:
        delete_documents(opened, ["refund.md"])
        version = answer["evidence"]["cited"][0]["version"]
        deleted_at = opened.tombstone("refund.md")[0]
        found = recheck(opened, EvidenceBinding.from_trace(answer))
        other = recheck(opened, EvidenceBinding.from_trace(tampered(answer, version="v999")))
    assert [(c.reason, c.detail) for c in found.changed] == [(SpanChange.DELETED, f"deleted at {deleted_at}")]
    assert [(c.reason, c.detail) for c in other.changed] == [
        (SpanChange.MISSING, f"the document, deleted at {deleted_at}, never had this version (it had {version})")]


# -- item 6: malformed answers are refused, naming the file and the field ------------------------------

@pytest.mark.parametrize("where, bad, said", [
    ("doc", "x\ud800y", "evidence.cited[0].doc: not valid Unicode: a lone surrogate '\\ud800' at character 1"),
    ("group", "\udfff", "principal.groups[0]: not valid Unicode: a lone surrogate '\\udfff' at character 0"),
])
def test_a_lone_surrogate_is_refused_not_a_traceback(asked, where, bad, said):
    """After an unrelated change (so the store is read): on main, a doc id with a lone surrogate
    reached SQLite and raised UnicodeEncodeError."""
    store, answer_file, answer = asked
    with SQLiteStore(store, "write") as opened:
        build_ingestor(opened, load_settings(overrides=SETTINGS)).run(
            corpus(answer_file.parent, shipping="within 5 working days"))
    forged = tampered(answer, doc=bad) if where == "doc" else {**answer, "principal": {"user": "ann", "groups": [bad]}}
    path = write(answer_file, json.dumps(forged))  # json.dumps writes the surrogate as an \ud800 escape
    assert "\\ud" in path.read_text()
    code, found, err = ragdx("recheck", "--store", str(store), str(path))
    field = said.split(":")[0]
    assert (code, found) == (2, None)
    assert err == (f"ragdx recheck: error: {path} field '{field}': not a JSON answer from 'ragdx ask --json': "
                   f"{said.split(': ', 1)[1]}\n")
    with pytest.raises(InputError) as refused:
        EvidenceBinding.from_trace(forged, "a.json")
    assert str(refused.value) == f"a.json: {said}"


@pytest.mark.parametrize("fields, said", [
    ({"start": -1}, "evidence.cited[0].start: -1 is negative"),
    ({"start": 50, "end": 10}, "evidence.cited[0].end: 10 is not after start 50"),
    ({"start": 7, "end": 7}, "evidence.cited[0].end: 7 is not after start 7"),
    ({"start": 1.0}, "evidence.cited[0].start must be an int, not 1.0"),
    ({"end": True}, "evidence.cited[0].end must be an int, not True"),
    ({"sha256": "A" * 64}, f"evidence.cited[0].sha256: '{'A' * 64}' is not a SHA-256"),
    ({"sha256": "ab"}, "evidence.cited[0].sha256: 'ab' is not a SHA-256 (64 lowercase hex digits)"),
    ({"doc": ""}, "evidence.cited[0].doc: must not be empty"),
    ({"version": ["v1"]}, "evidence.cited[0].version must be a str, not ['v1']"),
    ({"status": "draft"}, "evidence.cited[0].status: 'draft' is not one of 'current', 'superseded', 'expired'"),
    ({"status": ["current"]}, "evidence.cited[0].status: ['current'] is not one of"),
])
def test_malformed_offsets_and_fields_are_refused_after_a_change_too(asked, fields, said):
    """With the store changed since the answer (an unrelated edit), as without: on main a
    negative start or a reversed span read as `changed` 'the version was re-parsed' (exit 3)."""
    store, answer_file, answer = asked
    with SQLiteStore(store, "write") as opened:
        build_ingestor(opened, load_settings(overrides=SETTINGS)).run(
            corpus(answer_file.parent, shipping="within 5 working days"))
    path = write(answer_file, json.dumps(tampered(answer, **fields)))
    code, found, err = ragdx("recheck", "--store", str(store), str(path))
    assert (code, found) == (2, None)
    assert err.startswith(f"ragdx recheck: error: {path}: {said}")


def test_a_span_past_the_end_of_a_changed_store_is_changed(asked):
    """The store changed since the answer: a shorter text may be a re-parse, so a span past its
    end is a change (exit 3) with the lengths, not an error."""
    store, answer_file, answer = asked
    with SQLiteStore(store, "write") as opened:
        build_ingestor(opened, load_settings(overrides=SETTINGS)).run(
            corpus(answer_file.parent, shipping="within 5 working days"))
        length = len(opened.texts("refund.md", answer["evidence"]["cited"][0]["version"])[1])
    path = write(answer_file, json.dumps(tampered(answer, end=10 ** 9)))
    code, found, _ = ragdx("recheck", "--store", str(store), str(path))
    assert (code, [(c["reason"], c["detail"]) for c in found["changed"]]) == (RECHECK_CHANGED, [
        ("changed", f"the version's text is now {length} characters, and the span ends at 1000000000")])


@pytest.mark.parametrize("evidence, said", [
    ({"index_version": -1}, "evidence.index_version: -1 is negative"),
    ({"index_version": "1"}, "evidence.index_version must be an int, not '1'"),
    ({"store_id": 5}, "evidence.store_id must be a str, not 5"),
    ({"store_id": ""}, "evidence.store_id: must not be empty"),
    ({"index_version": 99}, "evidence.index_version: 99 is ahead of the store's (1): not an answer from this store"),
])
def test_the_bound_store_and_index_version_are_checked(asked, evidence, said):
    store, answer_file, answer = asked
    path = write(answer_file, json.dumps({**answer, "evidence": {**answer["evidence"], **evidence}}))
    assert ragdx("recheck", "--store", str(store), str(path))[::2] == (2, f"ragdx recheck: error: {path}: {said}\n")


def test_an_answer_on_stdin(asked):
    store, _, answer = asked
    for given, code, err in [(answer, 0, ""), (tampered(answer, start=-1), 2,
                              "ragdx recheck: error: stdin: evidence.cited[0].start: -1 is negative\n")]:
        done = subprocess.run([sys.executable, "-m", "ragdx.cli", "recheck", "--store", str(store), "-"],
                              input=json.dumps(given), capture_output=True, text=True)
        assert (done.returncode, done.stderr) == (code, err)


# -- the fuzz suite: a real answer, mutated --------------------------------------------------------------

FIELDS = ["unit", "doc", "version", "start", "end", "sha256", "status"]
mutation = st.one_of(
    st.tuples(st.just("cited"), st.sampled_from(FIELDS),
              st.one_of(value, ident, number, st.integers(-3, 3000),
                        st.sampled_from(["0" * 64, "f" * 64, "v999", "refund.md\ud800", "\udfff"]))),
    st.tuples(st.just("drop"), st.sampled_from(FIELDS + ["evidence.store_id", "evidence.index_version",
                                                         "principal", "evidence"]), st.none()),
    st.tuples(st.just("evidence"), st.sampled_from(["store_id", "index_version", "cited"]),
              st.one_of(value, st.integers(-2, 5), st.sampled_from(["f" * 32, "0" * 32]))),
    st.tuples(st.just("principal"), st.sampled_from(["user", "groups"]),
              st.one_of(value, st.lists(ident, max_size=2))),
    st.tuples(st.just("duplicate"), st.none(), st.none()))
STORES = ["unchanged", "unrelated change", "rebuilt, same text", "rebuilt without it", "deleted"]


def mutate(answer: dict, mutations: list) -> dict:
    out = copy.deepcopy(answer)
    for kind, name, new in mutations:
        evidence = out.get("evidence")
        cited = evidence.get("cited") if isinstance(evidence, dict) else None
        span = cited[0] if isinstance(cited, list) and cited and isinstance(cited[0], dict) else None
        if kind == "cited" and span is not None:
            span[name] = new
        elif kind == "drop" and "." in name and isinstance(evidence, dict):
            evidence.pop(name.split(".")[1], None)
        elif kind == "drop" and name in FIELDS and span is not None:
            span.pop(name, None)
        elif kind == "drop":
            out.pop(name, None)
        elif kind == "evidence" and isinstance(evidence, dict):
            evidence[name] = new
        elif kind == "principal" and isinstance(out.get("principal"), dict):
            out["principal"][name] = new
        elif kind == "duplicate" and span is not None:
            cited.append(copy.deepcopy(span))
    return out


def may_be_valid(original: dict, mutated: dict, store: str) -> bool:
    """Whether `valid` is a true verdict: the mutated answer cites nothing (it rests on nothing
    that can change, docs/formats.md), or the store still holds the original answer's evidence as
    it was (the three kinds of store that do) and every span the mutated answer cites is one the
    original cites, for a principal of a group that may read it (refund.md is public)."""
    key = ("doc", "version", "start", "end", "sha256")
    spans = {tuple(c[k] for k in key) for c in original["evidence"]["cited"]}
    try:
        cited = {tuple(c[k] for k in key) for c in mutated["evidence"]["cited"]}
        groups = mutated["principal"]["groups"]
    except (KeyError, TypeError):  # a malformed answer is never valid
        return False
    if not cited:
        return True
    holds = store in ("unchanged", "unrelated change", "rebuilt, same text")
    return holds and cited <= spans and isinstance(groups, list) and "public" in groups


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[dict[str, Path], dict]:
    """The five stores of the fuzz suite (each built once: a recheck opens them read-only) and
    the answer made from the first."""
    root = tmp_path_factory.mktemp("recheck")
    base = root / "unchanged" / "s.db"
    assert ragdx("ingest", "--store", str(base), str(corpus(base.parent)), *SETS)[0] == 0
    code, answer, _ = ragdx("ask", "--store", str(base), "--json", *SETS, QUESTION)
    assert code == 0 and len(answer["evidence"]["cited"]) == 1
    paths = {"unchanged": base}
    for name in STORES[1:]:
        folder = root / name.replace(" ", "_").replace(",", "")
        folder.mkdir()
        paths[name] = folder / "s.db"
        if name.startswith("rebuilt"):
            rebuild(paths[name], folder, keep_refund=name == "rebuilt, same text")
            continue
        shutil.copyfile(base, paths[name])  # a copy: the same store, the same id
        with SQLiteStore(paths[name], "write") as opened:
            if name == "deleted":
                delete_documents(opened, ["refund.md"])
            else:
                build_ingestor(opened, load_settings(overrides=SETTINGS)).run(
                    corpus(folder, shipping="within 5 working days"))
    return paths, answer


TIME_LIMIT_S, MEMORY_LIMIT_MB = 5.0, 64


def check_recheck(paths: dict[str, Path], original: dict, mutated: dict, store: str, folder: Path) -> int:
    """One recheck of a mutated answer: 2 (naming the file), or the oracle's verdict (0 valid or 3),
    within the time and memory bound. Any exception is a traceback and fails the test."""
    path = write(folder / "answer.json", json.dumps(mutated))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        code, found, err = ragdx("recheck", "--store", str(paths[store]), str(path))
    finally:
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
        tracemalloc.stop()
    assert seconds < TIME_LIMIT_S and peak < MEMORY_LIMIT_MB, (seconds, peak)
    assert code in (0, 2, RECHECK_CHANGED), (code, err)
    if code == 2:
        assert err.startswith(f"ragdx recheck: error: {path}") and found is None, err
    else:
        assert found["status"] == ("valid" if code == 0 else "evidence_changed_or_expired")
        # well formed, the verdict is the oracle's: no false `valid`, and no false change either
        assert (code == 0) is may_be_valid(original, mutated, store), (code, store, mutated)
    return code


RECHECK_FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                               HealthCheck.function_scoped_fixture])


@RECHECK_FUZZ
@given(st.lists(mutation, min_size=0, max_size=3), st.sampled_from(STORES))
def test_fuzz_mutated_answers(stores, tmp_path, mutations, store):
    paths, answer = stores
    check_recheck(paths, answer, mutate(answer, mutations), store, tmp_path)


def test_the_unmutated_answer_in_each_store(stores, tmp_path):
    """The oracle's own check: the answer is valid exactly where its evidence stands."""
    paths, answer = stores
    assert {s: check_recheck(paths, answer, answer, s, tmp_path) for s in STORES} == {
        "unchanged": 0, "unrelated change": 0, "rebuilt, same text": 0, "rebuilt without it": RECHECK_CHANGED,
        "deleted": RECHECK_CHANGED}


def corpus_cases() -> list[Path]:
    return sorted(CORPUS.glob("*.json"))


@pytest.mark.parametrize("case", corpus_cases(), ids=lambda p: p.stem)
def test_cases_that_once_failed(stores, tmp_path, case):
    """Each file: the mutations of a case that once gave a false `valid` or a traceback, the
    store, and the exit code it must give now."""
    spec = json.loads(case.read_text(encoding="utf-8"))
    paths, answer = stores
    mutations = [tuple(m) for m in spec["mutations"]]
    assert check_recheck(paths, answer, mutate(answer, mutations), spec["store"], tmp_path) == spec["exit"]
