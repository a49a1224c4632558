"""Rewrites of a checked AST that give the engine Kubernetes' runtime behaviour.

- every comprehension's loop condition first calls the budget function, which bounds iterations and
  wall time per request (Kubernetes' per-call cost limit; the engine has no cost tracking of its own);
- ``variables.<name>`` becomes a call that evaluates the variable lazily, once per request;
- calls of functions declared to return ``optional_type(T)`` are wrapped in
  ``optional.ofNonZeroValue`` because Python functions cannot return optional values to the engine;
- ``lists.range(n)`` gets its argument bounded, since it allocates natively before any loop runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from staticadm.cel import ast

BUDGET_FUNCTION = "@staticadm.budget"
VARIABLE_FUNCTION = "@staticadm.variable"
RANGE_GUARD_FUNCTION = "@staticadm.rangeGuard"


class _Ids:
    def __init__(self, start: int) -> None:
        self._next = start

    def __call__(self) -> int:
        self._next += 1
        return self._next


def _make_type_constant(node: Any, type_name: str) -> None:
    # The runtime represents every Kubernetes value as a map, so type(x) cannot tell them apart there;
    # the checker already knows the static type, which is all type(x) can be for these values.
    node_id = node.id
    node.Clear()
    node.id = node_id
    node.const_expr.string_value = TYPE_CONSTANT_PREFIX + type_name


def _call(node_id: int, function: str, *args: Any) -> Any:
    node = ast.Expr(id=node_id)
    node.call_expr.function = function
    for arg in args:
        node.call_expr.args.add().CopyFrom(arg)
    return node


TYPE_CONSTANT_PREFIX = "@type:"


def rewrite_for_runtime(checked: Any, optional_functions: frozenset[str], opaque_types: frozenset[str],
                        null_variables: frozenset[str] = frozenset(),
                        typed_calls: Mapping[str, str] | None = None) -> Any:
    """The runtime form of a checked expression; ``null_variables`` are variables that are always null for
    this kind of expression (match conditions never see ``namespaceObject``), so the expression can share
    an activation with the others of its request."""
    result = ast.CheckedExpr()
    result.CopyFrom(checked)
    ids = _Ids(ast.max_id(result))
    types = ast.node_types(result)
    # Collect first: rewriting while walking would visit the nodes we insert.
    nodes = list(ast.walk(result.expr))
    for node in nodes:
        kind = node.WhichOneof("expr_kind")
        reference = result.reference_map.get(node.id) if node.id in result.reference_map else None
        if kind == "ident_expr" and reference is not None and reference.name in null_variables:
            node.const_expr.null_value = 0
            continue
        if reference is not None and reference.name in opaque_types and not reference.overload_id:
            # The identifier of a Kubernetes value type: compare as a constant (see below).
            _make_type_constant(node, reference.name)
            continue
        if kind == "call_expr" and node.call_expr.function == "type" and not node.call_expr.HasField("target"):
            checked_type = types.get(node.id, "")
            if checked_type.startswith("type(") and checked_type[5:-1] in opaque_types:
                _make_type_constant(node, checked_type[5:-1])
                continue
        if kind == "comprehension_expr":
            comprehension = node.comprehension_expr
            condition = ast.Expr()
            condition.CopyFrom(comprehension.loop_condition)
            comprehension.loop_condition.CopyFrom(_call(ids(), "_&&_", _call(ids(), BUDGET_FUNCTION), condition))
        elif kind == "select_expr" and not node.select_expr.test_only:
            operand = node.select_expr.operand
            if operand.WhichOneof("expr_kind") == "ident_expr" and operand.ident_expr.name == "variables":
                name = ast.Expr(id=ids())
                name.const_expr.string_value = node.select_expr.field
                node.CopyFrom(_call(node.id, VARIABLE_FUNCTION, name))
        elif kind == "call_expr":
            call = node.call_expr
            overload_ids = list(reference.overload_id) if reference is not None else []
            if typed_calls and len(overload_ids) == 1 and overload_ids[0] in typed_calls:
                # The checker resolved one overload whose result the engine needs declared concretely.
                call.function = typed_calls[overload_ids[0]]
            elif call.function == "lists.range" and len(call.args) == 1:
                bounded = _call(ids(), RANGE_GUARD_FUNCTION, call.args[0])
                call.args[0].CopyFrom(bounded)
            elif call.function in optional_functions:
                inner = ast.Expr()
                inner.CopyFrom(node)
                inner.id = ids()
                # The overload reference belongs to the wrapped call, not to the wrapper.
                if node.id in result.reference_map:
                    result.reference_map[inner.id].CopyFrom(result.reference_map[node.id])
                    del result.reference_map[node.id]
                node.CopyFrom(_call(node.id, "optional.ofNonZeroValue", inner))
    return result
