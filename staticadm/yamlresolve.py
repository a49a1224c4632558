"""What a YAML scalar means to kube-apiserver: go-yaml v2's resolution, then sigs.k8s.io/yaml's JSON conversion.

kube-apiserver reads YAML with sigs.k8s.io/yaml, which decodes it with go-yaml v2 (go.yaml.in/yaml/v2, the
same ``resolve.go`` as gopkg.in/yaml.v2 at 7649d4548, November 2020) into Go values and converts those to JSON
text with encoding/json. This module is both steps for one scalar, ported from their sources:

- **resolve.go** (``resolve``): a plain scalar is looked up by its first character. Booleans are
  ``y Y yes Yes YES true True TRUE on On ON`` and ``n N no No NO false False FALSE off Off OFF``; null is
  ``"" ~ null Null NULL``; ``.inf``/``.nan`` in three spellings. A scalar starting with a digit or a sign is,
  underscores removed, an integer by Go's ``strconv.ParseInt(s, 0, 64)`` (``0x``, ``0o``, ``0b``, a leading
  ``0`` for octal), else an unsigned one, else a float when it matches ``yamlStyleFloat`` (``1e3`` is a float,
  ``08`` is 8.0, ``1e999`` is out of range and stays text), else ``0b`` followed by a signed binary number.
  Everything else is text: ``1:30`` (no base-60 numbers), ``=``, ``<<`` (a merge only as a map key, which
  the decoder decides), timestamps (go-yaml gives ``interface{}`` targets their text).
- Explicit tags (``decode.go``, ``scalar``): ``!!str`` and non-specific or unknown tags keep the text,
  ``!!binary`` is base64-decoded, ``!!int``/``!!float``/``!!bool``/``!!null``/``!!timestamp`` resolve the text
  and must come out of that kind (an integer may be a ``!!float``), else "cannot decode".
- **sigs.k8s.io/yaml** (``convertToJSONableObject``, then ``json.Marshal``): keys become strings (booleans
  ``true``/``false``, integers in decimal, floats as ``FormatFloat(f, 'g', -1, 32)``, ``.inf``/``-.inf``/
  ``.nan``; a null or unsigned key is refused), and values are what the JSON text means to Kubernetes'
  decoders: a whole float below 1e21 is written without a fraction, so it is read back as an integer
  (``1e3`` is 1000, ``2.0`` is 2); infinities and NaN cannot be written ("json: unsupported value").
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

from staticadm.gofmt import format_float_g

STR_TAG = "tag:yaml.org,2002:str"
BINARY_TAG = "tag:yaml.org,2002:binary"
BOOL_TAG = "tag:yaml.org,2002:bool"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
NULL_TAG = "tag:yaml.org,2002:null"
TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
MERGE_TAG = "tag:yaml.org,2002:merge"

_RESOLVABLE_TAGS = frozenset({"", STR_TAG, BOOL_TAG, INT_TAG, FLOAT_TAG, NULL_TAG, TIMESTAMP_TAG})

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1

#: resolve.go's resolveMap: the scalars known by their whole text.
_KNOWN: dict[str, tuple[str, Any]] = {
    **{text: (BOOL_TAG, True) for text in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")},
    **{text: (BOOL_TAG, False) for text in ("n", "N", "no", "No", "NO", "false", "False", "FALSE",
                                              "off", "Off", "OFF")},
    **{text: (NULL_TAG, None) for text in ("", "~", "null", "Null", "NULL")},
    **{text: (FLOAT_TAG, math.nan) for text in (".nan", ".NaN", ".NAN")},
    **{text: (FLOAT_TAG, math.inf) for text in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{text: (FLOAT_TAG, -math.inf) for text in ("-.inf", "-.Inf", "-.INF")},
    # resolveMap also lists "<<", but no hint leads there ('<' has none): whether "<<" merges is the decoder's
    # question (a plain or !!merge-tagged "<<" map key), anywhere else it is text.
}

#: resolve.go's resolveTable: the hint a scalar's first character gives (absent: always text).
_HINTS: dict[str, str] = {
    "+": "S", "-": "S", **dict.fromkeys("0123456789", "D"), **dict.fromkeys("yYnNtTfFoO~", "M"), ".": ".",
}

#: resolve.go's yamlStyleFloat.
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
#: What strconv.ParseFloat accepts of a text starting with "." (no hexadecimal, no "inf", no underscores).
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")
_DIGITS = {2: re.compile(r"[01]+"), 8: re.compile(r"[0-7]+"), 10: re.compile(r"[0-9]+"),
           16: re.compile(r"[0-9a-fA-F]+")}
#: time.Parse's layouts in resolve.go's allowedTimestampFormats ("2006-1-2T15:4:5.999999999Z07:00", its
#: lower-case "t" twin, "2006-1-2 15:4:5.999999999", "2006-1-2"); Go accepts a fraction after the seconds.
_TIMESTAMP = re.compile(
    r"(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})-(?P<d>[0-9]{1,2})"
    r"(?:(?:[Tt](?P<H>[0-9]{1,2}):(?P<M>[0-9]{1,2}):(?P<S>[0-9]{1,2})(?:\.[0-9]+)?"
    r"(?:Z|[-+](?P<zh>[0-9]{2}):(?P<zm>[0-9]{2})))"
    r"|(?: (?P<H2>[0-9]{1,2}):(?P<M2>[0-9]{1,2}):(?P<S2>[0-9]{1,2})(?:\.[0-9]+)?))?")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class ResolveError(ValueError):
    """A tagged scalar its tag cannot hold (go-yaml's "cannot decode ..."), or a value JSON cannot carry."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """One scalar as go-yaml decodes it into ``interface{}``: its resolved tag and Go value (``int`` for
    int/int64/uint64, ``float`` for float64; timestamps are their text)."""

    tag: str
    value: Any


def resolve(tag: str, text: str, *, plain: bool) -> Resolved:
    """A scalar event's value as go-yaml v2's decoder gives it to an ``interface{}``: ``tag`` is the explicit
    tag ('' when none), ``plain`` whether the scalar was written without quotes (go-yaml's ``implicit``)."""
    if tag == "" and not plain:
        return Resolved(STR_TAG, text)
    if tag == BINARY_TAG:
        return Resolved(BINARY_TAG, _decode_binary(text))
    if tag not in _RESOLVABLE_TAGS:
        # go-yaml returns the tag and the text; an interface{} target gets the text.
        return Resolved(tag, text)
    resolved = _resolve_text(text) if tag != STR_TAG else Resolved(STR_TAG, text)
    if tag in ("", STR_TAG, resolved.tag):
        return resolved if tag != STR_TAG else Resolved(STR_TAG, text)
    if tag == FLOAT_TAG and resolved.tag == INT_TAG:
        return Resolved(FLOAT_TAG, float(resolved.value))
    raise ResolveError(f"cannot decode {_short_tag(resolved.tag)} `{text}` as a {_short_tag(tag)}")


def _resolve_text(text: str) -> Resolved:
    """resolve.go's ``resolve`` for a tag it may resolve (the checks against an explicit tag are the caller's)."""
    hint = _HINTS.get(text[:1], "M" if text == "" else "")
    if not hint:
        return Resolved(STR_TAG, text)
    known = _KNOWN.get(text)
    if known is not None:
        return Resolved(*known)
    if hint == ".":
        if _DOT_FLOAT.fullmatch(text):
            number = float(text)
            if not math.isinf(number):
                return Resolved(FLOAT_TAG, number)
    elif hint in ("D", "S"):
        if _is_timestamp(text):
            return Resolved(TIMESTAMP_TAG, text)
        return _resolve_number(text)
    return Resolved(STR_TAG, text)


def _resolve_number(text: str) -> Resolved:
    plain = text.replace("_", "")
    number = _parse_int(plain, signed=True)
    if number is None:
        number = _parse_int(plain, signed=False)
    if number is not None:
        return Resolved(INT_TAG, number)
    if _YAML_STYLE_FLOAT.fullmatch(plain):
        floating = float(plain)
        if not math.isinf(floating):  # strconv.ParseFloat's ErrRange: the text stays text
            return Resolved(FLOAT_TAG, floating)
    if plain.startswith("0b"):
        # strconv.ParseInt(plain[2:], 2, 64), which takes a sign: "0b-101" is -5.
        number = _parse_int_base(plain[2:], 2, signed=True)
        if number is None:
            number = _parse_int_base(plain[2:], 2, signed=False)
        if number is not None:
            return Resolved(INT_TAG, number)
    elif plain.startswith("-0b"):
        number = _parse_int_base("-" + plain[3:], 2, signed=True)
        if number is not None:
            return Resolved(INT_TAG, number)
    return Resolved(STR_TAG, text)


def _parse_int(text: str, *, signed: bool) -> int | None:
    """strconv.ParseInt(text, 0, 64) (``signed``) or strconv.ParseUint(text, 0, 64): the base from the prefix."""
    negative = signed and text[:1] == "-"
    body = text[1:] if signed and text[:1] in ("+", "-") else text
    base, digits = 10, body
    if len(body) >= 2 and body[0] == "0":
        prefix = body[1].lower()
        if prefix in ("x", "o", "b"):
            base, digits = {"x": 16, "o": 8, "b": 2}[prefix], body[2:]
        else:
            base, digits = 8, body[1:]
    if not _DIGITS[base].fullmatch(digits):
        return None
    return _in_range(negative, int(digits, base), signed=signed)


def _parse_int_base(text: str, base: int, *, signed: bool) -> int | None:
    """strconv.ParseInt(text, base, 64) or strconv.ParseUint(text, base, 64) for an explicit base."""
    negative = signed and text[:1] == "-"
    body = text[1:] if signed and text[:1] in ("+", "-") else text
    if not _DIGITS[base].fullmatch(body):
        return None
    return _in_range(negative, int(body, base), signed=signed)


def _in_range(negative: bool, magnitude: int, *, signed: bool) -> int | None:
    if not signed:
        return magnitude if magnitude <= _UINT64_MAX else None
    value = -magnitude if negative else magnitude
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def _is_timestamp(text: str) -> bool:
    """resolve.go's parseTimestamp: one of its time.Parse layouts, with a real date and time of day."""
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        return False
    month, day = int(match["m"]), int(match["d"])
    if not 1 <= month <= 12 or not 1 <= day <= _DAYS_IN_MONTH[month - 1]:
        return False
    year = int(match["y"])
    if month == 2 and day == 29 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        return False
    hour, minute, second = (match["H"] or match["H2"]), (match["M"] or match["M2"]), (match["S"] or match["S2"])
    if hour is not None and (int(hour) > 23 or int(minute) > 59 or int(second) > 59):
        return False
    return match["zh"] is None or (int(match["zh"]) <= 24 and int(match["zm"]) <= 59)


def _decode_binary(text: str) -> str:
    # Go's base64.StdEncoding skips newlines; the bytes become a Go string, which encoding/json writes with
    # each invalid UTF-8 byte replaced.
    try:
        data = base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError):
        raise ResolveError("!!binary value contains invalid base64 data") from None
    return data.decode("utf-8", errors="replace")


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


# -- sigs.k8s.io/yaml's conversion to JSON -------------------------------------------------------------


def json_value(resolved: Resolved) -> Any:
    """The value as Kubernetes reads back the JSON text sigs.k8s.io/yaml writes for it."""
    value = resolved.value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ResolveError(f"json: unsupported value: {_go_float_name(value)}")
        # encoding/json writes a whole float64 below 1e21 without fraction or exponent: an integer to
        # every decoder after it (int64 when it fits, as apimachinery's JSON decoding reads numbers).
        if value.is_integer() and abs(value) < 1e21 and _INT64_MIN <= value <= _INT64_MAX:
            return int(value)
    return value


def json_key(resolved: Resolved) -> str:
    """A map key as sigs.k8s.io/yaml's convertToJSONableObject writes it (JSON keys are strings)."""
    value = resolved.value
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        return str(value)
    if isinstance(value, float):
        return _format_float32_g(value)
    if value is None:
        raise ResolveError("a null map key has no JSON form (sigs.k8s.io/yaml: unsupported map key of type <nil>)")
    raise ResolveError(f"map key {value} is beyond int64 and has no JSON form "
                       "(sigs.k8s.io/yaml: unsupported map key of type uint64)")


def go_key_text(resolved: Resolved) -> str:
    """A key as go-yaml's "already set in map" error shows it (Go's %#v)."""
    value = resolved.value
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float):
        return format_float_g(value)
    return str(value)


def _go_float_name(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def _format_float32_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32) as sigs.k8s.io/yaml writes float keys (infinities and NaN as
    go-yaml spells them)."""
    if math.isnan(value):
        return ".nan"
    single = struct.unpack("f", struct.pack("f", value))[0] if abs(value) < 3.5e38 else value
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    if single == 0:
        return "-0" if math.copysign(1, single) < 0 else "0"
    # The shortest digits that read back as the same float32 (at most 9 are ever needed).
    for precision in range(1, 10):
        text = f"{single:.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return _go_g(text)
    return _go_g(f"{single:.8e}")


def _go_g(exponent_form: str) -> str:
    """Shortest digits (Python's ``%e`` text) laid out as strconv's 'g' with precision -1 lays them out: the
    exponent form below 1e-4 and from 1e6 on (``eprec = 6`` for the shortest precision)."""
    mantissa, exponent_text = exponent_form.split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    exponent = int(exponent_text)
    if exponent < -4 or exponent >= 6:
        fraction = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{fraction}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    if len(digits) <= exponent + 1:
        return f"{sign}{digits}{'0' * (exponent + 1 - len(digits))}"
    return f"{sign}{digits[:exponent + 1]}.{digits[exponent + 1:]}"
