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

An expression several policies evaluate alike is evaluated once (``_Shared``): the same checked expression over the
same entries for the variables it reads (a variable many policies declare, ``containers.map(c, c.image)``, a
validation or match condition they repeat). Its value is what each would have had; and since one policy never
shares an entry with itself (each of its expressions is charged in its scopes, as kube-apiserver charges them),
what a scope would charge alone is still within the program's total.

Validations of the form ``R.all(c, body)`` over the same ``R`` (the same checked range over the same entries, the same
iteration variable) are one loop (``_LoopFusion``): ``R.all(c, bodyA && (conditionsB ? bodyB : true) ...)``, a guard
of its own, each body under its policy's match conditions. It is true exactly when each of those loops would be
true for the policies whose conditions hold, and it charges every iteration's cost of every one of them, so the
program's total stays what it was; only the evaluation of ``R`` and the loop around the bodies are made once.

Any false or error makes the result something else than that shape (``&&`` never turns an error into true:
``error && true`` is the error), and the caller then evaluates everything one expression at a time, which
says exactly what happened; so the program only needs to be right when it answers "all clear".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from staticadm.cel import ast, linking
from staticadm.cel.rewrite import Ids, bool_constant, call, int_constant, list_of, tick, tick_weight

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


def renumbered(checked: Any, ids: Ids, into: Any, expr: Any = None) -> Any:
    """A copy of ``checked``'s expression (or of ``expr``, a part of it) with fresh ids from ``ids``, its types and
    references copied into the CheckedExpr ``into`` (ids must be unique in one program)."""
    part = ast.Expr()
    part.CopyFrom(checked.expr if expr is None else expr)
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


class _Shared:
    """The block entries of one fused program, each expression once: by its checked form (its bytes) and the
    entries its ``variables.<name>`` reads are bound to, which make the same expression the same value."""

    def __init__(self, ids: Ids, into: Any, entries: list[Any]) -> None:
        self._ids = ids
        self._into = into
        self._entries = entries
        self._positions: dict[tuple[bytes, tuple[int, ...]], int] = {}
        #: By id: (the checked expression, held so that its id stays its own; its bytes; the variables it reads).
        self._forms: dict[int, tuple[Any, bytes, tuple[str, ...]]] = {}

    def key(self, checked: Any, index_of: dict[str, int]) -> tuple[bytes, tuple[int, ...]]:
        form = self._forms.get(id(checked))
        if form is None:
            form = self._forms[id(checked)] = (checked, checked.SerializeToString(deterministic=True),
                                               tuple(sorted(linking.direct_uses(checked))))
        return form[1], tuple(index_of.get(name, -1) for name in form[2])

    def entry(self, checked: Any, index_of: dict[str, int], used: set[int]) -> int:
        """The position of ``checked``'s entry for a policy that already reads the entries ``used`` (to which it is
        added): another policy's entry of the same expression, or a new one. Never one the policy reads already:
        a scope is charged for every expression it evaluates, so two of one policy (two variables, two match
        conditions alike) are two evaluations, as in kube-apiserver."""
        key = self.key(checked, index_of)
        position = self._positions.get(key)
        if position is None or position in used:
            position = len(self._entries)
            self._entries.append(bound(checked, index_of, self._ids, self._into))
            self._positions.setdefault(key, position)
        used.add(position)
        return position


def bound(checked: Any, index_of: dict[str, int], ids: Ids, into: Any) -> Any:
    """``checked``'s expression renumbered into ``into``, its variables read as the block entries ``index_of``."""
    expr = renumbered(checked, ids, into)
    linking.bind_variables(expr, index_of, ids)
    return expr


#: The accumulator of the ``all`` macro's loop, as the parser names it.
_RESULT = "@result"


def _is_call(node: Any, function: str, arity: int) -> bool:
    return (node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function == function
            and not node.call_expr.HasField("target") and len(node.call_expr.args) == arity)


def _is_result(node: Any) -> bool:
    return node.WhichOneof("expr_kind") == "ident_expr" and node.ident_expr.name == _RESULT


def all_loop(checked: Any) -> Any | None:
    """The loop of a prepared expression that is an ``all`` macro and nothing else, or None: one iteration variable,
    ``true`` to start, ``charge && @not_strictly_false(@result)`` as its condition (``rewrite.prepare`` puts the
    iteration's charge first) and ``@result && body`` as its step."""
    expr = checked.expr
    if expr.WhichOneof("expr_kind") != "comprehension_expr":
        return None
    loop = expr.comprehension_expr
    start = loop.accu_init
    if (loop.iter_var2 or loop.accu_var != _RESULT or start.WhichOneof("expr_kind") != "const_expr"
            or start.const_expr.WhichOneof("constant_kind") != "bool_value" or not start.const_expr.bool_value
            or not _is_result(loop.result)):
        return None
    condition, step = loop.loop_condition, loop.loop_step
    if not (_is_call(condition, "_&&_", 2) and _is_call(condition.call_expr.args[1], "@not_strictly_false", 1)
            and _is_result(condition.call_expr.args[1].call_expr.args[0])):
        return None
    if not (_is_call(step, "_&&_", 2) and _is_result(step.call_expr.args[0])):
        return None
    return loop


def _range_key(checked: Any, loop: Any, index_of: dict[str, int]) -> tuple[bytes, str, tuple[int, ...]]:
    """What makes two loops' ranges the same list: the range's checked form, ids aside; the entries the variables it
    reads are bound to; and the loop's iteration variable, which the bodies read."""
    probe = ast.CheckedExpr()
    probe.expr.CopyFrom(renumbered(checked, Ids(0), probe, loop.iter_range))
    uses = sorted(linking.direct_uses(probe))
    return probe.SerializeToString(deterministic=True), loop.iter_var, tuple(index_of.get(name, -1) for name in uses)


class _LoopFusion:
    """The ``all`` loops of the set's validations over the same range, made one loop (see the module's text)."""

    def __init__(self) -> None:
        #: Range key -> the loops over it: (policy number, the validation's position in the policy, the validation,
        #: its policy's variable entries).
        self._groups: dict[tuple[bytes, str, tuple[int, ...]], list[tuple[int, int, Any, dict[str, int]]]] = {}

    def offer(self, number: int, position: int, checked: Any, index_of: dict[str, int]) -> None:
        loop = all_loop(checked)
        if loop is not None:
            self._groups.setdefault(_range_key(checked, loop, index_of), []).append(
                (number, position, checked, index_of))

    def fused(self) -> set[tuple[int, int]]:
        """(policy number, position) of the validations that are part of a fused loop (written there, not in their
        policy's). By position, not by the expression object: one object may serve policies whose loops are not all
        fused."""
        return {(number, position) for members in self._groups.values() if len(members) > 1
                for number, position, _, _ in members}

    def loops(self, ids: Ids, into: Any, applies: Callable[[int], Any | None]) -> list[Any]:
        """One loop per range that more than one validation iterates; ``applies(policy number)`` is what says the
        policy's match conditions hold (None: it has none)."""
        made = []
        for members in self._groups.values():
            if len(members) < 2:
                continue
            charges, bodies = [], []
            first = None
            for number, _, checked, index_of in members:
                expr = bound(checked, index_of, ids, into)
                loop = expr.comprehension_expr
                first = first if first is not None else expr
                charges.append(loop.loop_condition.call_expr.args[0])
                body = loop.loop_step.call_expr.args[1]
                condition = applies(number)
                bodies.append(body if condition is None
                              else _conditional(ids, into, condition, body, bool_constant(ids(), True)))
            assert first is not None
            loop = first.comprehension_expr
            # The first loop's own ``@not_strictly_false(@result)`` and ``@result``, as the checker resolved them.
            not_false = ast.Expr()
            not_false.CopyFrom(loop.loop_condition.call_expr.args[1])
            result = ast.Expr()
            result.CopyFrom(loop.loop_step.call_expr.args[0])
            weights = [tick_weight(charge) for charge in charges]
            if all(weight is not None for weight in weights):
                # One charge of every body's weight per iteration, checked on the whole as each part would be.
                charges = [tick(ids, sum(cast(list[int], weights)), ())]
            condition = conjunction([*charges, not_false], ids, into)
            step = conjunction([result, conjunction(bodies, ids, into)], ids, into)
            loop.loop_condition.CopyFrom(condition)
            loop.loop_step.CopyFrom(step)
            made.append(first)
        return made


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

    shared = _Shared(ids, fused, entries)
    # Variables first, so that every policy's expressions are keyed by the entries they read.
    bindings: list[tuple[dict[str, int], set[int]]] = []
    for policy in policies:
        index_of: dict[str, int] = {}
        used: set[int] = set()
        for name, variable in policy.variables:
            if isinstance(variable, str):
                index_of[name] = len(entries)
                entries.append(linking.failing_variable(ids, variable))
            else:
                index_of[name] = shared.entry(variable, index_of, used)
        bindings.append((index_of, used))
    # A validation that more than one policy makes is a block entry, read by each; any other is written in place.
    makers: dict[tuple[bytes, tuple[int, ...]], set[int]] = {}
    for number, (policy, (index_of, _)) in enumerate(zip(policies, bindings, strict=True)):
        for validation in policy.validations:
            makers.setdefault(shared.key(validation, index_of), set()).add(number)

    # Loops over one range, in validations written in place, are one loop.
    fusion = _LoopFusion()
    for number, (policy, (index_of, _)) in enumerate(zip(policies, bindings, strict=True)):
        for position, validation in enumerate(policy.validations):
            if len(makers[shared.key(validation, index_of)]) == 1:
                fusion.offer(number, position, validation, index_of)
    in_loops = fusion.fused()
    condition_entries: dict[int, list[int]] = {}

    for number, (policy, (index_of, used)) in enumerate(zip(policies, bindings, strict=True)):

        def validation_of(checked: Any, index_of: dict[str, int] = index_of, used: set[int] = used) -> Any:
            if len(makers[shared.key(checked, index_of)]) > 1:
                return index(shared.entry(checked, index_of, used))
            return bound(checked, index_of, ids, fused)

        validations = [validation_of(validation) for position, validation in enumerate(policy.validations)
                       if (number, position) not in in_loops]
        values = []
        for annotation in policy.annotations:
            # A block entry, to be read twice and evaluated once.
            position = shared.entry(annotation, index_of, used)
            is_null = call(ids(), "_==_", index(position), _null(ids()))
            fused.reference_map[is_null.id].overload_id.append("equals")
            values.append(_conditional(ids, fused, is_null, bool_constant(ids(), False), index(position)))
        if not policy.conditions:
            guards.extend(validations)
            annotations.extend(values)
            continue
        # Each condition is a block entry, and every one is evaluated before any is read (``evaluated``, a guard),
        # as kube-apiserver's matcher does: an error or the cost of one after a false one counts.
        positions = condition_entries[number] = [shared.entry(condition, index_of, used)
                                                 for condition in policy.conditions]
        conditions = [index(position) for position in positions]
        evaluated = call(ids(), "size", list_of(ids(), *(index(position) for position in positions)))
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

    def conditions_hold(number: int) -> Any | None:
        positions = condition_entries.get(number)
        return None if positions is None else conjunction([index(position) for position in positions], ids, fused)

    guards.extend(fusion.loops(ids, fused, conditions_hold))
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
