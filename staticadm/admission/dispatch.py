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
from typing import Generic, Protocol, TypeVar

from staticadm.admission.matching import matches
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.model import MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBinding

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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class MatchedPolicy(Generic[CompiledPolicy]):
    """A policy whose matchConstraints selected the request; its bindings are matched as they are read."""

    compiled: CompiledPolicy
    resource: GroupVersionResource
    kind: GroupVersionKind
    _request: AdmissionRequest
    _namespaces: NamespaceSource
    _recorder: MatchRecorder[CompiledPolicy]
    _conversion: ConversionCheck

    def invocations(self) -> Iterator[Invocation[CompiledPolicy]]:
        compiled, request = self.compiled, self._request
        bindings: Sequence[Binding] = compiled.bindings
        for binding in bindings:
            name = binding.metadata.name
            outcome = matches(binding.spec.match_resources, request, self._namespaces, is_policy=False)
            if outcome.error is not None:
                self._recorder.config_error(compiled, name, outcome.error)
            elif not outcome.matched:
                self._recorder.skipped(compiled.name, name, outcome.why)
            elif (self._conversion is ConversionCheck.PER_BINDING and self.kind != request.kind
                  and request.object is not None):
                # Kubernetes reports it as the policy's error, once per binding.
                self._recorder.config_error(compiled, None, conversion_error(request, self.kind))
            else:
                yield Invocation(compiled, binding, self.resource, self.kind)


def matched_policies(policies: Sequence[CompiledPolicy], positions: Sequence[int], request: AdmissionRequest,
                     namespaces: NamespaceSource, recorder: MatchRecorder[CompiledPolicy],
                     conversion: ConversionCheck) -> Iterator[MatchedPolicy[CompiledPolicy]]:
    """The candidate policies (by ``positions``, in name order) whose matchConstraints select ``request``."""
    for position in positions:
        compiled = policies[position]
        outcome = matches(compiled.policy.spec.match_constraints, request, namespaces, is_policy=True)
        if outcome.error is not None:
            recorder.config_error(compiled, None, outcome.error)
            continue
        if not outcome.matched:
            recorder.skipped(compiled.name, None, outcome.why)
            continue
        assert outcome.resource is not None and outcome.kind is not None
        if (conversion is ConversionCheck.PER_POLICY and outcome.kind != request.kind
                and (request.object is not None or request.old_object is not None)):
            recorder.config_error(compiled, None, conversion_error(request, outcome.kind))
            continue
        yield MatchedPolicy(compiled, outcome.resource, outcome.kind, request, namespaces, recorder, conversion)
