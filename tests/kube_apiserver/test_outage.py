"""An outage of staticadm cannot stop the control plane healing: kube-apiserver's own webhook client
(``../shared/oracle``'s webhook mode) reads the registration ``webhook-config`` wrote for the files
docs/deployment.md installs, with the daemon stopped, and is sent every control-plane write of ``check``'s
replay. Those the registration leaves out are admitted; an ordinary Pod is refused (failurePolicy Fail).
A policy that targets kube-system Pods puts them back in the registration, and ``check`` says which writes
an outage then blocks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from staticadm.deploy.control_plane import control_plane_reviews
from tests.kube_apiserver.node import ControlPlaneNode, create_pod, pod
from tests.kube_apiserver.test_oracle_webhook import ORACLE, _oracle_admission_config, _review
from tests.server import forked
from tests.server.harness import REPO_ROOT

pytestmark = pytest.mark.skipif(not ORACLE.is_file(), reason=f"{ORACLE} is absent (kube-apiserver's admission code "
                                                             "as a command, from ../shared beside the checkout)")

EXAMPLES = REPO_ROOT / "manifests" / "examples"
#: What docs/deployment.md installs ("Install on a node"): the safe baseline.
BASELINE = ("protect-admission-config.static.k8s.io.yaml", "deny-privileged.static.k8s.io.yaml")
#: The control-plane writes that are kube-system Pod creates (mirror pods, kube-proxy, CoreDNS).
KUBE_SYSTEM_POD_CREATES = {
    "kube-proxy pod created by the DaemonSet controller",
    "CoreDNS pod created by the ReplicaSet controller (for the coredns Deployment)",
    "kube-apiserver mirror pod created by the kubelet", "etcd mirror pod created by the kubelet",
    "kube-controller-manager mirror pod created by the kubelet", "kube-scheduler mirror pod created by the kubelet",
    "staticadm's own mirror pod created by the kubelet",
}


def _manifests(directory: Path, *, kube_system_policy: bool = False) -> Path:
    directory.mkdir()
    for name in BASELINE:
        shutil.copy(EXAMPLES / name, directory / name)
    if kube_system_policy:
        # require-resource-limits without the binding's kube-system exemption: it targets kube-system Pods.
        text = (EXAMPLES / "require-resource-limits.static.k8s.io.yaml").read_text()
        (directory / "require-resource-limits.static.k8s.io.yaml").write_text(text.split("  # kube-system is")[0])
    return directory


@pytest.fixture
def stopped_node(short_tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ControlPlaneNode]:
    """A node installed as docs/deployment.md installs it (the baseline, the kube-apiserver steps), its daemon
    then stopped."""
    node = ControlPlaneNode(short_tmp_path / "node")
    node.kubeadm_init_pki()
    node.install_config(manifests=_manifests(short_tmp_path / "manifests", kube_system_policy=request.param))
    node.start()
    node.install_admission_files()
    node.stop()
    yield node


def _admit_with_the_daemon_down(node: ControlPlaneNode, directory: Path) -> dict[str, dict[str, Any]]:
    reviews: dict[str, dict[str, Any]] = {}
    for description, review in control_plane_reviews():
        review["request"]["uid"] = description
        reviews[description] = review
    reviews["ordinary pod"] = _review("ordinary pod", create_pod(pod("web", "default")))
    config = _oracle_admission_config(node, directory)
    completed = subprocess.run([str(ORACLE), "webhook", "--admission-config", str(config)],
                               input="".join(json.dumps(review) + "\n" for review in reviews.values()),
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    decisions = {decision["uid"]: decision for decision in map(json.loads, completed.stdout.splitlines())}
    assert set(decisions) == set(reviews), completed.stdout
    assert not any("error" in decision for decision in decisions.values()), completed.stdout
    return decisions


def _check(node: ControlPlaneNode, *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "staticadm", "check", str(node.path("/etc/staticadm/manifests")), *args],
                      env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)


@pytest.mark.parametrize("stopped_node", [False], indirect=True)
def test_with_the_docs_baseline_every_control_plane_write_passes_an_outage(stopped_node: ControlPlaneNode,
                                                                           tmp_path: Path) -> None:
    decisions = _admit_with_the_daemon_down(stopped_node, tmp_path / "oracle")
    refused = {uid: decision["message"] for uid, decision in decisions.items()
               if uid != "ordinary pod" and not decision["allowed"]}
    assert not refused, refused
    ordinary = decisions["ordinary pod"]
    assert (ordinary["allowed"], ordinary["code"]) == (False, 500), ordinary
    assert 'failed calling webhook "validate.staticadm.io"' in ordinary["message"]
    # The registration leaves kube-system Pods out by a condition kube-apiserver evaluates, and check agrees.
    registration = stopped_node.path("/etc/kubernetes/admission/validating-webhooks/staticadm.static.k8s.io.yaml")
    assert "staticadm.io/exclude-kube-system-pods" in registration.read_text()
    completed = _check(stopped_node, "--webhook-config-dir", str(stopped_node.path("/etc/kubernetes/admission")))
    assert completed.returncode == 0 and "while staticadm is down" not in completed.stdout, completed.stdout


@pytest.mark.parametrize("stopped_node", [True], indirect=True)
def test_a_policy_on_kube_system_pods_puts_them_back_and_check_says_what_an_outage_blocks(
        stopped_node: ControlPlaneNode, tmp_path: Path) -> None:
    registration = stopped_node.path("/etc/kubernetes/admission/validating-webhooks/staticadm.static.k8s.io.yaml")
    assert "staticadm.io/exclude-kube-system-pods" not in registration.read_text()
    decisions = _admit_with_the_daemon_down(stopped_node, tmp_path / "oracle")
    refused = {uid for uid, decision in decisions.items() if not decision["allowed"]}
    assert refused == KUBE_SYSTEM_POD_CREATES | {"ordinary pod"}, refused
    assert all(decisions[uid]["code"] == 500 for uid in refused)
    completed = _check(stopped_node, "-o", "json")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    [directory] = json.loads(completed.stdout)["directories"]
    blocked = {entry["object"]: entry for entry in directory["outageBlocks"]}
    assert set(blocked) == KUBE_SYSTEM_POD_CREATES
    assert all(entry["policies"] == ["require-resource-limits.static.k8s.io"] and
               entry["webhook"] == "validate.staticadm.io" for entry in blocked.values())
    text = _check(stopped_node).stdout
    assert text.count("while staticadm is down, kube-apiserver refuses") == len(KUBE_SYSTEM_POD_CREATES), text
