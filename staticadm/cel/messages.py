"""cel-cpp's error texts in cel-go's words, as kube-apiserver shows them to policy authors.

Denial messages (``expression '...' resulted in error: <text>``), audit annotations and ``staticadm
check`` repeat the engine's error text; Kubernetes users (and their tests and runbooks) know cel-go's.
Two boundaries translate:

- ``runtime_error_text(text)``: an evaluation error (the text ``engine_error_text`` has already
  stripped of its status code);
- ``compile_error_text(text, source, functions=...)``: a parse/check error as rendered by the engine
  (``ERROR: <input>:L:C: <message>`` lines, each followed by the source line and a caret line). The
  source is needed where cel-go's words depend on it: receiver-style signatures (``list(string).()``)
  and the name and position in ``duplicate variable name: i``.

Texts with no known cel-go counterpart pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# -- runtime ---------------------------------------------------------------------------------------

_RUNTIME_EXACT = {
    "divide by zero": "division by zero",
    "int64 out of uint64 range": "unsigned integer overflow",
    "double out of uint64 range": "unsigned integer overflow",
    "double out of int64 range": "integer overflow",
    "uint64 out of int64 range": "integer overflow",
    "malformed UTF-8 bytes": "invalid UTF-8 in bytes, cannot convert to string",
    "String to Timestamp conversion failed": "type conversion error from 'string' to 'google.protobuf.Timestamp'",
    "String to Duration conversion failed": "type conversion error from 'string' to 'google.protobuf.Duration'",
}


def _unquote(key: str) -> str:
    """cel-cpp quotes string keys (``"b"``); cel-go prints them bare (``%v``)."""
    if len(key) >= 2 and key[0] == key[-1] == '"':
        return re.sub(r"\\(.)", r"\1", key[1:-1])
    return key


_RUNTIME_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"Key not found in map : (.*)", re.S), lambda m: f"no such key: {_unquote(m.group(1))}"),
    (re.compile(r"Index error: index=(-?\d+) size=\d+"), lambda m: f"index out of bounds: {m.group(1)}"),
    (re.compile(r"Index error: expected integer type, got (\w+)"),
     lambda m: f"unsupported index type '{m.group(1)}' in list"),
    (re.compile(r"No matching overloads found : (.*)", re.S), lambda m: _no_overload(m.group(1))),
    (re.compile(r"cannot convert string to (int|uint|double)"),
     lambda m: f"type conversion error from 'string' to '{m.group(1)}'"),
    (re.compile(r"Type conversion error from '([^']*)' to '([^']*)'"),
     lambda m: f"type conversion error from '{m.group(1)}' to '{m.group(2)}'"),
    (re.compile(r"Applying SELECT to non-message type"), lambda m: "no such key"),
    # cel-cpp's lists extension prefixes its errors with the function; cel-go's texts are bare.
    (re.compile(r"(?:flatten|sort)\(\): (level must be non-negative|list elements must have the same type)"),
     lambda m: m.group(1)),
    (re.compile(r"sort\(\): unsupported type \S+"), lambda m: "list elements must be comparable"),
)


#: cel-cpp's type names in its overload errors, as cel-go's ``TypeName()`` spells them.
_TYPE_NAMES = {"int64": "int", "uint64": "uint"}
#: The standard functions cel-go implements once for every type (``decls.Singleton*Binding``): the operand's
#: type must have the trait, and when the first does not, the error names the function alone. Here each with the
#: types (cel-cpp's names) that have its trait.
_NUMBERS = frozenset({"int64", "uint64", "double"})
_TIMES = frozenset({"google.protobuf.Timestamp", "google.protobuf.Duration", "timestamp", "duration"})
_SINGLETONS: dict[str, frozenset[str]] = {
    "size": frozenset(),
    "-_": frozenset({"int64", "double", "bool"}),
    **dict.fromkeys(("_<_", "_<=_", "_>_", "_>=_"), _NUMBERS | _TIMES | {"string", "bytes", "bool"}),
    "_+_": _NUMBERS | _TIMES | {"string", "bytes", "list"},
    "_-_": _NUMBERS | _TIMES,
    **dict.fromkeys(("_*_", "_/_"), _NUMBERS),
    "_%_": frozenset({"int64", "uint64"}),
}
#: cel-go's types that answer calls themselves (``traits.Receiver``: their member functions): the interpreter hands
#: them a call whose trait they lack, and they refuse it with the bare ``no such overload`` (``'3' / 2``).
_RECEIVERS = frozenset({"string", "timestamp", "duration", "google.protobuf.Timestamp", "google.protobuf.Duration"})
#: Functions whose implementation, not cel-go's type guard, refuses operands of another type, with
#: ``types.MaybeNoSuchOverloadErr``'s bare text: the string tests of cel-go v0.29's standard library and
#: Kubernetes' regex library (``null.startsWith('a')``, ``7.find('a')``, as kube-apiserver answers).
_SELF_CHECKED = frozenset({"contains", "startsWith", "endsWith", "matches", "find", "findAll"})
_GLOBAL_CALL = re.compile(r"(?P<function>[^()\s]+)\((?P<arguments>[^()]*)\)")
_MEMBER_CALL = re.compile(r"\((?P<receiver>[^()]*)\)\.(?P<function>[^()\s]+)\((?P<arguments>[^()]*)\)")


def _no_overload(call: str) -> str:
    """cel-go's words where cel-cpp found no overload for ``call`` (``f(t1, t2)``, ``(t1).f(t2)`` or a bare name).

    cel-go (interpreter/interpretable.go, common/decls) answers a call of a function declared once for every
    type with ``no such overload: f`` when the first argument lacks the trait it needs (``size(null)``,
    ``null < 1``; a string, duration or timestamp is asked itself and answers the bare text, ``'3' / 2``), and with
    the bare ``no such overload`` when the first argument's own method refused the
    second (``1 < null``, ``Int.Add(String)``), as do ``in``, ``!``, ``&&``, ``||`` and ``?:``; a call of any other
    function is ``no such overload: f(t1, t2)``, the receiver first."""
    match = _GLOBAL_CALL.fullmatch(call) or _MEMBER_CALL.fullmatch(call)
    if match is None:
        return "no such overload"
    receiver = match.groupdict().get("receiver")
    types = [part.strip() for part in match.group("arguments").split(",") if part.strip()]
    if receiver is not None:
        types.insert(0, receiver.strip())
    function = match.group("function")
    if function in _LIST_EXTENSION_TEXTS and types:
        return _LIST_EXTENSION_TEXTS[function]([_TYPE_NAMES.get(t, t) for t in types])
    if function in _SINGLETONS:
        if types and (types[0] in _SINGLETONS[function] or types[0] in _RECEIVERS):
            return "no such overload"
        return f"no such overload: {function}"
    if function.startswith("@") or function.startswith("_") or function.startswith("!") or function in _SELF_CHECKED:
        return "no such overload"
    return f"no such overload: {function}({', '.join(_TYPE_NAMES.get(t, t) for t in types)})"


#: cel-go's Type.String() of a value's runtime type, where it is not the type's name (``%v`` of ``arg.Type()``).
_TYPE_STRINGS = {"map": "map(dyn, dyn)", "list": "list(dyn)"}
#: The Go types of cel-go's values, as a failed interface conversion names them.
_GO_TYPES = {"null_type": "types.Null", "string": "types.String", "int": "types.Int", "uint": "types.Uint",
             "double": "types.Double", "bool": "types.Bool", "bytes": "types.Bytes", "map": "*types.baseMap",
             "google.protobuf.Duration": "types.Duration", "duration": "types.Duration",
             "google.protobuf.Timestamp": "types.Timestamp", "timestamp": "types.Timestamp"}
#: Types among those that have ``Add`` (traits.Adder), the first method of traits.Lister Go finds missing.
_ADDERS = frozenset({"string", "int", "uint", "double", "bytes", "google.protobuf.Duration", "duration",
                     "google.protobuf.Timestamp", "timestamp"})


def _flatten_text(types: list[str]) -> str:
    """cel-go v0.29 ext/lists.go checks flatten's operands itself (its type guards are off): the receiver must be a
    list (``no such overload: int.flatten()``), and a depth that is not an int panics in a type assertion."""
    receiver, *rest = types
    if receiver == "list" and rest:
        return f"internal error: interface conversion: ref.Val is {_GO_TYPES.get(rest[0], rest[0])}, not types.Int"
    arguments = ", ".join(_TYPE_STRINGS.get(t, t) for t in rest)
    return f"no such overload: {_TYPE_STRINGS.get(receiver, receiver)}.flatten({arguments})"


def _sort_text(types: list[str]) -> str:
    # ext/lists.go's sort runs behind the traits.Lister trait: a string answers the call itself (bare text).
    return "no such overload" if types[0] in _RECEIVERS else "no such overload: sort"


def _distinct_text(types: list[str]) -> str:
    # ext/lists.go's distinct asserts traits.Lister unchecked; kube-apiserver recovers the panic.
    missing = "Contains" if types[0] in _ADDERS else "Add"
    return (f"internal error: interface conversion: {_GO_TYPES.get(types[0], types[0])} is not traits.Lister: "
            f"missing method {missing}")


_LIST_EXTENSION_TEXTS = {"flatten": _flatten_text, "sort": _sort_text, "distinct": _distinct_text}


#: The binding quotes Python reprs (with heap addresses and values) in some errors: never pass them on.
_PYTHON_FUNCTION = re.compile(r"Non-CEL value type for 'Python function .*': ([\w.]+)\.?$", re.DOTALL)
_HEAP_ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def runtime_error_text(text: str) -> str:
    """cel-go's words for a cel-cpp evaluation error."""
    value_type = _PYTHON_FUNCTION.search(text)
    if value_type is not None:
        return f"unsupported type conversion: a function returned a value of type {value_type.group(1)}"
    text = _HEAP_ADDRESS.sub("<function>", text)
    if text in _RUNTIME_EXACT:
        return _RUNTIME_EXACT[text]
    for pattern, replace in _RUNTIME_PATTERNS:
        match = pattern.fullmatch(text)
        if match:
            return replace(match)
    return text


# -- compile time ----------------------------------------------------------------------------------

#: Functions the engine declares natively in Kubernetes' environment (standard library, sets, lists v2,
#: optionals); a call of one of these with the wrong number of arguments is an overload error in cel-go.
STANDARD_FUNCTIONS = frozenset({
    "size", "int", "uint", "double", "string", "bytes", "bool", "duration", "timestamp", "type", "dyn",
    "matches", "contains", "startsWith", "endsWith", "getFullYear", "getMonth", "getDayOfYear",
    "getDayOfMonth", "getDate", "getDayOfWeek", "getHours", "getMinutes", "getSeconds", "getMilliseconds",
    "sets.contains", "sets.equivalent", "sets.intersects", "slice", "flatten", "lists.range", "reverse",
    "distinct", "sort", "optional.of", "optional.ofNonZeroValue", "optional.none", "value", "hasValue", "or",
    "orValue",
})
_ERROR_LINE = re.compile(r"^ERROR: (?P<where><input>:(?P<line>\d+):(?P<column>\d+)): (?P<message>.*)$")
_ONE_VARIABLE_MAP_MACROS = frozenset({"map", "filter"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _offset(source: str, line: int, column: int) -> int | None:
    """Code-point offset of a 1-based (line, column) position in ``source``."""
    lines = source.split("\n")
    if not 1 <= line <= len(lines):
        return None
    offset = sum(len(text) + 1 for text in lines[: line - 1]) + column - 1
    return offset if 0 <= offset <= len(source) else None


def _split_types(signature: str) -> list[str]:
    depth = 0
    parts: list[str] = []
    current: list[str] = []
    for char in signature:
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        depth += char in "(["
        depth -= char in ")]"
        current.append(char)
    if current or parts:
        parts.append("".join(current).strip())
    return [part for part in parts if part]


def _receiver_signature(signature: str) -> str:
    """cel-cpp's ``(T0, T1, ...)`` for a member call as cel-go writes it: ``T0.(T1, ...)``."""
    inner = signature[1:-1] if signature.startswith("(") and signature.endswith(")") else signature
    types = _split_types(inner)
    if not types:
        return signature
    return f"{types[0]}.({', '.join(types[1:])})"


def _is_member_call(source: str, paren: int, name: str, globals_: frozenset[str]) -> bool:
    """Whether ``name(`` at ``paren`` is written as a member call (``x.name(``), not as a qualified
    global such as ``strings.quote(``."""
    end = paren
    while end > 0 and source[end - 1].isspace():
        end -= 1
    start = end - len(name)
    if start < 0 or source[start:end] != name:
        return False
    dot = start
    while dot > 0 and source[dot - 1].isspace():
        dot -= 1
    if dot == 0 or source[dot - 1] != ".":
        return False
    qualifier = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", source[: dot - 1])
    return not (qualifier and f"{qualifier.group(1)}.{name}" in globals_)


def _identifier_at(source: str, offset: int) -> str | None:
    match = _IDENTIFIER.match(source, offset)
    return match.group(0) if match else None


def _second_argument_offset(source: str, first: int) -> int | None:
    """Offset of the macro argument after the identifier at ``first`` (``all(i, j, ...)``: ``j``)."""
    match = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*,\s*").match(source, first)
    return match.end() if match else None


def _translate(message: str, source: str, offset: int | None, functions: frozenset[str],
               globals_: frozenset[str]) -> tuple[str, int | None]:
    """cel-go's message for one cel-cpp compile error, and the offset cel-go reports it at."""
    if message == "has() argument must be a field selection":
        return "invalid argument to has() macro", offset
    match = re.fullmatch(r"(\w+)\(\) variable name must be a simple identifier", message)
    if match:
        if match.group(1) in _ONE_VARIABLE_MAP_MACROS:
            return "argument is not an identifier", offset
        return "argument must be a simple name", offset
    if re.fullmatch(r"\w+\(\) (first|second) variable name must be a simple identifier", message):
        return "argument must be a simple name", offset
    if re.fullmatch(r"\w+\(\) variable name cannot be __result__", message):
        return "iteration variable overwrites accumulator variable", offset
    if re.fullmatch(r"\w+\(\) second variable must be different from the first variable", message):
        # cel-cpp points at the first variable, cel-go at the second.
        name = _identifier_at(source, offset) if offset is not None else None
        if name is not None and offset is not None:
            second = _second_argument_offset(source, offset)
            return f"duplicate variable name: {name}", second if second is not None else offset
    match = re.fullmatch(r"expression of type '(.*)' cannot be the range of a comprehension (.*)", message)
    if match:
        return f"expression of type '{match.group(1)}' cannot be range of a comprehension {match.group(2)}", offset
    match = re.fullmatch(r"found no matching overload for '([^']+)' applied to '(.*)'", message)
    if match and offset is not None:
        name, signature = match.group(1), match.group(2)
        if _IDENTIFIER.fullmatch(name.rpartition(".")[2]) and _is_member_call(source, offset, name, globals_):
            return f"found no matching overload for '{name}' applied to '{_receiver_signature(signature)}'", offset
        return message, offset
    match = re.fullmatch(r"undeclared reference to '([^']+)' \(in container '(.*)'\)", message)
    if match and offset is not None and match.group(1) in functions and source[offset : offset + 1] == "(":
        # A declared function called with a number of arguments none of its overloads takes: cel-go
        # resolves the name and fails overload resolution; the argument types are not known here.
        return f"found no matching overload for '{match.group(1)}'", offset
    return message, offset


_STRUCT_SUFFIX = re.compile(r" not found in struct '[^']*'")


def compile_error_text(text: str, source: str, *, functions: Iterable[str] = ()) -> str:
    """cel-go's words for an engine-rendered compile error text about ``source``.

    ``functions`` are the names of every declared function (standard library, extensions and
    Kubernetes libraries); they tell a wrong-arity call apart from an unknown name."""
    known = frozenset(functions)
    globals_ = frozenset(name for name in known if "." in name)
    # cel-cpp names the struct an unknown field was looked up in; cel-go says "undefined field 'x'".
    text = _STRUCT_SUFFIX.sub("", text)
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        match = _ERROR_LINE.match(lines[index])
        if match is None:
            out.append(lines[index])
            index += 1
            continue
        line, column = int(match.group("line")), int(match.group("column"))
        offset = _offset(source, line, column)
        message, new_offset = _translate(match.group("message"), source, offset, known, globals_)
        new_column = column if new_offset is None or offset is None else column + (new_offset - offset)
        out.append(f"ERROR: <input>:{line}:{new_column}: {message}")
        index += 1
        # The snippet and caret lines that follow: move the caret with the column.
        if index + 1 < len(lines) and lines[index].startswith(" | ") and lines[index + 1].startswith(" | "):
            out.append(lines[index])
            caret = lines[index + 1]
            if new_column != column and caret.rstrip().endswith("^"):
                caret = " | " + "." * (new_column - 1) + "^"
            out.append(caret)
            index += 2
    return "\n".join(out)


def undeclared_variables_text(source: str, line: int, column: int) -> str:
    """cel-go's error where a ValidatingAdmissionPolicy matchCondition reads ``variables``, which
    Kubernetes does not declare for match conditions; rendered like the engine renders errors."""
    snippet = source.split("\n")[line - 1] if 1 <= line <= source.count("\n") + 1 else ""
    return (f"ERROR: <input>:{line}:{column}: undeclared reference to 'variables' (in container '')\n"
            f" | {snippet}\n | {'.' * (column - 1)}^")
