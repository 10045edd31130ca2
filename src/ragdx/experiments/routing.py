"""Routing: per kind of question, the cheapest configuration that answers as well as any.

Each query is routed by its first tag (its kind; ``(untagged)`` when it has none). For each route,
among the baseline and the variants (every one run on every query), the table picks the one with
the highest answer success on that route's queries, ties going to the lower mean latency, then
the lower cost — so a costly variant is used only where it pays. Because every configuration ran
on every query, the routed system's success, latency and cost are exact sums of per-query
values, compared with running each configuration everywhere.

The choice is made and measured on the same queries, so it is optimistic: confirm a routing table
on a held-out query set before relying on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ragdx.errors import ConfigError
from ragdx.evaluation.layered import QueryValues


def route_key(row: QueryValues) -> str:
    return row.tags[0] if row.tags else "(untagged)"


@dataclass(frozen=True, slots=True)
class Totals:
    """A configuration's results over a set of queries."""

    queries: int
    success: float       # mean answer success
    latency_ms: float    # mean total latency per query
    cost: float          # total money

    def to_dict(self) -> dict:
        return {"queries": self.queries, "success": self.success, "latency_ms": self.latency_ms, "cost": self.cost}


def totals(rows: Sequence[QueryValues]) -> Totals:
    """Success over every query; mean latency over the queries that recorded one (a query without
    a trace or timings has no latency, and counting it as 0 ms would flatter its configuration)."""
    n = len(rows)
    if not n:
        return Totals(0, 0.0, 0.0, 0.0)
    latencies = [v for r in rows if (v := r.values.get("latency_ms total")) is not None]
    return Totals(n, sum(r.values.get("success") or 0.0 for r in rows) / n,
                  sum(latencies) / len(latencies) if latencies else 0.0,
                  sum(r.values.get("cost") or 0.0 for r in rows))


@dataclass(frozen=True, slots=True)
class Route:
    key: str
    choice: str
    options: Mapping[str, Totals]


@dataclass(frozen=True, slots=True)
class RoutingTable:
    routes: tuple[Route, ...]
    routed: Totals
    fixed: Mapping[str, Totals]   # each configuration used for every query
    best_fixed: str               # the best configuration used everywhere (success, then latency, cost)

    @property
    def latency_saved_ms(self) -> float:
        """Mean latency per query saved against the best configuration used everywhere."""
        return self.fixed[self.best_fixed].latency_ms - self.routed.latency_ms

    @property
    def cost_saved(self) -> float:
        return self.fixed[self.best_fixed].cost - self.routed.cost

    def to_dict(self) -> dict:
        return {"by": "first tag", "routes": [{"key": r.key, "choice": r.choice,
                                               "options": {n: t.to_dict() for n, t in r.options.items()}}
                                              for r in self.routes],
                "routed": self.routed.to_dict(), "fixed": {n: t.to_dict() for n, t in self.fixed.items()},
                "best_fixed": self.best_fixed, "latency_saved_ms": self.latency_saved_ms,
                "cost_saved": self.cost_saved,
                "caveat": "chosen and measured on the same queries: confirm on a held-out query set"}


def _rank(t: Totals) -> tuple[float, float, float]:
    return (-t.success, t.latency_ms, t.cost)


def routing_table(runs: Mapping[str, Sequence[QueryValues]]) -> RoutingTable:
    """The routing table over configurations that each ran the same queries (name -> rows)."""
    if not runs:
        raise ConfigError("routing needs at least one configuration")
    ids = None
    for name, rows in runs.items():
        these = [r.id for r in rows]
        if ids is not None and sorted(these) != sorted(ids):
            raise ConfigError(f"configuration {name!r} ran other queries than the rest; routing compares "
                              "configurations on the same queries")
        ids = these
    keys = sorted({route_key(r) for rows in runs.values() for r in rows})
    routes, chosen_rows = [], []
    for key in keys:
        options = {name: totals([r for r in rows if route_key(r) == key]) for name, rows in runs.items()}
        choice = min(options, key=lambda n: _rank(options[n]))
        routes.append(Route(key, choice, options))
        chosen_rows += [r for r in runs[choice] if route_key(r) == key]
    fixed = {name: totals(rows) for name, rows in runs.items()}
    best = min(fixed, key=lambda n: _rank(fixed[n]))
    return RoutingTable(tuple(routes), totals(chosen_rows), fixed, best)
