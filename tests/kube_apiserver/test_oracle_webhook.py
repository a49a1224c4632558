"""kube-apiserver's own webhook client (../shared/oracle's ``webhook`` mode: k8s.io/apiserver's Mutating- and
ValidatingAdmissionWebhook plugins) calling the real daemon from the shipped AdmissionConfiguration, webhook
kubeconfig and ``webhook-config`` output, beside the client modelled in this package: every difference between
the two is a bug in ours."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube_apiserver.matching import Attributes, GroupVersionKind, GroupVersionResource
from tests.kube_apiserver.node import ControlPlaneNode, create_pod, pod, reroot, with_port
from tests.server.harness import REPO_ROOT

ORACLE = REPO_ROOT.parent / "shared" / "oracle" / "k8s-admission-oracle"
NAMESPACES = {name: {"kubernetes.io/metadata.name": name} for name in ("shop", "kube-system", "default")}
DEVELOPER = {"username": "developer", "groups": ["developers", "system:authenticated"]}

pytestmark = pytest.mark.skipif(not ORACLE.is_file(), reason=f"{ORACLE} is absent (kube-apiserver's admission code "
                                                             "as a command, from ../shared beside the checkout)")


def _protected_policy() -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "baseline", "labels": {"staticadm.io/protected": "true"}, "uid": "u-1",
                         "resourceVersion": "12", "generation": 1},
            "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                "validations": [{"expression": "true"}]}}


def _requests() -> dict[str, Attributes]:
    """Requests each example has an opinion on (and some none has), as kube-apiserver's admission sees them."""
    privileged_update = pod("web", privileged=True)
    vap = GroupVersionResource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies")
    vap_kind = GroupVersionKind("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy")
    return {
        "plain pod": create_pod(pod("web")),
        "privileged pod": create_pod(pod("debug", privileged=True)),
        "latest tag": create_pod(pod("edge", image="nginx:latest")),
        "no limits": create_pod(pod("loose", limits=False)),
        "kube-system privileged pod": create_pod(pod("proxy", "kube-system", privileged=True, limits=False)),
        "dry-run privileged pod": create_pod(pod("dry", privileged=True), dry_run=True),
        "pod made privileged": Attributes(
            kind=GroupVersionKind("", "v1", "Pod"), resource=GroupVersionResource("", "v1", "pods"),
            operation="UPDATE", namespace="shop", name="web", object=privileged_update, old_object=pod("web"),
            options={"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}),
        "protected policy deleted by a developer": Attributes(
            kind=vap_kind, resource=vap, operation="DELETE", namespace="", name="baseline", object=None,
            old_object=_protected_policy(), user=DEVELOPER,
            options={"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}),
        "protected policy deleted by system:masters": Attributes(
            kind=vap_kind, resource=vap, operation="DELETE", namespace="", name="baseline", object=None,
            old_object=_protected_policy(), user={"username": "kubernetes-admin",
                                                  "groups": ["system:masters", "system:authenticated"]},
            options={"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}),
    }


def _review(uid: str, attributes: Attributes) -> dict[str, Any]:
    """The oracle's input: the request as kube-apiserver's handler hands it to admission."""
    kind = {"group": attributes.kind.group, "version": attributes.kind.version, "kind": attributes.kind.kind}
    resource = {"group": attributes.resource.group, "version": attributes.resource.version,
                "resource": attributes.resource.resource}
    options = attributes.options or {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    request: dict[str, Any] = {
        "uid": uid, "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": attributes.name, "operation": attributes.operation, "userInfo": dict(attributes.user),
        "object": attributes.object, "oldObject": attributes.old_object, "dryRun": attributes.dry_run,
        "options": options,
    }
    if attributes.namespace:
        request["namespace"] = attributes.namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.fixture
def node(short_tmp_path: Path) -> Iterator[ControlPlaneNode]:
    node = ControlPlaneNode(short_tmp_path / "node")
    node.kubeadm_init_pki()
    node.install_config()
    node.start()
    node.install_admission_files()
    yield node
    node.stop()


def _oracle_admission_config(node: ControlPlaneNode, directory: Path) -> Path:
    """The shipped AdmissionConfiguration and webhook kubeconfig, as installed on the node, with the node's paths
    re-rooted for a process outside it (the only change: kube-apiserver on the node reads them as they are)."""
    directory.mkdir()
    kubeconfig = directory / "webhook-kubeconfig.yaml"
    kubeconfig.write_text(reroot(node.path("/etc/kubernetes/admission/webhook-kubeconfig.yaml").read_text(),
                                 node.root, node.port))
    shipped = (REPO_ROOT / "manifests/kube-apiserver/admission-configuration.yaml").read_text()
    configuration = reroot(shipped, node.root, node.port).replace(
        str(node.path("/etc/kubernetes/admission/webhook-kubeconfig.yaml")), str(kubeconfig))
    path = directory / "admission-configuration.yaml"
    path.write_text(configuration)
    return path


def _typed(value: Any) -> Any:
    """A JSON value as Go's typed encoding writes it, for comparing objects: empty maps and lists (``omitempty``)
    and nulls left out, so ``labels: {}`` and an empty ``status: {}`` struct compare equal to their absence."""
    if isinstance(value, dict):
        kept = {key: _typed(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in ({}, [], None)}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    return value


def _namespaces_file(directory: Path) -> Path:
    path = directory / "namespaces.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        for name, labels in NAMESPACES.items()]}))
    return path


def test_kube_apiservers_webhook_client_and_ours_agree_on_the_examples(node: ControlPlaneNode,
                                                                       tmp_path: Path) -> None:
    requests = _requests()
    config = _oracle_admission_config(node, tmp_path / "oracle")
    lines = "".join(json.dumps(_review(name, attributes)) + "\n" for name, attributes in requests.items())
    completed = subprocess.run([str(ORACLE), "webhook", "--admission-config", str(config),
                                "--namespaces", str(_namespaces_file(tmp_path))],
                               input=lines, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    oracle = {decision["uid"]: decision for decision in map(json.loads, completed.stdout.splitlines())}
    assert set(oracle) == set(requests), completed.stdout
    assert with_port("127.0.0.1:8443", node.port) in config.parent.joinpath("webhook-kubeconfig.yaml").read_text()

    ours = node.kube_apiserver(namespaces=NAMESPACES)
    differences = []
    for name, attributes in requests.items():
        reference, modelled = oracle[name], ours.admit(attributes)
        assert "error" not in reference, reference
        status = modelled.status or {}
        mine = {"allowed": modelled.allowed, "code": status.get("code", 200) if not modelled.allowed else 200,
                "message": modelled.message if not modelled.allowed else "",
                "warnings": list(modelled.warnings),
                "auditAnnotations": dict(modelled.audit_annotations)}
        theirs = {"allowed": reference["allowed"], "code": reference.get("code", 200) if not reference["allowed"]
                  else 200, "message": reference.get("message", "") if not reference["allowed"] else "",
                  "warnings": reference.get("warnings") or [],
                  "auditAnnotations": reference.get("auditAnnotations") or {}}
        if "patchedObject" in reference and reference["allowed"]:
            # What gets stored: kube-apiserver's, decoded into the typed Pod and encoded again.
            theirs["object"] = _typed(reference["patchedObject"])
            mine["object"] = _typed(modelled.object)
        if mine != theirs:
            differences.append(f"{name}:\n  kube-apiserver: {theirs}\n  ours:           {mine}")
    assert not differences, "\n".join(differences)
    # The examples decided what they are there for (so agreement is not two clients failing alike).
    assert not oracle["privileged pod"]["allowed"] and oracle["privileged pod"]["code"] == 403
    assert 'admission webhook "validate.staticadm.io" denied the request' in oracle["privileged pod"]["message"]
    assert oracle["plain pod"]["allowed"] and "patchedObject" in oracle["plain pod"]
    assert not oracle["protected policy deleted by a developer"]["allowed"]
    assert oracle["protected policy deleted by system:masters"]["allowed"]


def test_both_clients_fail_closed_alike_without_the_client_certificate(node: ControlPlaneNode, tmp_path: Path) -> None:
    """A webhook kubeconfig that names no client certificate: staticadm refuses the handshake (client-ca), and
    failurePolicy Fail turns that into kube-apiserver's 500 ``failed calling webhook``, worded by its client."""
    installed = node.path("/etc/kubernetes/admission/webhook-kubeconfig.yaml")
    installed.write_text("apiVersion: v1\nkind: Config\nusers: []\n")
    config = _oracle_admission_config(node, tmp_path / "oracle")
    attributes = create_pod(pod("web"))
    completed = subprocess.run([str(ORACLE), "webhook", "--admission-config", str(config),
                                "--namespaces", str(_namespaces_file(tmp_path))],
                               input=json.dumps(_review("plain pod", attributes)) + "\n", capture_output=True,
                               text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    [reference] = map(json.loads, completed.stdout.splitlines())
    modelled = node.kube_apiserver(namespaces=NAMESPACES).admit(attributes)
    assert (reference["allowed"], reference["code"]) == (False, 500), reference
    assert (modelled.allowed, (modelled.status or {}).get("code")) == (False, 500)
    # Go's transport words the same refusal three ways, by a race between its read loop and the request's
    # write (net/http transport.go): the alert read first, as the response (ours, and the model's wording); read
    # before the request is written, wrapped "readLoopPeekFailLocked: %w" (persistConn.readLoopPeekFailLocked);
    # or read, and the connection closed by the read loop, before the write loop's Write, which crypto/tls then
    # refuses with net.ErrClosed (Conn.Write's interlock with Close), the write error roundTrip returns.
    # Each is kube-apiserver's answer to the same request.
    prefix = 'Internal error occurred: failed calling webhook "mutate.staticadm.io": '
    refused = "remote error: tls: certificate required"
    assert modelled.message.startswith(prefix) and modelled.message.endswith(refused), modelled.message
    call = modelled.message.removesuffix(refused)
    assert reference["message"] in {call + refused, call + "readLoopPeekFailLocked: " + refused,
                                    call + "use of closed network connection"}, (reference["message"], modelled.message)
    assert reference.get("auditAnnotations") == (modelled.audit_annotations or None)
