"""Optional values never reach a function implemented in Python.

cel-expr-python converts the arguments of a Python function into Python values before calling it, and
it crashes the whole process (SIGSEGV) on a map holding an optional value. Kubernetes' library functions
implemented in Python here (lists, quantity, the map insertion of two-variable comprehensions, the
``Object{}``/``JSONPatch{}`` constructors, ...) would receive one only when an expression passes such a
map, directly or through ``dyn``. This pass finds every call of such a function whose arguments may hold
optional values (by their checked types, following ``dyn`` values from where they come from: variables,
comprehension variables, operands) and links it as an error naming the function, so the request gets an
error under the policy's failurePolicy instead of taking the daemon down.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from staticadm.cel import ast, linking
from staticadm.cel.rewrite import call

MESSAGE = ("{function}: a value holding optional values cannot be passed to this function in staticadm "
           "(the CEL engine cannot hand it over)")


def untainted_calls(checked: Any, python_functions: frozenset[str]) -> frozenset[int]:
    """The ids of the calls of ``python_functions`` that ``guard`` leaves as they are."""
    tainted = taint(checked.expr, ast.node_types(checked))
    return frozenset(node.id for node in ast.walk(checked.expr)
                     if node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function in python_functions
                     and not any(operand.id in tainted for operand in _operands(node)))


def _operands(node: Any) -> list[Any]:
    return ([node.call_expr.target] if node.call_expr.HasField("target") else []) + list(node.call_expr.args)


def guard(checked: Any, python_functions: frozenset[str], safe: frozenset[int] = frozenset()) -> int:
    """Replaces, in place, the calls of ``python_functions`` whose arguments may hold optional values, but those
    in ``safe`` (known not to: the same calls in the form a diagnostic form was made from, whose new bindings
    hide the operands' types). Returns how many were replaced."""
    types = ast.node_types(checked)
    tainted = taint(checked.expr, types)
    replaced = 0
    for node in list(ast.walk(checked.expr)):
        if node.WhichOneof("expr_kind") != "call_expr":
            continue
        function = node.call_expr.function
        if function not in python_functions or node.id in safe:
            continue
        operands = ([node.call_expr.target] if node.call_expr.HasField("target") else []) + list(node.call_expr.args)
        if any(operand.id in tainted for operand in operands):
            node.CopyFrom(_refused(node.id, function, operands))
            # The checked call's overload must go with it: a reference left behind reads as a call of the
            # replaced function on the message, which constant folding turned into a value (url('...') a URL
            # whose getHost() was "").
            if node.id in checked.reference_map:
                del checked.reference_map[node.id]
            replaced += 1
    return replaced


def _refused(node_id: int, function: str, operands: list[Any]) -> Any:
    """The call's replacement: its operands are evaluated first, natively (as a list literal), so one that fails
    gives its own error as in cel-go (``ip(oldObject.spec.?ip.orValue(''))`` without ``oldObject``: ``no such key:
    spec``); only then the error naming the function."""
    # Ids no other node has: above any the expression uses, 1024 for each replaced call.
    fresh = iter(range((1 << 40) + node_id * 1024, (1 << 40) + (node_id + 1) * 1024))

    def failure() -> Any:
        message = ast.Expr(id=next(fresh))
        message.const_expr.string_value = MESSAGE.format(function=function)
        return call(next(fresh), linking.FAIL_FUNCTION, message)

    if not operands:
        return call(node_id, linking.FAIL_FUNCTION, failure().call_expr.args[0])
    evaluated = ast.Expr(id=next(fresh))
    for operand in operands:
        evaluated.list_expr.elements.add().CopyFrom(operand)
    count = ast.Expr(id=next(fresh))
    count.const_expr.int64_value = len(operands)
    evaluated_all = call(next(fresh), "_==_", call(next(fresh), "size", evaluated), count)
    return call(node_id, "_?_:_", evaluated_all, failure(), failure())


def _may_hold_optional(type_name: str) -> bool:
    return "optional_type" in type_name


#: Functions that take the value out of an optional (``x.?f.orValue(d)``, ``x.?f.value()``): their result holds
#: an optional value only when the optional's content or the default may, not because the target is one.
_UNWRAPPING = frozenset({"orValue", "value"})
#: Functions whose optional result holds their operand's content (``x.?f``, ``l[?i]``, ``optional.of(x)``).
_WRAPPING = frozenset({"_?._", "_[?_]", "optional.of", "optional.ofNonZeroValue"})


def taint(expr: Any, types: Mapping[int, str]) -> set[int]:
    """Ids of the nodes whose value may hold an optional value."""
    tainted: set[int] = set()
    _visit(expr, types, {}, tainted, {})
    return tainted


def _visit(expr: Any, types: Mapping[int, str], scope: dict[str, bool], tainted: set[int],
           blocks: dict[str, bool]) -> bool:
    kind = expr.WhichOneof("expr_kind")
    own_type = types.get(expr.id, "dyn")
    carries_dyn = "dyn" in own_type or own_type.startswith("T") or own_type == ""
    result = _may_hold_optional(own_type)
    if kind == "ident_expr":
        name = expr.ident_expr.name
        result = result or scope.get(name, False) or blocks.get(name, False)
    elif kind == "select_expr":
        child = _visit(expr.select_expr.operand, types, scope, tainted, blocks)
        result = result or (child and carries_dyn)
    elif kind == "call_expr":
        call_node = expr.call_expr
        if call_node.function == linking.BLOCK_FUNCTION and len(call_node.args) == 2:
            entries = call_node.args[0].list_expr.elements
            for index, entry in enumerate(entries):
                blocks[f"{linking.INDEX_PREFIX}{index}"] = _visit(entry, types, scope, tainted, blocks)
            result = _visit(call_node.args[1], types, scope, tainted, blocks)
        else:
            operands = ([call_node.target] if call_node.HasField("target") else []) + list(call_node.args)
            children = [_visit(operand, types, scope, tainted, blocks) for operand in operands]
            if call_node.function in _UNWRAPPING and call_node.HasField("target"):
                held = _content_may_hold_optional(call_node.target, types, scope, tainted, blocks)
                children = [held, *children[1:]]
            result = result or (any(children) and carries_dyn)
    elif kind == "list_expr":
        optional_indices = set(expr.list_expr.optional_indices)
        children = [_element(element, index in optional_indices, types, scope, tainted, blocks)
                    for index, element in enumerate(expr.list_expr.elements)]
        result = result or any(children)
    elif kind == "struct_expr":
        children = []
        for entry in expr.struct_expr.entries:
            if entry.HasField("map_key"):
                children.append(_visit(entry.map_key, types, scope, tainted, blocks))
            children.append(_element(entry.value, entry.optional_entry, types, scope, tainted, blocks))
        result = result or any(children)
    elif kind == "comprehension_expr":
        comprehension = expr.comprehension_expr
        range_tainted = _visit(comprehension.iter_range, types, scope, tainted, blocks)
        init_tainted = _visit(comprehension.accu_init, types, scope, tainted, blocks)
        inner = dict(scope)
        inner[comprehension.iter_var] = range_tainted
        if comprehension.iter_var2:
            inner[comprehension.iter_var2] = range_tainted
        inner[comprehension.accu_var] = init_tainted
        # The accumulator may pick up what the step computes: visit twice to reach the fixed point.
        step_tainted = _visit(comprehension.loop_step, types, inner, tainted, blocks)
        if step_tainted and not inner[comprehension.accu_var]:
            inner[comprehension.accu_var] = True
            _visit(comprehension.loop_step, types, inner, tainted, blocks)
        _visit(comprehension.loop_condition, types, inner, tainted, blocks)
        result_scope = dict(scope)
        result_scope[comprehension.accu_var] = inner[comprehension.accu_var]
        result = _visit(comprehension.result, types, result_scope, tainted, blocks) or result
    if result:
        tainted.add(expr.id)
    return result


def _content_may_hold_optional(optional: Any, types: Mapping[int, str], scope: dict[str, bool], tainted: set[int],
                               blocks: dict[str, bool]) -> bool:
    """Whether the value inside ``optional`` (an expression of optional type, already visited) may hold optional
    values. An optional made by selecting or indexing holds part of its operand (``object.?spec.?name`` holds a
    part of ``object``, which holds none); an optional from anywhere else is assumed to hold one."""
    own_type = types.get(optional.id, "dyn")
    if own_type.startswith("optional_type(") and own_type.endswith(")") \
            and _may_hold_optional(own_type[len("optional_type("):-1]):
        return True
    kind = optional.WhichOneof("expr_kind")
    if kind == "comprehension_expr":
        # The runtime form binds the operand of an optional access (``rewrite._with_value``) and answers with
        # the loop's result.
        return _content_may_hold_optional(optional.comprehension_expr.result, types, scope, tainted, blocks)
    if kind != "call_expr":
        return True
    function = optional.call_expr.function
    if function == "optional.none":
        return False
    if function == "_?_:_" and len(optional.call_expr.args) == 3:
        # The runtime form of an optional access tests the operand's kind and answers from either branch.
        return any(_content_may_hold_optional(branch, types, scope, tainted, blocks)
                   for branch in optional.call_expr.args[1:])
    if function == "_[_]" and optional.call_expr.args and \
            optional.call_expr.args[0].WhichOneof("expr_kind") == "list_expr":
        # An element of a list literal (the runtime form's error of a field on a list indexes one with a string).
        return any(element.id in tainted for element in optional.call_expr.args[0].list_expr.elements)
    if function not in _WRAPPING or not optional.call_expr.args:
        return True
    operand = optional.call_expr.args[0]
    if types.get(operand.id, "dyn").startswith("optional_type("):
        # ``x.?a.?b``: the operand is itself an optional, whose content is selected from.
        return _content_may_hold_optional(operand, types, scope, tainted, blocks)
    return operand.id in tainted


def _element(expr: Any, optional_entry: bool, types: Mapping[int, str], scope: dict[str, bool],
             tainted: set[int], blocks: dict[str, bool]) -> bool:
    """Whether an element of a list or map literal holds optional values; ``[?x]`` and ``{?k: x}`` hold
    the value inside ``x``, not ``x`` itself."""
    held = _visit(expr, types, scope, tainted, blocks)
    if not optional_entry:
        return held
    own_type = types.get(expr.id, "dyn")
    if own_type.startswith("optional_type(") and own_type.endswith(")"):
        return _may_hold_optional(own_type[len("optional_type("):-1])
    return held
