"""The matching phase both plugins share: which (policy, binding) pairs a request invokes.

kube-apiserver's ``generic/policy_dispatcher.go`` walks policies, then each policy's bindings, matching
the policy's matchConstraints and the binding's matchResources, and reports configuration errors and
non-matches along the way. The two plugins differ in one place, kept here by name: where the object
would need converting to the version a policy matched (``ConversionCheck``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, Protocol, TypeVar, cast

from staticadm.admission.match_plan import NOT_MATCHED, RequestMatch, matched_as
from staticadm.admission.matching import matches
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.model import MatchResources, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBinding

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
