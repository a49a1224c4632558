"""``Object{...}`` and ``JSONPatch{...}`` in MutatingAdmissionPolicy expressions.

Kubernetes resolves these struct types dynamically (any ``Object.<path>`` name, every field ``dyn``).
cel-expr-python only knows protobuf message types, so before type-checking we rewrite each struct
creation into a call the environment declares::

    Object.spec{replicas: 3, ?paused: x}  ->  __staticadm_object_part__("Object.spec", {"replicas": 3, ?"paused": x})
    Object{spec: ...}                      ->  __staticadm_object__("Object", {"spec": ...})
    JSONPatch{op: "add", path: p}          ->  __staticadm_jsonpatch__({"op": "add", "path": p})

The root ``Object`` call is typed ``Object`` and ``JSONPatch`` is typed ``JSONPatch`` (abstract types), so
Kubernetes' result-type rules (``Object`` for ApplyConfiguration, ``list(JSONPatch)`` for JSONPatch)
hold; nested ``Object.<path>`` values are ``dyn``. A field of a creation, which the engine's checker refuses on
an abstract type, becomes a call as well (Kubernetes types ``op``, ``path`` and ``from`` of a JSONPatch
``string``, any other field ``dyn``)::

    JSONPatch{op: "add"}.op        ->  __staticadm_jsonpatch_text__(__staticadm_jsonpatch__({"op": "add"}), "op")
    Object{spec: s}.spec           ->  __staticadm_struct_field__(__staticadm_object__("Object", {"spec": s}), "spec")
    has(JSONPatch{}.value)         ->  __staticadm_struct_has__(__staticadm_jsonpatch__({}), "value")
 The rewrite works on tokens, so string literals and
comments are never touched, and it keeps every character of the source outside the struct syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from staticadm.cel import lexer

OBJECT_FUNCTION = "__staticadm_object__"
OBJECT_PART_FUNCTION = "__staticadm_object_part__"
JSONPATCH_FUNCTION = "__staticadm_jsonpatch__"
RESERVED_NAMES = (OBJECT_FUNCTION, OBJECT_PART_FUNCTION, JSONPATCH_FUNCTION)
STRUCT_FIELD_FUNCTION = "__staticadm_struct_field__"
JSONPATCH_TEXT_FUNCTION = "__staticadm_jsonpatch_text__"
STRUCT_HAS_FUNCTION = "__staticadm_struct_has__"
FIELD_FUNCTIONS = (STRUCT_FIELD_FUNCTION, JSONPATCH_TEXT_FUNCTION, STRUCT_HAS_FUNCTION)

OBJECT_TYPE = "Object"
JSONPATCH_TYPE = "JSONPatch"
JSONPATCH_FIELDS = ("op", "path", "from", "value")
#: The key an earlier setting of a field set again in the same creation is renamed to (no field name has a
#: "@"): cel-go evaluates every field of ``Object.spec{f: 1, f: 2}`` and keeps the last; the constructors drop these.
SHADOWED_FIELD_PREFIX = "@shadowed."


class StructSyntaxError(Exception):
    """A struct creation we cannot rewrite; the message is shown as a compile error."""


def _struct_at(tokens: Sequence[lexer.Token], index: int) -> tuple[str, int] | None:
    """(type name, index of its ``{``) when a struct creation starts at ``index``."""
    first = tokens[index]
    if first.kind != "ident" or first.text not in (OBJECT_TYPE, JSONPATCH_TYPE):
        return None
    if index > 0 and tokens[index - 1].text == "." and tokens[index - 1].kind == "punct":
        # A field selection (``x.Object``) or a leading-dot qualified name; the latter is not supported.
        return None
    parts = [first.text]
    cursor = index + 1
    while (cursor + 1 < len(tokens) and tokens[cursor].text == "." and tokens[cursor + 1].kind == "ident"
           and first.text == OBJECT_TYPE):
        parts.append(tokens[cursor + 1].text)
        cursor += 2
    if cursor < len(tokens) and tokens[cursor].text == "{" and tokens[cursor].kind == "punct":
        return ".".join(parts), cursor
    return None


def struct_creation_edits(source: str) -> list[lexer.Edit]:
    """Edits turning every ``Object``/``JSONPatch`` creation into a declared call."""
    tokens = lexer.tokens(source)
    for token in tokens:
        if token.kind == "ident" and token.text in RESERVED_NAMES + FIELD_FUNCTIONS:
            raise StructSyntaxError(f"undeclared reference to '{token.text}'")
    replacements: list[list[int | str]] = []
    # Open brackets: (closing char, struct type name or None, whether a field name may come next, the index of
    # the struct's opening replacement, the index of its first token, the replacement of each field's name).
    stack: list[list[object]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        struct = _struct_at(tokens, index)
        if struct is not None:
            type_name, brace = struct
            if type_name == JSONPATCH_TYPE:
                opening = f"{JSONPATCH_FUNCTION}({{"
            elif type_name == OBJECT_TYPE:
                opening = f'{OBJECT_FUNCTION}("{type_name}", {{'
            else:
                opening = f'{OBJECT_PART_FUNCTION}("{type_name}", {{'
            replacements.append([token.start, tokens[brace].end, opening])
            stack.append(["}", type_name, True, len(replacements) - 1, index, {}])
            index = brace + 1
            continue
        if token.kind == "punct" and token.text in "([{":
            stack.append([{"(": ")", "[": "]", "{": "}"}[token.text], None, False])
        elif token.kind == "punct" and token.text in ")]}":
            if stack and stack[-1][0] == token.text:
                closed = stack.pop()
                if closed[1] is not None:
                    replacements.append([token.start, token.end, "})"])
                    _field_of_creation(tokens, index, str(closed[1]), cast(int, closed[3]), cast(int, closed[4]),
                                       replacements)
        elif stack and stack[-1][1] is not None:
            top = stack[-1]
            if token.kind == "punct" and token.text == ",":
                top[2] = True
            elif top[2]:
                if token.kind == "punct" and token.text == "?":
                    pass
                elif token.kind == "ident" and index + 1 < len(tokens) and tokens[index + 1].text == ":":
                    if top[1] == JSONPATCH_TYPE and token.text not in JSONPATCH_FIELDS:
                        raise StructSyntaxError(f"undefined field '{token.text}'")
                    named = cast(dict[str, int], top[5])
                    if token.text in named:
                        shadowed = replacements[named[token.text]]
                        shadowed[2] = f'"{SHADOWED_FIELD_PREFIX}{shadowed[0]}"'
                    named[token.text] = len(replacements)
                    replacements.append([token.start, token.end, f'"{token.text}"'])
                    top[2] = False
                else:
                    top[2] = False
        index += 1
    return [lexer.Edit(cast(int, start), cast(int, end), str(text)) for start, end, text in replacements]


def _field_of_creation(tokens: Sequence[lexer.Token], closing: int, type_name: str, opening: int, first: int,
                       replacements: list[list[int | str]]) -> None:
    """When the creation that ``tokens[closing]`` ends is the operand of a field selection (``S.f``, not a
    method call ``S.f()``), the selection becomes a call of the field function (``has(S.f)`` of the presence
    one) around the creation's call."""
    if not (closing + 2 < len(tokens) and tokens[closing + 1].text == "." and tokens[closing + 1].kind == "punct"
            and tokens[closing + 2].kind == "ident"):
        return
    follows = tokens[closing + 3] if closing + 3 < len(tokens) else None
    if follows is not None and follows.text == "(" and follows.kind == "punct":
        return
    field_name = tokens[closing + 2].text
    if type_name == JSONPATCH_TYPE and field_name not in JSONPATCH_FIELDS:
        raise StructSyntaxError(f"undefined field '{field_name}'")
    tested = (first >= 2 and tokens[first - 1].text == "(" and tokens[first - 2].text == "has"
              and tokens[first - 2].kind == "ident" and follows is not None and follows.text == ")")
    if tested:
        replacements.append([tokens[first - 2].start, tokens[first - 2].end, STRUCT_HAS_FUNCTION])
        suffix = f', "{field_name}"'
    else:
        function = (JSONPATCH_TEXT_FUNCTION if type_name == JSONPATCH_TYPE and field_name != "value"
                    else STRUCT_FIELD_FUNCTION)
        replacements[opening][2] = f"{function}({replacements[opening][2]}"
        suffix = f', "{field_name}")'
    replacements.append([tokens[closing + 1].start, tokens[closing + 2].end, suffix])


def creation_type(expr: Any) -> str | None:
    """The type name of an ``Object.<path>{...}`` creation (a checked expression node), which Kubernetes gives it."""
    if expr.WhichOneof("expr_kind") != "call_expr" or expr.call_expr.function != OBJECT_PART_FUNCTION:
        return None
    name = expr.call_expr.args[0] if expr.call_expr.args else None
    if name is None or name.WhichOneof("expr_kind") != "const_expr":
        return None
    return str(name.const_expr.string_value) or None


def rewrite_struct_creation(source: str) -> str:
    """The source with every ``Object``/``JSONPatch`` creation turned into a declared call."""
    return lexer.apply(source, struct_creation_edits(source)).text
