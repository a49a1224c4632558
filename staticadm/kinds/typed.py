"""A built-in kind's object as kube-apiserver holds it: decoded into its Go struct and encoded again.

kube-apiserver decodes a request body into the k8s.io/api struct of its kind (sigs.k8s.io/json: field names
case-sensitive, unknown fields dropped) and admission evaluates that struct, which is what encoding/json
writes for it. So, field by field in Go's order:

- a field absent from the input holds its Go zero value, written unless ``omitempty`` drops it: a struct is
  never empty (``resources: {}``, ``metadata.creationTimestamp: null`` since a zero metav1.Time writes null),
  a pointer, slice or map without ``omitempty`` is ``null``, a string ``""``, a number ``0``;
- an ``omitempty`` field holding an empty value is dropped (``env: []``, ``hostNetwork: false``, ``""``);
- values are written by their type's encoder: map keys sorted, a whole float64 without fraction,
  ``resource.Quantity`` in its canonical form (``1024Mi`` -> ``1Gi``, ``0.5`` -> ``500m``), ``metav1.Time``
  as RFC 3339 in UTC to the second, ``[]byte`` as standard base64;
- a value of the wrong JSON type is an error naming its field, as kube-apiserver answers 400.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from staticadm.cel.libraries import quantity as quantities
from staticadm.gofmt import parse_duration
from staticadm.kinds.go_types import GoField, GoTypes

INTEGER_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1), "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1), "uint8": (0, (1 << 8) - 1), "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1), "uint64": (0, (1 << 64) - 1),
}
#: Encoders whose zero value is written as these (the struct types with their own MarshalJSON).
SPECIAL_ZERO: dict[str, Any] = {"time": None, "microtime": None, "duration": "0s", "quantity": "0",
                                 "intorstring": 0, "raw": None}
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[-+]\d{2}:\d{2})")


class TypedObjectError(ValueError):
    """A value its Go field cannot hold; the message names the field (``spec.replicas: ...``)."""


@dataclass
class RoundTrip:
    """What the round trip left out: fields the struct does not have (kube-apiserver drops them)."""

    dropped: list[str] = field(default_factory=list)


def round_trip(obj: dict[str, Any], type_id: str, types: GoTypes) -> tuple[dict[str, Any], RoundTrip]:
    """``obj`` decoded into the Go struct ``type_id`` and encoded again, and the unknown fields it dropped."""
    notes = RoundTrip()
    encoded = _Encoder(types, notes).struct(obj, type_id, "")
    return encoded, notes


def is_empty(value: Any, ref: str) -> bool:
    """encoding/json's ``omitempty`` test on an encoded value: false, 0, "", nil, and empty lists and maps;
    a struct (and every type with its own encoder, which are structs) is never empty, a pointer only nil."""
    if ref.startswith("@") or ref in SPECIAL_ZERO:
        return False
    if value is None:
        return True
    if ref.startswith("*"):
        return False  # a pointer is empty only when nil: a given 0, false or {} is written
    if isinstance(value, bool):
        return not value
    if isinstance(value, str | list | dict):
        return len(value) == 0
    if isinstance(value, int | float):
        return value == 0
    return False


def is_omitted(go_field: GoField, encoded: Any, types: GoTypes) -> bool:
    """Whether encoding/json leaves the field out: ``omitempty`` and empty, or ``omitzero`` and the Go zero
    value (for the types with an IsZero method, Time and Quantity, what it says: the same here)."""
    return (go_field.omitempty and is_empty(encoded, go_field.ref)) or \
        (go_field.omitzero and encoded == zero_value(go_field.ref, types))


def zero_value(ref: str, types: GoTypes) -> Any:
    """The encoding of a Go zero value of ``ref``."""
    if ref.startswith("@"):
        return _Encoder(types, RoundTrip()).struct({}, ref[1:], "")
    if ref in SPECIAL_ZERO:
        return SPECIAL_ZERO[ref]
    if ref.startswith(("*", "[]", "map:")) or ref in ("any", "bytes"):
        return None
    if ref == "string":
        return ""
    if ref == "bool":
        return False
    return 0


class _Encoder:
    def __init__(self, types: GoTypes, notes: RoundTrip) -> None:
        self._types = types
        self._notes = notes
        self._scalars: dict[str, Callable[[Any, str], Any]] = {
            "string": self._string, "bool": self._bool, "float64": self._float, "bytes": self._bytes,
            "any": _keep, "raw": _keep, "time": self._time, "microtime": self._microtime,
            "duration": self._duration, "quantity": self._quantity, "intorstring": self._int_or_string,
        }

    def struct(self, value: Any, type_id: str, path: str) -> dict[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise _wrong(path, value, "an object")
        fields = self._types.structs[type_id]
        out: dict[str, Any] = {}
        for go_field in fields:
            if go_field.name in value:
                encoded = self.value(value[go_field.name], go_field.ref, _join(path, go_field.name))
            else:
                encoded = zero_value(go_field.ref, self._types)
            if is_omitted(go_field, encoded, self._types):
                continue
            out[go_field.name] = encoded
        known = {go_field.name for go_field in fields}
        self._notes.dropped.extend(_join(path, name) for name in value if name not in known)
        return out

    def value(self, value: Any, ref: str, path: str) -> Any:
        if ref.startswith("@"):
            return self.struct(value, ref[1:], path)
        if ref.startswith("*"):
            return None if value is None else self.value(value, ref[1:], path)
        if ref.startswith("[]"):
            if value is None:
                return None
            if not isinstance(value, list):
                raise _wrong(path, value, "a list")
            return [self.value(item, ref[2:], f"{path}[{index}]") for index, item in enumerate(value)]
        if ref.startswith("map:"):
            if value is None:
                return None
            if not isinstance(value, dict):
                raise _wrong(path, value, "an object")
            return {key: self.value(value[key], ref[4:], _join(path, key)) for key in sorted(value)}
        if ref in INTEGER_RANGES:
            return self._integer(value, ref, path)
        return self._scalars[ref](value, path)

    @staticmethod
    def _string(value: Any, path: str) -> Any:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise _wrong(path, value, "a string")
        return value

    @staticmethod
    def _bool(value: Any, path: str) -> Any:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise _wrong(path, value, "a boolean")
        return value

    @staticmethod
    def _integer(value: Any, ref: str, path: str) -> int:
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong(path, value, f"an integer ({ref})")
        low, high = INTEGER_RANGES[ref]
        if not low <= value <= high:
            raise TypedObjectError(f"{path}: {value} does not fit in {ref}")
        return value

    @staticmethod
    def _float(value: Any, path: str) -> Any:
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _wrong(path, value, "a number")
        # encoding/json writes a whole float64 below 1e21 without a fraction: read back, an integer.
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
            return int(value)
        return value

    @staticmethod
    def _bytes(value: Any, path: str) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise _wrong(path, value, "a base64 string")
        try:
            data = base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)
        except (binascii.Error, ValueError):
            raise TypedObjectError(f"{path}: illegal base64 data") from None
        return base64.b64encode(data).decode()

    @staticmethod
    def _time(value: Any, path: str) -> Any:
        moment = _parse_rfc3339(value, path)
        return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    @staticmethod
    def _microtime(value: Any, path: str) -> Any:
        moment = _parse_rfc3339(value, path)
        return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    @staticmethod
    def _duration(value: Any, path: str) -> Any:
        if value is None:
            return "0s"
        if not isinstance(value, str):
            raise _wrong(path, value, "a duration string")
        try:
            seconds = parse_duration(value)
        except ValueError as error:
            raise TypedObjectError(f"{path}: {error}") from None
        return go_duration_string(round(seconds * 1e9))

    @staticmethod
    def _quantity(value: Any, path: str) -> Any:
        if value is None:
            return "0"
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _wrong(path, value, "a quantity")
        text = value.strip() if isinstance(value, str) else str(value)
        try:
            return canonical_quantity(quantities.parse_nanos(text), quantities.quantity_format(text))
        except quantities.QuantityError as error:
            raise TypedObjectError(f"{path}: {error}") from None

    @staticmethod
    def _int_or_string(value: Any, path: str) -> Any:
        if value is None:
            return 0
        if isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong(path, value, "an integer or a string")
        return _Encoder._integer(value, "int32", path)


def _keep(value: Any, _path: str) -> Any:
    return value


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _wrong(path: str, value: Any, wanted: str) -> TypedObjectError:
    got = {bool: "a boolean", str: "a string", int: "a number", float: "a number", list: "a list",
           dict: "an object"}.get(type(value), type(value).__name__)
    return TypedObjectError(f"{path or 'the object'}: {wanted} is required, got {got}")


def _parse_rfc3339(value: Any, path: str) -> dt.datetime | None:
    """time.Parse(time.RFC3339, ...) as metav1.Time's UnmarshalJSON calls it (null is the zero time; "" does
    not parse)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _wrong(path, value, "an RFC 3339 time string")
    found = _RFC3339.fullmatch(value)
    if found is None:
        raise TypedObjectError(f"{path}: {value!r} is not an RFC 3339 time")
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    fraction = found.group(7) or ""
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    zone = found.group(8)
    offset = dt.timedelta(0) if zone in ("Z", "z") else \
        (1 if zone[0] == "+" else -1) * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    try:
        moment = dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=dt.timezone(offset))
    except ValueError as error:
        raise TypedObjectError(f"{path}: {value!r} is not an RFC 3339 time ({error})") from None
    return moment.astimezone(dt.UTC)


def go_duration_string(nanos: int) -> str:
    """time.Duration's String(): ``1h30m0s``, ``1.5s``, ``250ms``, ``0s``."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    if magnitude < 1_000_000_000:
        for unit, size in (("ns", 1), ("µs", 1_000), ("ms", 1_000_000)):
            if magnitude < size * 1000:
                whole, fraction = divmod(magnitude, size)
                digits = f"{fraction:0{len(str(size)) - 1}d}".rstrip("0") if size > 1 else ""
                return f"{sign}{whole}{'.' + digits if digits else ''}{unit}"
    seconds, fraction = divmod(magnitude, 1_000_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    digits = f"{fraction:09d}".rstrip("0")
    text = f"{seconds}{'.' + digits if digits else ''}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


_BINARY_SUFFIXES = {0: "", 10: "Ki", 20: "Mi", 30: "Gi", 40: "Ti", 50: "Pi", 60: "Ei"}
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def canonical_quantity(nanos: int, quantity_format: str) -> str:
    """resource.Quantity's String() for a freshly parsed value (CanonicalizeBytes): BinarySI as the largest
    power-of-1024 suffix when the value is a whole number of at least 1024 in magnitude, else the
    mantissa and an exponent that is a multiple of three, as an SI suffix (DecimalSI) or ``e<n>``."""
    if nanos == 0:
        return "0"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    if quantity_format == "BinarySI" and magnitude >= 1024 * 10**9 and magnitude % 10**9 == 0:
        amount, exponent = magnitude // 10**9, 0
        while amount % 1024 == 0 and exponent < 60:
            amount //= 1024
            exponent += 10
        return f"{sign}{amount}{_BINARY_SUFFIXES[exponent]}"
    mantissa, exponent = magnitude, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3 != 0:
        mantissa *= 10
        exponent -= 1
    if quantity_format == "DecimalExponent":
        return f"{sign}{mantissa}{f'e{exponent}' if exponent else ''}"
    suffix = _DECIMAL_SUFFIXES.get(exponent)
    return f"{sign}{mantissa}{suffix if suffix is not None else f'e{exponent}'}"
