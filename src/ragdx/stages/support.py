"""The learned support judgement: does an evidence text state what a claim says, in other words?

An LLM's answer paraphrases its sources: "doesn't need" for "is not required", "a month" for
"30 days", two passages folded into one sentence. The lexical checker's rule that 80% of the
claim's content words must stand in the evidence calls most such answers unsupported, and each
of its other rules (numbers, negations, qualifiers) is a veto. Here those rules are *features*,
read against the statement (or the two statements) closest to the claim, and a logistic
regression (Cox, JRSS B 1958) fitted on claims a careful reader judged weighs them.

How a claim is read (:meth:`SupportModel.probability`):

1. A reply word that opens the claim ("No. ...", "Yes, ...") answers a question; it is no fact a
   source states, and is set aside (:func:`ragdx.text.unreplied`).
2. The evidence is cut into statements (:func:`ragdx.text.statements`). The premises read are the
   :data:`TOP` statements sharing most of the claim's content words, and the best statement
   joined with the one adding most of the claim's words it lacks: a claim two passages support
   together is read against both.
3. Each premise gives one row of :data:`FEATURES`; the fitted weights give it a probability that
   the premise supports the claim. The claim's probability is the best premise's.

The weights (``support.json`` beside this module) are fitted by ``bench/quality/verdicts.py fit`` on
claims written apart from ragdx's verdict benchmark and claims corrupted from them by rule; the
threshold is set on the benchmark's fit half; its test half is never fitted on
(docs/benchmarks.md, "Verdicts on answers in people's own words"). The packaged cross-encoder's
reading, a cross-encoder fine-tuned on the same claims and bge-small's cosine were measured as
further features, and none was kept: each lowered the share of supported answers called
supported at the same share of unsupported ones.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ragdx.errors import ConfigError
from ragdx.text import STOPWORDS, content_terms, stem, statements, unreplied

__all__ = ["FEATURES", "SUPPORT_FILE", "Premise", "SupportModel", "SupportWeights", "features",
           "load_support_weights", "premises"]

SUPPORT_FILE = Path(__file__).with_name("support.json")

#: a row's columns
FEATURES = ("cover", "missing_numbers", "missing_names", "negation_flip", "antonym", "log_words", "pair",
            "polarity_flips", "widened", "numbers_elsewhere")
#: how many single statements are read as premises (the best by shared content words)
TOP = 3
#: how many (claim, evidence) answers a model keeps
REMEMBERED = 64

#: the words that negate (with a contraction that does: "doesn't", "needn't"; and "none", but
#: not Python's value "None" unless it opens "None of ...")
_NEGATORS = frozenset({"not", "no", "never", "cannot", "nothing", "neither", "nor", "without", "unable",
                       "impossible", "nobody", "nowhere"})
_NEGATION = re.compile(r"\b(?:" + "|".join(sorted(_NEGATORS)) + r"|(?-i:none|None(?= of\b)))\b|n't\b",
                       re.IGNORECASE)
# pairs of words a swap turns into each other; read by their stems
_OPPOSITES = (
    ("before", "after"), ("lower", "upper"), ("lower", "higher"), ("minimum", "maximum"), ("min", "max"),
    ("first", "last"), ("enable", "disable"), ("enabled", "disabled"), ("true", "false"), ("allow", "deny"),
    ("allow", "forbid"), ("allow", "prevent"), ("increase", "decrease"), ("read", "write"), ("reader", "writer"),
    ("client", "server"), ("input", "output"), ("start", "end"), ("begin", "end"), ("open", "close"),
    ("add", "remove"), ("include", "exclude"), ("inner", "outer"), ("left", "right"), ("local", "remote"),
    ("local", "global"), ("ascending", "descending"), ("always", "never"), ("more", "less"), ("more", "fewer"),
    ("larger", "smaller"), ("bigger", "smaller"), ("older", "newer"), ("above", "below"), ("private", "public"),
    ("synchronous", "asynchronous"), ("sync", "async"), ("implicit", "explicit"), ("key", "value"),
    ("required", "optional"), ("encode", "decode"), ("lock", "unlock"), ("start", "stop"), ("shared", "exclusive"),
    ("row", "column"), ("source", "target"), ("source", "destination"), ("success", "failure"),
    ("valid", "invalid"), ("mutable", "immutable"), ("leading", "trailing"), ("prefix", "suffix"),
    ("head", "tail"), ("push", "pull"), ("import", "export"), ("upload", "download"), ("parent", "child"),
    ("primary", "standby"), ("primary", "replica"), ("master", "slave"), ("temporary", "permanent"),
    ("strict", "lenient"), ("short", "long"), ("empty", "full"), ("new", "old"), ("accept", "reject"),
    ("commit", "rollback"), ("send", "receive"), ("sender", "receiver"), ("binary", "text"), ("byte", "character"),
    ("bytes", "str"), ("sorted", "unsorted"), ("signed", "unsigned"), ("inclusive", "exclusive"),
    ("odd", "even"), ("positive", "negative"), ("static", "dynamic"), ("user", "superuser"), ("owner", "superuser"),
    ("insert", "update"), ("insert", "delete"), ("update", "delete"), ("select", "update"), ("table", "index"),
    ("table", "view"), ("row", "table"), ("list", "tuple"), ("list", "dict"), ("set", "list"), ("key", "index"),
    ("thread", "process"), ("file", "directory"), ("stdout", "stderr"), ("stdin", "stdout"), ("utc", "local"),
    ("second", "millisecond"), ("minute", "second"), ("day", "hour"), ("kilobyte", "megabyte"),
    ("kb", "mb"), ("mb", "gb"), ("lowercase", "uppercase"), ("ignore", "raise"), ("warning", "error"),
)
_OPPOSITE: dict[str, frozenset[str]] = {}
for _a, _b in _OPPOSITES:
    _OPPOSITE[stem(_a)] = _OPPOSITE.get(stem(_a), frozenset()) | {stem(_b)}
    _OPPOSITE[stem(_b)] = _OPPOSITE.get(stem(_b), frozenset()) | {stem(_a)}

_NUMBER_WORDS = {"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
                 "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
                 "twice": "2", "once": "1", "hundred": "100", "thousand": "1000", "single": "1", "double": "2"}
#: number words a paraphrase writes as pronouns or adverbs more often than as numbers ("each one",
#: "once a trigger fails", "a single-user server"): a claim's are not read as numbers; a
#: premise's are (a claim's "1" may stand for the evidence's "one")
_PRONOUN_NUMBERS = frozenset({"one", "once", "single"})
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)*(?![\w.]*\d)|\b(?:" + "|".join(_NUMBER_WORDS) + r")\b",
                     re.IGNORECASE)
# a name as code writes it: a call, a dotted or snake_case name, an option (not the tail of a
# hyphenated word: "12-byte", "non-NULL"), camelCase, an upper-case keyword
_NAME = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]+|[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+|\b[A-Za-z]+_\w+"
                   r"|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*|\b[A-Z]{2,}\b|\b\w+(?=\(\))")
#: what the name pattern matches that is no name: Latin abbreviations
_NOT_NAMES = frozenset({"e.g", "i.e", "etc", "vs", "a.k.a", "cf"})


def _numbers(text: str, pronouns: bool = True) -> frozenset[str]:
    """The numbers a text states, thousands separators dropped, number words as digits ("eight",
    "twice"); without the :data:`_PRONOUN_NUMBERS` unless ``pronouns``."""
    out = set()
    for m in _NUMBER.finditer(text):
        word = m.group().lower()
        if pronouns or word not in _PRONOUN_NUMBERS:
            out.add(_NUMBER_WORDS.get(word, word.replace(",", "")))
    return frozenset(out)


def _names(text: str) -> frozenset[str]:
    return frozenset(name for name in (m.group().lower().rstrip(".") for m in _NAME.finditer(text))
                     if len(name) > 2 and name not in _NOT_NAMES)


def _compact(text: str) -> str:
    return "".join(text.split())


def _stems(text: str) -> frozenset[str]:
    return frozenset(stem(t) for t in content_terms(text))


def _negations(text: str) -> int:
    return len(_NEGATION.findall(text))


def _words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z]+", text.lower()))


@functools.lru_cache(maxsize=16)
def _evidence_facts(evidence: str) -> tuple[frozenset[str], str, frozenset[str]]:
    """The whole evidence's names, lower-cased text and numbers: read once per claim, not once per
    premise (a context of many units is the longest text a claim is read against)."""
    return _names(evidence), evidence.lower(), _numbers(evidence)


# a clause's words: a word (with its clitic), a number, or a mark that ends a clause
_TOKEN = re.compile(r"[A-Za-z_]\w*(?:['\u2019][a-z]+)?|\d[\d.,]*\d|\d|[,;:()!?|\u2014\u2013]|\.(?=\s|$)")
# what ends a clause: a mark, or a word that joins two
# (a table's cell separator too: a row cut from its table is read as one run of text)
_CLAUSE_END = frozenset({",", ";", ":", "(", ")", "!", "?", ".", "|", "\u2014", "\u2013", "but", "whereas", "while",
                         "although", "though", "however", "unless", "except", "instead", "so", "because", "since",
                         "and", "or", "which", "if", "when", "then", "therefore"})
# words that state a whole scope; a paraphrase trades one for another ("every" for "all")
_UNIVERSAL = frozenset({"all", "every", "each", "any", "anything", "everything", "entire", "entirely", "whole",
                        "always", "whatever", "whichever", "whenever", "everyone", "anyone", "everywhere",
                        "anywhere", "completely", "fully", "regardless"})
# words that narrow a scope: a claim that states a whole scope where its evidence says one of these widens it
_HEDGES = frozenset({"some", "may", "might", "usually", "typically", "possibly", "often", "certain", "most",
                     "several", "few", "many", "generally", "normally", "sometimes", "potentially", "can", "could",
                     "only"})


@dataclass(frozen=True, slots=True)
class _Clause:
    stems: frozenset[str]  # its content words' stems
    words: frozenset[str]  # its lower-cased words
    negated: bool          # whether a word of it negates ("not", "no", "doesn't")


@functools.lru_cache(maxsize=256)
def _clauses(text: str) -> tuple[_Clause, ...]:
    """A text's clauses (cut at marks and joining words), each with the stems of its content
    words, its words and whether it negates. "None" is Python's value, not a negation."""
    out: list[_Clause] = []
    stems: set[str] = set()
    words: set[str] = set()
    negated = False
    for token in [*_TOKEN.findall(text), "."]:
        low = token.lower()
        if low in _CLAUSE_END:
            if stems:
                out.append(_Clause(frozenset(stems), frozenset(words), negated))
            stems, words, negated = set(), set(), False
            continue
        words.add(low)
        if low in _NEGATORS or low.endswith(("n't", "n\u2019t")) or token == "none":
            negated = True
        elif low[0].isalpha() and low not in STOPWORDS:
            stems.add(stem(low.split("'")[0].split("\u2019")[0]))
    return tuple(out)


def _aligned(clause: _Clause, premise: tuple[_Clause, ...], least: int = 2) -> _Clause | None:
    """The premise's clause sharing most of a claim clause's stems (the first among equals), when it
    shares ``least`` of them and at least half."""
    best = max(premise, key=lambda c: len(c.stems & clause.stems), default=None)
    if best is None:
        return None
    shared = len(best.stems & clause.stems)
    return best if shared >= least and 2 * shared >= len(clause.stems) else None


def _polarity_flips(claim: str, premise: str) -> int:
    """How many of the claim's clauses differ in negation from the premise's clause they align with
    (:func:`_aligned`): "the command isn't attempted" against "no attempt will be made to execute
    the command" is none; "it can be switched back" against "it cannot be switched back" is one."""
    theirs = _clauses(premise)
    return sum(1 for c in _clauses(claim) if (a := _aligned(c, theirs)) is not None and a.negated != c.negated)


def _widened(claim: str, premise: str) -> bool:
    """Whether the claim states a whole scope its premise does not: a clause of the claim that does
    not negate holds a word of :data:`_UNIVERSAL`, and the premise holds none, or the premise's
    clause it aligns with narrows ("some", "may", "usually")."""
    theirs = _clauses(premise)
    anywhere = any(c.words & _UNIVERSAL for c in theirs)
    for c in _clauses(claim):
        if c.negated or not c.words & _UNIVERSAL:
            continue
        a = _aligned(c, theirs, least=1)
        if not anywhere or (a is not None and a.words & _HEDGES and not a.words & _UNIVERSAL):
            return True
    return False


#: the fewest content words of a paragraph without a statement (a sentence without its final stop,
#: as a unit cut from a longer text may be) that make it a statement of its own
PARAGRAPH_WORDS = 4


def _statements(evidence: str) -> list[str]:
    """The evidence's statements (:func:`ragdx.text.statements`), a paragraph at a time; a
    paragraph that states nothing but has :data:`PARAGRAPH_WORDS` content words or more (a heading
    is shorter) is a statement of its own."""
    out = []
    for paragraph in evidence.split("\n\n"):
        said = statements(paragraph)
        if not said and len(content_terms(paragraph)) >= PARAGRAPH_WORDS:
            said = [" ".join(paragraph.split())]
        out += said
    return out


@dataclass(frozen=True, slots=True)
class Premise:
    """What one premise is read as: its text, and whether it joins two statements."""

    text: str
    pair: bool = False
    parts: tuple[str, ...] = ()  # a pair's two statements

    @property
    def statements(self) -> tuple[str, ...]:
        """The evidence's statements it is made of."""
        return self.parts or (self.text,)


def premises(claim: str, evidence: str, top: int = TOP) -> list[Premise]:
    """The premises a claim is read against: the ``top`` statements of the evidence sharing most of
    its content words (the earlier among equals), and the best of them joined with the statement
    that adds most of the claim's words it lacks (when one adds any). A claim the evidence holds
    word for word (white space aside) across several statements is its own one premise."""
    said = _statements(evidence)
    if not said:
        return []
    quoted = _compact(claim)
    if len(said) > 1 and quoted and quoted in _compact(evidence) and not any(quoted in _compact(s) for s in said):
        return [Premise(claim.strip())]  # a quote of several statements rests on itself
    wanted = _stems(claim)
    shared = [_stems(s) & wanted for s in said]
    order = sorted(range(len(said)), key=lambda k: (-len(shared[k]), k))
    out = [Premise(said[k]) for k in order[:top]]
    best = order[0]
    gains = [(len(shared[k] - shared[best]), -k) for k in range(len(said)) if k != best]
    if gains and max(gains)[0] > 0:
        other = -max(gains)[1]
        first, second = sorted((best, other))
        out.append(Premise(f"{said[first]} {said[second]}", True, (said[first], said[second])))
    return out


def features(claim: str, premise: Premise, evidence: str) -> list[float]:
    """One row of :data:`FEATURES` for a claim (its reply word already set aside) and a premise:
    the share of the claim's content words (stems) the premise holds; the claim's numbers the
    premise does not state (a claim's "one", "once" and "single" are no numbers); its names (code
    as code writes it) the premise lacks, and the whole evidence lacks (counted once each);
    whether the claim and the premise differ in negation as wholes; whether a claim word the
    premise lacks has its opposite there ("before" for "after", "client" for "server"); the
    claim's length (log words); whether the premise joins two statements; how many of the claim's
    clauses differ in negation from the premise clause they align with (:func:`_polarity_flips`);
    whether the claim states a whole scope the premise narrows or lacks (:func:`_widened`); the
    claim's numbers the whole evidence does not state.

    Args:
        claim: the claim.
        premise: the premise (:func:`premises`).
        evidence: the whole evidence text (where a name is looked for too).
    """
    wanted, have = _stems(claim), _stems(premise.text)
    claim_words, premise_words = _words(claim), _words(premise.text)
    evidence_names, lower_evidence, evidence_numbers = _evidence_facts(evidence)
    n = max(1, len(wanted))
    numbers, names = _numbers(claim, pronouns=False), _names(claim)
    premise_names, lower_premise = _names(premise.text), premise.text.lower()
    claim_stems, premise_stems = {stem(w) for w in claim_words}, {stem(w) for w in premise_words}
    antonym = any(_OPPOSITE.get(w, frozenset()) & premise_stems for w in claim_stems - premise_stems)
    # a reply word opening a statement of the evidence (a FAQ's "No. ...") negates nothing it states
    neg_claim, neg_premise = _negations(claim), sum(_negations(unreplied(t)) for t in premise.statements)
    return [
        len(wanted & have) / n,
        len(numbers - _numbers(premise.text)),
        sum(1 for m in names if m not in premise_names and m not in lower_premise)
        + sum(1 for m in names if m not in evidence_names and m not in lower_evidence),
        float((neg_claim > 0) != (neg_premise > 0)),
        float(antonym),
        math.log1p(len(claim.split())),
        float(premise.pair),
        float(_polarity_flips(claim, premise.text)),
        float(_widened(claim, premise.text)),
        float(len(numbers - evidence_numbers)),
    ]


@dataclass(frozen=True, slots=True)
class SupportWeights:
    """A fitted judgement: the features it reads, their standardisation, its coefficients, and the
    probabilities from which a claim is ``supported`` and ``uncertain``.

    Args:
        features: the names it reads (of :data:`FEATURES`).
        mean, scale: each feature's mean and standard deviation on the training rows.
        coef: one coefficient per feature, on the standardised values.
        intercept: the bias.
        threshold: the least probability of ``supported``.
        uncertain: the least probability of ``uncertain`` (below it: ``unsupported``).
    """

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float = 0.5
    uncertain: float = 0.3

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """Each row's probability that its premise supports its claim."""
        z = (rows[:, self._columns] - np.asarray(self.mean)) / np.asarray(self.scale)
        return 1.0 / (1.0 + np.exp(-np.clip(z @ np.asarray(self.coef) + self.intercept, -60, 60)))

    def contributions(self, row: np.ndarray) -> dict[str, float]:
        """Each feature's part of one row's log-odds (what a reason names)."""
        z = (row[self._columns] - np.asarray(self.mean)) / np.asarray(self.scale)
        return dict(zip(self.features, (z * np.asarray(self.coef)).tolist()))

    @property
    def _columns(self) -> list[int]:
        return [FEATURES.index(f) for f in self.features]

    @property
    def digest(self) -> str:
        """The first 16 hex digits of a SHA-256 over :meth:`to_dict` (what a trace records)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(self.features), "mean": [round(x, 6) for x in self.mean],
                "scale": [round(x, 6) for x in self.scale], "coef": [round(x, 6) for x in self.coef],
                "intercept": round(self.intercept, 6), "threshold": round(self.threshold, 6),
                "uncertain": round(self.uncertain, 6)}


def load_support_weights(path: str | Path = SUPPORT_FILE) -> SupportWeights:
    """The fitted judgement of a weights file.

    Raises:
        ConfigError: an unreadable file, or one whose features or lengths do not fit.
    """
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))["judgement"]
        w = SupportWeights(tuple(d["features"]), tuple(d["mean"]), tuple(d["scale"]), tuple(d["coef"]),
                           float(d["intercept"]), float(d["threshold"]), float(d["uncertain"]))
        if set(w.features) - set(FEATURES) or not len(w.features) == len(w.mean) == len(w.scale) == len(w.coef):
            raise ValueError("unknown features, or lengths that differ")
        if not 0.0 <= w.uncertain <= w.threshold <= 1.0:
            raise ValueError(f"uncertain {w.uncertain} and threshold {w.threshold} must be 0 <= uncertain <= "
                             "threshold <= 1")
        return w
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"verify: cannot read the support weights {str(path)!r} ({exc})") from None


#: a judgement: the probability, the premise it rests on (None: no premise), each part of its log-odds
Judged = tuple[float, Premise | None, dict[str, float]]


def _remembered(recent: dict[tuple[str, str], Judged], key: tuple[str, str], judge: Callable[[], Judged]) -> Judged:
    """A judgement kept among the last :data:`REMEMBERED` ones (the diagnosis asks where a
    verdict rests after it), else made and kept."""
    if key not in recent:
        if len(recent) >= REMEMBERED:
            recent.pop(next(iter(recent)))
        recent[key] = judge()
    return recent[key]


#: what a feature that weighs against a claim says of it
_REASONS = {
    "missing_numbers": "a number the closest statement does not state",
    "missing_names": "a name the evidence does not hold",
    "numbers_elsewhere": "a number the evidence does not state",
    "negation_flip": "a negation the evidence does not share",
    "polarity_flips": "a clause negated where the evidence's is not, or the reverse",
    "antonym": "a word where the evidence says its opposite",
    "widened": "a wider scope than the evidence",
    "cover": "words the closest statement does not hold",
}


class SupportModel:
    """The support judgement: a claim's probability of being stated by an evidence text.

    Args:
        weights: the fitted judgement (default the shipped ``support.json``).
    """

    def __init__(self, weights: SupportWeights | None = None) -> None:
        self.weights = weights or load_support_weights()
        self._recent: dict[tuple[str, str], Judged] = {}

    @property
    def threshold(self) -> float:
        """The least probability called supported."""
        return self.weights.threshold

    @property
    def uncertain(self) -> float:
        """The least probability called uncertain (below: unsupported)."""
        return self.weights.uncertain

    def rows(self, claim: str, evidence: str) -> tuple[list[Premise], np.ndarray]:
        """The premises of a claim (its reply word set aside) and their feature rows."""
        claim = unreplied(claim)
        found = premises(claim, evidence)
        return found, np.array([features(claim, p, evidence) for p in found], float).reshape(len(found), len(FEATURES))

    def probability(self, claim: str, evidence: str) -> Judged:
        """The claim's probability of being supported, the premise that gives it, and each
        feature's part of that premise's log-odds; ``(0.0, None, {})`` for no premise. The last
        :data:`REMEMBERED` answers are kept: the diagnosis asks where a verdict rests after it."""
        return _remembered(self._recent, (claim, evidence), lambda: self._judged(claim, evidence))

    def _judged(self, claim: str, evidence: str) -> Judged:
        found, rows = self.rows(claim, evidence)
        if not found:
            return 0.0, None, {}
        p = self.weights.probabilities(rows)
        best = int(np.argmax(p))
        return float(p[best]), found[best], self.weights.contributions(rows[best])

    def reason(self, probability: float, premise: Premise | None, parts: dict[str, float], claim: str = "",
               evidence: str = "") -> str:
        """The verdict's reason in words: the probability, what it rests on, and, below the
        threshold, the two features that weighed most against it (the numbers and names at fault,
        given the ``claim`` and the ``evidence``) and the closest statement."""
        if premise is None:
            return "the evidence states nothing"
        head = f"support {probability:.2f} ({'two statements together' if premise.pair else 'one statement'})"
        if probability >= self.weights.threshold:
            return head
        numbers = _numbers(claim, pronouns=False)
        at_fault = {"missing_numbers": sorted(numbers - _numbers(premise.text)),
                    "numbers_elsewhere": sorted(numbers - _numbers(evidence or premise.text)),
                    "missing_names": sorted(_names(claim) - _names(premise.text))}
        named: list[str] = []
        for _, k in sorted((v, k) for k, v in parts.items() if v < 0)[:2]:
            text = _REASONS.get(k)
            if text is not None and not any(n.startswith(text) for n in named):
                named.append(text + (f" ({', '.join(at_fault[k])})" if at_fault.get(k) else ""))
        return head + (f": {'; '.join(named)}" if named else "") + f" (closest: {premise.text[:160]!r})"


class SupportClassifier:
    """A support judgement by a fine-tuned cross-encoder: the probability that a premise states
    a claim is the sigmoid of the model's logit for the pair (premise, claim), read against the
    same premises as :class:`SupportModel` (:func:`premises`), the best one kept.

    The model is an int8 ONNX folder (``model.onnx``, ``tokenizer.json``) fine-tuned with
    ``loss="pointwise"`` (:func:`ragdx.train.cross.fine_tune`), as ``bench/research/train_support.py``
    makes it; its ``training.json`` holds the threshold calibrated for it.

    Args:
        folder: the model folder.
        threshold: the least probability called supported (default the folder's calibrated one).

    Raises:
        ConfigError: no such folder, or no threshold given nor calibrated.
    """

    def __init__(self, folder: str | Path, threshold: float | None = None) -> None:
        self.folder = Path(folder)
        if not (self.folder / "model.onnx").is_file():
            raise ConfigError(f"verify.model: {str(self.folder)!r} is not a support classifier's folder (it has "
                              "no model.onnx): make one with bench/research/train_support.py", key="verify.model")
        if threshold is None:
            try:
                threshold = float(json.loads((self.folder / "training.json").read_text(encoding="utf-8"))["threshold"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"verify.model: {str(self.folder)!r} has no calibrated threshold in training.json "
                                  f"({exc})", key="verify.model") from None
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"verify.model: the threshold of {str(self.folder)!r} is {threshold!r}, not a "
                              "probability between 0 and 1", key="verify.model")
        self.threshold, self.uncertain = threshold, threshold / 2
        from ragdx.encoders.cross import CrossEncoder
        self._model = CrossEncoder(str(self.folder), max_tokens=256)
        self._recent: dict[tuple[str, str], Judged] = {}

    def logit(self, claim: str, premise: str) -> float:
        """The model's logit for one (premise, claim) pair."""
        return float(self._model.score_pairs([(premise, claim)])[0])

    def probability(self, claim: str, evidence: str) -> Judged:
        """As :meth:`SupportModel.probability`; the parts name the model's logit only."""
        return _remembered(self._recent, (claim, evidence), lambda: self._judged(unreplied(claim), evidence))

    def _judged(self, claim: str, evidence: str) -> Judged:
        found = premises(claim, evidence)
        if not found:
            return 0.0, None, {}
        logits = self._model.score_pairs([(p.text, claim) for p in found])
        best = int(np.argmax(logits))
        return 1.0 / (1.0 + math.exp(-float(logits[best]))), found[best], {"logit": float(logits[best])}

    def reason(self, probability: float, premise: Premise | None, parts: dict[str, float], claim: str = "",
               evidence: str = "") -> str:
        """The verdict's reason in words: the probability, what it rests on and, below the
        threshold, the closest statement."""
        if premise is None:
            return "the evidence states nothing"
        head = (f"support {probability:.2f} by the classifier "
                f"({'two statements together' if premise.pair else 'one statement'})")
        return head if probability >= self.threshold else head + f" (closest: {premise.text[:160]!r})"
