"""Progress of a long step on stderr: what is done of how many, the rate and the time left, drawn
over itself on one line.

On a terminal the line is redrawn over itself. A log file or a pipe gets a whole line only for a
long step, at most one every ``log_every`` seconds (30), and the step's last line when it printed
one: a twenty-minute ingest into a log is not silent, and a short step writes nothing (logs and
tests stay readable). The CLI's ``--quiet`` turns both off everywhere (:func:`quiet`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator, TextIO, TypeVar

__all__ = ["Progress", "quiet"]

T = TypeVar("T")
_QUIET: ContextVar[bool] = ContextVar("ragdx_progress_quiet", default=False)


@contextmanager
def quiet(on: bool = True) -> Iterator[None]:
    """No progress is drawn inside this block (the CLI's ``--quiet``)."""
    token = _QUIET.set(on)
    try:
        yield
    finally:
        _QUIET.reset(token)


#: the environment variable that sets how often a log gets a progress line, in seconds (30)
LOG_SECONDS_ENV = "RAGDX_PROGRESS_LOG_SECONDS"


def _log_seconds() -> float:
    """The interval ``RAGDX_PROGRESS_LOG_SECONDS`` sets; a value that is no number of seconds
    (or is negative) is named in a warning and the default, 30, is used: a progress line is no
    reason to stop a long step."""
    value = os.environ.get(LOG_SECONDS_ENV, "30")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        logging.getLogger("ragdx").warning("%s=%r is not a number of seconds >= 0; using 30", LOG_SECONDS_ENV, value)
        return 30.0
    return seconds


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """One step's progress line: ``label  done/total unit  rate/s  elapsed, left``.

    Args:
        label: what the step does ("parsing and chunking").
        total: how many items the step has (None: unknown; no time left is shown).
        unit: what an item is ("documents").
        stream: where to draw (default stderr).
        every: the least time between two redraws on a terminal, in seconds.
        log_every: off a terminal, the least time between two whole lines, in seconds (the first
            comes after as long); default ``RAGDX_PROGRESS_LOG_SECONDS`` or 30.

    Use it as a context manager (the line is ended when the step ends) and call :meth:`advance`.
    """

    def __init__(self, label: str, total: int | None = None, *, unit: str = "",
                 stream: TextIO | None = None, every: float = 0.2, log_every: float | None = None) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self.shown = not _QUIET.get() and self.terminal
        self.logged = not _QUIET.get() and not self.terminal  # whole lines, now and then
        self.every = every
        self.log_every = log_every if log_every is not None else _log_seconds()
        self._lines = 0
        self.done = 0
        self.note = ""
        self.started = time.perf_counter()
        self._drawn = self.started  # off a terminal, the first line comes log_every after the start
        self._width = 0

    def __enter__(self) -> "Progress":
        self.started = self._drawn = time.perf_counter()
        self._draw(force=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def advance(self, n: int = 1, note: str = "") -> None:
        """``n`` more items are done; ``note`` says which (shown after the counts)."""
        self.done += n
        self.note = note
        self._draw(force=self.total is not None and self.done >= self.total)

    def set(self, done: int, note: str = "") -> None:
        """``done`` items are done in all (another process may have done some of them)."""
        self.advance(done - self.done, note)

    def iterate(self, items: Iterable[T]) -> Iterator[T]:
        """Yield the items, advancing by one after each."""
        for item in items:
            yield item
            self.advance()

    def line(self) -> str:
        """The progress line as it is drawn now."""
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        unit = f" {self.unit}" if self.unit else ""
        if self.total is None:
            counts = f"{self.done:,}{unit}"
        else:
            share = self.done / self.total if self.total else 1.0
            counts = f"{self.done:,}/{self.total:,}{unit} ({share:.0%})"
        timing = f"{rate:,.1f}/s, {_clock(elapsed)}"
        if self.total is not None and 0 < self.done < self.total and rate > 0:
            timing += f", {_clock((self.total - self.done) / rate)} left"
        note = f"  {self.note}" if self.note else ""
        return f"{self.label}: {counts}  {timing}{note}"

    def close(self) -> None:
        """Draw the final line and end it (off a terminal: only after a line was written)."""
        if self.logged and self._lines:
            self._log()
            self._lines = 0
        if self.shown and self._width:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def _log(self) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()
        self._lines += 1

    def _draw(self, force: bool = False) -> None:
        if self.logged:
            now = time.perf_counter()
            if now - self._drawn >= self.log_every:
                self._drawn = now
                self._log()
            return
        if not self.shown:
            return
        now = time.perf_counter()
        if not force and now - self._drawn < self.every:
            return
        self._drawn = now
        text = self.line()
        self.stream.write("\r" + text + " " * max(0, self._width - len(text)))
        self.stream.flush()
        self._width = len(text)
