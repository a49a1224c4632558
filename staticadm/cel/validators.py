"""Compile-time checks Kubernetes runs on a checked CEL AST that the engine does not run itself.

- homogeneous aggregate literals (cel-go ``HomogeneousAggregateLiterals``),
- literal arguments of duration/timestamp/regex functions (Kubernetes 1.29 AST validators and the regex
  precompilation of its regex library),
- fields of ``variables``, which Kubernetes declares as an object type with a field per variable and the
  engine's checker sees as a map (``request`` and ``namespaceObject`` are typed in the checker itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from staticadm.cel import ast, structs

# Declared object fields: name -> nested schema (None = a leaf); ``variables`` has one per policy variable.
Schema = Mapping[str, "Schema | None"]


@dataclass(frozen=True, slots=True)
class Issue:
    node_id: int
    message: str
    #: Columns before the node's position where cel-go reports it (the root of a resolved qualified name).
    shift: int = 0


def check_homogeneous_literals(checked: Any) -> list[Issue]:
    types = ast.node_types(checked)
    issues: list[Issue] = []

    def element_type(node: Any, optional: bool) -> str:
        found = types.get(node.id, "dyn")
        if optional and found.startswith("optional_type(") and found.endswith(")"):
            # ``[?x]`` and ``{k: ?x}`` hold what is inside the optional.
            return found[len("optional_type("):-1]
        return found

    def check_list(nodes: list[tuple[Any, bool]]) -> None:
        # cel-go's HomogeneousAggregateLiterals: every element of the same type as the first, ``dyn`` included
        # (``[1, object.spec.count]`` is refused); a list reports its first mismatch, a map every one.
        expected: str | None = None
        for node, optional in nodes:
            found = element_type(node, optional)
            if expected is None:
                expected = found
            elif found != expected:
                issues.append(Issue(node.id, f"expected type '{expected}' but found '{found}'"))
                return

    # cel-go exempts literals anywhere below a string.format() call (its arguments are heterogeneous).
    exempt: set[int] = set()
    for node in ast.walk(checked.expr):
        if node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function == "format":
            exempt.update(child.id for arg in node.call_expr.args for child in ast.walk(arg))
        elif node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function in structs.RESERVED_NAMES:
            # The field map of a rewritten Object{...}/JSONPatch{...}: struct fields have their own types.
            exempt.update(arg.id for arg in node.call_expr.args)
    for node in ast.walk(checked.expr):
        kind = node.WhichOneof("expr_kind")
        if node.id in exempt:
            continue
        if kind == "list_expr":
            optional_indices = set(node.list_expr.optional_indices)
            check_list([(element, index in optional_indices) for index, element in enumerate(node.list_expr.elements)])
        elif kind == "struct_expr" and not node.struct_expr.message_name:
            _check_map_entries(list(node.struct_expr.entries), element_type, issues)
    return issues


def _check_map_entries(entries: list[Any], element_type: Callable[[Any, bool], str], issues: list[Issue]) -> None:
    key_type = value_type = None
    for entry in entries:
        found_key, found_value = element_type(entry.map_key, False), element_type(entry.value, entry.optional_entry)
        if key_type is None or value_type is None:
            key_type, value_type = found_key, found_value
            continue
        if found_key != key_type:
            issues.append(Issue(entry.map_key.id, f"expected type '{key_type}' but found '{found_key}'"))
        if found_value != value_type:
            issues.append(Issue(entry.value.id, f"expected type '{value_type}' but found '{found_value}'"))


# Functions whose literal argument Kubernetes validates at compile time: name -> (is member, arg index).
_LITERAL_ARGUMENTS = {
    "duration": (False, 0),
    "timestamp": (False, 0),
    "matches": (None, None),
    "find": (True, 0),
    "findAll": (True, 0),
}


def check_literal_arguments(checked: Any, evaluate_literal: Callable[[str, Any], str | None]) -> list[Issue]:
    """``evaluate_literal(function, literal)`` returns an error text when the literal is invalid."""
    issues: list[Issue] = []
    for node in ast.walk(checked.expr):
        if node.WhichOneof("expr_kind") != "call_expr":
            continue
        call = node.call_expr
        if call.function not in _LITERAL_ARGUMENTS:
            continue
        is_member = call.HasField("target")
        if call.function == "matches":
            argument = call.args[0] if is_member else (call.args[1] if len(call.args) > 1 else None)
        else:
            member, index = _LITERAL_ARGUMENTS[call.function]
            if member != is_member or index is None or len(call.args) <= index:
                continue
            argument = call.args[index]
        if argument is None or argument.WhichOneof("expr_kind") != "const_expr":
            continue
        constant = argument.const_expr
        literal_kind = constant.WhichOneof("constant_kind")
        if literal_kind not in ("string_value", "int64_value"):
            continue
        error = evaluate_literal(call.function, getattr(constant, literal_kind))
        if error is not None:
            issues.append(Issue(argument.id, error))
    return issues


def check_typed_variables(checked: Any, variable_names: frozenset[str] | None) -> list[Issue]:
    """Rejects fields the declared ``variables`` object does not have (``variables.nope``)."""
    issues: list[Issue] = []
    roots: dict[str, Schema] = {}
    if variable_names is not None:
        roots["variables"] = dict.fromkeys(variable_names)
    selected_roots: set[int] = set()
    for node in ast.walk(checked.expr):
        if node.WhichOneof("expr_kind") != "select_expr":
            continue
        chain = [node.select_expr.field]
        operand = node.select_expr.operand
        while operand.WhichOneof("expr_kind") == "select_expr":
            chain.append(operand.select_expr.field)
            operand = operand.select_expr.operand
        if operand.WhichOneof("expr_kind") != "ident_expr" or operand.ident_expr.name not in roots:
            continue
        if operand.id in selected_roots:
            continue
        selected_roots.add(operand.id)
        schema: Schema | None = roots[operand.ident_expr.name]
        for field in reversed(chain):
            if schema is None:
                break
            if field not in schema:
                issues.append(Issue(node.id, f"undefined field '{field}'"))
                break
            schema = schema[field]
    return issues


def check_undeclared(checked: Any, name: str) -> list[Issue]:
    """Kubernetes compiles some expressions without a variable declared at all: match conditions without
    ``variables``, messageExpressions without ``authorizer`` (``HasAuthorizer: false``). A read of it there, also
    as the qualified ``authorizer.requestResource``, is cel-go's undeclared reference (a loop variable of that
    name is no such read)."""
    issues: list[Issue] = []
    pending: list[tuple[Any, bool]] = [(checked.expr, False)]
    while pending:
        node, shadowed = pending.pop()
        kind = node.WhichOneof("expr_kind")
        if kind == "ident_expr":
            read = node.ident_expr.name
            if not shadowed and (read == name or read.startswith(name + ".")):
                # The checker resolved ``authorizer.requestResource`` at its last dot; cel-go reports the root.
                shift = read.rfind(".") if read != name else 0
                issues.append(Issue(node.id, f"undeclared reference to '{name}' (in container '')", shift))
            continue
        if kind == "comprehension_expr":
            loop = node.comprehension_expr
            inner = shadowed or name in (loop.iter_var, loop.iter_var2, loop.accu_var)
            pending += [(loop.iter_range, shadowed), (loop.accu_init, shadowed), (loop.loop_condition, inner),
                        (loop.loop_step, inner), (loop.result, inner)]
            continue
        pending += [(child, shadowed) for child in ast.children(node)]
    return issues


def uses_of_variables(checked: Any) -> frozenset[str]:
    names = set()
    for node in ast.walk(checked.expr):
        if node.WhichOneof("expr_kind") == "select_expr":
            operand = node.select_expr.operand
            if operand.WhichOneof("expr_kind") == "ident_expr" and operand.ident_expr.name == "variables":
                names.add(node.select_expr.field)
    return frozenset(names)


def format_issue(source: str, line: int, column: int, message: str) -> str:
    """cel-go's issue rendering, which Kubernetes puts verbatim into its errors."""
    lines = source.split("\n")
    snippet = lines[line - 1] if 0 < line <= len(lines) else ""
    marker = "." * max(column - 1, 0) + "^"
    return f"ERROR: <input>:{line}:{column}: {message}\n | {snippet}\n | {marker}"


def check_flatten_targets(checked: Any) -> list[Issue]:
    """cel-go declares ``flatten()`` for ``list(list(T))`` only (ext/lists.go ``list_flatten``; the one with a depth
    takes any ``list(dyn)``): a list of anything else but ``dyn`` has no overload. The engine flattens it anyway."""
    types = ast.node_types(checked)
    issues: list[Issue] = []
    for node in ast.walk(checked.expr):
        if node.WhichOneof("expr_kind") != "call_expr":
            continue
        call = node.call_expr
        if call.function != "flatten" or call.args or not call.HasField("target"):
            continue
        target_type = types.get(call.target.id, "dyn")
        if not target_type.startswith("list(") or not target_type.endswith(")"):
            continue
        element = target_type[len("list("):-1]
        if element == "dyn" or element.startswith("list(") or _is_type_parameter(element):
            continue
        issues.append(Issue(node.id, f"found no matching overload for 'flatten' applied to '{target_type}.()'"))
    return issues


def _is_type_parameter(type_name: str) -> bool:
    return type_name.startswith("_var") or (len(type_name) <= 3 and type_name[:1] == "T")


#: cel-go's type conversion functions (common/overloads IsTypeConversionFunction).
TYPE_CONVERSIONS = frozenset({"bool", "bytes", "double", "duration", "dyn", "int", "string", "timestamp", "type",
                              "uint"})


def constant_conversions(checked: Any) -> list[Any]:
    """The calls kube-apiserver's program planner evaluates once, when the program is built: kube-apiserver enables
    ``cel.OptOptimize``, whose decorator (cel-go interpreter/decorators.go ``maybeOptimizeConstUnary``) replaces a
    type conversion of a constant by its value, and fails the program when that value is an error. A constant is a
    literal, a list or map literal of constants (folded by the same decorator) or such a conversion; the calls come
    in the planner's order (operands first, left to right), so the first that fails is the one cel-go reports."""
    found: list[Any] = []

    def constant(node: Any) -> bool:
        kind = node.WhichOneof("expr_kind")
        if kind == "const_expr":
            return True
        if kind == "list_expr":
            results = [constant(element) for element in node.list_expr.elements]
            return all(results) and not node.list_expr.optional_indices
        if kind == "struct_expr":
            results = [constant(child) for child in ast.children(node)]
            return (all(results) and not node.struct_expr.message_name
                    and not any(entry.optional_entry for entry in node.struct_expr.entries))
        operands = [constant(child) for child in ast.children(node)]
        if kind != "call_expr":
            return False
        call = node.call_expr
        if call.function in TYPE_CONVERSIONS and not call.HasField("target") and len(call.args) == 1 and operands[0]:
            found.append(node)
            return True
        return False

    constant(checked.expr)
    return found
