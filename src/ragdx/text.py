"""Text helpers shared by every layer: sentences, content terms, a light stemmer, numbers.

Imports nothing of ragdx.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

__all__ = ["sentence_spans", "sentences", "statements", "statement_spans", "Statement", "heading_like", "row_cells",
           "content_terms", "stem", "STOPWORDS", "quantities", "split_question", "asking", "unreplied", "is_reply",
           "LIST_ITEM"]

# Sentence ends: ., ! or ? then space, unless the word before is a known abbreviation.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = {"e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "ms.", "dr.", "no.", "fig.", "approx.",
                  "cf.", "st.", "inc.", "ltd.", "jr.", "sr."}


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Split ``text[start:end]`` into sentence ranges (absolute offsets, whitespace trimmed)."""
    end = len(text) if end is None else end
    spans, pos = [], start
    for match in _SENTENCE_END.finditer(text, start, end):
        last_word = text[max(start, text.rfind(" ", start, match.start()) + 1):match.start()].lower()
        if last_word in _ABBREVIATIONS or re.fullmatch(r"[a-z]\.", last_word):
            continue
        spans.append((pos, match.start()))
        pos = match.end()
    spans.append((pos, end))
    return [(s, e) for s, e in (_trim(text, s, e) for s, e in spans) if e > s]


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


STOPWORDS = frozenset("""a an and are as at be by can could do does for from get got had has have how
i if in into is it its me my of on or our so than that the their them then there these they this
to up was we were what when where which who why will with would you your after before about
need needs been once still ago make much many long just also very own same other does did am too""".split())


# a version or decimal number is one term ("3.9", "1.0.2"); a word keeps its clitic ("python's")
_TERM = re.compile(r"\d+(?:\.\d+)+|[^\W_]+(?:['\u2019][^\W_]+)*")
_NOT = {"can't": "can", "won't": "will", "shan't": "shall"}


def _base(word: str) -> str:
    """A word without its clitic: "python's" -> "python", "doesn't" -> "does"."""
    word = word.replace("\u2019", "'")
    if "'" not in word:
        return word
    if word.endswith("n't"):
        return _NOT.get(word, word[:-3])
    return word.split("'")[0]


#: a reply word that opens an answer ("No: ...", "Yes, ...", "Neither: ...", "No to both: ..."): the
#: answer to the question, not a claim a source states
_REPLY_WORDS = (r"(?:(?:yes|no|neither)(?:\s+(?:(?:to|for)\s+(?:both|all|each|either)"
                r"(?:\s+(?:of\s+them|questions?|parts?))?|in\s+(?:both|all|either)\s+cases?))?"
                r"|not\s+(?:necessarily|quite|exactly|really|always)|it\s+depends|correct|indeed)")
_REPLY = re.compile(rf"^{_REPLY_WORDS}\s*[,:;.!\u2013\u2014]\s*", re.IGNORECASE)
_REPLY_ONLY = re.compile(rf"^{_REPLY_WORDS}\W*$", re.IGNORECASE)  # a reply and nothing else


def is_reply(text: str) -> bool:
    """Whether a text is a reply word and nothing else ("Yes.", "No to both:")."""
    return _REPLY_ONLY.match(text.strip()) is not None


def unreplied(claim: str) -> str:
    """The claim without the reply word it opens with, when a claim remains ("No. Autovacuum
    can't see temporary tables." -> "Autovacuum can't see temporary tables.")."""
    rest = _REPLY.sub("", claim, count=1)
    return rest if rest != claim and content_terms(rest) else claim


#: how an answer that declines opens ("I don't know", "I cannot answer that", "There is not enough
#: information in the context", "The provided documents do not contain ...", "Sorry, I can't ..."):
#: what an LLM-based system says when it abstains
_ABSTENTION = re.compile(
    r"^\W*(?:(?:i'?m\s+)?sorry,?\s+(?:but\s+)?)?"
    r"(?:i\s+(?:do\s+not|don['\u2019]?t|cannot|can['\u2019]?t|can\s+not|could\s+not|couldn['\u2019]?t|am\s+unable\s+to|"
    r"am\s+not\s+able\s+to|['\u2019]m\s+(?:unable|not\s+able)\s+to|have\s+no|don['\u2019]?t\s+have)\s+"
    r"(?:know|answer|tell|say|find|determine|have\s+(?:enough|that|this|the)|(?:enough\s+)?information)"
    r"|(?:there\s+is|there['\u2019]s|i\s+have)\s+(?:not\s+enough|no|insufficient)\s+(?:information|context|data)"
    r"|(?:the\s+)?(?:provided\s+|given\s+)?(?:context|sources?|documents?|passages?)\s+(?:do(?:es)?\s+not|"
    r"don['\u2019]?t|doesn['\u2019]?t)\s+(?:contain|provide|include|have)\s+(?:enough|sufficient|any|the)?\s*"
    r"(?:information|answer|details)"
    r"|(?:not\s+enough|insufficient|no)\s+information\b|no\s+answer\b|unknown\W*$)", re.IGNORECASE)


def is_abstention(answer: str) -> bool:
    """Whether an answer declines to answer: it is empty, or opens as a refusal does ("I don't
    know: ...", "Sorry, I cannot answer that.", "The provided context does not contain enough
    information ..."). An answer that states something first ("No. The context does not say ..."
    is a reply) is no abstention."""
    return not answer.strip() or _ABSTENTION.match(answer) is not None


def content_terms(text: str) -> list[str]:
    """Lower-cased words of a text, stopwords removed, in order, each once. A version or decimal
    number is one term; a clitic is not a term of its own ("Python's" is ``python``, not
    ``python`` and ``s``)."""
    seen: dict[str, None] = {}
    for match in _TERM.findall(text.lower()):
        word = _base(match)
        if word and word not in STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)


def sentences(text: str) -> list[str]:
    """The sentences of a text."""
    return [text[s:e] for s, e in sentence_spans(text)]


#: a list item's bullet: "- ", "* ", "+ ", "3. ", "3) "
LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s+")

#: an API signature that states defaults: ``isoformat(sep='T', timespec='auto')``
SIGNATURE = re.compile(r"\w\((?:[^()]*,\s*)?\w+\s*=\s*[^()]+\)")


def heading_like(lines: list[str]) -> bool:
    """Whether a block's (stripped, non-empty) lines read as a heading: one short line without a
    final stop. An API signature that states defaults is a statement: ``f(sep='T')``."""
    return len(lines) == 1 and len(lines[0]) < 80 and not lines[0].endswith((".", "!", "?", ":")) \
        and not SIGNATURE.search(lines[0])


def statements(text: str, header: str = "") -> list[str]:
    """What a parsed text states, one statement each: the sentences of its paragraphs, its list
    items, and its table rows read with their header (``column: value; ...``; ``header`` is a
    table header row kept apart from the text, if any). Headings (a short line without a final
    stop) state nothing and are left out."""
    return [s.text for s in statement_spans(text, header)]


class Statement(NamedTuple):
    """One statement of a text and where it stands: ``[start, end)`` in the text (a list item's
    range without its bullet, a table row's its line), and for a table row the range of the
    header row it is read with (``head``; a header given apart sits before the text, as
    ``f"{header}\\n{text}"`` places it, at ``[-len(header) - 1, -1)``)."""

    start: int
    end: int
    text: str
    head: tuple[int, int] | None = None


#: how a table row reads with its header: ``column: value`` cells joined by ``; ``
_CELL, _ROW_CELLS = ": ", "; "


def row_cells(statement: str) -> tuple[tuple[str, str], ...]:
    """A table row's cells as :func:`statement_spans` reads a row with its header, each
    ``(column, value)``; empty for any other statement (fewer than two cells, or one without a
    column).

    >>> row_cells("Payment method: PayPal; Fee: none")
    (('Payment method', 'PayPal'), ('Fee', 'none'))
    >>> row_cells("Note: this is prose.")
    ()
    """
    cells = statement.split(_ROW_CELLS)
    pairs = tuple(tuple(c.split(_CELL, 1)) for c in cells if _CELL in c)
    return pairs if len(cells) >= 2 and len(pairs) == len(cells) else ()  # type: ignore[return-value]


def statement_spans(text: str, header: str = "") -> list[Statement]:
    """Each statement of :func:`statements`, with where it stands in ``text``."""
    out: list[Statement] = []
    columns = [c.strip() for c in header.split(" | ")] if header else None
    at = 0
    for paragraph in text.split("\n\n"):
        lines: list[tuple[int, str]] = []  # each non-blank line, stripped, with its offset
        pos = at
        for line in paragraph.split("\n"):
            if line.strip():
                lines.append((pos + len(line) - len(line.lstrip()), line.strip()))
            pos += len(line) + 1
        at += len(paragraph) + 2
        if not lines:
            continue
        texts = [line for _, line in lines]
        if all(" | " in line for line in texts):  # a table, or rows of one
            head, where = columns, (-len(header) - 1, -1)
            if head is None or texts[0] == " | ".join(head):
                head, where = [c.strip() for c in texts[0].split(" | ")], (lines[0][0], lines[0][0] + len(texts[0]))
                lines = lines[1:]
            out += [Statement(start, start + len(row), _ROW_CELLS.join(
                f"{col}{_CELL}{val.strip()}" for col, val in zip(head, row.split(" | "))), where)
                for start, row in lines]
        elif all(LIST_ITEM.match(line) for line in texts):
            for start, line in lines:
                bullet = LIST_ITEM.match(line).end()  # type: ignore[union-attr]
                out.append(Statement(start + bullet, start + len(line), line[bullet:]))
        elif heading_like(texts):
            continue  # a heading states nothing
        else:  # sentences of the lines joined by spaces, each mapped back to the text
            joined = " ".join(texts)
            starts = [0]
            for line in texts[:-1]:
                starts.append(starts[-1] + len(line) + 1)

            def where_in(k: int) -> int:
                n = max(i for i, s in enumerate(starts) if s <= k)
                return lines[n][0] + k - starts[n]
            out += [Statement(where_in(s), where_in(e - 1) + 1, joined[s:e]) for s, e in sentence_spans(joined)]
    return [s for s in out if len(s.text) > 2]


_SUFFIXES = ("ational", "ization", "fulness", "iveness", "ements", "ments", "ement", "ment", "ings",
             "ing", "edly", "ied", "ies", "ed", "es", "ly", "s")


# British spellings, folded into American ones so that "behaviour" meets "behavior" and
# "initialise" meets "initialize"
_BRITISH_OUR = re.compile(r"(?<=[ivlbnmd])our(s|ed|ing|ite|ites|able)?$")
_BRITISH_ISE = re.compile(r"(?<=ali|ani|imi|ori|iti|ari|oni|eni|gni|emi|omi)s(e|es|ed|ing|ation|ations|er|ers)$")
_NOT_BRITISH = frozenset({"flour", "flours", "devour", "devours", "devoured", "devouring", "amour", "dour"})


def stem(word: str) -> str:
    """A light suffix-stripping stemmer (so ``refunds``, ``refunded`` and ``refund`` meet); it
    keeps at least four letters, leaves digits alone, and folds British spellings into American
    ones (``behaviour`` is ``behavior``, ``initialised`` is ``initialized``)."""
    word = word.lower()
    if any(ch.isdigit() for ch in word):
        return word
    if word not in _NOT_BRITISH:
        word = _BRITISH_ISE.sub(r"z\1", _BRITISH_OUR.sub(r"or\1", word))
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)]
            break
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


_QUANTITY = re.compile(
    r"(?<![\w.])(\d+(?:[.,]\d+)?)(?:\s*[-\u2013]\s*(\d+(?:[.,]\d+)?))?\s*[- ]?"
    r"(%|percent|eur|euro|euros|usd|\$|days?|weeks?|months?|years?|hours?|minutes?|business days?|"
    r"kg|g|km|cm|mm|m|gb|mb|tokens?|items?)?\b", re.IGNORECASE)


def quantities(text: str) -> list[tuple[str, str]]:
    """Numbers with their units, as ``(number, unit)``: ``"within 30 days"`` gives
    ``[("30", "day")]``; a range ``"3-5 business days"`` gives ``("3-5", "business day")``.
    Units are lower-cased and singular; a bare number has the unit ``""``."""
    out = []
    for match in _QUANTITY.finditer(text):
        number = match.group(1) + (f"-{match.group(2)}" if match.group(2) else "")
        unit = (match.group(3) or "").lower()
        unit = {"euro": "eur", "euros": "eur", "percent": "%", "$": "usd"}.get(unit, unit)
        if unit.endswith("s") and unit not in ("%",):
            unit = unit[:-1]
        out.append((number.replace(",", "."), unit))
    return out


_ASKS_COUNT = re.compile(r"\bhow (?:many|much) ([^\W\d_]+)", re.IGNORECASE)
_ASKS_AMOUNT = re.compile(r"\bhow (?:long|large|big|often|much)\b|\bwhat is the (?:maximum|minimum|largest|smallest) "
                          r"(?:number|size|length|count|value)\b", re.IGNORECASE)
_ASKS_UNIT = re.compile(r"\bin (milliseconds|seconds|minutes|hours|days|bytes|kilobytes|megabytes|percent)\W*$",
                        re.IGNORECASE)
#: an amount: a number standing alone, negative ("-1"), a range ("5-10"), before its unit
#: ("16-byte", "100ms", "10MB", "2x"); not a digit inside a name ("sqlite3", "bpo-32269", "utf-8",
#: "x86_64"), an ordinal ("3rd"), a version ("3.6.18", "HTTP/1.1", or after "version", "release",
#: "Python", "SQLite") or an ISO date ("2009-09-11")
_UNIT_SUFFIX = r"(?:[kmgt]i?b|[kmgt]|[mun]s|s|secs?|mins?|h|hrs?|x|px|%)"
_NUMBER = re.compile(r"(?<![\w./-])(?<!version )(?<!release )(?<!python )(?<!sqlite )"
                     r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?:\s?[-\u2013]\s?\d+(?:\.\d+)?)?"
                     r"(?![\w.]*\d)(?!-\d)(?=" + _UNIT_SUFFIX + r"?\b|-[^\W\d]|\W|$)|"
                     r"\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
                     r"(?:hundred|thousand|million|billion|dozen)s?|once|twice|unlimited|no limit)\b", re.IGNORECASE)

#: what "How many ..." counts in, when the answer must name it too ("How many bytes ..." is not
#: answered by "16 times"); any other noun ("How many people ...") is answered by any number
#: ("millions of users")
MEASURES = frozenset(stem(w) for w in """bit byte kilobyte megabyte gigabyte terabyte kib mib gib
    nanosecond microsecond millisecond second minute hour day week month year digit character
    page row column time retry attempt""".split())


def asked_quantity(question: str) -> str | None:
    """What a question asking for an amount must be answered with: the stem of its unit
    (``"How many bytes ..."`` gives ``"byte"``, ``"... in milliseconds?"`` gives ``"millisecond"``),
    ``""`` for a number of any unit (``"How long ..."``, ``"What is the maximum size ..."``), or
    None when the question does not ask for an amount."""
    unit = _ASKS_UNIT.search(question)
    if unit:
        return stem(unit.group(1).lower())
    count = _ASKS_COUNT.search(question)
    if count:
        word = stem(count.group(1).lower())
        return word if word in MEASURES else ""
    return "" if _ASKS_AMOUNT.search(question) else None


_ASKS_DEFAULT = re.compile(r"\bdefaults?\b|\bout of the box\b|\bunless (?:I|we|you) (?:set|change)\b", re.IGNORECASE)


def asks_default(question: str) -> bool:
    """Whether a question asks what holds when nothing is set: "by default", "the default value",
    "out of the box".

    >>> asks_default("What is work_mem set to out of the box?"), asks_default("What does work_mem do?")
    (True, False)
    """
    return _ASKS_DEFAULT.search(question) is not None


def states_default(text: str) -> bool:
    """Whether a statement says what holds by default ("The default is 200.", "-1 (the default)
    disables ...", "This is the default.", "Default: 5"), not one using the word as a modifier.

    >>> states_default("The default is one minute (1min)."), states_default("In the default configuration, x.")
    (True, False)
    """
    return _STATES_DEFAULT.search(text) is not None


#: "default" as what holds ("The default is", "defaults to", "(the default)", "by default",
#: "Default: 5"), not as a modifier ("In the default configuration, ...")
_STATES_DEFAULT = re.compile(r"\bdefault(?: value| setting)? (?:is|are|was|will be)\b|\bdefaults? to\b|"
                             r"\b(?:is|are|was) (?:the|its) default\b|\((?:the |by )?default\b|\bby default\b|"
                             r"\bdefault:", re.IGNORECASE)


def states_quantity(text: str, unit: str) -> bool:
    """Whether ``text`` states a number, and (given a unit stem) names that unit too."""
    if not _NUMBER.search(text):
        return False
    return not unit or unit in {stem(t) for t in content_terms(text)}


_ASKS = re.compile(r"^(?:what|where|when|which|who|whom|whose|why|how|does|do|did|is|are|was|were|can|could|"
                   r"should|will|would|may|might|must|has|have|had)\b", re.IGNORECASE)
_JOINS = re.compile(r"\s*;\s*|,?\s+and\s+(?=(?:what|where|when|which|who|whom|why|how|does|do|is|are|can|could|"
                    r"should|will|would|may|might|must)\b)", re.IGNORECASE)


_ELLIPSIS = "\ue000"  # "..." while a question is cut into sentences: an elision ends none


def _asks(clause: str) -> bool:
    """Whether a clause opens with a question word written as one (``WHERE`` opens a line of SQL)."""
    m = _ASKS.match(clause)
    return m is not None and not m.group(0).isupper()


def asking(question: str) -> str:
    """The sentences of a question that ask, in order: those ending with ``?``, and those with a
    clause opening with a question word ("If I set repo1-retention-full=2, how many full backups
    does it keep."); the whole question when none does. The others tell the asker's situation: "I'm
    range-partitioning events by created_at and want PRIMARY KEY (id), but CREATE TABLE rejects it.
    Why?" asks only "Why?". A sentence may open in lower case, as people type ("... cuts our ORM
    queries off halfway. any way to see the full text?").

    >>> asking("Our database runs with en_US.UTF-8. What index do I need?")
    'What index do I need?'
    """
    told = _TYPED_STOP.split(question.strip().replace("...", _ELLIPSIS))
    asked = [s.replace(_ELLIPSIS, "...") for s in told
             if s.rstrip().endswith("?") or any(_asks(c.strip()) for c in re.split(r"[,;:]\s+", s))]
    return " ".join(asked) if asked else question


#: where a sentence of a question ends: a stop and a space, whatever case follows ("halfway. any way")
_TYPED_STOP = re.compile(r"(?<=[.!?])\s+")


def split_question(question: str) -> tuple[str, ...]:
    """The parts of a compound question: its sentences, and clauses joined by ``;`` or by ``and``
    before a question word, each with at least two content words (``What does that mean?`` is
    no part of its own). A part that asks ends with ``?``: one that opens with a question word
    (``WHERE`` in capitals opens a line of SQL), or the last clause of a sentence that ends with
    one ("On version 15, does ...?"). An elision (``sum(amount) ... WHERE``) ends no sentence.
    One part: the question is not compound."""
    parts = []
    for sentence in sentences(question.strip().replace("...", _ELLIPSIS)):
        clauses = _JOINS.split(sentence)
        for n, clause in enumerate(clauses, start=1):
            clause = clause.strip().rstrip("?").strip()
            if len(content_terms(clause)) < 2:
                continue
            asks = _asks(clause) or (n == len(clauses) and sentence.rstrip().endswith("?"))
            part = clause[0].upper() + clause[1:] + ("?" if asks else "" if clause.endswith(".") else ".")
            parts.append(_standing_alone(part.replace(_ELLIPSIS, "..."), parts[-1] if parts else ""))
    return tuple(parts)


#: a follow-up that asks the part before it again of something else: "What about VACUUM FULL?"
_FOLLOW_UP = re.compile(r"^(?:what|how) about\s+(?P<other>.+?)\?$", re.IGNORECASE)
#: a part whose subject is the one of the part before it: "Is that a cap for the whole query?"
_BACK_TO = re.compile(r"^(?:is|are|was|were|does|do|did|can|could|will|would|should|has|have)\s+"
                      r"(?P<pronoun>it|that|this|they)\b(?!['\u2019])", re.IGNORECASE)


#: an API name: a dotted name (``sqlite3.threadsafety``), a called one (``round(``) or one with an
#: underscore (``foreign_keys``)
_API_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?=\()|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z]\w*_\w*")


#: what a part is about, by the first of: an API name (:data:`_API_NAME`: ``work_mem``,
#: ``os.path``, ``round(``), a run of capitalised SQL words (``ALTER SYSTEM SET``, ``VACUUM``)
_SUBJECT = re.compile(_API_NAME.pattern + r"|\b[A-Z]{2,}(?:\s+[A-Z]{2,})*\b")


def _standing_alone(part: str, before: str) -> str:
    """A part of a compound question made to stand alone, as it is searched and read on its own: a
    pronoun opening it stands for the subject of the part before ("What is work_mem set to out of
    the box, and is that a cap for the whole query?": "Is work_mem a cap for the whole query?"),
    and "What about X?" asks the part before of X ("Does VACUUM block ...? What about VACUUM
    FULL?": "Does VACUUM FULL block ...?"; with no subject X shares a word with, the part before is
    kept ahead of it). Unchanged when the part before has no subject."""
    subject = _SUBJECT.search(before) if before else None
    if subject is None:
        return part
    follow = _FOLLOW_UP.match(part)
    if follow is not None:
        other = follow.group("other")
        if set(content_terms(other)) & set(content_terms(subject.group())):
            return before[:subject.start()] + other + before[subject.end():]
        return f"{before} {part}"
    back = _BACK_TO.match(part)
    if back is not None:
        return part[:back.start("pronoun")] + subject.group() + part[back.end("pronoun"):]
    return part


@functools.lru_cache(maxsize=4096)
def api_names(text: str) -> frozenset[str]:
    """The API names a text mentions (``random.gauss()`` is ``random.gauss``); a dotted name needs
    two letters in each part ("e.g" is none)."""
    return frozenset(n for n in _API_NAME.findall(text)
                     if "." not in n or all(len(part) >= 2 for part in n.split(".")))


@functools.lru_cache(maxsize=65536)
def documents_name(heading: str, names: frozenset[str]) -> bool:
    """Whether the last of a statement's headings is the entry of one of the names (a reference
    manual's ``classmethod datetime.fromisoformat(date_string)``; not ``date.fromisoformat``). A
    label ending in a colon under the entry ("Parameters:", "Returns:") is no heading of its own:
    the one above it is read."""
    parts = heading.split(" > ")
    while len(parts) > 1 and parts[-1].rstrip().endswith(":"):
        parts.pop()
    return any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", parts[-1]) for n in names)


#: an identifier numbered within a family: letters, an optional dash or underscore, digits
#: ("NW-1024", "RFD-4021", "bpo-46845", "SHA256"); the letters two or more ("x1" is a variable);
#: the answerability check's name shape ``numbered`` too
NUMBERED_ID = r"(?<![\w.-])([A-Za-z]{2,12}[-_]?)(\d+)(?![\w-]|\.\d)"
_NUMBERED = re.compile(NUMBERED_ID)


def numbered_ids(text: str) -> dict[str, frozenset[str]]:
    """The numbered identifiers a text names, by family (the letters and separator, lower-cased):
    "Error RFD-4021 or RFD-4090" -> ``{"rfd-": {"rfd-4021", "rfd-4090"}}``."""
    out: dict[str, set[str]] = {}
    for m in _NUMBERED.finditer(text):
        family = m.group(1).lower()
        out.setdefault(family, set()).add(family + m.group(2))
    return {k: frozenset(v) for k, v in out.items()}


def names_another(text: str, asked: dict[str, frozenset[str]]) -> bool:
    """Whether a text is about another member of a family the question names a member of: it
    names an identifier of that family and none the question names ("Error RFD-4021 means ..."
    for a question about RFD-5003; "Order NW-1042 was paid by credit card." for one about
    NW-1024)."""
    if not asked:
        return False
    for family, ids in numbered_ids(text).items():
        if family in asked and not ids & asked[family]:
            return True
    return False
