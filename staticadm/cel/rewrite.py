"""Rewrites of a checked AST that give the engine Kubernetes' runtime behaviour.

- every comprehension's loop condition first calls the budget function, which bounds iterations and
  wall time per request (Kubernetes' per-call cost limit; the engine has no cost tracking of its own);
- ``variables.<name>`` becomes a call that evaluates the variable lazily, once per request;
- calls of functions declared to return ``optional_type(T)`` are wrapped in
  ``optional.ofNonZeroValue`` because Python functions cannot return optional values to the engine;
- ``lists.range(n)`` gets its argument bounded, since it allocates natively before any loop runs.
"""

from __future__ import annotations

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


def _call(node_id: int, function: str, *args: Any) -> Any:
    node = ast.Expr(id=node_id)
    node.call_expr.function = function
    for arg in args:
        node.call_expr.args.add().CopyFrom(arg)
    return node


def rewrite_for_runtime(checked: Any, optional_functions: frozenset[str]) -> Any:
    result = ast.CheckedExpr()
    result.CopyFrom(checked)
    ids = _Ids(ast.max_id(result))
    # Collect first: rewriting while walking would visit the nodes we insert.
    nodes = list(ast.walk(result.expr))
    for node in nodes:
        kind = node.WhichOneof("expr_kind")
        if kind == "comprehension_expr":
            comprehension = node.comprehension_expr
            condition = ast.Expr()
            condition.CopyFrom(comprehension.loop_condition)
            comprehension.loop_condition.CopyFrom(
                _call(ids(), "_&&_", _call(ids(), BUDGET_FUNCTION), condition))
        elif kind == "select_expr" and not node.select_expr.test_only:
            operand = node.select_expr.operand
            if operand.WhichOneof("expr_kind") == "ident_expr" and operand.ident_expr.name == "variables":
                name = ast.Expr(id=ids())
                name.const_expr.string_value = node.select_expr.field
                node.CopyFrom(_call(node.id, VARIABLE_FUNCTION, name))
        elif kind == "call_expr":
            call = node.call_expr
            if call.function == "lists.range" and len(call.args) == 1:
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
