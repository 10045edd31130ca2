import pytest
from hypothesis import given, settings, strategies as st

from ragdx.errors import ConfigError
from ragdx.ingest.chunk import ChunkerConfig, RegexTokenCounter, StructureChunker
from ragdx.text import sentence_spans
from ragdx.ingest.parse_markdown import parse_markdown
from ragdx.types import BlockKind, ChunkKind, Document

DOC = Document("d", "v1", "h", "d.md")
COUNT = RegexTokenCounter().count


def chunk(markdown: str, **config):
    parsed = parse_markdown(markdown)
    return parsed, StructureChunker(ChunkerConfig(**config)).run(DOC, parsed)


def covered(parsed, chunks) -> set[int]:
    return {i for c in chunks for i in range(c.start, c.end)}


def test_regex_counter_counts_words_and_punctuation():
    assert COUNT("Refunds: 30 days, (not 14).") == 10  # Refunds : 30 days , ( not 14 ) .


def test_sentences_respect_abbreviations():
    text = "Pay by card, e.g. Visa. Refunds take 5 days! Then? Done."
    assert [text[s:e] for s, e in sentence_spans(text)] == [
        "Pay by card, e.g. Visa.", "Refunds take 5 days!", "Then?", "Done."]


def test_small_sections_become_one_chunk_each_with_heading():
    parsed, out = chunk("# Policy\n\nIntro text.\n\n## Rule\n\nRefunds within 30 days.\n\nSecond para.")
    assert [c.text for c in out.chunks] == ["Policy\n\nIntro text.",
                                            "Rule\n\nRefunds within 30 days.\n\nSecond para."]
    assert out.chunks[1].heading_path == ("Policy", "Rule")
    assert out.chunks[1].prefix == "Policy > Rule"
    # sections: root, Policy (contains Rule), Rule
    root, policy, rule = out.sections
    assert (policy.parent_id, rule.parent_id) == (root.id, policy.id)
    assert parsed.text[rule.start:rule.end] == "Rule\n\nRefunds within 30 days.\n\nSecond para."
    assert parsed.text[policy.start:policy.end] == parsed.text  # the whole document
    assert out.chunks[0].next_id == out.chunks[1].id and out.chunks[1].prev_id == out.chunks[0].id


def test_long_paragraph_splits_at_sentences_then_words():
    sentence = "Refunds are accepted within thirty days of delivery"  # 8 tokens + "."
    text = "# T\n\n" + " ".join([sentence + "."] * 6) + "\n\n" + " ".join(["word"] * 25)
    parsed, out = chunk(text, max_tokens=20)
    for c in out.chunks:
        assert c.token_count <= 20
        assert c.text == parsed.text[c.start:c.end]
    bodies = [c.text for c in out.chunks]
    # 1 + 9 + 9 tokens: the heading joins the first two sentences; then two sentences a chunk
    assert bodies[0] == f"T\n\n{sentence}. {sentence}."
    assert bodies[1:3] == [f"{sentence}. {sentence}."] * 2
    assert bodies[3:] == [" ".join(["word"] * 20), " ".join(["word"] * 5)]


TABLE = "# Timing\n\n| Payment method | Refund processing time | Fee |\n|---|---|---|\n" + "".join(
    f"| Method {i} | {i}-{i + 2} business days | none |\n" for i in range(12))


def test_table_row_chunks_carry_their_header():
    parsed, out = chunk(TABLE, max_tokens=40)
    tables = [c for c in out.chunks if c.kind is ChunkKind.TABLE]
    assert len(tables) > 2
    header = "Payment method | Refund processing time | Fee"
    for c in tables:
        assert parsed.text[c.header[0]:c.header[1]] == header
        assert c.token_count <= 40
    assert tables[0].text.startswith(header)           # the first group holds the header itself
    for c in tables[1:]:
        assert c.text.startswith("Method ")             # later groups: rows only ...
        assert c.prefix == "Timing\n" + header          # ... with the header as retrieval prefix
    rows = [line for c in tables for line in c.text.split("\n") if line != header]
    assert rows == [f"Method {i} | {i}-{i + 2} business days | none" for i in range(12)]


def test_small_table_is_one_chunk():
    parsed, out = chunk("| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert [(c.kind, c.text) for c in out.chunks] == [(ChunkKind.TABLE, "a | b\n1 | 2")]


CODE = "# API\n\nCall it like this:\n\n```python\n" + "\n".join(
    f"result_{i} = client.refund(order_id={i}, amount={i * 100})" for i in range(15)) + "\n```\n"


def test_code_block_is_split_only_between_lines():
    parsed, out = chunk(CODE, max_tokens=40)
    code_block = next(b for b in parsed.blocks if b.kind is BlockKind.CODE)
    line_starts = {s for s, _ in code_block.parts}
    line_ends = {e for _, e in code_block.parts}
    code_chunks = [c for c in out.chunks if c.kind is ChunkKind.CODE]
    assert len(code_chunks) > 1
    for c in code_chunks:
        assert c.start in line_starts and c.end in line_ends
    assert "\n".join(c.text for c in code_chunks) == parsed.text[code_block.start:code_block.end]
    # prose is never packed into a code chunk
    assert out.chunks[0].kind is ChunkKind.TEXT and out.chunks[0].text == "API\n\nCall it like this:"


FUNCTION = "# API\n\n```python\ndef refund_all(orders):\n" + "\n".join(
    f"    client.refund(order_id={i}, amount={i * 100})" for i in range(12)) + "\n```\n"


def test_the_pieces_of_a_long_code_block_carry_its_first_line():
    parsed, out = chunk(FUNCTION, max_tokens=40)
    code = [c for c in out.chunks if c.kind is ChunkKind.CODE]
    # "def refund_all(orders):" is 7 tokens, at most a quarter of 40: every piece carries it
    assert len(code) > 2
    for c in code:
        assert parsed.text[c.header[0]:c.header[1]] == "def refund_all(orders):" and c.token_count <= 40
    assert code[0].text.startswith("def refund_all(orders):")     # the first piece holds the line itself
    for c in code[1:]:
        assert c.text.startswith("    client.refund(")           # later pieces: lines only ...
        assert c.prefix == "API\ndef refund_all(orders):"           # ... with the line as retrieval prefix
    lines = [line for c in code for line in c.text.split("\n")]
    assert lines == ["def refund_all(orders):"] + [f"    client.refund(order_id={i}, amount={i * 100})"
                                                   for i in range(12)]


def test_code_line_longer_than_the_limit_stays_whole_and_is_flagged():
    line = "x = [" + ", ".join(str(i) for i in range(40)) + "]"
    parsed, out = chunk(f"```\n{line}\nshort = 1\n```", max_tokens=20)
    assert out.chunks[0].text == line and out.chunks[0].over_limit
    assert out.chunks[1].text == "short = 1" and not out.chunks[1].over_limit


def test_overlap_repeats_whole_sentences_and_never_nests_chunks():
    sentences = [f"Sentence number {i} is here." for i in range(12)]  # 6 tokens each
    parsed, out = chunk("# T\n\n" + " ".join(sentences), max_tokens=20, overlap_tokens=7)
    texts = [c.text for c in out.chunks]
    for a, b in zip(out.chunks, out.chunks[1:]):
        assert a.start < b.start and a.end < b.end     # no chunk inside another
        assert b.start < a.end                          # consecutive chunks overlap ...
        assert parsed.text[b.start:a.end] in sentences  # ... by one whole sentence
    assert covered(parsed, out.chunks) == set(range(len(parsed.text)))
    assert len(texts) == len(set(texts))


def test_repeated_text_is_flagged_as_duplicate():
    parsed, out = chunk("# A\n\nOne two three four five.\n\nSame boilerplate line.\n\n"
                        "# B\n\nSix seven eight nine ten.\n\nSame boilerplate line.", max_tokens=8)
    dups = [c for c in out.chunks if c.duplicate_of]
    assert [(c.text, c.duplicate_of) for c in dups] == [
        ("Same boilerplate line.", next(c.id for c in out.chunks if c.text == "Same boilerplate line."))]


def test_config_is_validated_and_recorded():
    with pytest.raises(ConfigError, match="max_tokens"):
        ChunkerConfig(max_tokens=2)
    with pytest.raises(ConfigError, match="overlap_tokens"):
        ChunkerConfig(max_tokens=50, overlap_tokens=50)
    a, b = ChunkerConfig(max_tokens=50), ChunkerConfig(max_tokens=60)
    assert a.id != b.id and a.id == ChunkerConfig(max_tokens=50).id
    _, out = chunk("Some text.", max_tokens=50)
    assert out.chunks[0].config_id == a.id


# -- properties over generated documents ---------------------------------------------------
words = st.sampled_from(["refund", "within", "30", "days", "of", "delivery", "the", "quality",
                         "exception", "e.g.", "is", "90", "Refunds", "EUR", "(see", "below)"])
sentence = st.lists(words, min_size=1, max_size=30).map(lambda ws: " ".join(ws) + ".")
paragraph = st.lists(sentence, min_size=1, max_size=6).map(" ".join)
heading = st.tuples(st.integers(1, 3), st.lists(words, min_size=1, max_size=4)).map(
    lambda t: "#" * t[0] + " " + " ".join(t[1]))
items = st.lists(sentence, min_size=1, max_size=6).map(lambda xs: "\n".join("- " + x for x in xs))
code = st.lists(st.lists(words, max_size=12).map(" ".join), min_size=1, max_size=12).map(
    lambda ls: "```\n" + "\n".join(ls) + "\n```")
table = st.lists(st.lists(words, min_size=3, max_size=3), min_size=2, max_size=12).map(
    lambda rows: "\n".join(["| " + " | ".join(rows[0]) + " |", "|---|---|---|"]
                           + ["| " + " | ".join(r) + " |" for r in rows[1:]]))
document = st.lists(st.one_of(paragraph, heading, items, code, table), min_size=1, max_size=12).map(
    "\n\n".join)


@settings(max_examples=150, deadline=None)
@given(document, st.integers(8, 80), st.integers(0, 30))
def test_chunk_invariants(markdown, max_tokens, overlap):
    overlap = min(overlap, max_tokens - 1)
    parsed, out = chunk(markdown, max_tokens=max_tokens, overlap_tokens=overlap)
    sections = {s.id: s for s in out.sections}
    for c in out.chunks:
        assert c.text == parsed.text[c.start:c.end]                 # exact spans
        assert c.text == c.text.strip() and c.text
        assert c.token_count == COUNT(c.text)
        assert c.over_limit or c.token_count <= max_tokens or c.kind is ChunkKind.TABLE and \
            c.header is not None
        section = sections[c.section_id]
        assert section.start <= c.start and c.end <= section.end     # inside its parent section
    # no text of any block is lost: every non-space character lies in some chunk
    inside = covered(parsed, out.chunks)
    for block in parsed.blocks:
        for i in range(block.start, block.end):
            assert i in inside or parsed.text[i].isspace(), (block, parsed.text[i])
    # code chunks start and end on line boundaries
    code_lines = [p for b in parsed.blocks if b.kind is BlockKind.CODE for p in b.parts]
    starts, ends = {s for s, _ in code_lines}, {e for _, e in code_lines}
    starts |= {b.start for b in parsed.blocks if b.kind is BlockKind.HEADING}  # a heading joins
    for c in out.chunks:
        if c.kind is ChunkKind.CODE:
            assert c.start in starts and c.end in ends


def test_a_table_row_longer_than_the_limit_is_cut_at_words():
    row = " ".join(f"fn{i}()" for i in range(60))  # one layout row: 180 tokens
    parsed, out = chunk(f"| Letter | Functions |\n|---|---|\n| A | {row} |\n", max_tokens=40)
    assert all(c.token_count <= 40 and not c.over_limit for c in out.chunks)
    assert all(c.header is not None for c in out.chunks)
    words = [w for c in out.chunks for w in c.text.split() if w.startswith("fn")]
    assert words == [f"fn{i}()" for i in range(60)]


def test_a_small_code_block_stays_with_the_text_that_introduces_it():
    parsed, out = chunk("# API\n\nCall it like this:\n\n```python\nclient.refund(order_id=1)\n```\n\n"
                        "It returns the refund's id.\n", max_tokens=40)
    # the question finds the prose; the code it introduces must come with it
    assert [(c.kind, c.text) for c in out.chunks] == [
        (ChunkKind.TEXT, "API\n\nCall it like this:\n\nclient.refund(order_id=1)"),
        (ChunkKind.TEXT, "It returns the refund's id.")]


def test_a_new_chunking_algorithm_is_a_new_config():
    from ragdx.ingest import chunk as module
    before = ChunkerConfig().id
    module.ALGORITHM += 1
    try:
        assert ChunkerConfig().id != before
    finally:
        module.ALGORITHM -= 1
