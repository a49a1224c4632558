"""The Kubernetes Quantity library against apimachinery's ParseQuantity and upstream quantity_test.go."""

from __future__ import annotations

import math
from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.libraries import quantity as q
from staticadm.cel.libraries.spec import CelFunctionError


@pytest.mark.parametrize(
    ("text", "value", "canonical"),
    [
        ("12Mi", "12582912", "12582912"),
        ("200M", "200000000", "200M"),
        ("0.2G", "200000000", "200M"),
        ("1.5", "1.5", "1500m"),
        ("1.5Ki", "1536", "1536"),
        ("50.703k", "50703", "50703"),
        ("1e3", "1000", "1k"),
        ("1E", "1000000000000000000", "1E"),
        ("+5", "5", "5"),
        ("-0.5", "-0.5", "-500m"),
        ("0", "0", "0"),
        (".", "0", "0"),
        # Go's scanner treats a missing number as zero: "Mi" parses (despite the library's doc comment).
        ("Mi", "0", "0"),
        ("1E-3", "0.001", "1m"),
        ("0.000000000001Ki", "0.000000002", "2n"),
        ("100.035Ki", "102435.84", "102435840m"),
        # Non-zero values round away from zero to a whole nano.
        ("1.5n", "0.000000002", "2n"),
        ("0.9n", "0.000000001", "1n"),
        ("-1.5n", "-0.000000002", "-2n"),
        ("1e-20", "0.000000001", "1n"),
        # binarySI is capped at 2^63-1; decimal quantities are not.
        ("8Ei", "9223372036854775807", "9223372036854775807"),
        ("1000E", "1000000000000000000000", "1e21"),
    ],
)
def test_parse_matches_apimachinery(text: str, value: str, canonical: str) -> None:
    parsed = q.quantity(text)
    assert q.equality_key(parsed) == {"@k8s": "kubernetes.Quantity", "value": value}
    assert q.canonical_string(parsed) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10Mo", "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        ("1,3G", "quantities must match the regular expression"),
        ("", "quantities must match the regular expression"),
        ("10Mm", "unable to parse quantity's suffix"),
        ("200K", "unable to parse quantity's suffix"),
        ("1e", "unable to parse quantity's suffix"),
        ("aoeu", "quantities must match the regular expression"),
        (".5i", "unable to parse quantity's suffix"),
        (".e-10", "unable to parse numeric part of quantity"),
    ],
)
def test_parse_errors_use_apimachinery_text(text: str, message: str) -> None:
    with pytest.raises(CelFunctionError) as caught:
        q.quantity(text)
    assert message in str(caught.value)
    assert q.is_quantity(text) is False


def test_equal_values_have_equal_equality_keys() -> None:
    key = q.equality_key
    assert q.quantity("1Ki") == q.quantity("1024")
    assert key(q.quantity("2000k")) == key(q.quantity("0.002G")) == key(q.quantity("2M"))
    assert key(q.quantity("200M")) != key(q.quantity("0.3G"))
    assert key(q.quantity("1000m")) == q.quantity("1")


@pytest.mark.parametrize(
    ("text", "representation"),
    [
        # ParseQuantity's int64 fast path: int64Amount{value, scale}, the scale less the fraction's digits.
        ("1000m", ("i", 1000, -3)),
        ("0.0", ("i", 0, -1)),
        ("1.5k", ("i", 15, 2)),
        ("100Mi", ("i", 104857600, 0)),
        ("-2.000m", ("i", -2000, -6)),
        # A fraction of a binary suffix, more digits than an int64 holds, or below 1n: inf.Dec at scale 9.
        ("0.5Ki", ("d", 512 * 10**9, 9)),
        ("1.5Gi", ("d", 1610612736 * 10**9, 9)),
        ("0.0Ki", ("d", 0, 1)),
        ("1e-20", ("d", 1, 9)),
        ("9Ei", ("d", 2**63 - 1, 0)),
        ("1234567890123456789", ("d", 1234567890123456789 * 10**9, 9)),
    ],
)
def test_representation_is_apimachinerys(text: str, representation: tuple[str, int, int]) -> None:
    assert q.parse_representation(text) == representation
    assert q._representation(q.quantity(text)) == representation


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        # Kubernetes' AsInt64 reads the representation: an inf.Dec or a negative scale is no integer.
        ("quantity('0.5Ki').isInteger()", False),
        ("quantity('1.5Gi').isInteger()", False),
        ("quantity('1000m').isInteger()", False),
        ("quantity('0.0').isInteger()", False),
        ("quantity('1.5k').isInteger()", True),
        ("quantity('1000m').add(1).isInteger()", False),
        ("quantity('0.5').add(quantity('-0.5')).isInteger()", False),
        ("quantity('1.5Ki').sub(quantity('1.5Ki')).isInteger()", False),
        ("quantity('-2.000m').add(3).asApproximateFloat() < 2.998", True),
        # Equality stays numeric (Quantity.Equal is Cmp(v) == 0).
        ("quantity('1000m') == quantity('1')", True),
        ("quantity('1.5Ki') != quantity('1536')", False),
        ("[quantity('1000m')].all(x, x == quantity('1') && !x.isInteger())", True),
        ("[quantity('1000m')] == [quantity('1')] && quantity('1000m') in [quantity('1')]", True),
        ("[quantity('1000m'), quantity('2')] != [quantity('1'), quantity('2.0')]", False),
    ],
)
def test_representation_decides_as_in_kubernetes(expression: str, value: bool) -> None:
    assert evaluate_standalone(expression, {}) is value


def test_arithmetic_and_comparison() -> None:
    fifty_k = q.quantity("50k")
    key = q.equality_key
    assert key(q.add(fifty_k, q.quantity("20"))) == key(q.quantity("50.02k"))
    assert key(q.sub(fifty_k, 20)) == key(q.quantity("49980"))
    assert q.as_integer(q.sub(q.add(fifty_k, 20), q.quantity("100k"))) == -49980
    assert q.compare_to(q.quantity("50M"), q.quantity("50Mi")) == -1
    assert q.is_greater_than(q.quantity("50Mi"), q.quantity("50M")) is True
    assert q.is_less_than(q.quantity("100M"), q.quantity("50M")) is False
    assert q.sign(q.quantity("-1m")) == -1
    assert q.sign(q.quantity("0")) == 0


def test_integer_conversion() -> None:
    huge = q.quantity("9999999999999999999999999999999999999G")
    assert q.is_integer(huge) is False
    with pytest.raises(CelFunctionError, match="cannot convert value to integer"):
        q.as_integer(huge)
    assert q.is_integer(q.quantity("1.5")) is False
    assert q.as_integer(q.quantity("50k")) == 50000
    assert q.as_approximate_float(q.quantity("50.703k")) == 50703.0
    assert q.as_approximate_float(huge) == pytest.approx(1e46)
    assert math.isinf(q.as_approximate_float(q.quantity("1e400")))


def test_declarations_match_kubernetes() -> None:
    decls = {f.name: [(o.overload_id, o.params, o.member) for o in f.overloads] for f in q.FUNCTIONS}
    assert decls["sign"] == [("quantity_sign", ("kubernetes.Quantity",), False)]
    assert decls["add"] == [
        ("quantity_add", ("kubernetes.Quantity", "kubernetes.Quantity"), True),
        ("quantity_add_int", ("kubernetes.Quantity", "int"), True),
    ]
    assert "mul" not in decls
    assert [t.name for t in q.TYPES] == ["kubernetes.Quantity"]


def _eval(expr: str) -> Any:
    result = evaluate_standalone(expr)
    assert not isinstance(result, CompileError | EvalError), result
    return result


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('quantity("200M") == quantity("0.2G")', True),
        ('quantity("50k").add(20).sub(quantity("100k")).asInteger()', -49980),
        ('quantity("50M").compareTo(quantity("50Mi"))', -1),
        ('isQuantity("20Mo")', False),
        ('quantity("50.703k").asApproximateFloat()', 50703.0),
        ('sign(quantity("-5"))', -1),
    ],
)
def test_end_to_end(expr: str, expected: Any) -> None:
    assert _eval(expr) == expected


def test_end_to_end_errors() -> None:
    runtime = evaluate_standalone('quantity("10Mm")')
    assert isinstance(runtime, EvalError)
    assert "unable to parse quantity's suffix" in runtime.message
    compile_error = evaluate_standalone("isQuantity([1, 2, 3])")
    assert isinstance(compile_error, CompileError)
    assert "found no matching overload for 'isQuantity' applied to" in compile_error.message
