"""Answerability by the question's distinctive names: a question about a tool, an extension, a
function or a version that nothing the asker may read mentions cannot be answered from the
sources, however many sentences on nearby subjects the context holds.

A distinctive name is what a person would look up verbatim: a dotted or called name
(``os.urandom()``), snake_case, CamelCase, an option (``--strict``), an ALL-CAPS identifier
(``MERGE``, ``PL/SQL``), a quoted term, a version number (``3.34.1``), or a capitalised word that
does not open the question (``PyPy``, ``Tcl``). A name is covered when some chunk the asker may
read holds it as a phrase (the store's keyword index, read with the principal's groups:
:meth:`ragdx.protocols.Store.bm25`), or, for a version number, when a document version's label
starts with it. The idea is the "unanswerable by missing entity" check of question-answering
systems (Rajpurkar et al., "Know What You Don't Know: Unanswerable Questions for SQuAD", ACL
2018, whose plausible-but-unanswerable questions mostly swap in an entity the paragraph lacks).
"""

from __future__ import annotations

import re
from typing import Sequence

from ragdx.protocols import Store

_VERSION = r"\d+(?:\.\d+)+"
#: the name shapes, longest first so that ``os.urandom()`` is one name, not ``os`` and ``urandom``
_NAME = re.compile("|".join((
    r"(?P<quoted>\"[^\"]{2,60}\"|\u201c[^\u201d]{2,60}\u201d)",
    r"(?<![\w.-])(?P<option>--?[a-z][\w-]+)",
    r"(?P<dotted>\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?)",
    r"(?P<called>\b[A-Za-z_]\w*\(\))",
    r"(?P<slashed>\b[A-Z][A-Za-z]*/[A-Z][A-Za-z]*\b)",
    r"(?P<snake>\b[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+\b)",
    rf"(?P<version>(?<![\w.]){_VERSION}(?![\w]))",
    r"(?P<camel>\b[A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b)",
    r"(?P<caps>\b[A-Z][A-Z0-9]{1,}\b)",
    r"(?P<capital>\b[A-Z][a-z][a-z0-9]+\b)",
)))

#: capitalised words that name nothing (they open clauses or are common in questions)
STOP_CAPITALS = frozenset("""According After Also And Before But Can Could Did Do Does For From Has Have How
If In Is It May Must On Or Should Since The Then There These This Those To Under Was Were What When Where Which
While Who Whom Whose Why Will With Would Yes No""".split())


def distinctive_names(question: str) -> tuple[str, ...]:
    """The question's distinctive names, in order, each once (without quotes, a possessive or a
    trailing ``()``).

    >>> distinctive_names("How many bytes does uuid.uuid4() read from os.urandom()?")
    ('uuid.uuid4', 'os.urandom')
    """
    names: dict[str, None] = {}
    for match in _NAME.finditer(question):
        kind, text = match.lastgroup, match.group()
        if kind == "capital" and (match.start() == 0 or text in STOP_CAPITALS):
            continue
        if kind == "dotted" and all(len(part) == 1 for part in text.split(".")):
            continue  # an abbreviation ("e.g.", "i.e."), not a name
        text = text.strip("\"\u201c\u201d")
        text = re.sub(r"\(\)$", "", text)
        text = re.sub(r"['\u2019]s$", "", text)
        if re.search(r"[^\W_]", text):  # punctuation alone ("?:") has no word to look up
            names.setdefault(text, None)
    return tuple(names)


def is_version(name: str) -> bool:
    """Whether a name is a version number (``3.9``, ``3.34.1``)."""
    return re.fullmatch(_VERSION, name) is not None


class NameCoverage:
    """Which of a question's distinctive names nothing the asker may read mentions.

    Args:
        store: the store, read through its keyword index with the asker's groups.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._labels: tuple[int, frozenset[str]] | None = None

    def _version_labels(self) -> frozenset[str]:
        """Every document version's label (labels are not content: no access check needed),
        kept until the store changes."""
        if self._labels is None or self._labels[0] != self.store.index_version:
            self._labels = (self.store.index_version, frozenset(v.document.version for v in self.store.versions()))
        return self._labels[1]

    def covered(self, name: str, groups: tuple[str, ...]) -> bool:
        """Whether some chunk these groups may read holds ``name`` as a phrase (or, for a version
        number, some document version is labelled with it)."""
        if is_version(name) and any(label == name or label.startswith(name + ".")
                                    for label in self._version_labels()):
            return True
        return bool(self.store.bm25([name], groups, 1, versions=None))

    def uncovered(self, names: Sequence[str], groups: tuple[str, ...]) -> tuple[str, ...]:
        """The names that nothing these groups may read mentions, in the question's order."""
        return tuple(n for n in names if not self.covered(n, groups))
