"""Kubernetes' CEL runtime cost, made deterministic and charged without a per-node hook in the engine.

kube-apiserver runs every expression with cel-go's cost tracker (``interpreter/runtimecost.go``) and
Kubernetes' ``library.CostEstimator.CallCost``: each evaluated node adds to the expression's cost
(identifiers and field selections 1, constants 0, ``&&``/``||``/``?:`` 0, list literals 10, map literals 30,
object literals 40, most calls 1, string functions by the size of their operands), ``has()`` is free
(``PresenceTestHasCost(false)``), and evaluation is cancelled when the cost passes ``PerCallLimit``.

cel-expr-python has no cost hook, so the rewrite charges the same quantities at a few points:
- each comprehension iteration charges the static cost of its loop condition and loop step (one call of
  ``@staticadm.tick`` per iteration, with the weight as a constant argument);
- calls whose cost depends on the size of their operands or result (``startsWith``, ``contains``,
  ``matches``, ``join``, ``split``, ``replace``, string ``+``, ``in``, the parsing functions of the
  Kubernetes libraries, ...) charge after the call returns, with the sizes computed natively
  (``@staticadm.charge``), as cel-go charges them after the call;
- everything else an expression evaluates once costs at most its static cost, charged once per run.

Where this differs from cel-go, it differs the same way for every request (nothing depends on time):
- a loop body's conditional parts (``?:``, ``&&``, ``||``) are charged as if every branch ran, and an
  iteration that ends the loop early (``all`` meeting ``false``) is charged its step too;
- equality and ordering of two non-literal operands are charged 1 whatever their size (cel-go charges a
  tenth of the shorter operand's size: 1 for scalars and short strings);
- the static part outside loops is charged as its upper bound.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from staticadm.cel import ast

#: ``celconfig.PerCallLimit``: the most one expression may cost.
PER_CALL_LIMIT = 1_000_000
#: ``celconfig.RuntimeCELCostBudget``: what the validations of one (policy, binding) may cost together.
RUNTIME_CEL_COST_BUDGET = 10_000_000
#: What a size-driven call is charged before its sizes are known (the cost of a 40-character string): a
#: call costing no more is not charged again, which keeps short strings from calling into Python; one
#: costing less (a shorter string) is charged up to this many units more than cel-go charges.
SIZED_CALL_BASE = 4
#: The most one expression (or variable) without product-charged calls can cost: the per-call limit,
#: plus the last step that crossed it, which charges at most a fifth of a string it could afford to build.
MAX_EXPRESSION_COST = 3 * PER_CALL_LIMIT
#: ``celconfig.RuntimeCELCostBudgetMatchConditions``.
RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS = 2_500_000

TICK_FUNCTION = "@staticadm.tick"
#: Iterations of the expression's own loops (not a variable's) with a weight up to this charge through a
#: function without arguments, ``@staticadm.tick<weight>``: cel-expr-python keeps the argument tuple of
#: every call into Python (docs/known-gaps.md), and a call without arguments passes the shared empty one.
MAX_FIXED_TICK_WEIGHT = 64


#: The same for a variable's loops, whose ticks also name the variable (its declaration index): a function
#: without arguments for every weight and index up to these, ``@staticadm.tick<weight>.<index>``.
MAX_FIXED_OWNER_TICK_WEIGHT = 16
MAX_FIXED_TICK_OWNER = 15
#: A heavier iteration first adds the largest fixed weight this many times at most, unchecked
#: (``@staticadm.tickAhead[.<index>]``), then ticks the rest, which checks the limit on the whole.
MAX_TICK_PARTS = 8


#: Whose loops tick through argument-free functions: the expression itself (None) and the first variables.
FIXED_TICK_OWNERS: tuple[int | None, ...] = (None, *range(MAX_FIXED_TICK_OWNER + 1))


def fixed_tick_function(weight: int, owner: int | None = None) -> str:
    return f"{TICK_FUNCTION}{weight}" if owner is None else f"{TICK_FUNCTION}{weight}.{owner}"


def tick_ahead_function(owner: int | None = None) -> str:
    return f"{TICK_FUNCTION}Ahead" if owner is None else f"{TICK_FUNCTION}Ahead.{owner}"


def largest_fixed_tick(owner: int | None) -> int:
    return MAX_FIXED_TICK_WEIGHT if owner is None else MAX_FIXED_OWNER_TICK_WEIGHT


def fixed_tick_parts(weight: int, owner: int | None) -> tuple[int, int] | None:
    """How one iteration of this weight (in the expression itself, or in the variable ``owner``) is charged
    without arguments: (how many unchecked additions of ``largest_fixed_tick(owner)``, the weight of the
    tick that then checks the limit), or None when it needs the function with arguments. The limit is
    checked once, on the whole weight, so the loop ends and the total stands exactly as with one charge."""
    if owner is not None and not 0 <= owner <= MAX_FIXED_TICK_OWNER:
        return None
    largest = largest_fixed_tick(owner)
    if not 0 <= weight <= largest * MAX_TICK_PARTS:
        return None
    ahead, rest = divmod(weight, largest)
    return (ahead - 1, largest) if ahead and not rest else (ahead, rest)


CHARGE_FUNCTION = "@staticadm.charge"
#: The same inside a variable: the first argument is the variable's declaration index.
CHARGE_OWNER_FUNCTION = "@staticadm.chargeFor"
#: An expression's own size-driven charges of up to this many units past ``SIZED_CALL_BASE`` (strings of up to 120
#: characters for ``startsWith`` and the like) go through a function without arguments, ``@staticadm.charge<units>``:
#: cel-expr-python keeps the argument tuple of every call into Python (docs/known-gaps.md), and an image name longer
#: than 40 characters made every check of it such a call.
MAX_FIXED_CHARGE = 8


def fixed_charge_function(amount: int) -> str:
    return f"{CHARGE_FUNCTION}{amount}"

SELECT_AND_IDENT_COST = 1
LIST_CREATE_BASE_COST = 10
MAP_CREATE_BASE_COST = 30
STRUCT_CREATE_BASE_COST = 40
#: cel-go's ``StringTraversalCostFactor`` and ``RegexStringLengthCostFactor`` as exact fractions.
_TENTH = 10
_REGEX_FACTOR = 4

#: Functions with no cost of their own: logical operators and the internal calls the rewrites add.
FREE_FUNCTIONS = frozenset({"_&&_", "_||_", "_?_:_", "cel.@block"})


class Charge(enum.IntEnum):
    """How a size-driven call is charged; the rewrite passes the code and the sizes it needs."""

    #: ceil(size(arg0) / 10): startsWith, endsWith, string/bytes conversions, lowerAscii, trim, url, ...
    TRAVERSE_FIRST = 1
    #: ceil(2 * size(arg0) / 10): replace, split, ip.isCanonical.
    TRAVERSE_FIRST_TWICE = 2
    #: ceil(2 * size(result) / 10): join.
    BUILD_RESULT = 3
    #: size(arg1): ``in`` over a list.
    IN_LIST = 4
    #: ceil((size(arg0) + size(arg1)) / 10): string and bytes concatenation.
    CONCATENATE = 5
    #: ceil(size(arg0) / 10) * ceil(size(arg1) / 10): contains.
    CONTAINS = 6
    #: ceil((1 + size(arg0)) / 10) * ceil(size(arg1) / 4): matches, find, findAll.
    REGEX = 7
    #: ceil(min(size(arg0), size(arg1)) / 10): string and bytes ordering.
    COMPARE = 8


def charge_amount(code: int, sizes: tuple[int, ...]) -> int:
    """The cost cel-go (with Kubernetes' estimator) charges for a call, from its operands' sizes."""
    return CHARGES[code](sizes)


CHARGES: dict[int, Callable[[tuple[int, ...]], int]] = {
    Charge.TRAVERSE_FIRST: lambda sizes: -(-sizes[0] // _TENTH),
    Charge.TRAVERSE_FIRST_TWICE: lambda sizes: -(-2 * sizes[0] // _TENTH),
    Charge.BUILD_RESULT: lambda sizes: -(-2 * sizes[0] // _TENTH),
    Charge.IN_LIST: lambda sizes: sizes[0],
    Charge.CONCATENATE: lambda sizes: -(-(sizes[0] + sizes[1]) // _TENTH),
    Charge.CONTAINS: lambda sizes: -(-sizes[0] // _TENTH) * -(-sizes[1] // _TENTH),
    Charge.REGEX: lambda sizes: -(-(1 + sizes[0]) // _TENTH) * -(-sizes[1] // _REGEX_FACTOR),
    Charge.COMPARE: lambda sizes: -(-min(sizes[0], sizes[1]) // _TENTH),
}


@dataclass(frozen=True, slots=True)
class SizedCall:
    """A call charged by size: which charge, and which of (target, args...) or the result are measured."""

    charge: Charge
    #: Operand positions (0 = the receiver of a member call, else the first argument) or ``-1`` = the result.
    measured: tuple[int, ...]
    #: Added to the computed amount (containsCIDR's extra comparison).
    extra: int = 0
    #: When the checker left several overloads (dyn operands), the size charge applies only when the
    #: first measured operand has one of these types at run time (``_+_`` of strings, not of ints).
    when_types: tuple[str, ...] = ()


# Overload id -> how cel-go charges it at runtime (cel-go's defaults, then Kubernetes' CallCost).
SIZED_OVERLOADS: dict[str, SizedCall] = {
    "starts_with_string": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "ends_with_string": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "string_to_bytes": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "bytes_to_string": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "in_list": SizedCall(Charge.IN_LIST, (1,)),
    "add_string": SizedCall(Charge.CONCATENATE, (0, 1)),
    "add_bytes": SizedCall(Charge.CONCATENATE, (0, 1)),
    "contains_string": SizedCall(Charge.CONTAINS, (0, 1)),
    "matches_string": SizedCall(Charge.REGEX, (0, 1)),
    "matches": SizedCall(Charge.REGEX, (0, 1)),
    "less_string": SizedCall(Charge.COMPARE, (0, 1)),
    "less_equals_string": SizedCall(Charge.COMPARE, (0, 1)),
    "greater_string": SizedCall(Charge.COMPARE, (0, 1)),
    "greater_equals_string": SizedCall(Charge.COMPARE, (0, 1)),
    "less_bytes": SizedCall(Charge.COMPARE, (0, 1)),
    "less_equals_bytes": SizedCall(Charge.COMPARE, (0, 1)),
    "greater_bytes": SizedCall(Charge.COMPARE, (0, 1)),
    "greater_equals_bytes": SizedCall(Charge.COMPARE, (0, 1)),
}

# Function name -> how Kubernetes' CostEstimator.CallCost charges it (all overloads).
SIZED_FUNCTIONS: dict[str, SizedCall] = {
    "url": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "lowerAscii": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "upperAscii": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "substring": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "trim": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "replace": SizedCall(Charge.TRAVERSE_FIRST_TWICE, (0,)),
    "split": SizedCall(Charge.TRAVERSE_FIRST_TWICE, (0,)),
    "join": SizedCall(Charge.BUILD_RESULT, (-1,)),
    "find": SizedCall(Charge.REGEX, (0, 1)),
    "findAll": SizedCall(Charge.REGEX, (0, 1)),
    "isIP": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "isCIDR": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "cidr": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "ip.isCanonical": SizedCall(Charge.TRAVERSE_FIRST_TWICE, (0,)),
    "quantity": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
    "isQuantity": SizedCall(Charge.TRAVERSE_FIRST, (0,)),
}

#: Kubernetes' fixed call costs (``CallCost``): authorization checks are deliberately expensive.
#: A field test of an ``Object``/``JSONPatch`` creation is ``has()`` in Kubernetes, free (``structs.py``).
FIXED_FUNCTION_COSTS: dict[str, int] = {"check": 350_000, "__staticadm_struct_has__": 0}


def sized_call(function: str, overload_ids: Iterable[str], operand_types: list[str]) -> SizedCall | None:
    """How a call is charged by size, or None when it has a fixed cost."""
    overloads = list(overload_ids)
    if function == "ip" and (not overloads or any(o == "cidr_ip" for o in overloads)):
        return None  # cidr.ip() is a field access; ip(string) parses
    if function == "ip" and operand_types and operand_types[0] == "string":
        return SizedCall(Charge.TRAVERSE_FIRST, (0,))
    if function in SIZED_FUNCTIONS:
        return SIZED_FUNCTIONS[function]
    if function in ("containsIP", "containsCIDR") and len(operand_types) > 1 and operand_types[1] == "string":
        # The CIDR receiver is no Sizer in cel-go (size 1): ceil(2 * 1 / 10) = 1 for the comparison, then
        # the string's traversal; containsCIDR adds ceil(1 / 10) + 1 for masking.
        return SizedCall(Charge.TRAVERSE_FIRST, (1,), extra=3 if function == "containsCIDR" else 1)
    # With dyn operands the checker leaves several candidate overloads and the runtime picks one by the
    # operands' types; the size charge then applies when the operand turns out to be a string or bytes.
    charges = {SIZED_OVERLOADS.get(overload) for overload in overloads}
    if len(charges) == 1:
        return charges.pop()
    sized = {charge for charge in charges if charge is not None}
    if len(sized) == 1:
        only = sized.pop()
        types = tuple(sorted({_OPERAND_TYPES[o] for o in overloads if o in SIZED_OVERLOADS and o in _OPERAND_TYPES}))
        if types:
            return SizedCall(only.charge, only.measured, only.extra, types)
    return None


#: The operand type an overload is chosen for, for the overloads charged by size.
_OPERAND_TYPES = {
    "add_string": "string", "add_bytes": "bytes",
    "less_string": "string", "less_equals_string": "string", "greater_string": "string",
    "greater_equals_string": "string", "less_bytes": "bytes", "less_equals_bytes": "bytes",
    "greater_bytes": "bytes", "greater_equals_bytes": "bytes",
}


def call_base_cost(function: str) -> int:
    """What a call costs when it is not charged by size (cel-go's default is 1)."""
    if function in FREE_FUNCTIONS or function.startswith("@staticadm."):
        return 0
    if function in FIXED_FUNCTION_COSTS:
        return FIXED_FUNCTION_COSTS[function]
    return 1


def static_cost(expr: Any, function_of: dict[int, str], sized: frozenset[int] = frozenset(),
                fixed: dict[int, int] | None = None) -> int:
    """The cost of evaluating ``expr`` once, as an upper bound, leaving out what is charged at run time:
    the iterations of comprehensions inside it (their range, initial value and result count) and the
    size-driven part of the calls in ``sized``. ``fixed`` gives the cost of size-driven calls whose
    operands are literals (known before any evaluation)."""
    fixed = fixed or {}
    kind = expr.WhichOneof("expr_kind")
    if kind == "const_expr" or kind is None:
        return 0
    if kind == "ident_expr":
        return SELECT_AND_IDENT_COST
    if kind == "select_expr":
        own = 0 if expr.select_expr.test_only else SELECT_AND_IDENT_COST
        return own + static_cost(expr.select_expr.operand, function_of, sized, fixed)
    if kind == "list_expr":
        return LIST_CREATE_BASE_COST + sum(static_cost(e, function_of, sized, fixed) for e in expr.list_expr.elements)
    if kind == "struct_expr":
        struct = expr.struct_expr
        base = STRUCT_CREATE_BASE_COST if struct.message_name else MAP_CREATE_BASE_COST
        total = base
        for entry in struct.entries:
            if entry.HasField("map_key"):
                total += static_cost(entry.map_key, function_of, sized, fixed)
            total += static_cost(entry.value, function_of, sized, fixed)
        return total
    if kind == "comprehension_expr":
        comprehension = expr.comprehension_expr
        return (static_cost(comprehension.iter_range, function_of, sized, fixed)
                + static_cost(comprehension.accu_init, function_of, sized, fixed)
                + static_cost(comprehension.result, function_of, sized, fixed))
    call = expr.call_expr
    function = function_of.get(expr.id, call.function)
    operands = ([call.target] if call.HasField("target") else []) + list(call.args)
    if function == "_?_:_" and len(operands) == 3:
        condition, then, otherwise = (static_cost(o, function_of, sized, fixed) for o in operands)
        return condition + max(then, otherwise)
    # A size-driven call's first units are static; the rest is charged when the sizes are known.
    own = SIZED_CALL_BASE if expr.id in sized else fixed.get(expr.id, call_base_cost(function))
    return own + sum(static_cost(operand, function_of, sized, fixed) for operand in operands)


def iteration_cost(comprehension: Any, function_of: dict[int, str], sized: frozenset[int] = frozenset(),
                   fixed: dict[int, int] | None = None) -> int:
    """What one iteration of ``comprehension`` costs: its loop condition and loop step."""
    return (static_cost(comprehension.loop_condition, function_of, sized, fixed)
            + static_cost(comprehension.loop_step, function_of, sized, fixed))


def function_names(checked: Any) -> dict[int, str]:
    """Node id -> the function a call node resolved to (the checker's reference, else the call's name)."""
    names: dict[int, str] = {}
    for node in ast.walk(checked.expr):
        if node.WhichOneof("expr_kind") == "call_expr":
            names[node.id] = node.call_expr.function
    return names
