"""kubectl's table output for the offline commands (``-o table``, ``-o wide``): a header of upper-case column
names, one row per item, columns left-aligned and three spaces apart (kubectl's printers.GetNewTabWriter:
tabwriter padding 3), ``<none>`` for an empty cell; ``wide`` adds columns, as ``kubectl get -o wide`` does.

``table`` is the default of ``review``, ``test``, ``audit`` and ``diff`` on a terminal; into a pipe or a file they
keep their line-per-finding text, which scripts and CI logs already read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

#: The formats that print a table.
TABLE_OUTPUTS = ("table", "wide")
NONE = "<none>"
_PADDING = 3


def default_output(chosen: str | None, stdout: TextIO) -> str:
    """``-o`` as given, else ``table`` on a terminal and ``text`` elsewhere."""
    if chosen is not None:
        return chosen
    isatty = getattr(stdout, "isatty", None)
    return "table" if isatty is not None and isatty() else "text"


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    # A cell is one line: kubectl's table printer shows a multi-line value on one.
    text = " ".join(text.split())
    return text or NONE


def write_table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[object]],
                paint: Mapping[int, Callable[[str], str]] | None = None, *,
                empty: str = "No resources found.") -> None:
    """The rows under their headers; ``paint`` colours a column's cells after they are padded (so colour codes
    never count towards a width). No rows: ``empty`` on its own line, as kubectl says "No resources found."."""
    if not rows:
        out.write(f"{empty}\n")
        return
    cells = [[header.upper() for header in headers], *([_cell(value) for value in row] for row in rows)]
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    paint = paint or {}
    for number, row in enumerate(cells):
        parts = []
        for index, text in enumerate(row):
            last = index == len(row) - 1
            padded = text if last else text.ljust(widths[index] + _PADDING)
            if number and index in paint:
                padded = paint[index](text) + padded[len(text):]
            parts.append(padded)
        out.write("".join(parts).rstrip() + "\n")
