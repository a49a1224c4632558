"""Calls cel-go's type checker narrows to one overload where the engine's checker keeps them all.

A generic list function called on a ``dyn`` (``object.spec.tags.flatten()``, ``sort()``, ``distinct()``,
``reverse()``, ``slice()``, ``first()``/``last()``, ``[] + object.spec.tags``) has a result whose element type is a
free type variable in cel-go's checker (checker.go ``resolveOverload``: ``dyn`` is assignable to ``list(list(T))``
without binding ``T``); cel-cpp's checker makes it ``dyn``. cel-go binds such a variable to the parameter type of
the first overload it is passed to (``isAssignableList`` commits the mapping of the first overload that matches, in
declaration order) and keeps only the overloads that agree: ``string(x)`` of an element keeps ``string_to_string``
alone (``size(x)`` binds it to ``bytes``). A list concatenated with a ``dyn`` has the other list's element type
(``[1] + object.spec.tags``: ``string(x)`` of its elements keeps ``int64_to_string``). A call the checker resolved
to a single overload runs that overload's guarded implementation (interpreter/planner.go ``resolveFunction``,
common/decls ``guardedUnaryOp``), which answers ``no such overload: string(int)`` for any other argument, where the
engine dispatches on the value and converts it.

A relation binds the variable too (``x > 1``: ``int``, by the order of cel-go's relation overloads), and so does an
equality with a typed value (``x == 'a'``: ``string``). Calls of single-overload functions (``x.startsWith('a')``)
also bind it in cel-go; that is not followed here.

``analyze`` follows the checker's order (target, arguments, then the call; a comprehension's range before its loop)
over those element types, and returns the calls to guard and the calls cel-go refuses (a variable bound by an
earlier call passed to a conversion or a relation that takes no value of its type). ``rewrite.prepare`` wraps each
guarded call's argument in a test of its runtime type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from staticadm.cel import ast
from staticadm.cel.validators import Issue

_DURATION = "google.protobuf.Duration"
_TIMESTAMP = "google.protobuf.Timestamp"

#: Global functions whose overloads cel-go declares with concrete single parameters, in its declaration order
#: (common/stdlib/standard.go; Kubernetes' IP and CIDR libraries add string(net.IP) and string(net.CIDR) after).
#: size(list(A)) and size(map(A, B)) are written "list" and "map".
OVERLOADS: Mapping[str, tuple[str, ...]] = {
    "string": ("string", "bool", "bytes", "double", _DURATION, "int", _TIMESTAMP, "uint", "net.IP", "net.CIDR"),
    "int": ("int", "double", _DURATION, "string", _TIMESTAMP, "uint"),
    "uint": ("uint", "double", "int", "string"),
    "double": ("double", "int", "string", "uint"),
    "bool": ("bool", "string"),
    "bytes": ("bytes", "string"),
    "duration": (_DURATION, "string"),
    "timestamp": (_TIMESTAMP, "int", "string"),
    "size": ("bytes", "list", "map", "string"),
}
#: Functions whose overloads cel-go runs behind an operand trait (size: traits.SizerType) rather than a type guard:
#: the one kept runs for any value with the trait, as the engine's dispatch does, and binds the variable only.
_TRAIT_DISPATCHED = frozenset({"size"})
#: Member functions of cel-go's lists extension whose result is the receiver's list type (``list(T)``).
_SAME_LIST = frozenset({"sort", "distinct", "reverse", "slice"})
_RELATIONS = frozenset({"_<_", "_<=_", "_>_", "_>=_"})
#: The parameters of cel-go's relation overloads, in its declaration order (standard.go, with Kubernetes' cross-type
#: numeric comparisons).
_RELATION_OVERLOADS = (("bool", "bool"), ("int", "int"), ("int", "double"), ("int", "uint"), ("uint", "uint"),
                       ("uint", "double"), ("uint", "int"), ("double", "double"), ("double", "int"),
                       ("double", "uint"), ("string", "string"), ("bytes", "bytes"), (_TIMESTAMP, _TIMESTAMP),
                       (_DURATION, _DURATION))
_NUMBERS = frozenset({"int", "uint", "double"})
_ORDERED = frozenset({"string", "bytes", "bool", _TIMESTAMP, _DURATION})
#: The runtime type identifiers a guard compares ``type(x)`` with.
_GUARDABLE = frozenset({"string", "bool", "bytes", "double", "int", "uint", "list", "map", _DURATION, _TIMESTAMP})


@dataclass(frozen=True, slots=True)
class Var:
    """A free type variable of cel-go's checker."""

    number: int


@dataclass(frozen=True, slots=True)
class ListOf:
    element: GoType


@dataclass(frozen=True, slots=True)
class OptionalOf:
    element: GoType


GoType = Var | ListOf | OptionalOf | str


@dataclass(frozen=True, slots=True)
class Guard:
    """A call cel-go runs as this one overload: its function and the runtime type its argument must have."""

    function: str
    parameter: str


@dataclass
class Analysis:
    guards: dict[int, Guard] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)


class _Checker:
    def __init__(self, types: Mapping[int, str]) -> None:
        self.types = types
        self.bindings: dict[int, GoType] = {}
        self.counter = 0
        self.analysis = Analysis()

    def fresh(self) -> Var:
        self.counter += 1
        return Var(self.counter)

    def resolve(self, go_type: GoType | None) -> GoType | None:
        while isinstance(go_type, Var) and go_type.number in self.bindings:
            go_type = self.bindings[go_type.number]
        return go_type

    def visit(self, node: Any, scope: Mapping[str, GoType]) -> GoType | None:
        """The tracked cel-go type of ``node`` (None: the engine's checked type is cel-go's), visiting its children
        in the checker's order."""
        kind = node.WhichOneof("expr_kind")
        if kind == "ident_expr":
            return scope.get(node.ident_expr.name)
        if kind == "select_expr":
            self.visit(node.select_expr.operand, scope)
            return None
        if kind == "list_expr":
            for element in node.list_expr.elements:
                self.visit(element, scope)
            return None
        if kind == "struct_expr":
            for entry in node.struct_expr.entries:
                if entry.HasField("map_key"):
                    self.visit(entry.map_key, scope)
                self.visit(entry.value, scope)
            return None
        if kind == "comprehension_expr":
            return self._comprehension(node.comprehension_expr, scope)
        if kind == "call_expr":
            return self._call(node, scope)
        return None

    def _comprehension(self, loop: Any, scope: Mapping[str, GoType]) -> GoType | None:
        iterated = self.resolve(self.visit(loop.iter_range, scope))
        self.visit(loop.accu_init, scope)
        inner = {name: value for name, value in scope.items() if name not in (loop.iter_var, loop.iter_var2,
                                                                               loop.accu_var)}
        if isinstance(iterated, ListOf):
            inner[loop.iter_var2 or loop.iter_var] = iterated.element
        self.visit(loop.loop_condition, inner)
        self.visit(loop.loop_step, inner)
        result_scope = {name: value for name, value in inner.items() if name not in (loop.iter_var, loop.iter_var2)}
        self.visit(loop.result, result_scope)
        return None

    def _call(self, node: Any, scope: Mapping[str, GoType]) -> GoType | None:
        call = node.call_expr
        target = self.resolve(self.visit(call.target, scope)) if call.HasField("target") else None
        arguments = [self.resolve(self.visit(argument, scope)) for argument in call.args]
        function = call.function
        if call.HasField("target"):
            target_is_dyn = target is None and self.types.get(call.target.id) == "dyn"
            if function == "flatten" and not call.args:
                if target_is_dyn:
                    return ListOf(self.fresh())
                if isinstance(target, ListOf):
                    element = self.resolve(target.element)
                    if isinstance(element, Var):
                        inner = self.fresh()
                        self.bindings[element.number] = ListOf(inner)
                        return ListOf(inner)
                    return element if isinstance(element, ListOf) else None
                return None
            if function in _SAME_LIST:
                return ListOf(self.fresh()) if target_is_dyn else target if isinstance(target, ListOf) else None
            if function in ("first", "last") and not call.args:
                if target_is_dyn:
                    return OptionalOf(self.fresh())
                return OptionalOf(target.element) if isinstance(target, ListOf) else None
            if function == "value" and not call.args and isinstance(target, OptionalOf):
                return target.element
            if function == "orValue" and len(call.args) == 1 and isinstance(target, OptionalOf):
                # optional_type(T).orValue(T) -> T: a free T takes the default's type, as cel-go's checker binds it
                # (object.spec.tags.first().orValue('') is a string to every later call).
                element = self.resolve(target.element)
                default = arguments[0] if arguments[0] is not None else self.types.get(call.args[0].id)
                if isinstance(element, Var) and default is not None and default != "dyn" and default != element:
                    self.bindings[element.number] = default
                return self.resolve(target.element)
            return None
        if function == "_[_]" and len(arguments) == 2 and isinstance(arguments[0], ListOf):
            return arguments[0].element
        if function == "_+_" and len(call.args) == 2:
            return self._concatenation(node, call.args, arguments)
        if function in OVERLOADS and len(call.args) == 1 and arguments[0] is not None:
            self._narrow(node, function, arguments[0])
        elif function in ("_==_", "_!=_") and len(call.args) == 2:
            # (A, A): a free variable takes the other side's type.
            sides = [argument if argument is not None else self.types.get(operand.id)
                     for argument, operand in zip(arguments, call.args, strict=True)]
            for operand, other in ((sides[0], sides[1]), (sides[1], sides[0])):
                if isinstance(operand, Var) and isinstance(other, str) and other != "dyn" \
                        and not other.startswith(("list(", "map(")):
                    self.bindings[operand.number] = other
        elif function in _RELATIONS and len(call.args) == 2:
            operands: list[GoType | None] = [argument if argument is not None else self.types.get(operand.id)
                                             for argument, operand in zip(arguments, call.args, strict=True)]
            if any(isinstance(operand, Var) for operand in operands):
                self._bind_relation(operands)
                operands = [self.resolve(operand) for operand in operands]
                if any(isinstance(argument, str) for argument in arguments) or any(
                        isinstance(argument, Var) for argument in arguments):
                    self._compared(node, function, [o if isinstance(o, str) else None for o in operands])
            elif any(isinstance(a, str) for a in arguments):
                self._compared(node, function, [o if isinstance(o, str) else None for o in operands])
        return None

    def _bind_relation(self, operands: list[GoType | None]) -> None:
        """A relation binds a free variable to its side of the first overload the other side fits (cel-go's
        order: bool, int, int/double, ... ): ``x > 1`` makes ``x`` an int, ``x > 1.5`` too (``int < double``
        comes before ``double < double``), ``x > object.spec.count`` a bool."""
        for pair in _RELATION_OVERLOADS:
            fits = True
            for operand, parameter in zip(operands, pair, strict=True):
                if isinstance(operand, str) and operand != "dyn" and operand != parameter:
                    fits = False
            if fits:
                for operand, parameter in zip(operands, pair, strict=True):
                    if isinstance(operand, Var):
                        self.bindings[operand.number] = parameter
                return

    def _compared(self, node: Any, function: str, operands: list[str | None]) -> None:
        """A relation between an element bound by an earlier call and a value: Kubernetes declares them between
        numbers and between two values of one ordered type."""
        left, right = operands
        if left is None or right is None or "dyn" in (left, right):
            return
        if (left in _NUMBERS and right in _NUMBERS) or (left == right and left in _ORDERED):
            return
        self.analysis.issues.append(Issue(node.id, f"found no matching overload for '{function}' applied to "
                                                   f"'({left}, {right})'"))

    def _concatenation(self, node: Any, operands: Any, tracked: list[GoType | None]) -> GoType | None:
        """``a + b`` of lists where one is a ``dyn``: cel-go's ``add_list`` (list(T), list(T)) binds ``T`` from the
        other (``[1] + object.spec.tags`` is a ``list(int)``, its elements ints to every later call), or leaves
        it free (``[] + object.spec.tags``)."""
        if any(isinstance(argument, ListOf) for argument in tracked):
            return next(argument for argument in tracked if isinstance(argument, ListOf))
        operand_types = [self.types.get(operand.id, "dyn") for operand in operands]
        if "dyn" not in operand_types:
            return None
        other = next(t for t, operand in zip(operand_types, operands, strict=True) if t != "dyn") \
            if operand_types.count("dyn") == 1 else None
        if other is None or not other.startswith("list(") or not other.endswith(")"):
            return None
        element = other[len("list("):-1]
        if element == "dyn" or element.startswith("_var") or (len(element) <= 3 and element[:1] == "T"):
            literal = next(operand for t, operand in zip(operand_types, operands, strict=True) if t != "dyn")
            if literal.WhichOneof("expr_kind") == "list_expr" and not literal.list_expr.elements:
                return ListOf(self.fresh())
            return None
        return ListOf(element)

    def _narrow(self, node: Any, function: str, argument: GoType) -> None:
        parameters = OVERLOADS[function]
        if isinstance(argument, str) and argument.startswith(("list(", "map(")):
            argument = argument.split("(", 1)[0]
        if isinstance(argument, Var):
            # The first overload binds the variable; the others then disagree with it.
            self.bindings[argument.number] = parameters[0]
            kept = [parameters[0]]
        elif isinstance(argument, ListOf):
            kept = [parameter for parameter in parameters if parameter == "list"]
        elif isinstance(argument, str):
            kept = [parameter for parameter in parameters if parameter == argument]
        else:
            return
        if not kept:
            self.analysis.issues.append(Issue(node.id, f"found no matching overload for '{function}' applied to "
                                                       f"'({self.spelt(argument)})'"))
        elif kept[0] in _GUARDABLE and function not in _TRAIT_DISPATCHED:
            self.analysis.guards[node.id] = Guard(function, kept[0])

    def spelt(self, go_type: GoType | None) -> str:
        go_type = self.resolve(go_type)
        if isinstance(go_type, ListOf):
            return f"list({self.spelt(go_type.element)})"
        if isinstance(go_type, OptionalOf):
            return f"optional_type({self.spelt(go_type.element)})"
        if isinstance(go_type, Var):
            return f"_var{go_type.number}"
        return go_type or "dyn"


def analyze(checked: Any) -> Analysis:
    """The calls of a checked expression cel-go narrows to one overload (``Analysis.guards``) or refuses
    (``Analysis.issues``)."""
    checker = _Checker(ast.node_types(checked))
    checker.visit(checked.expr, {})
    return checker.analysis
