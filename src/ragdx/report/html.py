"""``report.html``: one self-contained page per run or ablation — no network, no CDN, no files
beside it. Charts are inline SVG drawn here; the few lines of script only filter and expand the
drill-down, and the page reads whole without them.

Sections: the evidence-survival funnel (queries whose every required group is present at each
stage), outcome counts, first failures, the layered metrics overall and per tag, the ablation
(readings, deltas with significance, routing) when there is one, and a per-query drill-down:
each stage's ranked list with the required evidence highlighted, the first loss marked, the
context with the required quotes marked, and the answer's claims with their verdicts.

Every text from documents, questions and answers is escaped: a document that holds markup or
an injected instruction is shown, never run.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html import escape
from typing import Any, Sequence

from ragdx.diagnosis.evidence import QueryEvidence
from ragdx.diagnosis.locate import (
    CORRECT_ABSTENTION, HALLUCINATION, INCOMPLETE, LEAK, STALE, SUPPORTED, UNSUPPORTED, WRONG_ABSTENTION,
    Diagnosis, ItemView, StageView, TraceView, holds, touching,
)
from ragdx.evaluation.layered import FUNNEL, Metrics, metric
from ragdx.types import Query, StageKind

SHOWN = 10  # items shown per stage, besides every item that holds required evidence
_GOOD = {SUPPORTED, CORRECT_ABSTENTION}
_COLOURS = {SUPPORTED: "#2e7d32", CORRECT_ABSTENTION: "#558b2f", INCOMPLETE: "#ef6c00",
            UNSUPPORTED: "#d84315", WRONG_ABSTENTION: "#f9a825", HALLUCINATION: "#c62828", LEAK: "#6a1b9a",
            STALE: "#4e342e"}
_GROUP_COLOURS = ("#fff59d", "#b3e5fc", "#c8e6c9", "#f8bbd0", "#d1c4e9", "#ffe0b2")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #d8dce3;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}.muted{color:#5f6b7a}.small{font-size:12px}
section{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:12px 16px;margin:12px 0;overflow-x:auto}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eceef2;vertical-align:top}
th{background:#f1f3f6;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:22px}.badge{display:inline-block;padding:1px 7px;border-radius:10px;color:#fff;font-size:12px;white-space:nowrap}
.grp{display:inline-block;padding:0 5px;border-radius:4px;font-size:12px;border:1px solid #bbb;margin-right:2px}
tr.ev td{background:#fffde7}tr.lostrow td{background:#ffebee}.loss{border-left:4px solid #c62828;background:#ffebee;padding:4px 8px;margin:6px 0}
details.q{background:#fff;border:1px solid #e1e4ea;border-radius:8px;margin:8px 0;padding:6px 12px}
details.q>summary{cursor:pointer;font-weight:600}.stage{margin:10px 0 4px;font-weight:600}
.unit{border:1px solid #e1e4ea;border-radius:6px;padding:6px 10px;margin:6px 0;white-space:pre-wrap;font-size:13px}
mark{padding:0 1px}.sig{font-weight:700;color:#1b5e20}.worse{color:#b71c1c}.better{color:#1b5e20}
.reading{margin:4px 0}code{background:#f1f3f6;padding:0 3px;border-radius:3px}
.toolbar{display:flex;gap:10px;align-items:center;margin:8px 0}
table.tags th{font-size:12px;hyphens:manual}table.tags td{font-size:13px;padding:3px 6px}
"""

_SCRIPT = """
(function(){
  var sel=document.getElementById('outcome-filter');
  var qs=document.querySelectorAll('details.q');
  function apply(){var v=sel.value;var shown=0;
    qs.forEach(function(d){var ok=!v||d.dataset.outcome===v||(v==='failed'&&d.dataset.good==='0');
      d.style.display=ok?'':'none';if(ok)shown++;});
    document.getElementById('shown-count').textContent=shown+' of '+qs.length+' queries';}
  sel.addEventListener('change',apply);
  document.getElementById('expand-all').addEventListener('click',function(){
    var open=this.dataset.open!=='1';qs.forEach(function(d){if(d.style.display!=='none')d.open=open;});
    this.dataset.open=open?'1':'0';this.textContent=open?'Collapse all':'Expand all';});
  apply();
})();
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _badge(outcome: str) -> str:
    return f'<span class="badge" style="background:{_COLOURS.get(outcome, "#607d8b")}">{_e(outcome)}</span>'


def _group_tag(g: int, whole: bool = True) -> str:
    colour = _GROUP_COLOURS[g % len(_GROUP_COLOURS)]
    style = f"background:{colour}" + ("" if whole else ";border-style:dashed")
    title = "holds the group's evidence whole" if whole else "holds part of the group's evidence"
    return f'<span class="grp" style="{style}" title="{title}">g{g}{"" if whole else "½"}</span>'


def _num(value: float | None, name: str | None = None, digits: int = 3) -> str:
    if value is None:
        return "–"
    kind = metric(name).kind if name else "graded"
    if kind == "latency":
        return f"{value:.1f}"
    if kind == "amount":
        return f"{value:g}"
    return f"{value:.{digits}f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f'<th class="num">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# ---- charts (inline SVG) ----

def funnel_svg(metrics: Metrics, stages: Sequence[str] | None = None, element_id: str = "funnel") -> str:
    """Horizontal bars: the share of answerable queries whose every required group is present at
    each stage; channels are drawn as thinner bars under retrieval. ``stages``: the stage kinds
    the system has (an imported system's), the others left out; ``None``: every stage measured."""
    m = metrics.overall.metrics
    rows: list[tuple[str, float, int, int, bool]] = []
    for stage in FUNNEL:
        agg = m.get(f"complete@{stage}")
        if agg is None or stages is not None and stage not in stages:
            continue
        rows.append((stage, agg.value, int(round(agg.total)), agg.n, False))
        if stage == StageKind.RETRIEVAL.value:
            for name, a in m.items():
                d = metric(name)
                if d.stage == stage and d.channel is not None:
                    rows.append((d.channel, a.value, int(round(a.total)), a.n, True))
    if not rows:
        return '<p class="muted">No query has required evidence labelled, so there is no funnel.</p>'
    # the labels' column is as wide as the longest ("channel retrieved_contexts"), at about 7.5 px
    # a character of 13 px sans-serif
    labels = [("channel " if channel else "") + name for name, _, _, _, channel in rows]
    label_w = max(150, 16 + round(7.5 * max(map(len, labels))))
    bar_w, row_h = 480, 26
    width, height = label_w + bar_w + 130, row_h * len(rows) + 10
    parts = [f'<svg id="{element_id}" role="img" aria-label="evidence survival funnel" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (name, value, count, n, channel) in enumerate(rows):
        y = 5 + i * row_h
        h = 12 if channel else 20
        dy = 4 if channel else 0
        colour = "#90caf9" if channel else ("#43a047" if value >= 0.999 else "#fb8c00" if value >= 0.5 else "#e53935")
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" font-size="13" '
                     f'fill="#1d2330">{_e(labels[i])}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + dy}" width="{bar_w}" height="{h}" fill="#eceff1" rx="3"/>')
        parts.append(f'<rect class="funnel-bar" data-stage="{_e(name)}" x="{label_w}" y="{y + dy}" '
                     f'width="{bar_w * value:.1f}" height="{h}" fill="{colour}" rx="3"><title>{_e(name)}: '
                     f'{count} of {n} queries</title></rect>')
        parts.append(f'<text x="{label_w + bar_w + 8}" y="{y + 15}" font-size="13" fill="#1d2330">'
                     f'{value:.0%} ({count}/{n})</text>')
    parts.append("</svg>")
    return "".join(parts)


def outcomes_svg(outcomes: dict[str, int]) -> str:
    total = sum(outcomes.values()) or 1
    width, label_w, bar_w, row_h = 560, 160, 300, 24
    height = row_h * max(1, len(outcomes)) + 8
    parts = [f'<svg id="outcomes" role="img" aria-label="outcome counts" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (name, count) in enumerate(outcomes.items()):
        y = 4 + i * row_h
        parts.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" font-size="13">{_e(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{bar_w * count / total:.1f}" height="18" '
                     f'fill="{_COLOURS.get(name, "#607d8b")}" rx="3"/>')
        parts.append(f'<text x="{label_w + bar_w * count / total + 6:.1f}" y="{y + 14}" font-size="13">'
                     f'{count}</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---- sections ----

def _cards(metrics: Metrics) -> str:
    m = metrics.overall.metrics
    cards = []
    for name, label in (("success", "answer success"), ("supported", "supported answers"),
                        ("complete@context", "evidence complete in context"),
                        ("wrong_abstention", "wrong abstentions"), ("hallucination", "hallucinations"),
                        ("leak", "leaks"), ("stale", "stale citations")):
        agg = m.get(name)
        if agg is None:
            continue
        if metric(name).layer == "abstention":
            cards.append(f'<div class="card"><b>{int(round(agg.total))}</b>{_e(label)}</div>')
        else:
            cards.append(f'<div class="card"><b>{agg.value:.0%}</b>{_e(label)} '
                         f'<span class="muted small">({int(round(agg.total))}/{agg.n})</span></div>')
    latency = m.get("latency_ms total")
    if latency is not None:
        cards.append(f'<div class="card"><b>{latency.p50:.0f} ms</b>median latency '
                     f'<span class="muted small">(p95 {latency.p95:.0f})</span></div>')
    return f'<div class="cards">{"".join(cards)}</div>'


def _metrics_tables(metrics: Metrics, stages: Sequence[str] | None = None) -> str:
    layers: dict[str, list[list[str]]] = {}
    for name, agg in metrics.overall.metrics.items():
        d = metric(name)
        if stages is not None and d.layer == "evidence" and d.stage not in stages:
            continue  # a stage the system does not have
        row = [f"<code>{_e(name)}</code>", _e(d.description), _num(agg.value, name), str(agg.n)]
        if d.kind == "latency":
            row[2] = f"{agg.p50:.1f} / {agg.p95:.1f}"
        elif d.kind == "amount":
            row[2] = f"{agg.value:g} (total {agg.total:g})"
        layers.setdefault(d.layer, []).append(row)
    out = []
    for layer, rows in layers.items():
        value = "p50 / p95 ms" if layer == "latency" else "mean per query" if layer == "cost" else "value"
        out.append(f"<h3>{_e(layer)}</h3>" + _table(["metric", "what", value, "n"], rows, (2, 3)))
    return "".join(out)


_TAG_COLUMNS = ("success", "supported", "complete@retrieval", "complete@context", "wrong_abstention",
                "hallucination", "leak", "stale")


# short column heads, so the per-tag table fits a 1280 px window (the full name is the head's title)
_TAG_HEADS = {"success": "success", "supported": "supported", "complete@retrieval": "complete at retrieval",
              "complete@context": "complete at context", "wrong_abstention": "wrong abstentions",
              "hallucination": "halluci&shy;nations", "leak": "leaks", "stale": "stale"}


def _tags_table(metrics: Metrics) -> str:
    rows = []
    for tag, block in metrics.tags.items():
        row = [_e(tag), str(block.queries)]
        for name in _TAG_COLUMNS:
            agg = block.metrics.get(name)
            if agg is None or agg.n == 0:
                row.append("–")
            elif metric(name).layer == "abstention":
                row.append(str(int(round(agg.total))))
            else:
                row.append(f"{agg.value:.2f}<br><span class='muted small'>{int(round(agg.total))}/{agg.n}</span>")
        latency = block.metrics.get("latency_ms total")
        row.append(f"{latency.p50:.0f}" if latency is not None and latency.n else "–")
        failures = "<br>".join(f"{_e(k)} {v}" for k, v in block.first_failure.items())
        row.append(failures or "–")
        rows.append(row)
    heads = "".join(f'<th class="num" title="{_e(n)}">{_TAG_HEADS[n]}</th>' for n in _TAG_COLUMNS)
    head = f'<tr><th>tag</th><th class="num">queries</th>{heads}<th class="num">p50 ms</th><th>first failures</th></tr>'
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if 0 < i < len(row) - 1 else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table class="tags"><thead>{head}</thead><tbody>{body}</tbody></table>'


def _ablation(ablation: Any) -> str:
    out = ['<section id="ablation"><h2>Ablation</h2>']
    key = ("success", "supported", "complete@retrieval", "complete@rerank", "complete@context",
           "wrong_abstention", "hallucination", "faithfulness", "latency_ms total")
    for v in ablation.variants:
        out.append(f'<h3 class="variant">{_e(v.variant.name)} <span class="muted small">'
                   f'(<a href="{_e(v.variant.name)}/report.html">its report</a>) '
                   f'{_e(", ".join(v.variant.overrides))} — changes {_e(", ".join(s.value for s in v.variant.stages))}'
                   f'; reused from the baseline: {_e(", ".join(v.reused) or "nothing")}</span></h3>')
        out += [f'<p class="reading">{_e(r)}</p>' for r in v.readings]
        rows = []
        shown = [c for c in v.comparisons if c.metric in key or c.delta != 0]
        for c in shown:
            d = metric(c.metric)
            direction = "" if c.delta == 0 or d.better == 0 else \
                ("better" if (c.delta > 0) == (d.better > 0) else "worse")
            sig = ' <span class="sig">*</span>' if c.significant else ""
            rows.append([f"<code>{_e(c.metric)}</code>", _num(c.baseline, c.metric), _num(c.variant, c.metric),
                         f'<span class="{direction}">{c.delta:+.3f}</span>', f"{c.test.p:.3g}{sig}",
                         _e(c.test.test), _e(c.test.detail or (f"mean Δ 95% CI [{c.ci[0]:+.3f}, {c.ci[1]:+.3f}]"
                                                              if c.ci else ""))])
        out.append(_table(["metric", "baseline", "variant", "delta", "p", "test", ""], rows, (1, 2, 3, 4)))
        if v.changed:
            out.append(f"<p class='small'>{len(v.changed)} quer{'y' if len(v.changed) == 1 else 'ies'} "
                       "changed outcome:</p>" + _table(
                ["query", "baseline", "variant"],
                [[f'<a href="#q-{_e(q)}"><code>{_e(q)}</code></a>', _badge(a), _badge(b)] for q, a, b in v.changed]))
        else:
            out.append("<p class='small muted'>No query changed outcome.</p>")
    r = ablation.routing
    rows = []
    for route in r.routes:
        chosen = route.options[route.choice]
        rows.append([_e(route.key), f"<b>{_e(route.choice)}</b>", str(chosen.queries), f"{chosen.success:.2f}",
                     f"{chosen.latency_ms:.0f}", " · ".join(f"{_e(n)} {t.success:.2f} / {t.latency_ms:.0f} ms"
                                                             for n, t in route.options.items())])
    best = r.fixed[r.best_fixed]
    out.append("<h3>Routing (by a query's first tag)</h3>")
    out.append(_table(["route", "choice", "queries", "success", "mean ms", "options (success / mean ms)"],
                      rows, (2, 3, 4)))
    out.append(f'<p>Routed: success {r.routed.success:.2f}, mean latency {r.routed.latency_ms:.0f} ms, cost '
               f'{r.routed.cost:g}. Best single configuration everywhere: <b>{_e(r.best_fixed)}</b> (success '
               f'{best.success:.2f}, {best.latency_ms:.0f} ms). Routing saves {r.latency_saved_ms:.0f} ms per '
               f'query and {r.cost_saved:g} in cost. <span class="muted">Chosen and measured on the same queries: '
               'confirm on a held-out query set.</span></p>')
    out.append("</section>")
    return "".join(out)


# ---- drill-down ----

def _snippet(text: str, limit: int = 180) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _marks(text: str, evidence: QueryEvidence, unit: ItemView) -> list[tuple[int, int, int]]:
    """(start, end, group) ranges of the required evidence inside a context unit's text."""
    out = []
    for alt in evidence.alternatives:
        a = alt.alternative
        found = None
        if a.quote:
            pattern = r"\s+".join(re.escape(w) for w in a.quote.split())
            match = re.search(pattern, text)
            if match:
                found = (match.start(), match.end())
        elif alt.span is not None and unit.span is not None and alt.span.overlaps(unit.span) \
                and len(text) == unit.span.end - unit.span.start:
            found = (max(alt.span.start, unit.span.start) - unit.span.start,
                     min(alt.span.end, unit.span.end) - unit.span.start)
        if found:
            out.append((*found, alt.group))
    return sorted(out)


def _highlight(text: str, marks: list[tuple[int, int, int]]) -> str:
    out, at = [], 0
    for start, end, group in marks:
        if start < at:
            continue
        out.append(_e(text[at:start]))
        colour = _GROUP_COLOURS[group % len(_GROUP_COLOURS)]
        out.append(f'<mark class="required" data-group="{group}" style="background:{colour}">'
                   f'{_e(text[start:end])}</mark>')
        at = end
    out.append(_e(text[at:]))
    return "".join(out)


def _groups_of(item: ItemView, evidence: QueryEvidence) -> tuple[set[int], set[int]]:
    whole = {a.group for a in evidence.alternatives if holds(a, [item])}
    part = {a.group for a in evidence.alternatives if touching(a, [item])} - whole
    return whole, part


def _stage_list(stage: StageView, evidence: QueryEvidence, snippets: dict[str, str], loss_notes: list[str]) -> str:
    rows, hidden = [], 0
    for n, item in enumerate(stage.items):
        whole, part = _groups_of(item, evidence)
        if n >= SHOWN and not whole and not part:
            hidden += 1
            continue
        tags = "".join(_group_tag(g) for g in sorted(whole)) + "".join(_group_tag(g, False) for g in sorted(part))
        text = (snippets.get(item.id) if item.readable else None) or item.text or ""
        rows.append((' class="ev"' if whole or part else "", [
            str(item.rank if item.rank is not None else n + 1), f"<code>{_e(item.id)}</code>", _e(item.doc),
            "–" if item.score is None else f"{item.score:.4g}", tags, _e(_snippet(text))]))
    dropped_rows = []
    for d in stage.dropped:
        whole, part = _groups_of(d.item, evidence)
        if whole or part:
            tags = "".join(_group_tag(g) for g in sorted(whole)) + "".join(_group_tag(g, False) for g in sorted(part))
            dropped_rows.append(("", [f"<code>{_e(d.item.id)}</code>", tags, _e(d.reason)]))
    head = "".join(f'<div class="loss first-loss">⚑ {_e(note)}</div>' for note in loss_notes)
    body = "<table><thead><tr><th class='num'>rank</th><th>id</th><th>doc</th><th class='num'>score</th>" \
           "<th>evidence</th><th>text</th></tr></thead><tbody>" + "".join(
               f"<tr{cls}>" + "".join(f'<td class="num">{c}</td>' if i in (0, 3) else f"<td>{c}</td>"
                                      for i, c in enumerate(cells)) + "</tr>" for cls, cells in rows) + "</tbody></table>"
    more = f'<p class="muted small">{hidden} more items without required evidence not shown.</p>' if hidden else ""
    drops = ""
    if dropped_rows:
        drops = "<p class='small'>Dropped here, holding required evidence:</p>" + _table(
            ["id", "evidence", "reason"], [cells for _, cells in dropped_rows])
    timing = f' <span class="muted small">{stage.seconds * 1000:.1f} ms</span>' if stage.seconds is not None else ""
    return (f'<div class="stage" data-stage="{_e(stage.name)}">{_e(stage.name)} '
            f'<span class="muted small">({_e(stage.kind.value)}, {len(stage.items)} kept)</span>{timing}</div>'
            f"{head}{body}{more}{drops}")


def _evidence_list(query: Query, evidence: QueryEvidence) -> str:
    if not evidence.alternatives:
        return f'<p class="muted">No required evidence{" (the question is not answerable)" if not query.answerable else ""}.</p>'
    rows = []
    for alt in evidence.alternatives:
        rows.append([_group_tag(alt.group), _e(alt.alternative.describe()), _e(alt.status),
                     _e(alt.coverage.status if alt.coverage is not None else "–"), _e(alt.note)])
    return _table(["group", "alternative", "status", "chunk coverage", "note"], rows)


def _drilldown(query: Query, diagnosis: Diagnosis, view: TraceView | None, evidence: QueryEvidence,
               snippets: dict[str, str]) -> str:
    good = "1" if diagnosis.outcome in _GOOD else "0"
    parts = [f'<details class="q" data-outcome="{_e(diagnosis.outcome)}" data-good="{good}" id="q-{_e(query.id)}">'
             f"<summary>{_badge(diagnosis.outcome)} <code>{_e(query.id)}</code> "
             f'{_e(query.question)} <span class="muted small">first failure: '
             f"{_e(diagnosis.first_failure or '–')}</span></summary>"]
    parts.append(f"<p><b>Principal</b> {_e(query.principal.user)} ({_e(', '.join(query.principal.groups))}) · "
                 f"<b>tags</b> {_e(', '.join(query.tags) or '–')} · <b>answerable</b> {query.answerable}"
                 + (f" · <b>reference answer</b> {_e(query.answer)}" if query.answer else "") + "</p>")
    parts.append(f'<p class="hypothesis"><b>Hypothesis</b> {_e(diagnosis.hypothesis)}</p>')
    parts.append("<h3>Required evidence</h3>" + _evidence_list(query, evidence))
    if diagnosis.lost:
        parts.append("<h3>Losses</h3>" + _table(["group", "stage", "reason"], [
            [_group_tag(l.group), _e(l.stage), _e(l.reason)] for l in diagnosis.lost]))
    if diagnosis.notes:
        parts.append("".join(f'<p class="muted small">{_e(n)}</p>' for n in diagnosis.notes))
    if view is None:
        parts.append('<p class="muted">No trace.</p></details>')
        return "".join(parts)
    if view.cached:
        parts.append(f'<p class="muted small">From the result cache: {_e(", ".join(view.cached))} '
                     "(computed by an earlier run; 0 ms in this one).</p>")
    first = diagnosis.first_failure
    marked = False
    retrieval_seen = False
    for stage in view.stages:
        notes = []
        is_first = not marked and first is not None and stage.kind is first
        if is_first and not (stage.kind is StageKind.RETRIEVAL and retrieval_seen):
            notes = [f"first loss — group {l.group}: {l.reason}" for l in diagnosis.lost if l.stage == first] \
                or [f"first failure at {first}"]
            marked = True
        retrieval_seen = retrieval_seen or stage.kind is StageKind.RETRIEVAL
        if stage.kind is StageKind.CONTEXT:
            parts.append(_context(stage, evidence, notes))
        elif stage.kind is StageKind.REWRITE:
            parts.append(_rewrite(stage) + _stage_list(replace(stage, name=f"{stage.name}: the original question's "
                                                               "retrieval"), evidence, snippets, notes))
        else:
            parts.append(_stage_list(stage, evidence, snippets, notes))
    if first is not None and not marked:
        notes = [f"first loss — group {l.group}: {l.reason}" for l in diagnosis.lost if l.stage == first]
        parts.append(f'<div class="loss first-loss">⚑ first failure at {_e(first)}'
                     + "".join(f"<br>{_e(n)}" for n in notes) + "</div>")
    parts.append(_answer(view, diagnosis))
    parts.append("</details>")
    return "".join(parts)


def _rewrite(stage: StageView) -> str:
    """What the rewrite stage did: the route, each text searched (with what its rewrite dropped),
    the evidence slots and every hop."""
    c = stage.config
    out = [f'<div class="stage" data-stage="{_e(stage.name)}">{_e(stage.name)} <span class="muted small">'
           f"(rewrite, route {_e(c.get('route', '–'))}"
           + (f"; stopped: {_e(c['stopped'])}" if c.get("stopped") else "") + ")</span></div>"]
    rewrites = c.get("rewrites", [])
    out.append(_table(["kind", "searched with", "flags"], [["original", _e(c.get("original", "")), ""]] + [
        [_e(r["kind"]), _e(_snippet(r["text"])), _e("; ".join(r["diff"]["flags"]))] for r in rewrites]))
    if c.get("slots"):
        out.append("<p class='small'>Evidence slots:</p>" + _table(["slot", "state", "source", "fact"], [
            [_e(s["name"]), _e(s["state"]), _e(s["doc"] or "–"), _e(_snippet(s["value"] or s["note"]))]
            for s in c["slots"]]))
    if c.get("hops"):
        out.append("<p class='small'>Hops:</p>" + _table(["hop", "slot", "query", "rejected", "outcome"], [
            [str(h["hop"]), _e(h["slot"]), _e(_snippet(h["query"])), _e("; ".join(h["rejected"][:3]) or "–"),
             _e(h["reason"])] for h in c["hops"]]))
    return "".join(out)


def _context(stage: StageView, evidence: QueryEvidence, notes: list[str]) -> str:
    tokens, budget = stage.config.get("tokens"), stage.config.get("budget_tokens")
    size = f", {_e(tokens)} of {_e(budget)} tokens" if tokens is not None and budget is not None else \
        f", {_e(tokens)} tokens" if tokens is not None else ""
    out = [f'<div class="stage" data-stage="{_e(stage.name)}">{_e(stage.name)} <span class="muted small">'
           f'(context, {len(stage.items)} units{size})</span></div>']
    out += [f'<div class="loss first-loss">⚑ {_e(n)}</div>' for n in notes]
    for unit in stage.items:
        whole, part = _groups_of(unit, evidence)
        tags = "".join(_group_tag(g) for g in sorted(whole)) + "".join(_group_tag(g, False) for g in sorted(part))
        text = unit.text or ""
        flags = []
        if not unit.readable:
            flags.append("NOT READABLE by the principal")
        if not unit.current:
            flags.append("not the current version")
        flags += [f"{flag}: never quoted as an answer" for flag in unit.flags]
        out.append(f'<div class="unit"><b>[{_e(unit.id)}]</b> <code>{_e(unit.doc)}</code> {tags} '
                   f'<span class="worse">{_e("; ".join(flags))}</span>\n{_highlight(text, _marks(text, evidence, unit))}</div>')
    dropped = [d for d in stage.dropped if any(_groups_of(d.item, evidence))]
    if dropped:
        out.append("<p class='small'>Not placed in the context, holding required evidence:</p>" + _table(
            ["id", "reason"], [[f"<code>{_e(d.item.id)}</code>", _e(d.reason)] for d in dropped]))
    return "".join(out)


def _answer(view: TraceView, diagnosis: Diagnosis | None = None) -> str:
    """The answer and its claims' verdicts: the diagnosis's when it judged them (an imported answer
    ragdx checked itself, an unsupported one), else the trace's own."""
    a = view.answer
    if a is None:
        return '<p class="muted">No answer recorded.</p>'
    out = [f'<div class="stage">answer{" (abstained)" if a.abstained else ""}</div>'
           f'<div class="unit answer">{_e(a.text)}</div>']
    claims = diagnosis.claims if diagnosis is not None and diagnosis.claims else a.claims
    if claims:
        out.append(_table(["claim", "cites", "verdict", "why"], [
            [_e(c.text), _e(", ".join(c.citations)),
             "–" if c.supported is None else ('<span class="better">supported</span>' if c.supported
                                              else '<span class="worse">unsupported</span>'), _e(c.reason)]
            for c in claims]))
    return "".join(out)


def _snippets(store: Any, views: Sequence[TraceView | None]) -> dict[str, str]:
    if store is None:
        return {}
    ids = sorted({i.id for v in views if v is not None for s in v.stages if s.kind is not StageKind.CONTEXT
                  for i in list(s.items[:SHOWN]) + [d.item for d in s.dropped] if i.readable})
    out = {}
    for start in range(0, len(ids), 500):
        for cid, chunk in store.chunks_by_id(ids[start:start + 500]).items():
            out[cid] = chunk.text[:400]
    return out


def _facts(info: dict, queries: int, views: Sequence[TraceView | None] = ()) -> str:
    """The run's facts under the title, each only when the run has it."""
    facts = [f"{queries} queries", f"ragdx {_e(info.get('ragdx_version'))}"]
    served = sum(1 for v in views if v is not None and v.cached)
    if served:  # their latency is this run's look-up, not the run that computed the entry
        facts.append(f"<strong>{served} of {len(views)} served in part or whole by the result cache</strong> "
                     "(a served stage's latency is 0 ms here)")
    if info.get("traces"):
        facts.append(f"traces <code>{_e(info['traces'])}</code>")
    if info.get("index_version") is not None:
        facts.append(f"index version {_e(info['index_version'])}")
    if info.get("store"):
        facts.append(f"store <code>{_e(info['store'])}</code>")
    if info.get("created_at"):
        facts.append(_e(info["created_at"]))
    if info.get("seed") is not None:
        facts.append(f"seed {_e(info['seed'])}")
    durable = info.get("durable") or {}
    if durable.get("failed"):
        facts.append(f"<strong>{len(durable['failed'])} not published: evidence_changed_or_expired</strong>")
    if durable.get("index_version_changed"):
        facts.append(f"<strong>{_e(durable['note'])}</strong>")
    return " · ".join(facts)


def render_report(info: dict, queries: Sequence[Query], diagnoses: Sequence[Diagnosis],
                  views: Sequence[TraceView | None], evidence: Sequence[QueryEvidence], metrics: Metrics,
                  store: Any = None, ablation: Any = None) -> str:
    """The whole page as one string.

    Args:
        info: the run's manifest (settings, versions, index version).
        queries, diagnoses, views, evidence: per query, in the same order.
        metrics: the layered metrics of the run (the baseline's, for an ablation).
        store: the store, to show chunk texts in ranked lists (optional).
        ablation: an ablation's result, to add its section.
    """
    snippets = _snippets(store, views)
    system = info.get("system")
    title = "ragdx ablation report" if ablation is not None else \
        f"{system}: ragdx diagnosis of imported traces" if system else "ragdx run report"
    o = metrics.overall
    failures = _table(["first failure", "queries"], [[_e(k), str(v)] for k, v in o.first_failure.items()], (1,)) \
        if o.first_failure else '<p class="muted">No failures.</p>'
    options = "".join(f'<option value="{_e(k)}">{_e(k)} ({v})</option>' for k, v in o.outcomes.items())
    settings = json.dumps(info.get("settings", {}), indent=2)
    drill = "".join(_drilldown(q, d, v, e, snippets) for q, d, v, e in zip(queries, diagnoses, views, evidence))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body><main>
<h1>{_e(title)}</h1>
<p class="muted">{_facts(info, o.queries, views)}</p>
{_cards(metrics)}
<section id="funnel-section"><h2>Evidence survival</h2>
<p class="muted small">The share of answerable queries whose every required evidence group is present at each stage.
A stage a pipeline does not have loses nothing.</p>{funnel_svg(metrics, info.get("stage_kinds"))}</section>
<section id="outcomes-section"><h2>Outcomes</h2>{outcomes_svg(o.outcomes)}{failures}</section>
{_ablation(ablation) if ablation is not None else ""}
<section id="tags"><h2>Per tag</h2>{_tags_table(metrics)}</section>
<section id="metrics"><h2>Layered metrics</h2>{_metrics_tables(metrics, info.get("stage_kinds"))}</section>
<section id="drilldown"><h2>Queries{" (baseline)" if ablation is not None else ""}</h2>
<div class="toolbar"><label>Show <select id="outcome-filter"><option value="">all outcomes</option>
<option value="failed">failures only</option>{options}</select></label>
<button id="expand-all" type="button">Expand all</button><span id="shown-count" class="muted small"></span></div>
{drill}</section>
{"" if system else f'<details><summary class="muted">Settings</summary><pre>{_e(settings)}</pre></details>'}
</main><script>{_SCRIPT}</script></body></html>
"""
