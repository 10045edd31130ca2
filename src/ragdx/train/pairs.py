"""Training pairs for a domain cross-encoder, built without labels from a store's own sections.

A technical manual labels itself: a section's heading says what its body answers, an FAQ heading
is a question whose answer follows it, and a sentence's neighbour continues its subject. Three
kinds of group are built (:func:`build_groups`), each a query with one positive text and a few
negatives:

- ``heading``: an informative heading (at least two content words, not a generic one such as
  "Description" or "Options") against the first statements of its own body; an FAQ-style
  heading (one ending in ``?``) is kind ``question``;
- hard negatives from both retrieval channels (Karpukhin et al., "Dense Passage Retrieval",
  EMNLP 2020: negatives a retriever ranks high teach more than random ones): for each channel,
  the first section it ranks for the heading that is neither the heading's own section nor one
  above or below it, read at its statement that shares most words with the heading; plus one
  random section's statement;
- ``neighbour``: a statement against the statement after it in the same section (a negative
  from another document), a smaller share that keeps the model reading sentences, not headings.

The texts are read as the generator's reader reads a sentence (after a heading,
``"heading: sentence"``), but after the *parent* section's heading: a body read after its own
heading would hand the model the answer to a heading query.

No leakage: every query is compared, normalised (:func:`normalise`), with the ``forbidden``
questions (a dev set's), and a group whose query is one of them is dropped and counted.

A labelled question set gives groups closer to the reader's task (:func:`task_groups`, kind
``fit``): a user's question against a candidate sentence that states required evidence, with
the sentences the reader reads beside it that state none as hard negatives (the negatives a
retriever ranks high, as above, but from the very list the model will have to order).

Reference: Nogueira & Cho, "Passage Re-ranking with BERT", 2019 (the cross-encoder trained on
query-passage pairs); Ma et al., "Zero-shot Neural Passage Retrieval via Domain-targeted
Synthetic Question Generation", EACL 2021 (training a ranker on the target domain's own text).
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ragdx.text import content_terms, statements, stem

__all__ = ["Group", "SectionText", "GENERIC_HEADINGS", "build_groups", "normalise", "sections_of", "store_channels",
           "task_groups"]

#: headings that name a kind of section, not a subject (manual pages, admonitions)
GENERIC_HEADINGS = frozenset(
    "name synopsis description options examples example notes note see also bugs author authors tip warning "
    "caution important compatibility files environment return value return values exit status diagnostics "
    "configuration discussion git introduction overview summary parameters outputs inputs table of contents "
    "contents index references history copyright license reporting bugs further reading".split())


@dataclass(frozen=True, slots=True)
class SectionText:
    """One section of a store: its id, document, heading path (outermost first) and body."""

    section_id: str
    doc_id: str
    heading_path: tuple[str, ...]
    body: str


@dataclass(frozen=True, slots=True)
class Group:
    """A query, the text that answers it and texts that do not; ``kind`` says how it was built
    (``heading``, ``question``, ``neighbour``, or ``fit`` for a labelled question), ``sources``
    each negative's origin (``bm25``, ``dense``, ``random``, ``other-document``)."""

    query: str
    positive: str
    negatives: tuple[str, ...]
    kind: str
    sources: tuple[str, ...]
    section_id: str


def normalise(text: str) -> str:
    """Lower case, words only: how queries are compared with the forbidden questions."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _informative(heading: str) -> bool:
    words = normalise(heading)
    return bool(words) and words not in GENERIC_HEADINGS and len(content_terms(heading)) >= 2 \
        and len(heading.split()) <= 20


def _in_place(parent: str, sentence: str) -> str:
    return f"{parent}: {sentence}" if parent and parent not in sentence else sentence


def _body_statements(section: SectionText, least_words: int = 5) -> list[str]:
    heading = section.heading_path[-1] if section.heading_path else ""
    return [s for s in statements(section.body) if len(s.split()) >= least_words and s.strip() != heading]


def _nested(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One heading path is the other's, or above or below it (in the same document)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _closest(query: str, candidates: Sequence[str]) -> str:
    terms = {stem(t) for t in content_terms(query)}
    return max(candidates, key=lambda s: (len(terms & {stem(t) for t in content_terms(s)}), -len(s)))


def build_groups(sections: Sequence[SectionText], channels: Mapping[str, Callable[[str], list[str]]], *,
                 forbidden: Iterable[str] = (), positives: int = 2, neighbours: float = 0.3,
                 random_negative: bool = True, seed: int = 0, dropped: dict[str, int] | None = None) -> list[Group]:
    """The label-free training groups of a corpus (see the module docstring).

    Args:
        sections: the corpus's sections, in document order.
        channels: each retrieval channel by name (``bm25``, ``dense``): a query to the ids of
            the sections it ranks best, best first.
        forbidden: questions that must not be trained on (a dev set's); compared normalised.
        positives: how many of a section's first statements answer its heading (one group each).
        neighbours: neighbour groups, as a share of the heading groups.
        random_negative: add a random section's statement (from another document) to each group.
        seed: the random choices' seed (random negatives, which neighbours).
        dropped: filled with how many queries were dropped, by reason (``forbidden``).

    Returns:
        The groups, heading groups first in section order, then the neighbour groups.
    """
    rng = random.Random(seed)
    banned = {normalise(q) for q in forbidden}
    counts = dropped if dropped is not None else {}
    counts.setdefault("forbidden", 0)
    by_id = {s.section_id: s for s in sections}
    bodies = {s.section_id: _body_statements(s) for s in sections}
    readable = [s for s in sections if bodies[s.section_id]]
    groups: list[Group] = []
    for section in readable:
        heading = section.heading_path[-1] if section.heading_path else ""
        if not _informative(heading):
            continue
        if normalise(heading) in banned:
            counts["forbidden"] += 1
            continue
        parent = section.heading_path[-2] if len(section.heading_path) > 1 else ""
        negatives, sources = [], []
        for name, search in channels.items():
            for other_id in search(heading):
                other = by_id.get(other_id)
                if other is None or other_id == section.section_id or not bodies[other_id] or (
                        other.doc_id == section.doc_id and _nested(other.heading_path, section.heading_path)) \
                        or normalise(other.heading_path[-1] if other.heading_path else "") == normalise(heading):
                    continue
                other_parent = other.heading_path[-2] if len(other.heading_path) > 1 else ""
                text = _in_place(other_parent, _closest(heading, bodies[other_id]))
                if text not in negatives:
                    negatives.append(text)
                    sources.append(name)
                break
        other = rng.choice(readable)
        if random_negative and other.doc_id != section.doc_id:
            negatives.append(_in_place(other.heading_path[-2] if len(other.heading_path) > 1 else "",
                                       rng.choice(bodies[other.section_id])))
            sources.append("random")
        if not negatives:
            continue
        kind = "question" if heading.rstrip().endswith("?") else "heading"
        for sentence in bodies[section.section_id][:positives]:
            groups.append(Group(heading, _in_place(parent, sentence), tuple(negatives), kind, tuple(sources),
                                section.section_id))
    chosen = [s for s in readable if len(bodies[s.section_id]) >= 2]
    rng.shuffle(chosen)
    for section in chosen[:int(len(groups) * neighbours)]:
        body = bodies[section.section_id]
        at = rng.randrange(len(body) - 1)
        if normalise(body[at]) in banned:
            counts["forbidden"] += 1
            continue
        other = rng.choice(readable)
        if other.doc_id == section.doc_id:
            continue
        groups.append(Group(body[at], body[at + 1], (rng.choice(bodies[other.section_id]),), "neighbour",
                            ("other-document",), section.section_id))
    return groups


def task_groups(question: str, texts: Sequence[str], stated: Sequence[bool], *, read: int = 12,
                negatives: int = 7, positives_from: int = 30, source: str = "") -> list[Group]:
    """A labelled question's training groups: one for each sentence that states required evidence
    among the ``positives_from`` first, against the first ``negatives`` of the ``read`` first
    sentences that state none.

    Args:
        question: the user's question (the query of every group).
        texts: the candidate sentences as the reader reads them (after their heading), in the
            order it reads them (best by words and meaning first).
        stated: for each sentence, whether it states a required group (same length as ``texts``).
        read: how many sentences the reader reads (``generation.reader_depth``): the negatives
            come from these, the sentences the model has to order.
        negatives: at most this many negatives a group (the highest placed).
        positives_from: positives are taken from this many first sentences (deeper ones are
            never read, but still show the model what an answer looks like).
        source: recorded as each group's ``section_id`` (a question id: folds split by it).

    Returns:
        The groups, in the order of their positives; none when the question has no positive or
        no negative.

    Raises:
        ValueError: ``texts`` and ``stated`` of different lengths.
    """
    if len(texts) != len(stated):
        raise ValueError(f"task_groups: {len(texts)} texts but {len(stated)} labels for {question!r}")
    wrong = [texts[i] for i in range(min(read, len(texts))) if not stated[i]][:negatives]
    right = [texts[i] for i in range(min(positives_from, len(texts))) if stated[i]]
    if not wrong:
        return []
    return [Group(question, t, tuple(wrong), "fit", ("candidate",) * len(wrong), source) for t in right]


def sections_of(store: object) -> list[SectionText]:
    """The sections of a store's latest versions, each with its chunks' text joined (in order)."""
    texts: dict[str, list[str]] = defaultdict(list)
    info: dict[str, tuple[str, tuple[str, ...]]] = {}
    for chunk in store.chunks():  # type: ignore[attr-defined]
        texts[chunk.section_id].append(chunk.text)
        info.setdefault(chunk.section_id, (chunk.doc_id, tuple(chunk.heading_path)))
    return [SectionText(sid, info[sid][0], info[sid][1], "\n\n".join(parts)) for sid, parts in texts.items()]


def store_channels(store: object, encoder: object | None, depth: int = 10) -> dict[str, Callable[[str], list[str]]]:
    """The store's two retrieval channels as section rankers: BM25 (the keyword index) and, given
    the store's encoder, the dense vectors of its active space (exact cosine)."""
    import numpy as np

    def bm25(query: str) -> list[str]:
        hits = store.bm25(content_terms(query), ("public",), depth * 3)  # type: ignore[attr-defined]
        return list(dict.fromkeys(c.section_id for c, _ in hits))[:depth]

    channels: dict[str, Callable[[str], list[str]]] = {"bm25": bm25}
    space = store.active_space() if encoder is not None else None  # type: ignore[attr-defined]
    if space is not None:
        ids, _, blobs, _ = store.vector_table(space.id)  # type: ignore[attr-defined]
        matrix = np.frombuffer(b"".join(blobs), np.float32).reshape(len(ids), -1)
        section = {c.id: c.section_id for c in store.chunks()}  # type: ignore[attr-defined]
        owners = [section.get(i, "") for i in ids]

        def dense(query: str) -> list[str]:
            q = np.asarray(encoder.encode([query], kind="query").vectors, np.float32)[0]  # type: ignore[attr-defined]
            best = np.argsort(-(matrix @ q))[:depth * 3]
            return list(dict.fromkeys(owners[i] for i in best if owners[i]))[:depth]

        channels["dense"] = dense
    return channels
