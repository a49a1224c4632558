"""The classes of control-plane writes the generated webhook registration leaves out of staticadm's reach.

While staticadm is down, kube-apiserver refuses every request its webhook registration sends under
``failurePolicy: Fail``. A kubeadm control plane heals itself through a few kinds of writes (the kubelet's
mirror pods and node status, node leases, leader-election leases, events, the kube-system controllers'
pods: ``control-plane-requests.yaml``). Each class below is one of them, with the webhook matchCondition
that keeps it from being sent. The condition is added only when no loaded policy (with a binding) can match
the class, so leaving it out never hides a request from a policy that could act on it.

"Can match" is decided from what a policy and its bindings declare and is conservative, answering yes when
unsure: rules are compared by resource name (and by group and version only under ``matchPolicy: Exact``,
since an Equivalent policy also matches other groups and versions of the same resource), a namespace selector
excludes a namespace only through the ``kubernetes.io/metadata.name`` label kube-apiserver sets on every
namespace, and objectSelectors, matchConditions and excludeResourceRules are taken to exclude nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from staticadm.model import Binding, LabelSelector, MatchResources, NamedRuleWithOperations, Policy

#: The label kube-apiserver sets on every namespace to its name: the one a selector can be read through here.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
#: A class's namespace when it is any namespace, and when the resource is cluster-scoped.
ANY_NAMESPACE = "*"
CLUSTER_SCOPED = ""


@dataclass(frozen=True, slots=True)
class ControlPlaneClass:
    """Requests for ``resources`` (and all their subresources) of ``groups`` in ``namespace``."""

    #: The webhook matchCondition's name (a qualified name, as kube-apiserver requires).
    name: str
    description: str
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    namespace: str

    @property
    def expression(self) -> str:
        """The matchCondition: true for every request outside the class (the webhook is called only then)."""
        def any_of(field: str, values: tuple[str, ...]) -> str:
            tests = " || ".join(f"request.resource.{field} == '{value}'" for value in values)
            return f"({tests})" if len(values) > 1 else tests

        inside = [any_of("group", self.groups), any_of("resource", self.resources)]
        if self.namespace not in (ANY_NAMESPACE, CLUSTER_SCOPED):
            inside.insert(0, f"request.namespace == '{self.namespace}'")
        return f"!({' && '.join(inside)})"

    def match_condition(self) -> dict[str, str]:
        return {"name": self.name, "expression": self.expression}

    def holds(self, group: str, resource: str, namespace: str) -> bool:
        """Whether a request for ``group``/``resource`` (main resource, no subresource) in ``namespace`` is in it."""
        return (group in self.groups and resource in self.resources
                and self.namespace in (ANY_NAMESPACE, CLUSTER_SCOPED, namespace))


CONTROL_PLANE_CLASSES: tuple[ControlPlaneClass, ...] = (
    ControlPlaneClass("staticadm.io/exclude-kube-system-pods",
                      "kube-system pods (mirror pods of the static control plane, kube-proxy, CoreDNS, their "
                      "bindings and status)", ("",), ("pods",), "kube-system"),
    ControlPlaneClass("staticadm.io/exclude-nodes", "nodes and their status (the kubelet)", ("",), ("nodes",),
                      CLUSTER_SCOPED),
    ControlPlaneClass("staticadm.io/exclude-node-leases", "node leases in kube-node-lease (the kubelet)",
                      ("coordination.k8s.io",), ("leases",), "kube-node-lease"),
    ControlPlaneClass("staticadm.io/exclude-kube-system-leases",
                      "leader-election leases in kube-system (kube-controller-manager, kube-scheduler)",
                      ("coordination.k8s.io",), ("leases",), "kube-system"),
    ControlPlaneClass("staticadm.io/exclude-events", "events (core/v1 and events.k8s.io/v1, every namespace)",
                      ("", "events.k8s.io"), ("events",), ANY_NAMESPACE),
)

BY_NAME = {entry.name: entry for entry in CONTROL_PLANE_CLASSES}


def class_of(group: str, resource: str, namespace: str) -> ControlPlaneClass | None:
    """The class a request (``resource`` without its subresource) belongs to, if any."""
    return next((entry for entry in CONTROL_PLANE_CLASSES if entry.holds(group, resource, namespace)), None)


def _rule_reaches(rule: NamedRuleWithOperations, exact: bool, entry: ControlPlaneClass) -> bool:
    if not rule.operations:
        return False
    if exact and "*" not in rule.api_groups and not set(rule.api_groups) & set(entry.groups):
        return False
    scope = rule.scope or "*"
    if scope != "*" and scope != ("Cluster" if entry.namespace == CLUSTER_SCOPED else "Namespaced"):
        return False
    return any(resource.partition("/")[0] in ("*", *entry.resources) for resource in rule.resources)


def _rules_reach(match: MatchResources, entry: ControlPlaneClass, *, empty_matches_all: bool) -> bool:
    if not match.resource_rules:
        return empty_matches_all
    exact = match.match_policy == "Exact"
    return any(_rule_reaches(rule, exact, entry) for rule in match.resource_rules)


def excludes_namespace(selector: LabelSelector | None, namespace: str) -> bool:
    """Whether ``selector`` can never match ``namespace``, judged from its name label alone."""
    if selector is None:
        return False
    name = selector.match_labels.get(NAMESPACE_NAME_LABEL)
    if name is not None and name != namespace:
        return True
    for requirement in selector.match_expressions:
        if requirement.key != NAMESPACE_NAME_LABEL:
            continue
        if requirement.operator == "In" and namespace not in requirement.values:
            return True
        if requirement.operator == "NotIn" and namespace in requirement.values:
            return True
        if requirement.operator == "DoesNotExist":
            return True
    return False


def _selector_allows(match: MatchResources | None, entry: ControlPlaneClass) -> bool:
    if match is None or entry.namespace in (ANY_NAMESPACE, CLUSTER_SCOPED):
        # A cluster-scoped object other than a Namespace matches every namespaceSelector.
        return True
    return not excludes_namespace(match.namespace_selector, entry.namespace)


def pair_reaches(policy: Policy, binding: Binding, entry: ControlPlaneClass) -> bool:
    """Whether ``policy`` bound by ``binding`` may match a request of ``entry`` (yes when unsure)."""
    constraints = policy.spec.match_constraints or MatchResources()
    if not _rules_reach(constraints, entry, empty_matches_all=False) or not _selector_allows(constraints, entry):
        return False
    resources = binding.spec.match_resources
    if resources is None:
        return True
    return _rules_reach(resources, entry, empty_matches_all=True) and _selector_allows(resources, entry)


def policies_reaching(active: Iterable[tuple[Policy, Sequence[Binding]]], entry: ControlPlaneClass) -> list[str]:
    """The names of the policies that may match ``entry`` through one of their bindings."""
    return [policy.metadata.name for policy, bindings in active
            if any(pair_reaches(policy, binding, entry) for binding in bindings)]


def unreachable_classes(active: Sequence[tuple[Policy, Sequence[Binding]]]) -> list[ControlPlaneClass]:
    """The classes no active (policy, bindings) can match: what a webhook for them may leave out."""
    return [entry for entry in CONTROL_PLANE_CLASSES if not policies_reaching(active, entry)]
