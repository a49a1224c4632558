"""cel-go's strings extension at version 2, as Kubernetes 1.36 enables it (``ext.Strings(StringsVersion(2))``,
cel-go v0.26 ``ext/strings.go``).

cel-cpp ships its own strings extension, but it differs from cel-go where policies can notice:
``lastIndexOf`` with an offset past the end (cel-go: -1, cel-cpp: an error), the empty needle with an
offset (cel-go returns the offset as given), the texts of range errors, ``trim``'s notion of white space,
and all of ``format`` (see ``string_format.py``). So every function of the extension is implemented here,
on code points as cel-go's ``[]rune`` code is, and the engine's own extension is not loaded.

Version 2 functions: ``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``,
``split``, ``substring``, ``trim`` (v0), ``format``, ``strings.quote`` (v1), ``join`` (v2). ``reverse``
(v3) is not part of Kubernetes' environment.
"""

from __future__ import annotations

from typing import Any

from staticadm import gofmt
from staticadm.cel.libraries.spec import CelFunctionError, Function, Overload, require_element_type
from staticadm.cel.string_format import FormatError, decode_arguments, format_string


def _out_of_range(index: int) -> CelFunctionError:
    return CelFunctionError(f"index out of range: {index}")


def char_at(text: str, index: int) -> str:
    if index < 0 or index > len(text):
        raise _out_of_range(index)
    return "" if index == len(text) else text[index]


def index_of(text: str, sub: str, offset: int = 0) -> int:
    # An empty needle is found where the search starts, clamped to the end (cel-go #1335, in the cel-go
    # release Kubernetes 1.37 vendors; v0.26 returned the offset unchecked).
    if sub == "":
        if offset < 0:
            raise _out_of_range(offset)
        return min(offset, len(text))
    if offset < 0:
        raise _out_of_range(offset)
    if offset >= len(text):
        return -1
    return text.find(sub, offset)


def last_index_of(text: str, sub: str, offset: int | None = None) -> int:
    if offset is None:
        if sub == "":
            return len(text)
        # cel-go compares byte lengths here, not code points.
        if len(text.encode("utf-8", "surrogatepass")) < len(sub.encode("utf-8", "surrogatepass")):
            return -1
        offset = len(text) - 1
    if sub == "":
        if offset < 0:
            raise _out_of_range(offset)
        return min(offset, len(text))
    if offset < 0:
        raise _out_of_range(offset)
    if offset >= len(text):
        return -1
    start = min(offset, len(text) - len(sub))
    if start < 0:
        return -1
    return text.rfind(sub, 0, start + len(sub))


def _map_ascii(text: str, upper: bool) -> str:
    return "".join((char.upper() if upper else char.lower()) if char.isascii() else char for char in text)


def lower_ascii(text: str) -> str:
    return _map_ascii(text, upper=False)


def upper_ascii(text: str) -> str:
    return _map_ascii(text, upper=True)


def replace(text: str, old: str, new: str, count: int = -1) -> str:
    # Go's strings.Replace: a negative count replaces all; Python's str.replace agrees, also on an
    # empty ``old`` (inserted before every code point and at the end).
    return text.replace(old, new, count if count >= 0 else -1)


def split(text: str, separator: str, limit: int = -1) -> list[str]:
    """Go's ``strings.SplitN``: ``limit`` 0 gives no parts, a negative limit all of them."""
    if limit == 0:
        return []
    if separator == "":
        # Go splits into code points; with a limit the last part keeps the rest.
        if limit < 0 or limit >= len(text):
            return list(text)
        return [*text[: limit - 1], text[limit - 1 :]]
    return text.split(separator, limit - 1 if limit > 0 else -1)


def substring(text: str, start: int, end: int | None = None) -> str:
    if end is None:
        if start < 0 or start > len(text):
            raise _out_of_range(start)
        return text[start:]
    if start > end:
        raise CelFunctionError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(text):
        raise _out_of_range(start)
    if end < 0 or end > len(text):
        raise _out_of_range(end)
    return text[start:end]


def trim(text: str) -> str:
    return gofmt.trim_space(text)


def quote(text: str) -> str:
    """``strings.quote``: CEL escapes for the control characters CEL has escapes for, and invalid code
    points (lone surrogates) as U+FFFD; everything else verbatim."""
    out = ['"']
    for char in text:
        if 0xD800 <= ord(char) <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(_QUOTE_ESCAPES.get(char, char))
    out.append('"')
    return "".join(out)


_QUOTE_ESCAPES = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\",
    '"': '\\"',
}


def join(values: list[Any], *separator: str) -> str:
    require_element_type("join", values, ("string",), *("string" for _ in separator))
    for value in values:
        if not isinstance(value, str):
            raise CelFunctionError(f"join: invalid input: {value}")
    return (separator[0] if separator else "").join(values)


def format_call(template: str, args: list[Any]) -> str:
    try:
        return format_string(template, decode_arguments(args))
    except FormatError as error:
        raise CelFunctionError(str(error)) from None


FUNCTIONS = (
    Function("charAt", (Overload("string_char_at_int", ("string", "int"), "string", char_at, member=True),)),
    Function(
        "indexOf",
        (
            Overload("string_index_of_string", ("string", "string"), "int", index_of, member=True),
            Overload("string_index_of_string_int", ("string", "string", "int"), "int", index_of, member=True),
        ),
    ),
    Function(
        "lastIndexOf",
        (
            Overload("string_last_index_of_string", ("string", "string"), "int", last_index_of, member=True),
            Overload("string_last_index_of_string_int", ("string", "string", "int"), "int", last_index_of,
                     member=True),
        ),
    ),
    Function("lowerAscii", (Overload("string_lower_ascii", ("string",), "string", lower_ascii, member=True),)),
    Function(
        "replace",
        (
            Overload("string_replace_string_string", ("string", "string", "string"), "string", replace,
                     member=True),
            Overload("string_replace_string_string_int", ("string", "string", "string", "int"), "string", replace,
                     member=True),
        ),
    ),
    Function(
        "split",
        (
            Overload("string_split_string", ("string", "string"), "list(string)", split, member=True),
            Overload("string_split_string_int", ("string", "string", "int"), "list(string)", split, member=True),
        ),
    ),
    Function(
        "substring",
        (
            Overload("string_substring_int", ("string", "int"), "string", substring, member=True),
            Overload("string_substring_int_int", ("string", "int", "int"), "string", substring, member=True),
        ),
    ),
    Function("trim", (Overload("string_trim", ("string",), "string", trim, member=True),)),
    Function("upperAscii", (Overload("string_upper_ascii", ("string",), "string", upper_ascii, member=True),)),
    Function("format", (Overload("string_format", ("string", "list(dyn)"), "string", format_call, member=True),)),
    Function("strings.quote", (Overload("strings_quote", ("string",), "string", quote),)),
    Function(
        "join",
        (
            Overload("list_join", ("list(string)",), "string", join, member=True),
            Overload("list_join_string", ("list(string)", "string"), "string", join, member=True),
        ),
    ),
)
