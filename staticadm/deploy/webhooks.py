"""The ValidatingWebhookConfiguration / MutatingWebhookConfiguration that send kube-apiserver's requests to us.

The webhook's rules are narrowed to what the loaded policies can match, so that kube-apiserver only
pays a round trip for requests a policy could act on. Narrowing must never under-match: a request
the webhook does not send is a request no policy sees, which is a hole, while a request sent in vain
only costs latency. So every narrowing here is implied by *every* (policy, binding) pair that can fire:

- rules: the union of the policies' ``matchConstraints.resourceRules``. A request a pair matches is
  matched by its policy's rules, so by the union. ``resourceNames`` cannot be written in webhook rules
  and ``excludeResourceRules`` cannot be subtracted from them: both are dropped (the webhook sends
  more, the daemon applies them);
- selectors: a policy's ``namespaceSelector``/``objectSelector`` and its bindings' are ANDed, so a label
  requirement holds for every firing pair only if it is in the policy's selector or in the selector of
  every one of its bindings. The webhook gets the requirements that hold so for *all* policies, and
  none when there is no such requirement (then only the rules narrow);
- matchPolicy: ``Exact`` only when every policy is Exact; otherwise ``Equivalent``, since an
  Equivalent policy also matches other versions of its resources;
- a policy without bindings never fires, so it adds nothing;
- matchConditions: the classes of control-plane writes (:mod:`staticadm.deploy.exclusions`) that the rules
  would send but no firing pair can match are left out, one condition each, so that while staticadm is down
  kube-apiserver's ``failurePolicy: Fail`` cannot refuse the writes the control plane heals itself with.
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from staticadm.defaults import DEFAULT_TIMEOUT_SECONDS
from staticadm.deploy.exclusions import (
    ANY_NAMESPACE,
    CLUSTER_SCOPED,
    NAMESPACE_NAME_LABEL,
    ControlPlaneClass,
    unreachable_classes,
)
from staticadm.manifests.loader import LoadResult
from staticadm.model import (
    API_VERSION,
    Binding,
    LabelSelector,
    MatchResources,
    MutatingAdmissionPolicy,
    Policy,
)

#: Configuration names: static manifests must carry the reserved suffix, API objects must not.
STATIC_NAME = "staticadm.static.k8s.io"
API_NAME = "staticadm"
VALIDATING_WEBHOOK = "validate.staticadm.io"
MUTATING_WEBHOOK = "mutate.staticadm.io"
REGISTRATIONS = ("static", "api")
FAILURE_POLICIES = ("Fail", "Ignore")
#: Lets an operator (and ``kubectl get -o yaml``) tell which manifest directory a configuration was made for.
HASH_ANNOTATION = "staticadm.io/manifests-hash"

#: Kinds kube-apiserver never sends to API-registered webhooks (to avoid lock-out); static webhook
#: configurations do see them (KEP-5793).
_EXEMPT_FROM_API_WEBHOOKS = frozenset({
    "validatingwebhookconfigurations", "mutatingwebhookconfigurations", "validatingadmissionpolicies",
    "validatingadmissionpolicybindings", "mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
})
_ADMISSION_GROUP = API_VERSION.split("/")[0]

# One label requirement in a normal form, so that the same requirement written as matchLabels in one
# selector and matchExpressions in another compares equal: (key, operator, sorted values).
Requirement = tuple[str, str, tuple[str, ...]]


class WebhookConfigError(ValueError):
    """An option that cannot produce a usable configuration; the message names it."""


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    url: str
    ca_bundle: bytes
    failure_policy: str = "Fail"
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    registration: str = "static"


@dataclass(frozen=True, slots=True)
class Generated:
    documents: tuple[Mapping[str, Any], ...]
    #: Things the operator should know, for stderr (omitted configurations, what cannot be guarded).
    notes: tuple[str, ...] = field(default=())


def check_base_url(url: str) -> str:
    """The webhook base URL without a trailing slash; kube-apiserver's rules for a webhook URL."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "https":
        raise WebhookConfigError(f"--url {url!r}: kube-apiserver calls webhooks over https only")
    if not parsed.hostname:
        raise WebhookConfigError(f"--url {url!r}: has no host")
    if parsed.username is not None or parsed.password is not None:
        raise WebhookConfigError(f"--url {url!r}: user info is not allowed in a webhook URL")
    if parsed.query or parsed.fragment or url.endswith(("?", "#")):
        raise WebhookConfigError(f"--url {url!r}: a query or fragment is not allowed in a webhook URL")
    base = url.rstrip("/")
    if base.endswith(("/validate", "/mutate")):
        raise WebhookConfigError(f"--url {url!r}: give the base URL; /validate and /mutate are appended")
    return base


def read_ca_bundle(data: bytes, source: str) -> bytes:
    """PEM certificates checked to parse, so a wrong file fails here rather than in every TLS handshake."""
    # Imported here: `check` and the daemon's analyses read this module's rules and never a CA file, and
    # cryptography's x509 costs them more than the rest of the module.
    from cryptography import x509

    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise WebhookConfigError(f"--ca-file {source}: not PEM certificates: {error}") from error
    for certificate in certificates:
        try:
            constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            continue
        if not constraints.ca:
            subject = certificate.subject.rfc4514_string()
            raise WebhookConfigError(f"--ca-file {source}: holds a non-CA certificate ({subject}); give the CA "
                                     "that signed the serving certificate")
    return data


def webhook_configurations(loaded: LoadResult, settings: WebhookSettings) -> Generated:
    base = check_base_url(settings.url)
    if settings.failure_policy not in FAILURE_POLICIES:
        raise WebhookConfigError(f"--failure-policy {settings.failure_policy!r}: expected Fail or Ignore")
    if not 1 <= settings.timeout_seconds <= 30:
        raise WebhookConfigError(f"--timeout {settings.timeout_seconds}: kube-apiserver accepts 1 to 30 seconds")
    if settings.registration not in REGISTRATIONS:
        raise WebhookConfigError(f"--registration {settings.registration!r}: expected static or api")
    documents: list[Mapping[str, Any]] = []
    notes: list[str] = []
    kinds: tuple[tuple[str, Sequence[Policy], Sequence[Binding], str, str], ...] = (
        ("ValidatingWebhookConfiguration", loaded.validating_policies, loaded.validating_bindings,
         VALIDATING_WEBHOOK, "/validate"),
        ("MutatingWebhookConfiguration", loaded.mutating_policies, loaded.mutating_bindings,
         MUTATING_WEBHOOK, "/mutate"),
    )
    for kind, policies, bindings, webhook_name, path in kinds:
        active = active_pairs(policies, bindings)
        policy_word = "validating" if kind.startswith("Validating") else "mutating"
        if not active:
            unbound = f" ({len(policies)} without a binding, which never fire)" if policies else ""
            notes.append(f"no {policy_word} policy can fire{unbound}: {kind} omitted")
            continue
        webhook = _webhook(webhook_name, base + path, active, settings)
        if kind.startswith("Mutating"):
            webhook["reinvocationPolicy"] = _reinvocation(active)
        name = STATIC_NAME if settings.registration == "static" else API_NAME
        metadata: dict[str, Any] = {"name": name}
        if loaded.content_hash:
            metadata["annotations"] = {HASH_ANNOTATION: loaded.content_hash}
        documents.append({"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "webhooks": [webhook]})
        if settings.registration == "api":
            notes.extend(_unguardable(active, policy_word))
    return Generated(tuple(documents), tuple(notes))


def active_pairs(policies: Sequence[Policy], bindings: Sequence[Binding]) -> list[tuple[Policy, list[Binding]]]:
    """Each policy with its bindings, for the policies that have one (the others never fire)."""
    by_policy: dict[str, list[Binding]] = {}
    for binding in bindings:
        by_policy.setdefault(binding.spec.policy_name, []).append(binding)
    return [(policy, by_policy[policy.metadata.name]) for policy in policies if by_policy.get(policy.metadata.name)]


def _constraints(policy: Policy) -> MatchResources:
    # Validation requires matchConstraints on a policy; an empty one (matches nothing) is the safe reading
    # of a directory that somehow lacks it, since such a policy is refused by the loader anyway.
    return policy.spec.match_constraints or MatchResources()


def _webhook(name: str, url: str, active: Sequence[tuple[Policy, Sequence[Binding]]],
             settings: WebhookSettings) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": url, "caBundle": base64.b64encode(settings.ca_bundle).decode("ascii")},
        "rules": _rules(active),
        "failurePolicy": settings.failure_policy,
        "matchPolicy": _match_policy(active),
        "sideEffects": "None",
        "timeoutSeconds": settings.timeout_seconds,
        "admissionReviewVersions": ["v1"],
    }
    for key, attribute in (("namespaceSelector", "namespace_selector"), ("objectSelector", "object_selector")):
        common = _common_requirements(active, attribute)
        if common:
            webhook[key] = _selector_json(common)
    namespace_requirements = _common_requirements(active, "namespace_selector")
    excluded = [entry.match_condition() for entry in unreachable_classes(active)
                if any(_rule_sends(rule, entry) for rule in webhook["rules"])
                and not _selector_leaves_out(namespace_requirements, entry)]
    if excluded:
        webhook["matchConditions"] = excluded
    return webhook


def _selector_leaves_out(requirements: Sequence[Requirement], entry: ControlPlaneClass) -> bool:
    """Whether the webhook's namespaceSelector already keeps ``entry``'s namespace out."""
    if entry.namespace in (ANY_NAMESPACE, CLUSTER_SCOPED):
        return False
    return any(key == NAMESPACE_NAME_LABEL and ((operator == "NotIn" and entry.namespace in values)
                                                or (operator == "In" and entry.namespace not in values))
               for key, operator, values in requirements)


def _rule_sends(rule: Mapping[str, Any], entry: ControlPlaneClass) -> bool:
    """Whether a generated webhook rule sends some request of ``entry``."""
    scope = rule["scope"]
    if scope != "*" and scope != ("Cluster" if entry.namespace == CLUSTER_SCOPED else "Namespaced"):
        return False
    if "*" not in rule["apiGroups"] and not set(rule["apiGroups"]) & set(entry.groups):
        return False
    return any(resource.partition("/")[0] in ("*", *entry.resources) for resource in rule["resources"])


def _rules(active: Iterable[tuple[Policy, Sequence[Binding]]]) -> list[dict[str, Any]]:
    # Rules equal in everything but operations are merged (a rule is a conjunction, so OR-ing two that
    # differ only in operations is one rule with both operation lists); the rest are kept as they are.
    merged: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str], set[str]] = {}
    for policy, _bindings in active:
        for rule in _constraints(policy).resource_rules:
            key = (tuple(rule.api_groups), tuple(rule.api_versions), tuple(rule.resources), rule.scope or "*")
            merged.setdefault(key, set()).update(rule.operations)
    rules = []
    for (groups, versions, resources, scope), operations in merged.items():
        rules.append({
            "operations": ["*"] if "*" in operations else sorted(operations),
            "apiGroups": list(groups),
            "apiVersions": list(versions),
            "resources": list(resources),
            "scope": scope,
        })
    # A rule another one covers adds nothing kube-apiserver would send (the rules are OR-ed): left out.
    return [rule for index, rule in enumerate(rules)
            if not any(rule_covers(other, rule) and (not rule_covers(rule, other) or position < index)
                       for position, other in enumerate(rules) if position != index)]


def rule_covers(outer: dict[str, Any], inner: dict[str, Any]) -> bool:
    """Whether every request ``inner`` matches is matched by ``outer``."""
    def within(values: list[str], wider: list[str]) -> bool:
        return "*" in wider or set(values) <= set(wider)

    return (within(inner["operations"], outer["operations"]) and within(inner["apiGroups"], outer["apiGroups"])
            and within(inner["apiVersions"], outer["apiVersions"])
            and all(any(_resource_covers(pattern, name) for pattern in outer["resources"])
                    for name in inner["resources"])
            and outer["scope"] in ("*", inner["scope"]))


def _resource_covers(pattern: str, name: str) -> bool:
    """Webhook rule resources: ``*`` is every resource but no subresource, ``*/*`` everything, ``pods/*``
    every subresource of pods, ``*/scale`` the scale subresource of every resource."""
    if pattern in (name, "*/*"):
        return True
    if "/" not in pattern:
        return pattern == "*" and "/" not in name
    if "/" not in name:
        return False
    pattern_resource, _, pattern_sub = pattern.partition("/")
    resource, _, sub = name.partition("/")
    return pattern_resource in ("*", resource) and pattern_sub in ("*", sub)


def _match_policy(active: Iterable[tuple[Policy, Sequence[Binding]]]) -> str:
    exact = all(_constraints(policy).match_policy == "Exact" for policy, _ in active)
    return "Exact" if exact else "Equivalent"


def _reinvocation(active: Iterable[tuple[Policy, Sequence[Binding]]]) -> str:
    # One webhook stands for every mutating policy; if any wants another pass after later mutations,
    # the webhook must ask for it (staticadm re-evaluates the rest idempotently).
    wants = any(isinstance(policy, MutatingAdmissionPolicy) and policy.spec.reinvocation_policy == "IfNeeded"
                for policy, _ in active)
    return "IfNeeded" if wants else "Never"


def _requirements(selector: LabelSelector | None) -> frozenset[Requirement]:
    if selector is None:
        return frozenset()
    found: set[Requirement] = {(key, "In", (value,)) for key, value in selector.match_labels.items()}
    for expression in selector.match_expressions:
        found.add((expression.key, expression.operator, tuple(sorted(set(expression.values)))))
    return frozenset(found)


def implied_requirements(policy: Policy, bindings: Sequence[Binding], attribute: str) -> frozenset[Requirement]:
    """Requirements every request reaching a (policy, binding) evaluation of ``policy`` satisfies."""
    implied = _requirements(getattr(_constraints(policy), attribute))
    per_binding = [
        _requirements(getattr(binding.spec.match_resources, attribute))
        if binding.spec.match_resources is not None else frozenset[Requirement]()
        for binding in bindings
    ]
    return implied | frozenset.intersection(*per_binding) if per_binding else implied


def _common_requirements(active: Sequence[tuple[Policy, Sequence[Binding]]], attribute: str) -> list[Requirement]:
    sets = [implied_requirements(policy, bindings, attribute) for policy, bindings in active]
    return sorted(frozenset.intersection(*sets)) if sets else []


def _selector_json(requirements: Sequence[Requirement]) -> dict[str, Any]:
    match_labels = {key: values[0] for key, operator, values in requirements
                    if operator == "In" and len(values) == 1}
    expressions = []
    for key, operator, values in requirements:
        if operator == "In" and len(values) == 1 and match_labels.get(key) == values[0]:
            continue
        expression: dict[str, Any] = {"key": key, "operator": operator}
        if values:
            expression["values"] = list(values)
        expressions.append(expression)
    selector: dict[str, Any] = {}
    if match_labels:
        selector["matchLabels"] = match_labels
    if expressions:
        selector["matchExpressions"] = expressions
    return selector


def _unguardable(active: Iterable[tuple[Policy, Sequence[Binding]]], policy_word: str) -> list[str]:
    notes = []
    for policy, _ in active:
        guarded = sorted({
            resource.partition("/")[0]
            for rule in _constraints(policy).resource_rules
            if {"*", _ADMISSION_GROUP} & set(rule.api_groups)
            for resource in rule.resources
            if resource.partition("/")[0] in _EXEMPT_FROM_API_WEBHOOKS | {"*"}
        })
        if guarded:
            shown = "admission configuration objects" if "*" in guarded else ", ".join(guarded)
            notes.append(f"{policy_word} policy {policy.metadata.name}: kube-apiserver never sends {shown} "
                         "to API-registered webhooks; only static webhook registration (kube-apiserver 1.36+) "
                         "guards them")
    return notes
