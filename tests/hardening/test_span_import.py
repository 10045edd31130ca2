"""Span files that once made ``ragdx diagnose`` traceback or hang (issue 25, items 3 and 4), kept
as a corpus (tests/hardening/corpus/, the message each must give in expected.json): every one
exits 2 with a message that names the file, the line and the place in it. The cycles run in a
child process with a time and a memory limit, so a regression fails instead of hanging CI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ragdx
from ragdx.traces.openinference import read_any
from ragdx.errors import InputError
from tests.hardening.bounds import bounded
from tests.hardening.test_fuzz import attempt

CORPUS = Path(__file__).parent / "corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
CYCLES = sorted(name for name in EXPECTED if "parent" in name and "list" not in name)
QUERIES = '{"id": "q1", "question": "How long do refunds take?", "required": [[{"doc": "a", "quote": "30 days"}]]}\n'


def test_the_corpus_is_complete():
    assert sorted(p.name for p in CORPUS.glob("*.jsonl")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - set(CYCLES)))
def test_each_once_failing_file_exits_2_naming_the_place(name, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text(QUERIES)
    code, err = attempt(["diagnose", "--traces", str(CORPUS / name), "--queries", str(queries),
                         "--out", str(tmp_path / "out")])
    assert code == 2
    # the one line is skipped with its reason, and then no trace is left
    assert f"{CORPUS / name}: no trace could be read: 1 malformed line; the first: {CORPUS / name}:1 " \
           f"{EXPECTED[name]}; line skipped" in err, err
    assert not (tmp_path / "out").exists()


_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from ragdx.cli import main
try:
    code = main(sys.argv[1:])
finally:  # its own peak (VmHWM: ru_maxrss keeps the forking parent's, and RUSAGE_CHILDREN every child's)
    hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
    print(f"maxrss_kib={hwm}", file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("name", CYCLES)
def test_a_parent_cycle_exits_2_naming_the_spans_in_bounded_time_and_memory(name, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text(QUERIES)
    argv = ["diagnose", "--traces", str(CORPUS / name), "--queries", str(queries), "--out", str(tmp_path / "out")]
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, timeout=60,
                              env={"PYTHONPATH": str(Path(ragdx.__file__).parents[1]), "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: ragdx diagnose ran for more than 60 s (parent links followed in a loop)")
    peak = int(re.search(r"maxrss_kib=(\d+)", done.stderr)[1])
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"error: {CORPUS / name}:1: {EXPECTED[name]}; parent links must lead to a root span" in done.stderr
    assert peak < 1 << 20  # KiB: the child stayed under 1 GiB
    assert not (tmp_path / "out").exists()


def test_a_cycle_below_a_good_trace_is_refused_not_skipped(tmp_path):
    """A cycle is refused for the whole file (the parent links of the file cannot be trusted),
    even when another trace is good; a span that only shares its id with another trace's span
    is no cycle (span ids are a trace's own)."""
    good = {"name": "R.run", "context": {"trace_id": "t1", "span_id": "s1"}, "span_kind": "RETRIEVER",
            "attributes": {"metadata": json.dumps({"query_id": "q1"})}}
    other = dict(good, context={"trace_id": "t2", "span_id": "s2"}, parent_id="s1")
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(other) + "\n")
    views, bad, _ = read_any(path)
    assert [(line, v.query_id) for line, v in views] == [(1, "q1")] and bad == []
    looped = dict(good, context={"trace_id": "t2", "span_id": "s2"}, parent_id="s3")
    back = dict(good, context={"trace_id": "t2", "span_id": "s3"}, parent_id="s2")
    path.write_text("\n".join(json.dumps(s) for s in (good, looped, back)) + "\n")
    with pytest.raises(InputError) as caught, bounded(seconds=30, megabytes=300):
        read_any(path)
    assert str(caught.value) == (f"{path}:2: the parent links of spans 's2' -> 's3' -> 's2' (trace 't2', lines 2, "
                                 "3) form a cycle; parent links must lead to a root span")


def test_a_retriever_below_a_retriever_is_still_fusion_many_levels_down(tmp_path):
    """The walk up from each retriever (which replaced a walk down from every span) marks each
    ancestor once: 20,000 nested retrievers read in seconds (the walk down took minutes), the outer
    19,999 fusion."""
    meta = {"metadata": json.dumps({"query_id": "q1"})}
    spans = [{"name": f"R{n}.run", "context": {"trace_id": "t", "span_id": f"s{n}"}, "span_kind": "RETRIEVER",
              "parent_id": f"s{n - 1}" if n else None, "attributes": meta} for n in range(20_000)]
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(map(json.dumps, spans)) + "\n")
    with bounded(seconds=30, megabytes=300):
        (_, view), = read_any(path)[0]
    assert [s.kind.value for s in view.stages].count("fusion") == 19_999
    assert view.stages[-1].kind.value == "retrieval" and view.stages[-1].name == "R19999"


def test_a_span_attribute_past_its_bound_skips_the_line_naming_the_attribute(tmp_path):
    """A document's content of 4 MiB + 1 characters: that line is skipped, with the attribute's
    path and size; the next line is read (issue 51: a bound on span attributes)."""
    from ragdx.traces.spans import MAX_ATTRIBUTE_CHARS

    def span(n: int, content: str) -> str:
        return json.dumps({"name": "r", "span_kind": "RETRIEVER", "context": {"trace_id": f"t{n}", "span_id": "s"},
                           "attributes": {"openinference.span.kind": "RETRIEVER", "ragdx.query_id": "q1",
                                          "retrieval.documents.0.document.content": content}})
    path = tmp_path / "spans.jsonl"
    path.write_text(span(1, "x" * (MAX_ATTRIBUTE_CHARS + 1)) + "\n" + span(2, "30 days") + "\n")
    views, bad, _ = read_any(path)
    assert [v.query_id for _, v in views] == ["q1"]
    assert bad == [f"{path}:1 field 'attributes.retrieval.documents.0.document.content': 4,194,305 characters, "
                   "more than the 4,194,304 a span attribute may hold (ragdx.traces.spans.MAX_ATTRIBUTE_CHARS); "
                   "line skipped"]
