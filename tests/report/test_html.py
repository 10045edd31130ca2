"""report.html: self-contained, escaped, and rendered by a real browser (headless Chromium)."""

import json
import os
import re

import pytest

from ragdx.config import load_settings
from ragdx.build import build_ingestor
from ragdx.queryset import load_queries, parse_query
from ragdx.experiments.run import run
from ragdx.store.sqlite import SQLiteStore
from ragdx.testing.browser import Browser, find_chromium
from ragdx.testing.encoders import HashingEncoder
from tests.conftest import EXAMPLE, write


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    """The bundled example run end to end (hashing encoder: no model needed)."""
    folder = tmp_path_factory.mktemp("report")
    settings = load_settings()
    encoder = HashingEncoder(dim=128)
    store = SQLiteStore(folder / "store.db")
    build_ingestor(store, settings, encoder).run(EXAMPLE / "manifest.jsonl")
    queries = load_queries(EXAMPLE / "queries.jsonl")
    result = run(store, settings, queries, folder / "run", progress=False, encoder=encoder)
    return result, queries


def test_the_report_is_one_self_contained_file(example_run):
    result, queries = example_run
    html = (result.folder / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    # nothing is fetched: no external script, style, image or font
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert html.count('<details class="q"') == len(queries)
    assert '<svg id="funnel"' in html and '<svg id="outcomes"' in html
    metrics = json.loads((result.folder / "metrics.json").read_text())
    assert metrics["overall"]["queries"] == len(queries)
    assert sorted(p.name for p in result.folder.iterdir()) == ["diagnosis.jsonl", "manifest.json", "metrics.json",
                                                               "queries.jsonl", "report.html", "traces.jsonl"]


def test_document_text_is_escaped_never_run(tmp_path):
    write(tmp_path / "evil.txt", "<script>window.__pwned = 1</script> Refunds are accepted within 30 days "
                                 "<img src=x onerror=alert(1)>.")
    write(tmp_path / "m.jsonl", json.dumps({"doc_id": "evil.txt", "path": "evil.txt"}) + "\n")
    settings = load_settings(overrides=["retrieval.dense.enabled=false"])
    store = SQLiteStore(tmp_path / "s.db")
    build_ingestor(store, settings).run(tmp_path / "m.jsonl")
    query = parse_query({"id": "q<b>", "question": "Refunds within 30 days?",
                         "required": [[{"doc": "evil.txt", "quote": "Refunds are accepted within 30 days"}]]},
                        "q.jsonl", 1)
    result = run(store, settings, [query], tmp_path / "run", progress=False)
    html = (result.folder / "report.html").read_text(encoding="utf-8")
    assert "<script>window.__pwned" not in html and "&lt;script&gt;window.__pwned" in html
    assert "<img src=x" not in html and "q<b>" not in html
    assert '<mark class="required" data-group="0"' in html  # the quote is highlighted in the context


def _browser_or_skip():
    if find_chromium() is None:
        if os.environ.get("RAGDX_REQUIRE_BROWSER"):
            pytest.fail("RAGDX_REQUIRE_BROWSER is set but no Chromium is on PATH (apt-get install chromium)")
        pytest.skip("no Chromium on PATH (apt-get install chromium; .ci/run installs it)")


def test_the_report_renders_in_headless_chromium(example_run, tmp_path):
    _browser_or_skip()
    result, queries = example_run
    failing = [d for d in result.diagnoses if d.first_failure]
    assert failing, "the bundled example is meant to have failures to drill into"
    with Browser() as browser:
        page = browser.open(result.folder / "report.html")
        # the funnel: one bar per stage measured, each with a width
        bars = page.evaluate("Array.from(document.querySelectorAll('#funnel .funnel-bar')).map("
                             "b => [b.dataset.stage, parseFloat(b.getAttribute('width'))])")
        assert [b[0] for b in bars][:4] == ["source", "parsing", "rewrite", "retrieval"]
        assert "context" in [b[0] for b in bars] and all(w >= 0 for _, w in bars)
        assert page.evaluate("document.getElementById('funnel').getBoundingClientRect().height") > 100
        # the drill-down: every query, expandable; failing ones carry a first-loss mark
        assert page.evaluate("document.querySelectorAll('details.q').length") == len(queries)
        page.evaluate("document.getElementById('expand-all').click()")
        assert page.evaluate("Array.from(document.querySelectorAll('details.q')).every(d => d.open)")
        for d in failing:
            marks = page.evaluate(f"document.getElementById({json.dumps('q-' + d.id)})"
                                  ".querySelectorAll('.first-loss').length")
            assert marks >= 1, d.id
        # required evidence is highlighted in ranked lists and in the context, visibly
        assert page.evaluate("document.querySelectorAll('tr.ev').length") > 0
        height = page.evaluate("document.querySelector('mark.required').getBoundingClientRect().height")
        assert height > 0
        # the outcome filter
        page.evaluate("var s=document.getElementById('outcome-filter'); s.value='failed';"
                      "s.dispatchEvent(new Event('change'))")
        shown = page.evaluate("document.getElementById('shown-count').textContent")
        assert shown == f"{sum(1 for d in result.diagnoses if d.outcome not in ('supported', 'correct_abstention'))}" \
                        f" of {len(queries)} queries"
        shot = page.screenshot(tmp_path / "report.png")
        assert shot.stat().st_size > 10_000
        assert page.errors == []
        assert page.requests == [(result.folder / "report.html").resolve().as_uri()]
