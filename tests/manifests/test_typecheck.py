"""Type checking of ValidatingAdmissionPolicy expressions against the matched kinds' schemas (check and the
daemon), on the mistakes published policies make."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from staticadm.cli import main
from staticadm.manifests.loader import load_manifest_directory
from staticadm.manifests.typecheck import load_type_warnings, types_to_check
from tests.server.harness import DaemonFactory, make_daemon, wait_for

__all__ = ["make_daemon"]


def policy(rules: str, *validations: str, variables: str = "") -> str:
    checks = "".join(f"  - expression: {json.dumps(v)}\n" for v in validations)
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: typed.static.k8s.io}}
spec:
  matchConstraints:
    resourceRules:
{rules}
{variables}  validations:
{checks}---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: typed.static.k8s.io}}
spec: {{policyName: typed.static.k8s.io, validationActions: [Deny]}}
"""


PODS = '    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}'
WORKLOADS = ('    - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["CREATE"], '
             'resources: ["deployments", "daemonsets", "deployments/scale"]}')


def warnings_of(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "policy.yaml").write_text(text)
    result = load_manifest_directory(str(tmp_path))
    assert not result.errors, result.errors
    return [w.message for w in load_type_warnings(result)]


def test_a_pod_policy_reading_a_workload_template_is_warned_about_per_kind(tmp_path: Path) -> None:
    warnings = warnings_of(tmp_path, policy(
        PODS, "object.spec.template.spec.containers.all(c, has(c.resources))",
        "object.spec.containers.all(c, c.image != '')"))
    assert len(warnings) == 1
    assert warnings[0].startswith("spec.validations[0].expression: type checking: "
                                  "/v1, Kind=Pod: ERROR: <input>:1:12: undefined field 'template'")


def test_wrong_types_and_unknown_fields_on_workloads(tmp_path: Path) -> None:
    warnings = warnings_of(tmp_path, policy(
        WORKLOADS, "object.spec.replicas == 'x'", "object.spec.replicas <= 10 && object.metadata.namespace != ''",
        "object.spec.template.spec.containers.all(c, c.securityContext.privileged == 'false')",
        variables="  variables:\n  - name: count\n    expression: object.spec.replicas\n")
        .replace('  - expression: "object.spec.replicas <= 10', '  - messageExpression: "\'n=\' + variables.count"\n'
                                                                  '    expression: "object.spec.replicas <= 10'))
    text = "\n".join(warnings)
    # Deployments have replicas, DaemonSets do not; both are checked, subresources are not.
    assert "apps/v1, Kind=DaemonSet: ERROR: <input>:1:12: undefined field 'replicas'" in text
    assert "apps/v1, Kind=Deployment: ERROR: <input>:1:22: found no matching overload for '_==_' applied to " \
           "'(int, string)'" in text
    assert "spec.validations[1].messageExpression" in text and "'_+_' applied to '(string, int)'" in text
    assert "'_==_' applied to '(bool, string)'" in text
    # object.metadata.namespace: Kubernetes recognizes keywords as field names.
    assert not [w for w in warnings if w.startswith("spec.validations[1].expression:")
                and "Kind=Deployment" in w]


def test_wildcards_and_unknown_kinds_are_not_checked(tmp_path: Path) -> None:
    any_group = '    - {apiGroups: ["*"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}'
    custom = '    - {apiGroups: ["example.com"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["widgets"]}'
    assert warnings_of(tmp_path, policy(any_group, "object.spec.nothing == 1")) == []
    assert warnings_of(tmp_path, policy(custom, "object.spec.nothing == 1")) == []
    (tmp_path / "policy.yaml").write_text(policy(WORKLOADS, "true"))
    assert types_to_check(load_manifest_directory(str(tmp_path)).validating_policies[0]) == [
        ("apps", "v1", "DaemonSet"), ("apps", "v1", "Deployment")]


def test_the_examples_type_check_clean(tmp_path: Path) -> None:
    assert load_type_warnings(load_manifest_directory("manifests/examples")) == []


def test_check_reports_them_as_warnings_and_strict_as_errors(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(policy(PODS, "object.spec.template.metadata.name != ''"))
    out = io.StringIO()
    assert main(["check", str(tmp_path), "-o", "json"], stdout=out, stderr=io.StringIO()) == 0
    [warning] = [w for w in json.loads(out.getvalue())["directories"][0]["warnings"] if "type checking" in w["message"]]
    assert warning["field"] == "spec.validations[0].expression" and warning["name"] == "typed.static.k8s.io"
    assert warning["file"] == str(tmp_path / "policy.yaml")
    out = io.StringIO()
    assert main(["check", "--strict", str(tmp_path)], stdout=out, stderr=io.StringIO()) == 1
    assert "INVALID" in out.getvalue() and "undefined field 'template'" in out.getvalue()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_daemon_logs_the_warnings_of_what_it_loads(make_daemon: DaemonFactory, workers: str) -> None:
    daemon = make_daemon(policy=None, start=False, args=["--log-format", "json", "--workers", workers])
    (daemon.manifests / "typed.yaml").write_text(policy(PODS, "object.spec.template.metadata.name != ''"))
    daemon.start()

    def logged() -> list[dict[str, object]]:
        return [record for record in (json.loads(line) for line in daemon.log().splitlines() if line.startswith("{"))
                if record.get("msg") == "policy type checking"]

    assert wait_for(lambda: len(logged()) == 1, timeout=15), daemon.log()
    record = logged()[0]
    assert record["field"] == "spec.validations[0].expression" and "undefined field 'template'" in str(
        record["warning"])
    assert daemon.validate({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "name": "p",
        "namespace": "default", "userInfo": {"username": "u"},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}}}).status == 200
