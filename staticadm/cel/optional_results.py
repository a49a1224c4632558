"""Kubernetes library functions that return optional values, declared in a form the engine accepts.

``format.named(name)`` returns ``optional(Format)`` and ``<Format>.validate(s)`` returns
``optional(list(string))``. cel-expr-python can neither declare an optional result type for a Python
function nor receive an optional value from one. Both are declared to the checker as returning
``map(int, T)`` (``{}`` for none, ``{0: value}`` otherwise), and every call is followed in the source by
the optional index ``[?0]``, which the engine turns into ``optional.none()`` or ``optional.of(value)``: the
expression type-checks with the real optional type, so ``== optional.none()``, ``.hasValue()``,
``.value()``, ``.orValue()``, ``?.`` chaining and every other optional operation behave as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Sequence

from staticadm.cel import lexer

OPTIONAL_INDEX = "[?0]"


def optional_call_edits(source: str, members: frozenset[str], globals_: frozenset[str]) -> list[lexer.Edit]:
    """Insertions of ``[?0]`` after every call of the given member and global (dotted) functions."""
    found = lexer.tokens(source)
    edits: list[lexer.Edit] = []
    for index, token in enumerate(found):
        if token.kind != "ident":
            continue
        after_dot = index > 0 and found[index - 1].kind == "punct" and found[index - 1].text == "."
        opening = None
        if token.text in members and after_dot:
            opening = index + 1
        else:
            name, end = _dotted_name(found, index)
            if name in globals_ and not after_dot:
                opening = end
        if opening is None or opening >= len(found) or found[opening].text != "(":
            continue
        closing = lexer.closing_paren(found, opening)
        if closing is not None:
            edits.append(lexer.Edit(found[closing].end, found[closing].end, OPTIONAL_INDEX))
    return edits


def _dotted_name(found: Sequence[lexer.Token], index: int) -> tuple[str, int]:
    """(``a.b.c``, index after it) for the qualified name starting at ``index``."""
    parts = [found[index].text]
    cursor = index + 1
    while (cursor + 1 < len(found) and found[cursor].kind == "punct" and found[cursor].text == "."
           and found[cursor + 1].kind == "ident"):
        parts.append(found[cursor + 1].text)
        cursor += 2
    return ".".join(parts), cursor
