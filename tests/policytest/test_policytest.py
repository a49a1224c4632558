"""``staticadm test``: declarative policy tests, run as a CI job would run them."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from xml.etree import ElementTree

import yaml

from staticadm.cli import main
from tests.server import forked
from tests.server.harness import REPO_ROOT

POLICY = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: team-label.static.k8s.io}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["deployments"]}
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: deployments need a team label
    reason: Invalid
  - expression: "request.operation != 'UPDATE' || object.spec.replicas <= oldObject.spec.replicas * 2"
    messageExpression: "'replicas may at most double, from ' + string(oldObject.spec.replicas)"
  auditAnnotations:
  - key: replicas
    valueExpression: "string(object.spec.replicas)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: team-label.static.k8s.io}
spec:
  policyName: team-label.static.k8s.io
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: team-label-prod-warn.static.k8s.io}
spec:
  policyName: team-label.static.k8s.io
  validationActions: [Warn]
  matchResources:
    namespaceSelector: {matchLabels: {env: prod}}
"""

DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "web", "namespace": "shop", "labels": {"team": "a"}},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}


NAMESPACES = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod-shop", "labels": {"env": "prod"}}},
              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"env": "dev"}}}]


def write_suite(directory: Path, cases: list[dict], **spec: object) -> Path:
    (directory / "policies").mkdir(parents=True, exist_ok=True)
    (directory / "policies" / "team.yaml").write_text(POLICY)
    document = {"apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "team"},
                "spec": {"manifests": "policies", "namespaces": NAMESPACES, "cases": cases, **spec}}
    path = directory / "team.test.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["test", *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_the_examples_pass_through_the_command_as_ci_runs_it() -> None:
    completed = forked.run([sys.executable, "-m", "staticadm", "test", "manifests/examples/tests"], cwd=REPO_ROOT,
                           timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "0 failed" in completed.stdout and "PASS  a privileged container is denied" in completed.stdout


def test_expectations_on_denials_warnings_audit_annotations_and_updates(tmp_path: Path) -> None:
    unlabelled = {**DEPLOYMENT, "metadata": {"name": "web", "namespace": "shop"}}
    scaled = {**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "replicas": 9}}
    write_suite(tmp_path, [
        {"name": "labelled", "object": DEPLOYMENT,
         "expect": {"allowed": True, "warnings": [], "auditAnnotations": {"team-label.static.k8s.io/replicas": "2"}}},
        {"name": "unlabelled", "object": unlabelled,
         "expect": {"allowed": False, "deniedBy": {"policy": "team-label.static.k8s.io",
                                                   "binding": "team-label.static.k8s.io"},
                    "reason": "Invalid", "code": 422, "messageContains": "deployments need a team label"}},
        {"name": "warned in prod", "object": {**unlabelled, "metadata": {"name": "web", "namespace": "prod-shop"}},
         "namespace": "prod-shop", "endpoint": "validate",
         "expect": {"allowed": False, "warnings": ["deployments need a team label"]}},
        {"name": "scaled too far", "operation": "UPDATE", "object": scaled, "oldObject": DEPLOYMENT,
         "expect": {"allowed": False, "messageContains": "replicas may at most double, from 2"}},
        {"name": "a whole AdmissionReview", "reviewFile": "review.json", "expect": {"allowed": True}},
    ])
    (tmp_path / "review.json").write_text(json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                    "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                    "operation": "CREATE", "name": "web", "namespace": "shop", "userInfo": {"username": "ci"},
                    "object": DEPLOYMENT}}))
    code, out, _ = run(str(tmp_path))
    assert code == 0, out
    assert "5 passed, 0 failed" in out


def test_a_failed_expectation_exits_1_with_diffs_json_yaml_and_junit(tmp_path: Path) -> None:
    write_suite(tmp_path, [
        {"name": "wrong message", "object": {**DEPLOYMENT, "metadata": {"name": "web", "namespace": "shop"}},
         "expect": {"allowed": False, "messageContains": "needs an owner",
                    "deniedBy": {"policy": "other.static.k8s.io"}}},
        {"name": "wrong object", "object": DEPLOYMENT,
         "expect": {"allowed": True, "object": {**DEPLOYMENT, "spec": {"replicas": 3}}}},
        {"name": "right", "object": DEPLOYMENT, "expect": {"allowed": True}},
    ])
    junit = tmp_path / "out" / "report.xml"
    code, out, _ = run(str(tmp_path), "--junit", str(junit))
    assert code == 1
    assert "FAIL  wrong message" in out and "PASS  right" in out and "1 passed, 2 failed" in out
    assert "expected the message to contain 'needs an owner', got" in out
    assert "expected denied by policy 'other.static.k8s.io', got policy 'team-label.static.k8s.io'" in out
    assert "--- expected object" in out and '-    "replicas": 3' in out
    suites = ElementTree.parse(junit).getroot()
    cases = {case.get("name"): case for case in suites.iter("testcase")}
    assert cases["wrong object"].find("failure") is not None and cases["right"].find("failure") is None
    code, out, _ = run(str(tmp_path), "-o", "json")
    report = json.loads(out)
    assert code == 1 and report["summary"] == {"files": 1, "cases": 3, "passed": 1, "failed": 2, "unusableFiles": 0,
                                                 "errors": 0}
    failed = [case for case in report["files"][0]["cases"] if not case["passed"]]
    assert failed[0]["response"]["response"]["allowed"] is False
    code, out, _ = run(str(tmp_path), "-o", "yaml")
    assert code == 1 and yaml.safe_load(out)["summary"]["failed"] == 2


def test_every_problem_of_a_test_file_is_reported_at_once_and_exits_2(tmp_path: Path) -> None:
    write_suite(tmp_path, [
        {"name": "a", "object": DEPLOYMENT, "expect": {"alowed": True}},
        {"name": "b", "objectFile": "missing.yaml", "operation": "PATCH", "expect": {"allowed": "yes"}},
        {"name": "a", "object": DEPLOYMENT, "review": {}, "expect": {"allowed": True}},
    ])
    code, out, _ = run(str(tmp_path / "team.test.yaml"))
    assert code == 2
    path = str(tmp_path / "team.test.yaml")
    for expected in (f"{path}: spec.cases[0].expect.alowed: unknown field",
                     f"{path}: spec.cases[0].expect.allowed: required",
                     f"{path}: spec.cases[1].objectFile: cannot read",
                     f"{path}: spec.cases[1].operation: must be one of",
                     f"{path}: spec.cases[1].expect.allowed: must be true or false",
                     f"{path}: spec.cases[2]: give exactly one of object/objectFile"):
        assert expected in out, out


def test_invalid_manifests_and_no_tests_are_unusable(tmp_path: Path) -> None:
    write_suite(tmp_path, [{"name": "a", "object": DEPLOYMENT, "expect": {"allowed": True}}])
    invalid = POLICY.replace("validationActions: [Deny]", "validationActions: []")
    (tmp_path / "policies" / "team.yaml").write_text(invalid)
    code, out, _ = run(str(tmp_path))
    assert code == 2 and "UNUSABLE  manifests:" in out and "validationActions" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "policy.yaml").write_text(POLICY)
    code, _, err = run(str(empty))
    assert code == 2 and "no PolicyTest documents found" in err
