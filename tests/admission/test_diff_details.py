"""``staticadm diff`` reports what a user or an auditor would see change (the denial's message, the audit
annotations) and names each object; a plain object can be reviewed as a subresource request."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
import yaml

from staticadm.cli import main
from tests.server.harness import REPO_ROOT

SCHEMA = json.loads((REPO_ROOT / "staticadm" / "schemas" / "diff-report.v1alpha1.schema.json").read_text())

API = "admissionregistration.k8s.io/v1"
DEPLOYMENTS = {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
               "resources": ["deployments"]}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
              "spec": {"replicas": 40}}


def _policy(directory: Path, message: str, annotations: bool, rule: dict | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    spec: dict = {"matchConstraints": {"resourceRules": [rule or DEPLOYMENTS]},
                  "validations": [{"expression": "object.spec.replicas <= 10", "message": message}]}
    if annotations:
        spec["auditAnnotations"] = [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}]
    (directory / "replicas.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "replicas.static.k8s.io"},
         "spec": spec},
        {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "replicas.static.k8s.io"},
         "spec": {"policyName": "replicas.static.k8s.io", "validationActions": ["Deny", "Audit"]}}]))
    return directory


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_changed_denial_message_and_a_lost_audit_annotation_are_differences(tmp_path: Path) -> None:
    live = _policy(tmp_path / "live", "at most 10 replicas", annotations=True)
    new = _policy(tmp_path / "new", "at most 10 replicas per deployment", annotations=False)
    request = tmp_path / "deployment.yaml"
    request.write_text(yaml.safe_dump(DEPLOYMENT))
    code, out, err = _cli("diff", str(live), str(new), str(request), "-o", "json")
    assert code == 3, err
    jsonschema.validate(json.loads(out), SCHEMA)
    [entry] = json.loads(out)["differences"]
    assert (entry["kind"], entry["namespace"], entry["name"]) == (
        {"group": "apps", "version": "v1", "kind": "Deployment"}, "shop", "web")
    assert entry["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}
    changes = {change["difference"]: change for change in entry["differences"] if change["endpoint"] == "validate"}
    message = changes["denial_message"]
    assert "at most 10 replicas per deployment" in message["detail"]
    assert "denied now with 422 Invalid" in message["detail"]
    assert message["livePolicies"] == message["newPolicies"] == ["replicas.static.k8s.io/replicas.static.k8s.io"]
    annotations = changes["audit_annotations"]
    assert annotations["detail"].startswith("audit annotations gone: replicas_replicas; audit annotations changed: "
                                            "validation-failure")
    code, out, _ = _cli("diff", str(live), str(new), str(request))
    assert f"{request} (CREATE deployments.apps shop/web): validate: denial_message: would be denied with" in out


def test_a_plain_scale_object_is_reviewed_as_the_deployments_scale_request(tmp_path: Path) -> None:
    scale_rule = {**DEPLOYMENTS, "resources": ["deployments/scale"]}
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "scale.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "scale.static.k8s.io"},
         "spec": {"matchConstraints": {"resourceRules": [scale_rule]},
                  "validations": [{"expression": "object.spec.replicas <= 10", "message": "at most 10 replicas"}]}},
        {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "scale.static.k8s.io"},
         "spec": {"policyName": "scale.static.k8s.io", "validationActions": ["Deny"]}}]))
    scale = tmp_path / "scale.yaml"
    scale.write_text(yaml.safe_dump({"apiVersion": "autoscaling/v1", "kind": "Scale",
                                     "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 30}}))
    code, out, err = _cli("review", str(manifests), str(scale), "--subresource", "deployments.apps/scale",
                          "-o", "json")
    assert code == 3, err
    request = json.loads(out)["request"]
    assert request["kind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    assert request["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}
    assert (request["subResource"], request["namespace"], request["name"]) == ("scale", "shop", "web")
    # Without the parent, the request cannot be what kube-apiserver sends: said, not guessed.
    code, _, err = _cli("review", str(manifests), str(scale), "--subresource", "scale")
    assert code == 2 and "is only the object of a scale subresource: name whose, e.g. --subresource " \
        "deployments.apps/scale" in err
    code, out, _ = _cli("review", str(manifests), str(scale), "--subresource", "widgets.v1beta1.example.com/scale",
                        "-o", "json")
    assert json.loads(out)["request"]["resource"] == {"group": "example.com", "version": "v1beta1",
                                                      "resource": "widgets"}
