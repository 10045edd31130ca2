from ragdx.ingest.parse_text import parse_text


def test_paragraphs_keep_line_breaks():
    parsed = parse_text("Warranty terms\r\n\r\nAll products carry\na 2-year warranty.\n\n\n  \nEnd.\n")
    assert parsed.title == "Warranty terms"
    assert parsed.text == "Warranty terms\n\nAll products carry\na 2-year warranty.\n\nEnd."
    assert [parsed.text[b.start:b.end] for b in parsed.blocks] == [
        "Warranty terms", "All products carry\na 2-year warranty.", "End."]
