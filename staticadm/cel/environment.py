"""The CEL environment kube-apiserver 1.37 uses for admission policy expressions, on cel-expr-python.

Each expression is compiled twice over: the *checker* environment declares Kubernetes' real signatures
(abstract value types, optional results, cross-type numeric comparisons) and type-checks the source;
the checked AST then goes through Kubernetes' extra validators and our runtime rewrites and is loaded
into the *runtime* environment, whose declarations use the representations the engine can carry.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional

from staticadm.cel import ast, messages, rewrite, string_format, structs, validators
from staticadm.cel.evaluation import (
    COST_LIMIT_MESSAGE,
    CostLimitExceeded,
    EvalError,
    EvaluationContext,
    EvaluationState,
    engine_error_text,
)
from staticadm.cel.libraries import BASE_LIBRARIES, MUTATION_LIBRARIES, macros
from staticadm.cel.libraries.spec import Function, OpaqueType, Overload
from staticadm.cel.types import parse_type, runtime_kind
from staticadm.cel.values import opaque_type_name

#: lists.range(n) beyond this would allocate more than any admission request needs.
MAX_RANGE = 1_000_000


class ExpressionKind(enum.Enum):
    MATCH_CONDITION = "matchCondition"
    VALIDATION = "validation"
    MESSAGE_EXPRESSION = "messageExpression"
    AUDIT_ANNOTATION = "auditAnnotation"
    VARIABLE = "variable"
    APPLY_CONFIGURATION = "applyConfiguration"
    JSON_PATCH = "jsonPatch"
    #: ``staticadm cel eval``: any result type.
    STANDALONE = "standalone"


#: Result types Kubernetes requires (exact type match; ``None`` accepts any).
RESULT_TYPES: dict[ExpressionKind, tuple[str, ...] | None] = {
    ExpressionKind.MATCH_CONDITION: ("bool",),
    ExpressionKind.VALIDATION: ("bool",),
    ExpressionKind.MESSAGE_EXPRESSION: ("string",),
    ExpressionKind.AUDIT_ANNOTATION: ("string", "null_type"),
    ExpressionKind.VARIABLE: None,
    ExpressionKind.APPLY_CONFIGURATION: ("Object",),
    ExpressionKind.JSON_PATCH: ("list(JSONPatch)",),
    ExpressionKind.STANDALONE: None,
}

#: Variables declared for admission expressions (``params`` is absent: static policies have none).
ADMISSION_VARIABLES = (
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "variables",
    "authorizer",
    "authorizer.requestResource",
)

# Standard functions whose declarations we must replace: Kubernetes enables cross-type numeric
# comparisons, and its libraries add overloads to string(). The runtime keeps its native implementations.
_NUMERIC = ("int", "uint", "double")
_OVERLOAD_SUFFIX = {
    "int": "int64",
    "uint": "uint64",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "bool": "bool",
    "timestamp": "timestamp",
    "duration": "duration",
}
_COMPARISONS = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}
_STRING_CONVERSIONS = (
    ("string_to_string", "string"),
    ("int64_to_string", "int"),
    ("uint64_to_string", "uint"),
    ("double_to_string", "double"),
    ("bytes_to_string", "bytes"),
    ("timestamp_to_string", "timestamp"),
    ("duration_to_string", "duration"),
    ("bool_to_string", "bool"),
)


def _standard_overrides() -> list[Function]:
    def unused(*_: Any) -> Any:
        raise RuntimeError("standard functions run natively")

    functions = []
    for name, prefix in _COMPARISONS.items():
        overloads = []
        for left in _NUMERIC:
            for right in _NUMERIC:
                suffix = _OVERLOAD_SUFFIX[left]
                if left != right:
                    suffix += "_" + _OVERLOAD_SUFFIX[right]
                overloads.append(Overload(f"{prefix}_{suffix}", (left, right), "bool", unused))
        for same in ("string", "bytes", "bool", "timestamp", "duration"):
            overloads.append(Overload(f"{prefix}_{_OVERLOAD_SUFFIX[same]}", (same, same), "bool", unused))
        functions.append(Function(name, tuple(overloads)))
    functions.append(
        Function(
            "string",
            tuple(Overload(overload_id, (param,), "string", unused) for overload_id, param in _STRING_CONVERSIONS),
        )
    )
    return functions


_STANDARD_OVERRIDES = tuple(_standard_overrides())
_OVERRIDDEN_NAMES = frozenset(function.name for function in _STANDARD_OVERRIDES)
_STANDARD_OVERLOAD_IDS = frozenset(o.overload_id for f in _STANDARD_OVERRIDES for o in f.overloads)


@dataclass(frozen=True, slots=True)
class CompileError:
    message: str


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    source: str
    kind: ExpressionKind
    result_type: str
    program: Any = field(repr=False, compare=False)
    variables_used: frozenset[str]

    def evaluate(self, context: EvaluationContext, *, nested: bool = False) -> Any:
        """The expression's value (plain Python) or an ``EvalError``; never raises."""
        return context.run(self.program, nested=nested)


class CelEnvironment:
    """An immutable pair of engine environments plus the compile pipeline around them."""

    def __init__(self, libraries: Sequence[ModuleType], extra_variables: Iterable[str] = ()) -> None:
        # Libraries may add overloads to one function name (ip() global in the IP library, member in CIDR).
        merged: dict[str, list[Overload]] = {}
        for library in libraries:
            for function in library.FUNCTIONS:
                merged.setdefault(function.name, []).extend(function.overloads)
        functions = [Function(name, tuple(o)) for name, o in merged.items()]
        self._function_names = frozenset(merged) | messages.STANDARD_FUNCTIONS
        opaque_types: list[OpaqueType] = [t for library in libraries for t in getattr(library, "TYPES", ())]
        self.opaque_types: Mapping[str, OpaqueType] = {t.name: t for t in opaque_types}
        self.struct_syntax = any(getattr(library, "STRUCT_SYNTAX", False) for library in libraries)
        opaque_names = frozenset(self.opaque_types)
        self._optional_functions = frozenset(
            function.name
            for function in functions
            if any(overload.result.startswith("optional_type(") for overload in function.overloads)
        )
        self.state = EvaluationState()

        authorizer_type = next(
            (getattr(lib, "AUTHORIZER_TYPE_NAME", None) for lib in libraries if hasattr(lib, "AUTHORIZER_TYPE_NAME")),
            None,
        )
        resource_check_type = next(
            (
                getattr(lib, "RESOURCE_CHECK_TYPE_NAME", None)
                for lib in libraries
                if hasattr(lib, "RESOURCE_CHECK_TYPE_NAME")
            ),
            None,
        )
        checker_variables: dict[str, cel.Type] = {
            "object": cel.Type.DYN,
            "oldObject": cel.Type.DYN,
            "request": cel.Type.DYN,
            "namespaceObject": cel.Type.DYN,
            "variables": cel.Type.Map(cel.Type.STRING, cel.Type.DYN),
        }
        if authorizer_type:
            checker_variables["authorizer"] = cel.Type.AbstractType(authorizer_type)
        if resource_check_type:
            checker_variables["authorizer.requestResource"] = cel.Type.AbstractType(resource_check_type)
        for name in extra_variables:
            checker_variables[name] = cel.Type.DYN
        # Kubernetes value types are also type identifiers (``type(ip(s)) == net.IP``); the rewrite turns
        # both sides into constants the runtime can compare.
        for type_name in opaque_names:
            checker_variables.setdefault(type_name, cel.Type.DYN)
        self.variable_names = frozenset(checker_variables)
        runtime_variables = dict.fromkeys(checker_variables, cel.Type.DYN)

        overridden = {f.name: list(f.overloads) for f in _STANDARD_OVERRIDES}
        library_functions: list[Function] = []
        for function in functions:
            if function.name in overridden:
                overridden[function.name].extend(function.overloads)
            else:
                library_functions.append(function)
        merged_overrides = [Function(name, tuple(overloads)) for name, overloads in overridden.items()]
        exclusions = "".join(f'    - name: "{name}"\n' for name in sorted(_OVERRIDDEN_NAMES))
        config_yaml = (
            "extensions:\n"
            '  - name: "sets"\n'
            '  - name: "lists"\n'
            "    version: 2\n"
            '  - name: "two-var-comprehensions"\n'
            "stdlib:\n"
            "  exclude_functions:\n" + exclusions
        )

        checker_decls = [
            self._checker_decl(function, opaque_names) for function in [*merged_overrides, *library_functions]
        ]
        self._checker = cel.NewEnv(
            config=cel.NewEnvConfigFromYaml(config_yaml),
            variables=checker_variables,
            extensions=[ext_optional.ExtOptional()],
            functions=checker_decls,
        )
        runtime_decls = [
            decl
            for function in [*merged_overrides, *library_functions]
            if (decl := self._runtime_decl(function, opaque_names)) is not None
        ]
        runtime_decls.extend(self._internal_runtime_decls())
        #: overload id -> runtime function name, for calls the rewrite routes to a concretely typed result.
        self._typed_calls: dict[str, str] = {}
        runtime_decls.extend(self._typed_runtime_decls(library_functions, opaque_names))
        self._runtime = cel.NewEnv(
            config=cel.NewEnvConfigFromYaml(config_yaml),
            variables=runtime_variables,
            extensions=[ext_optional.ExtOptional()],
            functions=runtime_decls,
        )
        self._literal_programs: dict[tuple[str, str], Any] = {}

    # -- declarations -------------------------------------------------------------------------------

    @staticmethod
    def _checker_decl(function: Function, opaque_names: frozenset[str]) -> cel.FunctionDecl:
        return cel.FunctionDecl(
            function.name,
            [
                cel.Overload(
                    overload.overload_id,
                    parse_type(overload.result, opaque_names, runtime=False),
                    [parse_type(p, opaque_names, runtime=False) for p in overload.params],
                    is_member=overload.member,
                )
                for overload in function.overloads
            ],
        )

    @staticmethod
    def _runtime_decl(function: Function, opaque_names: frozenset[str]) -> cel.FunctionDecl | None:
        # Overloads the runtime cannot tell apart (string(net.IP) and string(net.CIDR) both take a map)
        # share one registration that dispatches on the values' type tags; standard-library overloads
        # (not ours) stay native.
        groups: dict[tuple[bool, tuple[str, ...]], list[Overload]] = {}
        for overload in function.overloads:
            if overload.overload_id in _STANDARD_OVERLOAD_IDS:
                continue
            key = (overload.member, tuple(runtime_kind(p, opaque_names) for p in overload.params))
            groups.setdefault(key, []).append(overload)
        if not groups:
            return None
        engine_overloads = []
        for overloads in groups.values():
            first = overloads[0]
            result = cel.Type.UINT if all(o.result == "uint" for o in overloads) else cel.Type.DYN
            impl = _runtime_impl(overloads[0]) if len(overloads) == 1 else _dispatching_impl(
                function.name, overloads, opaque_names)
            for suffix, params in _concrete_parameter_types(first.params, opaque_names):
                engine_overloads.append(cel.Overload(first.overload_id + suffix, result, params,
                                                     is_member=first.member, impl=impl))
        return cel.FunctionDecl(function.name, engine_overloads)

    def _typed_runtime_decls(self, functions: Sequence[Function],
                             opaque_names: frozenset[str]) -> list[cel.FunctionDecl]:
        """Overloads that share one runtime registration but declare different results (``list(T).max()``
        returns ``T``) are also registered one by one under their own name with their concrete result
        type: a Python function with a dyn result cannot hand a duration or timestamp to the engine."""
        decls = []
        for function in functions:
            groups: dict[tuple[bool, tuple[str, ...]], list[Overload]] = {}
            for overload in function.overloads:
                key = (overload.member, tuple(runtime_kind(p, opaque_names) for p in overload.params))
                groups.setdefault(key, []).append(overload)
            for overloads in groups.values():
                if len({overload.result for overload in overloads}) < 2:
                    continue
                for overload in overloads:
                    if overload.result not in _TYPED_RESULTS:
                        continue
                    name = f"{function.name}@{overload.overload_id}"
                    result = parse_type(overload.result, opaque_names, runtime=True)
                    engine_overloads = [
                        cel.Overload(f"{overload.overload_id}@typed{suffix}", result, params,
                                     is_member=overload.member, impl=_runtime_impl(overload))
                        for suffix, params in _concrete_parameter_types(overload.params, opaque_names)
                    ]
                    decls.append(cel.FunctionDecl(name, engine_overloads))
                    self._typed_calls[overload.overload_id] = name
        return decls

    def _internal_runtime_decls(self) -> list[cel.FunctionDecl]:
        def range_guard(count: int) -> int:
            if count < 0:
                return 0  # cel-go's lists.range(n) is empty for n < 0; cel-cpp fails in vector::reserve
            if count > MAX_RANGE:
                self.state.current.cost_exceeded = True
                raise CostLimitExceeded()
            return count

        def map_insert_entry(target: dict[Any, Any], key: Any, value: Any) -> dict[Any, Any]:
            if key in target:
                raise ValueError(f"insert failed: key {key!r} already exists")
            return {**target, key: value}

        def map_insert_map(target: dict[Any, Any], other: dict[Any, Any]) -> dict[Any, Any]:
            for key in other:
                if key in target:
                    raise ValueError(f"insert failed: key {key!r} already exists")
            return {**target, **other}

        T = cel.Type
        map_insert_entries = [
            cel.Overload("cel_mapinsert" + suffix, T.MAP, params, impl=map_insert_entry)
            for suffix, params in _concrete_parameter_types(("map(dyn, dyn)", "dyn", "dyn"), frozenset())
            if params[1] in _MAP_KEY_TYPES
        ]
        return [
            cel.FunctionDecl(
                rewrite.BUDGET_FUNCTION, [cel.Overload("staticadm_budget", T.BOOL, [], impl=self.state.tick)]
            ),
            cel.FunctionDecl(
                rewrite.VARIABLE_FUNCTION,
                [cel.Overload("staticadm_variable", T.DYN, [T.STRING], impl=self.state.variable)],
            ),
            cel.FunctionDecl(
                rewrite.RANGE_GUARD_FUNCTION, [cel.Overload("staticadm_range_guard", T.INT, [T.INT], impl=range_guard)]
            ),
            # Two-variable transformMap/transformMapEntry expand to this internal function, which the
            # engine's runtime does not provide.
            cel.FunctionDecl(
                "cel.@mapInsert",
                [
                    *map_insert_entries,
                    cel.Overload("cel_mapinsert_map_map", T.MAP, [T.MAP, T.MAP], impl=map_insert_map),
                ],
            ),
        ]

    # -- compilation --------------------------------------------------------------------------------

    def compile(
        self, source: str, kind: ExpressionKind, *, variable_names: Sequence[str] | None = ()
    ) -> CompiledExpression | CompileError:
        """Compiles ``source`` as Kubernetes would; errors come back as values with cel-go's wording.

        ``variable_names`` are the policy variables visible to the expression; ``None`` skips the check
        (the playground, where ``variables`` is just a map).
        """
        rewritten = source
        if self.struct_syntax:
            try:
                rewritten = structs.rewrite_struct_creation(source)
            except structs.StructSyntaxError as error:
                return CompileError(f"ERROR: <input>:1:1: {error}")
        checker_source = macros.respell_exists_one(rewritten, self._parse)
        try:
            checked_program = self._checker.compile(checker_source)
        except RuntimeError as error:
            text = macros.restore_source(engine_error_text(str(error)), checker_source, rewritten)
            return CompileError(messages.compile_error_text(text, rewritten, functions=self._function_names))
        checked = ast.decode(checked_program.serialize())
        issues = [
            *validators.check_homogeneous_literals(checked),
            *validators.check_literal_arguments(checked, self._literal_error),
            *validators.check_typed_variables(checked, None if variable_names is None else frozenset(variable_names)),
            *(validators.Issue(issue.node_id, issue.message) for issue in string_format.validate_format_calls(checked)),
        ]
        if issues:
            rendered = []
            for issue in sorted(issues, key=lambda i: ast.position_of(checked, i.node_id)):
                line, column = ast.position_of(checked, issue.node_id)
                rendered.append(validators.format_issue(rewritten, line, column, issue.message))
            return CompileError("\n".join(rendered))
        result_type = ast.type_name(checked.type_map[checked.expr.id]) if checked.expr.id in checked.type_map else "dyn"
        allowed = RESULT_TYPES[kind]
        if allowed is not None and result_type not in allowed:
            if len(allowed) == 1:
                return CompileError(f"must evaluate to {allowed[0]} but got {result_type}")
            return CompileError(f"must evaluate to one of [{' '.join(allowed)}] but got {result_type}")
        null_variables = frozenset({"namespaceObject"}) if kind is ExpressionKind.MATCH_CONDITION else frozenset()
        runtime_ast = rewrite.rewrite_for_runtime(checked, self._optional_functions, frozenset(self.opaque_types),
                                                  null_variables, self._typed_calls)
        try:
            program = self._runtime.deserialize(ast.encode(runtime_ast))
        except RuntimeError as error:
            return CompileError(f"program instantiation failed: {engine_error_text(str(error))}")
        return CompiledExpression(
            source=source,
            kind=kind,
            result_type=result_type,
            program=program,
            variables_used=validators.uses_of_variables(checked),
        )

    def _parse(self, source: str) -> Any:
        return ast.decode(self._checker.compile(source, disable_check=True).serialize())

    def _literal_error(self, function: str, literal: Any) -> str | None:
        """Evaluates ``function(literal)`` in the engine, which has the real parsers (RE2 included)."""
        template_key = (function, type(literal).__name__)
        template = self._literal_programs.get(template_key)
        if template is None:
            placeholder = '""' if isinstance(literal, str) else "0"
            source = {
                "duration": f"duration({placeholder})",
                "timestamp": f"timestamp({placeholder})",
                "matches": f'"".matches({placeholder})',
                "find": f'"".find({placeholder})',
                "findAll": f'"".findAll({placeholder})',
            }[function]
            template = ast.decode(self._checker.compile(source).serialize())
            self._literal_programs[template_key] = template
        probe = ast.CheckedExpr()
        probe.CopyFrom(template)
        for node in ast.walk(probe.expr):
            if (
                node.WhichOneof("expr_kind") == "const_expr"
                and node.const_expr.WhichOneof("constant_kind") in ("string_value", "int64_value")
                and not (function != "duration" and function != "timestamp" and node is probe.expr.call_expr.target)
            ):
                if isinstance(literal, str):
                    node.const_expr.string_value = literal
                else:
                    node.const_expr.int64_value = literal
        context = self.new_context({}, budget_seconds=None)
        outcome = context.run(self._runtime.deserialize(ast.encode(probe)))
        if not isinstance(outcome, EvalError):
            return None
        if function in ("find", "findAll"):
            return outcome.message
        return f"invalid {function} argument"

    # -- evaluation ---------------------------------------------------------------------------------

    def new_activation(self, data: Mapping[str, Any]) -> Any:
        """An engine activation over ``data``, to share between contexts of one request."""
        return self._runtime.Activation(data=dict(data))

    def new_context(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        variables: Mapping[str, CompiledExpression] | None = None,
        budget_seconds: float | None = 0.1,
        activation: Any = None,
        request_deadline: float | None = None,
    ) -> EvaluationContext:
        """A budget and variable scope over ``data`` (or over a shared ``activation`` from ``new_activation``);
        the engine converts the data lazily. ``request_deadline`` (``time.perf_counter``) bounds every
        context of one request together."""
        return EvaluationContext(self._runtime, self.state, data or {}, variables, budget_seconds, activation,
                                 request_deadline)


#: Every kind a runtime value can have. The engine never dispatches a Python function declared with a
#: ``dyn`` parameter, so such parameters are registered once per concrete kind.
_CONCRETE_KINDS: tuple[tuple[str, cel.Type], ...] = (
    ("int", cel.Type.INT),
    ("uint", cel.Type.UINT),
    ("double", cel.Type.DOUBLE),
    ("bool", cel.Type.BOOL),
    ("string", cel.Type.STRING),
    ("bytes", cel.Type.BYTES),
    ("null", cel.Type.NULL),
    ("list", cel.Type.LIST),
    ("map", cel.Type.MAP),
    ("timestamp", cel.Type.TIMESTAMP),
    ("duration", cel.Type.DURATION),
)
_MAP_KEY_TYPES = (cel.Type.INT, cel.Type.UINT, cel.Type.BOOL, cel.Type.STRING)
#: Result types the engine accepts from Python only when declared concretely (see _typed_runtime_decls).
_TYPED_RESULTS = frozenset({"int", "uint", "double", "bool", "string", "bytes", "duration", "timestamp"})


def _concrete_parameter_types(params: Sequence[str], opaque_names: frozenset[str]) -> list[tuple[str, list[cel.Type]]]:
    variants: list[tuple[str, list[cel.Type]]] = [("", [])]
    for param in params:
        if param.strip() == "dyn":
            variants = [
                (suffix + "_" + kind_name, [*types, kind])
                for suffix, types in variants
                for kind_name, kind in _CONCRETE_KINDS
            ]
        else:
            parsed = parse_type(param, opaque_names, runtime=True)
            variants = [(suffix, [*types, parsed]) for suffix, types in variants]
    return variants


def _dispatching_impl(name: str, overloads: Sequence[Overload],
                      opaque_names: frozenset[str]) -> Callable[..., Any]:
    candidates = [(tuple(p if p in opaque_names else None for p in o.params), _runtime_impl(o)) for o in overloads]

    def dispatch(*args: Any) -> Any:
        for tags, impl in candidates:
            if all(tag is None or opaque_type_name(arg) == tag for tag, arg in zip(tags, args, strict=True)):
                return impl(*args)
        raise ValueError(f"no such overload: {name}")

    return dispatch


def _runtime_impl(overload: Overload) -> Callable[..., Any]:
    impl = overload.impl
    if not overload.result.startswith("optional_type("):
        return impl
    inner = overload.result[len("optional_type(") : -1]
    zero: Any = [] if inner.startswith("list(") else {}

    def optional_result(*args: Any) -> Any:
        # optional.ofNonZeroValue (inserted by the rewrite) turns the zero value into optional.none().
        value = impl(*args)
        return zero if value is None else value

    return optional_result


def build_environment(*, mutating: bool = False, extra_variables: Iterable[str] = ()) -> CelEnvironment:
    libraries = (*BASE_LIBRARIES, *MUTATION_LIBRARIES) if mutating else BASE_LIBRARIES
    return CelEnvironment(libraries, extra_variables)


__all__ = [
    "ADMISSION_VARIABLES",
    "COST_LIMIT_MESSAGE",
    "CelEnvironment",
    "CompileError",
    "CompiledExpression",
    "EvalError",
    "EvaluationContext",
    "ExpressionKind",
    "build_environment",
]
