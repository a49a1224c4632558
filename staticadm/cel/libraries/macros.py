"""Macro spellings cel-go accepts and cel-cpp does not.

cel-go's ``ext.TwoVarComprehensions`` (enabled by Kubernetes since 1.32) registers the three-argument
``existsOne`` macro under two names, ``existsOne`` and ``exists_one``; cel-cpp's two-variable
comprehensions only know ``existsOne``, so ``m.exists_one(k, v, p)`` would not expand and fail to check
(``undeclared reference to 'k'``). Before checking, such calls are respelt ``existsOne `` (a trailing
space before the parenthesis keeps every source position, so error columns stay exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from staticadm.cel import ast

_LEGACY = "exists_one"
_MODERN = "existsOne "  # same length as _LEGACY


def respell_exists_one(source: str, parse: Callable[[str], Any]) -> str:
    """``source`` with every three-argument ``.exists_one(`` member call respelt ``.existsOne (``.

    ``parse(source)`` returns the parsed (unchecked) ``cel.expr.ParsedExpr``; sources that do not
    parse come back unchanged, for the checker to report."""
    if _LEGACY not in source:
        return source
    try:
        parsed = parse(source)
    except RuntimeError:
        return source
    # A member call's position is its opening parenthesis (cel-go's and cel-cpp's parsers agree).
    offsets = sorted(
        (
            parsed.source_info.positions[node.id]
            for node in ast.walk(parsed.expr)
            if node.WhichOneof("expr_kind") == "call_expr"
            and node.call_expr.function == _LEGACY
            and node.call_expr.HasField("target")
            and len(node.call_expr.args) == 3
            and node.id in parsed.source_info.positions
        ),
        reverse=True,
    )
    text = list(source)
    for paren in offsets:
        end = paren
        while end > 0 and text[end - 1] in " \t\r\n":
            end -= 1
        start = end - len(_LEGACY)
        if start >= 0 and "".join(text[start:end]) == _LEGACY:
            text[start:end] = list(_MODERN)
    return "".join(text)


def restore_source(message: str, respelt: str, original: str) -> str:
    """An error text about ``respelt`` with the source lines it quotes shown as the author wrote them."""
    if respelt == original:
        return message
    for respelt_line, original_line in zip(respelt.split("\n"), original.split("\n"), strict=True):
        if respelt_line != original_line:
            message = message.replace(f" | {respelt_line}", f" | {original_line}")
    return message
