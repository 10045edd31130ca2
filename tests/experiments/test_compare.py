"""``ragdx compare``: two run folders paired question by question, the stage that regressed named,
the gate's exit codes, and the CI outputs (Markdown, JUnit, HTML in Chromium)."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET

import pytest

from ragdx.cli import main
from ragdx.experiments.compare import compare_runs, label_key, load_run, parse_rules
from ragdx.queryset import load_queries
from ragdx.testing.browser import Browser, find_chromium
from tests.conftest import EXAMPLE, write

LEXICAL = ["--set", "retrieval.dense.enabled=false", "--set", "cache.enabled=false"]
GATE = ["--fail-on", "success:-0.02", "--fail-on", "complete@context:-0.03", "--fail-on", "hallucination:+0"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The bundled example run at the defaults and at context.budget_tokens=300 (lexical)."""
    folder = tmp_path_factory.mktemp("compare")
    store = str(folder / "s.db")
    assert main(["ingest", "--store", store, str(EXAMPLE / "manifest.jsonl"), *LEXICAL, "--quiet"]) == 0
    for name, budget in (("base", 6000), ("small", 300)):
        assert main(["run", "--store", store, "--queries", str(EXAMPLE / "queries.jsonl"), "--out",
                     str(folder / name), *LEXICAL, "--set", f"context.budget_tokens={budget}", "--quiet"]) == 0
    return folder


def test_a_smaller_context_budget_is_named_at_context_and_fails_the_gate(runs, tmp_path, capsys, monkeypatch):
    summary = write(tmp_path / "summary.md", "earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code = main(["compare", str(runs / "base"), str(runs / "small"), *GATE, "--out", str(tmp_path / "cmp"),
                 "--markdown", str(tmp_path / "c.md"), "--junit", str(tmp_path / "j.xml")])
    out, err = capsys.readouterr()
    assert code == 1
    assert "- `settings.context.budget_tokens`: `6000` → `300`" in out  # what differs, said first
    assert out.index("What differs") < out.index("NEW loses evidence")
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    base = {json.loads(x)["id"]: json.loads(x) for x in (runs / "base" / "diagnosis.jsonl").read_text().splitlines()}
    small = {json.loads(x)["id"]: json.loads(x) for x in (runs / "small" / "diagnosis.jsonl").read_text().splitlines()}
    # the questions that lost evidence at context, counted from the two diagnoses by hand
    lost_at_context = [q for q in base if small[q]["first_failure"] == "context" and base[q]["first_failure"] != "context"]
    assert len(lost_at_context) >= 3
    assert result["readings"][0].startswith(f"NEW loses evidence at context on {len(lost_at_context)} questions")
    assert {m["id"] for m in result["moved"] if m["new"] == "context"} == set(lost_at_context)
    assert all(m["regressed"] for m in result["moved"] if m["id"] in lost_at_context)
    for q in lost_at_context:
        assert f"{q}: {base[q]['first_failure'] or 'none (' + base[q]['outcome'] + ')'} -> context" in out
    failed = [r["rule"] for r in result["rules"] if r["failed"]]
    assert "complete@context:-0.03" in failed and "hallucination:+0" not in failed
    # the failed rules come last, on stderr too
    assert err.strip().splitlines()[-1].startswith("gate: FAILED ")
    assert f"**{len(failed)} of 3 rules failed.**\n\ncompare folder: " in out
    # Markdown to a file and appended to the job summary; JUnit with a case per rule and per regressed question
    markdown = (tmp_path / "c.md").read_text()
    assert summary.read_text() == "earlier step\n" + markdown + "\n"
    suite = ET.parse(tmp_path / "j.xml").getroot()
    cases = {(c.get("classname"), c.get("name")): c.find("failure") is not None for c in suite.iter("testcase")}
    assert cases[("ragdx.compare.gate", "complete@context:-0.03")] is True
    assert cases[("ragdx.compare.gate", "hallucination:+0")] is False
    assert all(cases[("ragdx.compare.questions", q)] for q in lost_at_context)
    assert int(suite.get("failures")) == sum(cases.values())


def test_a_run_compared_with_itself_exits_0_with_no_difference(runs, capsys):
    assert main(["compare", str(runs / "base"), str(runs / "base"), *GATE]) == 0
    out = capsys.readouterr().out
    assert "No difference: every paired question has the same values, outcome and first failure." in out
    assert out.rstrip().endswith("no difference")
    assert "The runs' settings, code, index, corpus and query set are the same." in out


def test_the_manifest_fingerprints_what_the_results_depend_on(runs):
    base, small = (json.loads((runs / n / "manifest.json").read_text())["fingerprint"] for n in ("base", "small"))
    assert set(base) == {"settings", "code", "index_version", "corpus", "queries"}
    assert base["settings"] != small["settings"]
    assert (base["code"], base["index_version"], base["corpus"], base["queries"]) == \
        (small["code"], small["index_version"], small["corpus"], small["queries"])
    assert base["index_version"] == 1 and len(base["corpus"]) == len(base["code"]) == 16
    # the run folder keeps its questions with their labels, as run
    assert [label_key(q) for q in load_queries(runs / "base" / "queries.jsonl")] == \
        [label_key(q) for q in load_queries(EXAMPLE / "queries.jsonl")]


def test_missing_questions_are_listed_and_changed_labels_refused(runs, tmp_path, capsys):
    edited = tmp_path / "edited"
    shutil.copytree(runs / "small", edited)
    lines = (edited / "queries.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["required"] = first["required"][:1] + [[{"doc": "policies/shipping.md", "quote": "another"}]]
    (edited / "queries.jsonl").write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    assert main(["compare", str(runs / "base"), str(edited)]) == 2
    err = capsys.readouterr().err
    assert f"1 question changed labels between the runs ({first['id']})" in err and "--allow-label-change" in err
    assert main(["compare", str(runs / "base"), str(edited), "--allow-label-change"]) == 0
    assert f"labels changed (paired anyway): {first['id']}" in capsys.readouterr().out
    # a question on one side only is listed, and the rest still paired
    dropped = tmp_path / "dropped"
    shutil.copytree(runs / "small", dropped)
    kept = (dropped / "diagnosis.jsonl").read_text().splitlines()
    (dropped / "diagnosis.jsonl").write_text("\n".join(kept[1:]) + "\n")
    result = compare_runs(load_run(runs / "base"), load_run(dropped))
    assert result.only_base == (json.loads(kept[0])["id"],) and len(result.paired) == len(kept) - 1


def test_bad_input_exits_2_naming_what_is_wrong(runs, tmp_path, capsys):
    assert main(["compare", str(runs / "base"), str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no run folder here" in capsys.readouterr().err
    assert main(["compare", str(runs / "base"), str(runs / "small"), "--fail-on", "success<0.02"]) == 2
    assert "gate rule 'success<0.02': expected METRIC:-X" in capsys.readouterr().err
    assert main(["compare", str(runs / "base"), str(runs / "small"), "--fail-on", "sucess:-0.02"]) == 2
    assert "the runs have no metric 'sucess' in common; these can be gated: complete@source" in capsys.readouterr().err
    broken = tmp_path / "broken"
    shutil.copytree(runs / "small", broken)
    (broken / "metrics.json").write_text("{not json")
    assert main(["compare", str(runs / "base"), str(broken)]) == 2
    assert f"{broken / 'metrics.json'}: not valid JSON" in capsys.readouterr().err
    gate = write(tmp_path / "gate.toml", 'fail_on = ["success:-0.02"]\nthreshold = 3\n')
    assert main(["compare", str(runs / "base"), str(runs / "small"), "--gate", str(gate)]) == 2
    assert f"{gate} field 'threshold': unknown key 'threshold'" in capsys.readouterr().err


def test_rules_hand_checked():
    [drop, rise] = parse_rules(["success:-0.02", "hallucination:+0"])
    assert (drop.metric, drop.sign, drop.amount, drop.alpha) == ("success", "-", 0.02, None)
    [significant] = parse_rules(["complete@context:-0.03", "p<0.05"])
    assert significant.alpha == 0.05

    class C:  # a comparison's delta and p, as Rule.fails reads them
        def __init__(self, delta, p):
            self.delta, self.test = delta, type("T", (), {"p": p})()
    assert drop.fails(C(-0.05, 0.5)) and not drop.fails(C(-0.02, 0.001)) and not drop.fails(C(0.1, 0.001))
    assert rise.fails(C(0.01, 0.9)) and not rise.fails(C(0.0, 0.0))
    assert significant.fails(C(-0.5, 0.01)) and not significant.fails(C(-0.5, 0.06))


def test_the_compare_page_in_headless_chromium(runs, tmp_path):
    if find_chromium() is None:
        if os.environ.get("RAGDX_REQUIRE_BROWSER"):
            pytest.fail("RAGDX_REQUIRE_BROWSER is set but no Chromium is on PATH (apt-get install chromium)")
        pytest.skip("no Chromium on PATH (apt-get install chromium; .ci/run installs it)")
    assert main(["compare", str(runs / "base"), str(runs / "small"), "--out", str(tmp_path / "cmp")]) == 0
    moved = json.loads((tmp_path / "cmp" / "compare.json").read_text())["moved"]
    with Browser() as browser:
        page = browser.open(tmp_path / "cmp" / "report.html")
        # the two funnels side by side: context's bar is shorter on NEW
        width = ("parseFloat(document.querySelector('#funnel-{} .funnel-bar[data-stage=\"context\"]')"
                 ".getAttribute('width'))")
        assert page.evaluate(width.format("new")) < page.evaluate(width.format("base"))
        top = "document.getElementById('funnel-{}').getBoundingClientRect().top"
        assert abs(page.evaluate(top.format("new")) - page.evaluate(top.format("base"))) < 1
        # each question that changed can be opened
        assert page.evaluate("document.querySelectorAll('details.moved').length") == len(moved)
        first = json.dumps("m-" + moved[0]["id"])
        page.evaluate(f"document.getElementById({first}).querySelector('summary').click()")
        assert page.evaluate(f"document.getElementById({first}).open") is True
        assert page.evaluate(f"document.getElementById({first}).innerText").count("context") >= 1
        assert page.errors == []
        assert page.requests == [(tmp_path / "cmp" / "report.html").resolve().as_uri()]


@pytest.mark.parametrize("damage, said", [
    (lambda run: (run / "manifest.json").write_text("[1, 2]"), "manifest.json: a run's manifest is a JSON object, not list"),
    (lambda run: (run / "manifest.json").write_text("[" * 100_000 + "]" * 100_000),
     "manifest.json: its JSON is nested too deeply to be a run's file"),
    (lambda run: _edit_manifest(run, settings=[1]), "manifest.json field 'settings': 'settings' must be an object"),
    (lambda run: _edit_manifest(run, fingerprint=None), "manifest.json field 'fingerprint': 'fingerprint' must be"),
    (lambda run: _edit_diagnosis(run, first_failure="nowhere"),
     "diagnosis.jsonl:1: 'outcome' must be one of correct_abstention"),
    (lambda run: _edit_diagnosis(run, outcome=5), "or null, not 5 and"),
])
def test_a_damaged_run_folder_is_refused_with_exit_2_not_read_as_a_gate_verdict(runs, tmp_path, capsys, damage, said):
    # exit 1 is the gate's "regression": a crash on a damaged folder read as a failed gate
    broken = tmp_path / "broken"
    shutil.copytree(runs / "small", broken)
    damage(broken)
    assert main(["compare", str(runs / "base"), str(broken)]) == 2
    assert said in capsys.readouterr().err


def _edit_manifest(run, **changes):
    info = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(info | changes))


def _edit_diagnosis(run, **changes):
    lines = (run / "diagnosis.jsonl").read_text().splitlines()
    lines[0] = json.dumps(json.loads(lines[0]) | changes)
    (run / "diagnosis.jsonl").write_text("\n".join(lines) + "\n")
