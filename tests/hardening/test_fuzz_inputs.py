"""Generated bad input for the newer entry points (issue 51): the OTLP receiver's bodies, the web
UI's URLs, ``ragdx label``'s readers and ``ragdx compare``'s run folders, a thousand cases each.
Whatever the input: the receiver answers 200 or refuses with 400, 413 or 415, and what it accepts
the spool keeps and the live diagnosis reads; a page answers, never with a 500; a reader returns
cases or raises an error that names what is wrong; compare exits 0 or 2, never 1 (the gate's
"regression") and never with a traceback."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ragdx.cli import main
from ragdx.errors import RagdxError
from ragdx.label.readers import read_eval_set
from tests.conftest import EXAMPLE
from tests.hardening.test_fuzz import RAW_LINES, SPECIAL_TEXT, text, value
from tests.integrations.conftest import require

THOUSAND = settings(max_examples=1000, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

# -- the OTLP receiver -----------------------------------------------------------------------------

_KEYS = ["input.value", "output.value", "openinference.span.kind", "ragdx.stage.kind", "metadata",
         "retrieval.documents.0.document.id", "retrieval.documents.0.document.content",
         "retrieval.documents.0.document.score", "llm.token_count.prompt", "session.id", "query_id"]
_any_value = st.one_of(
    st.fixed_dictionaries({"stringValue": text}), st.fixed_dictionaries({"intValue": st.one_of(st.integers(), text)}),
    st.fixed_dictionaries({"doubleValue": st.floats()}), st.fixed_dictionaries({"boolValue": st.booleans()}),
    st.fixed_dictionaries({"arrayValue": st.fixed_dictionaries({"values": st.lists(
        st.fixed_dictionaries({"stringValue": text}), max_size=3)})}), value)
_attribute = st.one_of(st.fixed_dictionaries({"key": st.one_of(st.sampled_from(_KEYS), text), "value": _any_value}),
                       value)
_hex = st.one_of(st.text("0123456789abcdef", min_size=1, max_size=32), text, st.integers())
_span = st.one_of(st.fixed_dictionaries({
    "traceId": _hex, "spanId": _hex, "parentSpanId": st.one_of(st.none(), _hex), "name": text,
    "startTimeUnixNano": st.one_of(st.integers(), text, st.none()), "endTimeUnixNano": st.one_of(st.integers(), text),
    "attributes": st.one_of(st.lists(_attribute, max_size=5), value)}), value)
_request = st.fixed_dictionaries({"resourceSpans": st.one_of(st.lists(st.fixed_dictionaries({
    "resource": st.one_of(value, st.fixed_dictionaries({"attributes": st.lists(_attribute, max_size=2)})),
    "scopeSpans": st.one_of(st.lists(st.fixed_dictionaries({
        "scope": st.one_of(value, st.fixed_dictionaries({"name": st.sampled_from(
            ["openinference.instrumentation.haystack", "x", ""])})),
        "spans": st.one_of(st.lists(_span, max_size=4), value)}), max_size=2), value)}), max_size=2), value)})
_body = st.one_of(_request.map(lambda r: json.dumps(r).encode()), value.map(lambda v: json.dumps(v).encode()),
                  st.sampled_from([line.encode("utf-8", "surrogatepass") for line in RAW_LINES]), st.binary(max_size=200))
_kind = st.sampled_from(["application/json", "application/x-protobuf", "application/json; charset=utf-8", "text/plain",
                         "", None])


@pytest.fixture(scope="module")
def spool(tmp_path_factory):
    require("starlette", "uvicorn", "opentelemetry.proto", extras="serve")  # a protobuf body needs it
    from ragdx.serve.spool import Spool
    return Spool(tmp_path_factory.mktemp("fuzz-spool") / "serve.db")


# the once-failing cases, kept: each was a 500 with a traceback, or acknowledged and then unkeepable
@THOUSAND
@given(body=_body, kind=_kind, zipped=st.booleans())
@example(body=b'{"resourceSpans": [{"scopeSpans": 1}]}', kind="application/json", zipped=False)
@example(body=b'{"resourceSpans":[{"scopeSpans":[{"spans":5}]}]}', kind="application/json", zipped=False)
@example(body=b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"ab","spanId":"cd","name":"x","attributes":'
              b'[{"key":"input.value","value":{"stringValue":"q\\udfff"}}]}]}]}]}', kind="application/json", zipped=False)
def test_the_otlp_receiver_answers_200_or_refuses_with_a_4xx(spool, body, kind, zipped):
    from ragdx.serve.receiver import Limits, _Refused, decode_request
    try:
        spans, system = decode_request(gzip.compress(body) if zipped else body, kind, "gzip" if zipped else None,
                                       Limits(max_bytes=64 * 1024, max_spans=100), "request", 1)
    except _Refused as refused:
        assert refused.status in (400, 413, 415), refused
        assert str(refused)
        return
    spool.add(spans, system, len(body))  # what it accepts, the spool keeps


def test_the_live_diagnosis_reads_every_trace_the_receiver_accepted(spool):
    # after the thousand requests above: every accepted trace is diagnosed or set aside with its reason
    from ragdx.serve.live import LiveDiagnoser
    live = LiveDiagnoser(spool, [], settle=0.0, orphan_after=0.0)
    while live.step(limit=500):
        pass
    counts = spool.counts()
    assert counts["open"] == 0 and counts["diagnosed"] == counts["traces"]


# -- the web UI's URLs -----------------------------------------------------------------------------

_segment = st.one_of(text, st.sampled_from(SPECIAL_TEXT), st.integers().map(str), st.sampled_from(
    ["9" * 20, "9" * 400, "-1", "1e308", "inf", "nan", "0x10", "..", "%00", "%2e%2e", "%ff", "0", "1.5"]))
_path = st.one_of(
    st.tuples(st.sampled_from(["/window/", "/trace/", "/runs/", "/window/"]), _segment, st.sampled_from(["", "/report"]))
    .map("".join),
    st.tuples(st.sampled_from(["/compare?base=", "/api/traces?limit=", "/api/traces?labelled=", "/?token="]), _segment,
              st.sampled_from(["", "&new=window:0", "&offset=-5", "&new=run:x"])).map("".join),
    st.lists(_segment, max_size=4).map(lambda parts: "/" + "/".join(parts)))


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    require("starlette", "uvicorn", "opentelemetry.proto", extras="serve")
    from starlette.testclient import TestClient

    from ragdx.serve.app import ServeConfig, build_app
    from ragdx.serve.live import LiveSpec
    data = tmp_path_factory.mktemp("fuzz-ui")
    (data / "runs" / "partial").mkdir(parents=True)
    (data / "runs" / "partial" / "diagnosis.jsonl").write_text('{"id": 5}\n')
    app, _ = build_app(ServeConfig(LiveSpec(data, EXAMPLE / "queries.jsonl", None, settle=0.05)))
    with TestClient(app, base_url="http://127.0.0.1:6006", raise_server_exceptions=False) as client:
        yield client


@THOUSAND
@given(path=_path)
@example(path="/window/99999999999999999999")
@example(path="/window/" + "9" * 400 + "/report")
@example(path="/window/0/report")
@example(path="/runs/partial/report")
@example(path="//evil.example/?token=x")
def test_no_url_of_the_ui_answers_with_a_500(ui, path):
    from urllib.parse import quote
    safe = quote(path.encode("utf-8", "surrogatepass"), safe="/?=&:%")  # a URL holds bytes: a lone surrogate as %ED%A0%80
    r = ui.get(f"http://127.0.0.1:6006{safe}", follow_redirects=False)
    assert r.status_code < 500, (safe, r.status_code, r.text[:300])


# -- ragdx label's readers -------------------------------------------------------------------------

_row = st.dictionaries(st.sampled_from(["user_input", "reference", "response", "retrieved_contexts",
                                        "reference_contexts", "id", "principal", "tags", "question", "answer",
                                        "input", "expected_output", "actual_output", "context"]) | text, value,
                       max_size=6)
_csv = st.lists(st.lists(st.one_of(text, st.sampled_from(['"', '""', 'a,b', '"open', "x\ny"])), max_size=5),
                min_size=1, max_size=5).map(lambda rows: "\n".join(",".join(r) for r in rows))
_eval_file = st.one_of(
    st.tuples(st.just(".jsonl"), st.lists(st.one_of(_row.map(json.dumps), st.sampled_from(RAW_LINES)), min_size=1,
                                          max_size=4).map("\n".join)),
    st.tuples(st.just(".json"), st.one_of(st.lists(_row, max_size=3), value).map(json.dumps)),
    st.tuples(st.just(".csv"), st.one_of(_csv, st.tuples(st.sampled_from(
        ["question,reference", "user_input,reference,response", "id,question,answer,principal"]), _csv).map(
        "\n".join))))


@THOUSAND
@given(drawn=_eval_file)
def test_an_evaluation_set_is_read_or_refused_naming_what_is_wrong(drawn):
    suffix, content = drawn
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / f"tests{suffix}"
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
        try:
            data = read_eval_set(path)
        except RagdxError as exc:
            assert str(exc).startswith(str(path)), str(exc)
            return
        assert all(c.question.strip() for c in data.cases)


# -- ragdx compare's run folders -------------------------------------------------------------------

@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-compare")
    store = str(folder / "s.db")
    lexical = ["--set", "retrieval.dense.enabled=false", "--set", "cache.enabled=false"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *lexical, "--quiet"]) == 0
        assert main(["run", "--store", store, "--queries", str(EXAMPLE / "queries.jsonl"), "--out",
                     str(folder / "base"), *lexical, "--quiet"]) == 0
    return folder / "base"


_diagnosis_row = st.dictionaries(st.sampled_from(["id", "outcome", "first_failure", "query_id", "lost"]) | text,
                                 value, max_size=4)


@THOUSAND
@example(manifest="[1, 2]", metrics=None, diagnosis=None)
@example(manifest="[" * 100_000 + "]" * 100_000, metrics=None, diagnosis=None)
@example(manifest=None, metrics='{"a": ' + "7" * 5000 + "}", diagnosis=None)
@example(manifest=None, metrics=None, diagnosis='{"id": "q-refund-35d", "outcome": "supported", "first_failure": '
                                                 '"nowhere"}')
@given(manifest=st.one_of(st.none(), value.map(json.dumps), st.sampled_from(RAW_LINES)),
       metrics=st.one_of(st.none(), value.map(json.dumps), st.sampled_from(RAW_LINES)),
       diagnosis=st.one_of(st.none(), st.lists(st.one_of(_diagnosis_row.map(json.dumps), st.sampled_from(RAW_LINES)),
                                               max_size=3).map("\n".join)))
def test_compare_exits_0_or_2_on_any_run_folder(base_run, manifest, metrics, diagnosis):
    with tempfile.TemporaryDirectory() as name:
        broken = Path(name) / "run"
        shutil.copytree(base_run, broken)
        for file, content in (("manifest.json", manifest), ("metrics.json", metrics), ("diagnosis.jsonl", diagnosis)):
            if content is not None:
                (broken / file).write_text(content, encoding="utf-8", errors="surrogatepass")
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["compare", str(base_run), str(broken)])
        assert code in (0, 2), (code, err.getvalue())
        assert code == 0 or "error:" in err.getvalue()
