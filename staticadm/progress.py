"""Progress of a long offline run, on stderr, for a person watching a terminal.

Nothing is written unless stderr is a terminal and the run has lasted ``delay`` seconds (most runs end
sooner and stay silent); then one line is rewritten in place at most every ``interval`` seconds and
cleared at the end, so what the command prints (stdout, and its own stderr lines) is unchanged. Never
written into a pipe or a file: CI logs get no carriage returns.
"""

from __future__ import annotations

import time
from typing import TextIO

#: Seconds of silence before the first progress line (the issue: "runs longer than ~2 s").
DEFAULT_DELAY = 2.0
DEFAULT_INTERVAL = 0.2


class Progress:
    def __init__(self, stream: TextIO, what: str, total: int | None = None, *, delay: float = DEFAULT_DELAY,
                 interval: float = DEFAULT_INTERVAL) -> None:
        isatty = getattr(stream, "isatty", None)
        self._stream = stream
        self._enabled = bool(isatty is not None and isatty())
        self._what = what
        self._total = total
        self._count = 0
        self._started = time.monotonic()
        self._delay = delay
        self._interval = interval
        self._next_write = self._started + delay
        self._width = 0

    def advance(self, count: int = 1) -> None:
        self._count += count
        if self._enabled:
            self._maybe_write()

    def relabel(self, what: str, total: int | None = None, *, keep_count: bool = False) -> None:
        """A new phase (listing another resource, ...); the count restarts unless ``keep_count``."""
        self._what, self._total = what, total
        if not keep_count:
            self._count = 0
        if self._enabled:
            self._maybe_write()

    def _maybe_write(self) -> None:
        now = time.monotonic()
        if now < self._next_write:
            return
        self._next_write = now + self._interval
        of = f"/{self._total}" if self._total is not None else ""
        text = f"{self._what}: {self._count}{of} ({now - self._started:.0f} s)"
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()
        self._width = len(text)

    def write_line(self, text: str) -> None:
        """A line of the command's own (a note, a warning) that the progress line must not overwrite."""
        self.clear()
        self._stream.write(text + "\n")

    def clear(self) -> None:
        if self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0
            self._next_write = time.monotonic() + self._interval

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()
