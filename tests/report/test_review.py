"""The label review page's snippets (issue 51): an alternative shown in its page's words, cut at
word edges, never inside a word ("nds", "d whether a fee ...")."""

import html
import re

from ragdx.report.review import _AROUND, _in_context


def test_a_snippet_starts_and_ends_at_a_word_edge(example_store):
    doc, version = "policies/refund.md", "2026-03"
    text = example_store.texts(doc, version)[1]
    quote = "Refunds are accepted within 30 days of delivery"
    at = text.index(quote)
    assert at > _AROUND and len(text) - at - len(quote) > _AROUND  # cut on both sides
    snippet = html.unescape(re.sub(r"</?(span|mark)[^>]*>", "", _in_context(
        example_store, {"doc": doc, "version": version, "quote": quote})))
    assert snippet.startswith("… ") and snippet.endswith(" …")
    shown = snippet[2:-2]
    start = text.index(shown)
    assert text[start - 1].isspace() and text[start + len(shown)].isspace()
    assert quote in shown and len(shown) <= len(quote) + 2 * _AROUND
