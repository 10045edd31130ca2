"""An HTML parser that keeps the page's content and drops its chrome.

Dropped: ``script``, ``style``, ``nav``, forms, the page-level ``header`` and ``footer`` (kept
when inside ``main``/``article``/``section``), anything with an ARIA landmark role for
navigation, banner, search or content info, and the navigation blocks of common generators
(Sphinx's ``related`` bars, sidebar, heading permalinks, tables of contents and generated indexes;
DocBook's ``navheader``/``navfooter`` bars, tables of contents and back-of-book index entries: a
page's list of links to other pages is not its content, and in a manual built by DocBook they were
a fifth of the chunks). Kept: the heading hierarchy, paragraphs,
lists, tables (header rows from ``th``/``thead``) and ``pre`` code verbatim. Standard library only.
"""

from __future__ import annotations

from html.parser import HTMLParser

from ragdx.ingest._builder import TextBuilder, collapse
from ragdx.types import ParsedDocument

PARSER = "html/3"

_DROP_TAGS = {"script", "style", "nav", "noscript", "template", "svg", "form", "button", "iframe",
              "select", "textarea", "canvas", "object", "head"}
_CHROME_TAGS = {"header", "footer", "aside"}
_CONTENT_TAGS = {"main", "article", "section"}
_DROP_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
_DROP_CLASSES = {"sphinxsidebar", "related", "footer", "headerlink", "navigation", "navbar",
                 "breadcrumb", "breadcrumbs", "skip-link", "sidebar", "mobile-nav", "cookie-banner",
                 "nav-menu", "menu",
                 # tables of contents and generated indexes: Sphinx, DocBook
                 "toctree-wrapper", "genindextable", "modindextable", "navheader", "navfooter", "toc",
                 "indexdiv"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
         "source", "track", "wbr"}
_BLOCKS = {"p", "div", "dt", "dd", "blockquote", "figure", "figcaption", "caption", "address",
           "details", "summary", "center", "dl", "body", "html", "hr"} | _CONTENT_TAGS
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


class _Handler(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = TextBuilder()
        self.title = ""
        self._in_title = False
        self._stack: list[str] = []          # open non-void tags
        self._skip: tuple[str, int] | None = None  # (tag, depth) of the dropped element
        self._text: list[str] = []           # inline text of the current block
        self._pre: list[str] | None = None
        self._pre_depth = 0
        self._heading: int | None = None
        self._lists: list[list[str]] = []    # one item list per open ul/ol
        self._ordered: list[int] = []
        self._dl_depth = 0
        self._rows: list[list[str]] | None = None
        self._header_rows = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._cell_is_header = False
        self._row_all_header = True
        self._in_thead = False

    # -- dropping ---------------------------------------------------------------------------
    def _dropped(self, tag: str, attrs: dict[str, str | None]) -> bool:
        if tag in _DROP_TAGS:
            return True
        if tag in _CHROME_TAGS and not any(t in _CONTENT_TAGS for t in self._stack):
            return True
        if (attrs.get("role") or "") in _DROP_ROLES:
            return True
        classes = set((attrs.get("class") or "").split())
        return bool(classes & _DROP_CLASSES)

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self.title and (self._skip is None or self._skip[0] == "head"):
            self._in_title = True
            return
        if self._skip is not None:
            if tag == self._skip[0] and tag not in _VOID:
                self._skip = (tag, self._skip[1] + 1)
            return
        attrs = dict(attrs_list)
        if self._dropped(tag, attrs):
            if tag not in _VOID:
                self._skip = (tag, 1)
            return
        if tag not in _VOID:
            self._stack.append(tag)
        if self._pre is not None:
            if tag == "pre":
                self._pre_depth += 1
            return
        if self._cell is not None and tag in ("ul", "ol", "li", "br", "p", "div"):
            if "".join(self._cell).strip():  # structure inside a cell: keep the pieces apart
                self._cell.append("; " if tag == "li" else " ")
            return
        if tag == "pre":
            self._break_list()
            self._flush()
            self._pre, self._pre_depth = [], 1
        elif tag in _HEADINGS or tag == "dt":
            self._flush()
            self._heading = _HEADINGS[tag] if tag in _HEADINGS else 6 + self._dl_depth
        elif tag == "dl":
            self._flush()
            self._dl_depth += 1
        elif tag in ("ul", "ol"):
            self._end_item()
            self._flush()
            self._lists.append([])
            self._ordered.append(1 if tag == "ol" else 0)
        elif tag == "li":
            self._end_item()
        elif tag == "table":
            if self._rows is None:
                self._break_list()
                self._flush()
                self._rows, self._header_rows = [], 0
        elif tag == "thead":
            self._in_thead = True
        elif tag == "tr" and self._rows is not None:
            self._end_row()
            self._row, self._row_all_header = [], True
        elif tag in ("td", "th") and self._row is not None:
            self._end_cell()
            self._cell, self._cell_is_header = [], tag == "th"
        elif tag == "br":
            self._data("\n")
        elif tag in _BLOCKS:
            if not self._lists and self._rows is None:
                self._flush()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._in_title:
            self._in_title = False
            return
        if self._skip is not None:
            if tag == self._skip[0]:
                depth = self._skip[1] - 1
                self._skip = (tag, depth) if depth else None
            return
        if tag not in self._stack:
            return
        while self._stack.pop() != tag:  # tolerate unclosed children: pop up to the matching tag
            continue
        if self._pre is not None:
            if tag == "pre":
                self._pre_depth -= 1
                if self._pre_depth == 0:
                    code, self._pre = "".join(self._pre), None
                    if self._cell is not None:
                        self._cell.append(code)
                    else:
                        self.out.code(code)
            return
        if self._cell is not None and tag in ("ul", "ol", "li", "p", "div"):
            return
        if (tag in _HEADINGS or tag == "dt") and self._heading is not None:
            level, self._heading = self._heading, None
            text, self._text = "".join(self._text), []
            self.out.heading(text.replace("\u00b6", ""), level)
        elif tag == "dl" and self._dl_depth:
            self._flush()
            self.out.close_headings(6 + self._dl_depth)  # the terms' sections end with the list
            self._dl_depth -= 1
        elif tag in ("ul", "ol") and self._lists:
            self._end_item()
            items = self._lists.pop()
            self._ordered.pop()
            if self._lists:  # nested list: its items join the parent's, indented
                self._lists[-1].extend("  " + it for it in items)
            else:
                self.out.items(items)
        elif tag == "li":
            self._end_item()
        elif tag in ("td", "th"):
            self._end_cell()
        elif tag == "tr":
            self._end_row()
        elif tag == "thead":
            self._in_thead = False
        elif tag == "table" and self._rows is not None and "table" not in self._stack:
            self._end_row()
            rows, self._rows = self._rows, None
            self.out.table(rows, header=self._header_rows > 0)
        elif tag in _BLOCKS and not self._lists and self._rows is None:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif self._skip is None:
            self._data(data)

    def _data(self, data: str) -> None:
        if self._pre is not None:
            self._pre.append(data)
        elif self._cell is not None:
            self._cell.append(data)
        else:
            self._text.append(data)

    # -- block ends -------------------------------------------------------------------------
    def _flush(self) -> None:
        text, self._text = collapse("".join(self._text)), []
        if not text:
            return
        if self._rows is not None and self._row is not None:
            self._row.append(text)
        else:
            self.out.paragraph(text)

    def _end_item(self) -> None:
        if not self._lists:
            return
        text, self._text = collapse("".join(self._text)), []
        if text:
            n = self._ordered[-1]
            marker = f"{n}." if n else "-"
            if n:
                self._ordered[-1] += 1
            self._lists[-1].append(f"{marker} {text}")

    def _break_list(self) -> None:
        """A code block or a table inside a list item: emit the items so far (the open item's
        text included), so the block that follows keeps its place in the reading order."""
        if not self._lists:
            return
        self._end_item()
        flat: list[str] = []
        for depth, items in enumerate(self._lists):
            flat += ["  " * depth + item for item in items]
            items.clear()
        self.out.items(flat)

    def _end_cell(self) -> None:
        if self._cell is None or self._row is None:
            return
        self._row.append(collapse("".join(self._cell)))
        self._row_all_header &= self._cell_is_header or self._in_thead
        self._cell = None

    def _end_row(self) -> None:
        self._end_cell()
        if self._row is not None and self._rows is not None:
            if self._row:
                if self._row_all_header and len(self._rows) == self._header_rows:
                    self._header_rows += 1
                self._rows.append(self._row)
            self._row = None

    def close_all(self) -> ParsedDocument:
        self.close()
        if self._pre is not None:
            self.out.code("".join(self._pre))
        while self._lists:
            self._end_item()
            items = self._lists.pop()
            self._ordered.pop()
            if self._lists:
                self._lists[-1].extend("  " + it for it in items)
            else:
                self.out.items(items)
        if self._rows is not None:
            self._end_row()
            self.out.table(self._rows, header=self._header_rows > 0)
        self._flush()
        title = collapse(self.title)
        first = self.out.first_heading(1)
        if first and title.startswith(first):  # "sqlite3 — … — Python 3.11 documentation"
            title = first
        return self.out.build(title=title, format="html", parser=PARSER)


def parse_html(source: str) -> ParsedDocument:
    """Parse an HTML page into parsed text and blocks, dropping navigation and scripts.

    Args:
        source: the page's markup.

    Returns:
        The parsed document; its title is the page's ``<title>`` or its first heading.
    """
    handler = _Handler()
    handler.feed(source)
    return handler.close_all()
