"""The version a question names ("On version 15, ..."), and the filter it puts on retrieval.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ragdx.types.corpus import DocStatus


_VERSION_LABEL = r"v?(\d+(?:[.-]\d+)+)"


_VERSION_END = r"(?![\w]|[.-]\d)"


#: a version label in running text, with a possessive
_VERSION_WORD = re.compile(rf"(?<![\w.-]){_VERSION_LABEL}(?:['\u2019]s)?{_VERSION_END}")


#: a whole number standing alone or after a product's letters ("17", "v15", "PG15", "17's"): a
#: version only when a store's label has it as its leading part and the words around it say so
#: (:func:`_major_versions`)
_WHOLE = re.compile(r"(?<![\w.,-])([A-Za-z]{0,12})(\d+)(?!\w|[.,-]\d)((?:['\u2019]s)?)")


_LEADING = re.compile(r"(\d+)(?:[.-]|$)")


#: words after which a number counts something, not a version ("Table 17", "error 15")
_COUNTED = frozenset(
    "chapter chapters section sections table tables figure figures page pages step steps item items "
    "line lines example examples appendix part parts rule rules rfc iso port error errno code no number "
    "bit bits byte bytes level levels column columns row rows argument arguments parameter parameters "
    "option options limit top".split())


#: words before a number that make it a version ("version 15", "release 17")
_VERSION_CUES = frozenset({"version", "versions", "release", "releases", "major"})


#: words after a number that leave it a version ("15 and 17", "17 or later", "15 docs")
_VERSION_FOLLOWERS = frozenset({"and", "or", "to", "through", "vs", "versus", "onward", "onwards",
                                "later", "earlier", "newer", "older", "docs", "documentation", "manual",
                                "release", "series", "branch"})


#: words before a number that, with punctuation after it, make it a version ("After moving to 17,
#: ...", "Is it the same on 15?")
_VERSION_PLACES = frozenset({"on", "in", "to", "from", "into", "since", "before", "after", "until", "between",
                             "and", "or", "vs", "versus", "under", "with"})


#: the most words before and after the version in an opening clause ("After moving to 17, ...")
_CLAUSE_BEFORE, _CLAUSE_AFTER = 7, 2


def _major_versions(question: str, known: frozenset[str]) -> list[tuple[int, int, str]]:
    """The whole numbers of the question that name a version: the leading part of a label in
    ``known`` (``15`` of ``15`` or ``15.4``), preceded by a version word ("version 15"), written
    ``v15``, ``PG15`` or ``17's``, or after a product's name ("PostgreSQL 17"); or followed by a
    word such as "and" or "later" ("15 or later"); or after a word of place or change with
    punctuation or the end of the question after it ("After moving to 17, ..."; "the same on
    15?"). Never after a word that counts ("Table 17"); a number before another word ("15
    seconds") needs one of the first.
    Each as (start, end with a possessive, label)."""
    majors = {m.group(1) for m in map(_LEADING.match, known) if m}
    # a number every label starts with tells no version from another ("Python 3" of 3.9.2 and 3.11.2)
    majors = {n for n in majors if any(not _starts(label, n) for label in known)}
    out = []
    for m in _WHOLE.finditer(question):
        if m.group(2) not in majors:
            continue
        before = question[:m.start()].split()
        prev = before[-1].strip("(\"'\u2018\u201c") if before else ""
        if prev.lower() in _COUNTED:
            continue
        after = question[m.end():]
        follows = after.split(maxsplit=1)[0].lower() if after.strip() else ""
        stated = bool(m.group(1) or m.group(3)) or prev.lower() in _VERSION_CUES \
            or (prev[:1].isupper() and prev.isalpha() and len(before) > 1)
        placed = prev.lower() in _VERSION_PLACES and (not after.strip() or after.lstrip()[:1] in ",;:?.!)")
        if stated or placed or follows in _VERSION_FOLLOWERS:
            out.append((m.start(), m.end(), m.group(2)))
    return out


def _starts(label: str, named: str) -> bool:
    """Whether a version label is, or starts with, a label a question names ("3.9" names "3.9.2")."""
    return label == named or label.startswith(named + ".") or label.startswith(named + "-")


def _named_spans(question: str, known: frozenset[str]) -> list[tuple[int, int, str]]:
    """Each version label the question names, in order, as (start, end with a possessive, label);
    a value passed to a call ("round(2.5)", "connect(timeout=5.0)") or written in a quoted literal
    ("insert '2024-03-10 08:00:00+05'") names none."""
    spans = [(m.start(), m.end(), m.group(1)) for m in _VERSION_WORD.finditer(question)]
    spans += _major_versions(question, known) if known else []
    quoted = [m.span() for m in _LITERAL.finditer(question)
              if len(next(g for g in m.groups() if g is not None).split()) <= _LITERAL_WORDS]
    return sorted(span for span in spans if not _in_call(question, span[0])
                  and not any(a < span[0] < b for a, b in quoted))


#: a quoted literal: the asker's data ('2024-03-10', "v1.2", `3.11`, \u20182024-03-10\u2019, \u201c3.11\u201d), a
#: quote opening after no letter or digit and closing before none (the apostrophes of "I'm on 3.9,
#: it's ..." open none), with no clause punctuation inside ("the '90s ...; on 3.11 do the admins'
#: scripts" is none)
_LITERAL = re.compile("(?<![\\w])(?:" + "|".join(f"{o}([^{c}\\n;?!]*?){c}" for o, c in (
    ("'", "'"), ('"', '"'), ("`", "`"), ("\u2018", "\u2019"), ("\u201c", "\u201d"))) + ")(?![\\w])")


#: the most words a quoted literal holds (a longer "quote" is an apostrophe's stray match)
_LITERAL_WORDS = 6


def _in_call(text: str, at: int) -> bool:
    """Whether ``at`` falls inside a call's parentheses ("round(", "print(round(2.5), "), not
    inside a parenthesis of prose ("Python (3.11)")."""
    opened: list[bool] = []
    for i, ch in enumerate(text[:at]):
        if ch == "(":
            opened.append(i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))
        elif ch == ")" and opened:
            opened.pop()
    return any(opened)


@dataclass(frozen=True, slots=True)
class VersionFilter:
    """Which document versions a search may return: by default the current ones, and any version
    whose label the question names ("In SQLite 3.34.1, ..." names ``3.34.1``; "Python 3.9" names
    every label that starts with ``3.9.``; "the 2024-01 policy" names ``2024-01``; with the store's
    labels known, "On version 15, ..." or "After moving to 17, ..." names ``15`` or ``17`` and every
    ``15.x``). Versions are checked inside retrieval, as access is, and again by governance.

    Args:
        current_only: only versions in force (besides the named ones); False: every version.
        named: version labels (or their leading parts) the question names.
    """

    current_only: bool = True
    named: tuple[str, ...] = ()

    @classmethod
    def for_question(cls, question: str, *, current_only: bool = True,
                     known: Iterable[str] = ()) -> "VersionFilter":
        """The filter for a question. ``known``: the store's version labels; a whole number names a
        version only when one of them starts with it (:func:`_major_versions`); a dotted label
        ("3.11", "2024-01") names one whatever the store holds."""
        spans = _named_spans(question, frozenset(known))
        return cls(current_only, tuple(dict.fromkeys(label for _, _, label in spans)))

    @staticmethod
    def topic(question: str, known: Iterable[str] = ()) -> str:
        """The question without the version it names: what it asks, for reading sentences (the
        version chooses the documents, and a sentence that merely mentions a version, such as a
        changelog entry, answers nothing). An opening clause that names the version ("In Python
        3.11, ...", "After upgrading to SQLite 3.40, ...": at most seven words before the label and
        two after it) is dropped; elsewhere the version label alone is ("What does Python 3.9's
        gauss() take?": "What does Python gauss() take?"). ``known`` as for :meth:`for_question`.

        >>> VersionFilter.topic("After upgrading to Python 3.11, how can zip() raise an error?")
        'how can zip() raise an error?'
        >>> VersionFilter.topic("After moving to 17, how is a role granted?", known=["15", "17"])
        'how is a role granted?'
        """
        spans = _named_spans(question, frozenset(known))
        if not spans:
            return question  # names no version (:meth:`for_question`)
        start, end, _ = spans[0]
        comma = question.find(",", end)
        lead = question[:start]
        if comma >= 0 and not re.search(r"[,?]", lead) and "?" not in question[end:comma] \
                and len(lead.split()) <= _CLAUSE_BEFORE \
                and len(question[end:comma].split()) <= _CLAUSE_AFTER:
            return question[comma + 1:].lstrip()
        kept, at = [], 0
        for a, b, _ in spans:
            kept.append(question[at:a])
            at = b
        kept.append(question[at:])
        return " ".join(" ".join(kept).split()) or question

    def names(self, version: str) -> bool:
        """Whether the question names this version label."""
        return any(_starts(version, n) for n in self.named)

    def twins(self, doc_id: str, version: str) -> tuple[str, ...]:
        """The ids this page would have in the versions the question names, when the store keeps
        each version as documents of their own (two doc sites: ``postgresql-15/x.html`` and
        ``postgresql-17/x.html``, both current) and this one is of another version: the id with its
        version label, where it stands whole (not inside a longer number or word), put to each named
        one. () when the question names no version or names this one, or the id does not carry its label.

        >>> VersionFilter(named=("15",)).twins("postgresql-17/x.html", "17")
        ('postgresql-15/x.html',)
        >>> VersionFilter(named=("15",)).twins("postgresql/x.html", "17")
        ()
        """
        if not self.named or not version or self.names(version):
            return ()
        label = re.compile(rf"(?<![\w.]){re.escape(version)}(?![\w]|[.-]\d)")
        if not label.search(doc_id):
            return ()
        return tuple(dict.fromkeys(twin for named in self.named
                                   if (twin := label.sub(lambda _, n=named: n, doc_id)) != doc_id))

    def allows(self, version: str, status: DocStatus | str) -> bool:
        # a store's raw status may be any string (a damaged row): compared with the value, not the member
        return not self.current_only or status == DocStatus.CURRENT.value or self.names(version)
