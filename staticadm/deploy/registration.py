"""The installed static webhook registration, read (never written) and compared with the loaded policies.

``staticadm webhook-config --out-dir DIR`` writes staticadm's ValidatingWebhookConfiguration and
MutatingWebhookConfiguration into ``DIR/validating-webhooks`` and ``DIR/mutating-webhooks``, the
directories kube-apiserver's AdmissionConfiguration names. A policy added later whose requests the
registration does not send is never evaluated; nothing fails. This module finds those policies: for each
policy with a binding, every (operation, group, version, resource) its rules name must be sent by one of
staticadm's webhooks whose selectors the policy (or all of its bindings) implies, whose matchPolicy sends
what an Equivalent policy matches, and whose matchConditions exclude only control-plane classes the policy
cannot match (:mod:`staticadm.deploy.exclusions`). A condition staticadm does not generate cannot be judged
and is reported.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from staticadm.defaults import DEFAULT_TIMEOUT_SECONDS
from staticadm.deploy.exclusions import BY_NAME, pair_reaches
from staticadm.deploy.webhooks import (
    MUTATING_WEBHOOK,
    VALIDATING_WEBHOOK,
    Requirement,
    active_pairs,
    implied_requirements,
    rule_covers,
)
from staticadm.manifests.files import is_manifest_name
from staticadm.model import Binding, MatchResources, Policy
from staticadm.yamljson import ParseError, parse_stream

#: (subdirectory of the registration directory, configuration kind, staticadm's webhook in it), per plugin.
PLUGINS = {
    "validating": ("validating-webhooks", "ValidatingWebhookConfiguration", VALIDATING_WEBHOOK),
    "mutating": ("mutating-webhooks", "MutatingWebhookConfiguration", MUTATING_WEBHOOK),
}
#: Larger files are not read: a webhook configuration is a few kilobytes.
MAX_FILE_BYTES = 4 * 1024 * 1024
#: At most this many missing rules are named per policy (the count says how many more).
SHOWN_GAPS = 6


@dataclass(frozen=True, slots=True)
class InstalledRegistration:
    directory: str
    #: staticadm's webhooks by plugin ("validating", "mutating"), as the files hold them.
    webhooks: Mapping[str, tuple[Mapping[str, Any], ...]]
    #: Why part of it could not be read (a missing directory, a file that does not parse), by plugin.
    problems: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Unregistered:
    """A policy the installed registration cannot deliver (some of) its requests to."""

    plugin: str
    policy: Policy
    #: What is not sent, each naming the rule or the webhook setting at fault.
    gaps: tuple[str, ...]

    def describe(self) -> str:
        shown = list(self.gaps[:SHOWN_GAPS])
        if len(self.gaps) > SHOWN_GAPS:
            shown.append(f"and {len(self.gaps) - SHOWN_GAPS} more")
        return "; ".join(shown)


def signature(directory: str) -> tuple[tuple[str, int, int, int], ...]:
    """What changes whenever a file of the registration does (name, inode, size, mtime): cheap to poll."""
    stamps = []
    for subdirectory, _, _ in PLUGINS.values():
        path = os.path.join(directory, subdirectory)
        try:
            names = sorted(os.listdir(path))
        except OSError:
            stamps.append((path, -1, -1, -1))
            continue
        for name in names:
            try:
                info = os.stat(os.path.join(path, name))
            except OSError:
                continue
            stamps.append((os.path.join(path, name), info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(stamps)


def read_registration(directory: str) -> InstalledRegistration:
    """staticadm's webhooks in ``directory`` as kube-apiserver's loader reads the files: direct children named
    ``*.yaml``, ``*.yml`` or ``*.json``, every document (and v1 List item) of the plugin's kind."""
    webhooks: dict[str, tuple[Mapping[str, Any], ...]] = {}
    problems: dict[str, tuple[str, ...]] = {}
    for plugin, (subdirectory, kind, webhook_name) in PLUGINS.items():
        path = os.path.join(directory, subdirectory)
        found: list[Mapping[str, Any]] = []
        trouble: list[str] = []
        try:
            names = sorted(name for name in os.listdir(path) if is_manifest_name(name))
        except OSError as error:
            problems[plugin] = (f"{path}: {error.strerror or error}",)
            webhooks[plugin] = ()
            continue
        for name in names:
            file_path = os.path.join(path, name)
            try:
                if os.path.isdir(file_path):
                    continue
                with open(file_path, "rb") as handle:
                    data = handle.read(MAX_FILE_BYTES + 1)
                if len(data) > MAX_FILE_BYTES:
                    trouble.append(f"{file_path}: larger than {MAX_FILE_BYTES} bytes; not read")
                    continue
                documents = parse_stream(data.decode("utf-8"))
            except (OSError, UnicodeDecodeError, ParseError) as error:
                trouble.append(f"{file_path}: {getattr(error, 'strerror', None) or error}")
                continue
            for document in documents:
                items = _mappings(document.get("items")) if isinstance(document, Mapping) and \
                    document.get("kind") == "List" else [document]
                for item in items:
                    if not isinstance(item, Mapping) or item.get("kind") != kind:
                        continue
                    found.extend(webhook for webhook in _mappings(item.get("webhooks"))
                                 if webhook.get("name") == webhook_name)
        webhooks[plugin] = tuple(found)
        if trouble:
            problems[plugin] = tuple(trouble)
    return InstalledRegistration(directory, webhooks, problems)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How the installed registration calls staticadm: what regenerating it keeps unless told otherwise."""

    url: str
    ca_bundle: bytes
    failure_policy: str
    timeout_seconds: int


def installed_client_settings(directory: str) -> ClientSettings | None:
    """The base URL, CA bundle, failurePolicy and timeout of staticadm's first webhook installed in ``directory``."""
    installed = read_registration(directory)
    for plugin in PLUGINS:
        for webhook in installed.webhooks.get(plugin, ()):
            client = webhook.get("clientConfig")
            if not isinstance(client, Mapping):
                continue
            url, bundle = client.get("url"), client.get("caBundle")
            if not isinstance(url, str) or not isinstance(bundle, str):
                continue
            try:
                ca_bundle = base64.b64decode(bundle, validate=True)
            except ValueError:
                continue
            base = url.removesuffix("/validate").removesuffix("/mutate")
            timeout = webhook.get("timeoutSeconds")
            return ClientSettings(base, ca_bundle, str(webhook.get("failurePolicy") or "Fail"),
                                  timeout if isinstance(timeout, int) else DEFAULT_TIMEOUT_SECONDS)
    return None


def content_digest(registration: InstalledRegistration) -> str:
    """A digest of what the comparison reads: equal digests compare alike."""
    return hashlib.sha256(repr((sorted((k, repr(v)) for k, v in registration.webhooks.items()),
                                sorted(registration.problems.items()))).encode()).hexdigest()


def _strings(value: Any) -> list[str]:
    """The strings of a list in a hand-edited file (anything else in it is ignored; kube-apiserver would refuse
    the file, and then it sends nothing, which the comparison reports)."""
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _selector_requirements(selector: Any) -> frozenset[Requirement]:
    if not isinstance(selector, Mapping):
        return frozenset()
    labels = selector.get("matchLabels")
    found: set[Requirement] = {(str(key), "In", (str(value),))
                               for key, value in (labels.items() if isinstance(labels, Mapping) else ())}
    expressions = selector.get("matchExpressions")
    for expression in expressions if isinstance(expressions, list) else []:
        if isinstance(expression, Mapping):
            values = tuple(sorted(set(_strings(expression.get("values")))))
            found.add((str(expression.get("key", "")), str(expression.get("operator", "")), values))
    return frozenset(found)


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    """A webhook rule with kube-apiserver's defaults (scope ``*``)."""
    scope = rule.get("scope")
    return {"operations": _strings(rule.get("operations")), "apiGroups": _strings(rule.get("apiGroups")),
            "apiVersions": _strings(rule.get("apiVersions")), "resources": _strings(rule.get("resources")),
            "scope": scope if isinstance(scope, str) and scope else "*"}


def _webhook_gaps(webhook: Mapping[str, Any], policy: Policy, bindings: Sequence[Binding]) -> list[str]:
    """What keeps ``webhook`` from sending a request ``policy`` matches, beyond its rules."""
    gaps = []
    name = webhook.get("name", "")
    for key, attribute in (("namespaceSelector", "namespace_selector"), ("objectSelector", "object_selector")):
        required = _selector_requirements(webhook.get(key))
        missing = required - implied_requirements(policy, bindings, attribute)
        if missing:
            shown = ", ".join(f"{key_} {operator} {list(values)}" if values else f"{key_} {operator}"
                              for key_, operator, values in sorted(missing))
            gaps.append(f"webhook {name} has {key} {shown}, which the policy does not require")
    constraints = policy.spec.match_constraints or MatchResources()
    if webhook.get("matchPolicy") == "Exact" and constraints.match_policy != "Exact":
        gaps.append(f"webhook {name} has matchPolicy Exact while the policy is Equivalent (other versions of its "
                    "resources are not sent)")
    conditions = webhook.get("matchConditions")
    for condition in conditions if isinstance(conditions, list) else []:
        condition_name = str(condition.get("name", "")) if isinstance(condition, Mapping) else ""
        known = BY_NAME.get(condition_name)
        if known is None or not isinstance(condition, Mapping) or condition.get("expression") != known.expression:
            gaps.append(f"webhook {name} has matchCondition {condition_name!r}, which staticadm does not generate "
                        "and cannot judge")
        elif any(pair_reaches(policy, binding, known) for binding in bindings):
            gaps.append(f"webhook {name}'s matchCondition {condition_name} leaves out {known.description}, which "
                        "the policy can match")
    return gaps


def _atoms(policy: Policy) -> list[tuple[dict[str, Any], str, str]]:
    """Each (operation, group, version, resource) the policy's rules name, as a one-request webhook rule, with
    the operation and the rest described apart (to name the missing operations of a resource together)."""
    atoms = []
    constraints = policy.spec.match_constraints or MatchResources()
    for rule in constraints.resource_rules:
        scope = rule.scope or "*"
        for operation in rule.operations:
            for group in rule.api_groups:
                for version in rule.api_versions:
                    for resource in rule.resources:
                        described = f"{group or 'core'}/{version} {resource}" + (
                            f" (scope {scope})" if scope != "*" else "")
                        atoms.append(({"operations": [operation], "apiGroups": [group], "apiVersions": [version],
                                       "resources": [resource], "scope": scope}, operation, described))
    return atoms


def unregistered(registration: InstalledRegistration, plugin: str, policies: Sequence[Policy],
                 bindings: Sequence[Binding]) -> list[Unregistered]:
    """The policies of ``plugin`` (with a binding) some of whose requests the registration does not send."""
    subdirectory, _kind, webhook_name = PLUGINS[plugin]
    webhooks = registration.webhooks.get(plugin, ())
    found = []
    for policy, policy_bindings in active_pairs(policies, bindings):
        if not webhooks:
            why = "; ".join(registration.problems.get(plugin, ())) or \
                f"no webhook {webhook_name} in {os.path.join(registration.directory, subdirectory)}"
            found.append(Unregistered(plugin, policy, (f"nothing is sent to the policy ({why})",)))
            continue
        per_webhook = [(webhook, [_rule(rule) for rule in _mappings(webhook.get("rules"))],
                        _webhook_gaps(webhook, policy, policy_bindings)) for webhook in webhooks]
        unsent: dict[str, list[str]] = {}
        gaps: list[str] = []
        for atom, operation, described in _atoms(policy):
            covering = [webhook_gaps for _webhook, rules, webhook_gaps in per_webhook
                        if any(rule_covers(rule, atom) for rule in rules)]
            if not covering:
                unsent.setdefault(described, []).append(operation)
            elif all(covering):
                gaps.extend(gap for gap in covering[0] if gap not in gaps)
        gaps[:0] = [f"no rule sends {', '.join(operations)} {described}" for described, operations in unsent.items()]
        if gaps:
            found.append(Unregistered(plugin, policy, tuple(gaps)))
    return found
