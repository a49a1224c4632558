"""The matching phase both plugins share: which (policy, binding) pairs a request invokes.

kube-apiserver's ``generic/policy_dispatcher.go`` walks policies, then each policy's bindings, matching
the policy's matchConstraints and the binding's matchResources, and reports configuration errors and
non-matches along the way. The two plugins differ in one place, kept here by name: where the object
would need converting to the version a policy matched (``ConversionCheck``).

Stage: match, for both plugins (kube-apiserver's ``plugin/policy/generic``). Receives the snapshot and the request's
match view; hands on the steps to run, in Kubernetes' order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar, cast

from staticadm.admission.matching.matcher import matches
from staticadm.admission.matching.plan import NOT_MATCHED, MatchInputs, RequestMatch, matched_as
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
from staticadm.bounded import keep_bounded
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.model import MatchResources, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBinding
from staticadm.snapshot import CandidateSet, Snapshot

CompiledPolicy = TypeVar("CompiledPolicy", CompiledValidatingPolicy, CompiledMutatingPolicy)
RecordedPolicy = TypeVar("RecordedPolicy", contravariant=True)
Binding = ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding


class ConversionCheck(Enum):
    """Where a plugin finds out that the object is not in the version the policy matched.

    The validating dispatcher converts once per policy, before its bindings, when the request has an
    object or an old object; the mutating dispatcher converts per invocation, after the binding matched,
    and only the object it is about to mutate.
    """

    PER_POLICY = "per-policy"
    PER_BINDING = "per-binding"


class MatchRecorder(Protocol[RecordedPolicy]):
    """What a dispatcher keeps of the matching phase."""

    def config_error(self, compiled: RecordedPolicy, binding: str | None, error: str, /) -> None: ...

    def skipped(self, policy: str, binding: str | None, why: str | Callable[[], str]) -> None: ...


# Not frozen: these two are made for every matching policy and binding of every request, and a frozen
# dataclass pays an object.__setattr__ per field to build; nothing changes them once made.
@dataclass(slots=True, eq=False)
class Invocation(Generic[CompiledPolicy]):
    """One (policy, binding) pair to evaluate, with the resource and kind the policy matched."""

    compiled: CompiledPolicy
    binding: Binding
    resource: GroupVersionResource
    kind: GroupVersionKind

    @property
    def key(self) -> tuple[str, str]:
        return self.compiled.name, self.binding.metadata.name


def gvk_text(kind: GroupVersionKind) -> str:
    return f"{kind.group}/{kind.version}, Kind={kind.kind}" if kind.group else f"/{kind.version}, Kind={kind.kind}"


def conversion_error(request: AdmissionRequest, matched: GroupVersionKind) -> str:
    # The webhook only has the object in the version kube-apiserver sent; another needs a conversion.
    return (f"failed to convert object version: staticadm received {gvk_text(request.kind)} and cannot convert "
            f"it to {gvk_text(matched)}")


@dataclass(slots=True, eq=False)
class MatchedPolicy(Generic[CompiledPolicy]):
    """A policy whose matchConstraints selected the request; its bindings are matched as they are read."""

    compiled: CompiledPolicy
    resource: GroupVersionResource
    kind: GroupVersionKind
    _view: RequestMatch
    _recorder: MatchRecorder[CompiledPolicy]
    _conversion: ConversionCheck

    def invocations(self) -> Iterator[Invocation[CompiledPolicy]]:
        compiled, view = self.compiled, self._view
        request = view.request
        bindings: Sequence[Binding] = compiled.bindings
        for binding, plan in zip(bindings, compiled.binding_plans, strict=True):
            outcome = plan.evaluate(view)
            if outcome.__class__ is str:
                self._recorder.config_error(compiled, binding.metadata.name, cast(str, outcome))
            elif outcome == NOT_MATCHED:
                self._recorder.skipped(compiled.name, binding.metadata.name,
                                       _why_not(binding.spec.match_resources, view, is_policy=False))
            elif (self._conversion is ConversionCheck.PER_BINDING and self.kind != request.kind
                  and request.object is not None):
                # Kubernetes reports it as the policy's error, once per binding.
                self._recorder.config_error(compiled, None, conversion_error(request, self.kind))
            else:
                yield Invocation(compiled, binding, self.resource, self.kind)


def _why_not(match: MatchResources | None, view: RequestMatch, *, is_policy: bool) -> Callable[[], str]:
    """Why a plan did not match, in the words of the straightforward matcher, built when read."""
    return lambda: matches(match, view.request, view.namespaces(), is_policy=is_policy).reason


#: The kinds of step of a :class:`Matched` (see there).
SKIPPED, CONFIG_ERROR, INVOKED, POLICY_DONE = range(4)
#: Matched requests remembered per candidate set; a full memo is dropped (it refills from the same plans).
MAX_MATCHED = 1024


@dataclass(slots=True, eq=False)
class Matched:
    """How a set of validating policies matches requests that plans cannot tell apart (``RequestMatch.key``), as
    steps in Kubernetes' order, none holding anything of one request:

    - ``(SKIPPED, policy name, binding name or None, the MatchResources that did not match, whether the policy's)``
    - ``(CONFIG_ERROR, compiled policy, binding name or None, the error)``
    - ``(INVOKED, compiled policy, binding, how it matched: a plan's outcome, for ``matched_as``)``
    - ``(POLICY_DONE, compiled policy)``: the end of a matched policy's bindings.

    ``invoked`` are the policies with an invocation, each once, in order; ``config_errors`` whether any step is one.
    """

    steps: tuple[tuple[Any, ...], ...]
    invoked: tuple[CompiledValidatingPolicy, ...]
    config_errors: bool
    #: What the request path builds for these policies on first use (``validating/all_clear.py``).
    program: Any = None


def match_validating(policies: Sequence[CompiledValidatingPolicy], candidates: CandidateSet,
                     view: RequestMatch, *, remember: bool = True) -> Matched:
    """How ``policies`` at ``candidates`` match ``view``'s request (the validating dispatcher converts per
    policy), with ``remember`` remembered per candidate set by what their plans read of a request."""
    if not remember:
        return _match_validating(policies, candidates.positions, view)
    inputs = candidates.inputs
    if inputs is None:
        plans = [plan for position in candidates.positions
                 for plan in (policies[position].match_plan, *policies[position].binding_plans)]
        inputs = candidates.inputs = MatchInputs.of(plans)
    key = view.key(inputs)
    memo = candidates.matched
    found: Matched | None = memo.get(key)
    if found is None:
        found = _match_validating(policies, candidates.positions, view)
        keep_bounded(memo, key, found, MAX_MATCHED)
    return found


def _match_validating(policies: Sequence[CompiledValidatingPolicy], positions: Sequence[int],
                      view: RequestMatch) -> Matched:
    request = view.request
    steps: list[tuple[Any, ...]] = []
    invoked: list[CompiledValidatingPolicy] = []
    errors = False
    for position in positions:
        compiled = policies[position]
        outcome = compiled.match_plan.evaluate(view)
        if outcome.__class__ is str:
            steps.append((CONFIG_ERROR, compiled, None, outcome))
            errors = True
            continue
        if outcome == NOT_MATCHED:
            steps.append((SKIPPED, compiled.name, None, compiled.policy.spec.match_constraints, True))
            continue
        kind = matched_as(cast(int, outcome), request)[1]
        if kind is not request.kind and kind != request.kind and (request.object is not None
                                                                  or request.old_object is not None):
            steps.append((CONFIG_ERROR, compiled, None, conversion_error(request, kind)))
            errors = True
            continue
        for binding, plan in zip(compiled.bindings, compiled.binding_plans, strict=True):
            binding_outcome = plan.evaluate(view)
            if binding_outcome.__class__ is str:
                steps.append((CONFIG_ERROR, compiled, binding.metadata.name, binding_outcome))
                errors = True
            elif binding_outcome == NOT_MATCHED:
                steps.append((SKIPPED, compiled.name, binding.metadata.name, binding.spec.match_resources, False))
            else:
                if not invoked or invoked[-1] is not compiled:
                    invoked.append(compiled)
                steps.append((INVOKED, compiled, binding, outcome))
        steps.append((POLICY_DONE, compiled))
    return Matched(tuple(steps), tuple(invoked), errors)


def not_matched_why(match: MatchResources | None, view: RequestMatch, is_policy: bool) -> Callable[[], str]:
    """Why a plan did not match ``view``'s request, in the words of the straightforward matcher, built when read."""
    return _why_not(match, view, is_policy=is_policy)


def matched_policies(policies: Sequence[CompiledPolicy], positions: Sequence[int], view: RequestMatch,
                     recorder: MatchRecorder[CompiledPolicy],
                     conversion: ConversionCheck) -> Iterator[MatchedPolicy[CompiledPolicy]]:
    """The candidate policies (by ``positions``, in name order) whose matchConstraints select the request."""
    request = view.request
    for position in positions:
        compiled = policies[position]
        outcome = compiled.match_plan.evaluate(view)
        if outcome.__class__ is str:
            recorder.config_error(compiled, None, cast(str, outcome))
            continue
        if outcome == NOT_MATCHED:
            recorder.skipped(compiled.name, None, _why_not(compiled.policy.spec.match_constraints, view,
                                                            is_policy=True))
            continue
        resource, kind = matched_as(cast(int, outcome), request)
        if (conversion is ConversionCheck.PER_POLICY and kind is not request.kind and kind != request.kind
                and (request.object is not None or request.old_object is not None)):
            recorder.config_error(compiled, None, conversion_error(request, kind))
            continue
        yield MatchedPolicy(compiled, resource, kind, view, recorder, conversion)


def policy_candidates(snapshot: Snapshot, request: AdmissionRequest, *, mutating: bool) -> tuple[int, ...]:
    """Positions of the policies whose rules could match, by the request's original resource and the one
    the webhook received."""
    return policy_candidate_set(snapshot, request, mutating=mutating).positions


def policy_candidate_set(snapshot: Snapshot, request: AdmissionRequest, *, mutating: bool) -> CandidateSet:
    """``policy_candidates`` with what the request path remembers about them (``Snapshot.candidate_set``)."""
    original, received = request.original_resource, request.resource
    if original is received or (original.group == received.group and original.resource == received.resource):
        return snapshot.candidate_set(request.operation, ((original.group, original.resource),), mutating=mutating)
    return snapshot.candidate_set(request.operation, ((original.group, original.resource),
                                                      (received.group, received.resource)), mutating=mutating)
