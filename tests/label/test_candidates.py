"""Which statements of a page ``ragdx label`` can choose from (``Labeller.statements``): besides
the sentences, list items and table rows, the lines that read as code, a signature or a table row
and that no statement covers."""

from __future__ import annotations

from pathlib import Path

from ragdx.label import Labeller
from ragdx.store.sqlite import SQLiteStore
from tests.conftest import write

# an API reference page as the HTML parser reads it: the signature a line of its own, a table
# without a header row one line per row, a <pre> command a line
PAGE = """<html><head><title>Widgets</title></head><body><h1>Widgets</h1>
<dl><dt>widgets.spin(speed, turns)</dt><dd><p>Spin a widget. The speed is in turns per second.</p>
<p>Use e.g. Spin[int] or the shorthand int | str. That shorthand is preferred.</p></dd></dl>
<table><tr><td>Spinning sideways</td><td></td><td>Only forward spins are implemented.</td></tr>
<tr><td>Reverse turns</td><td></td><td>Not supported.</td></tr></table>
<pre>widget&gt; SPIN 3;</pre></body></html>"""


def _statements(tmp_path: Path, **options: object) -> list[str]:
    from ragdx.ingest.ingestor import Ingestor
    write(tmp_path / "corpus" / "widgets.html", PAGE)
    store = SQLiteStore(tmp_path / "store.db")
    Ingestor(store).run(tmp_path / "corpus")
    (stored,) = store.versions("widgets.html")
    labeller = Labeller(store, [], **options)
    return [s.place.text for s in labeller.statements("widgets.html", stored.document.version)]


def test_signature_code_and_table_lines_no_statement_covers_are_candidates(tmp_path: Path) -> None:
    # the signature and the command read as headings, the pipe sentence as a table header with no
    # rows, the first row of a table without a header as its header: none is a statement of
    # ragdx.text.statement_spans; each is a candidate line of its own, in page order
    assert _statements(tmp_path) == [
        "widgets.spin(speed, turns)",
        "Spin a widget.", "The speed is in turns per second.",
        "Use e.g. Spin[int] or the shorthand int | str. That shorthand is preferred.",
        "Spinning sideways |  | Only forward spins are implemented.",
        "Reverse turns |  | Not supported.",
        "widget> SPIN 3;"]


def test_without_the_lines_only_the_statements_remain(tmp_path: Path) -> None:
    assert _statements(tmp_path, lines=False) == [
        "Spin a widget.", "The speed is in turns per second.", "Reverse turns |  | Not supported."]
