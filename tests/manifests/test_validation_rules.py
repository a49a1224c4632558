"""One failing manifest per validation rule: the exact file, document and field path are reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.manifests.conftest import DELETE, MAP, MAPB, VAP, VAPB, find, load, obj, write_yaml

RULE = VAP["spec"]["matchConstraints"]["resourceRules"][0]

CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("name-not-dns", obj(VAP, metadata__name="Bad_Name.static.k8s.io"), "metadata.name", "RFC 1123 subdomain"),
    ("namespace-set", obj(VAP, metadata__namespace="default"), "metadata.namespace", "not allowed on this type"),
    ("bad-label", obj(VAP, metadata__labels={"a b": "x"}), "metadata.labels", "name part must consist"),
    (
        "failure-policy",
        obj(VAP, spec__failurePolicy="Sometimes"),
        "spec.failurePolicy",
        'supported values: "Fail", "Ignore"',
    ),
    ("no-match", obj(VAP, spec__matchConstraints=DELETE), "spec.matchConstraints", "Required value"),
    (
        "no-rules",
        obj(VAP, spec__matchConstraints={"resourceRules": []}),
        "spec.matchConstraints.resourceRules",
        "Required",
    ),
    (
        "match-policy",
        obj(VAP, spec__matchConstraints__matchPolicy="Fuzzy"),
        "spec.matchConstraints.matchPolicy",
        'Unsupported value: "Fuzzy"',
    ),
    (
        "ops-wildcard-mix",
        obj(VAP, spec__matchConstraints__resourceRules__0__operations=["*", "CREATE"]),
        "spec.matchConstraints.resourceRules[0].operations",
        "if '*' is present, must not specify other operations",
    ),
    (
        "op-unknown",
        obj(VAP, spec__matchConstraints__resourceRules__0__operations=["PATCH"]),
        "spec.matchConstraints.resourceRules[0].operations[0]",
        'Unsupported value: "PATCH"',
    ),
    (
        "groups-mix",
        obj(VAP, spec__matchConstraints__resourceRules__0__apiGroups=["*", "apps"]),
        "spec.matchConstraints.resourceRules[0].apiGroups",
        "must not specify other API groups",
    ),
    (
        "versions-empty",
        obj(VAP, spec__matchConstraints__resourceRules__0__apiVersions=[""]),
        "spec.matchConstraints.resourceRules[0].apiVersions[0]",
        "Required value",
    ),
    (
        "double-wildcard",
        obj(VAP, spec__matchConstraints__resourceRules__0__resources=["*/*", "pods"]),
        "spec.matchConstraints.resourceRules[0].resources",
        "if '*/*' is present, must not specify other resources",
    ),
    (
        "x-star",
        obj(VAP, spec__matchConstraints__resourceRules__0__resources=["pods/*", "pods/log"]),
        "spec.matchConstraints.resourceRules[0].resources[1]",
        "if 'pods/*' is present, must not specify pods/log",
    ),
    (
        "star-x",
        obj(VAP, spec__matchConstraints__resourceRules__0__resources=["*/scale", "deployments/scale"]),
        "spec.matchConstraints.resourceRules[0].resources[1]",
        "if '*/scale' is present, must not specify deployments/scale",
    ),
    (
        "star-and-plain",
        obj(VAP, spec__matchConstraints__resourceRules__0__resources=["*", "pods"]),
        "spec.matchConstraints.resourceRules[0].resources",
        "if '*' is present, must not specify other resources without subresources",
    ),
    (
        "scope",
        obj(VAP, spec__matchConstraints__resourceRules__0__scope="Galaxy"),
        "spec.matchConstraints.resourceRules[0].scope",
        '"*", "Cluster", "Namespaced"',
    ),
    (
        "resource-names-dup",
        obj(VAP, spec__matchConstraints__resourceRules__0__resourceNames=["a", "a"]),
        "spec.matchConstraints.resourceRules[0].resourceNames[1]",
        "Duplicate value",
    ),
    (
        "resource-name-slash",
        obj(VAP, spec__matchConstraints__resourceRules__0__resourceNames=["a/b"]),
        "spec.matchConstraints.resourceRules[0].resourceNames[0]",
        "may not contain '/'",
    ),
    (
        "selector-operator",
        obj(VAP, spec__matchConstraints__namespaceSelector={"matchExpressions": [{"key": "a", "operator": "Near"}]}),
        "spec.matchConstraints.namespaceSelector.matchExpressions[0].operator",
        "not a valid selector operator",
    ),
    (
        "selector-values",
        obj(VAP, spec__matchConstraints__objectSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
        "spec.matchConstraints.objectSelector.matchExpressions[0].values",
        "must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (
        "selector-label-value",
        obj(VAP, spec__matchConstraints__objectSelector={"matchLabels": {"a": "-bad-"}}),
        "spec.matchConstraints.objectSelector.matchLabels",
        "a valid label must be an empty string",
    ),
    (
        "too-many-match-conditions",
        obj(VAP, spec__matchConditions=[{"name": f"c{i}", "expression": "true"} for i in range(65)]),
        "spec.matchConditions",
        "Too many: 65: must have at most 64 items",
    ),
    (
        "match-condition-dup",
        obj(VAP, spec__matchConditions=[{"name": "c", "expression": "true"}, {"name": "c", "expression": "true"}]),
        "spec.matchConditions[1].name",
        'Duplicate value: "c"',
    ),
    (
        "match-condition-name",
        obj(VAP, spec__matchConditions=[{"name": "not ok", "expression": "true"}]),
        "spec.matchConditions[0].name",
        "name part must consist",
    ),
    (
        "match-condition-blank",
        obj(VAP, spec__matchConditions=[{"name": "c", "expression": "  "}]),
        "spec.matchConditions[0].expression",
        "Required value",
    ),
    (
        "variable-name",
        obj(VAP, spec__variables=[{"name": "in", "expression": "1"}]),
        "spec.variables[0].name",
        "name is not a valid CEL identifier",
    ),
    (
        "variable-expression",
        obj(VAP, spec__variables=[{"name": "x", "expression": ""}]),
        "spec.variables[0].expression",
        "expression is not specified",
    ),
    (
        "nothing-to-do",
        obj(VAP, spec__validations=DELETE),
        "spec.validations",
        "validations or auditAnnotations must contain at least one item",
    ),
    (
        "message-newline",
        obj(VAP, spec__validations=[{"expression": "true", "message": "a\nb"}]),
        "spec.validations[0].message",
        "message must not contain line breaks",
    ),
    (
        "message-expression-blank",
        obj(VAP, spec__validations=[{"expression": "true", "messageExpression": "   "}]),
        "spec.validations[0].messageExpression",
        "must be non-empty if specified",
    ),
    (
        "reason",
        obj(VAP, spec__validations=[{"expression": "true", "reason": "Unauthorized"}]),
        "spec.validations[0].reason",
        '"Forbidden", "Invalid", "RequestEntityTooLarge"',
    ),
    (
        "audit-key-dup",
        obj(
            VAP,
            spec__auditAnnotations=[{"key": "k", "valueExpression": "'a'"}, {"key": "k", "valueExpression": "'b'"}],
        ),
        "spec.auditAnnotations[1].key",
        'Duplicate value: "k"',
    ),
    (
        "audit-key-invalid",
        obj(VAP, spec__auditAnnotations=[{"key": "bad key", "valueExpression": "'a'"}]),
        "spec.auditAnnotations[0].key",
        'Invalid value: "p.static.k8s.io/bad key"',
    ),
    (
        "audit-value-blank",
        obj(VAP, spec__auditAnnotations=[{"key": "k", "valueExpression": ""}]),
        "spec.auditAnnotations[0].valueExpression",
        "valueExpression is not specified",
    ),
    (
        "param-kind",
        obj(VAP, spec__paramKind={"apiVersion": "v1", "kind": "ConfigMap"}),
        "spec.paramKind",
        "spec.paramKind is not supported for static manifests",
    ),
    (
        "no-suffix",
        obj(VAP, metadata__name="plain.example.com"),
        "metadata.name",
        'must have a name ending with ".static.k8s.io"',
    ),
    ("no-name", obj(VAP, metadata={}), "metadata.name", "must have a name"),
    # Bindings.
    (
        "actions-empty",
        obj(VAPB, spec__validationActions=[]),
        "spec.validationActions",
        "at least one validation action",
    ),
    (
        "actions-deny-warn",
        obj(VAPB, spec__validationActions=["Deny", "Warn"]),
        "spec.validationActions",
        "must not contain both Deny and Warn",
    ),
    ("actions-dup", obj(VAPB, spec__validationActions=["Audit", "Audit"]), "spec.validationActions[1]", "Duplicate"),
    ("actions-unknown", obj(VAPB, spec__validationActions=["Block"]), "spec.validationActions[0]", "Unsupported value"),
    ("policy-name-dns", obj(VAPB, spec__policyName="Not_DNS"), "spec.policyName", "RFC 1123 subdomain"),
    (
        "policy-name-suffix",
        obj(VAPB, spec__policyName="p.example.com"),
        "spec.policyName",
        'spec.policyName "p.example.com" must end with ".static.k8s.io"',
    ),
    (
        "param-ref",
        obj(VAPB, spec__paramRef={"name": "x", "parameterNotFoundAction": "Deny"}),
        "spec.paramRef",
        "spec.paramRef is not supported for static manifests",
    ),
    (
        "binding-unknown-policy",
        obj(VAPB, spec__policyName="missing.static.k8s.io"),
        "spec.policyName",
        'references policy "missing.static.k8s.io" which does not exist in the manifest directory',
    ),
    # Mutating.
    (
        "map-delete",
        obj(MAP, spec__matchConstraints__resourceRules__0__operations=["DELETE"]),
        "spec.matchConstraints.resourceRules.operations",
        'Unsupported value: "DELETE": supported values: "*", "CONNECT", "CREATE", "UPDATE"',
    ),
    ("map-no-mutations", obj(MAP, spec__mutations=[]), "spec.mutations", "mutations must contain at least one item"),
    ("map-reinvocation", obj(MAP, spec__reinvocationPolicy=DELETE), "spec.reinvocationPolicy", "Required value"),
    (
        "map-reinvocation-bad",
        obj(MAP, spec__reinvocationPolicy="Always"),
        "spec.reinvocationPolicy",
        '"IfNeeded", "Never"',
    ),
    ("map-patch-type", obj(MAP, spec__mutations=[{"patchType": ""}]), "spec.mutations[0].patchType", "Required value"),
    (
        "map-patch-type-bad",
        obj(MAP, spec__mutations=[{"patchType": "Merge"}]),
        "spec.mutations[0].patchType",
        '"ApplyConfiguration", "JSONPatch"',
    ),
    (
        "map-patch-missing",
        obj(MAP, spec__mutations=[{"patchType": "ApplyConfiguration"}]),
        "spec.mutations[0].applyConfiguration",
        "must be specified when patchType is ApplyConfiguration",
    ),
    (
        "map-patch-both",
        obj(
            MAP,
            spec__mutations=[
                {"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}, "applyConfiguration": {"expression": "x"}}
            ],
        ),
        "spec.mutations[0].applyConfiguration",
        "must not be specified when patchType is JSONPatch",
    ),
    (
        "map-patch-blank",
        obj(MAP, spec__mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": " "}}]),
        "spec.mutations[0].jsonPatch.expression",
        "Required value",
    ),
    (
        "mapb-delete",
        obj(
            MAPB,
            spec__matchResources={
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
                ]
            },
        ),
        "spec.matchResources.resourceRules.operations",
        'Unsupported value: "DELETE"',
    ),
]


@pytest.mark.parametrize(("case", "doc", "field", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_rule(tmp_path: Path, case: str, doc: dict[str, Any], field: str, fragment: str) -> None:
    # The other kind's valid object keeps bindings resolvable, so only the rule under test fails.
    companions = {
        "ValidatingAdmissionPolicy": VAPB,
        "ValidatingAdmissionPolicyBinding": VAP,
        "MutatingAdmissionPolicy": MAPB,
        "MutatingAdmissionPolicyBinding": MAP,
    }
    path = write_yaml(tmp_path, "10-case.yaml", companions[doc["kind"]], doc)
    result = load(tmp_path)
    error = find(result, field, fragment)
    assert error.path == str(path)
    assert error.document == 1
    assert error.kind == doc["kind"]
    assert str(path) in str(error)
