"""Crash points for the durability tests: ``RAGDX_KILL_AT=POINT[:N]`` makes the process kill
itself with SIGKILL the N-th time (default the first) it reaches ``POINT``, so a test can stop a
real ``ragdx`` command at an exact place, every run (docs/ingest.md, "Crash safety").

Points: ``commit`` (a store transaction about to commit: everything is written, nothing is
committed), ``committed`` (just after a commit), ``staged`` (an index build, after a batch of
versions was staged and committed).
"""

from __future__ import annotations

import os
import signal

_reached: dict[str, int] = {}


def fault_point(point: str) -> None:
    """Kill this process here if ``RAGDX_KILL_AT`` names this point (and this is its N-th time)."""
    wanted = os.environ.get("RAGDX_KILL_AT")
    if not wanted:
        return
    name, _, count = wanted.partition(":")
    if name != point:
        return
    _reached[point] = _reached.get(point, 0) + 1
    if _reached[point] == (int(count) if count.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)
