"""Comprehensions of any length, although the engine stops one evaluation after 10,000 iterations.

cel-cpp counts every comprehension iteration of one evaluation and fails it past 10,000
(``comprehension_max_iterations``; cel-expr-python cannot change it), while Kubernetes bounds loops only
by cost: a Pod with 10,000 environment variables is an ordinary request there. An evaluation that
reaches the engine's limit is therefore run again in steps: every comprehension becomes a call of
``@staticadm.loop``, which runs the comprehension over slices of its range, each slice in an evaluation
of its own, carrying the accumulator from one slice to the next, then evaluates its result. Loops inside
the loop body are delegated the same way, so no single evaluation iterates more than one slice.

Costs are charged exactly as in the direct evaluation (the same ticks run, once per iteration), so the
outcome does not depend on which way an expression was evaluated. Values cross into Python between
slices: an expression whose loop ranges, accumulators or captured values may hold optional values cannot
be stepped (the engine cannot hand them over), and says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from staticadm.cel import ast, boundary, linking, rewrite

LOOP_FUNCTION = "@staticadm.loop"
VARIABLE_FUNCTION = "@staticadm.variable"
#: Iterations per slice: below the engine's 10,000, with every nested loop delegated.
SLICE = 8192
#: Slices of loops that build lists: the engine copies the accumulated list on every append, so a
#: slice costs its length squared (the rewrite's guard sends longer ones here).
APPEND_SLICE = rewrite.APPEND_SLICE
RANGE, ACCUMULATOR, ACCUMULATOR_ERROR, OFFSET = "@range", "@accu", "@accu_error", "@offset"
_LOCAL_INDEX = "@index_local"


class NotSteppable(Exception):
    """The expression needs steps but holds values the engine cannot hand over between them."""


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """The programs that run one comprehension in slices."""

    #: Runs the loop over ``@range`` starting from ``@accu`` and returns the accumulator.
    step: Any
    #: The same, starting from an accumulator that is an error (``@accu_error`` holds its message).
    step_from_error: Any
    #: For a two-variable loop: the same two over a list, whose slices must keep the original indexes.
    indexed_step: Any
    indexed_step_from_error: Any
    #: Whether the loop goes on from an accumulator (its condition, without the cost tick).
    condition: Any
    #: Evaluates the loop's result from the accumulator.
    result: Any
    result_from_error: Any
    #: Free variables of the loop body, passed in as values.
    captures: tuple[str, ...]
    #: The loop builds a list or map from empty (map, filter, transformList, transformMap): each slice
    #: starts from empty (the engine appends in place then) and the slices' results are joined here.
    appends: bool
    #: The loop with the loops inside it left to the engine, for a range that fits one slice: a whole nest of
    #: loops is then one evaluation instead of one per inner loop, and only a nest that does pass the engine's
    #: limit is run again delegated. None when the loop or one inside it builds a collection (built natively,
    #: a long list costs its length squared in copies) or the body reads what the delegated form does not.
    native: NativeSteps | None = None


@dataclass(frozen=True, slots=True)
class NativeSteps:
    """``LoopPlan``'s four step programs, with the loops inside the body run by the engine."""

    step: Any
    step_from_error: Any
    indexed_step: Any
    indexed_step_from_error: Any


@dataclass(frozen=True, slots=True)
class SteppedProgram:
    program: Any
    loops: Mapping[int, LoopPlan]


def free_variables(expr: Any, bound: frozenset[str] = frozenset()) -> set[str]:
    """Identifiers ``expr`` reads that no comprehension inside it binds."""
    found: set[str] = set()
    _free(expr, bound, found)
    return found


def _free(expr: Any, bound: frozenset[str], found: set[str]) -> None:
    kind = expr.WhichOneof("expr_kind")
    if kind == "ident_expr":
        if expr.ident_expr.name not in bound:
            found.add(expr.ident_expr.name)
    elif kind == "select_expr":
        _free(expr.select_expr.operand, bound, found)
    elif kind == "call_expr":
        if expr.call_expr.HasField("target"):
            _free(expr.call_expr.target, bound, found)
        for arg in expr.call_expr.args:
            _free(arg, bound, found)
    elif kind == "list_expr":
        for element in expr.list_expr.elements:
            _free(element, bound, found)
    elif kind == "struct_expr":
        for entry in expr.struct_expr.entries:
            if entry.HasField("map_key"):
                _free(entry.map_key, bound, found)
            _free(entry.value, bound, found)
    elif kind == "comprehension_expr":
        comprehension = expr.comprehension_expr
        _free(comprehension.iter_range, bound, found)
        _free(comprehension.accu_init, bound, found)
        inner = bound | {comprehension.accu_var}
        _free(comprehension.result, inner, found)
        inner = inner | {comprehension.iter_var} | ({comprehension.iter_var2} if comprehension.iter_var2 else set())
        _free(comprehension.loop_condition, inner, found)
        _free(comprehension.loop_step, inner, found)


def _enclosing_bindings(expr: Any) -> dict[int, frozenset[str]]:
    """Comprehension node id -> the names that comprehensions around it bind where it is."""
    found: dict[int, frozenset[str]] = {}
    stack: list[tuple[Any, frozenset[str]]] = [(expr, frozenset())]
    while stack:
        node, bound = stack.pop()
        kind = node.WhichOneof("expr_kind")
        if kind == "comprehension_expr":
            found[node.id] = bound
            comprehension = node.comprehension_expr
            with_accumulator = bound | {comprehension.accu_var}
            in_body = with_accumulator | {comprehension.iter_var} | (
                {comprehension.iter_var2} if comprehension.iter_var2 else set())
            stack.extend(((comprehension.iter_range, bound), (comprehension.accu_init, bound),
                          (comprehension.loop_condition, in_body), (comprehension.loop_step, in_body),
                          (comprehension.result, with_accumulator)))
            continue
        if kind == "select_expr":
            stack.append((node.select_expr.operand, bound))
        elif kind == "call_expr":
            if node.call_expr.HasField("target"):
                stack.append((node.call_expr.target, bound))
            stack.extend((arg, bound) for arg in node.call_expr.args)
        elif kind == "list_expr":
            stack.extend((element, bound) for element in node.list_expr.elements)
        elif kind == "struct_expr":
            for entry in node.struct_expr.entries:
                if entry.HasField("map_key"):
                    stack.append((entry.map_key, bound))
                stack.append((entry.value, bound))
    return found


def _types_hold_optionals(checked: Any, nodes: list[Any]) -> bool:
    types = ast.node_types(checked)
    return any("optional_type" in types.get(node.id, "") for node in nodes)


def build(prepared: Any, deserialize: Any) -> SteppedProgram:
    """The stepped form of a prepared (unlinked) expression.

    ``deserialize`` loads an AST into the runtime environment.
    """
    checked = ast.CheckedExpr()
    checked.CopyFrom(prepared)
    ids = rewrite.Ids(ast.max_id(checked) + 1_000_000)
    _delegate_variables(checked.expr, ids)
    loops: dict[int, LoopPlan] = {}
    _delegate_loops(checked, checked.expr, ids, loops, deserialize)
    # Captured values cross into Python too: none of them may hold optional values.
    tainted = boundary.taint(checked.expr, ast.node_types(checked))
    for node in ast.walk(checked.expr):
        is_loop = node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function == LOOP_FUNCTION
        if is_loop and any(arg.id in tainted for arg in node.call_expr.args):
            raise NotSteppable("a loop whose body reads optional values from outside it")
    return SteppedProgram(deserialize(ast.encode(checked)), loops)


def _delegate_variables(expr: Any, ids: rewrite.Ids) -> None:
    # Between slices the engine's lazy bindings are gone: variables are read through Python, once each.
    for node in list(ast.walk(expr)):
        if node.WhichOneof("expr_kind") != "select_expr":
            continue
        operand = node.select_expr.operand
        if operand.WhichOneof("expr_kind") != "ident_expr" or operand.ident_expr.name != linking.VARIABLES:
            continue
        name = ast.Expr(id=ids())
        name.const_expr.string_value = node.select_expr.field
        read = rewrite.call(node.id if not node.select_expr.test_only else ids(), VARIABLE_FUNCTION, name)
        if node.select_expr.test_only:
            size = rewrite.call(ids(), "size", rewrite.list_of(ids(), read))
            node.CopyFrom(rewrite.call(node.id, "_==_", size, rewrite.int_constant(ids(), 1)))
        else:
            node.CopyFrom(read)


def _delegate_loops(checked: Any, expr: Any, ids: rewrite.Ids,
                    loops: dict[int, LoopPlan], deserialize: Any) -> None:
    enclosing = _enclosing_bindings(expr)
    # Each loop as written (its inner loops not yet delegated), for its native steps.
    originals: dict[int, Any] = {}
    for node in ast.walk(expr):
        if node.WhichOneof("expr_kind") == "comprehension_expr" and not rewrite.is_binding(node.comprehension_expr):
            original = ast.Expr()
            original.CopyFrom(node)
            originals[node.id] = original
    # Innermost loops first: a loop's plan is built from a body whose own loops are already delegated.
    for node in reversed(list(ast.walk(expr))):
        if node.WhichOneof("expr_kind") != "comprehension_expr" or rewrite.is_binding(node.comprehension_expr):
            continue
        comprehension = node.comprehension_expr
        if _types_hold_optionals(checked, [comprehension.iter_range, comprehension.accu_init, node]):
            raise NotSteppable("a loop over or building optional values")
        # Only names bound by enclosing comprehensions are captured: the rest (activation variables,
        # type names such as ``string``) resolve the same way in every slice's evaluation.
        captures = sorted(
            (free_variables(comprehension.loop_condition, frozenset())
             | free_variables(comprehension.loop_step, frozenset())
             | free_variables(comprehension.result, frozenset()))
            & enclosing.get(node.id, frozenset()))
        plan = _plan(checked, comprehension, tuple(captures), ids, deserialize,
                     _native_source(originals[node.id], enclosing.get(node.id, frozenset()), set(captures)))
        loops[node.id] = plan
        capture_values = rewrite.list_of(ids(), *(rewrite.ident(ids(), name) for name in captures))
        loop_id = rewrite.int_constant(ids(), node.id)
        iter_range, accu_init = ast.Expr(), ast.Expr()
        iter_range.CopyFrom(comprehension.iter_range)
        accu_init.CopyFrom(comprehension.accu_init)
        node.CopyFrom(rewrite.call(node.id, LOOP_FUNCTION, loop_id, iter_range, accu_init, capture_values))


def _native_source(original: Any, enclosing: frozenset[str], captures: set[str]) -> Any | None:
    """The comprehension ``original`` when its native steps can stand for its delegated ones, else None."""
    if any(node.WhichOneof("expr_kind") == "comprehension_expr" and rewrite.builds_collection(node.comprehension_expr)
           for node in ast.walk(original)):
        return None
    comprehension = original.comprehension_expr
    reads = (free_variables(comprehension.loop_condition) | free_variables(comprehension.loop_step)
             | free_variables(comprehension.result))
    if not reads & enclosing <= captures:
        return None
    return comprehension


def _plan(checked: Any, comprehension: Any, captures: tuple[str, ...], ids: rewrite.Ids,
          deserialize: Any, native_source: Any | None = None) -> LoopPlan:
    def program(root: Any) -> Any:
        holder = ast.CheckedExpr()
        holder.CopyFrom(checked)
        holder.expr.CopyFrom(root)
        return deserialize(ast.encode(holder))

    def accumulator(from_error: bool) -> Any:
        if from_error:
            return rewrite.call(ids(), linking.FAIL_FUNCTION, rewrite.ident(ids(), ACCUMULATOR_ERROR))
        return rewrite.ident(ids(), ACCUMULATOR)

    def step(from_error: bool, indexed: bool, source: Any = comprehension) -> Any:
        node = ast.Expr(id=ids())
        loop = node.comprehension_expr
        loop.CopyFrom(source)
        loop.iter_range.CopyFrom(rewrite.ident(ids(), RANGE))
        loop.accu_init.CopyFrom(start(from_error))
        loop.result.CopyFrom(rewrite.ident(ids(), comprehension.accu_var))
        if indexed:
            # Each slice iterates from 0: the loop body sees the index it would have had.
            loop.iter_var = _LOCAL_INDEX
            for part in (loop.loop_condition, loop.loop_step):
                body = ast.Expr()
                body.CopyFrom(part)
                index = rewrite.call(ids(), "_+_", rewrite.ident(ids(), _LOCAL_INDEX), rewrite.ident(ids(), OFFSET))
                part.CopyFrom(rewrite.bind(ids, comprehension.iter_var, index, body))
        return program(node)

    init = comprehension.accu_init
    appends = rewrite.builds_collection(comprehension)

    def start(from_error: bool) -> Any:
        if appends and not from_error:
            empty = ast.Expr()
            empty.CopyFrom(init)
            empty.id = ids()
            return empty
        return accumulator(from_error)

    condition = comprehension.loop_condition
    if condition.WhichOneof("expr_kind") == "call_expr" and condition.call_expr.function == "_&&_":
        condition = condition.call_expr.args[1]  # the cost tick comes first; it is not charged here
    two_variables = bool(comprehension.iter_var2)
    native = None
    if native_source is not None:
        native = NativeSteps(
            step=step(False, False, native_source),
            step_from_error=step(True, False, native_source),
            indexed_step=step(False, True, native_source) if two_variables else None,
            indexed_step_from_error=step(True, True, native_source) if two_variables else None,
        )
    return LoopPlan(
        step=step(False, False),
        step_from_error=step(True, False),
        indexed_step=step(False, True) if two_variables else None,
        indexed_step_from_error=step(True, True) if two_variables else None,
        condition=program(rewrite.bind(ids, comprehension.accu_var, accumulator(False), condition)),
        result=program(rewrite.bind(ids, comprehension.accu_var, accumulator(False), comprehension.result)),
        result_from_error=program(rewrite.bind(ids, comprehension.accu_var, accumulator(True), comprehension.result)),
        captures=captures,
        appends=appends,
        native=native,
    )


def slices(values: Any, size: int = SLICE) -> Iterator[tuple[int, Any]]:
    """(offset, slice) of a list, or of a map as smaller maps."""
    if isinstance(values, dict):
        keys = list(values)
        for start in range(0, len(keys), size):
            yield start, {key: values[key] for key in keys[start:start + size]}
        if not keys:
            yield 0, {}
        return
    items = list(values)
    for start in range(0, len(items), size):
        yield start, items[start:start + size]
    if not items:
        yield 0, []
