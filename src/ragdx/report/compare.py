"""``ragdx compare``'s outputs: Markdown (a pull-request comment or a CI job summary), JUnit XML
(one test case per gate rule and per regressed question) and one self-contained HTML page (the
two funnels side by side, and a drill-down of each question that changed)."""

from __future__ import annotations

import json
from typing import Sequence
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from ragdx.evaluation.layered import FUNNEL, LATENCY, metric
from ragdx.experiments.compare import Comparison, CompareResult
from ragdx.report.html import _CSS, _badge, _e, _table, funnel_svg

__all__ = ["render_markdown", "render_junit", "render_html"]

_HEADLINE = ("success", "supported", "correct_abstention", "wrong_abstention", "hallucination", "leak", "stale",
             "faithfulness", "citation_support", "latency_ms total", "cost")


def _value(c: Comparison, v: float) -> str:
    return f"{v:.1f} ms" if metric(c.metric).kind == LATENCY else f"{v:.3f}"


def _ci(c: Comparison) -> str:
    return "–" if c.ci is None else f"[{c.ci[0]:+.3f}, {c.ci[1]:+.3f}]"


def _rows(result: CompareResult) -> tuple[list[Comparison], list[Comparison]]:
    by = {c.metric: c for c in result.overall}
    stages = [by[f"complete@{s}"] for s in FUNNEL if f"complete@{s}" in by]
    answers = [by[n] for n in _HEADLINE if n in by]
    return stages, answers


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return "\n".join(["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def _flip(c: Comparison) -> str:
    return c.test.detail or ""


def render_markdown(result: CompareResult) -> str:
    """The comparison as Markdown: what differs, the readings, the stages, the answers, per tag,
    the questions that moved and the gate, failed rules last."""
    out = [f"## ragdx compare: `{result.base.name}` → `{result.new.name}`", ""]
    if result.changes:
        out += ["**What differs between the runs**", ""]
        out += [f"- `{k}`: `{json.dumps(a)}` → `{json.dumps(b)}`" for k, a, b in result.changes]
        out.append("")
    else:
        out += ["The runs' settings, code, index, corpus and query set are the same.", ""]
    out.append(f"{len(result.paired)} questions paired" + (
        f"; only in BASE: {', '.join(result.only_base)}" if result.only_base else "") + (
        f"; only in NEW: {', '.join(result.only_new)}" if result.only_new else "") + (
        f"; labels changed (paired anyway): {', '.join(result.label_changed)}" if result.label_changed else "") + ".")
    out += ["", *[f"- {r}" for r in result.readings], ""]
    stages, answers = _rows(result)
    if stages:
        out += ["**Evidence complete at each stage** (exact McNemar test)", "", _md_table(
            ["stage", "BASE", "NEW", "Δ", "95% CI", "p", "questions"],
            [[c.metric.removeprefix("complete@"), _value(c, c.baseline), _value(c, c.variant), f"{c.delta:+.3f}",
              _ci(c), f"{c.test.p:.3g}", _flip(c)] for c in stages]), ""]
    if answers:
        out += ["**Answers**", "", _md_table(
            ["metric", "BASE", "NEW", "Δ", "95% CI", "p", "test"],
            [[c.metric, _value(c, c.baseline), _value(c, c.variant),
              f"{c.delta:+.1f}" if metric(c.metric).kind == LATENCY else f"{c.delta:+.3f}", _ci(c),
              f"{c.test.p:.3g}", c.test.test] for c in answers]), ""]
    tagged = [(t, cs) for t, cs in result.by_tag.items() if cs]
    if tagged:
        rows = []
        for tag, cs in tagged:
            by = {c.metric: c for c in cs}
            success, context = by.get("success"), by.get("complete@context")
            rows.append([tag, str(cs[0].test.n),
                         "–" if success is None else f"{success.baseline:.3f} → {success.variant:.3f} (p {success.test.p:.2g})",
                         "–" if context is None else f"{context.baseline:.3f} → {context.variant:.3f} (p {context.test.p:.2g})"])
        out += ["**Per tag**", "", _md_table(["tag", "n", "success", "complete@context"], rows), ""]
    if result.moved:
        out += ["**Questions whose first failure moved**", ""]
        out += [f"- {'⚠ ' if m.regressed else ''}{m.describe()}" for m in result.moved]
        out.append("")
    if result.rules:
        out += ["**Gate**", ""]
        passed = [r for r in result.rules if not r.failed]
        out += [f"- {r.describe()}" for r in passed + list(result.failed)]
        out += ["", f"**{len(result.failed)} of {len(result.rules)} rules failed.**" if result.failed
                else "All rules passed."]
    return "\n".join(out).rstrip() + "\n"


def render_junit(result: CompareResult) -> str:
    """JUnit XML: one test case per gate rule, and one per question that regressed (its first
    failure moved earlier, or appeared)."""
    cases = []
    for r in result.rules:
        body = (f"<failure message={quoteattr(r.describe())}>{xml_escape(r.describe())}</failure>"
                if r.failed else "")
        cases.append(f'  <testcase classname="ragdx.compare.gate" name={quoteattr(r.rule.text)}>{body}</testcase>')
    for m in result.moved:
        body = (f"<failure message={quoteattr(m.describe())}>{xml_escape(m.describe())}</failure>"
                if m.regressed else "")
        cases.append(f'  <testcase classname="ragdx.compare.questions" name={quoteattr(m.id)}>{body}</testcase>')
    failures = sum(1 for r in result.rules if r.failed) + sum(1 for m in result.moved if m.regressed)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="ragdx compare" tests="{len(cases)}" '
            f'failures="{failures}" errors="0">\n' + "\n".join(cases) + ("\n" if cases else "") + "</testsuite>\n")


def _drill(result: CompareResult) -> str:
    base_q, new_q = result.base.queries, result.new.queries
    base_d = {r.id: r for r in result.base.rows}
    new_d = {r.id: r for r in result.new.rows}
    parts = []
    for m in result.moved:
        q = new_q.get(m.id) or base_q[m.id]
        a, b = base_d[m.id], new_d[m.id]
        gained = [s for s in FUNNEL if a.values.get(f"complete@{s}") == 0.0 and b.values.get(f"complete@{s}") == 1.0]
        lost = [s for s in FUNNEL if a.values.get(f"complete@{s}") == 1.0 and b.values.get(f"complete@{s}") == 0.0]
        rows = [[_e(s), _e(a.values.get(f"complete@{s}")), _e(b.values.get(f"complete@{s}"))]
                for s in FUNNEL if f"complete@{s}" in a.values or f"complete@{s}" in b.values]
        parts.append(
            f'<details class="q moved" data-regressed="{int(m.regressed)}" id="m-{_e(m.id)}"><summary>'
            f'{_badge(m.base_outcome)} → {_badge(m.new_outcome)} <code>{_e(m.id)}</code> {_e(q.question)} '
            f'<span class="muted small">first failure {_e(m.base_failure or "none")} → '
            f'{_e(m.new_failure or "none")}</span></summary>'
            + (f"<p>Evidence lost at: {_e(', '.join(lost))}</p>" if lost else "")
            + (f"<p>Evidence gained at: {_e(', '.join(gained))}</p>" if gained else "")
            + _table(["complete at", "BASE", "NEW"], rows, (1, 2))
            + f'<p class="small"><a href="{_e(result.base.folder.resolve().as_uri())}/report.html#q-{_e(m.id)}">BASE '
            f'drill-down</a> · <a href="{_e(result.new.folder.resolve().as_uri())}/report.html#q-{_e(m.id)}">'
            f"NEW drill-down</a></p></details>")
    return "".join(parts) or '<p class="muted">No question changed its outcome or first failure.</p>'


def render_html(result: CompareResult) -> str:
    """One self-contained page: the readings, the two funnels side by side, the tables, the gate,
    and a drill-down of each question that moved."""
    stages, answers = _rows(result)

    def rows(cs: Sequence[Comparison]) -> list[list[str]]:
        return [[_e(c.metric), _e(_value(c, c.baseline)), _e(_value(c, c.variant)), f"{c.delta:+.3f}", _e(_ci(c)),
                 f"{c.test.p:.3g}", _e(c.test.detail or c.test.test)] for c in cs]

    gate = ""
    if result.rules:
        gate = ('<section id="gate"><h2>Gate</h2><ul>' + "".join(
            f'<li class="{"fail" if r.failed else "pass"}">{_e(r.describe())}</li>'
            for r in [r for r in result.rules if not r.failed] + list(result.failed)) + "</ul>"
            + f'<p id="gate-verdict"><b>{len(result.failed)} of {len(result.rules)} rules failed</b></p></section>')
    changes = "".join(f"<li><code>{_e(k)}</code>: <code>{_e(json.dumps(a))}</code> → <code>{_e(json.dumps(b))}</code></li>"
                      for k, a, b in result.changes) or "<li>nothing: same settings, code, index, corpus and queries</li>"
    funnels = ""
    if result.base_metrics is not None and result.new_metrics is not None:
        funnels = (f'<div class="side"><div><h3>BASE <code>{_e(result.base.name)}</code></h3>'
                   f'{funnel_svg(result.base_metrics, element_id="funnel-base")}</div><div><h3>NEW <code>{_e(result.new.name)}</code></h3>'
                   f'{funnel_svg(result.new_metrics, element_id="funnel-new")}</div></div>')
    css = _CSS + ".side{display:flex;gap:16px;flex-wrap:wrap}.side>div{flex:1;min-width:360px}" \
                 ".side svg{width:100%;height:auto}" \
                 "li.fail{color:#b71c1c;font-weight:bold}li.pass{color:#2e7d32}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>ragdx compare</title><style>{css}</style></head>
<body><main>
<h1>ragdx compare: <code>{_e(result.base.name)}</code> → <code>{_e(result.new.name)}</code></h1>
<p class="muted">{len(result.paired)} questions paired{f"; only in BASE: {_e(', '.join(result.only_base))}" if result.only_base else ""}{f"; only in NEW: {_e(', '.join(result.only_new))}" if result.only_new else ""}</p>
<section id="readings"><h2>In words</h2><ul>{"".join(f"<li>{_e(r)}</li>" for r in result.readings)}</ul></section>
<section id="changes"><h2>What differs between the runs</h2><ul>{changes}</ul></section>
<section id="funnels"><h2>Evidence survival</h2>{funnels}</section>
<section id="stages"><h2>Evidence complete at each stage</h2>{_table(["metric", "BASE", "NEW", "Δ", "95% CI", "p", "questions"], rows(stages), (1, 2, 3, 5))}</section>
<section id="answers"><h2>Answers</h2>{_table(["metric", "BASE", "NEW", "Δ", "95% CI", "p", "test"], rows(answers), (1, 2, 3, 5))}</section>
{gate}
<section id="moved"><h2>Questions that changed ({len(result.moved)})</h2>{_drill(result)}</section>
</main></body></html>
"""
