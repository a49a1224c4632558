"""Several policies' expressions as one engine program: whether a request is all clear, in one call.

A request usually passes every policy it invokes, and evaluating their expressions one engine call at a
time costs more in calls than in evaluation. :func:`fuse` joins what the policies of one request evaluate
(each policy's match conditions, validations and audit annotations, with its variables) into one program:

- every policy's variables are entries of one ``cel.@block`` (each policy's own, evaluated lazily when one
  of its expressions first reads it, as when its expressions run one by one: ``linking.py``);
- a policy with match conditions contributes ``c1 ? (c2 ? (validations ? 0 : -1) : 2) : 1``, also a block
  entry: 0 when its conditions hold and its validations pass, ``k`` when its ``k``-th condition is false (the
  first false one, as the matcher reads them), -1 when a validation did not pass; each condition is a block
  entry of its own, and ``size([c1, c2]) == 2`` is a guard, so all of them are evaluated (and charged) whatever
  the first false one, as the matcher evaluates them; a policy without match conditions contributes its
  validations;
- the result is ``all of them true and every such outcome >= 0 ? [outcomes..., annotations...] : false``, each
  annotation's value false when it is null or its policy's conditions did not hold (a bare bool when there is
  nothing to list). No null ever reaches Python: cel-expr-python 0.1.3 hands one over without a reference of
  its own (see ``values.py``).

Any false or error makes the result something else than that shape (``&&`` never turns an error into true:
``error && true`` is the error), and the caller then evaluates everything one expression at a time, which
says exactly what happened; so the program only needs to be right when it answers "all clear".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from staticadm.cel import ast, linking
from staticadm.cel.rewrite import Ids, bool_constant, call, int_constant, list_of

#: Outcome of a policy whose match conditions held and whose validations all passed.
APPLIES = 0
#: Outcome of a policy whose match conditions held and one of whose validations did not pass.
NOT_PASSED = -1


@dataclass(frozen=True, slots=True)
class FusedPolicy:
    """What one policy evaluates for a request, as prepared ASTs (``CompiledExpression.prepared``): its variables
    in declaration order (the text of an error for one that did not compile), its match conditions, its
    validations and its audit annotations' value expressions."""

    variables: Sequence[tuple[str, Any | str]]
    conditions: Sequence[Any]
    validations: Sequence[Any]
    annotations: Sequence[Any]


@dataclass(frozen=True, slots=True)
class FusedLayout:
    """Where the result of a fused program says what: ``listed`` False when the result is a bare bool (no
    policy has match conditions or annotations); otherwise a list whose first ``conditional`` entries are the
    outcomes of the policies with match conditions, in order, followed by every annotation's value."""

    listed: bool
    conditional: int


def renumbered(checked: Any, ids: Ids, into: Any) -> Any:
    """A copy of ``checked``'s expression with fresh ids from ``ids``, its types and references copied into the
    CheckedExpr ``into`` (ids must be unique in one program)."""
    part = ast.Expr()
    part.CopyFrom(checked.expr)
    for node in ast.walk(part):
        old_id, node.id = node.id, ids()
        if old_id in checked.reference_map:
            into.reference_map[node.id].CopyFrom(checked.reference_map[old_id])
        if old_id in checked.type_map:
            into.type_map[node.id].CopyFrom(checked.type_map[old_id])
    return part


def conjunction(parts: Sequence[Any], ids: Ids, into: Any) -> Any:
    """``parts`` (bool expressions) joined with ``&&`` in a balanced tree (its depth grows with the log of their
    number); ``true`` when there are none."""
    if not parts:
        return bool_constant(ids(), True)
    nodes = list(parts)
    while len(nodes) > 1:
        joined = []
        for left, right in zip(nodes[0::2], nodes[1::2], strict=False):
            node = call(ids(), "_&&_", left, right)
            into.reference_map[node.id].overload_id.append("logical_and")
            into.type_map[node.id].primitive = ast.BOOL_PRIMITIVE
            joined.append(node)
        if len(nodes) % 2:
            joined.append(nodes[-1])
        nodes = joined
    return nodes[0]


def _conditional(ids: Ids, into: Any, condition: Any, then: Any, otherwise: Any) -> Any:
    node = call(ids(), "_?_:_", condition, then, otherwise)
    into.reference_map[node.id].overload_id.append("conditional")
    return node


def _null(node_id: int) -> Any:
    node = ast.Expr(id=node_id)
    node.const_expr.null_value = 0
    return node


def fuse(policies: Sequence[FusedPolicy]) -> tuple[Any, FusedLayout]:
    """The CheckedExpr of the fused program of ``policies`` (see the module's text) and its layout."""
    fused = ast.CheckedExpr()
    ids = Ids(0)
    entries: list[Any] = []
    guards: list[Any] = []
    outcomes: list[Any] = []
    annotations: list[Any] = []

    def index(position: int) -> Any:
        return linking.index_reference(ids(), position)

    for policy in policies:
        index_of: dict[str, int] = {}
        for name, variable in policy.variables:
            if isinstance(variable, str):
                entry = linking.failing_variable(ids, variable)
            else:
                entry = renumbered(variable, ids, fused)
                linking.bind_variables(entry, index_of, ids)
            index_of[name] = len(entries)
            entries.append(entry)

        def part(checked: Any, index_of: dict[str, int] = index_of) -> Any:
            expr = renumbered(checked, ids, fused)
            linking.bind_variables(expr, index_of, ids)
            return expr

        validations = [part(validation) for validation in policy.validations]
        values = []
        for annotation in policy.annotations:
            # A block entry, to be read twice and evaluated once.
            entries.append(part(annotation))
            is_null = call(ids(), "_==_", index(len(entries) - 1), _null(ids()))
            fused.reference_map[is_null.id].overload_id.append("equals")
            values.append(_conditional(ids, fused, is_null, bool_constant(ids(), False), index(len(entries) - 1)))
        if not policy.conditions:
            guards.extend(validations)
            annotations.extend(values)
            continue
        # Each condition is a block entry, and every one is evaluated before any is read (``evaluated``, a guard),
        # as kube-apiserver's matcher does: an error or the cost of one after a false one counts.
        conditions = []
        for condition in policy.conditions:
            entries.append(part(condition))
            conditions.append(index(len(entries) - 1))
        evaluated = call(ids(), "size", list_of(ids(), *(index(len(entries) - len(conditions) + offset)
                                                         for offset in range(len(conditions)))))
        fused.reference_map[evaluated.id].overload_id.append("size_list")
        all_evaluated = call(ids(), "_==_", evaluated, int_constant(ids(), len(conditions)))
        fused.reference_map[all_evaluated.id].overload_id.append("equals")
        guards.append(all_evaluated)
        outcome = _conditional(ids, fused, conjunction(validations, ids, fused), int_constant(ids(), APPLIES),
                               int_constant(ids(), NOT_PASSED))
        for position in range(len(conditions), 0, -1):
            outcome = _conditional(ids, fused, conditions[position - 1], outcome, int_constant(ids(), position))
        outcome_index = len(entries)
        entries.append(outcome)
        applies = call(ids(), "_>=_", index(outcome_index), int_constant(ids(), APPLIES))
        fused.reference_map[applies.id].overload_id.append("greater_equals_int64")
        guards.append(applies)
        outcomes.append(outcome_index)
        for value in values:
            held = call(ids(), "_==_", index(outcome_index), int_constant(ids(), APPLIES))
            fused.reference_map[held.id].overload_id.append("equals")
            annotations.append(_conditional(ids, fused, held, value, bool_constant(ids(), False)))

    guard = conjunction(guards, ids, fused)
    listed = bool(outcomes or annotations)
    if listed:
        answer = list_of(ids(), *(index(position) for position in outcomes), *annotations)
        body = _conditional(ids, fused, guard, answer, bool_constant(ids(), False))
    else:
        body = guard
    if entries:
        body = call(ids(), linking.BLOCK_FUNCTION, list_of(ids(), *entries), body)
    fused.expr.CopyFrom(body)
    return fused, FusedLayout(listed, len(outcomes))
