"""The report of an imported run, read in a real browser at 1280 px: titled by its system, no
empty run facts, only the stages the system has, a per-tag table that fits the window."""

import json
import os

import pytest

from ragdx.cli import main
from ragdx.testing.browser import Browser, find_chromium
from tests.conftest import EXAMPLE, write


def _traces(path):
    """A trace per bundled question: one retrieval channel and a context holding every required
    quote but the last group's, and an answer stating them (no reranker, no governance)."""
    lines = []
    for line in (EXAMPLE / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        groups = q.get("required", [])
        quotes = [{"id": f"{q['id']}-{n}", "doc": g[0]["doc"], "text": g[0]["quote"]} for n, g in enumerate(groups)]
        context = quotes[:-1] if len(quotes) > 1 else quotes
        lines.append(json.dumps({"query_id": q["id"], "system": "refund-bot", "stages": [
            {"name": "search", "kind": "retrieval", "items": quotes, "seconds": 0.01},
            {"name": "packer", "kind": "context", "items": context}],
            "answer": {"text": " ".join(i["text"] for i in context) if context else "No idea.",
                       "abstained": not context}}))
    write(path, "\n".join(lines) + "\n")


def test_the_imported_report_reads_at_1280_px(tmp_path, capsys):
    _traces(tmp_path / "t.jsonl")
    assert main(["diagnose", "--traces", str(tmp_path / "t.jsonl"), "--queries", str(EXAMPLE / "queries.jsonl"),
                 "--out", str(tmp_path / "o")]) == 0
    html = (tmp_path / "o" / "report.html").read_text()
    assert "<title>refund-bot: ragdx diagnosis of imported traces</title>" in html
    assert "index version" not in html and "seed" not in html and "<code></code>" not in html
    assert "tokens)" not in html  # the context has no token counts: none are shown
    # the answers carried no verdicts: the claims ragdx checked itself are shown with theirs (issue 28)
    diagnoses = [json.loads(x) for x in (tmp_path / "o" / "diagnosis.jsonl").read_text().splitlines()]
    checked = [c for d in diagnoses for c in d["claims"]]
    assert checked and all(c["supported"] is not None for c in checked)
    first = checked[0]
    assert f'<td>{first["text"]}</td>' in html.replace("&#x27;", "'").replace("&quot;", '"')
    assert html.count('<span class="better">supported</span>') >= sum(c["supported"] for c in checked)
    if find_chromium() is None:
        if os.environ.get("RAGDX_REQUIRE_BROWSER"):
            pytest.fail("RAGDX_REQUIRE_BROWSER is set but no Chromium is on PATH (apt-get install chromium)")
        pytest.skip("no Chromium on PATH (apt-get install chromium; .ci/run installs it)")
    with Browser() as browser:
        page = browser.open(tmp_path / "o" / "report.html")
        bars = page.evaluate("Array.from(document.querySelectorAll('#funnel .funnel-bar')).map(b => b.dataset.stage)")
        assert bars == ["retrieval", "search", "context"]  # no source, parsing, fusion, rerank or governance
        fits = page.evaluate("(() => { const s = document.getElementById('tags'); "
                             "return [s.scrollWidth, s.clientWidth, window.innerWidth]; })()")
        assert fits[2] == 1280 and fits[0] <= fits[1], fits
        assert page.errors == []
