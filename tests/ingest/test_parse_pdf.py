"""PDF parsing and its failure-mode warnings, on PDFs written by ragdx.testing.pdf."""

import io
import sys

import pytest

from ragdx.errors import InputError, MissingExtraError
from ragdx.ingest.parse_pdf import parse_pdf, raw_text
from ragdx.ingest.parsers import parse
from ragdx.testing.pdf import column_page, make_pdf, table_page, two_column_page
from ragdx.types import BlockKind

pypdf = pytest.importorskip("pypdf")  # ragdx imports pypdf lazily, so the imports above work

SINGLE = make_pdf([[(72, 740, "Refund Policy", 18)] + column_page([
    "Refunds are issued within thirty days of a",
    "purchase when the item is refund-",
    "able and unused, as the Anglo-",
    "American rules say.",
    "",  # a blank line: a paragraph break
    "Shipping is free for orders over fifty",
    "dollars (before tax) in all states.",
], top=710)])

LEFT = ["The left column starts here and", "it continues with more words",
        "about the refund policy today.", "", "A second left paragraph ends."]
RIGHT = ["The right column has its own", "text about shipping times for",
         "all of the carriers we use.", "", "Another right paragraph here."]
TWO_COLUMNS = make_pdf([two_column_page(LEFT, RIGHT)])

HEADER = ["Plan", "Price", "Seats"]
ROWS_1 = [["Basic", "10", "1"], ["Team", "45", "5"], ["Business", "90", "20"]]
ROWS_2 = [["Enterprise", "300", "100"], ["Edu", "5", "50"], ["Gov", "200", "80"]]
INTRO = column_page(["Pricing overview."])
OUTRO = column_page(["Prices are per month."], top=680)


def blocks(parsed):
    return [(b.kind, parsed.text[b.start:b.end]) for b in parsed.blocks]


def test_single_column_parses_to_paragraphs_without_warnings():
    parsed = parse_pdf(SINGLE, "single.pdf")
    assert blocks(parsed) == [
        (BlockKind.HEADING, "Refund Policy"),
        # "refund-" + "able" is rejoined (lower case continues); "Anglo-" + "American" is not.
        (BlockKind.TEXT, "Refunds are issued within thirty days of a purchase when the item is "
                         "refundable and unused, as the Anglo- American rules say."),
        (BlockKind.TEXT, "Shipping is free for orders over fifty dollars (before tax) in all "
                         "states."),
    ]
    assert parsed.title == "Refund Policy"
    assert parsed.format == "pdf"
    assert parsed.parser == f"pdf/1 pypdf-{pypdf.__version__}"
    assert parsed.warnings == ()


def test_bullets_and_wrapped_headings():
    data = make_pdf([[(72, 760, "Returns and", 18), (72, 740, "Refunds", 18)] + column_page(
        ["A refund needs:", "\u2022 a receipt from the", "store", "\u2022 the original packaging"],
        top=715)])
    assert blocks(parse_pdf(data, "bullets.pdf")) == [
        (BlockKind.HEADING, "Returns and Refunds"),  # two lines 20 pt apart: one 18 pt heading
        (BlockKind.TEXT, "A refund needs:"),
        (BlockKind.TEXT, "\u2022 a receipt from the store"),
        (BlockKind.TEXT, "\u2022 the original packaging"),
    ]


def test_two_column_page_is_detected_and_named():
    parsed = parse_pdf(TWO_COLUMNS, "paper.pdf")
    assert parsed.warnings == (
        "page 1: two-column layout detected; reading order may interleave the columns",)
    # The words all survive; only their order is at risk.
    for line in LEFT + RIGHT:
        for word in line.split():
            assert word in parsed.text


def test_two_column_warning_names_the_right_page():
    data = make_pdf([column_page(["A plain single column page with a few words."] * 6),
                     two_column_page(LEFT, RIGHT)])
    assert parse_pdf(data, "mixed.pdf").warnings == (
        "page 2: two-column layout detected; reading order may interleave the columns",)


def test_table_split_over_a_page_break_loses_its_header():
    data = make_pdf([INTRO + table_page([HEADER] + ROWS_1, top=600), table_page(ROWS_2) + OUTRO])
    assert parse_pdf(data, "prices.pdf").warnings == (
        "page 2: table continues from page 1 without its header row; "
        "rows lose their column names",)


def test_table_on_one_page_or_with_repeated_header_is_fine():
    one_page = make_pdf([INTRO + table_page([HEADER] + ROWS_1 + ROWS_2, top=600)])
    assert parse_pdf(one_page, "prices.pdf").warnings == ()
    repeated = make_pdf([INTRO + table_page([HEADER] + ROWS_1, top=600),
                         table_page([HEADER] + ROWS_2) + OUTRO])
    assert parse_pdf(repeated, "prices.pdf").warnings == ()


def test_lost_header_tolerates_a_footer_and_a_running_header():
    footer, running = [(300, 40, "Page 1")], [(72, 770, "ACME Pricing Guide 2024")]
    data = make_pdf([table_page([HEADER] + ROWS_1, top=200) + footer, running + table_page(ROWS_2)])
    assert parse_pdf(data, "prices.pdf").warnings == (
        "page 2: table continues from page 1 without its header row; "
        "rows lose their column names",)


def test_lost_header_on_every_later_page_of_a_long_table():
    data = make_pdf([table_page([HEADER] + ROWS_1, top=200), table_page(ROWS_1 * 10),
                     table_page(ROWS_2)])
    assert parse_pdf(data, "prices.pdf").warnings == tuple(
        f"page {n + 1}: table continues from page {n} without its header row; "
        "rows lose their column names" for n in (1, 2))


def test_table_followed_by_prose_does_not_continue():
    prose = column_page(["Some prose follows the table here.", "And more of it."], top=500)
    data = make_pdf([table_page([HEADER] + ROWS_1, top=600) + prose, table_page(ROWS_2)])
    assert parse_pdf(data, "prices.pdf").warnings == ()


def test_table_drawn_column_by_column_loses_its_rows():
    by_column = sorted(table_page([HEADER] + ROWS_1), key=lambda run: (run[0], -run[1]))
    parsed = parse_pdf(make_pdf([by_column]), "columns.pdf")
    assert parsed.warnings == (
        "page 1: table cells extracted one per line; rows lose their cell association",)
    assert parsed.text.startswith("Plan Basic Team Business")  # the first column, as one run


@pytest.mark.parametrize("data", [b"", b"hello, not a PDF", SINGLE[:len(SINGLE) // 2]])
def test_unreadable_bytes_name_the_file(data):
    with pytest.raises(InputError, match=r"^broken\.pdf: not a readable PDF") as info:
        parse_pdf(data, "broken.pdf")
    assert info.value.file == "broken.pdf"
    with pytest.raises(InputError, match="not a readable PDF"):
        raw_text(data, "broken.pdf")


def _encrypted(user_password):
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(SINGLE))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_encrypted_pdf_needs_its_password():
    with pytest.raises(InputError, match=r"^locked\.pdf: encrypted PDF"):
        parse_pdf(_encrypted("secret"), "locked.pdf")
    # An empty user password (only editing is restricted) opens like any PDF.
    assert "refundable" in parse_pdf(_encrypted(""), "open.pdf").text


def test_pdf_without_text_is_empty_with_a_warning():
    parsed = parse_pdf(make_pdf([[], []]), "scan.pdf")
    assert (parsed.text, parsed.blocks) == ("", ())
    assert parsed.warnings == ("no extractable text (scanned PDF? OCR is not done)",)


def test_title_comes_from_metadata_unless_it_names_a_file():
    def titled(title):
        writer = pypdf.PdfWriter(clone_from=io.BytesIO(SINGLE))
        writer.add_metadata({"/Title": title})
        out = io.BytesIO()
        writer.write(out)
        return parse_pdf(out.getvalue(), "t.pdf").title
    assert titled("Refunds, 2024 edition") == "Refunds, 2024 edition"
    assert titled("Microsoft Word - policy.docx") == "Refund Policy"  # the first heading


def test_raw_text_is_the_plain_extraction():
    raw = raw_text(SINGLE, "single.pdf")
    assert raw == ("Refund Policy\nRefunds are issued within thirty days of a\n"
                   "purchase when the item is refund-\nable and unused, as the Anglo-\n"
                   "American rules say.\nShipping is free for orders over fifty\n"
                   "dollars (before tax) in all states.")
    two_pages = raw_text(make_pdf([column_page(["first page"]), column_page(["second page"])]),
                         "two.pdf")
    assert two_pages == "first page\n\nsecond page"


def test_parse_end_to_end_through_the_format_registry():
    data = make_pdf([[(72, 765, "Prices", 18)] + INTRO + table_page([HEADER] + ROWS_1, top=600),
                     table_page(ROWS_2) + OUTRO])
    raw, parsed = parse(data, "pdf", "x.pdf")
    assert "Business 90 20" in raw
    assert parsed.format == "pdf" and parsed.title == "Prices"
    assert len(parsed.blocks) == 5
    assert all(parsed.text[b.start:b.end].strip() for b in parsed.blocks)
    assert parsed.warnings == ("page 2: table continues from page 1 without its header row; "
                               "rows lose their column names",)


def test_make_pdf_writes_a_strictly_valid_file():
    data = make_pdf([[(72, 700, r"a (parenthesis) and a \ backslash")], []])
    reader = pypdf.PdfReader(io.BytesIO(data), strict=True)  # strict: a bad xref would raise
    assert len(reader.pages) == 2
    assert reader.pages[0].extract_text() == r"a (parenthesis) and a \ backslash"
    assert "\u2019 \u2022 \u20ac" in raw_text(make_pdf([[(72, 700, "\u2019 \u2022 \u20ac")]]), "w.pdf")
    with pytest.raises(ValueError, match="WinAnsi"):
        make_pdf([[(72, 700, "\u2603")]])


def test_missing_pypdf_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pypdf", None)  # what an uninstalled package looks like
    with pytest.raises(MissingExtraError, match=r"pip install 'ragdx\[pdf\]'"):
        parse_pdf(SINGLE, "single.pdf")
