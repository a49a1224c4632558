"""Which parts of ``object`` and ``oldObject`` a set of expressions can read, so the engine is handed only those.

The engine converts a variable's whole Python value the first time an expression reads it (~16 us per KB of a
Pod), and real requests carry much that no policy reads (``metadata.managedFields``, ``status``). Every read of a
variable starts at its identifier; following it through field selections, ``has()``, and indexes and optional
selections by a constant string gives a static path. Wherever that chain stops (a call, a comparison, a loop, an
index that is not a constant string) the value there is used as a whole, so its whole subtree is kept. A map is
only ever iterated, sized or compared where a chain stops, so removing keys no path names is invisible to every
expression: the pruned object gives every expression the same value, error and cost as the whole one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from staticadm.cel import ast

#: Calls that continue a chain when their second argument is a constant string: index, optional select, optional
#: index.
_CHAIN_CALLS = frozenset({"_[_]", "_?._", "_[?_]"})

#: The variables pruned.
OBJECT_ROOTS = frozenset({"object", "oldObject"})

#: A trie of keys; ``None`` for a subtree kept whole.
Trie = dict[str, Any] | None


def _chain(node: Any) -> tuple[str, tuple[str, ...]] | None:
    """(identifier, keys) when ``node`` is a static access chain from an identifier, else None."""
    keys: list[str] = []
    while True:
        kind = node.WhichOneof("expr_kind")
        if kind == "ident_expr":
            return node.ident_expr.name, tuple(reversed(keys))
        if kind == "select_expr":
            keys.append(node.select_expr.field)
            node = node.select_expr.operand
            continue
        if kind == "call_expr":
            call = node.call_expr
            if (call.function in _CHAIN_CALLS and not call.HasField("target") and len(call.args) == 2
                    and call.args[1].WhichOneof("expr_kind") == "const_expr"
                    and call.args[1].const_expr.WhichOneof("constant_kind") == "string_value"):
                keys.append(call.args[1].const_expr.string_value)
                node = call.args[0]
                continue
        return None


def read_paths(expr: Any, roots: frozenset[str]) -> dict[str, set[tuple[str, ...]]]:
    """The paths of ``roots`` (identifiers) that ``expr`` reads; an empty path is the whole value."""
    found: dict[str, set[tuple[str, ...]]] = {root: set() for root in roots}
    stack = [expr]
    while stack:
        node = stack.pop()
        chain = _chain(node)
        if chain is not None:
            # The longest chain from the top: its inner nodes are parts of it, not reads of their own.
            root, keys = chain
            if root in found:
                found[root].add(keys)
            continue
        stack.extend(ast.children(node))
    return found


class Reads:
    """What a snapshot's expressions read of ``object`` and ``oldObject``, and the pruning that follows."""

    __slots__ = ("_tries",)

    def __init__(self, tries: Mapping[str, Trie]) -> None:
        self._tries = dict(tries)

    @classmethod
    def of(cls, read: Iterable[Mapping[str, Iterable[tuple[str, ...]]]]) -> Reads:
        """From what each expression reads (``read_paths`` of ``object`` and ``oldObject``; a compiled expression
        keeps its own: ``CompiledExpression.object_reads``)."""
        tries: dict[str, Trie] = {root: {} for root in OBJECT_ROOTS}
        for paths_by_root in read:
            for root, paths in paths_by_root.items():
                for path in paths:
                    tries[root] = _insert(tries[root], path)
        return cls(tries)

    @classmethod
    def everything(cls) -> Reads:
        return cls({})

    def prune(self, root: str, value: Any) -> Any:
        """``value`` (of variable ``root``) without the keys no expression can read."""
        if root not in self._tries:
            return value
        return _prune(value, self._tries[root])


def _insert(trie: Trie, path: tuple[str, ...]) -> Trie:
    if trie is None or not path:
        return None
    node = trie
    for key in path[:-1]:
        child = node.get(key, {})
        if child is None:
            return trie
        node[key] = child
        node = child
    node[path[-1]] = None
    return trie


def _prune(value: Any, trie: Trie) -> Any:
    if trie is None or not isinstance(value, dict):
        # Kept whole; or not a map, so a deeper path fails on it exactly as on the whole value.
        return value
    return {key: _prune(item, trie[key]) for key, item in value.items() if key in trie}
