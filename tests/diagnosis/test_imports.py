"""Imported traces: the worked example end to end through `ragdx diagnose`, and malformed lines."""

import json

from ragdx.cli import main
from tests.conftest import write

QUERY = {"id": "q1", "question": "Refund after 35 days for a defect?",
         "required": [[{"id": "policy-current"}], [{"id": "policy-exception"}]]}


def trace(qid, ranked_context, **extra):
    return {"query_id": qid, "question": "?", "stages": [
        {"name": "bm25", "kind": "retrieval", "items": [{"id": i, "rank": n} for n, i in enumerate(
            ["old-policy", "policy-current", "policy-exception"], start=1)]},
        {"name": "rerank", "kind": "rerank", "items": [{"id": i} for i in
                                                      ["policy-current", "policy-exception", "old-policy"]]},
        {"name": "ctx", "kind": "context", "items": [{"id": i} for i in ranked_context]}],
        "answer": {"text": "...", "abstained": False, "citations": ranked_context,
                   "claims": [{"text": "c", "supported": True}]}, **extra}


def test_diagnose_imported_traces_with_malformed_lines(tmp_path, capsys):
    queries = [QUERY, dict(QUERY, id="q2"), dict(QUERY, id="q3"), dict(QUERY, id="q4")]
    write(tmp_path / "q.jsonl", "\n".join(json.dumps(q) for q in queries) + "\n")
    lines = [json.dumps(trace("q1", ["policy-current"])),
             '{"query_id": "q2", "stages": [ oops',
             json.dumps(trace("q2", ["policy-current", "policy-exception"])),
             json.dumps({"query_id": "q3", "stages": [{"name": "x", "kind": "magic", "items": []}]}),
             json.dumps({"query_id": "q3", "stages": [{"kind": "context", "items": [{"rank": 1}]}]})]
    write(tmp_path / "t.jsonl", "\n".join(lines) + "\n")
    code = main(["diagnose", "--traces", str(tmp_path / "t.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "out")])
    assert code == 0
    err = capsys.readouterr().err
    assert "t.jsonl:2: malformed JSON at column" in err
    assert "t.jsonl:4 field 'stages[0].kind': stages[0].kind must be one of 'source'" in err
    assert "t.jsonl:5 field 'stages[0].items[0]': an item needs an 'id'" in err
    assert "query 'q3' has no trace" in err and "query 'q4' has no trace" in err
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "diagnosis.jsonl").read_text().splitlines())}
    assert (rows["q1"]["outcome"], rows["q1"]["first_failure"]) == ("incomplete", "context")
    assert (rows["q2"]["outcome"], rows["q2"]["first_failure"]) == ("supported", None)
    assert rows["q3"]["outcome"] == rows["q4"]["outcome"] == "no_trace"


def test_span_and_text_items_match_offsets_and_quotes(tmp_path, capsys):
    query = {"id": "q1", "question": "?", "required": [
        [{"doc": "policies/refund.md", "start": 10, "end": 40}],
        [{"doc": "policies/quality.md", "quote": "Quality defects may be refunded within 90 days"}]]}
    write(tmp_path / "q.jsonl", json.dumps(query) + "\n")
    ctx = [{"doc": "policies/refund.md", "start": 0, "end": 25}, {"doc": "policies/refund.md", "start": 25, "end": 90},
           {"doc": "policies/quality.md", "text": "Quality defects may be\nrefunded within 90 days of delivery."}]
    line = {"query_id": "q1", "stages": [{"name": "ctx", "kind": "context", "items": ctx}],
            "answer": {"text": "a", "citations": ["policies/refund.md[0:25]", "policies/quality.md#3"],
                       "claims": [{"text": "a", "supported": True}]}}
    write(tmp_path / "t.jsonl", json.dumps(line) + "\n")
    assert main(["diagnose", "--traces", str(tmp_path / "t.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "o")]) == 0
    row = json.loads((tmp_path / "o" / "diagnosis.jsonl").read_text())
    assert row["stages"]["ctx"]["groups_present"] == [0, 1]  # two adjacent spans cover [10:40]


def test_worked_example_losses_through_the_import_path(tmp_path, capsys):
    write(tmp_path / "q.jsonl", "\n".join(json.dumps(dict(QUERY, id=q)) for q in ("r", "g", "gov")) + "\n")
    no_exception = trace("r", ["policy-current"])
    no_exception["stages"][0]["items"] = [{"id": "old-policy"}, {"id": "policy-current"}]
    no_exception["stages"][1]["items"] = [{"id": "policy-current"}, {"id": "old-policy"}]
    unsupported = trace("g", ["policy-current", "policy-exception"])
    unsupported["answer"]["claims"] = [{"text": "c", "supported": False}]
    governed = trace("gov", ["policy-current"])
    governed["stages"].insert(2, {"name": "acl", "kind": "governance", "items": [{"id": "policy-current"}],
                                  "dropped": [{"id": "policy-exception", "reason": "filtered: acl: staff only"}]})
    write(tmp_path / "t.jsonl", "\n".join(json.dumps(t) for t in (no_exception, unsupported, governed)) + "\n")
    assert main(["diagnose", "--traces", str(tmp_path / "t.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "o")]) == 0
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "o" / "diagnosis.jsonl").read_text().splitlines())}
    assert rows["r"]["first_failure"] == "retrieval" and rows["r"]["lost"][0]["group"] == 1
    assert (rows["g"]["outcome"], rows["g"]["first_failure"]) == ("unsupported", "generation")
    assert rows["gov"]["first_failure"] == "governance"
    assert rows["gov"]["lost"][0]["reason"] == "acl: filtered: acl: staff only (a correct filter)"


def test_channels_are_reported_beside_their_union(tmp_path, capsys):
    write(tmp_path / "q.jsonl", json.dumps(QUERY) + "\n")
    t = trace("q1", ["policy-current", "policy-exception"])
    t["stages"].insert(1, {"name": "dense", "kind": "retrieval", "items": [{"id": "policy-exception"}]})
    write(tmp_path / "t.jsonl", json.dumps(t) + "\n")
    main(["diagnose", "--traces", str(tmp_path / "t.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
          "--out", str(tmp_path / "o")])
    row = json.loads((tmp_path / "o" / "diagnosis.jsonl").read_text())
    assert row["stages"]["retrieval"] == {"groups_present": [0, 1], "kind": "retrieval",
                                          "channels": {"bm25": [0, 1], "dense": [1]}}
