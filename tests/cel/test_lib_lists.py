"""The Kubernetes lists library (isSorted, sum, min, max, indexOf, lastIndexOf, includes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.libraries import lists
from staticadm.cel.libraries.spec import CelFunctionError


def test_declarations_match_kubernetes() -> None:
    decls = {f.name: f.overloads for f in lists.FUNCTIONS}
    assert [o.overload_id for o in decls["isSorted"]] == [
        f"list_{t}_is_sorted_bool" for t in lists.COMPARABLE_TYPES
    ]
    assert [(o.overload_id, o.params, o.result) for o in decls["sum"]] == [
        (f"list_{t}_sum_{t}", (f"list({t})",), t) for t in ("int", "uint", "double", "duration")
    ]
    for name in ("isSorted", "min", "max"):
        assert len({id(o.impl) for o in decls[name]}) == 1, name
    for name in ("isSorted", "sum", "min", "max"):
        assert all(o.member for o in decls[name])
    assert decls["includes"][0].params == ("dyn", "dyn")
    assert {"includes"} == lists.INTRODUCED_IN_1_37


def test_is_sorted() -> None:
    assert lists.is_sorted([1, 2, 2, 3]) is True
    assert lists.is_sorted(["b", "a"]) is False
    assert lists.is_sorted([]) is True
    assert lists.is_sorted([timedelta(seconds=1), timedelta(minutes=1)]) is True
    assert lists.is_sorted([b"b", b"a"]) is False
    # cel-go's Compare errors on NaN and isSorted only reacts to a definite "greater".
    assert lists.is_sorted([2.0, float("nan"), 1.0]) is True


def test_sum() -> None:
    assert lists.sum_list([1, 2, 2, 3]) == 8
    assert lists.sum_list([1.5, 2.5]) == 4.0
    assert lists.sum_list([timedelta(minutes=1), timedelta(seconds=1)]) == timedelta(seconds=61)
    assert lists.sum_list([]) == 0
    with pytest.raises(CelFunctionError, match=r"^integer overflow$"):
        lists.sum_list([2**63 - 1, 1])
    with pytest.raises(CelFunctionError, match=r"^unsigned integer overflow$"):
        lists.sum_list([2**64 - 1, 2**63])


def test_min_max() -> None:
    assert lists.min_list([3, 1, 2]) == 1
    assert lists.max_list(["a", "c", "b"]) == "c"
    stamps = [datetime(2000, 1, 1, tzinfo=UTC), datetime(2010, 1, 1, tzinfo=UTC)]
    assert lists.max_list(stamps) == stamps[1]
    with pytest.raises(CelFunctionError, match=r"^min called on empty list$"):
        lists.min_list([])
    with pytest.raises(CelFunctionError, match=r"^max called on empty list$"):
        lists.max_list([])


def test_index_of_uses_cel_equality() -> None:
    assert lists.index_of([1, 2, 2, 3], 2) == 1
    assert lists.last_index_of([1, 2, 2, 3], 2) == 2
    assert lists.index_of([1, 2], 10) == -1
    assert lists.index_of([1.0, 2.0], 2) == 1  # heterogeneous numeric equality
    assert lists.index_of([True, 1], 1) == 1  # bool is not a number in CEL
    assert lists.index_of([[1, 2], {"a": [1]}], {"a": [1.0]}) == 1
    assert lists.index_of([], "x") == -1


def test_sum_of_an_empty_list_is_the_element_types_zero() -> None:
    sums = {o.params[0]: o.impl for o in next(f for f in lists.FUNCTIONS if f.name == "sum").overloads}
    assert sums["list(int)"]([]) == 0
    assert isinstance(sums["list(double)"]([]), float)
    assert sums["list(duration)"]([]) == timedelta(0)
    assert sums["list(duration)"]([timedelta(seconds=1), timedelta(minutes=1)]) == timedelta(seconds=61)


def test_includes() -> None:
    assert lists.includes([1, 2, 3], 2) is True
    assert lists.includes([1, 2, 3], 4) is False
    assert lists.includes("model-a", "model-a") is True
    assert lists.includes("model-a", "model-b") is False


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("[1, 2, 2, 3].isSorted()", True),
        ("[1, 2, 2, 3].sum()", 8),
        ("dyn([]).sum()", 0),
        ("[1.0, 2.0, 2.0, 3.0].min()", 1.0),
        ("['a', 'b', 'b', 'c'].lastIndexOf('b')", 2),
        ("[1, 2, 2, 3].indexOf(2)", 1),
        ("[duration('1s'), duration('1m')].max() == duration('1m')", True),
        # Durations and timestamps come back from Python through overloads declared with that result type.
        ("[duration('1s'), duration('1m')].min()", timedelta(seconds=1)),
        ("[duration('1s'), duration('1m')].sum()", timedelta(seconds=61)),
        ("[duration('1s'), duration('1m')].sum() + duration('1s') == duration('62s')", True),
        ("[duration('1m'), duration('1s')].isSorted()", False),
        ("[duration('1s'), duration('1m'), duration('1s')].lastIndexOf(duration('1s'))", 2),
        ("[timestamp('2000-01-01T00:00:00Z'), timestamp('1999-01-01T00:00:00Z')].min()",
         datetime(1999, 1, 1, tzinfo=UTC)),
        ("[timestamp('2000-01-01T00:00:00Z'), timestamp('1999-01-01T00:00:00Z')].max() > timestamp(0)", True),
        ("[timestamp('1999-01-01T00:00:00Z'), timestamp('2000-01-01T00:00:00Z')].isSorted()", True),
        ("[timestamp('1999-01-01T00:00:00Z')].indexOf(timestamp('1999-01-01T00:00:00Z'))", 0),
        ("[1, 2].map(i, duration(string(i) + 's')).max() == duration('2s')", True),
        # The declared element type's zero for an empty list.
        ("[0.5].slice(0, 0).sum()", 0.0),
        ("[duration('1s')].slice(0, 0).sum() == duration('0s')", True),
    ],
)
def test_end_to_end(expr: str, expected: Any) -> None:
    result = evaluate_standalone(expr)
    assert not isinstance(result, CompileError | EvalError), result
    assert result == expected
    assert type(result) is type(expected)


def test_end_to_end_errors() -> None:
    empty = evaluate_standalone("[1].slice(0, 0).min()")
    assert isinstance(empty, EvalError)
    assert "min called on empty list" in empty.message
    no_overload = evaluate_standalone("['a', 'b'].sum() == 'c'")
    assert isinstance(no_overload, CompileError)
    assert "found no matching overload for 'sum'" in no_overload.message


def test_lists_range_of_a_negative_count_is_empty() -> None:
    # cel-go ext/lists.go genRange loops while i < n; cel-cpp fails with 'vector::reserve'.
    assert evaluate_standalone("lists.range(-1)") == []
    assert evaluate_standalone("lists.range(-5).size() == 0") is True
