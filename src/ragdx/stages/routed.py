"""The rewrite stage: routing, rewrites, and the multi-hop path.

Routing is on by default: only a question that needs it (a compound question: two or more evidence
slots, or one that names a record, such as an order, whose facts must be looked up and checked
first) takes the multi-hop path
(:mod:`ragdx.stages.multihop`); any other question is searched as asked, so simple questions pay
for nothing. The stage also says how its output is used, so the pipeline needs to know nothing
of rewriting: each retrieval channel searches every text the stage lists (:meth:`RoutedRewrite.search`),
and a multi-hop answer states its slots' facts (:meth:`RoutedRewrite.answer`).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from ragdx.errors import ConfigError
from ragdx.protocols import Retriever, Rewriter
from ragdx.stages.multihop import MultiHop, answer_with_slots
from ragdx.stages.rewrite import diff, search_all
from ragdx.types import Answer, Context, Query, Ranked, Rewrite, RewriteKind, Rewritten, Slot, StageKind

__all__ = ["RoutedRewrite", "ROUTES"]


ROUTES = ("auto", "single", "multi-hop")


class RoutedRewrite:
    """The rewrite stage: the route (``auto``: multi-hop only for a question whose decomposition
    has two or more slots or names a record; ``single``; ``multi-hop``), the rewriter's rewrites, and for a multi-hop
    question the loop's slots and hops.

    A question routed ``single`` is rewritten only if ``rewrite_single`` (so simple questions pay
    for nothing by default). The original question is searched too unless ``search_original`` is
    False, and it is the only question generation and citation checking see.

    Args:
        rewriter: a :class:`~ragdx.protocols.Rewriter` (None: no rewrites).
        multihop: a :class:`~ragdx.stages.multihop.MultiHop` loop (None: no multi-hop path).
        route: ``auto``, ``single`` or ``multi-hop``.
        rewrite_single: rewrite questions routed ``single`` too.
        search_original: search with the original question as well as the rewrites.
    """

    kind = StageKind.REWRITE

    def __init__(self, rewriter: Rewriter | None = None, multihop: MultiHop | None = None, *, route: str = "auto",
                 rewrite_single: bool = False, search_original: bool = True, name: str = "rewrite") -> None:
        if route not in ROUTES:
            raise ConfigError(f"rewrite stage {name!r}: the route must be one of {', '.join(ROUTES)}, not {route!r}")
        self.rewriter, self.multihop, self.route = rewriter, multihop, route
        self.rewrite_single, self.search_original, self.name = rewrite_single, search_original, name

    @property
    def config(self) -> dict[str, Any]:
        return {"route": self.route, "rewrite_single": self.rewrite_single,
                "search_original": self.search_original,
                **({"rewriter": dict(getattr(self.rewriter, "config", {"rewriter": self.rewriter.name}))}
                   if self.rewriter is not None else {}),
                **({"multihop": dict(self.multihop.config)} if self.multihop is not None else {})}

    def warm_up(self) -> None:
        """Load what the rewriter reads once (the offline rewriter's heading index)."""
        load = getattr(self.rewriter, "warm_up", None)
        if load is not None:
            load()

    def routes(self, query: Query) -> str:
        """The route a question takes: ``multi-hop`` or ``single``."""
        return self._route(query)[0]

    def _route(self, query: Query) -> tuple[str, tuple[Slot, ...] | None]:
        """The route, with the slots the decision decomposed the question into (None: not
        decomposed), so the loop does not decompose it again."""
        if self.multihop is None or self.route == "single":
            return "single", None
        if self.route == "multi-hop":
            return "multi-hop", None
        slots = self.multihop.decompose(query)
        # a named record ("order NW-1042") is looked up and its chunk checked to name it exactly,
        # which only the loop does: the nearest order number is not the record
        needed = len(slots) > 1 or any(s.entity for s in slots)
        return ("multi-hop" if needed else "single"), slots

    def run(self, query: Query, channels: Sequence[Retriever] = ()) -> Rewritten:
        started = time.perf_counter()
        route, decomposed = self._route(query)
        rewrites: tuple[Rewrite, ...] = ()
        if self.rewriter is not None and (route == "multi-hop" or self.rewrite_single):
            rewrites = self.rewriter.rewrite(query)
        slots, hops, stopped = (), (), ""
        if route == "multi-hop":
            loop = self.multihop.run(query, channels, decomposed)
            slots, hops, stopped = loop.slots, loop.hops, loop.stopped
            known = {r.text for r in rewrites}
            rewrites += tuple(Rewrite(h.query, RewriteKind.HOP, diff(query.question, h.query))
                              for h in hops if h.filled and h.query not in known)
        return Rewritten(self.name, query.question, rewrites, route, self.search_original, slots, hops, stopped,
                         self.config, time.perf_counter() - started)

    def search(self, channel: Retriever, query: Query, rewritten: Rewritten) -> Ranked:
        """One channel's list for a rewritten question: every text searched, merged by RRF."""
        return search_all(channel, query, rewritten.searches)

    def answer(self, answer: Answer, context: Context, rewritten: Rewritten) -> Answer:
        """The answer to the original question, with a multi-hop question's slot facts."""
        return answer_with_slots(answer, context, rewritten.slots) if rewritten.slots else answer
