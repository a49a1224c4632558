"""Macro spellings cel-go accepts and cel-cpp does not.

cel-go's ``ext.TwoVarComprehensions`` (enabled by Kubernetes since 1.32) registers the three-argument
``existsOne`` macro under two names, ``existsOne`` and ``exists_one``; cel-cpp's two-variable
comprehensions only know ``existsOne``, so ``m.exists_one(k, v, p)`` would not expand and fail to check
(``undeclared reference to 'k'``). Before checking, such calls are respelt ``existsOne`` (a source
edit: error positions map back to the source as written).
"""

from __future__ import annotations

from collections.abc import Sequence

from staticadm.cel import lexer

_LEGACY = "exists_one"
_MODERN = "existsOne"


def exists_one_edits(source: str) -> list[lexer.Edit]:
    """Edits respelling every three-argument ``.exists_one(`` member call ``.existsOne(``."""
    found = lexer.tokens(source)
    edits = []
    for index, token in enumerate(found):
        if token.kind != "ident" or token.text != _LEGACY or index == 0 or found[index - 1].text != ".":
            continue
        if index + 1 >= len(found) or found[index + 1].text != "(":
            continue
        closing = lexer.closing_paren(found, index + 1)
        if closing is not None and _top_level_arguments(found, index + 1, closing) == 3:
            edits.append(lexer.Edit(token.start, token.end, _MODERN))
    return edits


def _top_level_arguments(found: Sequence[lexer.Token], opening: int, closing: int) -> int:
    if closing == opening + 1:
        return 0
    depth, commas = 0, 0
    for token in found[opening + 1:closing]:
        if token.kind != "punct":
            continue
        if token.text in "([{":
            depth += 1
        elif token.text in ")]}":
            depth -= 1
        elif token.text == "," and depth == 0:
            commas += 1
    return commas + 1
