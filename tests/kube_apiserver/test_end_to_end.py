"""kube-apiserver calling the real daemon: the daemon started from the shipped systemd/staticadm.yaml (paths
re-rooted), the static webhook configurations ``webhook-config`` generates, the shipped admission
configuration and webhook kubeconfig with kubeadm's front-proxy-client certificate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube_apiserver.admission import check_key_format
from tests.kube_apiserver.matching import Attributes, GroupVersionKind, GroupVersionResource
from tests.kube_apiserver.node import ControlPlaneNode, create_pod, pod
from tests.policy_text import validating_policy_yaml
from tests.server.harness import wait_for

NAMESPACES = {name: {"kubernetes.io/metadata.name": name} for name in ("shop", "kube-system", "default")}
VALIDATE = "validate.staticadm.io"
MUTATE = "mutate.staticadm.io"


@pytest.fixture
def node(short_tmp_path: Path) -> Iterator[ControlPlaneNode]:
    node = ControlPlaneNode(short_tmp_path / "node")
    node.kubeadm_init_pki()
    node.install_config()
    yield node
    node.stop()


def _started(node: ControlPlaneNode) -> ControlPlaneNode:
    node.start()
    node.install_admission_files()
    return node


def test_kube_apiserver_gets_the_examples_decisions(node: ControlPlaneNode) -> None:
    apiserver = _started(node).kube_apiserver(namespaces=NAMESPACES)

    denied = apiserver.admit(create_pod(pod("debug", privileged=True)))
    assert not denied.allowed
    assert denied.status is not None and denied.status["code"] == 403
    assert denied.message.startswith(f'admission webhook "{VALIDATE}" denied the request: ')
    assert "privileged containers are not allowed in namespace shop: app" in denied.message

    allowed = apiserver.admit(create_pod(pod("web")))
    assert allowed.allowed, allowed.status
    # The mutating webhook's JSON patch, applied by kube-apiserver, is what gets stored.
    assert allowed.object is not None
    assert allowed.object["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}  # type: ignore[index]
    assert [exchange.webhook for exchange in allowed.exchanges] == [MUTATE, VALIDATE]
    assert json.loads(allowed.audit_annotations["mutation.webhook.admission.k8s.io/round_0_index_0"]) == {
        "configuration": "staticadm.static.k8s.io", "webhook": MUTATE, "mutated": True}
    # Every call carried kube-apiserver's deadline, rounded up to whole seconds.
    assert all(exchange.url.endswith("?timeout=10s") for exchange in allowed.exchanges)

    # kube-system is outside the mutating webhook's namespace selector: kube-apiserver does not call it.
    system = apiserver.admit(create_pod(pod("proxy", "kube-system", privileged=True)))
    assert system.allowed and [exchange.webhook for exchange in system.exchanges] == [VALIDATE]

    latest = apiserver.admit(create_pod(pod("web", image="nginx:latest")))
    assert not latest.allowed and "latest" in latest.message


def test_static_webhooks_see_admission_policies(node: ControlPlaneNode) -> None:
    # protect-admission-config: only a static webhook is sent admission configuration kinds.
    apiserver = _started(node).kube_apiserver(namespaces=NAMESPACES)
    protected = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                 "metadata": {"name": "guard", "labels": {"staticadm.io/protected": "true"}}, "spec": {}}
    outcome = apiserver.admit(Attributes(
        kind=GroupVersionKind("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
        resource=GroupVersionResource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"),
        operation="DELETE", namespace="", name="guard", object=None, old_object=protected))
    assert not outcome.allowed, outcome
    assert [exchange.webhook for exchange in outcome.exchanges] == [VALIDATE]


def test_without_the_client_certificate_every_call_fails_closed(node: ControlPlaneNode) -> None:
    _started(node)
    kubeconfig = node.path("/etc/kubernetes/admission/webhook-kubeconfig.yaml")
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nusers: []\n")
    outcome = node.kube_apiserver(namespaces=NAMESPACES).admit(create_pod(pod("web")))
    assert not outcome.allowed and outcome.status is not None and outcome.status["code"] == 500
    assert outcome.message.startswith(f'Internal error occurred: failed calling webhook "{MUTATE}": '
                                      f'failed to call webhook: Post "https://127.0.0.1:{node.port}/mutate?timeout=')
    assert "tls: certificate required" in outcome.message
    # The operator sees why in staticadm's own log.
    assert wait_for(lambda: "refused a TLS handshake" in node.log(), timeout=5), node.log()
    refused = [json.loads(line) for line in node.log().splitlines()
               if line.startswith("{") and "refused a TLS handshake" in line]
    assert "certificate" in refused[0]["reason"].lower()


def test_a_cluster_user_certificate_is_not_kube_apiserver(node: ControlPlaneNode) -> None:
    # The cluster CA signs every user's certificate: staticadm's client-ca is the front-proxy CA instead.
    _started(node)
    kubeconfig = node.path("/etc/kubernetes/admission/webhook-kubeconfig.yaml")
    kubeconfig.write_text(kubeconfig.read_text().replace("front-proxy-client", "some-user"))
    outcome = node.kube_apiserver(namespaces=NAMESPACES).admit(create_pod(pod("web")))
    assert not outcome.allowed and outcome.status is not None and outcome.status["code"] == 500
    assert "tls: unknown ca" in outcome.message or "tls: bad certificate" in outcome.message, outcome.message


def test_failure_policy_decides_when_staticadm_is_down(node: ControlPlaneNode) -> None:
    _started(node)
    node.stop()
    closed = node.kube_apiserver(namespaces=NAMESPACES).admit(create_pod(pod("web")))
    assert not closed.allowed and closed.status is not None and closed.status["code"] == 500
    assert "connection refused" in closed.message
    node.generate_webhooks("--failure-policy", "Ignore")
    opened = node.kube_apiserver(namespaces=NAMESPACES).admit(create_pod(pod("debug", privileged=True)))
    assert opened.allowed
    assert opened.audit_annotations["failed-open.mutation.webhook.admission.k8s.io/round_0_index_0"] == MUTATE
    assert opened.audit_annotations["failed-open.validating.webhook.admission.k8s.io/round_0_index_0"] == VALIDATE
    assert any("failing open" in line for line in opened.log)


def test_warnings_and_dry_run_reach_kube_apiserver(node: ControlPlaneNode, tmp_path: Path) -> None:
    manifests = tmp_path / "warn"
    manifests.mkdir()
    (manifests / "warn.yaml").write_text(validating_policy_yaml(
        "warn-latest", operations='["CREATE"]', actions="[Warn]", failure_policy=None, validations="""\
  - expression: "!object.spec.containers.exists(c, c.image.endsWith(':latest'))"
    message: "pin your images"
"""))
    node.install_config(manifests=manifests)
    apiserver = _started(node).kube_apiserver(namespaces=NAMESPACES)
    outcome = apiserver.admit(create_pod(pod("web", image="nginx:latest"), dry_run=True))
    assert outcome.allowed, outcome.status
    assert any("pin your images" in warning for warning in outcome.warnings), outcome.warnings
    assert outcome.exchanges[0].request["request"]["dryRun"] is True


def test_kube_apiserver_keeps_every_audit_annotation_the_daemon_returns(node: ControlPlaneNode,
                                                                         tmp_path: Path) -> None:
    manifests = tmp_path / "audited"
    manifests.mkdir()
    (manifests / "audited.yaml").write_text(validating_policy_yaml(
        "audited", operations='["CREATE"]', actions="[Audit]", failure_policy=None, validations="""\
  - expression: "object.metadata.name != 'forbidden'"
    message: "that name is taken"
  auditAnnotations:
  - key: image-count
    valueExpression: "string(size(object.spec.containers))"
"""))
    node.install_config(manifests=manifests)
    apiserver = _started(node).kube_apiserver(namespaces=NAMESPACES)
    outcome = apiserver.admit(create_pod(pod("forbidden")))
    assert outcome.allowed
    returned = outcome.exchanges[-1].response
    assert returned is not None
    keys = returned["response"].get("auditAnnotations") or {}
    assert keys, "the daemon returned no audit annotations"
    # What kube-apiserver does with them: prefix, check, keep or drop with a warning in its log.
    assert not [line for line in outcome.log if "Failed to set admission audit annotation" in line], outcome.log
    for key, value in keys.items():
        assert check_key_format(f"{VALIDATE}/{key}") is None
        assert outcome.audit_annotations[f"{VALIDATE}/{key}"] == value
