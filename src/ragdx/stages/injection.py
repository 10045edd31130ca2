"""Documents are data: text in a document that tries to act on the system, and the one rule by
which everything a document contributes to a prompt is quoted.

- :func:`instruction_like`: a sentence that addresses the system rather than stating something
  (``Ignore previous instructions``, ``Disregard the official policy and ...``, ``Note to the
  assistant: ...``, ``Say CANOE-YES``, a forged ``<system>`` tag). Such a sentence is flagged in
  the context, is never an extractive answer, and never supports a claim.
- :func:`citation_like`: a forged citation marker (``[S1]``) in a document's text, which would
  otherwise pass into an answer as if the system had cited a source. A sentence holding one is
  never an extractive answer either.
- :func:`quote`: the one escaping rule for a prompt. Every value a document contributes (its id,
  version, title, heading path, text, table header, a conflict's statements) is quoted the same
  way, as XML character data: ``& < > "`` become entities, so no document can close a quote or
  an element, or open a forged one; control characters are dropped; citation markers lose their
  bracket, so only the system's own ``[S1]`` can cite.

A heuristic, tuned to miss nothing an attacker's usual phrasings say, at the cost of flagging a
rare legitimate sentence (which is then only not quoted as an answer).
"""

from __future__ import annotations

import html
import re

from ragdx.text import sentence_spans

__all__ = ["INSTRUCTION_LIKE", "CITATION_LIKE", "instruction_like", "citation_like", "quote",
           "without_instructions"]

_AI = r"(?:ai|a\.i\.|assistant|chat\s?bot|bot|llm|language\s+model|gpt)"
_AI_OR_SYSTEM = rf"(?:{_AI}|model|system)"
# where an imperative can start: a sentence, or a table cell, a label ("Note:") or a closed tag
_START = r"(?:^|(?<=[:;|>\"\u201c]))\W*"
INSTRUCTION_LIKE = re.compile(
    # dropping the rules: "ignore previous instructions", "disregard the official policy"
    r"\b(?:ignore|disregard|forget|override|bypass|overrule)\b[^.!?\n]{0,60}?"
    r"\b(?:instructions?|prompts?|rules?|guidelines?|polic(?:y|ies)|sources?|documents?|context|"
    r"above|previous|prior|earlier|everything)\b"
    rf"|{_START}(?:please\s+)?(?:ignore|disregard)\b"
    # speaking to the system
    rf"|\b(?:note|message|instructions?|reminder)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?(?:\w+\s+)?"
    rf"{_AI_OR_SYSTEM}s?\b|\b{_AI}s?\s+reading\s+this\b"
    rf"|\b(?:as\s+an?|if\s+you\s+are\s+an?|dear|hey|attention)\s+(?:\w+\s+)?{_AI}\b"
    rf"|\b{_AI}s?\b[^.!?\n]{{0,40}}\b(?:must|should|shall|needs?\s+to|has\s+to|have\s+to|is\s+to)\b"
    r"|\byou\s+(?:are\s+now|must\s+now|will\s+now)\b|\bact\s+as\b|\bpretend\s+(?:to\s+be|you)\b"
    r"|\bfrom\s+now\s+on\b|\bsystem\s+prompt\b|\bnew\s+instructions?\b"
    # steering the output
    rf"|{_START}(?:always|only|never)\s+(?:say|answer|respond|reply|output)\b"
    rf"|{_START}(?:say|respond|reply)\b(?!\s+to\b)|\b(?:respond|reply|answer)\s+(?:only\s+)?with\b"
    # forged roles and tags
    r"|<\s*/?\s*(?:system|instructions?|assistant|user|im_start|im_end|prompt|source)\b"
    r"|\[/?(?:INST|SYS|SYSTEM)\]|^\W*(?:system|assistant|developer)\s*:",
    re.IGNORECASE | re.MULTILINE)

#: A citation marker like the system's own ``[S1]`` (brackets of any width, spaces, any case).
CITATION_LIKE = re.compile(r"[\[［【]\s*S\s*\d+\s*[\]］】]", re.IGNORECASE)

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")  # and what XML may not hold


def instruction_like(text: str) -> bool:
    """Whether any sentence of ``text`` reads like an instruction to the system."""
    # each sentence alone, so that ^ anchors at its start
    return any(INSTRUCTION_LIKE.search(text[start:end]) for start, end in sentence_spans(text))


def citation_like(text: str) -> bool:
    """Whether ``text`` holds a citation marker (``[S1]``): a document cannot cite."""
    return bool(CITATION_LIKE.search(text))


def without_instructions(text: str) -> str:
    """``text`` with every instruction-like sentence blanked out (its length and lines kept), for a
    verifier: an injected instruction supports nothing."""
    out = list(text)
    for start, end in sentence_spans(text):
        if INSTRUCTION_LIKE.search(text[start:end]):
            out[start:end] = (" " if ch != "\n" else ch for ch in text[start:end])
    return "".join(out)


def quote(text: str, *, attribute: bool = False) -> str:
    """``text`` as prompt data: XML-escaped (``& < > "``), control characters dropped, citation
    markers disarmed (``[S1]`` becomes ``&#91;S1]``). In an ``attribute``, line breaks and tabs
    become spaces too, so the value stays on its one line."""
    text = _CONTROL.sub("", text)
    if attribute:
        text = re.sub(r"[\n\t]+", " ", text)
    text = html.escape(text, quote=True)
    return CITATION_LIKE.sub(lambda m: "&#91;" + m.group()[1:], text)
