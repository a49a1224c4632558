"""``review -o json|yaml`` and ``test -o json|yaml`` carry the whole decision: every policy's and binding's
result, each validation's outcome, errors, audit annotations and each mutation's patch, in the
documented, versioned shape (``staticadm/schemas/review-result.v1alpha1.schema.json``)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from staticadm.cli import main
from tests.server.harness import REPO_ROOT

SCHEMA = json.loads((REPO_ROOT / "staticadm" / "schemas" / "review-result.v1alpha1.schema.json").read_text())
API = "admissionregistration.k8s.io/v1"
DEPLOYMENTS = {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
               "resources": ["deployments"]}


def validating(name: str, validations: list[dict[str, Any]], bindings: list[dict[str, Any]],
               **spec: Any) -> list[dict[str, Any]]:
    policy = {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
              "spec": {"matchConstraints": {"resourceRules": [spec.pop("rule", DEPLOYMENTS)]},
                       "validations": validations, **spec}}
    return [policy, *({"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
                       "metadata": {"name": binding.pop("name")}, "spec": {"policyName": name, **binding}}
                      for binding in bindings)]


MANIFESTS = [
    *validating("a-replicas.static.k8s.io", [
        {"expression": "object.spec.replicas <= 3", "messageExpression": "'too many replicas: ' + "
                                                                         "string(object.spec.replicas)"},
        {"expression": "has(object.metadata.labels)"},
        # paused: false is omitempty: kube-apiserver (and review, typing the object) sends no paused field.
        {"expression": "object.spec.?paused.orValue(false) == false", "message": "never shown"},
    ], [{"name": "a-deny.static.k8s.io", "validationActions": ["Deny"]},
        {"name": "a-prod-warn.static.k8s.io", "validationActions": ["Warn"],
         "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}],
        auditAnnotations=[{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}]),
    *validating("b-team.static.k8s.io", [{"expression": "'team' in object.metadata.labels",
                                          "message": "a team label is required"}],
                [{"name": "b-team.static.k8s.io", "validationActions": ["Deny"]}]),
    *validating("c-warn-audit.static.k8s.io", [{"expression": "object.spec.replicas < 2", "reason": "Forbidden",
                                                "message": "prefer one replica"}],
                [{"name": "c-warn-audit.static.k8s.io", "validationActions": ["Warn", "Audit"]}]),
    *validating("d-ignored-error.static.k8s.io", [{"expression": "object.spec.template.spec.nodeName == 'x'"}],
                [{"name": "d-ignored-error.static.k8s.io", "validationActions": ["Deny"]}], failurePolicy="Ignore"),
    *validating("e-condition.static.k8s.io", [{"expression": "false"}],
                [{"name": "e-condition.static.k8s.io", "validationActions": ["Deny"]}],
                matchConditions=[{"name": "only-kube-system", "expression": "request.namespace == 'kube-system'"}]),
    *validating("f-services.static.k8s.io", [{"expression": "false"}],
                [{"name": "f-services.static.k8s.io", "validationActions": ["Deny"]}],
                rule={"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["services"]}),
    {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": {"name": "m-defaults.static.k8s.io"},
     "spec": {"matchConstraints": {"resourceRules": [DEPLOYMENTS]}, "reinvocationPolicy": "Never",
              "mutations": [
                  {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: "
                                                                         "'/metadata/labels/managed', value: 'yes'}]"}},
                  {"patchType": "ApplyConfiguration", "applyConfiguration": {
                      "expression": "Object{spec: Object.spec{replicas: object.spec.replicas}}"}}]}},
    {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "m-defaults.static.k8s.io"},
     "spec": {"policyName": "m-defaults.static.k8s.io"}},
]

DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
              "spec": {"replicas": 5, "paused": False, "template": {"spec": {"containers": []}}}}


def write_manifests(directory: Path) -> Path:
    directory.mkdir()
    (directory / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    (directory.parent / "namespaces.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"env": "dev"}}}))
    return directory


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def by_name(entries: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {entry[key]: entry for entry in entries}


def test_review_json_carries_every_policy_binding_validation_and_mutation(tmp_path: Path) -> None:
    manifests = write_manifests(tmp_path / "m")
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(DEPLOYMENT))
    code, out, err = run("review", "--manifests", str(manifests), "-f", str(tmp_path / "deployment.yaml"),
                         "--namespaces", str(tmp_path / "namespaces.yaml"), "-o", "json")
    assert (code, err) == (4, "")  # d-ignored-error failed to evaluate, whatever its failurePolicy made of it
    result = json.loads(out)
    jsonschema.validate(result, SCHEMA)
    assert (result["apiVersion"], result["kind"], result["allowed"]) == ("staticadm.io/v1alpha1", "ReviewResult",
                                                                          False)
    assert result["request"]["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}

    checks = result["validating"]
    policies = by_name(checks["policies"], "policy")
    assert list(policies) == sorted(policies)
    # The answer names the first denial; the report has both.
    assert "a-replicas.static.k8s.io" in checks["status"]["message"]
    a = policies["a-replicas.static.k8s.io"]
    bindings = by_name(a["bindings"], "binding")
    assert bindings["a-prod-warn.static.k8s.io"]["result"] == "skip"
    assert "namespaceSelector" in bindings["a-prod-warn.static.k8s.io"]["reason"]
    deny = bindings["a-deny.static.k8s.io"]
    assert (a["result"], deny["result"]) == ("fail", "fail")
    assert [(v["index"], v["result"]) for v in deny["validations"]] == [(0, "fail"), (1, "pass"), (2, "pass")]
    assert deny["validations"][0]["message"] == "too many replicas: 5"
    assert deny["validations"][0]["enforcement"] == ["deny"]
    assert a["auditAnnotations"] == {"a-replicas.static.k8s.io/replicas": "5"}

    b = policies["b-team.static.k8s.io"]
    assert b["result"] == "fail"
    assert b["bindings"][0]["validations"][0]["message"] == "a team label is required"

    c = policies["c-warn-audit.static.k8s.io"]["bindings"][0]["validations"][0]
    assert (c["result"], c["reason"], c["enforcement"]) == ("fail", "Forbidden", ["warn", "audit"])
    assert any("prefer one replica" in warning for warning in checks["warnings"])
    assert "validation.policy.admission.k8s.io/validation_failure" in checks["auditAnnotations"]

    d = policies["d-ignored-error.static.k8s.io"]
    assert d["result"] == "error"
    error = d["bindings"][0]["validations"][0]
    assert (error["result"], error["enforcement"], error["errorType"]) == ("error", ["allow"], "invalid_error")
    assert "no such key: nodeName" in error["message"]

    e = policies["e-condition.static.k8s.io"]
    assert e["result"] == "skip"
    assert e["bindings"][0]["reason"] == 'matchCondition "only-kube-system" evaluated to false'

    f = policies["f-services.static.k8s.io"]
    assert (f["result"], f["reason"], f["bindings"]) == ("skip", "no resourceRule matches CREATE apps/v1 "
                                                                  "deployments", [])

    mutation = result["mutating"]
    m = mutation["policies"][0]["bindings"][0]
    assert (m["result"], m["mutated"], m["reinvoked"]) == ("pass", True, False)
    assert [(step["index"], step["patchType"], step["result"]) for step in m["mutations"]] == [
        (0, "JSONPatch", "applied"), (1, "ApplyConfiguration", "unchanged")]
    assert m["mutations"][0]["patch"] == [{"op": "add", "path": "/metadata/labels/managed", "value": "yes"}]
    assert mutation["patch"] == m["mutations"][0]["patch"]


def test_review_yaml_is_the_same_document_without_aliases(tmp_path: Path) -> None:
    manifests = write_manifests(tmp_path / "m")
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(DEPLOYMENT))
    _, as_json, _ = run("review", "--manifests", str(manifests), "-f", str(tmp_path / "deployment.yaml"), "-o", "json")
    _, as_yaml, _ = run("review", "--manifests", str(manifests), "-f", str(tmp_path / "deployment.yaml"), "-o", "yaml")
    assert "&id" not in as_yaml and "*id" not in as_yaml
    assert list(yaml.safe_load_all(as_yaml)) == [json.loads(as_json)]


def test_errors_that_end_a_binding_leave_its_validations_out(tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    (manifests / "p.yaml").write_text(yaml.safe_dump_all(validating(
        "cond.static.k8s.io", [{"expression": "true"}], [{"name": "cond.static.k8s.io", "validationActions": ["Deny"]}],
        matchConditions=[{"name": "broken", "expression": "object.spec.nothing == 1"}])))
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(DEPLOYMENT))
    code, out, _ = run("review", "--manifests", str(manifests), "-f", str(tmp_path / "d.yaml"), "-o", "json")
    result = json.loads(out)
    jsonschema.validate(result, SCHEMA)
    binding = result["validating"]["policies"][0]["bindings"][0]
    assert code == 4
    assert (binding["result"], binding["validations"]) == ("error", [])
    assert [(error["site"], error["enforcement"]) for error in binding["errors"]] == [("matchConditions", "deny")]


def test_policy_test_json_carries_each_cases_decision(tmp_path: Path) -> None:
    write_manifests(tmp_path / "m")
    test = {"apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "decisions"},
            "spec": {"manifests": "m", "namespaces": ["namespaces.yaml"], "cases": [
                {"name": "denied twice", "object": DEPLOYMENT,
                 "expect": {"allowed": False, "deniedBy": {"policy": "a-replicas.static.k8s.io"}}}]}}
    (tmp_path / "t.test.yaml").write_text(yaml.safe_dump(test))
    code, out, _ = run("test", str(tmp_path / "t.test.yaml"), "-o", "json")
    report = json.loads(out)
    assert code == 0
    assert (report["apiVersion"], report["kind"]) == ("staticadm.io/v1alpha1", "TestReport")
    case = report["files"][0]["cases"][0]
    decision = case["decision"]
    for part, definition in ((decision["validating"], "validating"), (decision["mutating"], "mutating"),
                             (case["request"], "request")):
        jsonschema.validate(part, {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{definition}"})
    results = {policy["policy"]: policy["result"] for policy in decision["validating"]["policies"]}
    assert results["a-replicas.static.k8s.io"] == results["b-team.static.k8s.io"] == "fail"
