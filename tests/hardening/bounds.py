"""A time and memory bound for one piece of code run in the test process (a fuzz case), so that a
loop fails the test instead of hanging CI or exhausting the machine."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Iterator

_PAGE = os.sysconf("SC_PAGE_SIZE")


class OutOfBounds(AssertionError):
    """The code ran longer, or its process grew more, than the bound allows."""


def rss() -> int:
    """This process's resident memory in bytes (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


@contextlib.contextmanager
def bounded(seconds: float = 30.0, megabytes: int = 400) -> Iterator[dict[str, float]]:
    """Run the body at most ``seconds`` and let the process grow at most ``megabytes``.

    A timer (SIGALRM) and a thread that samples the resident memory every 20 ms interrupt the
    main thread with :class:`OutOfBounds`. Yields a dict that holds, afterwards, the body's
    ``seconds`` and its peak growth in ``megabytes``.
    """
    base, seen = rss(), {"peak": 0}
    tripped: list[str] = []
    stop = threading.Event()

    def interrupt(signum: int, frame: object) -> None:
        raise OutOfBounds(tripped[0] if tripped else f"ran for more than {seconds} s")

    def watch() -> None:
        while not stop.wait(0.02):
            seen["peak"] = max(seen["peak"], rss() - base)
            if seen["peak"] > megabytes << 20 and not tripped:
                tripped.append(f"the process grew by more than {megabytes} MB")
                os.kill(os.getpid(), signal.SIGALRM)

    figures: dict[str, float] = {}
    previous = signal.signal(signal.SIGALRM, interrupt)
    watcher = threading.Thread(target=watch, daemon=True)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    watcher.start()
    try:
        yield figures
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        stop.set()
        watcher.join()
        signal.signal(signal.SIGALRM, previous)
        figures.update(seconds=time.monotonic() - started, megabytes=max(seen["peak"], rss() - base) / 2 ** 20)

