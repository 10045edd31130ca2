from ragdx.ingest.parse_html import parse_html
from ragdx.types import BlockKind

PAGE = """<!DOCTYPE html><html><head><title>Refund errors</title>
<script>var x = "Refunds are accepted";</script><style>p {color: red}</style></head>
<body>
<header><div class="logo">Northwind</div><nav><a href="/">Home</a></nav></header>
<div class="related" role="navigation"><a href="prev.html">previous</a></div>
<main>
  <h1>Refund error codes<a class="headerlink" href="#x">¶</a></h1>
  <p>When a refund   fails, you see a
     code &amp; a message.</p>
  <h2>RFD-4021</h2>
  <p>Error <b>RFD-4021</b> means the refund window expired.<br>Report defects anyway.</p>
  <ul><li>first item<li>second <em>item</em></li><li>with a list<ul><li>inner</li></ul></li></ul>
  <table><thead><tr><th>Code</th><th>Meaning</th></tr></thead>
    <tbody><tr><td>RFD-5003</td><td>provider timeout</td></tr>
           <tr><td>RFD-5010</td><td>payment method closed</td></tr></tbody></table>
  <div class="highlight"><pre><span>def refund(order):</span>
    <span>return   order.total</span>
</pre></div>
  <dl><dt>refund(order)</dt><dd><p>Refund the order.</p></dd></dl>
</main>
<div class="sphinxsidebar">Quick search</div>
<footer>Copyright Northwind</footer>
</body></html>"""


def test_drops_chrome_and_keeps_structure():
    parsed = parse_html(PAGE)
    assert parsed.title == "Refund errors"
    text = parsed.text
    for chrome in ("Northwind", "Home", "previous", "Quick search", "Copyright", "var x", "color", "¶"):
        assert chrome not in text
    blocks = [(b.kind, text[b.start:b.end]) for b in parsed.blocks]
    assert blocks == [
        (BlockKind.HEADING, "Refund error codes"),
        (BlockKind.TEXT, "When a refund fails, you see a code & a message."),
        (BlockKind.HEADING, "RFD-4021"),
        (BlockKind.TEXT, "Error RFD-4021 means the refund window expired. Report defects anyway."),
        (BlockKind.LIST, "- first item\n- second item\n- with a list\n  - inner"),
        (BlockKind.TABLE, "Code | Meaning\nRFD-5003 | provider timeout\nRFD-5010 | payment method closed"),
        (BlockKind.CODE, "def refund(order):\n    return   order.total"),
        (BlockKind.HEADING, "refund(order)"),  # a definition term heads its definition
        (BlockKind.TEXT, "Refund the order."),
    ]
    table = parsed.blocks[5]
    assert text[table.header[0]:table.header[1]] == "Code | Meaning"
    assert parsed.blocks[3].heading_path == ("Refund error codes", "RFD-4021")


def test_header_inside_article_is_content():
    parsed = parse_html("<article><header><h1>Kept title</h1></header><p>Body.</p></article>")
    assert parsed.text == "Kept title\n\nBody."


def test_table_without_th_has_no_header():
    parsed = parse_html("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>")
    assert parsed.blocks[0].header is None
    assert parsed.text == "a | b\nc | d"


def test_code_and_tables_inside_list_items_keep_reading_order():
    parsed = parse_html("<ul><li>Intro of the item:<pre>x = 1\ny = 2</pre>after the code</li>"
                        "<li>second<table><tr><th>From</th><th>To</th></tr><tr><td>a</td><td>b</td>"
                        "</tr></table></li></ul><p>Done.</p>")
    assert [(b.kind, parsed.text[b.start:b.end]) for b in parsed.blocks] == [
        (BlockKind.LIST, "- Intro of the item:"),
        (BlockKind.CODE, "x = 1\ny = 2"),
        (BlockKind.LIST, "- after the code\n- second"),
        (BlockKind.TABLE, "From | To\na | b"),
        (BlockKind.TEXT, "Done."),
    ]


def test_lists_and_breaks_inside_cells_stay_apart():
    parsed = parse_html("<table><tr><th>Letter</th><th>Functions</th></tr><tr><td>A</td><td><ul>"
                        "<li>abs()</li><li>aiter()</li></ul></td></tr></table>")
    assert parsed.text == "Letter | Functions\nA | abs(); aiter()"


def test_definition_terms_head_their_definitions_until_the_list_ends():
    parsed = parse_html("<h1>Built-in Functions</h1><dl><dt>open(file)</dt><dd><p>Open file.</p>"
                        "<dl><dt>mode</dt><dd>How.</dd></dl><p>Back in open.</p></dd></dl><p>After.</p>")
    paths = {parsed.text[b.start:b.end]: b.heading_path for b in parsed.blocks}
    assert paths["Open file."] == ("Built-in Functions", "open(file)")
    assert paths["How."] == ("Built-in Functions", "open(file)", "mode")
    assert paths["Back in open."] == ("Built-in Functions", "open(file)")
    assert paths["After."] == ("Built-in Functions",)


def test_title_drops_the_site_suffix():
    page = "<title>sqlite3 — DB-API 2.0 — Python 3.11 documentation</title><h1>sqlite3 — DB-API 2.0</h1>"
    assert parse_html(page).title == "sqlite3 — DB-API 2.0"


DOCBOOK = """<html><head><title>TRUNCATE</title></head><body>
<div class="navheader"><table width="100%" summary="Navigation header"><tr><th colspan="5">TRUNCATE</th></tr>
<tr><td><a accesskey="p" href="sql-start-transaction.html">Prev</a> </td><td><a href="sql-commands.html">Up</a></td>
<th>SQL Commands</th><td><a href="index.html">Home</a></td><td><a href="sql-unlisten.html">Next</a></td></tr></table><hr /></div>
<div class="refentry"><div class="titlepage"></div><div class="refnamediv"><h2>TRUNCATE</h2>
<p>TRUNCATE &#8212; empty a table or set of tables</p></div>
<div class="toc"><dl class="toc"><dt><span class="sect1"><a href="#a">Description</a></span></dt></dl></div>
<div class="refsect1"><h2>Description</h2><p>TRUNCATE quickly removes all rows from a set of tables.</p></div>
<div class="index"><div class="indexdiv"><h3>A</h3><dl><dt>ABORT, <a href="sql-abort.html">ABORT</a></dt></dl></div></div>
</div>
<div class="navfooter"><hr /><table width="100%" summary="Navigation footer"><tr><td><a href="x.html">Prev</a></td>
<td><a href="sql-commands.html">Up</a></td><td><a href="y.html">Next</a></td></tr>
<tr><td>START TRANSACTION</td><td><a href="index.html">Home</a></td><td>UNLISTEN</td></tr></table></div>
</body></html>"""


def test_docbook_navigation_tables_of_contents_and_index_entries_are_dropped():
    # a DocBook page (the PostgreSQL manual's shape): its bars of links, its table of contents and
    # the back-of-book index's entries are links to other pages, not the page's content
    parsed = parse_html(DOCBOOK)
    assert parsed.text == ("TRUNCATE\n\nTRUNCATE — empty a table or set of tables\n\nDescription\n\n"
                           "TRUNCATE quickly removes all rows from a set of tables.")


def test_sphinx_tables_of_contents_and_generated_indexes_are_dropped():
    page = """<div class="body"><h1>The Library</h1><p>What the library holds.</p>
    <div class="toctree-wrapper compound"><ul><li><a href="intro.html">Introduction</a></li></ul></div>
    <table class="indextable genindextable"><tr><td><a href="x.html">abs() (built-in function)</a></td></tr></table>
    <table class="indextable modindextable"><tr><td><a href="y.html">array</a></td></tr></table></div>"""
    assert parse_html(page).text == "The Library\n\nWhat the library holds."
