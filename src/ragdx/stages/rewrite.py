"""Query rewriting, audited: every rewrite keeps the original question, says what it changed, and
is used only to search.

- :func:`diff`: a rewrite's structured difference from the original: entities added,
  sub-questions split off, and the negations, dates, numbers and quantifiers kept or dropped (a
  dropped negation or date is flagged: "Can't I get a refund?" -> "refund process" no longer asks
  whether the refund is allowed).
- :func:`~ragdx.text.split_question`: a compound question's sub-questions (Perez et al., "Unsupervised
  Question Decomposition for Question Answering", EMNLP 2020, split by rules here).
- :class:`OfflineRewriter` (the default): deterministic and offline. Entity completion and
  disambiguation from the corpus's title and heading index (a name the question writes in part,
  ``create_function``, gains the heading that names it in full, from the document that shares
  most of the question's other words), sub-questions, and a hypothetical answer passage (HyDE:
  Gao et al., "Precise Zero-Shot Dense Retrieval without Relevance Labels", ACL 2023) made by
  turning the question into a statement. A HyDE passage is searched with and nothing else: it
  never enters the context, so it can never be cited.
- :class:`LlmRewriter`: the same rewrites from a chat model (:class:`~ragdx.stages.generate.ChatClient`).
- :func:`search_all`: one channel searched with several texts, its lists merged by reciprocal
  rank fusion (Cormack et al., SIGIR 2009), as RAG-Fusion does (Rackauckas, 2024).

The rewrite stage itself, which routes between the single pass and the multi-hop path, is
:class:`ragdx.stages.routed.RoutedRewrite`.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from ragdx.errors import ChatError
from ragdx.protocols import Retriever, Store
from ragdx.stages.fuse import RRF_C, reciprocal_ranks
from ragdx.text import content_terms, split_question, stem
from ragdx.types import (
    Candidate, DocStatus, Marker, MarkerKind, Provenance, Query, Ranked, Rewrite, RewriteDiff, RewriteKind, StageKind,
)

if TYPE_CHECKING:  # the client's class only; generate is not needed to rewrite
    from ragdx.stages.generate import ChatClient

__all__ = ["markers", "diff", "split_question", "hypothetical", "OfflineRewriter", "LlmRewriter", "search_all"]

_NEGATION = re.compile(r"\b(?:not|no|never|none|nothing|neither|nor|without|cannot|except|unless|"
                       r"[a-z]+n['\u2019]t)\b", re.IGNORECASE)
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_DATE = re.compile(r"\b\d{4}-\d{2}(?:-\d{2})?\b|\b(?:\d{1,2}\s+)?" + _MONTH + r"\b(?:\s+\d{1,2}\b)?(?:,?\s+\d{4})?"
                   r"|\b(?:19|20)\d{2}\b|\b(?:yesterday|today|tomorrow|last (?:week|month|year))\b",
                   re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.-])\d+(?:[.,]\d+)*(?![\w-])")
_QUANTIFIER = re.compile(r"\b(?:all|every|each|any|some|only|both|either|most|at least|at most|more than|"
                         r"less than|fewer than)\b", re.IGNORECASE)


def markers(text: str) -> tuple[Marker, ...]:
    """The negations, dates, numbers (outside dates) and quantifiers of a text, in that order."""
    dates = [(m.start(), m.end()) for m in _DATE.finditer(text)]
    out = [Marker(MarkerKind.NEGATION, m.group()) for m in _NEGATION.finditer(text)]
    out += [Marker(MarkerKind.DATE, text[s:e].strip()) for s, e in dates]
    out += [Marker(MarkerKind.NUMBER, m.group()) for m in _NUMBER.finditer(text)
            if not any(s <= m.start() < e for s, e in dates)]
    out += [Marker(MarkerKind.QUANTIFIER, m.group()) for m in _QUANTIFIER.finditer(text)]
    return tuple(out)


def _kept(marker: Marker, rewrite: str) -> bool:
    if marker.kind is MarkerKind.NEGATION:  # "can't" kept as "cannot" or "not" is still a negation
        return bool(_NEGATION.search(rewrite))
    return re.search(r"(?<![\w])" + re.escape(marker.text) + r"(?![\w])", rewrite, re.IGNORECASE) is not None


def diff(original: str, rewrite: str, *, entities: Sequence[str] = (),
         sub_questions: Sequence[str] = (), siblings: Sequence[str] = ()) -> RewriteDiff:
    """What ``rewrite`` changed against ``original``.

    Args:
        original: the question as asked.
        rewrite: the rewritten text.
        entities: the entities the rewrite added (default: its content words the original lacks).
        sub_questions: the sub-questions it split off.
        siblings: the other parts of the same split: a marker one of them keeps ("not" in the
            other sub-question) was never this part's to keep, so it is neither kept nor dropped
            here; only a marker that no part keeps is dropped.
    """
    if not entities:
        have = {stem(t) for t in content_terms(original)}
        entities = [t for t in content_terms(rewrite) if stem(t) not in have]
    found = markers(original)
    elsewhere = [m for m in found if not _kept(m, rewrite) and any(_kept(m, s) for s in siblings)]
    return RewriteDiff(tuple(entities), tuple(sub_questions), tuple(m for m in found if _kept(m, rewrite)),
                       tuple(m for m in found if not _kept(m, rewrite) and m not in elsewhere))


# a name written as code: a dotted or underscored identifier, or a call
_CODE = re.compile(r"\w+(?:[._]\w+)+|\w+\(\)")
# a question turned into a statement: the question word and its auxiliary go, the rest is stated
_HYDE_LEAD = re.compile(r"^(?:(?:what|which|who|where|when|why|how(?: (?:long|many|much|often|do|does|can|"
                        r"should))?)\s+)?(?:(?:is|are|was|were|does|do|did|can|could|should|will|would|may|"
                        r"must|has|have)\s+)?", re.IGNORECASE)


class OfflineRewriter:
    """Deterministic rewrites from the question and the corpus's title and heading index.

    Args:
        store: the store whose titles and headings complete entities (read once, lazily; a
            principal only ever sees the headings of documents it may read).
        entities: complete entities from the title and heading index.
        expand: add each sub-question of a compound question as a search of its own.
        hyde: add a hypothetical answer passage (searched with only).
        max_entities: the most headings one question gains.
    """

    def __init__(self, store: Store, *, entities: bool = True, expand: bool = True, hyde: bool = False,
                 max_entities: int = 2, name: str = "offline") -> None:
        self.store = store
        self.entities, self.expand, self.hyde = entities, expand, hyde
        self.max_entities = max_entities
        self.name = name
        self._index: list[tuple[str, str, tuple[str, ...], frozenset[str]]] | None = None
        self._df: dict[str, int] = {}
        self._built_at: int | None = None  # the store's index version the index was read at

    @property
    def config(self) -> dict[str, Any]:
        return {"rewriter": self.name, "entities": self.entities, "expand": self.expand, "hyde": self.hyde,
                "max_entities": self.max_entities}

    def warm_up(self) -> None:
        """Read the title and heading index now, so no question's latency includes it."""
        self._headings()

    def _headings(self) -> list[tuple[str, str, tuple[str, ...], frozenset[str]]]:
        """(heading, doc_id, acl, stemmed terms) of every current document's title and headings,
        read again after any change to the store (an ingest, a deletion, an access change)."""
        if self._index is None or self._built_at != self.store.index_version:
            self._built_at = self.store.index_version
            self._df = {}
            seen: dict[tuple[str, str], tuple[str, ...]] = {}
            for stored in self.store.versions():
                doc = stored.document
                if doc.status is not DocStatus.CURRENT:
                    continue
                if doc.title:
                    seen.setdefault((doc.title, doc.doc_id), doc.acl)
                for chunk in self.store.chunks(doc.doc_id, doc.version):
                    for heading in chunk.heading_path:
                        seen.setdefault((heading, doc.doc_id), doc.acl)
            self._index = [(h, d, acl, frozenset(stem(t) for t in content_terms(h))) for (h, d), acl in seen.items()]
            for *_, terms in self._index:
                for t in terms:
                    self._df[t] = self._df.get(t, 0) + 1
        return self._index

    def complete(self, query: Query) -> list[str]:
        """Headings that complete a name the question writes in part, best first: a heading that
        contains a code-like name of the question (``create_function``), or one that shares at
        least two of its words and half of its own; a heading adding nothing, or naming another
        number or code, never. Ranked by the idf of the shared words times the share of the
        heading they make; among equals, the heading whose document shares most of the
        question's words (disambiguation), then the shorter."""
        terms = {stem(t) for t in content_terms(query.question)}
        codes = set(_CODE.findall(query.question))
        index = [e for e in self._headings() if query.principal.may_read(e[2])]
        n = len(index) or 1
        doc_terms: dict[str, set[str]] = {}
        for _, doc, _, t in index:
            doc_terms.setdefault(doc, set()).update(t)
        scored = []
        for heading, doc, _, own in index:
            shared = own & terms
            if own <= terms or any(any(ch.isdigit() for ch in t) for t in own - terms):
                continue  # nothing new to add, or another number or code
            named = any(code in heading for code in codes)  # the question writes the name in part
            if not named and (len(shared) < 2 or len(shared) / len(own) < 0.5):
                continue
            idf = sum(math.log(n / self._df[t]) for t in shared)
            context = len(doc_terms[doc] & terms)
            scored.append((not named, -idf * len(shared) / len(own), -context, len(heading), heading))
        out: list[str] = []
        for *_, heading in sorted(scored):
            if heading not in out and not any(heading in h or h in heading for h in out):
                out.append(heading)
            if len(out) >= self.max_entities:
                break
        return out

    def rewrite(self, query: Query) -> tuple[Rewrite, ...]:
        q = query.question
        out = []
        if self.entities:
            added = self.complete(query)
            if added:
                text = q + " " + " ".join(added)
                out.append(Rewrite(text, RewriteKind.ENTITY, diff(q, text, entities=added)))
        if self.expand:
            parts = split_question(q)
            if len(parts) > 1:
                out += [Rewrite(p, RewriteKind.SPLIT, diff(q, p, sub_questions=(p,),
                                                           siblings=[o for o in parts if o != p]))
                        for p in parts]
        if self.hyde:
            passage = hypothetical(q)
            out.append(Rewrite(passage, RewriteKind.HYDE, diff(q, passage)))
        return tuple(out)


def hypothetical(question: str) -> str:
    """An offline hypothetical answer passage: each part of the question stated, not asked
    ("How long is the warranty?" -> "The warranty is long."), so it reads like the passage that
    answers it. It is searched with only."""
    out = []
    for part in split_question(question) or (question,):
        body = _HYDE_LEAD.sub("", part.strip().rstrip("?.").strip())
        words = body.split()
        if len(words) > 1 and words[0].lower() in ("i", "we", "you"):
            words[0] = "you"
        statement = " ".join(words)
        out.append(statement[:1].upper() + statement[1:] + ".")
    return " ".join(out)


_LLM_PROMPT = ("Rewrite the question for a search engine. Reply with one JSON object: \"entities\" (names "
               "the question refers to, written in full), \"sub_questions\" (a compound question split "
               "into its parts, else []), \"hypothetical\" (a short passage that would answer it). Keep "
               "every negation, date and number.")


class LlmRewriter:
    """Rewrites from a chat model: entities, sub-questions and a hypothetical passage, each with its
    diff against the original (a dropped negation is flagged, whoever dropped it).

    Args:
        client: a :class:`~ragdx.stages.generate.ChatClient`.
        hyde: also search with the model's hypothetical passage.
    """

    def __init__(self, client: ChatClient, *, hyde: bool = True, name: str = "llm") -> None:
        self.client, self.hyde, self.name = client, hyde, name

    @property
    def config(self) -> dict[str, Any]:
        return {"rewriter": self.name, "model": self.client.model, "hyde": self.hyde}

    def rewrite(self, query: Query) -> tuple[Rewrite, ...]:
        q = query.question
        text, _ = self.client.complete([{"role": "system", "content": _LLM_PROMPT},
                                        {"role": "user", "content": q}])
        try:
            reply = json.loads(text[text.index("{"):text.rindex("}") + 1])
        except ValueError:
            raise ChatError(f"rewriter {self.name}: the model's reply is not a JSON object: {text[:200]!r}") from None
        entities = [e for e in reply.get("entities", []) if isinstance(e, str) and e.strip()]
        out = []
        if entities:
            full = q + " " + " ".join(entities)
            out.append(Rewrite(full, RewriteKind.ENTITY, diff(q, full, entities=entities)))
        subs = [s for s in reply.get("sub_questions", []) if isinstance(s, str) and s.strip()]
        if len(subs) > 1:
            out += [Rewrite(s, RewriteKind.SPLIT, diff(q, s, sub_questions=(s,), siblings=[o for o in subs if o != s]))
                    for s in subs]
        passage = reply.get("hypothetical")
        if self.hyde and isinstance(passage, str) and passage.strip():
            out.append(Rewrite(passage, RewriteKind.HYDE, diff(q, passage)))
        return tuple(out)


def search_all(channel: Retriever, query: Query, texts: Sequence[str]) -> Ranked:
    """``channel`` searched with each text (the query's principal and id kept), its lists merged by
    reciprocal rank fusion into one list as long as the longest, named as the channel is. Each
    item's history keeps its rank for the first search that found it best."""
    started = time.perf_counter()
    lists = [channel.run(replace(query, question=t)) for t in texts]
    scores = reciprocal_ranks(ranked.items for ranked in lists)
    best: dict[str, Candidate] = {}
    for ranked in lists:
        for c in ranked.items:
            if c.chunk_id not in best or c.rank < best[c.chunk_id].rank:
                best[c.chunk_id] = c
    order = sorted(scores, key=lambda cid: (-scores[cid], best[cid].rank, cid))
    order = order[:max((len(r.items) for r in lists), default=0)]
    items = tuple(replace(best[cid], rank=rank, score=scores[cid],
                          history=best[cid].history + (Provenance(f"{channel.name}+searches", rank, scores[cid]),))
                  for rank, cid in enumerate(order, start=1))
    config = dict(lists[0].config) if lists else {}
    return Ranked(channel.name, StageKind.RETRIEVAL, items, (),
                  config | {"searches": len(texts), "merge": f"rrf c={RRF_C:g}"}, time.perf_counter() - started)
