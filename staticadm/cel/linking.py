"""Policy variables bound into each expression that reads them, evaluated by the engine itself.

Kubernetes exposes a policy's variables as ``variables.<name>``, each evaluated lazily the first time it
is read and then remembered (``admission/plugin/cel/composition.go``, ``pkg/cel/lazy``). The engine
has the same construct: ``cel.@block([e0, e1, ...], body)`` evaluates ``e<i>`` when ``@index<i>`` is
first read and remembers it. So every expression is linked into a block holding the variables it
reads (directly or through other variables), in declaration order, and the values never leave the
engine: optional values, Kubernetes value types and large lists stay as they are, and nothing is
converted to Python and back.

- ``variables.x`` becomes ``@index<k>``; ``has(variables.x)`` becomes ``size([@index<k>]) == 1``: true
  once the variable evaluates, its error otherwise (the lazy map's ``Find`` resolves the value).
- A variable that failed to compile, or that fails to evaluate when the evaluation has to say so in
  Kubernetes' words (``composited variable "x" fails to evaluate: ...``), is linked as a call of
  ``@staticadm.fail`` with that message: an error only when read, as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from staticadm.cel import ast
from staticadm.cel.rewrite import Ids, call, ident, int_constant, list_of

VARIABLES = "variables"
BLOCK_FUNCTION = "cel.@block"
FAIL_FUNCTION = "@staticadm.fail"
INDEX_PREFIX = "@index"

#: A variable as linking sees it: its prepared AST, or the error message reading it must produce.
LinkedVariable = Any | str


def direct_uses(checked: Any) -> frozenset[str]:
    """The variable names an expression reads as ``variables.<name>`` (``has()`` included)."""
    names = set()
    for node in ast.walk(checked.expr):
        if node.WhichOneof("expr_kind") == "select_expr":
            operand = node.select_expr.operand
            if operand.WhichOneof("expr_kind") == "ident_expr" and operand.ident_expr.name == VARIABLES:
                names.add(node.select_expr.field)
    return frozenset(names)


def closure(uses: frozenset[str], variables: Sequence[tuple[str, LinkedVariable]]) -> list[str]:
    """Every variable ``uses`` needs, through other variables too, in declaration order."""
    by_name = dict(variables)
    needed: set[str] = set()
    pending = [name for name in uses if name in by_name]
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        value = by_name[name]
        if not isinstance(value, str):
            pending.extend(direct_uses(value) - needed)
    return [name for name, _ in variables if name in needed]


def link(body: Any, variables: Sequence[tuple[str, LinkedVariable]]) -> Any:
    """The block form of ``body`` (a prepared CheckedExpr) over the variables it reads.

    ``variables`` are the policy's variables in declaration order (only earlier ones for a variable).
    Returns a new CheckedExpr; ``body`` is returned unchanged when it reads no variable.
    """
    names = closure(direct_uses(body), variables)
    if not names:
        return body
    by_name = dict(variables)
    index_of = {name: position for position, name in enumerate(names)}
    linked = ast.CheckedExpr()
    linked.CopyFrom(body)
    next_id = ast.max_id(linked)

    entries: list[Any] = []
    for name in names:
        value = by_name[name]
        if isinstance(value, str):
            entries.append(failing_variable(Ids(next_id), value))
            next_id += 2
            continue
        component, next_id = _renumbered_component(value, next_id)
        linked.type_map.MergeFrom(component.type_map)
        linked.reference_map.MergeFrom(component.reference_map)
        entries.append(component.expr)
    ids = Ids(next_id)
    for entry in entries:
        bind_variables(entry, index_of, ids)
    bind_variables(linked.expr, index_of, ids)

    root_type = linked.type_map.get(linked.expr.id) if linked.expr.id in linked.type_map else None
    body_expr = ast.Expr()
    body_expr.CopyFrom(linked.expr)
    block = call(ids(), BLOCK_FUNCTION, list_of(ids(), *entries), body_expr)
    linked.expr.CopyFrom(block)
    if root_type is not None:
        linked.type_map[block.id].CopyFrom(root_type)
    return linked


def _renumbered_component(checked: Any, after: int) -> tuple[Any, int]:
    """A copy of a variable's AST whose ids all lie above ``after`` (ids must be unique per program)."""
    copy = ast.CheckedExpr()
    copy.CopyFrom(checked)
    offset = after
    highest = after
    for node in ast.walk(copy.expr):
        node.id += offset
        highest = max(highest, node.id)
    types = {key + offset: value for key, value in copy.type_map.items()}
    references = {key + offset: value for key, value in copy.reference_map.items()}
    copy.ClearField("type_map")
    copy.ClearField("reference_map")
    for key, value in types.items():
        copy.type_map[key].CopyFrom(value)
    for key, value in references.items():
        copy.reference_map[key].CopyFrom(value)
    return copy, highest


def failing_variable(ids: Ids, message: str) -> Any:
    """A block entry that is the error ``message`` when read (a variable that failed)."""
    text = ast.Expr(id=ids())
    text.const_expr.string_value = message
    return call(ids(), FAIL_FUNCTION, text)


def index_reference(node_id: int, position: int) -> Any:
    """A read of the block entry at ``position``."""
    return ident(node_id, f"{INDEX_PREFIX}{position}")


def bind_variables(expr: Any, index_of: Mapping[str, int], ids: Ids) -> None:
    """``variables.<name>`` in ``expr`` read as the block entry ``index_of[name]``."""
    for node in list(ast.walk(expr)):
        if node.WhichOneof("expr_kind") != "select_expr":
            continue
        select = node.select_expr
        operand = select.operand
        if operand.WhichOneof("expr_kind") != "ident_expr" or operand.ident_expr.name != VARIABLES:
            continue
        if select.field not in index_of:
            continue
        position = index_of[select.field]
        if select.test_only:
            # has(variables.x): true once x evaluates, x's error otherwise.
            size = call(ids(), "size", list_of(ids(), index_reference(ids(), position)))
            node.CopyFrom(call(node.id, "_==_", size, int_constant(ids(), 1)))
        else:
            node.CopyFrom(index_reference(node.id, position))
