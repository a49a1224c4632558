"""Colour in the offline commands' text reports, for a person at a terminal: verdicts in green or red, warnings
in yellow. Never into a pipe or a file (CI logs and scripts get the plain text), and never when ``NO_COLOR`` is
set to anything (https://no-color.org) or the terminal is ``TERM=dumb``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

_GREEN, _RED, _YELLOW, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[0m"


class Palette:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO, environ: Mapping[str, str] | None = None) -> Palette:
        environ = os.environ if environ is None else environ
        isatty = getattr(stream, "isatty", None)
        return cls(bool(isatty is not None and isatty()) and not environ.get("NO_COLOR")
                   and environ.get("TERM") != "dumb")

    def _paint(self, colour: str, text: str) -> str:
        return f"{colour}{text}{_RESET}" if self.enabled and text else text

    def good(self, text: str) -> str:
        return self._paint(_GREEN, text)

    def bad(self, text: str) -> str:
        return self._paint(_RED, text)

    def warn(self, text: str) -> str:
        return self._paint(_YELLOW, text)
