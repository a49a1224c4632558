"""Kubernetes' CEL lists library (``k8s.io/apiserver/pkg/cel/library/lists.go``).

``isSorted``, ``sum``, ``min``, ``max`` are declared per element type exactly as Kubernetes templates
them; ``indexOf``/``lastIndexOf`` use ``list(dyn)``/``dyn`` where Kubernetes uses a type parameter.
``includes`` is the lists library version 1, added in Kubernetes 1.37 (see ``INTRODUCED_IN_1_37``).

The runtime dispatches on coarse kinds (every list is a list), so each function has one generic
implementation that follows cel-go's ``Compare``/``Add``/``Equal`` on the element values. ``sum``,
``min`` and ``max`` return a value of the element type; the engine accepts a duration or timestamp
back from Python only through an overload whose declared result is that concrete type, so the
environment registers each of their overloads under its own runtime name as well (see
``environment._typed_runtime_decls``) and the rewrite routes every call the checker resolved to one
overload there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from staticadm.cel.libraries.spec import CelFunctionError, Function, Overload, element_kind, require_element_type

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1
_MAX_DURATION_NANOS = _INT64_MAX

#: cel-go's comparable element types, in Kubernetes' declaration order.
COMPARABLE_TYPES = ("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes")
#: Element types ``sum`` accepts.
SUMMABLE_TYPES = ("int", "uint", "double", "duration")
#: Functions of lists version 1; the environment leaves them out below compatibility version 1.37.
INTRODUCED_IN_1_37 = frozenset({"includes"})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(left: Any, right: Any) -> int | None:
    """cel-go ``Compare``; None where cel-go returns an error (NaN, unorderable kinds)."""
    if _is_number(left) and _is_number(right):
        if (isinstance(left, float) and math.isnan(left)) or (isinstance(right, float) and math.isnan(right)):
            return None
    elif not (
        (isinstance(left, bool) and isinstance(right, bool))
        or (isinstance(left, str) and isinstance(right, str))
        or (isinstance(left, bytes) and isinstance(right, bytes))
        or (isinstance(left, timedelta) and isinstance(right, timedelta))
        or (isinstance(left, datetime) and isinstance(right, datetime))
    ):
        return None
    return (left > right) - (left < right)


def cel_equal(left: Any, right: Any) -> bool:
    """CEL heterogeneous equality (``==``) on runtime values."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(cel_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        if len(left) != len(right):
            return False
        for key, value in left.items():
            match = next((k for k in right if cel_equal(k, key)), _MISSING)
            if match is _MISSING or not cel_equal(value, right[match]):
                return False
        return True
    if type(left) is not type(right):
        return False
    return bool(left == right)


_MISSING = object()


def is_sorted(values: list[Any]) -> bool:
    require_element_type("isSorted", values, COMPARABLE_TYPES)
    return all(_compare(previous, current) != 1 for previous, current in pairwise(values))


def _add(total: Any, value: Any) -> Any:
    if element_kind(total) != element_kind(value):
        # cel-go's Adder of one type refuses another (Int.Add(Double)): its bare error.
        raise CelFunctionError("no such overload")
    if isinstance(total, timedelta) or isinstance(value, timedelta):
        result = total + value
        nanos = (result.days * 86_400 + result.seconds) * 10**9 + result.microseconds * 1000
        if abs(nanos) > _MAX_DURATION_NANOS:
            raise CelFunctionError("integer overflow")
        return result
    result = total + value
    if isinstance(result, int):
        # A Python int above int64 can only have come from a uint element.
        unsigned = total > _INT64_MAX or value > _INT64_MAX
        if unsigned and result > _UINT64_MAX:
            raise CelFunctionError("unsigned integer overflow")
        if not unsigned and not (_INT64_MIN <= result <= _INT64_MAX):
            raise CelFunctionError("integer overflow")
    return result


def sum_list(values: list[Any]) -> Any:
    """Sum of a non-empty list; an empty one gives int 0 (see ``_typed_sum`` for the declared zero)."""
    require_element_type("sum", values, SUMMABLE_TYPES)
    if not values:
        return 0
    total = values[0]
    for value in values[1:]:
        total = _add(total, value)
    return total


#: cel-go's zero value per summable element type: ``[].sum()`` of a ``list(double)`` is ``0.0``.
_SUM_ZEROS: dict[str, Any] = {"int": 0, "uint": 0, "double": 0.0, "duration": timedelta(0)}


def _typed_sum(element_type: str) -> Callable[[list[Any]], Any]:
    zero = _SUM_ZEROS[element_type]

    def typed_sum(values: list[Any]) -> Any:
        return sum_list(values) if values else zero

    return typed_sum


def _extreme(name: str, preferred: int) -> Callable[[list[Any]], Any]:
    def pick(values: list[Any]) -> Any:
        require_element_type(name, values, COMPARABLE_TYPES)
        if not values:
            raise CelFunctionError(f"{name} called on empty list")
        result = values[0]
        for value in values[1:]:
            if _compare(result, value) == preferred:
                result = value
        return result

    return pick


min_list = _extreme("min", 1)
max_list = _extreme("max", -1)


def index_of(values: list[Any], item: Any) -> int:
    for index, value in enumerate(values):
        if cel_equal(value, item):
            return index
    return -1


def last_index_of(values: list[Any], item: Any) -> int:
    for index in range(len(values) - 1, -1, -1):
        if cel_equal(values[index], item):
            return index
    return -1


def includes(target: Any, item: Any) -> bool:
    if isinstance(target, list):
        return any(cel_equal(value, item) for value in target)
    return cel_equal(target, item)


FUNCTIONS = (
    Function(
        "isSorted",
        tuple(
            Overload(f"list_{t}_is_sorted_bool", (f"list({t})",), "bool", is_sorted, member=True)
            for t in COMPARABLE_TYPES
        ),
    ),
    Function(
        "sum",
        tuple(Overload(f"list_{t}_sum_{t}", (f"list({t})",), t, _typed_sum(t), member=True) for t in SUMMABLE_TYPES),
    ),
    Function(
        "max",
        tuple(Overload(f"list_{t}_max_{t}", (f"list({t})",), t, max_list, member=True) for t in COMPARABLE_TYPES),
    ),
    Function(
        "min",
        tuple(Overload(f"list_{t}_min_{t}", (f"list({t})",), t, min_list, member=True) for t in COMPARABLE_TYPES),
    ),
    Function("indexOf", (Overload("list_a_index_of_int", ("list(dyn)", "dyn"), "int", index_of, member=True),)),
    Function(
        "lastIndexOf",
        (Overload("list_a_last_index_of_int", ("list(dyn)", "dyn"), "int", last_index_of, member=True),),
    ),
    Function("includes", (Overload("list_includes_dyn_dyn", ("dyn", "dyn"), "bool", includes, member=True),)),
)
