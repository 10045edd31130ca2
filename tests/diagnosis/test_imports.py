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


def _diagnose(tmp_path, lines, queries, *extra):
    write(tmp_path / "q.jsonl", "\n".join(json.dumps(q) for q in queries) + "\n")
    write(tmp_path / "t.jsonl", "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return main(["diagnose", "--traces", str(tmp_path / "t.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "o"), *extra])


def test_no_readable_line_or_no_known_query_exits_2_and_writes_nothing(tmp_path, capsys):
    assert _diagnose(tmp_path, ['{"query_id": 3}', "oops"], [QUERY]) == 2
    err = capsys.readouterr().err
    assert "t.jsonl: no trace could be read: 2 malformed lines; the first: " in err
    assert "t.jsonl:1 field 'query_id': expected a string, got 3; line skipped" in err
    assert not (tmp_path / "o").exists()
    assert _diagnose(tmp_path, [trace("elsewhere", ["policy-current"])], [QUERY]) == 2
    assert ("none of the 1 traces names a query of the query set (the first names 'elsewhere'; the query set "
            "has 'q1')") in capsys.readouterr().err


def test_traces_of_unknown_queries_are_not_counted_as_diagnosed(tmp_path, capsys):
    assert _diagnose(tmp_path, [trace("q1", ["policy-current"]), trace("other", ["policy-current"])],
                     [QUERY]) == 0
    out = capsys.readouterr()
    assert "t.jsonl:2: query_id 'other' is not in the query set; line skipped" in out.err
    assert ("imported system: 1 traces diagnosed, 0 malformed lines or traces skipped, 1 traces of unknown "
            "queries skipped, 0 queries without a trace") in out.out


def test_with_a_store_imported_lists_are_judged_against_their_own_items_only(tmp_path, capsys, example_store):
    """ragdx's chunk ids are not relevance labels of another system's list, and spans that do not
    line up with the stored text are counted and matched by their text instead."""
    rule = "Refunds are accepted within 30 days of delivery"
    exception = "Quality defects may be refunded within 90 days"
    parsed = example_store.texts("policies/refund.md", "2026-03")[1]
    at = parsed.index(rule)
    items = [{"id": "a", "doc": "policies/refund.md", "start": at, "end": at + len(rule)},  # lines up, no text
             {"id": "b", "doc": "policies/quality.md", "start": 0, "end": 40, "text": exception + " of delivery."},
             {"id": "c", "doc": "policies/shipping.md", "text": "Shipping is free above 50 EUR."}]
    query = {"id": "q1", "question": "?", "required": [[{"doc": "policies/refund.md", "quote": rule}],
                                                        [{"doc": "policies/quality.md", "quote": exception}]]}
    line = {"query_id": "q1", "system": "my-rag", "stages": [
        {"name": "search", "kind": "retrieval", "items": items},
        {"name": "ctx", "kind": "context", "items": items[:2]}], "answer": {"text": rule + "."}}
    assert _diagnose(tmp_path, [line], [query], "--store", str(example_store.path)) == 0
    err = capsys.readouterr().err
    assert "1 of 2 item spans do not line up with the stored text; those items are matched by their text" in err
    assert "item 'b': span 0..40 of policies/quality.md holds 'Quality defect policy" in err
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())["overall"]["metrics"]
    assert metrics["R@10 search"]["value"] == 1.0  # relevant: a and b only (2 of 2 retrieved)
    assert metrics["nDCG@10 search"]["value"] == 1.0
    row = json.loads((tmp_path / "o" / "diagnosis.jsonl").read_text())
    # the span-only item took the stored text, so the answer could be checked: it uses the rule only
    assert (row["outcome"], row["first_failure"]) == ("incomplete", "generation")
    html = (tmp_path / "o" / "report.html").read_text()
    assert "<title>my-rag: ragdx diagnosis of imported traces</title>" in html


def test_a_governance_drop_is_judged_by_its_code_not_its_words(tmp_path, capsys):
    # the same drop in another system's words: with a code it is judged; without one, and with
    # words no code names, it is reported as given and not judged
    lines = []
    for qid, dropped in (("coded", {"id": "policy-exception", "reason": "not visible to this tenant",
                                    "code": "acl"}),
                         ("words", {"id": "policy-exception", "reason": "not visible to this tenant"})):
        t = trace(qid, ["policy-current"])
        t["stages"].insert(2, {"name": "acl", "kind": "governance", "items": [{"id": "policy-current"}],
                               "dropped": [dropped]})
        lines.append(t)
    assert _diagnose(tmp_path, lines, [dict(QUERY, id=q) for q in ("coded", "words")]) == 0
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "o" / "diagnosis.jsonl").read_text().splitlines())}
    assert rows["coded"]["lost"][0]["reason"] == "acl: not visible to this tenant (a correct filter)"
    assert rows["words"]["lost"][0]["reason"] == "acl: not visible to this tenant"


def test_an_unknown_drop_code_names_its_field(tmp_path, capsys):
    t = trace("q1", ["policy-current"])
    t["stages"].insert(2, {"name": "acl", "kind": "governance", "items": [{"id": "policy-current"}],
                           "dropped": [{"id": "policy-exception", "reason": "x", "code": "forbidden"}]})
    _diagnose(tmp_path, [t], [QUERY])
    err = capsys.readouterr().err
    assert "t.jsonl:1 field 'stages[2].dropped[0].code': stages[2].dropped[0].code must be one of 'cut'" in err


def test_another_versions_copy_dropped_is_judged_by_the_version_its_label_names(tmp_path, capsys):
    # the drop's code read from its words; evidence labelled on that version: the filter was wrong
    reason = "other version: pg-17/x.html is version 17; the question names 15, which pg-15/x.html holds"
    lines = []
    for qid in ("labelled", "unlabelled"):
        t = trace(qid, ["policy-current"])
        t["stages"].insert(2, {"name": "versions", "kind": "governance", "items": [{"id": "policy-current"}],
                               "dropped": [{"id": "policy-exception", "reason": reason}]})
        lines.append(t)
    labelled = dict(QUERY, id="labelled",
                    required=[[{"id": "policy-current"}], [{"id": "policy-exception", "version": "17"}]])
    assert _diagnose(tmp_path, lines, [labelled, dict(QUERY, id="unlabelled")]) == 0
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "o" / "diagnosis.jsonl").read_text().splitlines())}
    assert rows["labelled"]["lost"][0]["reason"] == (
        f"versions: {reason} (a wrong filter: the required evidence is labelled on that version)")
    assert rows["unlabelled"]["lost"][0]["reason"] == f"versions: {reason} (a correct filter)"
