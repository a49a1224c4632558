"""Colour in the offline commands' text reports, for a person at a terminal: verdicts in green or red, warnings
in yellow. Never into a pipe or a file (CI logs and scripts get the plain text), and never when ``NO_COLOR`` is
set to anything (https://no-color.org), the terminal is ``TERM=dumb`` or the command was given ``--no-color``
(:func:`without_colour` around it)."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Mapping
from typing import TextIO

_GREEN, _RED, _YELLOW, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[0m"
#: Set while a command given --no-color runs (a context variable: a command run in-process, as the tests run
#: them, leaves no trace on the next).
_REFUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("staticadm_no_colour", default=False)


@contextlib.contextmanager
def without_colour(refused: bool = True) -> Iterator[None]:
    """No colour in what runs inside, whatever the stream (``--no-color``); ``refused=False`` changes nothing."""
    token = _REFUSED.set(refused or _REFUSED.get())
    try:
        yield
    finally:
        _REFUSED.reset(token)


class Palette:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO, environ: Mapping[str, str] | None = None) -> Palette:
        environ = os.environ if environ is None else environ
        isatty = getattr(stream, "isatty", None)
        return cls(bool(isatty is not None and isatty()) and not environ.get("NO_COLOR")
                   and environ.get("TERM") != "dumb" and not _REFUSED.get())

    def _paint(self, colour: str, text: str) -> str:
        return f"{colour}{text}{_RESET}" if self.enabled and text else text

    def good(self, text: str) -> str:
        return self._paint(_GREEN, text)

    def bad(self, text: str) -> str:
        return self._paint(_RED, text)

    def warn(self, text: str) -> str:
        return self._paint(_YELLOW, text)
