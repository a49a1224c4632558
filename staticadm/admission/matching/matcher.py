"""Does a MatchResources (a policy's matchConstraints or a binding's matchResources) match a request?

A transcription of ``policy/matching.Matches`` and the ``webhook/predicates`` (rules, namespace,
object). ``EquivalentResourcesFor`` (matchPolicy Equivalent) is the version kube-apiserver sent us
(``request.resource``) and, for a built-in kind, every other version of its group that serves that kind
(autoscaling/v1 and v2 HorizontalPodAutoscalers); a policy matched as one of those needs the object
converted, which a webhook cannot do, and fails with an error naming that (``generic.dispatcher.conversion_error``;
see the known gaps). Subresources and the equivalences between groups are not known.

Stage: match (kube-apiserver's ``plugin/policy/matching``). Receives a MatchResources and the parsed request; hands
on whether it matches, and why not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticadm.admission.namespaces import NAME_LABEL, NamespaceInfo, NamespaceSource
from staticadm.admission.request import (
    NAMESPACES_RESOURCE,
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
)
from staticadm.cel.schema_types import kind_versions
from staticadm.model import LabelSelector, MatchResources, NamedRuleWithOperations

#: ``exclusion.Excluded()``: never sent through any admission hook, static or API.
EXCLUDED_RESOURCES = frozenset({
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
})

NIL_CONSTRAINTS = "policy contained no match constraints, a required field"
NIL_NAMESPACE_SELECTOR = "a nil namespace selector was passed, please ensure selectors are initialized properly"
NIL_OBJECT_SELECTOR = "a nil object selector was passed, please ensure selectors are initialized properly"


def is_excluded(request: AdmissionRequest) -> bool:
    resource = request.original_resource
    return (resource.group, resource.resource) in EXCLUDED_RESOURCES


# -- label selectors -------------------------------------------------------------------------------


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector(selector).Matches(labels)`` for a validated selector."""
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions:
        present = requirement.key in labels
        operator = requirement.operator
        if operator == "In":
            if not present or labels[requirement.key] not in requirement.values:
                return False
        elif operator == "NotIn":
            if present and labels[requirement.key] in requirement.values:
                return False
        elif operator == "Exists":
            if not present:
                return False
        elif operator == "DoesNotExist":
            if present:
                return False
        else:
            # Validation rejects other operators at load time; never treat one as a match.
            return False
    return True


def selector_keys(selector: LabelSelector) -> frozenset[str]:
    return frozenset(selector.match_labels) | frozenset(r.key for r in selector.match_expressions)


def describe_selector(selector: LabelSelector) -> str:
    parts = [f"{key}={value}" for key, value in sorted(selector.match_labels.items())]
    for requirement in selector.match_expressions:
        op = requirement.operator
        if op in ("In", "NotIn"):
            parts.append(f"{requirement.key} {op.lower()} ({','.join(requirement.values)})")
        elif op == "Exists":
            parts.append(requirement.key)
        else:
            parts.append(f"!{requirement.key}")
    return ",".join(parts)


# -- rules ------------------------------------------------------------------------------------------


def _split_resource(text: str) -> tuple[str, str]:
    resource, _, sub = text.partition("/")
    return resource, sub


def rule_matches(rule: NamedRuleWithOperations, request: AdmissionRequest, resource: GroupVersionResource) -> bool:
    """``rules.Matcher.Matches`` (scope, operation, group, version, resource) for ``resource``."""
    scope = rule.scope
    if scope is not None and scope != "*":
        namespaced = resource != NAMESPACES_RESOURCE and request.namespace != ""
        if scope == "Namespaced" and not namespaced:
            return False
        if scope == "Cluster" and namespaced:
            return False
        if scope not in ("Namespaced", "Cluster"):
            return False
    if not any(op == "*" or op == request.operation for op in rule.operations):
        return False
    if not any(g == "*" or g == resource.group for g in rule.api_groups):
        return False
    if not any(v == "*" or v == resource.version for v in rule.api_versions):
        return False
    sub = request.original_sub_resource
    for entry in rule.resources:
        rule_resource, rule_sub = _split_resource(entry)
        if (rule_resource == "*" or rule_resource == resource.resource) and (rule_sub == "*" or rule_sub == sub):
            return True
    return False


def _name_matches(rule: NamedRuleWithOperations, request: AdmissionRequest) -> bool:
    # An empty list matches every name; on CREATE with generateName the name is "" and never listed.
    return not rule.resource_names or request.name in rule.resource_names


@dataclass(frozen=True, slots=True)
class RulesMatch:
    matched: bool
    resource: GroupVersionResource | None = None
    kind: GroupVersionKind | None = None


def rules_match(rules: Sequence[NamedRuleWithOperations], match_policy: str | None,
                request: AdmissionRequest) -> RulesMatch:
    """``matchesResourceRules``: exact first, then (Equivalent) the version the webhook received."""
    original = request.original_resource
    for rule in rules:
        if rule_matches(rule, request, original) and _name_matches(rule, request):
            return RulesMatch(True, original, request.original_kind)
    if match_policy is None or match_policy == "Exact":
        return RulesMatch(False)
    received = request.resource
    equivalents = [] if received == original else [(received, request.kind)]
    equivalents += builtin_equivalents(request)
    for equivalent, kind in equivalents:
        for rule in rules:
            if rule_matches(rule, request, equivalent) and _name_matches(rule, request):
                return RulesMatch(True, equivalent, kind)
    return RulesMatch(False)


def builtin_equivalents(request: AdmissionRequest) -> list[tuple[GroupVersionResource, GroupVersionKind]]:
    """The other versions of the request's built-in kind (its group's, as served), but the two it came with."""
    original, kind = request.original_resource, request.original_kind
    if request.original_sub_resource:
        return []
    found = []
    for version in kind_versions(kind.group, kind.kind):
        resource = GroupVersionResource(original.group, version, original.resource)
        if resource != original and resource != request.resource:
            found.append((resource, GroupVersionKind(kind.group, version, kind.kind)))
    return found


# -- selectors --------------------------------------------------------------------------------------


def object_labels(obj: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    """``meta.Accessor(obj).GetLabels()``; None when there is no object or it has no ObjectMeta."""
    if obj is None:
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        # Typed options objects (CONNECT) have no ObjectMeta, so the accessor fails: no match.
        return None
    labels = metadata.get("labels")
    if not isinstance(labels, dict):
        return {}
    for key, value in labels.items():
        if key.__class__ is not str or value.__class__ is not str:
            return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}
    # Every label a string (what a request's JSON holds): the object's own map, which callers only read; copying it
    # was most of matching's cost for a request matched through what was remembered.
    return labels


def labels_select_object(selector: LabelSelector,
                         labels: tuple[Mapping[str, str] | None, Mapping[str, str] | None]) -> bool:
    """The object predicate: the selector matches the labels of the object or of the old object."""
    if selector.is_empty:
        return True
    return any(found is not None and selector_matches(selector, found) for found in labels)


def object_selector_matches(selector: LabelSelector, request: AdmissionRequest) -> bool:
    return labels_select_object(selector, (object_labels(request.object), object_labels(request.old_object)))


def namespace_labels_outcome(selector: LabelSelector, request: AdmissionRequest,
                             lookup: Callable[[str], NamespaceInfo]) -> tuple[bool, str | None]:
    """``namespace.Matcher.MatchNamespaceSelector`` with ``lookup`` in place of the informer:
    (matched, None) or (False, the error)."""
    resource = request.original_resource
    if request.namespace == "" and resource.resource != "namespaces":
        # Cluster-scoped resources other than namespaces are never exempted by a namespace selector.
        return True, None
    if selector.is_empty:
        return True, None
    if (resource.resource == "namespaces" and request.original_sub_resource == ""
            and request.operation in ("CREATE", "UPDATE")):
        # kube-apiserver takes the labels from the namespace being written, not from its cache.
        labels = object_labels(request.object)
        if labels is None:
            return False, "Internal error occurred: the namespace in the request has no metadata"
        return selector_matches(selector, labels), None
    info = lookup(request.namespace)
    if info.labels is None:
        missing = sorted(selector_keys(selector) - {NAME_LABEL})
        if missing and info.unavailable is not None:
            return False, f"Internal error occurred: {info.unavailable}"
        if missing:
            return False, (
                f'Internal error occurred: the labels of namespace "{request.namespace}" are not known to '
                f"staticadm (no namespace source lists it); the namespace selector needs label "
                f"{', '.join(repr(k) for k in missing)}")
    return selector_matches(selector, info.known_labels()), None


# -- MatchResources ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MatchOutcome:
    """``matched`` with the matched resource/kind; else ``reason`` (why not) or ``error``."""

    matched: bool
    resource: GroupVersionResource | None = None
    kind: GroupVersionKind | None = None
    #: Why not, or how to say it: the text is only built when someone reads it (review's explanation),
    #: not for each of the many candidates a served request does not match.
    why: str | Callable[[], str] = ""
    error: str | None = None

    @property
    def reason(self) -> str:
        return self.why() if callable(self.why) else self.why


def describe_request(request: AdmissionRequest) -> str:
    resource = request.original_resource
    text = f"{request.operation} {resource.group or 'core'}/{resource.version} {resource.resource}"
    if request.original_sub_resource:
        text += f"/{request.original_sub_resource}"
    return text


def matches(match: MatchResources | None, request: AdmissionRequest, namespaces: NamespaceSource, *,
            is_policy: bool) -> MatchOutcome:
    """``matching.Matcher.Matches``; a binding with nil matchResources matches everything."""
    if match is None:
        if is_policy:
            return MatchOutcome(False, error=NIL_CONSTRAINTS)
        return MatchOutcome(True, request.original_resource, request.original_kind)
    if match.namespace_selector is None:
        return MatchOutcome(False, error=NIL_NAMESPACE_SELECTOR)
    if match.object_selector is None:
        return MatchOutcome(False, error=NIL_OBJECT_SELECTOR)
    namespace_matched, namespace_error = namespace_labels_outcome(match.namespace_selector, request,
                                                                  namespaces.lookup)
    if not namespace_matched and namespace_error is None:
        selector = match.namespace_selector
        return MatchOutcome(False, why=lambda: (f'namespace "{request.namespace}" does not match namespaceSelector '
                                                f"{describe_selector(selector)}"))
    if not object_selector_matches(match.object_selector, request):
        object_selector = match.object_selector
        return MatchOutcome(False, why=lambda: f"object does not match objectSelector "
                                               f"{describe_selector(object_selector)}")
    if match.exclude_resource_rules and rules_match(match.exclude_resource_rules, match.match_policy,
                                                    request).matched:
        return MatchOutcome(False, why=lambda: f"{describe_request(request)} is excluded by excludeResourceRules")
    if match.resource_rules:
        found = rules_match(match.resource_rules, match.match_policy, request)
    else:
        found = RulesMatch(True, request.original_resource, request.original_kind)
    if not found.matched:
        return MatchOutcome(False, why=lambda: f"no resourceRule matches {describe_request(request)}"
                                               + (f' named "{request.name}"' if request.name else ""))
    # Selector errors count only once everything else matched, so unrelated policies never fail.
    if namespace_error is not None:
        return MatchOutcome(False, error=namespace_error)
    return MatchOutcome(True, found.resource, found.kind)
