"""Structural mutations of valid files ragdx reads (issue 25): an OpenInference span file, an OTLP
file, an imported trace file, a manifest and a query set. Each case replaces nodes with values
of the wrong type, nests them past the depth limit (as JSON, and as JSON text inside a string),
makes them large, removes them, points a span's parent at another span (cycles), and re-encodes
the file (UTF-16, a stray byte, a cut, CRLF). Whatever the case, the command exits 0 having read
the file, or exits 2 with a message that names the file; never a traceback, within 30 s and
400 MB. Cases that once failed are kept in tests/hardening/corpus/.

``python -m tests.hardening.test_fuzz_mutations N`` runs N cases of each file and counts the
outcomes (tracebacks and cases out of bounds) instead of failing on the first.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragdx._jsonl import loads
from tests.conftest import write
from tests.diagnosis.test_spans import QUERY, otlp, spans
from tests.hardening.bounds import bounded
from tests.hardening.conftest import LEXICAL
from tests.hardening.test_fuzz import attempt, workspace

FUZZ = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SECONDS, MEGABYTES = 30, 400

# -- the valid files: one JSON value per line ------------------------------------------------------

TRACES = [{"query_id": "q1", "system": "shop",
           "stages": [{"name": "bm25", "kind": "retrieval", "seconds": 0.01,
                       "items": [{"id": "c1", "doc": "policies/refund.md", "start": 0, "end": 48, "rank": 1,
                                  "score": 7.5, "text": "Refunds are accepted within 30 days of delivery."}]},
                      {"name": "ctx", "kind": "context", "items": [{"id": "c1"}],
                       "dropped": [{"id": "c2", "doc": "policies/quality.md", "reason": "budget"}]}],
           "answer": {"text": "Within 30 days.", "abstained": False, "citations": ["c1"],
                      "claims": [{"text": "Within 30 days.", "supported": True, "citations": ["c1"]}],
                      "usage": {"prompt_tokens": 120, "completion_tokens": 9, "cost": 0.001}}},
          {"query_id": "q2", "stages": [], "answer": {"text": "I don't know.", "abstained": True}}]
MANIFEST = [{"doc_id": "a", "path": "a.md", "version": "v1", "acl": ["public"], "title": "Refunds",
             "updated_at": "2026-01-01T00:00:00Z", "status": "current", "metadata": {"product": "shop"}},
            {"doc_id": "b", "path": "b.html", "format": "html", "acl": ["staff", "public"]},
            {"doc_id": "c", "path": "c.txt"}]
QUERY_SET = [{"id": "q1", "question": "How long do refunds take?", "principal": {"user": "u", "groups": ["public"]},
              "answerable": True, "required": [[{"doc": "a", "quote": "within 30 days"}, {"id": "c9"}],
                                               [{"doc": "c", "start": 0, "end": 7}]],
              "answer": "30 days", "tags": ["refund"], "metadata": {"k": [1, 2]}},
             {"id": "q2", "question": "Refunds?", "answerable": False}]
FILES = {"openinference": spans(), "otlp": [otlp(spans())], "traces": TRACES, "manifest": MANIFEST,
         "queries": QUERY_SET}

# -- the mutations ---------------------------------------------------------------------------------

WRONG = [None, True, 0, -1, 2 ** 63 - 1, 1.5, 1e308, "", "abc", "-1", "\u0000", "\ud800", [], [1], {}, {"a": 1},
         [[]], {"key": 1}, "2026-13-01", "9" * 30, "\u00b2", "\u0663"]


def _deep(depth: int, dict_: bool) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value} if dict_ else [value]
    return value


def _nodes(doc: list) -> list[tuple]:
    """The path (keys and indexes from the file's list of lines) of every value in the file."""
    out, todo = [], [((n,), line) for n, line in enumerate(doc)]
    while todo:
        path, value = todo.pop()
        out.append(path)
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        todo += [(path + (k,), v) for k, v in children]
    return sorted(out, key=repr)


def _get(doc: list, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _span_links(doc: list) -> list[tuple[dict, str, str]]:
    """Each span of a span file: the object, its parent field, and its id."""
    out, todo = [], [doc]
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            if isinstance(value.get("spanId"), str):
                out.append((value, "parentSpanId", value["spanId"]))
            elif isinstance(value.get("context"), dict) and isinstance(value["context"].get("span_id"), str):
                out.append((value, "parent_id", value["context"]["span_id"]))
            todo += value.values()
        elif isinstance(value, list):
            todo += value
    return out


def mutate(doc: list, kind: str, at: int, pick: int) -> list:
    """One structural mutation of the file ``doc`` (its list of lines) at the ``at``-th node."""
    doc = json.loads(json.dumps(doc))  # a copy that shares nothing (a repeated node is no alias)
    if kind == "relink":  # a span's parent becomes another span, or itself: cycles
        links = _span_links(doc)
        if links:
            span, field, _ = links[at % len(links)]
            span[field] = links[pick % len(links)][2]
            return doc
        kind = "wrong"
    nodes = _nodes(doc)
    path = nodes[at % len(nodes)]
    value = _get(doc, path)
    if kind == "wrong":
        new = WRONG[pick % len(WRONG)]
    elif kind == "deep":
        new = _deep(70 + pick % 40, pick % 2 == 0)
    elif kind == "deep_text":  # JSON inside a string, as OpenInference writes metadata and values
        depth = 70 + pick % 3000
        new = '{"a": ' * depth + "1" + "}" * depth if pick % 2 else "[" * depth + "1" + "]" * depth
    elif kind == "large":
        # up to about 1 MB more each time, so that mutations of mutations stay within memory
        times = max(2, min(50 + pick % 500, 1_000_000 // len(json.dumps(value))))
        new = value * times if isinstance(value, (list, str)) and value else [value] * times
    elif kind == "swap":  # another value of the file in its place
        new = copy.deepcopy(_get(doc, nodes[pick % len(nodes)]))
    else:  # remove
        if len(path) > 1:
            parent = _get(doc, path[:-1])
            del parent[path[-1]]
        else:
            del doc[path[0]]
        return doc
    if len(path) == 1:
        doc[path[0]] = new
    else:
        _get(doc, path[:-1])[path[-1]] = new
    return doc


def encode(doc: list, how: str, pick: int) -> bytes:
    """The file's bytes: one JSON line per value, then re-encoded as ``how`` says."""
    text = "\n".join(json.dumps(line) for line in doc) + "\n"
    if how == "utf16":
        return text.encode("utf-16")
    data = text.encode("utf-8", "surrogatepass")
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    if how == "stray_byte":
        at = pick % (len(data) + 1)
        return data[:at] + b"\xff" + data[at:]
    if how == "cut":
        return data[:pick % (len(data) + 1)]
    if how == "crlf":
        return data.replace(b"\n", b"\r\n")
    if how == "repeated":  # every line twice (a second trace of a query, spans twice)
        return b"".join(line + b"\n" + line + b"\n" for line in data.splitlines())
    return data


KINDS = ["wrong", "deep", "deep_text", "large", "swap", "remove", "relink"]
ENCODINGS = ["utf8", "utf8", "utf8", "utf16", "bom", "stray_byte", "cut", "crlf", "repeated"]
mutation = st.tuples(st.sampled_from(KINDS), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6))
case = st.tuples(st.lists(mutation, min_size=1, max_size=3), st.sampled_from(ENCODINGS), st.integers(0, 10 ** 6))


def build(name: str, drawn: tuple) -> bytes:
    mutations, how, pick = drawn
    doc = FILES[name]
    for kind, at, choice in mutations:
        doc = mutate(doc, kind, at, choice)
    return encode(doc, how, pick)


# -- running a case --------------------------------------------------------------------------------

def run_case(name: str, data: bytes, run: Callable = attempt) -> int:
    """Read ``data`` as the file ``name`` with the command that reads it, within the bounds: exit 0
    (what was written is strict JSON), or exit 2 naming the file. Returns the exit code."""
    if name in ("manifest", "queries"):
        with workspace() as root:
            path, store = write(root / f"{name}.jsonl", data), root / "store.db"
            argv = (["ingest", "--store", str(store), str(path), *LEXICAL] if name == "manifest" else
                    ["evidence", "--store", str(store), "--queries", str(path)])
            with bounded(SECONDS, MEGABYTES):
                code, err = run(argv, (store,))
            # a manifest's error may name the document it points at, in the same folder
            assert code == 0 or str(path if name == "queries" else root) in err, err
        return code
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        path = write(root / f"{name}.jsonl", data)
        queries = write(root / "q.jsonl", json.dumps(QUERY) + "\n" + json.dumps(QUERY_SET[1]) + "\n")
        out = root / "out"
        with bounded(SECONDS, MEGABYTES):
            code, err = run(["diagnose", "--traces", str(path), "--queries", str(queries), "--out", str(out)])
        if code == 0:
            for line in (out / "diagnosis.jsonl").read_text().splitlines():
                loads(line, file="diagnosis.jsonl")  # no NaN, no Infinity
            loads((out / "metrics.json").read_text(), file="metrics.json")
        else:
            assert str(path) in err, err
            assert not out.exists(), "a failed diagnose wrote its folder"
        return code


def test_the_valid_files_are_read():
    """Unmutated, every file is read (exit 0): the mutations start from good input."""
    assert {name: run_case(name, encode(doc, "utf8", 0)) for name, doc in FILES.items()} == dict.fromkeys(FILES, 0)


@pytest.mark.parametrize("name", sorted(FILES))
@FUZZ
@given(drawn=case)
def test_mutations_of(name, drawn):
    run_case(name, build(name, drawn))


# -- counting instead of failing -------------------------------------------------------------------

def measure(count: int) -> dict[str, dict[str, int]]:
    """Run ``count`` generated cases of each file; count exits 0 and 2, tracebacks, and cases out of
    bounds (time or memory), without stopping at the first."""
    import contextlib

    from hypothesis import Phase, find
    from hypothesis.errors import NoSuchExample
    from tests.hardening.bounds import OutOfBounds
    results: dict[str, dict[str, int]] = {}
    for name in FILES:
        tally = {"cases": 0, "exit 0": 0, "exit 2": 0, "traceback": 0, "out of bounds": 0, "wrong exit or message": 0}

        def one(drawn: tuple, name: str = name, tally: dict = tally) -> bool:
            tally["cases"] += 1
            try:
                run_case(name, build(name, drawn), _counting(tally))
            except OutOfBounds:
                tally["out of bounds"] += 1
            except AssertionError:  # another exit code, or a message that does not name the file
                tally["wrong exit or message"] += 1
            except Exception:
                tally["traceback"] += 1
            return False
        # every example is judged and tallied, none satisfies the condition: find ends by saying so
        with contextlib.suppress(NoSuchExample):
            find(case, one, settings=settings(max_examples=count, derandomize=True, database=None, deadline=None,
                                              phases=[Phase.generate],
                                              suppress_health_check=list(HealthCheck)))
        results[name] = tally
        print(name, tally, file=sys.stderr, flush=True)
    return results


def _counting(tally: dict[str, int]) -> Callable:
    def run(argv: list[str], stores: tuple = ()) -> tuple[int, str]:
        code, err = attempt(argv, stores)
        tally[f"exit {code}"] += 1
        return code, err
    return run


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 100)))
