"""A structure-keeping Markdown parser (CommonMark's block structure, GFM pipe tables).

The parsed text keeps the words a reader sees: heading text without ``#``, paragraphs without
inline markup (emphasis, code ticks, link targets), list items with their markers, tables as
``cell | cell`` rows under their header, and fenced or indented code verbatim. Front matter
and HTML comments are dropped.
"""

from __future__ import annotations

import re

from ragdx.ingest._builder import TextBuilder, collapse
from ragdx.types import ParsedDocument

PARSER = "markdown/1"

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_RULE = re.compile(r"^ {0,3}([-*_])([ \t]*\1){2,}[ \t]*$")
_ITEM = re.compile(r"^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)(.*)$")
_TABLE_SEP = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}> ?")

_INLINE = [
    (re.compile(r"<!--.*?-->", re.S), ""),
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),               # image -> alt text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),                # link -> its text
    (re.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),               # reference link
    (re.compile(r"<((?:https?|mailto):[^>\s]+)>"), r"\1"),         # autolink
    (re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>"), ""),  # inline HTML tags
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),          # strong
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),  # emphasis *x*
    (re.compile(r"(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?![\w_])"), r"\1"),    # emphasis _x_
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"), r"\1"),                # strikethrough
]
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def inline(text: str) -> str:
    """Strip inline Markdown markup, keeping the words; code spans are kept verbatim."""
    spans: list[str] = []  # verbatim pieces, put back after the markup is stripped

    def keep(match: re.Match[str]) -> str:
        spans.append(match.group(2).strip() or match.group(2))
        return f"\x00{len(spans) - 1}\x00"

    def escaped(match: re.Match[str]) -> str:
        spans.append(match.group(1))
        return f"\x00{len(spans) - 1}\x00"

    text = _CODE_SPAN.sub(keep, text)
    text = _ESCAPE.sub(escaped, text)  # an escaped character is literal: no markup applies
    for pattern, repl in _INLINE:
        text = pattern.sub(repl, text)
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], text)


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [inline(c.strip().replace("\\|", "|")) for c in re.split(r"(?<!\\)\|", line)]


def parse_markdown(source: str) -> ParsedDocument:
    """Parse Markdown into parsed text and blocks.

    Args:
        source: the document's text.

    Returns:
        The parsed document; its title is the front matter's ``title`` or the first heading.
    """
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out = TextBuilder()
    title = ""
    i = 0
    if lines and lines[0].strip() == "---":  # YAML front matter
        end = next((j for j in range(1, len(lines)) if lines[j].strip() in ("---", "...")), None)
        if end is not None:
            for meta in lines[1:end]:
                if meta.startswith("title:"):
                    title = meta.split(":", 1)[1].strip().strip("\"'")
            i = end + 1
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.paragraph(inline(collapse(" ".join(paragraph))))
            paragraph.clear()

    while i < len(lines):
        line = lines[i]
        if not line.strip():
            flush()
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence and not (fence.group(2)[0] == "`" and "`" in fence.group(3)):
            flush()
            marker, body = fence.group(2), []
            i += 1
            while i < len(lines) and not (lines[i].strip().startswith(marker[0] * len(marker))
                                          and not lines[i].strip().strip(marker[0])):
                body.append(lines[i])
                i += 1
            out.code("\n".join(body))
            i += 1
            continue
        if line.startswith(("    ", "\t")) and not paragraph:  # indented code
            body = []
            while i < len(lines) and (lines[i].startswith(("    ", "\t")) or not lines[i].strip()):
                body.append(lines[i][4:] if lines[i].startswith("    ") else lines[i][1:])
                i += 1
            out.code("\n".join(body))
            continue
        atx = _ATX.match(line)
        if atx:
            flush()
            out.heading(inline(atx.group(2) or ""), len(atx.group(1)))
            i += 1
            continue
        if paragraph and _SETEXT.match(line) and len(paragraph) >= 1:
            level = 1 if line.strip().startswith("=") else 2
            text = " ".join(paragraph)
            paragraph.clear()
            out.heading(inline(text), level)
            i += 1
            continue
        if _RULE.match(line):
            flush()
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]) \
                and "-" in lines[i + 1]:
            flush()
            rows = [_cells(line)]
            i += 2
            while i < len(lines) and lines[i].strip() and "|" in lines[i]:
                rows.append(_cells(lines[i]))
                i += 1
            out.table(rows, header=True)
            continue
        item = _ITEM.match(line)
        if item and (not paragraph or item.group(4).strip()):
            flush()
            items: list[str] = []
            top = len(item.group(1))  # items indented further are nested
            while i < len(lines):
                cur = lines[i]
                expanded = cur.expandtabs(4)
                indent = len(expanded) - len(expanded.lstrip(" "))
                m = _ITEM.match(expanded.lstrip(" "))
                if m and indent <= top:
                    items.append(f"{m.group(2)} {m.group(4).strip()}")
                elif m:  # nested item: keep its marker, indented
                    items.append(f"  {m.group(2)} {m.group(4).strip()}")
                elif cur.strip() and (cur.startswith((" ", "\t")) or items and not _starts_block(cur)):
                    items[-1] = f"{items[-1]} {cur.strip()}"
                elif not cur.strip() and i + 1 < len(lines) and (
                        _ITEM.match(lines[i + 1]) or lines[i + 1].startswith(("  ", "\t"))):
                    pass  # a loose list: the blank line separates items, not blocks
                else:
                    break
                i += 1
            out.items([inline(collapse(it)) if not it.startswith("  ") else "  " + inline(collapse(it))
                       for it in items])
            continue
        if _QUOTE.match(line):
            flush()
            body = []
            while i < len(lines) and lines[i].strip() and _QUOTE.match(lines[i]):
                body.append(_QUOTE.sub("", lines[i]))
                i += 1
            out.paragraph(inline(collapse(" ".join(body))))
            continue
        paragraph.append(line)
        i += 1
    flush()
    return out.build(title=title, format="markdown", parser=PARSER)


def _starts_block(line: str) -> bool:
    return bool(_ATX.match(line) or _FENCE.match(line) or _RULE.match(line) or _QUOTE.match(line)
                or "|" in line)
