"""REST defaulting of the v1 types (``pkg/apis/admissionregistration/v1`` defaults), applied before
validation exactly as ``scheme.Default`` does for a static manifest.

- policy ``failurePolicy`` defaults to ``Fail`` (VAP and MAP);
- a non-nil ``MatchResources`` gets ``matchPolicy: Equivalent`` and empty namespace/object selectors;
  a binding without ``matchResources`` keeps it nil;
- every rule (``resourceRules`` and ``excludeResourceRules``) gets ``scope: "*"``.

There is deliberately no default for a MAP's ``reinvocationPolicy``: the v1 type has none (it is a
required plain string), so leaving it out is a validation error, as in kube-apiserver.
"""

from __future__ import annotations

from dataclasses import replace

from staticadm.model import (
    LabelSelector,
    MatchResources,
    MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding,
    NamedRuleWithOperations,
    TopLevel,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)

FAIL = "Fail"
EQUIVALENT = "Equivalent"
ALL_SCOPES = "*"


def default_rule(rule: NamedRuleWithOperations) -> NamedRuleWithOperations:
    return rule if rule.scope is not None else replace(rule, scope=ALL_SCOPES)


def default_match_resources(match: MatchResources | None) -> MatchResources | None:
    if match is None:
        return None
    return replace(
        match,
        match_policy=match.match_policy if match.match_policy is not None else EQUIVALENT,
        namespace_selector=match.namespace_selector if match.namespace_selector is not None else LabelSelector(),
        object_selector=match.object_selector if match.object_selector is not None else LabelSelector(),
        resource_rules=tuple(default_rule(r) for r in match.resource_rules),
        exclude_resource_rules=tuple(default_rule(r) for r in match.exclude_resource_rules),
    )


def apply_defaults(obj: TopLevel) -> TopLevel:
    if isinstance(obj, ValidatingAdmissionPolicy | MutatingAdmissionPolicy):
        spec = replace(
            obj.spec,
            failure_policy=obj.spec.failure_policy if obj.spec.failure_policy is not None else FAIL,
            match_constraints=default_match_resources(obj.spec.match_constraints),
        )
        return replace(obj, spec=spec)  # type: ignore[arg-type]  # spec is of obj's own kind
    if isinstance(obj, ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding):
        defaulted = replace(obj.spec, match_resources=default_match_resources(obj.spec.match_resources))
        return replace(obj, spec=defaulted)  # type: ignore[arg-type]  # spec is of obj's own kind
    raise TypeError(f"cannot default {type(obj).__name__}")
