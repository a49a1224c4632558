"""``<string>.format(<list>)`` exactly as kube-apiserver renders it (cel-go v0.26 ``ext/formatting.go``).

Kubernetes 1.36 enables the strings extension at version 2, so ``format`` is cel-go's first formatter
with its default locale, ``en_US``: ``%f`` and ``%e`` go through ``golang.org/x/text/message`` (digit
grouping, ``∞``, a superscript exponent: ``2.718280 × 10⁰⁰`` with narrow no-break spaces), ``%s`` of a
double is Go's shortest ``%g`` (``2e-09``, ``+Inf``), doubles inside lists and maps are ``%.6f`` and
strings inside them are Go-quoted. cel-go quirk kept on purpose: the precision of ``%.Ne`` is used
as a field width, the digits stay at 6.

Two entry points:
- ``format_string(template, args)``: the runtime function (raises ``FormatError`` with cel-go's text);
- ``validate_format_calls(checked)``: cel-go's ``stringFormatValidator``, the compile-time check of a
  literal format string applied to a list literal (clause syntax, argument count, argument types).

One deliberate difference: precisions above 1,000 are refused, as cel-go does since #1292 (April
2026); v0.26 would allocate the string (``%.999999999f`` is a gigabyte).
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from staticadm import gofmt
from staticadm.cel.values import format_timestamp, opaque_type_name

MAX_PRECISION = 1000
_DEFAULT_PRECISION = 6
#: What the Kubernetes type-constant rewrite turns ``type(<Kubernetes value>)`` into (rewrite.py).
_TYPE_CONSTANT_PREFIX = "@type:"
_SUPERSCRIPT_DIGITS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUPERSCRIPT_MINUS = "\u207b"
#: en_US ``SymSuperscriptingExponent`` in golang.org/x/text's CLDR data.
_TIMES_TEN = "\u202f×\u202f10"
_INFINITY = "∞"


class FormatError(Exception):
    """A format string or clause error; ``node_id`` is the AST node at fault (compile-time checks)."""

    def __init__(self, message: str, node_id: int | None = None) -> None:
        super().__init__(message)
        self.node_id = node_id


# -- cel-go's type names and values ----------------------------------------------------------------


_ENGINE_TYPE_NAMES = {
    "INT": "int", "UINT": "uint", "DOUBLE": "double", "BOOL": "bool", "STRING": "string", "BYTES": "bytes",
    "NULL": "null_type", "DURATION": "google.protobuf.Duration", "TIMESTAMP": "google.protobuf.Timestamp",
    "TYPE": "type", "DYN": "dyn",
}


def _engine_type_name(value: Any) -> str | None:
    """The cel-go name of a type value the engine handed over (``cel.Type``), or None."""
    name = getattr(value, "name", None)
    if not callable(name) or type(value).__name__ != "Type":
        return None
    text = str(name())
    head = text.split("<", 1)[0]
    return {"LIST": "list", "MAP": "map"}.get(head, _ENGINE_TYPE_NAMES.get(head, text))


def type_name(value: Any) -> str:
    """cel-go's ``TypeName()`` of a runtime value (uint values arrive as Python ints: named int)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "type" if value.startswith(_TYPE_CONSTANT_PREFIX) else "string"
    if isinstance(value, bytes | bytearray):
        return "bytes"
    if value is None:
        return "null_type"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return opaque_type_name(value) or "map"
    if isinstance(value, datetime.timedelta):
        return "google.protobuf.Duration"
    if isinstance(value, datetime.datetime):
        return "google.protobuf.Timestamp"
    return _engine_type_name(value) or type(value).__name__


def _is_type_value(value: Any) -> bool:
    return (isinstance(value, str) and value.startswith(_TYPE_CONSTANT_PREFIX)) or _engine_type_name(value) is not None


def _type_value_name(value: Any) -> str:
    if isinstance(value, str):
        return value[len(_TYPE_CONSTANT_PREFIX):]
    return _engine_type_name(value) or ""


class ExactDuration(datetime.timedelta):
    """A duration with its nanoseconds: ``datetime.timedelta`` stops at microseconds."""

    nanoseconds: int

    @classmethod
    def from_nanoseconds(cls, nanoseconds: int) -> ExactDuration:
        duration = cls(microseconds=nanoseconds // 1000)
        duration.nanoseconds = nanoseconds
        return duration


def decode_arguments(value: Any) -> Any:
    """Format arguments as the rewrite spelt them (``rewrite.py``): durations as ``DURATION_PREFIX`` +
    ``string(d)`` (exact to the nanosecond), bool map keys as ``BOOL_KEY_PREFIX`` + ``string(k)``."""
    if isinstance(value, str) and value.startswith(DURATION_PREFIX):
        seconds = decimal.Decimal(value[len(DURATION_PREFIX):].rstrip("s"))
        return ExactDuration.from_nanoseconds(int(seconds * 1_000_000_000))
    if isinstance(value, list):
        return [decode_arguments(item) for item in value]
    if isinstance(value, dict):
        return {key: decode_arguments(item) for key, item in value.items()}
    return value


def _duration_string(value: datetime.timedelta) -> str:
    """cel-go's ``string(duration)``, nanoseconds included when the value has them."""
    nanos = getattr(value, "nanoseconds", None)
    if nanos is None:
        nanos = ((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds) * 1000
    return gofmt.duration_seconds(nanos)


def _go_fixed(value: float, precision: int) -> str:
    """Go's ``fmt.Sprintf("%.<p>f", v)`` (no locale): ``+Inf``, ``-Inf``, ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(value, f".{precision}f")




def _bytes_text(value: bytes | bytearray) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(
            'could not convert argument "invalid UTF-8 in bytes, cannot convert to string" to string'
        ) from None


# -- en_US number rendering (golang.org/x/text/message) -------------------------------------------------


def _group_thousands(integer_digits: str) -> str:
    head = len(integer_digits) % 3 or 3
    groups = [integer_digits[:head]] + [integer_digits[i : i + 3] for i in range(head, len(integer_digits), 3)]
    return ",".join(groups)


def locale_fixed(value: float, precision: int) -> str:
    """x/text ``Printer(en_US).Sprintf("%.<p>f")``: grouped integer digits, ``NaN``, ``∞``."""
    if math.isnan(value):
        return "NaN"
    negative = value < 0  # -0.0 has no sign here, unlike Go's fmt
    if math.isinf(value):
        return ("-" if negative else "") + _INFINITY
    text = format(abs(value), f".{precision}f")
    integer, _, fraction = text.partition(".")
    return ("-" if negative else "") + _group_thousands(integer) + ("." + fraction if fraction else "")


def locale_scientific(value: float, width: int) -> str:
    """x/text ``Printer(en_US).Sprintf("%<width>e")``: 7 significant digits, ``× 10`` and a superscript
    exponent of at least two digits, padded with spaces on the left to ``width`` code points."""
    if math.isnan(value):
        text = "NaN"
    else:
        negative = value < 0
        if math.isinf(value):
            text = ("-" if negative else "") + _INFINITY
        else:
            mantissa, _, exponent_text = format(abs(value), f".{_DEFAULT_PRECISION}e").partition("e")
            exponent = int(exponent_text)
            superscript = "".join(_SUPERSCRIPT_DIGITS[int(d)] for d in f"{abs(exponent):02d}")
            text = (("-" if negative else "") + mantissa + _TIMES_TEN
                    + (_SUPERSCRIPT_MINUS if exponent < 0 else "") + superscript)
    return text.rjust(width) if width > len(text) else text


# -- clauses ---------------------------------------------------------------------------------------


_STRING_CLAUSE_TYPES = ("strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps")


def _string_error(bad_type: str) -> FormatError:
    return FormatError(f"string clause can only be used on {_STRING_CLAUSE_TYPES}, was given {bad_type}")


def _decimal_error(bad_type: str) -> FormatError:
    return FormatError(f"decimal clause can only be used on integers, was given {bad_type}")


def _fixed_error(bad_type: str) -> FormatError:
    return FormatError(f"fixed-point clause can only be used on doubles, was given {bad_type}")


def _scientific_error(bad_type: str) -> FormatError:
    return FormatError(f"scientific clause can only be used on doubles, was given {bad_type}")


def _binary_error(bad_type: str) -> FormatError:
    return FormatError(f"only integers and bools can be formatted as binary, was given {bad_type}")


def _hex_error(bad_type: str) -> FormatError:
    return FormatError(f"only integers, byte buffers, and strings can be formatted as hex, was given {bad_type}")


def _octal_error(bad_type: str) -> FormatError:
    return FormatError(f"octal clause can only be used on integers, was given {bad_type}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def format_value_string(value: Any) -> str:
    """cel-go ``FormatString``: the ``%s`` clause."""
    if isinstance(value, list):
        return _format_list(value)
    if isinstance(value, dict) and opaque_type_name(value) is None:
        return _format_map(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_int(value):
        return str(value)
    if isinstance(value, float):
        return gofmt.format_float_g(value)
    if _is_type_value(value):
        return _type_value_name(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return _bytes_text(value)
    if isinstance(value, datetime.timedelta):
        return _duration_string(value)
    if isinstance(value, datetime.datetime):
        return format_timestamp(value)
    if value is None:
        return "null"
    raise _string_error(type_name(value))


def _member_text(value: Any) -> str:
    """cel-go ``clauseForType`` then ``quoteForCEL``: how a list element or map value is shown."""
    if isinstance(value, float):
        text = _go_fixed(value, _DEFAULT_PRECISION)
        return gofmt.quote(text) if math.isnan(value) or math.isinf(value) else text
    if isinstance(value, datetime.datetime):
        return f"timestamp({gofmt.quote(format_timestamp(value))})"
    if isinstance(value, datetime.timedelta):
        return f"duration({gofmt.quote(_duration_string(value))})"
    if isinstance(value, dict) and opaque_type_name(value) is not None:
        raise FormatError(f"no formatting function for {type_name(value)}")
    if not (value is None or isinstance(value, bool | int | str | bytes | bytearray | list | dict)
            or _is_type_value(value)):
        raise FormatError(f"no formatting function for {type_name(value)}")
    text = format_value_string(value)
    if _is_type_value(value):
        return text
    if isinstance(value, str):
        return gofmt.quote(text)
    if isinstance(value, bytes | bytearray):
        return "b" + gofmt.quote(text)
    return text


def _format_list(values: list[Any]) -> str:
    return "[" + ", ".join(_member_text(value) for value in values) + "]"


#: Bool map keys arrive spelt with this prefix: in a Python dict ``True`` and ``1`` are one key, in CEL two
#: (the rewrite before ``format`` respells them; ``rewrite.py``).
BOOL_KEY_PREFIX = "\uE000cel-bool:"
DURATION_PREFIX = "\uE000cel-duration:"


def _format_map(mapping: dict[Any, Any]) -> str:
    pairs = []
    for key, value in mapping.items():
        if isinstance(key, str) and key.startswith(BOOL_KEY_PREFIX):
            key_text = key[len(BOOL_KEY_PREFIX):]
        elif isinstance(key, bool | str):
            key_text = gofmt.quote(key) if isinstance(key, str) else format_value_string(key)
        elif _is_int(key):
            key_text = str(key)
        else:
            raise FormatError(f"no formatting function for map key of type {type_name(key)}")
        pairs.append((key_text, _member_text(value)))
    pairs.sort(key=lambda pair: pair[0])
    return "{" + ", ".join(f"{key}:{value}" for key, value in pairs) + "}"


def _decimal(value: Any) -> str:
    if _is_int(value):
        return str(value)
    raise _decimal_error(type_name(value))


_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _as_double(value: Any, error: Callable[[str], FormatError]) -> float:
    if isinstance(value, float):
        return value
    if isinstance(value, str) and value in _FLOAT_WORDS:
        return _FLOAT_WORDS[value]
    raise error(type_name(value))


def _binary(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if _is_int(value):
        return format(value, "b")
    raise _binary_error(type_name(value))


def _hex(value: Any, upper: bool) -> str:
    if isinstance(value, str) and not _is_type_value(value):
        text = value.encode("utf-8", "surrogatepass").hex()
    elif isinstance(value, bytes | bytearray):
        text = bytes(value).hex()
    elif _is_int(value):
        text = format(value, "x")
    else:
        raise _hex_error(type_name(value))
    return text.upper() if upper else text


def _octal(value: Any) -> str:
    if _is_int(value):
        return format(value, "o")
    raise _octal_error(type_name(value))


# -- the format string -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Clause:
    verb: str
    precision: int | None
    length: int  # characters consumed after the '%'


def _parse_clause(template: str, start: int) -> _Clause:
    """cel-go ``parseFormattingClause`` for the text after a ``%`` at ``start``."""
    position = start
    precision: int | None = None
    if template[position] == ".":
        position += 1
        digits_start = position
        while True:
            if position >= len(template):
                raise FormatError("could not parse formatting clause: error while parsing precision: "
                                  "could not find end of precision specifier")
            if not ("0" <= template[position] <= "9"):
                break
            position += 1
        digits = template[digits_start:position]
        if not digits:
            raise FormatError('could not parse formatting clause: error while parsing precision: error while '
                              'converting precision to integer: strconv.Atoi: parsing "": invalid syntax')
        precision = int(digits)
        if precision > MAX_PRECISION:
            raise FormatError(f"could not parse formatting clause: error while parsing precision: precision "
                              f"{precision} exceeds maximum allowed precision {MAX_PRECISION}")
    verb = template[position]
    if verb not in "sdfebxXo":
        # Go reads one byte: a multi-byte character shows as its first byte's Latin-1 character.
        shown = chr(verb.encode("utf-8", "surrogatepass")[0])
        raise FormatError(f'could not parse formatting clause: unrecognized formatting clause "{shown}"')
    return _Clause(verb, precision, position + 1 - start)


def _render(clause: _Clause, value: Any) -> str:
    verb = clause.verb
    if verb == "s":
        return format_value_string(value)
    if verb == "d":
        return _decimal(value)
    if verb == "f":
        precision = _DEFAULT_PRECISION if clause.precision is None else clause.precision
        return locale_fixed(_as_double(value, _fixed_error), precision)
    if verb == "e":
        width = _DEFAULT_PRECISION if clause.precision is None else clause.precision
        return locale_scientific(_as_double(value, _scientific_error), width)
    if verb == "b":
        return _binary(value)
    if verb in "xX":
        return _hex(value, verb == "X")
    return _octal(value)


def _walk(template: str, argument_count: int, on_clause: Callable[[_Clause, int], str], *,
          checking: bool) -> tuple[str, int]:
    """cel-go ``parseFormatString``; returns the text and how many arguments the clauses used."""
    out: list[str] = []
    position = 0
    used = 0
    while position < len(template):
        char = template[position]
        if char != "%":
            out.append(char)
            position += 1
            continue
        if position + 1 < len(template) and template[position + 1] == "%":
            out.append("%")
            position += 2
            continue
        # At run time fetching the argument fails first; the compile-time checker's fetch never fails.
        if not checking and used >= argument_count:
            raise FormatError(f"index {used} out of range")
        if position + 1 >= len(template):
            raise FormatError("unexpected end of string")
        if used >= argument_count:
            raise FormatError(f"index {used} out of range")
        clause = _parse_clause(template, position + 1)
        try:
            out.append(on_clause(clause, used))
        except FormatError as error:
            raise FormatError(f"error during formatting: {error}", error.node_id) from None
        position += 1 + clause.length
        used += 1
    return "".join(out), used


def format_string(template: str, args: Sequence[Any]) -> str:
    """The runtime ``string.format``; raises ``FormatError`` with cel-go's message."""
    text, _ = _walk(template, len(args), lambda clause, index: _render(clause, args[index]), checking=False)
    return text


# -- compile time ----------------------------------------------------------------------------------

#: Checked type name -> the kind cel-go's ``verifyTypeOneOf`` compares (``t.Kind()``).
def _kind(type_name_: str) -> str:
    if type_name_.startswith("list("):
        return "list"
    if type_name_.startswith("map("):
        return "map"
    if type_name_ == "type" or type_name_.startswith("type("):
        return "type"
    return type_name_


def _checked_type_name(type_name_: str) -> str:
    """cel-go's ``Type.TypeName()`` for a checked type: parameterised types lose their parameters."""
    kind = _kind(type_name_)
    if kind != type_name_:
        return kind
    head, paren, _ = type_name_.partition("(")
    return head if paren else type_name_


_CLAUSE_KINDS: dict[str, tuple[frozenset[str], Callable[[str], FormatError]]] = {
    "d": (frozenset({"int", "uint"}), _decimal_error),
    "f": (frozenset({"double", "string"}), _fixed_error),
    "e": (frozenset({"double", "string"}), _scientific_error),
    "b": (frozenset({"int", "uint", "bool"}), _binary_error),
    "x": (frozenset({"int", "uint", "string", "bytes"}), _hex_error),
    "X": (frozenset({"int", "uint", "string", "bytes"}), _hex_error),
    "o": (frozenset({"int", "uint"}), _octal_error),
}
_STRING_KINDS = frozenset({"list", "map", "int", "uint", "double", "bool", "string", "google.protobuf.Timestamp",
                           "bytes", "google.protobuf.Duration", "type", "null_type"})


@dataclass(frozen=True, slots=True)
class FormatIssue:
    """A compile-time error at a node of the checked AST (the call, or the list element at fault)."""

    node_id: int
    message: str


def check_format(template: str, element_ids: Sequence[int], call_id: int,
                 types: dict[int, str], children: Callable[[int], tuple[str, list[int]]]) -> FormatIssue | None:
    """cel-go's ``stringFormatValidator`` for one ``<literal>.format(<list literal>)`` call.

    ``types`` maps node ids to checked type names; ``children(node_id)`` tells whether a node is a list
    or map literal (``"list"``/``"map"``, with its element/key/value ids) or neither (``""``)."""

    def verify_string(node_id: int) -> int | None:
        kind = _kind(types.get(node_id, "dyn"))
        if kind != "dyn" and kind not in _STRING_KINDS:
            return node_id
        literal, nested = children(node_id)
        if literal:
            for child in nested:
                bad = verify_string(child)
                if bad is not None:
                    return bad
        return None

    def check_clause(clause: _Clause, index: int) -> str:
        node_id = element_ids[index]
        if clause.verb == "s":
            bad = verify_string(node_id)
            if bad is not None:
                raise FormatError(str(_string_error(_checked_type_name(types.get(bad, "dyn")))), bad)
            return ""
        allowed, error = _CLAUSE_KINDS[clause.verb]
        kind = _kind(types.get(node_id, "dyn"))
        if kind != "dyn" and kind not in allowed:
            raise FormatError(str(error(_checked_type_name(types.get(node_id, "dyn")))), node_id)
        return ""

    try:
        _, used = _walk(template, len(element_ids), check_clause, checking=True)
    except FormatError as error:
        return FormatIssue(call_id if error.node_id is None else error.node_id, str(error))
    if len(element_ids) > used:
        return FormatIssue(call_id,
                           f"too many arguments supplied to string.format (expected {used}, got {len(element_ids)})")
    return None


def validate_format_calls(checked: Any) -> list[FormatIssue]:
    """Every compile-time ``string.format`` error of a checked AST (cel.expr ``CheckedExpr``), in the
    nodes cel-go reports them at; the caller renders them like the other validators' issues."""
    from staticadm.cel import ast

    types = ast.node_types(checked)
    nodes = {node.id: node for node in ast.walk(checked.expr)}

    def children(node_id: int) -> tuple[str, list[int]]:
        node = nodes.get(node_id)
        if node is None:
            return "", []
        kind = node.WhichOneof("expr_kind")
        if kind == "list_expr":
            return "list", [element.id for element in node.list_expr.elements]
        if kind == "struct_expr" and not node.struct_expr.message_name:
            ids: list[int] = []
            for entry in node.struct_expr.entries:
                ids += [entry.map_key.id, entry.value.id]
            return "map", ids
        return "", []

    issues = []
    for node in nodes.values():
        if node.WhichOneof("expr_kind") != "call_expr":
            continue
        call = node.call_expr
        if call.function != "format" or not call.HasField("target") or len(call.args) != 1:
            continue
        reference = checked.reference_map.get(node.id) if node.id in checked.reference_map else None
        if reference is not None and reference.overload_id and "string_format" not in reference.overload_id:
            continue
        target = call.target
        if target.WhichOneof("expr_kind") != "const_expr" or target.const_expr.WhichOneof("constant_kind") != (
                "string_value"):
            continue
        argument = call.args[0]
        if argument.WhichOneof("expr_kind") != "list_expr":
            continue
        issue = check_format(target.const_expr.string_value, [e.id for e in argument.list_expr.elements], node.id,
                             types, children)
        if issue is not None:
            issues.append(issue)
    return issues
