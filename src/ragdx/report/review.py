"""The review page of ``ragdx label --review`` and the decisions it downloads.

One self-contained page (the report's styles, no network): each question with its proposed
groups, each alternative shown in the words around it in its page, with *accept*, *reject* and,
where the labeller kept other places, *choose another*. The page's "Download decisions" button
saves ``decisions.json``::

    {"format": "ragdx-label-decisions", "queries": "proposed.jsonl",
     "decisions": {"q1": {"0": {"status": "accept"}, "1": {"status": "choose", "candidate": 2}}}}

``status`` is ``accept`` (the group as proposed), ``reject`` (the group dropped) or ``choose``
(the group replaced by candidate ``candidate`` of its ``metadata.label.candidates``). A group
with no decision is kept. Each alternative of a group has its own *drop this place*: the group's
decision then lists them, ``{"status": "accept", "drop": [1]}`` keeps the group without its
second alternative (a group whose every alternative is dropped is rejected). The groups the labeller left out for scoring low beside a strong one
(``metadata.label.weak_groups``) are shown too, with their scores, under the keys ``w0``, ``w1``,
...: accepting one brings it back (it is added after the kept groups, in its order); one with no
decision, or rejected, stays out. ``ragdx label --apply`` writes the final query set from the proposed
one and the decisions: a question left with no group is ``answerable: false``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ragdx._jsonl import iter_jsonl, loads, read_text
from ragdx.errors import InputError
from ragdx.protocols import Store
from ragdx.queryset import parse_query
from ragdx.report.html import _CSS, _e
from ragdx.runfolder import write_lines

__all__ = ["write_review", "apply_decisions", "DECISIONS_FORMAT"]

DECISIONS_FORMAT = "ragdx-label-decisions"
_AROUND = 160  # characters of the page shown either side of an alternative

_SCRIPT = """
const decisions = {};
document.querySelectorAll('button[data-act]').forEach(b => b.addEventListener('click', () => {
  const q = b.dataset.q, g = b.dataset.g, act = b.dataset.act;
  decisions[q] = decisions[q] || {};
  if (act === 'drop') {  // one place of the group, not the group: toggled
    const d = decisions[q][g] = decisions[q][g] || {status: 'accept'};
    const a = Number(b.dataset.a), drop = d.drop = d.drop || [], at = drop.indexOf(a);
    if (at < 0) drop.push(a); else drop.splice(at, 1);
    if (!drop.length) delete d.drop;
    b.closest('.alt').classList.toggle('dropped', at < 0);
    b.textContent = at < 0 ? 'keep this place' : 'drop this place';
    return;
  }
  const drop = act === 'accept' && decisions[q][g] ? decisions[q][g].drop : undefined;
  decisions[q][g] = act === 'choose' ? {status: 'choose', candidate: Number(b.dataset.c)} : {status: act};
  if (drop) decisions[q][g].drop = drop;
  const box = document.getElementById(`g-${q}-${g}`);
  box.dataset.status = act;
  box.querySelector('.status').textContent = act === 'choose' ? `chose candidate ${b.dataset.c}` : act + 'ed';
}));
document.getElementById('download').addEventListener('click', () => {
  const body = JSON.stringify({format: FORMAT, queries: QUERIES, decisions: decisions}, null, 2);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([body], {type: 'application/json'}));
  a.download = 'decisions.json';
  document.body.appendChild(a); a.click(); a.remove();
});
"""
_EXTRA_CSS = """
.grp{border:1px solid #ccd;border-radius:6px;margin:.5em 0;padding:.5em}
.grp[data-status=reject]{opacity:.5;border-color:#c33}.grp[data-status=accept]{border-color:#3a3}
.grp[data-status=choose]{border-color:#37c}.alt{margin:.3em 0}.alt mark{background:#ffe58a}
.alt.dropped{opacity:.45;text-decoration:line-through}.ctx{color:#555;font-size:.9em;white-space:pre-wrap}.grp.weak{border-style:dashed;background:#fafafa}.review{color:#b60;font-weight:bold}
"""


def _in_context(store: Store, alt: dict[str, Any]) -> str:
    """An alternative's words marked inside the text around them in its page."""
    from ragdx.ingest.quotes import find_quote
    text = store.texts(alt["doc"], alt["version"])[1] if store.version(alt["doc"], alt["version"]) else ""
    hits = find_quote(text, alt["quote"]) if text else []
    if not hits:
        return f"<span class=ctx><mark>{_e(alt['quote'])}</mark></span>"
    start, end = hits[0]
    before, after = max(0, start - _AROUND), min(len(text), end + _AROUND)
    if before > 0:  # the snippet starts and ends at a word's edge, not inside one ("nds", "d whether ...")
        cut = re.search(r"\s", text[before:start])
        before = before + cut.end() if cut else start
    if after < len(text):
        cut = [m.start() for m in re.finditer(r"\s", text[end:after])]
        after = end + cut[-1] if cut else end
    return (f"<span class=ctx>{'… ' if before > 0 else ''}{_e(text[before:start])}<mark>{_e(text[start:end])}</mark>"
            f"{_e(text[end:after])}{' …' if after < len(text) else ''}</span>")


def _alt(store: Store, alt: dict[str, Any], drop: str = "") -> str:
    """An alternative in its page's words; ``drop``: its *drop this place* button."""
    return f"<div class=alt><b>{_e(alt['doc'])}</b> @ {_e(alt['version'])} {drop}<br>{_in_context(store, alt)}</div>"


def _drop(qid: str, g: int, a: int) -> str:
    return f"<button data-q='{_e(qid)}' data-g='{g}' data-a='{a}' data-act='drop'>drop this place</button>"


def _buttons(qid: str, g: str) -> str:
    return "".join(f"<button data-q='{_e(qid)}' data-g='{g}' data-act='{act}'>{act}</button> "
                   for act in ("accept", "reject"))


def write_review(store: Store, queries: Path, out: Path) -> int:
    """Write the review page of a proposed query set; returns how many questions it shows."""
    parts = []
    lines = list(iter_jsonl(queries, what="query set"))
    for _, line in lines:
        label = (line.get("metadata") or {}).get("label") or {}
        qid = line["id"]
        review = " <span class=review>needs review</span>" if label.get("needs_review") else ""
        body = [f"<section class=q id='q-{_e(qid)}'><h3>{_e(qid)}: {_e(line['question'])}{review}</h3>",
                f"<p><b>Reference answer:</b> {_e(line.get('answer', ''))}</p>"]
        candidates = label.get("candidates") or []
        for g, group in enumerate(label.get("groups") or []):
            buttons = _buttons(qid, str(g))
            others = candidates[g] if g < len(candidates) else []
            choose = "".join(f"<div class=alt>{_alt(store, c)}<button data-q='{_e(qid)}' data-g='{g}' "
                             f"data-act='choose' data-c='{c_n}'>choose this instead</button></div>"
                             for c_n, c in enumerate(others))
            body.append(
                f"<div class=grp id='g-{_e(qid)}-{g}' data-status=''><p>Group {g + 1} (score {group['score']:.2f}"
                f"{', needs review' if group.get('needs_review') else ''}): claims "
                f"{_e(' / '.join(group['claims']))}<br><small>{_e(group['reason'])}</small></p>"
                + "".join(_alt(store, a, _drop(qid, g, a_n) if len(group["alternatives"]) > 1 else "")
                          for a_n, a in enumerate(group["alternatives"]))
                + f"<p>{buttons}<span class=status></span></p>"
                + (f"<details><summary>choose another ({len(others)})</summary>{choose}</details>" if others else "")
                + "</div>")
        for w, group in enumerate(label.get("weak_groups") or []):
            body.append(
                f"<div class='grp weak' id='g-{_e(qid)}-w{w}' data-status=''><p>Left out, weak group {w + 1} (score "
                f"{group['score']:.2f}, below another group's): claims {_e(' / '.join(group['claims']))}<br>"
                f"<small>{_e(group['reason'])}</small></p>" + "".join(_alt(store, a) for a in group["alternatives"])
                + f"<p>{_buttons(qid, f'w{w}')}<span class=status></span></p></div>")
        for u in label.get("unsupported_reference") or []:
            body.append(f"<p class=review>Unsupported reference claim: {_e(u['claim'])} <small>({_e(u['reason'])})"
                        "</small></p>")
        parts.append("".join(body) + "</section>")
    page = (f"<!doctype html><html><head><meta charset=utf-8><title>ragdx label review</title>"
            f"<style>{_CSS}{_EXTRA_CSS}</style></head><body><h1>Review the proposed evidence</h1>"
            f"<p>{len(lines)} questions from {_e(queries.name)}. Accept, reject or choose another place for each "
            f"group, then <button id=download>Download decisions</button> and run <code>ragdx label --apply "
            f"decisions.json --queries {_e(queries.name)} --out FINAL.jsonl</code>.</p>{''.join(parts)}"
            f"<script>const FORMAT = {json.dumps(DECISIONS_FORMAT)}; const QUERIES = "
            f"{json.dumps(queries.name)};{_SCRIPT}</script></body></html>")
    out.write_text(page, encoding="utf-8")
    return len(lines)


def apply_decisions(queries: Path, decisions_path: Path, out: Path) -> tuple[int, int, int]:
    """Write the final query set: each group accepted (or left undecided) kept less the places
    its decision drops, rejected dropped, or replaced by the candidate chosen. Returns the
    questions written, the groups rejected (those whose every place was dropped too), and the
    alternatives dropped (a rejected group's, those a chosen candidate replaced, those dropped one
    by one).

    Raises:
        InputError: a decisions file that is not one, or names a question, group or candidate the
            proposed set does not have (file and field named); nothing is written then.
    """
    where = str(decisions_path)
    found = loads(read_text(decisions_path, what="decisions"), file=where)
    if not isinstance(found, dict) or found.get("format") != DECISIONS_FORMAT:
        raise InputError(f"not a decisions file of the review page ('format' must be {DECISIONS_FORMAT!r})",
                         file=where, field="format")
    decisions = found.get("decisions")
    if not isinstance(decisions, dict):
        raise InputError("expected an object of question ids", file=where, field="decisions")
    lines = {line["id"]: line for _, line in iter_jsonl(queries, what="query set")}
    for qid in decisions:
        if qid not in lines:
            raise InputError(f"question {qid!r} is not in {queries}", file=where, field=f"decisions.{qid}")
    out_lines, rejected, dropped = [], 0, 0
    for qid, line in lines.items():
        label = (line.get("metadata") or {}).get("label") or {}
        candidates = label.get("candidates") or []
        mine = decisions.get(qid) or {}
        restricted = "restricted_required" in line
        groups = line["restricted_required" if restricted else "required"]
        weak = label.get("weak_groups") or []
        for g in mine:
            n = g[1:] if g.startswith("w") else g
            if not n.isdigit() or int(n) >= (len(weak) if g.startswith("w") else len(groups)):
                raise InputError(f"question {qid!r} has no {'weak ' if g.startswith('w') else ''}group {n}",
                                 file=where, field=f"decisions.{qid}.{g}")
        kept = []
        for g, group in enumerate(groups):
            d = mine.get(str(g)) or {"status": "accept"}
            status = d.get("status") if isinstance(d, dict) else None
            if status == "reject":
                rejected, dropped = rejected + 1, dropped + len(group)
                continue
            if status == "choose":
                c = d.get("candidate")
                options = candidates[g] if g < len(candidates) else []
                if not isinstance(c, int) or not 0 <= c < len(options):
                    raise InputError(f"question {qid!r} group {g} has no candidate {c!r}", file=where,
                                     field=f"decisions.{qid}.{g}.candidate")
                kept.append([options[c]])
                dropped += len(group)
            elif status == "accept":
                drop = d.get("drop", [])
                if not isinstance(drop, list) or not all(isinstance(a, int) and not isinstance(a, bool)
                                                         and 0 <= a < len(group) for a in drop):
                    raise InputError(f"question {qid!r} group {g}: 'drop' must list alternatives 0 to "
                                     f"{len(group) - 1}, not {json.dumps(drop)}", file=where,
                                     field=f"decisions.{qid}.{g}.drop")
                left = [a for n, a in enumerate(group) if n not in set(drop)]
                dropped += len(group) - len(left)
                if left:
                    kept.append(left)
                else:
                    rejected += 1
            else:
                raise InputError(f"status must be 'accept', 'reject' or 'choose', not {status!r}", file=where,
                                 field=f"decisions.{qid}.{g}.status")
        for w, group in enumerate(weak):  # a weak group comes back only when accepted
            d = mine.get(f"w{w}")
            status = d.get("status") if isinstance(d, dict) else None
            if d is not None and status not in ("accept", "reject"):
                raise InputError(f"status of a weak group must be 'accept' or 'reject', not {status!r}", file=where,
                                 field=f"decisions.{qid}.w{w}.status")
            if status == "accept":
                kept.append([{k: a[k] for k in ("doc", "version", "quote")} for a in group["alternatives"]])
        final = {k: v for k, v in line.items() if k not in ("required", "restricted_required")}
        final["required" if not restricted else "restricted_required"] = kept
        if restricted:
            final["required"] = []
        final["answerable"] = bool(kept) and not restricted
        final.setdefault("metadata", {})["review"] = {"decisions": mine, "file": decisions_path.name}
        parse_query(final, str(out), len(out_lines) + 1)  # the final set validates as a query set
        out_lines.append(final)
    write_lines(out, out_lines)
    return len(out_lines), rejected, dropped
