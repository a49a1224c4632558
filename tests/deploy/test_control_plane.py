"""``staticadm check`` replays the writes every kubeadm control plane makes: a policy set refusing one is named
with the write and the policy (a warning, an error with --strict, in -o json), the shipped examples and what
docs/deployment.md installs refuse none, and the built-in writes are what kube-apiserver sends."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from staticadm.deploy.control_plane import control_plane_requests
from staticadm.yamljson import parse_stream
from tests.deploy.conftest import EXAMPLES, KUBE_APISERVER, REPO_ROOT, run_cli, run_subprocess
from tests.policy_text import validating_policy_yaml, validation_yaml

#: The limits policy as the examples shipped it before the replay: Deny in every namespace.
UNEXEMPTED_LIMITS = validating_policy_yaml("limits", validations=validation_yaml(
    "object.spec.containers.all(c, has(c.resources.limits) && 'memory' in c.resources.limits)",
    "containers need memory limits"))

#: Reads a pod's field from every object it is sent: nodes, leases and events have no spec.containers.
CARELESS_WILDCARD = validating_policy_yaml("careless", group="*", resource="*/*", operations='["CREATE", "UPDATE"]',
                                           validations=validation_yaml("size(object.spec.containers) < 100",
                                                                       "fewer than 100 containers"))


def _directory(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "policy.static.k8s.io.yaml").write_text(text)
    return directory


def test_strict_check_fails_naming_the_write_and_the_policy(tmp_path: Path) -> None:
    directory = _directory(tmp_path, UNEXEMPTED_LIMITS)
    result = run_subprocess("check", "--strict", str(directory))
    assert result.code == 1, result.stdout + result.stderr
    assert "INVALID" in result.stdout
    errors = [line for line in result.stdout.splitlines() if line.startswith("  error: ")]
    # kube-proxy has no limits at all; CoreDNS and staticadm have memory limits and pass this policy; kubeadm's
    # mirror pods fail.
    assert any('ValidatingAdmissionPolicy "limits.static.k8s.io"' in line
               and "CREATE pods kube-system/kube-proxy-7xk2p by system:serviceaccount:kube-system:daemon-set-controller"
               in line and "containers need memory limits" in line for line in errors), result.stdout
    assert not any("coredns" in line or "staticadm-control-plane-1" in line for line in errors), result.stdout
    for component in ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"):
        assert any(f"CREATE pods kube-system/{component}-control-plane-1 by system:node:control-plane-1" in line
                   for line in errors), (component, result.stdout)


def test_without_strict_the_refusals_are_warnings(tmp_path: Path) -> None:
    directory = _directory(tmp_path, UNEXEMPTED_LIMITS)
    result = run_cli("check", str(directory))
    assert result.code == 0, result.stdout + result.stderr
    assert ": OK (" in result.stdout
    assert any(line.startswith("  warning: ") and "refuses a write every kubeadm control plane makes" in line
               for line in result.stdout.splitlines()), result.stdout


def test_json_lists_each_refused_write_with_its_policy(tmp_path: Path) -> None:
    directory = _directory(tmp_path, UNEXEMPTED_LIMITS)
    result = run_cli("check", "-o", "json", "--strict", str(directory))
    assert result.code == 1
    [report] = json.loads(result.stdout)["directories"]
    refused = {entry["name"]: entry for entry in report["controlPlane"]}
    assert set(refused) == {"kube-proxy-7xk2p", "kube-apiserver-control-plane-1", "etcd-control-plane-1",
                            "kube-controller-manager-control-plane-1", "kube-scheduler-control-plane-1"}
    proxy = refused["kube-proxy-7xk2p"]
    assert proxy["policy"] == "limits.static.k8s.io"
    assert proxy["binding"] == "limits.static.k8s.io"
    assert (proxy["operation"], proxy["resource"], proxy["namespace"]) == ("CREATE", "pods", "kube-system")
    assert proxy["user"] == "system:serviceaccount:kube-system:daemon-set-controller"
    assert proxy["cause"] == "deny"
    assert any(error["name"] == "limits.static.k8s.io" for error in report["errors"])


def test_a_policy_failing_closed_on_node_status_leases_and_events_is_named(tmp_path: Path) -> None:
    directory = _directory(tmp_path, CARELESS_WILDCARD)
    result = run_cli("check", "-o", "json", str(directory))
    assert result.code == 0  # warnings only
    [report] = json.loads(result.stdout)["directories"]
    failed = {(entry["resource"], entry["subResource"]): entry for entry in report["controlPlane"]}
    for key in (("nodes", "status"), ("leases.coordination.k8s.io", ""), ("events", ""),
                ("events.events.k8s.io", ""), ("pods", "binding")):
        assert key in failed, (key, sorted(failed))
        assert failed[key]["cause"] == "invalid_error"
        assert failed[key]["policy"] == "careless.static.k8s.io"
    # The pods have containers: neither created nor updated pods are refused.
    assert ("pods", "") not in failed and ("pods", "status") not in failed


def test_the_shipped_examples_refuse_no_control_plane_write() -> None:
    result = run_subprocess("check", "--strict", str(EXAMPLES))
    assert result.code == 0, result.stdout + result.stderr
    assert "control plane" not in result.stdout


def _installed_by_the_docs() -> list[Path]:
    """The manifests docs/deployment.md's install step copies into /etc/staticadm/manifests/."""
    text = (REPO_ROOT / "docs" / "deployment.md").read_text()
    step = re.search(r"^install -m 0644 (manifests/examples/[^\n]*(?:\\\n[^\n]*)*) /etc/staticadm/manifests/$",
                     text, re.MULTILINE)
    assert step is not None, "docs/deployment.md installs no examples any more: update this test"
    return [REPO_ROOT / name for name in step.group(1).replace("\\\n", " ").split()]


def test_what_the_deployment_docs_install_passes_strict_check(tmp_path: Path) -> None:
    installed = _installed_by_the_docs()
    assert installed and all(path.is_file() for path in installed), installed
    # A baseline, not every example.
    assert len(installed) < len(list(EXAMPLES.glob("*.static.k8s.io.yaml")))
    target = tmp_path / "etc-staticadm-manifests"
    target.mkdir()
    for path in installed:
        shutil.copy(path, target)
    # The command the docs run right after installing them.
    assert "staticadm check --strict /etc/staticadm/manifests" in (REPO_ROOT / "docs" / "deployment.md").read_text()
    result = run_subprocess("check", "--strict", str(target))
    assert result.code == 0, result.stdout + result.stderr


def _requests() -> dict[str, Any]:
    return {write.description: write.request for write in control_plane_requests()}


def test_the_built_in_writes_come_from_the_users_kube_apiserver_names() -> None:
    requests = _requests()
    kubelet = ("system:node:control-plane-1", ("system:nodes", "system:authenticated"))
    mirror_pods = [request for description, request in requests.items() if "mirror pod created" in description]
    assert len(mirror_pods) == 5
    for request in mirror_pods:
        assert (request.user_info.username, request.user_info.groups) == kubelet
        annotations = request.object["metadata"]["annotations"]
        assert annotations["kubernetes.io/config.mirror"] == annotations["kubernetes.io/config.hash"]
        assert annotations["kubernetes.io/config.source"] == "file"
        assert request.object["metadata"]["ownerReferences"][0]["kind"] == "Node"
    status_updates = [request for request in requests.values()
                      if request.resource.resource == "pods" and request.sub_resource == "status"]
    assert len(status_updates) == 5
    assert all(request.old_object["status"]["phase"] == "Pending" and request.object["status"]["phase"] == "Running"
               for request in status_updates)
    proxy = requests["kube-proxy pod created by the DaemonSet controller"]
    assert proxy.user_info.groups == ("system:serviceaccounts", "system:serviceaccounts:kube-system",
                                      "system:authenticated")
    assert proxy.object["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    coredns = requests["CoreDNS pod created by the ReplicaSet controller (for the coredns Deployment)"]
    assert coredns.user_info.username == "system:serviceaccount:kube-system:replicaset-controller"
    node = requests["node status update by the kubelet"]
    assert (node.operation, node.sub_resource, node.namespace) == ("UPDATE", "status", "")


def test_staticadms_mirror_pod_is_the_shipped_static_pod() -> None:
    """The built-in mirror pod of staticadm is manifests/kube-apiserver/staticadm-pod.yaml as the kubelet posts
    it: every field the manifest sets has the same value (the rest are kube-apiserver's defaults)."""
    [shipped] = [doc for doc in parse_stream((KUBE_APISERVER / "staticadm-pod.yaml").read_text()) if doc]
    mirror = _requests()["staticadm's own mirror pod created by the kubelet"].object

    def contained(expected: Any, actual: Any, path: str) -> None:
        if isinstance(expected, dict):
            assert isinstance(actual, dict), path
            for key, value in expected.items():
                contained(value, actual.get(key), f"{path}.{key}")
        elif isinstance(expected, list):
            assert isinstance(actual, list) and len(actual) == len(expected), path
            for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
                contained(left, right, f"{path}[{index}]")
        else:
            assert expected == actual, f"{path}: the static pod says {expected!r}, the mirror pod {actual!r}"

    contained(shipped["spec"], mirror["spec"], "spec")
    assert shipped["metadata"]["labels"] == mirror["metadata"]["labels"]
    assert mirror["metadata"]["name"] == f"{shipped['metadata']['name']}-control-plane-1"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.static.k8s.io.yaml")), ids=lambda path: path.name)
def test_each_example_alone_refuses_no_control_plane_write(path: Path, tmp_path: Path) -> None:
    shutil.copy(path, tmp_path)
    result = run_cli("check", "--strict", "-o", "json", str(tmp_path))
    assert result.code == 0, result.stdout
    [report] = json.loads(result.stdout)["directories"]
    assert "controlPlane" not in report


FAILING_MUTATION = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: label-nodes.static.k8s.io}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [nodes/status]}
  mutations:
    - patchType: JSONPatch
      jsonPatch:
        expression: "[JSONPatch{op: 'add', path: '/metadata/labels/zone', value: string(object.spec.zone)}]"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: label-nodes.static.k8s.io}
spec:
  policyName: label-nodes.static.k8s.io
"""


def test_a_mutating_policy_failing_closed_on_a_write_is_named(tmp_path: Path) -> None:
    directory = _directory(tmp_path, FAILING_MUTATION)
    result = run_cli("check", "--strict", "-o", "json", str(directory))
    assert result.code == 1
    [report] = json.loads(result.stdout)["directories"]
    [refused] = report["controlPlane"]
    assert (refused["resource"], refused["subResource"], refused["user"]) == (
        "nodes", "status", "system:node:control-plane-1")
    assert (refused["policy"], refused["cause"]) == ("label-nodes.static.k8s.io", "invalid_error")
    assert "no such key: zone" in refused["message"]
    [error] = report["errors"]
    assert (error["kind"], error["name"]) == ("MutatingAdmissionPolicy", "label-nodes.static.k8s.io")
