"""The CEL environment kube-apiserver 1.36 uses for admission policy expressions, on cel-expr-python.

Each expression is compiled twice over: the *checker* environment declares Kubernetes' real signatures
(abstract value types, optional results, cross-type numeric comparisons) and type-checks the source;
the checked AST then goes through Kubernetes' extra validators and our runtime rewrites and is loaded
into the *runtime* environment, whose declarations use the representations the engine can carry.
"""

from __future__ import annotations

import enum
import functools
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, cast

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional
from google.protobuf.message import DecodeError

from staticadm.cel import (
    ast,
    boundary,
    cost,
    fusion,
    lexer,
    linking,
    messages,
    narrowing,
    optional_results,
    reads,
    rewrite,
    stepping,
    string_format,
    structs,
    typed_variables,
    validators,
)
from staticadm.cel.evaluation import (
    COST_LIMIT_MESSAGE,
    CompileError,
    CostBudget,
    EvalError,
    EvaluationContext,
    EvaluationState,
    SharedActivation,
    engine_error_text,
    runtime_error,
    to_python,
)
from staticadm.cel.libraries import BASE_LIBRARIES, MUTATION_LIBRARIES, macros, quantity
from staticadm.cel.libraries.spec import Function, OpaqueType, Overload
from staticadm.cel.schema_types import ADMISSION_REQUEST_TYPE, NAMESPACE_TYPE, KindType, admission_pool
from staticadm.cel.types import parse_type, runtime_kind
from staticadm.cel.values import holds_time_values, opaque_type_name, to_engine

#: lists.range(n) beyond this would allocate more than any admission request needs.
MAX_RANGE = 1_000_000
#: Overloads of Kubernetes value constructors whose call on a string literal is folded at compile time
#: (``rewrite._folded``): pure functions of their argument, whose value is a tagged map of strings or a string.
FOLDABLE_CONSTRUCTORS = frozenset({"string_to_quantity", "string_to_ip", "string_to_cidr", "string_to_url",
                                   "string_to_semver", "string_jsonpatch_escapeKey_string"})
_PARSER_DEPTH = "Exceeded max recursion depth of 32 when parsing"
_EXPRESSION_DEPTH = "Expression recursion limit exceeded"
#: cel-cpp's parser stops at 32 levels of nesting (not configurable through cel-expr-python); cel-go's at 250.
PARSER_DEPTH_MESSAGE = (
    "ERROR: <input>:1:1: the expression nests deeper than the 32 levels staticadm's CEL parser (cel-cpp) accepts; "
    "kube-apiserver's (cel-go) accepts 250. Reduce the nesting: split long chains of '+' or of nested calls and "
    "conditionals into variables")
#: Protobuf (Python and C++) refuses messages nested more than 100 levels; every expression crosses it.
AST_DEPTH_MESSAGE = (
    "ERROR: <input>:1:1: the expression nests too deeply for staticadm to load (its syntax tree exceeds the "
    "100 levels protobuf decodes; about 24 nested comprehensions); kube-apiserver accepts up to 250 levels. "
    "Reduce the nesting, for example with variables")
#: Checker environments kept for typed variable placeholders (each ~3 ms to build, ~1 MB).
_TYPED_CHECKERS = 256


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
class TypeCheck:
    """One expression checked against a kind's schema: the errors ("" when none) and the result type."""

    errors: str
    result_type: str


_STEPPED = frozenset({("@stepped", "")})
_DIAGNOSTIC = ("@diagnostic", "")
_OBJECT_READS = frozenset({("@object-reads", "")})


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    source: str
    kind: ExpressionKind
    result_type: str
    program: Any = field(repr=False, compare=False)
    variables_used: frozenset[str]
    #: The checked expression rewritten for the runtime, before variables are linked in.
    prepared: Any = field(default=None, repr=False, compare=False)
    #: Its cost outside comprehensions, charged once per evaluation.
    static_cost: int = 0
    #: Whether one step of it may cost without bound: it calls a function charged by the product of two
    #: sizes (``contains``, ``matches``, ``find``); otherwise it costs at most ``cost.MAX_EXPRESSION_COST``.
    multiplies: bool = False
    #: For a variable, its index in the policy's declarations (who pays for the cost inside it).
    declaration_index: int = rewrite.BODY_OWNER
    #: The variables linked into ``program`` (declaration order), to explain their failures.
    linked_variables: tuple[tuple[str, CompiledExpression | CompileError], ...] = field(default=(), compare=False)
    environment: CelEnvironment | None = field(default=None, repr=False, compare=False)
    _relinked: dict[frozenset[tuple[str, str]], Any] = field(default_factory=dict, repr=False, compare=False)

    def evaluate(self, context: EvaluationContext) -> Any:
        """The expression's value (plain Python) or an ``EvalError``; never raises."""
        return context.run(self)

    def stepped(self) -> stepping.SteppedProgram:
        """This expression evaluated in steps (built on first need: only huge loops need it)."""
        cached = self._relinked.get(_STEPPED)
        if cached is None:
            assert self.environment is not None
            environment = self.environment
            cached = stepping.build(self.prepared, environment.deserialize_runtime)
            self._relinked[_STEPPED] = cached
        return cast(stepping.SteppedProgram, cached)

    def object_reads(self) -> dict[str, set[reads.ReadPath]]:
        """The paths of ``object``, ``oldObject`` and ``request`` this expression reads (``reads.read_paths``), found
        once: a snapshot build asks for every expression's, and most come unchanged from the previous load."""
        cached = self._relinked.get(_OBJECT_READS)
        if cached is None:
            cached = self._relinked[_OBJECT_READS] = reads.read_paths(self.prepared.expr, reads.PRUNED_ROOTS)
        return cast(dict[str, set[reads.ReadPath]], cached)

    def with_failed_variables(self, failures: Mapping[str, str]) -> Any:
        """This expression's program with the given variables linked as errors with those messages."""
        return self._relinked_program(failures, diagnostic=False)

    def diagnostic(self, failures: Mapping[str, str]) -> Any:
        """``with_failed_variables(failures)`` in the form that words errors as cel-go does where the engine's
        words lack the key (``rewrite.diagnostic``), built when an error first needs it."""
        return self._relinked_program(failures, diagnostic=True)

    def _relinked_program(self, failures: Mapping[str, str], *, diagnostic: bool) -> Any:
        names = {name for name, _ in self.linked_variables}
        relevant = frozenset((name, message) for name, message in failures.items() if name in names)
        if not relevant and not diagnostic:
            return self.program
        key = relevant | {_DIAGNOSTIC} if diagnostic else relevant
        program = self._relinked.get(key)
        if program is None:
            assert self.environment is not None
            program = self.environment.link_program(self, dict(relevant), diagnostic=diagnostic)
            if len(self._relinked) < 64:
                self._relinked[key] = program
        return program


class CelEnvironment:
    """An immutable pair of engine environments plus the compile pipeline around them."""

    def __init__(self, libraries: Sequence[ModuleType], extra_variables: Iterable[str] = (), *,
                 fold_literals: bool = True) -> None:
        """``fold_literals`` False leaves every constructor call, ``Object{...}`` and ``JSONPatch{...}``
        creations included, to run time (the straightforward evaluation the tests compare folding with)."""
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
        # Functions returning optional values are declared as returning map(int, T) and followed by [?0].
        returns_optional = [(function.name, overload.member) for function in functions
                            for overload in function.overloads if overload.result.startswith("optional_type(")]
        self._optional_members = frozenset(name for name, member in returns_optional if member)
        self._optional_globals = frozenset(name for name, member in returns_optional if not member)
        #: Functions with an overload implemented in Python: no optional value may reach them.
        self._python_functions = frozenset(
            function.name for function in functions
            if any(overload.overload_id not in _STANDARD_OVERLOAD_IDS for overload in function.overloads)
        ) | {"cel.@mapInsert", stepping.LOOP_FUNCTION}
        self.state = EvaluationState()
        self._fold_literals = fold_literals
        #: Constructors of Kubernetes values made at compile time when called on a literal.
        self._foldable = {overload.overload_id: overload.impl for function in functions
                          for overload in function.overloads
                          if fold_literals and overload.overload_id in FOLDABLE_CONSTRUCTORS}

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
            # Typed for checking as kube-apiserver declares them (BuildRequestType, BuildNamespaceType);
            # evaluation sees plain maps (runtime_variables below are all dyn).
            "request": cel.Type(ADMISSION_REQUEST_TYPE),
            "namespaceObject": cel.Type(NAMESPACE_TYPE),
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
        def checker(extra: Mapping[str, cel.Type], descriptor_pool: Any = None) -> Any:
            return cel.NewEnv(
                descriptor_pool=descriptor_pool or admission_pool(),
                config=cel.NewEnvConfigFromYaml(config_yaml),
                variables={**checker_variables, **extra},
                extensions=[ext_optional.ExtOptional()],
                functions=checker_decls,
            )

        self._new_checker = checker
        self._checker = checker({})
        #: Checkers with typed variable placeholders, by the tuple of their types (typed_variables.py).
        self._typed_checkers: dict[tuple[str, ...], Any] = {}
        #: Checkers with object/oldObject of a kind's schema type (type_check), by type and placeholders.
        self._schema_checkers: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._schema_checkers_lock = threading.Lock()
        self._opaque_names = opaque_names
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
        engine_overloads.extend(_refusing_overloads(function, opaque_names))
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
                self.state.current.charge(cost.PER_CALL_LIMIT + 1, rewrite.BODY_OWNER)
            return count

        def fail(message: str) -> bool:
            raise ValueError(message)

        def no_such_overload(function: str, argument: Any) -> bool:
            # cel-go's guarded overload (common/decls MaybeNoSuchOverload) names the function and the argument's type.
            raise ValueError(f"no such overload: {function}({string_format.type_name(argument)})")

        def map_insert_entry(target: dict[Any, Any], key: Any, value: Any) -> dict[Any, Any]:
            if key in target:
                raise ValueError(f"insert failed: key {key!r} already exists")
            return to_engine({**target, key: value})

        def map_insert_map(target: dict[Any, Any], other: dict[Any, Any]) -> dict[Any, Any]:
            for key in other:
                if key in target:
                    raise ValueError(f"insert failed: key {key!r} already exists")
            return to_engine({**target, **other})

        T = cel.Type
        map_insert_entries = [
            cel.Overload("cel_mapinsert" + suffix, T.MAP, params, impl=map_insert_entry)
            for suffix, params in _concrete_parameter_types(("map(dyn, dyn)", "dyn", "dyn"), frozenset())
            if params[1] in _MAP_KEY_TYPES
        ]
        state = self.state
        return [
            cel.FunctionDecl(cost.TICK_FUNCTION, [
                cel.Overload("staticadm_tick", T.BOOL, [T.INT], impl=state.tick),
                cel.Overload("staticadm_tick_owner", T.BOOL, [T.INT, T.INT], impl=state.tick),
            ]),
            *(decl for owner in cost.FIXED_TICK_OWNERS for decl in self._fixed_tick_decls(owner)),
            cel.FunctionDecl(cost.CHARGE_FUNCTION,
                             [cel.Overload("staticadm_charge", T.BOOL, [T.INT], impl=state.charge)]),
            *(cel.FunctionDecl(cost.fixed_charge_function(amount), [
                cel.Overload(f"staticadm_charge{amount}", T.BOOL, [], impl=state.fixed_charge(amount))])
              for amount in range(1, cost.MAX_FIXED_CHARGE + 1)),
            cel.FunctionDecl(cost.CHARGE_OWNER_FUNCTION,
                             [cel.Overload("staticadm_charge_for", T.BOOL, [T.INT, T.INT], impl=state.charge_for)]),
            cel.FunctionDecl(linking.FAIL_FUNCTION, [cel.Overload("staticadm_fail", T.BOOL, [T.STRING], impl=fail)]),
            cel.FunctionDecl(rewrite.DIRECT_FUNCTION,
                             [cel.Overload("staticadm_direct", T.BOOL, [], impl=state.direct)]),
            cel.FunctionDecl(rewrite.LISTER_ENTER_FUNCTION,
                             [cel.Overload("staticadm_lister_enter", T.BOOL, [], impl=state.lister_enter)]),
            cel.FunctionDecl(rewrite.LISTER_LEAVE_FUNCTION,
                             [cel.Overload("staticadm_lister_leave", T.BOOL, [], impl=state.lister_leave)]),
            cel.FunctionDecl(rewrite.LISTER_MARK_FUNCTION,
                             [cel.Overload("staticadm_lister_mark", T.BOOL, [], impl=state.lister_mark)]),
            cel.FunctionDecl(rewrite.LISTER_CHECK_FUNCTION,
                             [cel.Overload("staticadm_lister_check", T.BOOL, [], impl=state.lister_check)]),
            cel.FunctionDecl(stepping.VARIABLE_FUNCTION,
                             [cel.Overload("staticadm_variable", T.DYN, [T.STRING], impl=state.variable)]),
            cel.FunctionDecl(stepping.LOOP_FUNCTION, [
                cel.Overload("staticadm_loop" + suffix, T.DYN, params, impl=state.loop)
                for suffix, params in _concrete_parameter_types(("int", "dyn", "dyn", "list(dyn)"), frozenset())
                if params[1] in (T.LIST, T.MAP)
            ]),
            cel.FunctionDecl(rewrite.NO_SUCH_OVERLOAD_FUNCTION, [
                cel.Overload("staticadm_no_such_overload" + suffix, T.BOOL, params, impl=no_such_overload)
                for suffix, params in _concrete_parameter_types(("string", "dyn"), frozenset())]),
            cel.FunctionDecl(rewrite.QUANTITY_VALUE_FUNCTION, [
                cel.Overload("staticadm_quantity_value", T.MAP, [T.MAP], impl=quantity.equality_key)]),
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

    def _fixed_tick_decls(self, owner: int | None) -> list[cel.FunctionDecl]:
        """The argument-free ticks of one owner's loops (``cost.fixed_tick_parts``): one per weight, and the
        unchecked addition of the largest."""
        state, T = self.state, cel.Type
        charged = rewrite.BODY_OWNER if owner is None else owner
        suffix = "" if owner is None else f"_{owner}"
        largest = cost.largest_fixed_tick(owner)
        return [
            *(cel.FunctionDecl(cost.fixed_tick_function(weight, owner), [
                cel.Overload(f"staticadm_tick{weight}{suffix}", T.BOOL, [],
                             impl=state.fixed_tick(weight, charged))])
              for weight in range(largest + 1)),
            cel.FunctionDecl(cost.tick_ahead_function(owner), [
                cel.Overload(f"staticadm_tick_ahead{suffix}", T.BOOL, [],
                             impl=functools.partial(state.tick_ahead, largest, charged))]),
        ]

    # -- compilation --------------------------------------------------------------------------------

    def _checker_for(self, types: tuple[str, ...]) -> Any:
        if not types:
            return self._checker
        found = self._typed_checkers.get(types)
        if found is None:
            if len(self._typed_checkers) >= _TYPED_CHECKERS:
                self._typed_checkers.pop(next(iter(self._typed_checkers)))
            found = self._new_checker({typed_variables.PLACEHOLDER.format(index): parse_type(
                type_name, self._opaque_names, runtime=False) for index, type_name in enumerate(types)})
            self._typed_checkers[types] = found
        return found

    def type_check(self, source: str, object_type: KindType, variable_types: Mapping[str, str]) -> TypeCheck:
        """``source`` checked with ``object`` and ``oldObject`` of ``object_type``, as kube-apiserver's
        TypeChecker compiles it: the errors in cel-go's words (empty when it checks), and its type.
        Only for warnings: evaluation keeps using the programs :meth:`compile` makes."""
        edits = [*macros.exists_one_edits(source),
                 *optional_results.optional_call_edits(source, self._optional_members, self._optional_globals)]
        typed = typed_variables.placeholders(source, variable_types)
        edits.extend(typed.edits)
        rewritten = lexer.apply(source, edits)
        key = (object_type.type_name, typed.types)
        # `check` and the daemon's after-reload warnings may type-check from more than one thread.
        with self._schema_checkers_lock:
            checker = self._schema_checkers.get(key)
            if checker is None:
                if len(self._schema_checkers) >= _TYPED_CHECKERS:
                    self._schema_checkers.pop(next(iter(self._schema_checkers)))
                message = cel.Type(object_type.type_name)
                extra = {typed_variables.PLACEHOLDER.format(index): parse_type(type_name, self._opaque_names,
                                                                               runtime=False)
                         for index, type_name in enumerate(typed.types)}
                checker = self._new_checker({"object": message, "oldObject": message, **extra}, object_type.pool)
                self._schema_checkers[key] = checker
        try:
            checked_program = checker.compile(rewritten.text)
        except RuntimeError as error:
            text = rewritten.restore_errors(engine_error_text(str(error)))
            return TypeCheck(messages.compile_error_text(text, source, functions=self._function_names), "dyn")
        try:
            checked = ast.decode(checked_program.serialize())
        except DecodeError:
            return TypeCheck("", "dyn")
        result_type = ast.type_name(checked.type_map[checked.expr.id]) if checked.expr.id in checked.type_map else "dyn"
        return TypeCheck("", result_type)

    def compile(
        self, source: str, kind: ExpressionKind, *, variable_names: Sequence[str] | None = (),
        variable_types: Mapping[str, str] | None = None,
    ) -> CompiledExpression | CompileError:
        """Compiles ``source`` as Kubernetes would; errors come back as values with cel-go's wording.

        ``variable_names`` are the policy variables visible to the expression; ``None`` skips the check
        (the playground, where ``variables`` is just a map). ``variable_types`` gives their compiled
        types, so ``variables.<name>`` is checked with the type Kubernetes declares for it.
        """
        edits = [*macros.exists_one_edits(source),
                 *optional_results.optional_call_edits(source, self._optional_members, self._optional_globals)]
        typed = typed_variables.placeholders(source, variable_types or {})
        edits.extend(typed.edits)
        if self.struct_syntax:
            try:
                edits.extend(structs.struct_creation_edits(source))
            except structs.StructSyntaxError as error:
                return CompileError(f"ERROR: <input>:1:1: {error}")
        rewritten = lexer.apply(source, edits)
        try:
            checked_program = self._checker_for(typed.types).compile(rewritten.text)
        except RuntimeError as error:
            if _PARSER_DEPTH in str(error) or _EXPRESSION_DEPTH in str(error):
                return CompileError(PARSER_DEPTH_MESSAGE)
            text = rewritten.restore_errors(engine_error_text(str(error)))
            return CompileError(messages.compile_error_text(text, source, functions=self._function_names))
        try:
            checked = ast.decode(checked_program.serialize())
        except DecodeError:
            return CompileError(AST_DEPTH_MESSAGE)
        typed_variables.restore_selections(checked, typed.names)
        narrowed = narrowing.analyze(checked)
        issues = [
            *validators.check_homogeneous_literals(checked),
            *validators.check_flatten_targets(checked),
            *validators.check_literal_arguments(checked, self._literal_error),
            *validators.check_typed_variables(checked, None if variable_names is None or kind is
                                              ExpressionKind.MATCH_CONDITION else frozenset(variable_names)),
            *(validators.check_undeclared(checked, "variables") if kind is ExpressionKind.MATCH_CONDITION else ()),
            *(validators.check_undeclared(checked, "authorizer") if kind is ExpressionKind.MESSAGE_EXPRESSION
              else ()),
            *(validators.Issue(issue.node_id, issue.message) for issue in string_format.validate_format_calls(checked)),
            *narrowed.issues,
        ]
        if issues:
            rendered = []
            for issue in sorted(issues, key=lambda i: ast.position_of(checked, i.node_id)):
                line, column = ast.position_of(checked, issue.node_id)
                rendered.append(validators.format_issue(rewritten.text, line, column - issue.shift, issue.message))
            return CompileError(rewritten.restore_errors("\n".join(rendered)))
        result_type = ast.type_name(checked.type_map[checked.expr.id]) if checked.expr.id in checked.type_map else "dyn"
        allowed = RESULT_TYPES[kind]
        if allowed is not None and result_type not in allowed:
            # Kubernetes types an Object.<path>{...} creation by its path; here it is dyn.
            shown = structs.creation_type(checked.expr) or result_type
            if len(allowed) == 1:
                return CompileError(f"must evaluate to {allowed[0]} but got {shown}")
            return CompileError(f"must evaluate to one of [{' '.join(allowed)}] but got {shown}")
        folding_error = self._constant_conversion_error(checked)
        if folding_error is not None:
            return CompileError(f"program instantiation failed: {folding_error}")
        null_variables = frozenset({"namespaceObject"}) if kind is ExpressionKind.MATCH_CONDITION else frozenset()
        declaration_index = len(variable_names or ()) if kind is ExpressionKind.VARIABLE else rewrite.BODY_OWNER
        boundary.guard(checked, self._python_functions)
        prepared = rewrite.prepare(checked, opaque_types=frozenset(self.opaque_types), null_variables=null_variables,
                                   owner=declaration_index, typed_calls=self._typed_calls, foldable=self._foldable,
                                   struct_literals=self._fold_literals, guards=narrowed.guards)
        try:
            program = self._runtime.deserialize(ast.encode(prepared.checked))
        except RuntimeError as error:
            if "too deep" in str(error) or "recursion limit" in str(error):
                return CompileError(AST_DEPTH_MESSAGE)
            return CompileError(f"program instantiation failed: {engine_error_text(str(error))}")
        return CompiledExpression(
            source=source,
            kind=kind,
            result_type=result_type,
            program=program,
            variables_used=linking.direct_uses(checked),
            prepared=prepared.checked,
            static_cost=prepared.static_cost,
            multiplies=prepared.multiplies,
            declaration_index=declaration_index,
            environment=self,
        )

    def link(self, expression: CompiledExpression,
             variables: Sequence[tuple[str, CompiledExpression | CompileError]]) -> CompiledExpression | CompileError:
        """``expression`` with the variables it reads (``variables``: the policy's, declaration order,
        each already linked) bound into its program, evaluated lazily by the engine. A CompileError when
        the linked program is too deep for the engine to load."""
        needed = linking.closure(expression.variables_used, [(name, _linkable(value)) for name, value in variables])
        if not needed:
            return expression
        chosen = tuple((name, value) for name, value in variables if name in needed)
        multiplies = expression.multiplies or any(
            isinstance(value, CompiledExpression) and value.multiplies for _, value in chosen)
        linked = replace(expression, linked_variables=chosen, _relinked={}, multiplies=multiplies)
        try:
            return replace(linked, program=self.link_program(linked, {}))
        except RuntimeError:
            return CompileError(AST_DEPTH_MESSAGE)

    def conjunction(self, expressions: Sequence[CompiledExpression]) -> Any | None:
        """One engine program that is true exactly when every one of ``expressions`` (bool expressions, in this
        environment) is: their runtime forms joined with ``&&`` in a balanced tree, each node renumbered. It
        charges what they charge together, so a true result stands for every one of them having been true at
        the sum of their costs; anything else says nothing, and the expressions are run one by one (see
        ``EvaluationContext.run_conjunction``). None when it cannot be built: an expression reads variables
        (they are charged per scope), or the engine refuses the program."""
        if len(expressions) < 2 or any(expression.linked_variables or expression.result_type != "bool"
                                       for expression in expressions):
            return None
        joined = ast.CheckedExpr()
        ids = rewrite.Ids(0)
        parts = [fusion.renumbered(expression.prepared, ids, joined) for expression in expressions]
        joined.expr.CopyFrom(fusion.conjunction(parts, ids, joined))
        try:
            return self._runtime.deserialize(ast.encode(joined))
        except RuntimeError:
            return None

    def fuse(self, policies: Sequence[fusion.FusedPolicy]) -> tuple[Any, fusion.FusedLayout] | None:
        """The program answering whether ``policies`` are all clear for a request (``fusion.fuse``) and where its
        result says what; None when the engine refuses it (too deep, for one)."""
        checked, layout = fusion.fuse(policies)
        boundary.guard(checked, self._python_functions)
        try:
            return self._runtime.deserialize(ast.encode(checked)), layout
        except RuntimeError:
            return None

    def deserialize_runtime(self, serialized: bytes) -> Any:
        return self._runtime.deserialize(serialized)

    def link_program(self, expression: CompiledExpression, failures: Mapping[str, str], *,
                     diagnostic: bool = False) -> Any:
        """The program of ``expression`` over its linked variables, the ``failures`` linked as errors; with
        ``diagnostic``, in the form that only words errors (``rewrite.diagnostic``)."""
        components: list[tuple[str, linking.LinkedVariable]] = []
        for name, value in expression.linked_variables:
            if name in failures:
                components.append((name, failures[name]))
            else:
                components.append((name, _linkable(value)))
        linked = linking.link(expression.prepared, components)
        safe: frozenset[int] = frozenset()
        if diagnostic:
            # The diagnostic form binds operands whose types it no longer knows: a call the form it is made from
            # may make stays one (it runs the same values), or the diagnosis would report the refusal instead.
            safe = boundary.untainted_calls(linked, self._python_functions)
            linked = rewrite.diagnostic(linked)
        boundary.guard(linked, self._python_functions, safe)
        return self._runtime.deserialize(ast.encode(linked))

    def _constant_conversion_error(self, checked: Any) -> str | None:
        """cel-go's error for the first type conversion of a constant that fails, as kube-apiserver's program
        planner folds them (``validators.constant_conversions``); None when every one has a value."""
        for node in validators.constant_conversions(checked):
            probe = ast.CheckedExpr()
            probe.expr.CopyFrom(node)
            for part in ast.walk(probe.expr):
                if part.id in checked.reference_map:
                    probe.reference_map[part.id].CopyFrom(checked.reference_map[part.id])
                if part.id in checked.type_map:
                    probe.type_map[part.id].CopyFrom(checked.type_map[part.id])
            try:
                program = self._runtime.deserialize(ast.encode(probe))
            except RuntimeError:
                continue
            outcome = self._evaluate_alone(program, runtime_error)
            if isinstance(outcome, EvalError):
                return outcome.message
        return None

    def _evaluate_alone(self, program: Any, words: Callable[[str], str]) -> Any:
        """The value of a program that reads no variable (a literal's check, a constant's folding), or an
        EvalError, the engine's exceptions worded by ``words``."""
        previous = self.state.enter(self.new_context({}, budget=None))
        try:
            return to_python(program.eval(self._runtime.Activation(data={})))
        except RuntimeError as error:
            return EvalError(words(str(error)))
        finally:
            self.state.leave(previous)

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
        outcome = self._evaluate_alone(self._runtime.deserialize(ast.encode(probe)), engine_error_text)
        if not isinstance(outcome, EvalError):
            return None
        if function in ("find", "findAll"):
            return outcome.message
        return f"invalid {function} argument"

    # -- evaluation ---------------------------------------------------------------------------------

    def new_activation(self, data: Mapping[str, Any]) -> SharedActivation:
        """An engine activation over ``data``, to share between contexts of one request."""
        plain = dict(data)
        return SharedActivation(self._runtime.Activation(data=plain), plain)

    def new_context(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        activation: Any = None,
        request_deadline: float | None = None,
        budget: CostBudget | int | None = cost.RUNTIME_CEL_COST_BUDGET,
        variables: Any = None,
        native_nests: bool = True,
    ) -> EvaluationContext:
        """A cost scope over ``data`` (or over a shared ``activation`` from ``new_activation``); the engine
        converts the data lazily. ``budget`` is the scope's runtime cost budget (an int for a fresh one, a
        ``CostBudget`` to share what another scope left, None for no budget); ``request_deadline``
        (``time.perf_counter``) is the backstop for every context of one request. ``variables`` is
        accepted for callers of the earlier API: variables are linked into each program now. ``native_nests``
        False runs every loop of a stepped evaluation delegated (``EvaluationContext.run_loop``)."""
        del variables
        return EvaluationContext(self._runtime, self.state, data or {}, activation, request_deadline, budget,
                                 native_nests=native_nests)


def _linkable(value: CompiledExpression | CompileError) -> linking.LinkedVariable:
    if isinstance(value, CompileError):
        return value.message
    return value.prepared


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


def _kinds(param: str, opaque_names: frozenset[str]) -> tuple[str, ...]:
    """The ``_CONCRETE_KINDS`` names of the runtime values a declared parameter takes."""
    kind = runtime_kind(param, opaque_names)
    if kind == "DYN":
        return tuple(name for name, _ in _CONCRETE_KINDS)
    return ({"list": "list", "map": "map", "NULL": "null"}.get(kind) or kind.lower(),)


def _refusing_overloads(function: Function, opaque_names: frozenset[str]) -> list[cel.Overload]:
    """For a function with a Kubernetes value among its parameters (carried as a map), overloads taking a map there
    with every combination of the other arguments' kinds it has no overload for, refusing them in Python, which
    sees the value's type: ``no such overload: containsIP(net.CIDR, int)`` as cel-go words it, where the engine
    would name the map. Arguments holding optional values never get here (``boundary``)."""
    declared = [o for o in function.overloads if o.overload_id not in _STANDARD_OVERLOAD_IDS]
    covered: set[tuple[bool, tuple[str, ...]]] = set()
    shapes: set[tuple[bool, tuple[bool, ...]]] = set()
    for overload in declared:
        kinds = [_kinds(param, opaque_names) for param in overload.params]
        covered.update((overload.member, combination) for combination in itertools.product(*kinds))
        opaque = tuple(param.strip() in opaque_names for param in overload.params)
        if any(opaque):
            shapes.add((overload.member, opaque))
    names = dict(_CONCRETE_KINDS)

    def refuse(*args: Any) -> Any:
        raise ValueError(f"no such overload: {function.name}("
                         f"{', '.join(string_format.type_name(arg) for arg in args)})")

    refusing = []
    for member, opaque in sorted(shapes):
        # The first Kubernetes value stays a map (the receiver, mostly); every other argument takes any kind.
        first = opaque.index(True)
        choices = [("map",) if position == first else tuple(names) for position in range(len(opaque))]
        for combination in itertools.product(*choices):
            if (member, combination) in covered:
                continue
            covered.add((member, combination))
            refusing.append(cel.Overload(f"staticadm_refuse_{function.name}_{'_'.join(combination)}"
                                         f"{'_member' if member else ''}", cel.Type.BOOL,
                                         [names[kind] for kind in combination], is_member=member, impl=refuse))
    return refusing


def _dispatching_impl(name: str, overloads: Sequence[Overload],
                      opaque_names: frozenset[str]) -> Callable[..., Any]:
    candidates = [(tuple(p if p in opaque_names else None for p in o.params), _runtime_impl(o)) for o in overloads]

    def dispatch(*args: Any) -> Any:
        for tags, impl in candidates:
            if all(tag is None or opaque_type_name(arg) == tag for tag, arg in zip(tags, args, strict=True)):
                return impl(*args)
        # cel-go's dispatcher (common/decls noSuchOverload) names the function and the arguments' types.
        raise ValueError(f"no such overload: {name}({', '.join(string_format.type_name(arg) for arg in args)})")

    return dispatch


def _runtime_impl(overload: Overload) -> Callable[..., Any]:
    impl = overload.impl
    # Values that can hold a duration or timestamp: collections, dyn, and Object/JSONPatch (their fields).
    if overload.result.startswith(("list(", "map(", "dyn")) or overload.result in (structs.OBJECT_TYPE,
                                                                                  structs.JSONPATCH_TYPE):
        impl = _time_values_for_engine(impl)
    if not overload.result.startswith("optional_type("):
        return impl

    def optional_result(*args: Any) -> Any:
        # The [?0] after the call (optional_results.py) makes {} optional.none() and {0: v} optional.of(v).
        value = impl(*args)
        return {} if value is None else {0: value}

    return optional_result


def _time_values_for_engine(impl: Callable[..., Any]) -> Callable[..., Any]:
    def converted(*args: Any) -> Any:
        result = impl(*args)
        if isinstance(result, list | dict) and holds_time_values(result):
            return to_engine(result)
        return result

    return converted


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
