"""Go's formatting, for the error messages, warnings and annotations that must read as kube-apiserver's.

One implementation of each: ``strconv.Quote`` (also ``%q``), ``strconv.FormatFloat`` ('g' and 'f',
shortest), ``%v`` and ``%#v`` of unstructured values (``interface{}`` holding JSON), Go type names of
such values, the JSON type names ``encoding/json``'s decoding errors use, ``encoding/json.Marshal``,
``time.ParseDuration``, cel-go's ``string(duration)`` and ``strings.TrimSpace``.
Each function cites the Go source it follows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

#: Go's ``unicode.IsSpace`` (unicode/graphic.go: the Latin-1 spaces, then the White_Space property), what
#: ``strings.TrimSpace`` strips. Python's ``str.strip()`` also strips U+001C..U+001F, which Go keeps.
GO_SPACE = "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
           "\u2028\u2029\u202f\u205f\u3000"


def trim_space(text: str) -> str:
    """Go's ``strings.TrimSpace``."""
    return text.strip(GO_SPACE)


_SIMPLE_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def json_type(value: Any) -> str:
    """What ``encoding/json`` calls a decoded JSON value in an ``UnmarshalTypeError`` ("cannot unmarshal
    string into Go struct field ... of type bool"): ``UnmarshalTypeError.Value`` in encoding/json/decode.go."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def quote(text: str | bytes) -> str:
    """``strconv.Quote`` (and ``%q``): ``appendQuotedWith(..., '"', false, false)`` in strconv/quote.go.

    Printable runes (``unicode.IsPrint``, which Python's ``str.isprintable`` matches) are kept; the rest
    become ``\\a``-style escapes, ``\\xNN`` below U+0020 and for U+007F, ``\\uNNNN`` or ``\\UNNNNNNNN``.
    Bytes that are not UTF-8 (given as ``bytes``, or as the lone surrogates U+DC80-U+DCFF that Python's
    ``surrogateescape`` makes of them) are quoted ``\\xNN``, each on its own; any other invalid rune is
    U+FFFD, as ``utf8.ValidRune`` decides.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="surrogateescape")
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"' or char == "\\":
            out.append("\\" + char)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif char.isprintable():
            out.append(char)
        elif char in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


# -- floats ---------------------------------------------------------------------------------------


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of a positive finite double and the decimal point position
    (``digits`` = 0.d1d2... × 10^point), as Go's and Python's shortest formatting both compute them."""
    _sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    assert isinstance(exponent, int)
    return digits, len(digits) + exponent


def format_float_g(value: float) -> str:
    """``strconv.FormatFloat(v, 'g', -1, 64)``, which is also ``%v`` of a float64 and CEL's
    ``string(double)``: shortest digits, in exponent form when the exponent is below -4 or at least 6
    (strconv/ftoa.go: ``if shortest { eprec = 6 }``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(abs(value))
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return sign + _fixed_from_digits(digits, point)


def format_float_f(value: float) -> str:
    """``strconv.FormatFloat(v, 'f', -1, 64)``: shortest digits, never an exponent."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(abs(value))
    return sign + _fixed_from_digits(digits, point)


def _fixed_from_digits(digits: str, point: int) -> str:
    if point <= 0:
        return f"0.{'0' * -point}{digits}"
    if point >= len(digits):
        return digits + "0" * (point - len(digits))
    return f"{digits[:point]}.{digits[point:]}"


# -- durations ------------------------------------------------------------------------------------


def duration_seconds(nanoseconds: int) -> str:
    """cel-go's ``string(duration)`` (``types.Duration.ConvertToType``): ``Seconds()`` as the shortest
    'f' float, then ``s`` (``1.5s``, ``-0.000000001s``)."""
    whole, fraction = divmod(abs(nanoseconds), 1_000_000_000)
    seconds = float(whole) + fraction / 1e9
    return ("-" if nanoseconds < 0 else "") + format_float_f(seconds) + "s"


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """``time.ParseDuration`` in seconds (``1m30s``, ``1.5h``, ``250ms``); raises ValueError like Go."""
    if text in ("0", "+0", "-0"):
        return 0.0
    body = text[1:] if text[:1] in "+-" else text
    if not body:
        raise ValueError(f"time: invalid duration {quote(text)}")
    position, total = 0, 0.0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None:
            raise ValueError(f"time: invalid duration {quote(text)}")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    return -total if text.startswith("-") else total


# -- unstructured values --------------------------------------------------------------------------


def type_name(value: Any) -> str:
    """The Go type of an unstructured JSON value (``%T``): what ``interface{}`` holds after decoding."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "map[string]interface {}"
    if isinstance(value, list | tuple):
        return "[]interface {}"
    return "<nil>"


def sprint_v(value: Any) -> str:
    """``%v`` of an unstructured value (fmt/print.go): maps as ``map[k:v]`` with sorted keys, slices as
    ``[a b]``, nil as ``<nil>``, floats as ``%g`` shortest."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float_g(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{key}:{sprint_v(value[key])}" for key in sorted(value)) + "]"
    if isinstance(value, list | tuple):
        return "[" + " ".join(sprint_v(item) for item in value) + "]"
    return str(value)


def sprint_sharp_v(value: Any, *, top: bool = False) -> str:
    """``%#v`` of an unstructured value held in an ``interface{}`` (``top``: the value itself, not an
    element, so nil prints as ``<nil>``)."""
    if value is None:
        return "<nil>" if top else "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float_g(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, Mapping):
        return ("map[string]interface {}{"
                + ", ".join(f"{quote(key)}:{sprint_sharp_v(value[key])}" for key in sorted(value)) + "}")
    if isinstance(value, list | tuple):
        return "[]interface {}{" + ", ".join(sprint_sharp_v(item) for item in value) + "}"
    return repr(value)


def marshal_json(value: Any) -> str:
    """``encoding/json.Marshal``: compact, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as Go escapes
    them (``HTMLEscape`` is on by default). Keys keep the caller's order: Go writes a struct's fields in
    declaration order (and a map's keys sorted, which the caller does when it passes a map)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
