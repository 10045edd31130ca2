"""Bounded multi-hop retrieval with evidence slots.

A question is decomposed into the evidence it needs, one slot each: a record it names ("order
NW-1042": its facts must be looked up first), each part of a compound question, and a record of
the asker's that the question does not identify ("my order" with no number: only a person can
fill it, so it is never searched). Each hop searches for the unknown slot tried least (at most
twice each), reads the best few chunks, and fills the slot with the first one that passes
verification: a record slot's chunk must name the record exactly (so "NW-1024" never fills
"NW-1042"), any other slot's chunk must hold at least half of its query's words. A later slot's
query carries what the facts already known bring: the days elapsed between the dates they state,
and, for a slot that refers back ("what happens if that exception is raised"), the names the
question lacks (the bridge: "next() ... otherwise StopIteration is raised" lets the next hop
search for StopIteration); and a known rule whose limit the facts exceed (30 days, 35 elapsed) opens a
slot for its exception. This is the self-ask pattern (Press et al., "Measuring and Narrowing the
Compositionality Gap in Language Models", 2023) with retrieval and verification in place of a
model.

A hop is progress only if it fills a slot, resolves a version conflict (replaces a fact from a
version not in force) or raises the source's authority (the document's ``metadata.authority``).
The loop stops at the first bound it meets: every slot settled, ``max_hops`` hops,
``max_queries`` searches, the token budget (tokens of the chunks read) or the latency budget,
or two hops in a row without progress. What is still unknown is listed.
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ragdx.protocols import Retriever, Store
from ragdx.stages.answerable import ABSTAINED_BY_NAME
from ragdx.stages.fuse import reciprocal_ranks
from ragdx.text import content_terms, quantities, row_cells, sentences, split_question, statements, stem
from ragdx.types import Answer, Chunk, Claim, Context, DocStatus, Hop, Query, Slot, SlotState

__all__ = ["MultiHop", "LoopResult", "answer_with_slots", "elapsed_days"]

_RECORD = re.compile(r"\b(order|invoice|ticket|case|account|shipment|parcel|booking|reservation)\s+"
                     r"(?:number\s+|no\.?\s*|#)?([A-Z]{1,6}-?\d{3,})\b", re.IGNORECASE)
_ASKERS = re.compile(r"\bmy (order|invoice|ticket|account|shipment|parcel|booking|reservation)\b", re.IGNORECASE)
_LIMIT_UNITS = ("day", "week", "month", "year", "business day", "hour", "eur", "usd", "%")
NO_PROGRESS_LIMIT = 2  # hops in a row without progress before the loop gives up
# a name a fact brings that the question lacks (a bridge entity): a capitalised word inside a
# sentence, or a code-like token ("PayPal", "StopIteration", "create_function")
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][\w.]*[A-Za-z0-9]|\b\w+_\w+\b|\b[a-z]+[A-Z]\w*\b")
# a slot that refers back ("that payment method", "that exception") takes the facts' names
_REFERS = re.compile(r"\b(?:that|this|these|those|it|its|they|them|their|such|the same)\b", re.IGNORECASE)
_MONTHS = re.compile(r"(?:January|February|March|April|May|June|July|August|September|October|November|"
                     r"December|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)")
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2}) (January|February|March|April|May|June|July|August|September|October|"
                             r"November|December) (\d{4})\b|\b(\d{4})-(\d{2})-(\d{2})\b")


def elapsed_days(text: str) -> list[float]:
    """Days from the earliest to each later date a text states ("delivered on 2 March 2026 ... on 6
    April 2026" -> ``[35.0]``): how long after one fact the next happened."""
    dates = []
    for m in _DAY_MONTH_YEAR.finditer(text):
        try:
            dates.append(datetime.date(int(m[3]), _MONTH_NUMBER[m[2]], int(m[1])) if m[1] else
                         datetime.date(int(m[4]), int(m[5]), int(m[6])))
        except ValueError:
            continue  # not a calendar date (30 February)
    first = min(dates, default=None)
    return [float((d - first).days) for d in dates if first is not None and d > first]


_MONTH_NUMBER = {name: n for n, name in enumerate(("January", "February", "March", "April", "May", "June", "July",
                                                  "August", "September", "October", "November", "December"), 1)}


@dataclass(frozen=True, slots=True)
class LoopResult:
    slots: tuple[Slot, ...]
    hops: tuple[Hop, ...]
    stopped: str


def _terms(text: str) -> set[str]:
    return {stem(t) for t in content_terms(text)}


def _authority(store: Store, chunk: Chunk) -> tuple[int, float]:
    """(in force, metadata authority) of a chunk's document version: higher is more authoritative."""
    stored = store.version(chunk.doc_id, chunk.version)
    if stored is None:
        return 0, 0.0
    doc = stored.document
    try:
        authority = float(doc.metadata.get("authority", 0))
    except (TypeError, ValueError):
        authority = 0.0
    return int(doc.status is DocStatus.CURRENT), authority


class MultiHop:
    """The multi-hop loop over a pipeline's retrieval channels (given to :meth:`run`; each hop
    searches all of them and fuses their lists by RRF).

    Args:
        store: the store (chunk texts, document status and authority).
        max_hops: the most hops.
        max_queries: the most searches (one per hop per channel).
        budget_tokens: the most tokens of chunk text the hops may read.
        budget_ms: the most milliseconds the loop may take (checked before each hop).
        read: how many of a hop's best chunks are read and verified.
        min_cover: the share of a slot query's words a filling chunk must hold (slots without an
            entity).
    """

    def __init__(self, store: Store, *, max_hops: int = 4, max_queries: int = 12,
                 budget_tokens: int = 4000, budget_ms: float = 5000.0, read: int = 5,
                 min_cover: float = 0.5) -> None:
        self.store = store
        self.max_hops, self.max_queries = max_hops, max_queries
        self.budget_tokens, self.budget_ms = budget_tokens, budget_ms
        self.read, self.min_cover = read, min_cover

    @property
    def config(self) -> dict[str, Any]:
        return {"max_hops": self.max_hops, "max_queries": self.max_queries, "budget_tokens": self.budget_tokens,
                "budget_ms": self.budget_ms, "read": self.read, "min_cover": self.min_cover,
                "no_progress_limit": NO_PROGRESS_LIMIT}

    def decompose(self, query: Query) -> tuple[Slot, ...]:
        """The question's evidence slots: records it names, records of the asker it does not
        identify (needing a person), and its question parts."""
        slots: list[Slot] = []
        parts = split_question(query.question) or (query.question,)
        rest = []
        for part in parts:
            records = _RECORD.findall(part)
            for noun, code in records:
                slots.append(Slot(f"{noun.lower()} {code}", part, entity=code))
            if not records:
                rest.append(part)
        if not any(s.entity for s in slots):
            for noun in dict.fromkeys(n.lower() for n in _ASKERS.findall(query.question)):
                slots.append(Slot(f"your {noun}", f"my {noun}", SlotState.NEEDS_PERSON,
                                  note=f"the question names no {noun} number: only a person can look it up"))
        if not rest and slots:  # "... order NW-1042. Can I still get a refund?": the question is what remains
            rest = [t for t in sentences(query.question) if not _RECORD.search(t) and content_terms(t)]
        for n, part in enumerate(rest if rest or slots else [query.question], start=1):
            slots.append(Slot(f"question {n}" if len(rest) > 1 else "question", part))
        return tuple(slots)

    def _search(self, channels: Sequence[Retriever], query: Query, text: str) -> list[str]:
        """The channels' lists for ``text``, fused by RRF: chunk ids, best first."""
        scores = reciprocal_ranks(channel.run(replace(query, question=text)).items for channel in channels)
        return sorted(scores, key=lambda cid: (-scores[cid], cid))

    def _verify(self, slot: Slot, chunk: Chunk, need: tuple[str, float] | None,
                taken: set[str]) -> str | None:
        """Why a chunk cannot fill a slot (None: it can)."""
        text = f"{chunk.prefix}\n{chunk.text}"
        if chunk.id in taken:
            return f"{chunk.id}: already fills another slot"
        if slot.entity:
            if re.search(r"(?<![\w-])" + re.escape(slot.entity) + r"(?![\w-])", text, re.IGNORECASE) is None:
                found = sorted(set(re.findall(r"\b[A-Z]{1,6}-?\d{3,}\b", chunk.text)) - {slot.entity})
                return (f"{chunk.id}: names {', '.join(found[:3])}, not {slot.entity}" if found else
                        f"{chunk.id}: does not name {slot.entity}")
            return None
        core = _terms(slot.query.split(" | ")[0])
        have = _terms(text)
        cover = len(core & have) / len(core) if core else 0.0
        least = self.min_cover / 2 if need is not None else self.min_cover  # an exception is worded apart
        if cover < least:
            return f"{chunk.id}: holds {cover:.0%} of the slot's words (at least {least:.0%} needed)"
        if need is not None and not any(u == need[0] for _, u in quantities(chunk.text)):
            return f"{chunk.id}: states no limit in {need[0]}s"
        return None

    def _value(self, slot: Slot, chunk: Chunk, searched: str = "") -> str:
        """The chunk's statement that fills the slot: the one naming the entity, or holding most of
        the words searched for it."""
        if slot.entity:  # a record: every paragraph that names it (headings state nothing)
            named = [" ".join(p.split()) for p in chunk.text.split("\n\n")
                     if slot.entity.lower() in p.lower() and statements(p)]
            if named:
                return " ".join(named)
        core = _terms(searched or slot.query)
        options = statements(chunk.text) or [chunk.text]
        return max(options, key=lambda s: (len(core & _terms(s)), -options.index(s)))

    def _facts(self, slots: Sequence[Slot], exclude: str) -> str:
        return " ".join(s.value for s in slots if s.state is SlotState.KNOWN and s.name != exclude)

    def _bridge(self, slot: Slot, query: Query, slots: Sequence[Slot]) -> str:
        """The slot's query with what the facts already known bring: the names the question lacks
    (at most 8) when the slot refers back to something ("that payment method"), and the days
    elapsed between the dates they state."""
        facts = self._facts(slots, slot.name)
        if not facts:
            return slot.query
        have = _terms(query.question) | _terms(slot.query)
        new = [t for t in dict.fromkeys(_NAME.findall(facts)) if stem(t.lower()) not in have
               and not _MONTHS.fullmatch(t) and t.lower() not in have] if _REFERS.search(slot.query) else []
        new += [f"{days:g} days" for days in elapsed_days(facts)]  # dates known: how long after
        return f"{slot.query} | {' '.join(new[:8])}" if new else slot.query

    def _exception(self, slot: Slot, query: Query, slots: Sequence[Slot]) -> tuple[Slot, tuple[str, float]] | None:
        """A slot for the exception to a rule the facts exceed: the filled value states a limit
        (30 days) and the question or the known facts a larger amount of the same unit (35 days)."""
        limits = [(u, float(n.split("-")[-1])) for n, u in quantities(slot.value) if u in _LIMIT_UNITS]
        stated = query.question + " " + self._facts(slots, slot.name)
        for unit, limit in limits:
            amounts = [float(n.split("-")[-1]) for n, u in quantities(stated) if u == unit]
            if unit == "day":
                amounts += elapsed_days(stated)
            if any(a > limit for a in amounts):
                have = _terms(slot.value)
                words = [t for t in content_terms(stated) if stem(t) not in have and not t.isdigit()]
                text = f"{' '.join(words[:6])} exception {unit}s"
                return Slot(f"exception to {slot.name}", text), (unit, limit)
        return None

    def run(self, query: Query, channels: Sequence[Retriever],
            slots: Sequence[Slot] | None = None) -> LoopResult:
        """Fill the question's slots (``slots``: its decomposition, when already made). The latency
        budget starts once every channel is ready: a model's cold start is not a hop's cost."""
        for channel in channels:
            load = getattr(channel, "warm_up", None)
            if load is not None:
                load()
        started = time.perf_counter()
        slots = list(self.decompose(query) if slots is None else slots)
        needs: dict[str, tuple[str, float]] = {}
        hops: list[Hop] = []
        queries = tokens = idle = 0
        tried: dict[str, int] = {}
        while True:
            open_slots = [s for s in slots if s.state is SlotState.UNKNOWN and tried.get(s.name, 0) < 2]
            elapsed = (time.perf_counter() - started) * 1000
            if not open_slots:
                stopped = "every slot is settled" if all(s.state is not SlotState.UNKNOWN for s in slots) \
                    else "every unknown slot was searched twice"
                break
            if len(hops) >= self.max_hops:
                stopped = f"max hops ({self.max_hops})"
                break
            if queries + len(channels) > self.max_queries:
                stopped = f"max queries ({self.max_queries})"
                break
            if tokens >= self.budget_tokens:
                stopped = f"token budget ({tokens} of {self.budget_tokens} tokens read)"
                break
            if elapsed >= self.budget_ms:
                stopped = f"latency budget ({elapsed:.0f} of {self.budget_ms:g} ms)"
                break
            if idle >= NO_PROGRESS_LIMIT:
                stopped = f"no progress in {NO_PROGRESS_LIMIT} hops"
                break
            hop_started = time.perf_counter()
            slot = min(open_slots, key=lambda s: tried.get(s.name, 0))  # each slot in turn
            tried[slot.name] = tried.get(slot.name, 0) + 1
            text = self._bridge(slot, query, slots)
            found = self._search(channels, query, text.replace(" | ", " "))
            queries += len(channels)
            read = self.store.chunks_by_id(found[:self.read])
            candidates = [read[c] for c in found[:self.read] if c in read]
            spent = sum(c.token_count or len(c.text.split()) for c in candidates)
            tokens += spent
            taken = {s.chunk_id for s in slots if s.chunk_id}
            rejected, filled = [], None
            for chunk in candidates:
                why = self._verify(slot, chunk, needs.get(slot.name), taken)
                if why is None:
                    filled = chunk
                    break
                rejected.append(why)
            progress, reason = False, "no candidate passed verification"
            at = slots.index(slot)
            if filled is not None:
                new = replace(slot, state=SlotState.KNOWN, chunk_id=filled.id, doc_id=filled.doc_id,
                              version=filled.version, value=self._value(slot, filled, text))
                progress, reason = True, f"filled {slot.name} from {filled.doc_id}"
                slots[at] = new
                opened = self._exception(new, query, slots)
                if opened is not None and all(s.name != opened[0].name for s in slots):
                    slots.append(opened[0])
                    needs[opened[0].name] = opened[1]
                    reason += f"; its limit is exceeded, so {opened[0].name!r} is opened"
            progress, reason = self._upgrade(slots, candidates, slot, progress, reason)
            idle = 0 if progress else idle + 1
            hops.append(Hop(len(hops) + 1, slot.name, text, tuple(c.id for c in candidates), tuple(rejected),
                            filled.id if filled else None, progress, reason, spent,
                            time.perf_counter() - hop_started))
        return LoopResult(tuple(slots), tuple(hops), stopped)

    def _upgrade(self, slots: list[Slot], candidates: Sequence[Chunk], target: Slot, progress: bool,
                 reason: str) -> tuple[bool, str]:
        """Replace a known slot's fact with a candidate that verifies for it and comes from a more
        authoritative source (a version in force over one that is not, then a higher
        ``metadata.authority``): a resolved version conflict or raised authority is progress."""
        for n, slot in enumerate(slots):
            if slot.state is not SlotState.KNOWN or slot.name == target.name or slot.chunk_id is None:
                continue
            held = self.store.chunks_by_id([slot.chunk_id]).get(slot.chunk_id)
            if held is None:
                continue
            rank = _authority(self.store, held)
            taken = {s.chunk_id for s in slots if s.chunk_id}
            for chunk in candidates:
                better = _authority(self.store, chunk)
                if better > rank and self._verify(slot, chunk, None, taken) is None:
                    slots[n] = replace(slot, chunk_id=chunk.id, doc_id=chunk.doc_id, version=chunk.version,
                                       value=self._value(slot, chunk))
                    what = "resolved a version conflict" if better[0] > rank[0] else "raised the source's authority"
                    return True, (reason + "; " if progress else "") + f"{what} for {slot.name} ({chunk.doc_id})"
        return progress, reason


def answer_with_slots(answer: Answer, context: Context, slots: Sequence[Slot]) -> Answer:
    """The answer with each known slot's fact added, one claim a sentence, citing the context unit
    that holds its chunk (the facts a multi-hop answer rests on: the order's dates, the rule, its
    exception), but for the sentences the answer already states; only when no slot is still
    unknown (a partial set of facts does not answer the question). A table row a slot found whose
    first cell another fact states (the row of PayPal, the order "was paid with PayPal") replaces
    another row of the same table the answer chose whose first cell no fact states (cash on
    delivery). A slot whose chunk did not reach the context, one still unknown and one that needs
    a person are named as missing. The claims are checked by the citation stage like any other,
    against the original question's context. An abstention because
    the sources never mention what the question names (``ST_DWithin``) stands: facts found for its
    parts are about something else."""
    if answer.abstained and answer.config.get(ABSTAINED_BY_NAME):
        return answer
    claims = [] if answer.abstained else list(answer.claims)
    seen = {_said(s) for c in claims for s in sentences(c.text)}
    added: list[Claim] = []
    missing = []
    filled = 0
    for slot in slots:
        if slot.state is SlotState.NEEDS_PERSON:
            missing.append(f"{slot.name}: {slot.note}")
            continue
        if slot.state is SlotState.UNKNOWN:
            missing.append(f"{slot.name}: not found ({slot.query})")
            continue
        unit = next((u for u in context.units if slot.chunk_id in u.chunk_ids), None)
        if unit is None:
            missing.append(f"{slot.name}: its evidence ({slot.doc_id}) did not reach the context")
        else:
            # what the answer does not state yet, each sentence once ("Order NW-1024 was paid
            # with PayPal." said already is not said again with the order's paragraph)
            new = [s for s in sentences(slot.value) if _said(s) not in seen]
            seen.update(_said(s) for s in new)
            added += [Claim(s, (unit.id,)) for s in new]
            filled += bool(new)
    if not added or any(s.state is SlotState.UNKNOWN for s in slots):
        # a slot still unknown: the facts found do not answer the question, the answer stands
        return replace(answer, missing=tuple(dict.fromkeys(answer.missing + tuple(missing))))
    text = answer.text
    facts = " ".join(c.text for c in claims + added if not _columns(c.text)).lower()
    keyed = {(c.citations, _columns(c.text)) for c in added if _columns(c.text) and _key(c.text) in facts}
    for claim in list(claims):
        if _columns(claim.text) and (claim.citations, _columns(claim.text)) in keyed and _key(claim.text) not in facts:
            # another row of the table a slot found its row in, for a case no fact is about
            claims.remove(claim)
            text = " ".join(text.replace(f"{claim.text} [{claim.citations[0]}]", "").split())
    extra = " ".join(f"{c.text} [{c.citations[0]}]" for c in added)
    return replace(answer, text=extra if answer.abstained else f"{text} {extra}", claims=tuple(claims + added),
                   abstained=False, missing=tuple(missing), config=dict(answer.config) | {"slot_facts": filled})


def _columns(statement: str) -> tuple[str, ...]:
    """A table row's column names (:func:`ragdx.text.row_cells`); empty for any other statement."""
    return tuple(column for column, _ in row_cells(statement))


def _key(row: str) -> str:
    """A table row's first cell's value, lower-cased: what its row is about ("paypal")."""
    return row_cells(row)[0][1].strip().lower()


def _said(statement: str) -> str:
    """A statement as compared with what an answer says already: its words, spaces folded."""
    return " ".join(statement.split())
