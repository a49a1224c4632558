"""Validated policies compiled for evaluation: the typed values the loader hands to the snapshot.

The loader validates each policy as kube-apiserver's REST validation does, and that validation compiles
every expression through :class:`PolicyPrograms`, which keeps each program by where it stands in the
spec. A policy that validated is then assembled here (its variables linked into the programs that read
them) into a :class:`CompiledValidatingPolicy` or :class:`CompiledMutatingPolicy`; the snapshot only
attaches bindings and indexes them. Nothing is compiled twice and nothing is looked up by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from staticadm import gofmt
from staticadm.admission.matching.plan import MatchPlan
from staticadm.cel import CompiledExpression, CompileError, ExpressionKind, admission_environment, compile_expression
from staticadm.cel.cost import MAX_EXPRESSION_COST
from staticadm.model import (
    AuditAnnotation,
    MatchCondition,
    MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding,
    Mutation,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicySpec,
    Validation,
)

Program = CompiledExpression | CompileError

_NAMESPACE_OBJECT = re.compile(r"\bnamespaceObject\b")


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
    #: matchConstraints and each binding's matchResources (same order) as the request path matches them.
    match_plan: MatchPlan = field(init=False, repr=False, compare=False)
    binding_plans: tuple[MatchPlan, ...] = field(init=False, repr=False, compare=False)

    #: The validations' messageExpressions that compiled, and the most they can cost together (with every
    #: variable they read), or None when that has no bound (one multiplies sizes): see validating._messages.
    message_programs: tuple[CompiledExpression, ...] = field(init=False, repr=False, compare=False)
    message_cost_bound: int | None = field(init=False, repr=False, compare=False)
    #: The validations run together (see ``validations_together``): built on the first request that needs it,
    #: and shared by the copies a reload makes of this policy with other bindings.
    together: ValidationsTogether = field(default_factory=lambda: ValidationsTogether(), repr=False, compare=False)
    #: The programs of the sets of policies a request invokes with this one first (``admission/all_clear.py``):
    #: shared, like ``together``, by the copies a reload makes of this policy.
    sets: PolicySets = field(default_factory=lambda: PolicySets(), repr=False, compare=False)
    #: Whether the policy can take part in a set's program: every expression it evaluates for an allowed request
    #: compiled, none asks the authorizer (answered between rounds of evaluation), and its messageExpressions'
    #: cost has a bound (so a request that passes it never needs them).
    joins_sets: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _attach_match_plans(self)
        programs = tuple(validation.message_expression for validation in self.validations
                         if isinstance(validation.message_expression, CompiledExpression))
        object.__setattr__(self, "message_programs", programs)
        variables = {name for program in programs for name, _ in program.linked_variables}
        bound = None if any(program.multiplies for program in programs) else (
            sum(program.static_cost for program in programs) + MAX_EXPRESSION_COST * (len(programs) + len(variables)))
        object.__setattr__(self, "message_cost_bound", bound)
        evaluated = [*(program for _, program in self.match_conditions),
                     *(validation.expression for validation in self.validations),
                     *(program for _, program in self.audit_annotations)]
        object.__setattr__(self, "joins_sets", bound is not None
                           and all(isinstance(program, CompiledExpression) for program in evaluated)
                           and not any("authorizer" in source for source in policy_expression_sources(self.policy)))

    @property
    def name(self) -> str:
        return self.policy.metadata.name

    @property
    def failure_policy(self) -> str:
        return self.policy.spec.failure_policy or "Fail"

    def validations_together(self) -> ValidationsTogether:
        """The validations that read no variables (charged once per scope) and no authorizer (answered in rounds)
        as one engine program (``CelEnvironment.conjunction``), built once."""
        together = self.together
        if not together.built:
            fusable = [(index, expression) for index, validation in enumerate(self.validations)
                       if isinstance(expression := validation.expression, CompiledExpression)
                       and not expression.linked_variables and "authorizer" not in validation.validation.expression]
            expressions = [expression for _, expression in fusable]
            environment = expressions[0].environment if expressions else None
            together.program = environment.conjunction(expressions) if environment is not None else None
            together.indexes = tuple(index for index, _ in fusable) if together.program is not None else ()
            together.static_cost = sum(expression.static_cost for expression in expressions)
            together.built = True
        return together


@dataclass(slots=True)
class ValidationsTogether:
    """One engine program true exactly when every validation at ``indexes`` is, and their static costs together;
    ``program`` None when the validations only run one by one."""

    built: bool = False
    program: Any = None
    indexes: tuple[int, ...] = ()
    static_cost: int = 0


@dataclass(eq=False, slots=True)
class PolicySets:
    """What was built for sets of policies led by one policy, by the identity of the sets' members' own
    ``PolicySets`` (which the entries keep alive, so an identity is never reused while it is a key)."""

    built: dict[tuple[int, ...], Any] = field(default_factory=dict)


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
    #: matchConstraints and each binding's matchResources (same order) as the request path matches them.
    match_plan: MatchPlan = field(init=False, repr=False, compare=False)
    binding_plans: tuple[MatchPlan, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _attach_match_plans(self)

    @property
    def name(self) -> str:
        return self.policy.metadata.name

    @property
    def failure_policy(self) -> str:
        return self.policy.spec.failure_policy or "Fail"

    @property
    def reinvocation_policy(self) -> str:
        return self.policy.spec.reinvocation_policy or "Never"


def _attach_match_plans(compiled: CompiledValidatingPolicy | CompiledMutatingPolicy) -> None:
    # Built with the value (every replace() of bindings builds them again), so they always agree with it.
    object.__setattr__(compiled, "match_plan", MatchPlan(compiled.policy.spec.match_constraints, is_policy=True))
    object.__setattr__(compiled, "binding_plans", tuple(MatchPlan(binding.spec.match_resources, is_policy=False)
                                                        for binding in compiled.bindings))


@dataclass(frozen=True, slots=True)
class ExpressionSite:
    """One CEL expression of a policy: what it is, where it stands, and what it may read."""

    kind: ExpressionKind
    #: Position in its list (the variable, matchCondition, validation, auditAnnotation or mutation).
    index: int
    #: Field path for errors, e.g. ``spec.validations[2].expression``.
    field_path: str
    source: str
    #: The variables declared before it (all of them, except for variables themselves).
    variable_names: tuple[str, ...] = ()


_MUTATION_KINDS = (ExpressionKind.APPLY_CONFIGURATION, ExpressionKind.JSON_PATCH)


class ExpressionCompiler:
    """Compiles expressions as Kubernetes would, each distinct one once.

    Policies often repeat expressions (one template, many policies), and a reload repeats most of the last
    load's. One compiler serves one load; given the compiler of the load being served (``previous``), it takes
    that load's programs for the same input instead of compiling again. A program is a function of exactly
    what its key holds (the source, where it stands, the variables it may read and their types, the
    environment): the environments are built once per process and never change, and nothing else (no params,
    no schema loaded at run time) reaches the compiler. A compiler keeps only what its own load asked for, so
    what is remembered follows the directory being served, not every expression ever seen.
    """

    def __init__(self, previous: ExpressionCompiler | None = None) -> None:
        self._compiled: dict[tuple[Any, ...], Program] = {}
        #: (id of the program, ids of the variables linked) -> (program, variables, linked program); the inputs
        #: are held so that their ids stay theirs while the entry lives.
        self._links: dict[tuple[Any, ...], tuple[Program, tuple[Program, ...], Program]] = {}
        self._previous = previous
        #: The keys asked for since :meth:`track` (compile keys, then link keys marked "link").
        self._tracked: list[tuple[Any, ...]] | None = None

    def track(self) -> None:
        """Note the keys of what is asked from now on: what one object's programs are made of."""
        self._tracked = []

    def tracked(self) -> tuple[tuple[Any, ...], ...]:
        """The keys asked for since :meth:`track`; tracking stops."""
        keys, self._tracked = tuple(self._tracked or ()), None
        return keys

    def keep(self, keys: Iterable[tuple[Any, ...]]) -> None:
        """Keep the previous load's entries for ``keys`` (an object reused as it was checked, whose programs a
        later change of its document will ask for again)."""
        previous = self._previous
        if previous is None:
            return
        for key in keys:
            if key[0] == "link":
                entry = previous._links.get(key[1:])
                if entry is not None:
                    self._links.setdefault(key[1:], entry)
            else:
                program = previous._compiled.get(key)
                if program is not None:
                    self._compiled.setdefault(key, program)

    def compile(self, source: str, kind: ExpressionKind, variable_names: Sequence[str],
                variable_types: Mapping[str, str], mutating: bool) -> Program:
        key = (source, kind, tuple(variable_names), tuple(sorted(variable_types.items())), mutating)
        if self._tracked is not None:
            self._tracked.append(key)
        program = self._compiled.get(key)
        if program is None:
            program = self._previous._compiled.get(key) if self._previous is not None else None
            if program is None:
                program = compile_expression(source, kind, variable_names=tuple(variable_names),
                                             variable_types=variable_types, mutating=mutating)
            self._compiled[key] = program
        return program

    def link(self, program: CompiledExpression, variables: Sequence[tuple[str, Program]],
             mutating: bool) -> Program:
        """``program`` with ``variables`` (name, linked program) bound in, as the environment links it; the
        same inputs (the very same programs, as :meth:`compile` hands out) give the program linked before."""
        values = tuple(value for _, value in variables)
        key = (id(program), mutating, *((name, id(value)) for name, value in variables))
        if self._tracked is not None:
            self._tracked.append(("link", *key))
        entry = self._links.get(key)
        if entry is None and self._previous is not None:
            entry = self._previous._links.get(key)
        if entry is None or entry[0] is not program or any(a is not b for a, b in zip(entry[1], values, strict=True)):
            entry = (program, values, admission_environment(mutating).link(program, list(variables)))
        self._links[key] = entry
        return entry[2]

    def forget_previous(self) -> None:
        """The load is over: what it did not ask for of the previous load's programs is let go (a chain of
        compilers, one per reload, would keep every program ever compiled)."""
        self._previous = None


class PolicyPrograms:
    """The programs of one policy by site, filled in while the policy is validated."""

    def __init__(self, compiler: ExpressionCompiler, *, mutating_policy: bool) -> None:
        self.compiler = self._compiler = compiler
        self._mutating_policy = mutating_policy
        self._programs: dict[tuple[ExpressionKind, int], CompiledExpression] = {}

    def compile(self, site: ExpressionSite) -> str | None:
        """The validator's compile step: None, or Kubernetes' error detail for this expression."""
        # Variables are compiled in order before anything reads them: their types are known here.
        types = {name: self._variable_type(index) for index, name in enumerate(site.variable_names)}
        mutating = site.kind in _MUTATION_KINDS
        program = self._compiler.compile(site.source, site.kind, site.variable_names, types, mutating)
        if isinstance(program, CompileError):
            return program.message
        if self._mutating_policy and site.kind is ExpressionKind.VARIABLE:
            # Kubernetes checks MAP variables without the patch types, but mutation expressions read them
            # lazily from their own context, so the program kept for evaluation comes from that environment.
            program = self._compiler.compile(site.source, site.kind, site.variable_names, types, True)
            if isinstance(program, CompileError):
                return program.message
        self._programs[(site.kind, site.index)] = program
        return None

    def _variable_type(self, index: int) -> str:
        earlier = self._programs.get((ExpressionKind.VARIABLE, index))
        return earlier.result_type if earlier is not None else "dyn"

    def program(self, kind: ExpressionKind, index: int) -> CompiledExpression:
        """The program validation compiled; only asked for policies that validated without errors."""
        return self._programs[(kind, index)]


def _link_variables(compiler: ExpressionCompiler, variables: Mapping[str, Program], *,
                    mutating: bool) -> dict[str, Program]:
    """Each variable with the earlier variables it reads linked into its program (declaration order)."""
    linked: list[tuple[str, Program]] = []
    for name, program in variables.items():
        if isinstance(program, CompiledExpression):
            program = compiler.link(program, linked, mutating)
        linked.append((name, program))
    return dict(linked)


def _linked(compiler: ExpressionCompiler, program: Program, variables: Mapping[str, Program], *,
            mutating: bool) -> Program:
    """``program`` with the policy's variables it reads bound in, evaluated by the engine."""
    if not isinstance(program, CompiledExpression) or not program.variables_used:
        return program
    return compiler.link(program, list(variables.items()), mutating)


def mentions_namespace_object(sources: Iterable[str]) -> bool:
    return any(_NAMESPACE_OBJECT.search(source) for source in sources)


def policy_expression_sources(policy: ValidatingAdmissionPolicy | MutatingAdmissionPolicy) -> list[str]:
    """Every CEL expression of the policy, as written (variables, match conditions, validations and their
    messages, audit annotations, mutations)."""
    spec = policy.spec
    sources = [variable.expression for variable in spec.variables]
    sources += [condition.expression for condition in spec.match_conditions]
    if isinstance(spec, ValidatingAdmissionPolicySpec):
        sources += [v.expression + "\n" + v.message_expression for v in spec.validations]
        sources += [annotation.value_expression for annotation in spec.audit_annotations]
    else:
        for mutation in spec.mutations:
            patch = mutation.apply_configuration or mutation.json_patch
            sources.append(patch.expression if patch is not None else "")
    return sources


def _compiled_only(variables: Mapping[str, Program]) -> Mapping[str, CompiledExpression]:
    return MappingProxyType({name: program for name, program in variables.items()
                             if isinstance(program, CompiledExpression)})


def compile_validating_policy(policy: ValidatingAdmissionPolicy,
                              programs: PolicyPrograms) -> CompiledValidatingPolicy:
    """A validated policy assembled for evaluation; its bindings are attached by the snapshot."""
    spec = policy.spec
    compiler = programs.compiler
    variables = _link_variables(compiler, {variable.name: programs.program(ExpressionKind.VARIABLE, i)
                                           for i, variable in enumerate(spec.variables)}, mutating=False)
    match_conditions = tuple((condition, programs.program(ExpressionKind.MATCH_CONDITION, i))
                             for i, condition in enumerate(spec.match_conditions))
    validations = []
    for i, validation in enumerate(spec.validations):
        message_program = None
        if gofmt.trim_space(validation.message_expression):
            message_program = _linked(compiler, programs.program(ExpressionKind.MESSAGE_EXPRESSION, i), variables,
                                      mutating=False)
        validations.append(CompiledValidation(
            validation, _linked(compiler, programs.program(ExpressionKind.VALIDATION, i), variables, mutating=False),
            message_program))
    audit_annotations = tuple(
        (annotation, _linked(compiler, programs.program(ExpressionKind.AUDIT_ANNOTATION, i), variables,
                             mutating=False))
        for i, annotation in enumerate(spec.audit_annotations))
    sources = [v.expression for v in spec.variables]
    sources += [v.expression + "\n" + v.message_expression for v in spec.validations]
    sources += [a.value_expression for a in spec.audit_annotations]
    return CompiledValidatingPolicy(
        policy=policy,
        bindings=(),
        match_conditions=match_conditions,
        variables=MappingProxyType(variables),
        validations=tuple(validations),
        audit_annotations=audit_annotations,
        uses_namespace_object=mentions_namespace_object(sources),
        compiled_variables=_compiled_only(variables),
    )


def compile_mutating_policy(policy: MutatingAdmissionPolicy, programs: PolicyPrograms) -> CompiledMutatingPolicy:
    """A validated policy assembled for evaluation; its bindings are attached by the snapshot."""
    spec = policy.spec
    compiler = programs.compiler
    variables = _link_variables(compiler, {variable.name: programs.program(ExpressionKind.VARIABLE, i)
                                           for i, variable in enumerate(spec.variables)}, mutating=True)
    match_conditions = tuple((condition, programs.program(ExpressionKind.MATCH_CONDITION, i))
                             for i, condition in enumerate(spec.match_conditions))
    mutations = []
    for i, mutation in enumerate(spec.mutations):
        kind = ExpressionKind.JSON_PATCH if mutation.patch_type == "JSONPatch" else ExpressionKind.APPLY_CONFIGURATION
        mutations.append(CompiledMutation(mutation, _linked(compiler, programs.program(kind, i), variables,
                                                            mutating=True)))
    sources = [v.expression for v in spec.variables] + [m.source for m in mutations]
    return CompiledMutatingPolicy(
        policy=policy,
        bindings=(),
        match_conditions=match_conditions,
        variables=MappingProxyType(variables),
        mutations=tuple(mutations),
        uses_namespace_object=mentions_namespace_object(sources),
        compiled_variables=_compiled_only(variables),
    )
