from ragdx.ingest.quotes import coverage, find_quote, in_source
from ragdx.types import Chunk, ChunkKind, Span

TEXT = "Refunds are\naccepted within  30 days.\n\nRefunds are accepted within 30 days."


def test_quote_matches_ignoring_whitespace_but_not_case():
    assert find_quote(TEXT, "Refunds are accepted within 30 days") == [(0, 36), (39, 74)]
    assert TEXT[0:36] == "Refunds are\naccepted within  30 days"
    assert find_quote(TEXT, "  accepted   within 30\tdays. ") == [(12, 37), (51, 75)]
    assert find_quote(TEXT, "refunds are accepted") == []
    assert find_quote(TEXT, "   ") == []


def test_in_source_sees_through_markup():
    raw = "<p>Refunds are <b>accepted</b> within&nbsp;30 days</p>"
    assert in_source(raw, "Refunds are accepted within 30 days")
    assert in_source("**Refunds** are _accepted_", "Refunds are accepted")
    assert not in_source(raw, "within 90 days")


def _chunk(cid, start, end, dup=None):
    return Chunk(cid, "d", "v", start, end, TEXT[start:end], ChunkKind.TEXT, (), "s", duplicate_of=dup)


def test_coverage_full_partial_none():
    chunks = [_chunk("a", 0, 20), _chunk("b", 20, 37), _chunk("c", 39, 75), _chunk("d", 39, 75, "c")]
    span = Span("d", "v", 0, 36)
    assert (coverage(span, chunks).status, coverage(span, chunks).partial) == ("partial", ("a", "b"))
    assert coverage(Span("d", "v", 51, 75), chunks).full == ("c",)       # the duplicate is ignored
    assert coverage(Span("d", "v", 37, 39), chunks).status == "none"
    assert coverage(Span("d", "other", 0, 36), chunks).status == "none"  # another version


def test_a_quote_copied_from_a_rendered_table_resolves_to_the_row():
    parsed = "Version | Released | End of life\n3.11 | 2022-10-24 | 2027-10\n3.12 | 2023-10-02 | 2028-10"
    # copied from the browser, the cells are apart by spaces (or tabs); the parser joined them with " | "
    [(start, end)] = find_quote(parsed, "3.12 2023-10-02 2028-10")
    assert parsed[start:end] == "3.12 | 2023-10-02 | 2028-10"
    [(start, end)] = find_quote(parsed, "3.11\t2022-10-24")
    assert parsed[start:end] == "3.11 | 2022-10-24"
    # a quote that holds the separator itself must match it
    assert find_quote(parsed, "3.11 | 2022-10-24") == [(start, end)]
    assert find_quote(parsed, "3.11 || 2022-10-24") == []
    # cells are still matched in order, not as a bag of words
    assert find_quote(parsed, "2022-10-24 3.11") == []
