"""Crash and pause points for the durability tests: ``RAGDX_KILL_AT=POINT[:N]`` makes the process
kill itself with SIGKILL the N-th time (default the first) it reaches ``POINT``, so a test can stop
a real ``ragdx`` command at an exact place, every run (docs/ingest.md, "Crash safety");
:func:`pausing` runs a callable at every point reached, so a test can check a store from another
process while the writer waits at an exact place.

Points: ``commit`` (a store transaction about to commit: everything is written, nothing is
committed), ``committed`` (just after a commit), ``staged`` (an index build, after a batch of
versions was staged and committed), ``embedded`` (an index build, after a batch of vectors).

Why an environment variable in library code: a SIGKILL cannot be sent at an exact statement
from outside, and a test must kill the real command, not a copy of it. Unset (always, outside
the tests), a point reads one variable and does nothing.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Callable, Iterator

_reached: dict[str, int] = {}
_listeners: list[Callable[[str], None]] = []


def fault_point(point: str) -> None:
    """Kill this process here if ``RAGDX_KILL_AT`` names this point (and this is its N-th time);
    run the callables :func:`pausing` installed."""
    for listener in list(_listeners):
        listener(point)
    wanted = os.environ.get("RAGDX_KILL_AT")
    if not wanted:
        return
    name, _, count = wanted.partition(":")
    if name != point:
        return
    _reached[point] = _reached.get(point, 0) + 1
    if _reached[point] == (int(count) if count.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def pausing(listener: Callable[[str], None]) -> Iterator[None]:
    """Call ``listener(point)`` at every point this process reaches, inside the block: the
    writer waits there until it returns (tests/store/test_crash_index.py)."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
