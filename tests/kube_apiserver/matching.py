"""Whether kube-apiserver calls a webhook for a request: ``ShouldCallHook`` (plugin/webhook/generic/webhook.go)
with the namespace and object selector matchers (plugin/webhook/predicates/{namespace,object}), the rules
matcher (plugin/webhook/predicates/rules) and matchConditions (plugin/webhook/matchconditions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cel_expr_python import cel

from tests.kube_apiserver.configuration import ConfigurationError, Webhook
from tests.kube_apiserver.statuses import StatusError, forbidden, not_found

#: The admission configuration kinds API-registered webhooks never see; static webhooks do (KEP-5793).
ADMISSION_CONFIGURATION_KINDS = frozenset({
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
})


@dataclass(frozen=True)
class GroupVersionResource:
    group: str
    version: str
    resource: str


@dataclass(frozen=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class Attributes:
    """``admission.Attributes``: one request as kube-apiserver's admission chain sees it."""

    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: str
    namespace: str
    name: str
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None = None
    subresource: str = ""
    user: Mapping[str, Any] = field(default_factory=lambda: {"username": "alice", "groups": ["system:authenticated"]})
    dry_run: bool = False
    options: Mapping[str, Any] | None = None
    #: The request's own deadline in seconds (kube-apiserver's --request-timeout, 60 s, or the client's).
    timeout: float = 60.0


@dataclass(frozen=True)
class Invocation:
    webhook: Webhook
    resource: GroupVersionResource
    subresource: str
    kind: GroupVersionKind


@dataclass(frozen=True)
class EquivalentResources:
    """``EquivalentResourceMapper``: resources served in several versions that hold the same objects.

    Each group lists (resource, kind) pairs of one object type. kube-apiserver converts the object to the
    version a webhook matched; this model sends it with only its apiVersion changed, so list only kinds
    whose versions have the same fields.
    """

    groups: Sequence[Sequence[tuple[GroupVersionResource, GroupVersionKind]]] = ()

    def equivalents(self, resource: GroupVersionResource) -> list[tuple[GroupVersionResource, GroupVersionKind]]:
        for group in self.groups:
            if any(candidate == resource for candidate, _ in group):
                return list(group)
        return []


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector(selector).Matches(labels)`` for a non-empty selector."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _selector_is_empty(selector: Mapping[str, Any]) -> bool:
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    if obj is None:
        return None
    return (obj.get("metadata") or {}).get("labels") or {}


class Matcher:
    """Decides ``ShouldCallHook`` for one plugin; namespaces play the namespace informer's part."""

    def __init__(self, namespaces: Mapping[str, Mapping[str, str]], equivalents: EquivalentResources) -> None:
        self.namespaces = namespaces
        self.equivalents = equivalents
        self._conditions: dict[str, list[tuple[str, Any]]] = {}
        self._environment = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})

    def compile_conditions(self, webhooks: Sequence[Webhook]) -> None:
        """Compile every webhook's matchConditions, as kube-apiserver's validation does at load."""
        for webhook in webhooks:
            compiled = []
            for condition in webhook.spec.get("matchConditions") or []:
                try:
                    compiled.append((condition["name"], self._environment.compile(condition["expression"])))
                except RuntimeError as error:
                    raise ConfigurationError(f"webhook {webhook.name}: matchConditions {condition['name']}: {error}"
                                             " (this model has no authorizer)") from error
            self._conditions[webhook.uid] = compiled

    def should_call(self, webhook: Webhook, attributes: Attributes) -> Invocation | None:
        """The invocation, None when the webhook does not apply, or a StatusError failing the request."""
        spec = webhook.spec
        namespace_matches, namespace_error = self._namespace_matches(spec["namespaceSelector"], attributes)
        if not namespace_matches and namespace_error is None:
            return None
        object_selector = spec["objectSelector"]
        if not _selector_is_empty(object_selector) and not any(
                labels is not None and selector_matches(object_selector, labels)
                for labels in (_labels(attributes.object), _labels(attributes.old_object))):
            return None
        invocation = self._rules_invocation(webhook, attributes)
        if invocation is None:
            return None
        if namespace_error is not None:
            raise namespace_error
        if self._conditions.get(webhook.uid) and not self._conditions_match(webhook, invocation, attributes):
            return None
        return invocation

    def _namespace_matches(self, selector: Mapping[str, Any],
                           attributes: Attributes) -> tuple[bool, StatusError | None]:
        if not attributes.namespace and attributes.resource.resource != "namespaces":
            return True, None  # cluster-scoped requests are never exempted by a namespace selector
        if _selector_is_empty(selector):
            return True, None
        if (attributes.resource.resource == "namespaces" and not attributes.subresource
                and attributes.operation in ("CREATE", "UPDATE")):
            return selector_matches(selector, _labels(attributes.object) or {}), None
        labels = self.namespaces.get(attributes.namespace)
        if labels is None:
            return False, not_found("", "namespaces", attributes.namespace)
        return selector_matches(selector, labels), None

    def _rules_invocation(self, webhook: Webhook, attributes: Attributes) -> Invocation | None:
        rules = webhook.spec.get("rules") or []
        for rule in rules:
            if rule_matches(rule, attributes, attributes.resource):
                return Invocation(webhook, attributes.resource, attributes.subresource, attributes.kind)
        if webhook.spec["matchPolicy"] != "Equivalent":
            return None
        equivalents = self.equivalents.equivalents(attributes.resource)
        for rule in rules:  # earlier rules first
            for resource, kind in equivalents:
                if resource != attributes.resource and rule_matches(rule, attributes, resource):
                    return Invocation(webhook, resource, attributes.subresource, kind)
        return None

    def _conditions_match(self, webhook: Webhook, invocation: Invocation, attributes: Attributes) -> bool:
        """``matcher.Match``: any false skips the webhook; otherwise errors fail closed (Fail) or skip (Ignore)."""
        data = {"object": dict(attributes.object) if attributes.object is not None else None,
                "oldObject": dict(attributes.old_object) if attributes.old_object is not None else None,
                "request": condition_request(attributes, invocation)}
        errors = []
        for _name, program in self._conditions[webhook.uid]:
            value = program.eval(data=data)
            if value.type() == cel.Type.ERROR:
                errors.append(f"{value.value()}")
            elif value.value() is False:
                return False
        if errors and webhook.failure_policy == "Fail":
            message = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            raise forbidden(attributes.resource.group, attributes.resource.resource, attributes.name, message)
        return not errors


def rule_matches(rule: Mapping[str, Any], attributes: Attributes, resource: GroupVersionResource) -> bool:
    """``rules.Matcher.Matches`` with the request's resource replaced by ``resource``."""
    def exact_or_wildcard(items: Sequence[str], requested: str) -> bool:
        return any(item in ("*", requested) for item in items)

    scope = rule.get("scope", "*")
    namespace_resource = GroupVersionResource("", "v1", "namespaces")
    if scope == "Namespaced" and (resource == namespace_resource or not attributes.namespace):
        return False
    if scope == "Cluster" and not (resource == namespace_resource or not attributes.namespace):
        return False
    if scope not in ("*", "Namespaced", "Cluster"):
        return False
    if not any(operation in ("*", attributes.operation) for operation in rule.get("operations") or []):
        return False
    if not exact_or_wildcard(rule.get("apiGroups") or [], resource.group):
        return False
    if not exact_or_wildcard(rule.get("apiVersions") or [], resource.version):
        return False
    for entry in rule.get("resources") or []:
        name, _, sub = entry.partition("/")
        if name in ("*", resource.resource) and sub in ("*", attributes.subresource):
            return True
    return False


def condition_request(attributes: Attributes, invocation: Invocation) -> dict[str, Any]:
    """``CreateAdmissionRequest``: the ``request`` variable of a matchCondition."""
    return {
        "kind": _gvk(invocation.kind), "resource": _gvr(invocation.resource), "subResource": invocation.subresource,
        "requestKind": _gvk(attributes.kind), "requestResource": _gvr(attributes.resource),
        "requestSubResource": attributes.subresource, "name": attributes.name, "namespace": attributes.namespace,
        "operation": attributes.operation, "userInfo": dict(attributes.user), "dryRun": attributes.dry_run,
        "options": dict(attributes.options) if attributes.options is not None else None,
    }


def versioned(attributes: Attributes, invocation: Invocation) -> Attributes:
    """The request as sent to a webhook that matched another version of its resource (see EquivalentResources)."""
    if invocation.kind == attributes.kind:
        return attributes

    def converted(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return None if obj is None else {**obj, "apiVersion": invocation.kind.api_version}

    return replace(attributes, object=converted(attributes.object), old_object=converted(attributes.old_object))


def is_admission_configuration(attributes: Attributes) -> bool:
    """``rules.IsExemptAdmissionConfigurationResource``."""
    return (attributes.kind.group == "admissionregistration.k8s.io"
            and attributes.kind.kind in ADMISSION_CONFIGURATION_KINDS)


def _gvk(kind: GroupVersionKind) -> dict[str, str]:
    return {"group": kind.group, "version": kind.version, "kind": kind.kind}


def _gvr(resource: GroupVersionResource) -> dict[str, str]:
    return {"group": resource.group, "version": resource.version, "resource": resource.resource}
