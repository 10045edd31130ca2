"""A reference answer read as ``ragdx label`` reads it (docs/label.md): its atomic claims
(:func:`split_claims`), whether it says the sources do not answer (:func:`abstains`), what the pair
scorer reads of each claim alone (:func:`claim_sentences`), the parts of a compound question
(:func:`question_parts`), and what a claim holds that a statement must hold too: its words' stems
(:func:`_stems`), its amounts (:func:`_amounts`) and its code (:func:`_code`, :func:`_holds`).

The lowest of the labeller's modules: it imports none of the others.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, Sequence

from ragdx.text import content_terms, is_reply, sentence_spans, split_question, stem, unreplied
from ragdx.types import VersionFilter

_SPACE = re.compile(r"\s+")
#: the fewest words a claim needs to be found by its words alone ("1,000,000 bytes." stands in many places)
VERBATIM_WORDS = 5
_PROSE_END = re.compile(r"[.!?:]['\")\]]*$")


def _compact(text: str) -> str:
    return _SPACE.sub("", text)


def _probe(text: str) -> str:
    """The longest run of the text without whitespace: a text lacking it cannot hold the quote."""
    return max(text.split(), key=len, default="")


_CLAUSE = re.compile(r"(?<=[;:])\s+")
#: a comma before "and", "but", "which", "while" or "so" ends a clause ("ties go to the even
#: choice, and float representation can make round(2.675, 2) give 2.67" is two statements)
_COMMA = re.compile(r"(?<=,)\s+(?=(?:and|but|which|while|so)\s)")
#: the fewest content words each comma clause needs for the sentence to be split there
CLAUSE_WORDS = 4


def _clauses(sentence: str) -> list[str]:
    """A sentence apart at ``;`` and ``:``, and each piece apart at its comma clauses when every
    clause has at least ``CLAUSE_WORDS`` content words."""
    out = []
    for piece in _CLAUSE.split(sentence):
        parts = _COMMA.split(piece)
        out += parts if all(len(content_terms(p)) >= CLAUSE_WORDS for p in parts) else [piece]
    return out


#: the sources, as a reference answer names them ("the PostgreSQL manual", "the given context")
_SOURCE = r"(?:the|these|this|our|your|any)\s+(?:[\w-]+\s+){0,2}?(?:manual|documentation|docs|sources?|context|corpus)"
#: a reference answer saying the sources do not answer ("The manual does not cover pg_partman.",
#: "The documentation documents no setting named ...", "There's no such setting ...", "I don't
#: know."): its question is one the system should abstain on
ABSTAINING = re.compile(
    rf"\b{_SOURCE}\s+(?:does|do|did)\s*(?:not|n't)\s+(?:cover|mention|document|describe|discuss|address|say|state|"
    r"contain|include|provide|specify|list|name|explain)\b"
    rf"|\b{_SOURCE}\s+(?:documents|describes|mentions|lists|names|has|contains|provides|gives)\s+no\b"
    r"|\bnot\s+(?:covered|mentioned|documented|described|discussed|addressed|stated|found|specified)\s+(?:in|by)\s+"
    rf"{_SOURCE}"
    r"|^\s*(?:i\s+(?:do\s*not|don't)\s+know|unanswerable|not\s+answerable)\b"
    r"|\bthere(?:\s+is|'s|\u2019s)\s+no\s+such\b[^.;]*\b(?:manual|documentation|docs|sources?|context)\b"
    r"|\b(?:is|are)(?:\s+not|n't|n\u2019t)\s+(?:a\s+)?documented\b"
    r"|\b(?:cannot|can't|can\s+not)\s+be\s+answered\b",
    re.IGNORECASE)


def abstains(reference: str) -> bool:
    """Whether a reference answer's first sentence says the sources do not answer the question."""
    text = " ".join(reference.split())
    first = next((text[a:b] for a, b in sentence_spans(text)), text)
    return bool(ABSTAINING.search(first))


def _joined(pieces: list[str], least: int = 3) -> list[str]:
    """Pieces with fewer than ``least`` content words joined to the next ("Yes." or "No:" is no
    claim of its own; the last joins the one before)."""
    out: list[str] = []
    carry = ""
    for piece in pieces:
        piece = f"{carry} {piece}".strip() if carry else piece
        if len(content_terms(piece)) < least:
            carry = piece
            continue
        out.append(piece)
        carry = ""
    if carry:
        if out:
            out[-1] = f"{out[-1]} {carry}"
        else:
            out.append(carry)
    return out


def split_claims(reference: str) -> list[str]:
    """The atomic claims of a reference answer: the sentences of its prose lines, each apart at
    ``;`` and ``:`` into clauses, and at a comma before "and", "but", "which", "while" or "so" when
    each side has four content words or more (a piece with fewer than three content words joins
    the next; a reply word opening a claim, "No:" or "Yes,", left out, and a reply alone is no
    claim), and each run of other lines (code, a command, a table; blank lines inside it kept) as one claim."""
    claims: list[str] = []
    block: list[str] = []

    def flush() -> None:
        text = "\n".join(block).strip()
        if text and content_terms(text) and not is_reply(text):
            claims.append(text)
        block.clear()

    for line in reference.splitlines():
        stripped = line.strip()
        prose = bool(stripped) and not line[:1].isspace() and (
            len(stripped.split()) >= 4 and bool(_PROSE_END.search(stripped)))
        if prose:
            flush()
            pieces = [c for a, b in sentence_spans(stripped) for c in _clauses(stripped[a:b])]
            claims.extend(unreplied(c) for c in _joined(pieces) if content_terms(c) and not is_reply(c))
        elif stripped or block:
            block.append(line)
    flush()
    return claims


def claim_sentences(reference: str, claims: Sequence[str], least: int) -> list[str]:
    """What the pair scorer reads of each claim when it reads it without the question: the claim,
    or, when it has fewer than ``least`` content words, the sentence of the reference it came from
    (its reply word left out): a clause split off at ``;``, ``:`` or a comma ("and its data is never
    sent to standbys") has its subject there. A claim no one sentence holds (pieces joined across
    sentences, a block of code) is read as it is."""
    sentences = [unreplied(line.strip()[a:b]) for line in reference.splitlines()
                 for a, b in sentence_spans(line.strip())]
    out, at = [], 0
    for claim in claims:  # in the reference's order: a clause said twice is read in its own sentence
        found = next((n for n in range(at, len(sentences)) if _compact(claim) in _compact(sentences[n])), None)
        if found is not None:
            at = found
        out.append(claim if len(_stems(claim)) >= least or found is None else sentences[found])
    return out


def question_parts(question: str, known: Iterable[str] = ()) -> list[str]:
    """The parts of a compound question that need evidence of their own
    (:func:`ragdx.text.split_question`), without a sentence stating the version the asker runs
    ("We're on Python 3.9."): that is the version's context, which the version filter reads.
    ``known``: the store's version labels (``VersionFilter.for_question``)."""
    return [a for a in split_question(question)
            if a.endswith("?") or not VersionFilter.for_question(a, known=known).named]


def _prose(claim: str) -> bool:
    """Whether a claim is a sentence (not a run of code or table lines)."""
    text = claim.strip()
    return "\n" not in text and (bool(_PROSE_END.search(text)) or text.endswith(","))  # "," ends a clause


_UNITS = r"kB|KB|MB|GB|TB|ms|us|min|bytes?"
#: an amount: a number of two digits or more ("1,600", "131072", "12.5"), or one with its unit ("4MB",
#: "8 kB"); units glued or after one space read alike. A version ("3.8.3") is none
_AMOUNT = re.compile(r"(?<![\w.])(\d[\d,]*\d(?:\.\d+)?|\d\.\d+|\d(?=\s?(?:" + _UNITS + r")\b))(?![\d.]*\.\d)"
                     r"(?:\s?(" + _UNITS + r")\b)?")


def _amounts(text: str, units: bool = True) -> frozenset[str]:
    """The text's amounts, thousands separators dropped and units lower-cased ("1,600" -> "1600",
    "4MB" and "4 MB" -> "4mb"); without ``units``, their numbers alone ("1,000,000 bytes" and
    "1000000" are one)."""
    return frozenset(m.group(1).replace(",", "") + ((m.group(2) or "").lower() if units else "")
                     for m in _AMOUNT.finditer(text))


_SETTING = re.compile(r"[A-Za-z_][\w.]*\s*=\s*[\w.'\"]+")
#: a command's upper-case keywords, two or more ("CREATE INDEX CONCURRENTLY", "ACCESS EXCLUSIVE")
_KEYWORDS = re.compile(r"(?<![\w-])[A-Z]{2,}(?:\s+[A-Z]{2,})+(?![\w-])")


def _code(claim: str) -> frozenset[str]:
    """The claim's code, as a statement would hold it word for word (spaces aside): its API names
    with their calls' parentheses and what they chain ("get_event_loop_policy().get_event_loop()"),
    its settings ("strict=True", "foreign_keys = ON"), each spaces aside, the name of a call alone
    ("pg_blocking_pids" of "pg_blocking_pids()": a function table's row gives it its arguments), and
    its runs of upper-case keywords, one space apart ("CREATE INDEX CONCURRENTLY": a statement naming
    that command, not REINDEX's); :func:`_holds` says whether a statement holds one."""
    out = {_compact(m) for m in _SETTING.findall(claim)}
    for m in re.finditer(r"[A-Za-z_][\w.]*\(\)(?:\.[A-Za-z_]\w*\(\))*", claim):
        out.add(m.group())
        if m.group().count("(") == 1:  # the name alone too: a function table's row reads "pg_blocking_pids ( integer )"
            out.add(m.group()[:-2])
    out.update(" ".join(m.split()) for m in _KEYWORDS.findall(claim))
    return frozenset(x for x in out if len(_compact(x)) >= 6)


def _holds(text: str, code: str) -> bool:
    """Whether a text holds a piece of a claim's code (:func:`_code`) word for word: a run of
    keywords or a bare name as whole words ("DROP TABLE" is not in "DROP TABLESPACE", "ROW
    EXCLUSIVE" not in "SHARE ROW EXCLUSIVE", "pg_blocking_pids" not in
    "pg_safe_snapshot_blocking_pids"), a call or a setting spaces aside."""
    if " " in code:  # a run of keywords, not the end of a longer run ("ROW EXCLUSIVE" of "SHARE ROW EXCLUSIVE")
        words = r"\s+".join(map(re.escape, code.split()))
        return re.search(rf"(?<![\w.-])(?<![A-Z] ){words}(?![\w-])", text) is not None
    if re.fullmatch(r"[\w.]+", code):
        return re.search(rf"(?<![\w.-]){re.escape(code)}(?![\w-])", text) is not None
    return code in _compact(text)


_GLUED = re.compile(r"(\d+(?:\.\d+)?)([a-z]+)")
#: a thousands separator: a comma between a digit and three digits that end the number's group
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


@functools.lru_cache(maxsize=65536)
def _stems(text: str) -> frozenset[str]:
    """The stems of a text's content words; a number glued to its unit ("4MB") is the number and
    the unit, as "4 MB" is; a number's thousands separators are no boundary ("1,000,000" is
    1000000, not the first words of "1,000,000,000")."""
    out = set()
    for t in content_terms(_THOUSANDS.sub("", text)):
        glued = _GLUED.fullmatch(t)
        out.update((glued[1], stem(glued[2])) if glued else (stem(t),))
    return frozenset(out)
