"""The immutable, compiled configuration one request is evaluated against.

A snapshot is built once per successful (re)load and then only read, so requests never see a
half-applied configuration. It keeps Kubernetes' evaluation order (policies by name, each policy's
bindings by name) and a match index so that a request only looks at policies whose matchConstraints
could match its operation, group and resource: a request no policy matches costs the same with 1000
policies as with 10.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from staticadm.cel import CompiledExpression, CompileError, ExpressionKind, admission_environment, compile_expression
from staticadm.model import (
    AuditAnnotation,
    MatchCondition,
    MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding,
    Mutation,
    NamedRuleWithOperations,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    Validation,
)

Program = CompiledExpression | CompileError

_NAMESPACE_OBJECT = re.compile(r"\bnamespaceObject\b")
_VAP = ValidatingAdmissionPolicy.KIND
_MAP = MutatingAdmissionPolicy.KIND


@dataclass(frozen=True, slots=True)
class CompiledValidation:
    validation: Validation
    expression: Program
    #: None when the validation has no messageExpression.
    message_expression: Program | None


@dataclass(frozen=True, slots=True)
class CompiledValidatingPolicy:
    policy: ValidatingAdmissionPolicy
    #: This policy's bindings, by name (the order kube-apiserver evaluates them in).
    bindings: tuple[ValidatingAdmissionPolicyBinding, ...]
    match_conditions: tuple[tuple[MatchCondition, Program], ...]
    #: Variables in declaration order; a failed compile stays as its error for the message.
    variables: Mapping[str, Program]
    validations: tuple[CompiledValidation, ...]
    audit_annotations: tuple[tuple[AuditAnnotation, Program], ...]
    #: Whether any expression reads ``namespaceObject`` (textually: a false positive only makes an
    #: unknown namespace an error instead of a silent null).
    uses_namespace_object: bool
    #: The variables that compiled, as evaluation contexts take them.
    compiled_variables: Mapping[str, CompiledExpression] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def name(self) -> str:
        return self.policy.metadata.name

    @property
    def failure_policy(self) -> str:
        return self.policy.spec.failure_policy or "Fail"


@dataclass(frozen=True, slots=True)
class CompiledMutation:
    mutation: Mutation
    #: The applyConfiguration or jsonPatch expression.
    expression: Program

    @property
    def source(self) -> str:
        spec = self.mutation.apply_configuration or self.mutation.json_patch
        return spec.expression if spec is not None else ""


@dataclass(frozen=True, slots=True)
class CompiledMutatingPolicy:
    policy: MutatingAdmissionPolicy
    bindings: tuple[MutatingAdmissionPolicyBinding, ...]
    match_conditions: tuple[tuple[MatchCondition, Program], ...]
    #: Compiled in the mutating environment: mutation expressions read them lazily from their own context.
    variables: Mapping[str, Program]
    mutations: tuple[CompiledMutation, ...]
    uses_namespace_object: bool
    compiled_variables: Mapping[str, CompiledExpression] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def name(self) -> str:
        return self.policy.metadata.name

    @property
    def failure_policy(self) -> str:
        return self.policy.spec.failure_policy or "Fail"

    @property
    def reinvocation_policy(self) -> str:
        return self.policy.spec.reinvocation_policy or "Never"


IndexKey = tuple[str, str, str]
MatchIndex = Mapping[IndexKey, tuple[int, ...]]


def _empty_index() -> MatchIndex:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Snapshot:
    validating: tuple[CompiledValidatingPolicy, ...] = ()
    mutating: tuple[CompiledMutatingPolicy, ...] = ()
    content_hash: str = ""
    #: (operation or "*", API group or "*", resource or "*") -> indexes into ``validating``.
    match_index: MatchIndex = field(default_factory=_empty_index)
    #: The same for ``mutating``.
    mutating_match_index: MatchIndex = field(default_factory=_empty_index)
    directory: str = ""

    @classmethod
    def empty(cls) -> Snapshot:
        return cls()

    @property
    def validating_policy_count(self) -> int:
        return len(self.validating)

    @property
    def validating_binding_count(self) -> int:
        return sum(len(p.bindings) for p in self.validating)

    @property
    def mutating_policy_count(self) -> int:
        return len(self.mutating)

    @property
    def mutating_binding_count(self) -> int:
        return sum(len(p.bindings) for p in self.mutating)

    def candidates(self, operation: str, resources: Iterable[tuple[str, str]], *,
                   mutating: bool = False) -> tuple[int, ...]:
        """Indexes of the policies that could match, in evaluation order.

        ``resources`` are the (group, resource) pairs the request may be matched as: the original
        one and the version the webhook received.
        """
        index = self.mutating_match_index if mutating else self.match_index
        found: set[int] = set()
        for group, resource in resources:
            for op in (operation, "*"):
                for g in (group, "*"):
                    for r in (resource, "*"):
                        found.update(index.get((op, g, r), ()))
        return tuple(sorted(found))


def _lookup(compiled: Mapping[str, Any], policy_kind: str, name: str, path: str, source: str, kind: ExpressionKind,
            variable_names: Iterable[str], *, mutating: bool = False) -> Program:
    program = compiled.get(f"{policy_kind}/{name}/{path}")
    if isinstance(program, CompiledExpression):
        return program
    # The loader keeps every program it compiled; compiling here only covers a loader without one.
    names = list(variable_names)
    types = {}
    for index, variable in enumerate(names):
        earlier = compiled.get(f"{policy_kind}/{name}/spec.variables[{index}].expression")
        types[variable] = getattr(earlier, "result_type", "dyn")
    return compile_expression(source, kind, variable_names=names, variable_types=types, mutating=mutating)


def _link_variables(variables: Mapping[str, Program], *, mutating: bool) -> dict[str, Program]:
    """Each variable with the earlier variables it reads linked into its program (declaration order)."""
    environment = admission_environment(mutating)
    linked: list[tuple[str, Program]] = []
    for name, program in variables.items():
        if isinstance(program, CompiledExpression):
            program = environment.link(program, linked)
        linked.append((name, program))
    return dict(linked)


def _linked(program: Program, variables: Mapping[str, Program], *, mutating: bool) -> Program:
    """``program`` with the policy's variables it reads bound in, evaluated by the engine."""
    if not isinstance(program, CompiledExpression) or not program.variables_used:
        return program
    return admission_environment(mutating).link(program, list(variables.items()))


def _uses_namespace_object(sources: Iterable[str]) -> bool:
    return any(_NAMESPACE_OBJECT.search(source) for source in sources)


def compile_validating_policy(policy: ValidatingAdmissionPolicy,
                              bindings: tuple[ValidatingAdmissionPolicyBinding, ...],
                              compiled: Mapping[str, Any]) -> CompiledValidatingPolicy:
    spec, name = policy.spec, policy.metadata.name
    variable_names = [v.name for v in spec.variables]
    variables: dict[str, Program] = {}
    for i, variable in enumerate(spec.variables):
        variables[variable.name] = _lookup(compiled, _VAP, name, f"spec.variables[{i}].expression", variable.expression,
                                           ExpressionKind.VARIABLE, variable_names[:i])
    variables = _link_variables(variables, mutating=False)
    match_conditions = tuple(
        (condition, _lookup(compiled, _VAP, name, f"spec.matchConditions[{i}].expression", condition.expression.strip(),
                            ExpressionKind.MATCH_CONDITION, ()))
        for i, condition in enumerate(spec.match_conditions))
    validations = []
    for i, validation in enumerate(spec.validations):
        message_program = None
        if validation.message_expression.strip():
            message_program = _linked(_lookup(compiled, _VAP, name, f"spec.validations[{i}].messageExpression",
                                              validation.message_expression, ExpressionKind.MESSAGE_EXPRESSION,
                                              variable_names), variables, mutating=False)
        validations.append(CompiledValidation(
            validation,
            _linked(_lookup(compiled, _VAP, name, f"spec.validations[{i}].expression", validation.expression,
                            ExpressionKind.VALIDATION, variable_names), variables, mutating=False),
            message_program))
    audit_annotations = tuple(
        (annotation, _linked(_lookup(compiled, _VAP, name, f"spec.auditAnnotations[{i}].valueExpression",
                                     annotation.value_expression.strip(), ExpressionKind.AUDIT_ANNOTATION,
                                     variable_names), variables, mutating=False))
        for i, annotation in enumerate(spec.audit_annotations))
    sources = [v.expression for v in spec.variables]
    sources += [v.expression + "\n" + v.message_expression for v in spec.validations]
    sources += [a.value_expression for a in spec.audit_annotations]
    return CompiledValidatingPolicy(
        policy=policy,
        bindings=bindings,
        match_conditions=match_conditions,
        variables=MappingProxyType(variables),
        validations=tuple(validations),
        audit_annotations=audit_annotations,
        uses_namespace_object=_uses_namespace_object(sources),
        compiled_variables=_compiled_only(variables),
    )


def _compiled_only(variables: Mapping[str, Program]) -> Mapping[str, CompiledExpression]:
    return MappingProxyType({name: program for name, program in variables.items()
                             if isinstance(program, CompiledExpression)})


def compile_mutating_policy(policy: MutatingAdmissionPolicy, bindings: tuple[MutatingAdmissionPolicyBinding, ...],
                            compiled: Mapping[str, Any]) -> CompiledMutatingPolicy:
    spec, name = policy.spec, policy.metadata.name
    variable_names = [v.name for v in spec.variables]
    variables: dict[str, Program] = {}
    for i, variable in enumerate(spec.variables):
        variables[variable.name] = _lookup(compiled, _MAP, name, f"spec.variables[{i}].expression",
                                           variable.expression, ExpressionKind.VARIABLE, variable_names[:i],
                                           mutating=True)
    variables = _link_variables(variables, mutating=True)
    match_conditions = tuple(
        (condition, _lookup(compiled, _MAP, name, f"spec.matchConditions[{i}].expression",
                            condition.expression.strip(), ExpressionKind.MATCH_CONDITION, ()))
        for i, condition in enumerate(spec.match_conditions))
    mutations = []
    for i, mutation in enumerate(spec.mutations):
        if mutation.patch_type == "JSONPatch" and mutation.json_patch is not None:
            path, source, kind = (f"spec.mutations[{i}].jsonPatch.expression", mutation.json_patch.expression,
                                  ExpressionKind.JSON_PATCH)
        elif mutation.apply_configuration is not None:
            path, source, kind = (f"spec.mutations[{i}].applyConfiguration.expression",
                                  mutation.apply_configuration.expression, ExpressionKind.APPLY_CONFIGURATION)
        else:
            continue
        mutations.append(CompiledMutation(mutation, _linked(_lookup(compiled, _MAP, name, path, source.strip(), kind,
                                                                    variable_names, mutating=True),
                                                            variables, mutating=True)))
    sources = [v.expression for v in spec.variables] + [m.source for m in mutations]
    return CompiledMutatingPolicy(
        policy=policy,
        bindings=bindings,
        match_conditions=match_conditions,
        variables=MappingProxyType(variables),
        mutations=tuple(mutations),
        uses_namespace_object=_uses_namespace_object(sources),
        compiled_variables=_compiled_only(variables),
    )


def _index_keys(rules: Iterable[NamedRuleWithOperations]) -> set[IndexKey]:
    keys: set[IndexKey] = set()
    for rule in rules:
        for entry in rule.resources:
            resource = entry.partition("/")[0]
            for operation in rule.operations:
                for group in rule.api_groups:
                    keys.add((operation, group, resource))
    return keys


def _index(policies: Iterable[Any]) -> MatchIndex:
    index: dict[IndexKey, list[int]] = {}
    for position, compiled in enumerate(policies):
        if not compiled.bindings:
            # A policy without bindings never fires; leaving it out of the index keeps it free.
            continue
        constraints = compiled.policy.spec.match_constraints
        rules = constraints.resource_rules if constraints is not None else ()
        for key in _index_keys(rules) if rules else {("*", "*", "*")}:
            index.setdefault(key, []).append(position)
    return MappingProxyType({key: tuple(value) for key, value in index.items()})


def _bindings_by_policy(bindings: Iterable[Any]) -> dict[str, list[Any]]:
    by_policy: dict[str, list[Any]] = {}
    for binding in sorted(bindings, key=lambda b: b.metadata.name):
        by_policy.setdefault(binding.spec.policy_name, []).append(binding)
    return by_policy


class _PolicyMemo:
    """The compiled policies of the latest snapshot, for the next one: the loader hands back the very same
    policy and binding objects for unchanged manifests, so their compiled form can be reused as is."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}

    def compiled(self, policy: Any, bindings: tuple[Any, ...], compiled: Mapping[str, Any], fresh: dict[Any, Any],
                 build: Any) -> Any:
        key = (id(policy), *map(id, bindings))
        found = self.entries.get(key)
        if found is not None and found[0][0] is policy and all(a is b for a, b in zip(found[0][1:], bindings,
                                                                                        strict=True)):
            result = found[1]
        else:
            result = build(policy, bindings, compiled)
        fresh[key] = ((policy, *bindings), result)
        return result


_POLICY_MEMO = _PolicyMemo()


def build_snapshot(load_result: Any) -> Snapshot:
    """Builds the snapshot of a successful load (``LoadResult`` without errors)."""
    compiled: Mapping[str, Any] = getattr(load_result, "compiled", None) or {}
    fresh: dict[Any, Any] = {}
    validating_bindings = _bindings_by_policy(load_result.validating_bindings)
    validating = tuple(
        _POLICY_MEMO.compiled(policy, tuple(validating_bindings.get(policy.metadata.name, ())), compiled, fresh,
                              compile_validating_policy)
        for policy in sorted(load_result.validating_policies, key=lambda p: p.metadata.name))
    mutating_bindings = _bindings_by_policy(load_result.mutating_bindings)
    mutating = tuple(
        _POLICY_MEMO.compiled(policy, tuple(mutating_bindings.get(policy.metadata.name, ())), compiled, fresh,
                              compile_mutating_policy)
        for policy in sorted(load_result.mutating_policies, key=lambda p: p.metadata.name))
    _POLICY_MEMO.entries = fresh
    return Snapshot(
        validating=validating,
        mutating=mutating,
        content_hash=load_result.content_hash,
        match_index=_index(validating),
        mutating_match_index=_index(mutating),
        directory=getattr(load_result, "directory", ""),
    )
