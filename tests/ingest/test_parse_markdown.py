from ragdx.ingest.parse_markdown import inline, parse_markdown
from ragdx.types import BlockKind

DOC = """---
title: Refund policy
---
# Refund policy

Refunds are accepted within **30 days** of
delivery, see [the FAQ](faq.html).

## Conditions

- unused, in the `original` packaging
- with the receipt
  (or the order email)

| Payment method | Refund processing time |
|---|---|
| PayPal | 3-5 business days |
| Card \\| Visa | 5-10 business days |

```json
{"amount": 1999,

 "currency": "EUR"}
```
"""


def test_blocks_and_text():
    parsed = parse_markdown(DOC)
    assert parsed.title == "Refund policy"
    kinds = [b.kind for b in parsed.blocks]
    assert kinds == [BlockKind.HEADING, BlockKind.TEXT, BlockKind.HEADING, BlockKind.LIST,
                     BlockKind.TABLE, BlockKind.CODE]
    texts = [parsed.text[b.start:b.end] for b in parsed.blocks]
    assert texts[1] == "Refunds are accepted within 30 days of delivery, see the FAQ."
    assert texts[3] == "- unused, in the original packaging\n- with the receipt (or the order email)"
    assert texts[4] == ("Payment method | Refund processing time\nPayPal | 3-5 business days\n"
                        "Card | Visa | 5-10 business days")
    assert texts[5] == '{"amount": 1999,\n\n "currency": "EUR"}'
    # blocks are separated by one blank line, and nothing else is in the text
    assert parsed.text == "\n\n".join(texts)


def test_heading_paths_and_parts():
    parsed = parse_markdown(DOC)
    table = parsed.blocks[4]
    assert table.heading_path == ("Refund policy", "Conditions")
    assert parsed.text[table.header[0]:table.header[1]] == "Payment method | Refund processing time"
    assert len(table.parts) == 3
    items = parsed.blocks[3].parts
    assert [parsed.text[s:e] for s, e in items] == ["- unused, in the original packaging",
                                                   "- with the receipt (or the order email)"]
    code = parsed.blocks[5]
    assert [parsed.text[s:e] for s, e in code.parts] == ['{"amount": 1999,', "", ' "currency": "EUR"}']


def test_inline_markup_is_stripped_but_snake_case_kept():
    assert inline("call `refund_order()` with **care** and _style_ ![logo](x.png)") == \
        "call refund_order() with care and style logo"
    assert inline("snake_case_name and 2*3*4") == "snake_case_name and 2*3*4"
    assert inline(r"a \*literal\* star") == "a *literal* star"


def test_setext_headings_and_nested_lists():
    parsed = parse_markdown("Title\n=====\n\nIntro.\n\nPart\n----\n\n1. one\n   - nested\n2. two\n")
    assert [(b.kind, b.level) for b in parsed.blocks if b.kind is BlockKind.HEADING] == \
        [(BlockKind.HEADING, 1), (BlockKind.HEADING, 2)]
    lst = parsed.blocks[-1]
    assert parsed.text[lst.start:lst.end] == "1. one\n  - nested\n2. two"
