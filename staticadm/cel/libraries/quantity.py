"""Kubernetes' CEL Quantity library (``k8s.io/apiserver/pkg/cel/library/quantity.go``).

Parsing follows ``resource.ParseQuantity`` from apimachinery exactly: the same scanner, the same
suffix table, rounding of non-zero values away from zero to a multiple of 1n, and the silent 2^63-1 cap
on binarySI quantities. Every parsed value is therefore a whole number of nano units, and add/sub keep
it so; the value is held as a Python int of nano units, which makes arithmetic exact.

The runtime payload is the value (a normalized decimal string), because CEL ``==`` compares payloads and
Kubernetes' ``Quantity.Equal`` is a numeric comparison: ``quantity("1Ki") == quantity("1024")``. A Quantity
also holds its value either as an ``int64Amount`` (value, scale) or as an ``inf.Dec`` (unscaled, scale), and
``AsInt64`` (``isInteger``/``asInteger``) and ``AsApproximateFloat64`` read that representation: ``1000m``,
``0.0``, ``1.5Ki`` and ``2.0Ki`` are not integers to Kubernetes (``int64Amount{1000, -3}``, ``{0, -1}`` and
inf.Decs), and add/sub keep or change it as Go's do. The payload carries the representation's kind and scale
under ``repr`` where it is not the value's normalized one (every factor of ten in the scale); ``==``/``!=``
between operands the checker typed as Quantity compare values only (``equality_key``, applied by the rewrite;
also to each element of a ``list(Quantity)`` under ``==``, ``!=`` and ``in``). Quantities inside maps or
behind ``dyn`` compared as a whole still compare their payloads. The Format is not kept: no function of the
library reads it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from staticadm.cel.libraries.spec import CelFunctionError, Function, OpaqueType, Overload
from staticadm.cel.values import make_opaque, opaque_type_name

TYPE_NAME = "kubernetes.Quantity"

_NANO = 10**9
_MAX_INT64 = 2**63 - 1
_MIN_INT64 = -(2**63)
_MAX_ALLOWED_NANOS = _MAX_INT64 * _NANO

_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG = f"quantities must match the regular expression '{_SPLIT_RE}'"
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")

# A decimal exponent this large would make Go's inf.Dec (and a Python int) impractically large; no
# real quantity comes near it, so refusing it is safer than allocating gigabytes.
_MAX_PRACTICAL_EXPONENT = 100_000


class QuantityError(ValueError):
    """A string is not a valid Kubernetes quantity; the message is apimachinery's error text."""


def _int32(value: int) -> int:
    # Go converts the parsed exponent with int32(parsed), which wraps.
    return (value + 2**31) % 2**32 - 2**31


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """Go's ``parseQuantityString``: (positive, value, num, denom, suffix)."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1

    while True:
        if pos >= end:
            return positive, "0", "0", "", ""
        if text[pos] != "0":
            break
        pos += 1

    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos]
    if pos >= end:
        return positive, text, num or "0", "", ""
    num = num or "0"

    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]

    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    if text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    # A character that is neither a suffix letter nor part of a trailing exponent.
    raise QuantityError(ERR_FORMAT_WRONG)


def _go_parse_int64(text: str) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body or any(ch not in _DIGITS for ch in body):
        return None
    parsed = int(text)
    if parsed < _MIN_INT64 or parsed > _MAX_INT64:
        return None
    return parsed


def _interpret_suffix(suffix: str) -> tuple[int, int, str]:
    """(base, exponent, format) for a suffix, as ``suffixHandler.interpret``."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE":
        parsed = _go_parse_int64(suffix[1:])
        if parsed is not None:
            return 10, _int32(parsed), "DecimalExponent"
    raise QuantityError(ERR_SUFFIX)


def _decimal_digits(value: str) -> tuple[int, int]:
    """Parses the numeric part (sign stripped) as inf.Dec.SetString would: (unscaled, scale)."""
    body = value[1:] if value[:1] in "+-" else value
    whole, _, frac = body.partition(".")
    digits = whole + frac
    if not digits or any(ch not in _DIGITS for ch in digits) or body.count(".") > 1:
        raise QuantityError(ERR_NUMERIC)
    return int(digits), len(frac)


@functools.lru_cache(maxsize=4096)
def parse_nanos(text: str) -> int:
    """The value of a Kubernetes quantity string in nano units; raises ``QuantityError``."""
    if not text:
        raise QuantityError(ERR_FORMAT_WRONG)
    if text == "0":
        return 0
    positive, value, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret_suffix(suffix)
    if not any(ch in _DIGITS for ch in value):
        # Go's int64 fast path reads a digit-less number ("." or "-.") as zero; only the inf.Dec
        # path (below 1n, or a binary suffix from Pi up) rejects it.
        if _fast_path_scale(num, denom, exponent, fmt) is not None:
            return 0
        raise QuantityError(ERR_NUMERIC)
    unscaled, scale = _decimal_digits(value)
    if unscaled == 0:
        return 0

    # Both of Go's paths (the int64 fast path and inf.Dec) reach the same number: the exact value,
    # its magnitude rounded up to a whole nano, then the binarySI cap.
    if base == 10:
        power = exponent - scale + 9
        if power > _MAX_PRACTICAL_EXPONENT:
            raise QuantityError(ERR_NUMERIC)
        if power >= 0:
            nanos = unscaled * 10**power
        elif -power > len(str(unscaled)) + 1:
            nanos = 1  # far below 1n: rounds up to the smallest representable amount
        else:
            nanos = -(-unscaled // 10**-power)
    else:
        numerator = unscaled * (1 << exponent) * _NANO
        nanos = -(-numerator // 10**scale)
    if fmt == "BinarySI" and nanos > _MAX_ALLOWED_NANOS:
        nanos = _MAX_ALLOWED_NANOS
    return nanos if positive else -nanos


#: ``maxInt64Factors``: the digits ParseQuantity reads into an int64 on its fast path.
_MAX_INT64_FACTORS = 18
_NANO_SCALE = -9

#: A Quantity's representation: ("i", value, scale) is ``int64Amount`` (value * 10^scale); ("d", unscaled, scale)
#: is ``inf.Dec`` (unscaled * 10^-scale).
Representation = tuple[str, int, int]


def _fast_path_scale(num: str, denom: str, exponent: int, fmt: str) -> int | None:
    """The scale of the int64Amount ParseQuantity's fast path makes of the number, None where it takes the inf.Dec
    path (too many digits for an int64, a fraction of a binary suffix, below 1n); an int64 overflow of the
    product also falls to inf.Dec (``parse_representation``)."""
    if fmt == "BinarySI":
        if denom:
            return None
        # int32(float32(exponent)*3/10): exact for the binary exponents, multiples of ten.
        precision = 15 - len(num) - (exponent * 3) // 10 - 1
        scale = 0
    else:
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
        scale = exponent - len(denom)
    if precision < 0 or scale < _NANO_SCALE:
        return None
    return scale


@functools.lru_cache(maxsize=4096)
def parse_representation(text: str) -> Representation:
    """How ``resource.ParseQuantity`` holds ``text`` (which ``parse_nanos`` accepted): the int64 fast path or
    an inf.Dec rounded up to scale 9 (capped at 2^63-1 with scale 0 for binarySI)."""
    if text == "0":
        return ("i", 0, 0)
    positive, value, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret_suffix(suffix)
    scale = _fast_path_scale(num, denom, exponent, fmt)
    if scale is not None:
        result = int(num + denom) * (1 << exponent if fmt == "BinarySI" else 1)
        if result <= _MAX_INT64:
            return ("i", result if positive else -result, scale)
    nanos = parse_nanos(text)
    if nanos != 0:
        if fmt == "BinarySI" and abs(nanos) == _MAX_ALLOWED_NANOS:
            return ("d", _MAX_INT64 if positive else -_MAX_INT64, 0)
        return ("d", nanos, 9)
    # A zero is not rounded: it keeps the scale inf.Dec.SetString read, less a decimal suffix's exponent.
    digits_scale = len(value.partition(".")[2]) if "." in value else 0
    return ("d", 0, digits_scale - exponent if base == 10 else digits_scale)


def _representation_nanos(representation: Representation) -> int:
    kind, number, scale = representation
    exponent = scale + 9 if kind == "i" else 9 - scale
    return number * 10**exponent if exponent >= 0 else number // 10**-exponent


def _normalized(nanos: int) -> Representation:
    mantissa, exponent = _mantissa_exponent(nanos)
    return ("i", mantissa, exponent) if _MIN_INT64 <= mantissa <= _MAX_INT64 else ("d", mantissa, -exponent)


def _positive_scale_int64(base: int, scale: int) -> int | None:
    """``positiveScaleInt64``: base * 10^scale, None when it leaves int64 (or base is the most negative int64)."""
    if scale == 0:
        return base
    if base == _MIN_INT64:
        return None
    result = base * 10**scale
    return result if _MIN_INT64 <= result <= _MAX_INT64 else None


def _representation_int64(representation: Representation) -> int | None:
    """``Quantity.AsInt64``: only an int64Amount of scale >= 0 whose value fits converts."""
    kind, number, scale = representation
    if kind == "d" or scale < 0:
        return None
    return _positive_scale_int64(number, scale)


def _representation_float(representation: Representation) -> float:
    """``Quantity.AsApproximateFloat64``."""
    kind, number, scale = representation
    exponent = scale if kind == "i" else -scale
    try:
        base = float(number)
    except OverflowError:
        base = math.copysign(math.inf, number)
    if exponent == 0:
        return base
    return base * _go_pow10(exponent)


def _in_int64(value: int) -> int | None:
    return value if _MIN_INT64 <= value <= _MAX_INT64 else None


def _int64_amount_add(left: Representation, right: Representation) -> Representation | None:
    """``int64Amount.Add``: None where it reports an overflow (the caller then adds as inf.Decs)."""
    _, a_value, a_scale = left
    _, b_value, b_scale = right
    if b_value == 0:
        return left
    if a_value == 0:
        return right
    if a_scale == b_scale:
        total = _in_int64(a_value + b_value)
        return None if total is None else ("i", total, a_scale)
    if a_scale > b_scale:
        shifted = _positive_scale_int64(a_value, a_scale - b_scale)
        total = None if shifted is None else _in_int64(shifted + b_value)
        return None if total is None else ("i", total, b_scale)
    shifted = _positive_scale_int64(b_value, b_scale - a_scale)
    total = None if shifted is None else _in_int64(a_value + shifted)
    return None if total is None else ("i", total, a_scale)


def _as_dec(representation: Representation) -> tuple[int, int]:
    kind, number, scale = representation
    return (number, scale) if kind == "d" else (number, -scale)


def _representation_sum(left: Representation, right: Representation) -> Representation:
    """``Quantity.Add``: as int64Amounts while both are and the sum fits, else as inf.Decs (scale the larger)."""
    if left[0] == "i" and right[0] == "i":
        total = _int64_amount_add(left, right)
        if total is not None:
            return total
    (a_unscaled, a_scale), (b_unscaled, b_scale) = _as_dec(left), _as_dec(right)
    scale = max(a_scale, b_scale)
    return ("d", a_unscaled * 10**(scale - a_scale) + b_unscaled * 10**(scale - b_scale), scale)


def _negated(representation: Representation) -> Representation:
    kind, number, scale = representation
    if kind == "i" and number == _MIN_INT64:
        return representation  # Go's -b.value wraps
    return (kind, -number, scale)


def quantity_format(text: str) -> str:
    """The Format ParseQuantity gives ``text`` (its suffix's: ``DecimalSI``, ``BinarySI`` or
    ``DecimalExponent``), which decides how the quantity is written back; raises ``QuantityError``."""
    if text == "0":
        return "DecimalSI"
    suffix = _scan(text)[4]
    return _interpret_suffix(suffix)[2]


def nanos_to_decimal(nanos: int) -> str:
    """Normalized decimal text (no exponent, no trailing fractional zeros) for the payload."""
    sign = "-" if nanos < 0 else ""
    whole, frac = divmod(abs(nanos), _NANO)
    if frac == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{frac:09d}".rstrip("0")


@functools.lru_cache(maxsize=4096)
def decimal_to_nanos(text: str) -> int:
    negative = text.startswith("-")
    whole, _, frac = text.lstrip("-").partition(".")
    nanos = int(whole) * _NANO + (int(frac.ljust(9, "0")) if frac else 0)
    return -nanos if negative else nanos


def make_quantity(nanos: int, representation: Representation | None = None) -> dict[str, Any]:
    """A Quantity's payload; ``representation`` is kept where it is not the value's normalized one (the value
    decides the number, so the kind and scale are what is kept)."""
    if representation is not None and representation != _normalized(nanos):
        kind, _, scale = representation
        return make_opaque(TYPE_NAME, value=nanos_to_decimal(nanos), repr=f"{kind}:{scale}")
    return make_opaque(TYPE_NAME, value=nanos_to_decimal(nanos))


def equality_key(value: Any) -> Any:
    """What ``==`` compares of a Quantity (``Quantity.Equal`` is ``Cmp(v) == 0``): its value alone."""
    if opaque_type_name(value) == TYPE_NAME and "repr" in value:
        return make_opaque(TYPE_NAME, value=value["value"])
    return value


def _nanos(value: Any) -> int:
    if opaque_type_name(value) != TYPE_NAME:
        raise CelFunctionError("no such overload")
    return decimal_to_nanos(value["value"])


def _representation(value: Any) -> Representation:
    nanos = _nanos(value)
    held = value.get("repr")
    if not isinstance(held, str):
        return _normalized(nanos)
    kind, _, scale_text = held.partition(":")
    scale = int(scale_text)
    # nanos * 10^-9 == number * 10^scale (int64Amount) or number * 10^-scale (inf.Dec).
    shift = -9 - scale if kind == "i" else scale - 9
    return (kind, nanos * 10**shift if shift >= 0 else nanos // 10**-shift, scale)


def _mantissa_exponent(nanos: int) -> tuple[int, int]:
    """(mantissa, exponent) with every factor of ten moved into the exponent."""
    if nanos == 0:
        return 0, 0
    mantissa, exponent = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    return mantissa, exponent


def canonical_string(value: dict[str, Any]) -> str:
    """Kubernetes' canonical text for the value in DecimalSI format (the payload keeps no Format)."""
    nanos = _nanos(value)
    if nanos == 0:
        return "0"
    mantissa, exponent = _mantissa_exponent(nanos)
    # CanonicalizeBytes lowers the exponent to a multiple of three (Go's % truncates toward zero).
    while exponent % 3 != 0:
        mantissa *= 10
        exponent -= 1
    suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
    if suffix is None:
        suffix = f"e{exponent}"
    return f"{mantissa}{suffix}"


_POW10_TAB = [float(f"1e{i}") for i in range(32)]
_POW10_POS_TAB32 = [float(f"1e{i}") for i in range(0, 320, 32)]
_POW10_NEG_TAB32 = [float(f"1e-{i}") for i in range(0, 352, 32)]


def _go_pow10(n: int) -> float:
    # Go's math.Pow10, table for table, so the rounding matches Kubernetes.
    if 0 <= n <= 308:
        return _POW10_POS_TAB32[n // 32] * _POW10_TAB[n % 32]
    if -323 <= n <= 0:
        return _POW10_NEG_TAB32[-n // 32] / _POW10_TAB[-n % 32]
    return math.inf if n > 0 else 0.0


def quantity(text: str) -> dict[str, Any]:
    try:
        return make_quantity(parse_nanos(text), parse_representation(text))
    except QuantityError as err:
        raise CelFunctionError(str(err)) from None


def is_quantity(text: str) -> bool:
    try:
        parse_nanos(text)
    except QuantityError:
        return False
    return True


def is_integer(value: dict[str, Any]) -> bool:
    return _representation_int64(_representation(value)) is not None


def as_integer(value: dict[str, Any]) -> int:
    result = _representation_int64(_representation(value))
    if result is None:
        raise CelFunctionError("cannot convert value to integer")
    return result


def as_approximate_float(value: dict[str, Any]) -> float:
    return _representation_float(_representation(value))


def sign(value: dict[str, Any]) -> int:
    nanos = _nanos(value)
    return (nanos > 0) - (nanos < 0)


def _operand(other: Any) -> Representation:
    # The int overloads wrap the operand with resource.NewQuantity(n, DecimalExponent): int64Amount{n, 0}.
    if isinstance(other, int) and not isinstance(other, bool):
        return ("i", other, 0)
    return _representation(other)


def _result(representation: Representation) -> dict[str, Any]:
    return make_quantity(_representation_nanos(representation), representation)


def add(value: dict[str, Any], other: Any) -> dict[str, Any]:
    return _result(_representation_sum(_representation(value), _operand(other)))


def sub(value: dict[str, Any], other: Any) -> dict[str, Any]:
    # Quantity.Sub: int64Amount.Sub adds the negated int64Amount; inf.Dec subtracts.
    left, right = _representation(value), _operand(other)
    if left[0] == "i" and right[0] == "i":
        total = _int64_amount_add(left, _negated(right))
        if total is not None:
            return _result(total)
    unscaled, scale = _as_dec(right)
    return _result(_representation_sum(left, ("d", -unscaled, scale)))


def compare_to(value: dict[str, Any], other: dict[str, Any]) -> int:
    left, right = _nanos(value), _nanos(other)
    return (left > right) - (left < right)


def is_less_than(value: dict[str, Any], other: dict[str, Any]) -> bool:
    return compare_to(value, other) == -1


def is_greater_than(value: dict[str, Any], other: dict[str, Any]) -> bool:
    return compare_to(value, other) == 1


_Q = TYPE_NAME

TYPES = (OpaqueType(TYPE_NAME, canonical_string),)

FUNCTIONS = (
    Function("quantity", (Overload("string_to_quantity", ("string",), _Q, quantity),)),
    Function("isQuantity", (Overload("is_quantity_string", ("string",), "bool", is_quantity),)),
    # Kubernetes declares sign with cel.Overload, not MemberOverload: it is called as sign(q).
    Function("sign", (Overload("quantity_sign", (_Q,), "int", sign),)),
    Function(
        "isGreaterThan",
        (Overload("quantity_is_greater_than", (_Q, _Q), "bool", is_greater_than, member=True),),
    ),
    Function("isLessThan", (Overload("quantity_is_less_than", (_Q, _Q), "bool", is_less_than, member=True),)),
    Function("compareTo", (Overload("quantity_compare_to", (_Q, _Q), "int", compare_to, member=True),)),
    Function(
        "asApproximateFloat",
        (Overload("quantity_get_float", (_Q,), "double", as_approximate_float, member=True),),
    ),
    Function("asInteger", (Overload("quantity_get_int", (_Q,), "int", as_integer, member=True),)),
    Function("isInteger", (Overload("quantity_is_integer", (_Q,), "bool", is_integer, member=True),)),
    Function(
        "add",
        (
            Overload("quantity_add", (_Q, _Q), _Q, add, member=True),
            Overload("quantity_add_int", (_Q, "int"), _Q, add, member=True),
        ),
    ),
    Function(
        "sub",
        (
            Overload("quantity_sub", (_Q, _Q), _Q, sub, member=True),
            Overload("quantity_sub_int", (_Q, "int"), _Q, sub, member=True),
        ),
    ),
)
