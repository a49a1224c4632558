"""The matching phase both plugins share: which (policy, binding) pairs a request invokes.

kube-apiserver's ``generic/policy_dispatcher.go`` walks policies, then each policy's bindings, matching
the policy's matchConstraints and the binding's matchResources, and reports configuration errors and
non-matches along the way. The two plugins differ in one place, kept here by name: where the object
would need converting to the version a policy matched (``ConversionCheck``).

Stage: match, for both plugins (kube-apiserver's ``plugin/policy/generic``). Receives the snapshot and the request's
match view; hands on the steps to run, in Kubernetes' order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar, cast

from staticadm.admission.matching.matcher import matches
from staticadm.admission.matching.plan import NOT_MATCHED, MatchInputs, RequestMatch, matched_as
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
from staticadm.bounded import keep_bounded
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.model import MatchResources, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBinding
from staticadm.snapshot import CandidateSet, Snapshot

CompiledPolicy = TypeVar("CompiledPolicy", CompiledValidatingPolicy, CompiledMutatingPolicy)
Binding = ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding


class ConversionCheck(Enum):
    """Where a plugin finds out that the object is not in the version the policy matched.

    The validating dispatcher converts once per policy, before its bindings, when the request has an
    object or an old object; the mutating dispatcher converts per invocation, after the binding matched,
    and only the object it is about to mutate.
    """

    PER_POLICY = "per-policy"
    PER_BINDING = "per-binding"


# Not frozen: this is made for every matching policy and binding of every request, and a frozen
# dataclass pays an object.__setattr__ per field to build; nothing changes it once made.
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


def _why_not(match: MatchResources | None, view: RequestMatch, *, is_policy: bool) -> Callable[[], str]:
    """Why a plan did not match, in the words of the straightforward matcher, built when read."""
    return lambda: matches(match, view.request, view.namespaces(), is_policy=is_policy).reason


#: The kinds of step of a :class:`Matched` (see there).
SKIPPED, CONFIG_ERROR, INVOKED, POLICY_DONE = range(4)
#: Matched requests remembered per candidate set; a full memo is dropped (it refills from the same plans).
MAX_MATCHED = 1024


@dataclass(slots=True, eq=False)
class Matched:
    """How a set of policies matches requests that plans cannot tell apart (``RequestMatch.key``), as steps in
    Kubernetes' order, none holding anything of one request:

    - ``(SKIPPED, policy name, binding name or None, the MatchResources that did not match, whether the policy's)``
    - ``(CONFIG_ERROR, compiled policy, binding name or None, the error)``
    - ``(INVOKED, compiled policy, binding, how it matched: a plan's outcome, for ``matched_as``)``
    - ``(POLICY_DONE, compiled policy)``: the end of a matched policy's bindings.

    ``invoked`` are the policies with an invocation, each once, in order; ``config_errors`` whether any step is one.
    """

    steps: tuple[tuple[Any, ...], ...]
    invoked: tuple[Any, ...]
    config_errors: bool
    #: What the request path builds for these policies on first use (``validating/all_clear.py``).
    program: Any = None


def match_validating(policies: Sequence[CompiledValidatingPolicy], candidates: CandidateSet,
                     view: RequestMatch, *, remember: bool = True) -> Matched:
    """How validating ``policies`` at ``candidates`` match ``view``'s request (the validating dispatcher converts
    per policy), with ``remember`` remembered per candidate set by what their plans read of a request."""
    return _remembered(policies, candidates, view, ConversionCheck.PER_POLICY, remember)


def match_mutating(policies: Sequence[CompiledMutatingPolicy], candidates: CandidateSet,
                   view: RequestMatch, *, remember: bool = True) -> Matched:
    """``match_validating`` for mutating ``policies``, whose dispatcher converts per invocation."""
    return _remembered(policies, candidates, view, ConversionCheck.PER_BINDING, remember)


def _remembered(policies: Sequence[Any], candidates: CandidateSet, view: RequestMatch, conversion: ConversionCheck,
                remember: bool) -> Matched:
    if not remember:
        return _match(policies, candidates.positions, view, conversion)
    inputs = candidates.inputs
    if inputs is None:
        plans = [plan for position in candidates.positions
                 for plan in (policies[position].match_plan, *policies[position].binding_plans)]
        inputs = candidates.inputs = MatchInputs.of(plans)
    key = view.key(inputs)
    memo = candidates.matched
    found: Matched | None = memo.get(key)
    if found is None:
        found = _match(policies, candidates.positions, view, conversion)
        keep_bounded(memo, key, found, MAX_MATCHED)
    return found


def _match(policies: Sequence[Any], positions: Sequence[int], view: RequestMatch,
           conversion: ConversionCheck) -> Matched:
    request = view.request
    steps: list[tuple[Any, ...]] = []
    invoked: list[Any] = []
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
        converts = kind is not request.kind and kind != request.kind
        if conversion is ConversionCheck.PER_POLICY and converts and (request.object is not None
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
            elif conversion is ConversionCheck.PER_BINDING and converts and request.object is not None:
                # Kubernetes reports it as the policy's error, once per binding.
                steps.append((CONFIG_ERROR, compiled, None, conversion_error(request, kind)))
                errors = True
            else:
                if not invoked or invoked[-1] is not compiled:
                    invoked.append(compiled)
                steps.append((INVOKED, compiled, binding, outcome))
        steps.append((POLICY_DONE, compiled))
    return Matched(tuple(steps), tuple(invoked), errors)


def not_matched_why(match: MatchResources | None, view: RequestMatch, is_policy: bool) -> Callable[[], str]:
    """Why a plan did not match ``view``'s request, in the words of the straightforward matcher, built when read."""
    return _why_not(match, view, is_policy=is_policy)


def policy_candidate_set(snapshot: Snapshot, request: AdmissionRequest, *, mutating: bool) -> CandidateSet:
    """Positions of the policies whose rules could match, by the request's original resource and the one the webhook
    received, with what the request path remembers about them (``Snapshot.candidate_set``)."""
    original, received = request.original_resource, request.resource
    if original is received or (original.group == received.group and original.resource == received.resource):
        return snapshot.candidate_set(request.operation, ((original.group, original.resource),), mutating=mutating)
    return snapshot.candidate_set(request.operation, ((original.group, original.resource),
                                                      (received.group, received.resource)), mutating=mutating)
