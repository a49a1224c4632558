"""``variables.<name>`` type-checked with the variable's type, as Kubernetes declares it.

Kubernetes declares ``variables`` as an object type whose field for each variable has that variable's
compiled type, converted by ``convertCelTypeToDeclType`` (composition.go): primitives, ``duration``,
``timestamp``, ``null`` and lists and maps of those keep their type; anything else (optional values,
Kubernetes value types such as ``kubernetes.Quantity``) is ``dyn``. So ``variables.allowed`` alone is a
valid ``bool`` validation, and ``variables.replicas == 'x'`` does not compile when ``replicas`` is an int.

cel-expr-python cannot declare such an object type, so before type-checking each ``variables.<name>``
(outside ``has()``) becomes an identifier ``__staticadm_v<i>__`` declared with that type in a checker
environment made for the list of types (cached: a few milliseconds each, and policies share them); the
checked AST then gets ``variables.<name>`` back for linking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from staticadm.cel import ast, lexer
from staticadm.cel.types import split_type_arguments

PLACEHOLDER = "__staticadm_v{}__"
_KEPT = frozenset({"bool", "int", "uint", "double", "string", "bytes", "null_type", "google.protobuf.Duration",
                   "google.protobuf.Timestamp", "duration", "timestamp"})
_VARIABLES = "variables"


def declared_type(type_name: str) -> str:
    """``convertCelTypeToDeclType``: the type ``variables.<name>`` has for a variable of ``type_name``."""
    type_name = type_name.strip()
    if type_name in _KEPT:
        return type_name
    head, paren, rest = type_name.partition("(")
    if paren and rest.endswith(")"):
        arguments = split_type_arguments(rest[:-1])
        if head == "list" and len(arguments) == 1:
            return f"list({declared_type(arguments[0])})"
        if head == "map" and len(arguments) == 2:
            return f"map({declared_type(arguments[0])}, {declared_type(arguments[1])})"
    return "dyn"


@dataclass(frozen=True, slots=True)
class Placeholders:
    edits: tuple[lexer.Edit, ...]
    #: Placeholder identifier -> variable name.
    names: Mapping[str, str]
    #: The declared type of each placeholder, in placeholder order (the checker environment's key).
    types: tuple[str, ...]


def placeholders(source: str, variable_types: Mapping[str, str]) -> Placeholders:
    """Edits replacing each ``variables.<known name>`` outside ``has()`` with a typed placeholder."""
    found = lexer.tokens(source)
    edits: list[lexer.Edit] = []
    index_of: dict[str, int] = {}
    for index, token in enumerate(found):
        if token.kind != "ident" or token.text != _VARIABLES:
            continue
        if index + 2 >= len(found) or found[index + 1].text != "." or found[index + 2].kind != "ident":
            continue
        if index > 0 and found[index - 1].text == ".":
            continue  # a field named "variables" of something else
        name = found[index + 2].text
        if name not in variable_types:
            continue  # left for the name check, which reports it as Kubernetes does
        if index >= 2 and found[index - 1].text == "(" and found[index - 2].text == "has":
            continue  # has() needs a field selection; its result is bool whatever the type
        position = index_of.setdefault(name, len(index_of))
        edits.append(lexer.Edit(token.start, found[index + 2].end, PLACEHOLDER.format(position)))
    names = {PLACEHOLDER.format(position): name for name, position in index_of.items()}
    types = tuple(declared_type(variable_types[name]) for name in index_of)
    return Placeholders(tuple(edits), names, types)


def restore_selections(checked: object, names: Mapping[str, str]) -> None:
    """Turns the placeholder identifiers of a checked AST back into ``variables.<name>`` selections."""
    if not names:
        return
    next_id = ast.max_id(checked)
    for node in ast.walk(checked.expr):  # type: ignore[attr-defined]
        if node.WhichOneof("expr_kind") != "ident_expr" or node.ident_expr.name not in names:
            continue
        name = names[node.ident_expr.name]
        next_id += 1
        node.ClearField("ident_expr")
        node.select_expr.field = name
        node.select_expr.operand.id = next_id
        node.select_expr.operand.ident_expr.name = _VARIABLES
        if node.id in checked.reference_map:  # type: ignore[attr-defined]
            del checked.reference_map[node.id]  # type: ignore[attr-defined]
