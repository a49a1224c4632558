"""CEL source as tokens, and source rewrites that keep error positions pointing at what the author wrote.

A few Kubernetes constructs cannot be declared to cel-expr-python as they are (``Object{...}`` struct
types, member functions two libraries share, functions returning optional values), so the source is
rewritten before type-checking. The rewrites work on tokens, so string literals and comments are never
touched, and they are kept as edits: a compile error about the rewritten text is mapped back to the
line and column of the original source and rendered with the original line, as cel-go would print it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_STRING_START = re.compile(r"(?:[rR][bB]?|[bB][rR]?)?('''|\"\"\"|'|\")")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE = re.compile(r"\s+")
_ISSUE = re.compile(r"ERROR: <input>:(-?\d+):(-?\d+): (.*?)\n \| [^\n]*\n \| [^\n]*", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "ident", "string", "punct"
    text: str
    start: int
    end: int


@functools.lru_cache(maxsize=64)
def tokens(source: str) -> tuple[Token, ...]:
    """The source's tokens; whitespace and ``//`` comments are skipped. Remembered for the last sources: compiling
    one expression lexes its source once for each source rewrite that looks at it."""
    found: list[Token] = []
    position, length = 0, len(source)
    while position < length:
        char = source[position]
        if char.isspace():
            position = _SPACE.match(source, position).end()  # type: ignore[union-attr]
            continue
        if source.startswith("//", position):
            newline = source.find("\n", position)
            position = length if newline < 0 else newline + 1
            continue
        string = _STRING_START.match(source, position)
        if string is not None:
            prefix = source[position:string.start(1)]
            end = _string_end(source, string.end(), string.group(1), raw="r" in prefix.lower())
            found.append(Token("string", source[position:end], position, end))
            position = end
            continue
        identifier = _IDENT.match(source, position)
        if identifier is not None:
            found.append(Token("ident", identifier.group(0), position, identifier.end()))
            position = identifier.end()
            continue
        found.append(Token("punct", char, position, position + 1))
        position += 1
    return tuple(found)


def _string_end(source: str, position: int, quote: str, *, raw: bool) -> int:
    length = len(source)
    while position < length:
        if not raw and source[position] == "\\":
            position += 2
            continue
        if source.startswith(quote, position):
            return position + len(quote)
        if len(quote) == 1 and source[position] == "\n":
            break
        position += 1
    # Unterminated: leave the rest to the parser, which reports it properly.
    return length


def closing_paren(found: Sequence[Token], opening: int) -> int | None:
    """Index of the ``)`` matching the ``(`` at ``opening``, or None when unbalanced."""
    depth = 0
    for index in range(opening, len(found)):
        token = found[index]
        if token.kind != "punct":
            continue
        if token.text in "([{":
            depth += 1
        elif token.text in ")]}":
            depth -= 1
            if depth == 0:
                return index if token.text == ")" else None
    return None


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``source[start:end]`` with ``text``."""

    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class Rewritten:
    original: str
    text: str
    #: Applied edits, in original positions, sorted and not overlapping.
    edits: tuple[Edit, ...]

    def original_offset(self, offset: int) -> int:
        """The offset in the original source of an offset in the rewritten text."""
        shift = 0
        for edit in self.edits:
            new_start = edit.start + shift
            new_end = new_start + len(edit.text)
            if offset < new_start:
                break
            if offset < new_end:
                # Inside inserted text: point at the edited original text (its end for pure insertions).
                return min(edit.start + (offset - new_start), max(edit.end - 1, edit.start))
            shift += len(edit.text) - (edit.end - edit.start)
        return offset - shift

    def restore_errors(self, message: str) -> str:
        """A compile error about the rewritten text, with positions and snippets of the original."""
        if not self.edits:
            return message

        def restore(match: re.Match[str]) -> str:
            line, column = int(match.group(1)), int(match.group(2))
            if line < 1 or column < 1:
                return match.group(0)
            offset = _offset_of(self.text, line, column)
            original_line, original_column = _position_of(self.original, self.original_offset(offset))
            return render_issue(self.original, original_line, original_column, match.group(3))

        return _ISSUE.sub(restore, message)


def apply(source: str, edits: Iterable[Edit]) -> Rewritten:
    ordered = tuple(sorted(edits, key=lambda e: (e.start, e.end)))
    pieces: list[str] = []
    cursor = 0
    for edit in ordered:
        pieces.append(source[cursor:edit.start])
        pieces.append(edit.text)
        cursor = edit.end
    pieces.append(source[cursor:])
    return Rewritten(source, "".join(pieces), ordered)


def _offset_of(text: str, line: int, column: int) -> int:
    lines = text.split("\n")
    return sum(len(lines[i]) + 1 for i in range(min(line - 1, len(lines)))) + column - 1


def _position_of(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def render_issue(source: str, line: int, column: int, message: str) -> str:
    """cel-go's issue rendering, which Kubernetes puts verbatim into its errors."""
    lines = source.split("\n")
    snippet = lines[line - 1] if 0 < line <= len(lines) else ""
    marker = "." * max(column - 1, 0) + "^"
    return f"ERROR: <input>:{line}:{column}: {message}\n | {snippet}\n | {marker}"
