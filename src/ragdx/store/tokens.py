"""FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer re-implemented in Python: the tokens
SQLite's keyword index holds, for backends that keep their own term statistics (the PostgreSQL
store ranks by BM25 over exactly these tokens) and for the parity tests against bm25s. Needs
PyStemmer (extras ``pg`` and ``parity``).

Checked token for token against FTS5's own index on the Python documentation (0 of 65,648
fields differ). FTS5's stemmer departs from PyStemmer's "porter" in five places, each
reproduced below: short and long tokens are not stemmed, bytes are stemmed (a non-ASCII
character counts as consonants), step 2 has LOGI -> LOG and BLI -> BLE, any final double
consonant but l, s, z is undoubled after -ed/-ing, and bare "ies"/"sses" lose one letter.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections import Counter
from typing import Any

from ragdx.errors import MissingExtraError
from ragdx.types import Chunk

__all__ = ["fold", "fts5_porter", "fts5_tokens"]

try:
    import Stemmer
except ImportError:  # the functions below raise when called
    Stemmer = None

_WORD = re.compile(r"[^\W_]+")  # unicode61: letters and digits are token characters
_SNOWBALL: Any = None


def _snowball() -> Any:
    global _SNOWBALL
    if _SNOWBALL is None:
        if Stemmer is None:
            raise MissingExtraError("pg", "FTS5's tokenizer in Python (PyStemmer)")
        _SNOWBALL = Stemmer.Stemmer("porter")
    return _SNOWBALL


def fold(token: str) -> str:
    """unicode61's folding: simple case folding (one code point to one), then diacritics off."""
    if token.isascii():
        return token.lower()
    # str.casefold is full folding ("ß" -> "ss"); FTS5 keeps one code point for one ("ſ" -> "s")
    token = "".join(c.casefold() if len(c.casefold()) == 1 else c.lower() for c in token)
    token = unicodedata.normalize("NFD", token)
    return unicodedata.normalize("NFC", "".join(c for c in token if not unicodedata.combining(c)))


def _consonant(word: str, i: int) -> bool:
    if word[i] in "aeiou":
        return False
    return not (word[i] == "y" and i > 0 and _consonant(word, i - 1))


def _measure_above_0(stem: str) -> bool:
    """Porter's m > 0: a vowel followed by a consonant somewhere in the stem."""
    seen_vowel = False
    for i in range(len(stem)):
        if not _consonant(stem, i):
            seen_vowel = True
        elif seen_vowel:
            return True
    return False


def _after_step_1b(word: str) -> str | None:
    """The stem once step 1a and a firing step 1b ("-ed", "-ing") are applied, else None."""
    if word.endswith("s"):
        if word.endswith("es"):
            sses_or_ies = (len(word) > 4 and word.endswith("sses")) or (len(word) > 3 and word[-3] == "i")
            word = word[:-2] if sses_or_ies else word[:-1]
        elif not word.endswith("ss"):
            word = word[:-1]
    if word.endswith("eed"):
        return None
    for suffix in ("ed", "ing"):
        stem = word[:-len(suffix)]
        if word.endswith(suffix) and any(not _consonant(stem, i) for i in range(len(stem))):
            return stem
    return None


def _porter_bytes(word: str) -> str:
    if word in ("ies", "sses"):  # FTS5's step 1a needs a letter before these suffixes
        return word[:-1]
    stem = _after_step_1b(word)
    if stem and len(stem) >= 2 and stem[-1] == stem[-2] and stem[-1] not in "aeiou" "lsz" "bdfgmnprt":
        # FTS5 undoubles any final double consonant but l, s, z after "-ed"/"-ing" (Porter 1980);
        # Snowball only bb dd ff gg mm nn pp rr tt ("ignoring double c, h, j, k, q, v, w, and x")
        stem = stem[:-1]
        return stem if stem.endswith(("s", "ed", "ing")) else _snowball().stemWord(stem)
    stemmed = _snowball().stemWord(word)
    # FTS5 follows Porter's own C version in step 2: (m>0) LOGI -> LOG is added, and
    # (m>0) BLI -> BLE replaces (m>0) ABLI -> ABLE; Snowball's "porter" keeps the 1980 paper
    if stemmed.endswith("logi") and _measure_above_0(stemmed[:-4]):
        return stemmed[:-1]
    if stemmed.endswith("bli") and _measure_above_0(stemmed[:-3]):
        return _snowball().stemWord(stemmed[:-1] + "e")  # steps 3 to 5 on "...ble"
    return stemmed


@functools.lru_cache(maxsize=None)
def fts5_porter(word: str) -> str:
    """FTS5's Porter stemmer on one folded token: PyStemmer's ``porter`` plus FTS5's departures.

    FTS5 stems bytes: tokens under 3 or over 64 UTF-8 bytes pass through unchanged, and every
    non-ASCII byte counts as a consonant (so the word is stemmed as Latin-1 text of its bytes).
    """
    data = word.encode()
    if not 3 <= len(data) <= 64:
        return word
    return _porter_bytes(data.decode("latin-1")).encode("latin-1").decode()


def fts5_tokens(text: str) -> list[str]:
    """The tokens FTS5's ``porter unicode61 remove_diacritics 2`` indexes for ``text``, in order."""
    return list(map(_fts5_token, _WORD.findall(text)))


@functools.lru_cache(maxsize=1 << 18)
def _fts5_token(word: str) -> str:
    """One word folded and stemmed (cached: a corpus repeats its words, and folding is a regex
    substitution per word)."""
    return fts5_porter(fold(word))


def _lexeme(token: str) -> str:
    """A token as a tsvector lexeme (PostgreSQL refuses lexemes of 2 KB and more: those are
    replaced by their hash, in the index and in queries alike)."""
    return token if len(token.encode()) < 2000 else "#" + hashlib.sha1(token.encode()).hexdigest()


def chunk_terms(chunk: Chunk) -> tuple[list[str], dict[str, list[int]], int]:
    """A chunk's distinct lexemes, its term frequencies ``term -> [in prefix, in text]`` and its
    length in tokens over both columns (what FTS5 indexes for the chunk)."""
    prefix, text = fts5_tokens(chunk.prefix), fts5_tokens(chunk.text)
    tf = {token: [0, n] for token, n in Counter(text).items()}
    for token, n in Counter(prefix).items():
        tf.setdefault(token, [0, 0])[0] = n
    # a token under 500 characters is under 2,000 bytes: its own lexeme (no encoding per token)
    return sorted(t if len(t) < 500 else _lexeme(t) for t in tf), tf, len(prefix) + len(text)


@functools.lru_cache(maxsize=1 << 18)
def tsv_lexeme(token: str) -> str:
    """A lexeme quoted for tsvector's text input (cached: a corpus repeats its words)."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"
