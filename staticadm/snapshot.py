"""The immutable, compiled configuration one request is evaluated against.

A snapshot is built once per successful (re)load and then only read, so requests never see a
half-applied configuration. It keeps Kubernetes' evaluation order (policies by name, each policy's
bindings by name) and a match index so that a request only looks at policies whose matchConstraints
could match its operation, group and resource: a request no policy matches costs the same with 1000
policies as with 10.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from staticadm.admission.matching.matcher import selector_keys
from staticadm.admission.namespaces import NAME_LABEL
from staticadm.cel import CompiledExpression
from staticadm.cel.reads import Reads
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy, policy_expression_sources
from staticadm.model import MutatingAdmissionPolicyBinding, NamedRuleWithOperations, ValidatingAdmissionPolicyBinding

if TYPE_CHECKING:
    from staticadm.manifests.loader import LoadResult

CompiledPolicy = TypeVar("CompiledPolicy", CompiledValidatingPolicy, CompiledMutatingPolicy)
Binding = TypeVar("Binding", ValidatingAdmissionPolicyBinding, MutatingAdmissionPolicyBinding)
Kept = TypeVar("Kept")

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
    #: Whether any policy or binding reads more of a namespace than its name (a namespaceSelector on
    #: another label, or namespaceObject): only then does a request wait for a namespace's live GET.
    needs_namespaces: bool = False
    #: What the expressions of a set of candidate policies can read of ``object`` and ``oldObject``, by
    #: (mutating, positions): filled on first use (see ``candidate_reads``), never changing what it holds.
    _candidate_reads: dict[tuple[bool, tuple[int, ...]], Reads] = field(default_factory=dict, repr=False,
                                                                       compare=False)
    #: (mutating, policy name) -> (the loader's compiled policy, its bindings, the two bound together): a reload binds
    #: again only the policies whose compiled policy or bindings are not these very objects.
    _bound_from: Mapping[tuple[bool, str], tuple[Any, tuple[Any, ...], Any]] = field(
        default_factory=dict, repr=False, compare=False)
    #: ``candidate_set`` by its arguments, filled on first use (a cluster sends a few hundred distinct ones).
    _candidates: dict[tuple[Any, ...], CandidateSet] = field(default_factory=dict, repr=False, compare=False)
    #: What evaluation keeps across the requests evaluated against this snapshot, by evaluator
    #: (``mutating.KeptForSnapshot``, ``all_clear.AnswersByInput``): it goes with the snapshot when a reload replaces
    #: it.
    kept: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def kept_for(self, evaluator: str, make: Callable[[], Kept]) -> Kept:
        """What ``evaluator`` keeps across the requests evaluated against this snapshot (``kept``), made on first
        use."""
        kept = self.kept.get(evaluator)
        if kept is None:
            kept = self.kept[evaluator] = make()
        return cast(Kept, kept)

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
        return self.candidate_set(operation, resources, mutating=mutating).positions

    def candidate_set(self, operation: str, resources: Iterable[tuple[str, str]], *,
                      mutating: bool = False) -> CandidateSet:
        """``candidates`` with what the request path works out for them once (see ``CandidateSet``)."""
        key = (mutating, operation, *resources)
        remembered = self._candidates.get(key)
        if remembered is not None:
            return remembered
        index = self.mutating_match_index if mutating else self.match_index
        found: set[int] = set()
        for group, resource in resources:
            for op in (operation, "*"):
                for g in (group, "*"):
                    for r in (resource, "*"):
                        found.update(index.get((op, g, r), ()))
        positions = tuple(sorted(found))
        if len(self._candidates) >= _CANDIDATE_READS_KEPT:
            self._candidates.clear()
        policies = self.mutating if mutating else self.validating
        # Only an expression that names the authorizer can call it (its text says so, as for ``joins_sets``).
        asks_authorizer = any("authorizer" in source for position in positions
                              for source in policy_expression_sources(policies[position].policy))
        candidates = self._candidates[key] = CandidateSet(positions, self.candidate_reads(positions, mutating=mutating),
                                                          asks_authorizer)
        return candidates

    def candidate_reads(self, positions: tuple[int, ...], *, mutating: bool = False) -> Reads:
        """What the expressions of the policies at ``positions`` (``candidates``) can read of the objects
        (cel/reads.py): a request's objects are pruned to what the policies that could match it read, not to
        what every policy of the snapshot reads. A cluster has few distinct candidate sets (they follow from
        the operation and resource), so each is worked out once."""
        key = (mutating, positions)
        reads = self._candidate_reads.get(key)
        if reads is None:
            policies = self.mutating if mutating else self.validating
            reads = Reads.of(program.object_reads() for position in positions
                             for program in _policy_programs(policies[position]))
            if len(self._candidate_reads) >= _CANDIDATE_READS_KEPT:
                self._candidate_reads.clear()
            self._candidate_reads[key] = reads
        return reads


#: Candidate sets (and the requests' ways to them) a snapshot keeps; past this (only with requests for many
#: distinct resources) they are worked out again.
_CANDIDATE_READS_KEPT = 4096


@dataclass(slots=True, eq=False)
class CandidateSet:
    """The policies that could match one kind of request (``Snapshot.candidates``), what their expressions read of
    the objects, and what the request path remembers about them: how they match requests, by what the plans read
    of a request (``admission/dispatch.py``); never changing what it holds."""

    positions: tuple[int, ...]
    reads: Reads
    #: Whether an expression of these policies may ask the authorizer: the engine is given it only then.
    asks_authorizer: bool = True
    #: Filled by the dispatcher on first use.
    inputs: Any = None
    matched: dict[tuple[Any, ...], Any] = field(default_factory=dict)


def _index_keys(rules: Iterable[NamedRuleWithOperations]) -> set[IndexKey]:
    keys: set[IndexKey] = set()
    for rule in rules:
        for entry in rule.resources:
            resource = entry.partition("/")[0]
            for operation in rule.operations:
                for group in rule.api_groups:
                    keys.add((operation, group, resource))
    return keys


def _index(policies: Iterable[CompiledValidatingPolicy | CompiledMutatingPolicy]) -> MatchIndex:
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


def _bound(policies: Iterable[CompiledPolicy], bindings: Iterable[Binding], mutating: bool,
           previous: Mapping[tuple[bool, str], tuple[Any, tuple[Any, ...], Any]],
           bound_from: dict[tuple[bool, str], tuple[Any, tuple[Any, ...], Any]]) -> tuple[CompiledPolicy, ...]:
    """The policies by name, each with its bindings by name (kube-apiserver's evaluation order). A policy bound
    to the same bindings in ``previous`` (the same objects: the loader keeps what did not change) is taken from
    it: binding builds every match plan again, a few dozen microseconds a policy."""
    by_policy: dict[str, list[Binding]] = {}
    for binding in sorted(bindings, key=lambda b: b.metadata.name):
        by_policy.setdefault(binding.spec.policy_name, []).append(binding)
    result: list[CompiledPolicy] = []
    for compiled in sorted(policies, key=lambda p: p.name):
        own = tuple(by_policy.get(compiled.name, ()))
        key = (mutating, compiled.name)
        earlier = previous.get(key)
        if earlier is not None and earlier[0] is compiled and len(earlier[1]) == len(own) \
                and all(map(operator.is_, earlier[1], own)):
            bound = earlier[2]
        else:
            bound = replace(compiled, bindings=own)  # type: ignore[arg-type]
        bound_from[key] = (compiled, own, bound)
        result.append(bound)
    return tuple(result)


def build_snapshot(load_result: LoadResult, previous: Snapshot | None = None) -> Snapshot:
    """Builds the snapshot of a successful load (``LoadResult`` without errors); ``previous``, the snapshot
    being served, lends it the policies that did not change."""
    reuse = previous._bound_from if previous is not None else {}
    bound_from: dict[tuple[bool, str], tuple[Any, tuple[Any, ...], Any]] = {}
    validating = _bound(load_result.compiled_validating, load_result.validating_bindings, False, reuse, bound_from)
    mutating = _bound(load_result.compiled_mutating, load_result.mutating_bindings, True, reuse, bound_from)
    return Snapshot(
        _bound_from=MappingProxyType(bound_from),
        validating=validating,
        mutating=mutating,
        content_hash=load_result.content_hash,
        match_index=_index(validating),
        mutating_match_index=_index(mutating),
        directory=load_result.directory,
        needs_namespaces=_needs_namespaces((*validating, *mutating)),
    )


def _policy_programs(compiled: CompiledValidatingPolicy | CompiledMutatingPolicy) -> Iterator[CompiledExpression]:
    """Every expression the policy can evaluate that compiled, variables included."""
    programs: list[Any] = [program for _, program in compiled.match_conditions]
    if isinstance(compiled, CompiledMutatingPolicy):
        programs += [mutation.expression for mutation in compiled.mutations]
    else:
        for validation in compiled.validations:
            programs += [validation.expression, validation.message_expression]
        programs += [program for _, program in compiled.audit_annotations]
    programs += compiled.compiled_variables.values()
    for program in programs:
        if isinstance(program, CompiledExpression):
            yield program


def _needs_namespaces(policies: Iterable[CompiledValidatingPolicy | CompiledMutatingPolicy]) -> bool:
    for compiled in policies:
        if compiled.uses_namespace_object:
            return True
        for match in (compiled.policy.spec.match_constraints,
                      *(binding.spec.match_resources for binding in compiled.bindings)):
            selector = match.namespace_selector if match is not None else None
            if selector is not None and selector_keys(selector) - {NAME_LABEL}:
                return True
    return False
