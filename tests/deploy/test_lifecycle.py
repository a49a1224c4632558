"""docs/lifecycle.md, run: the static pod's upgrade and rollback, removal in order, and break-glass, on a kubeadm
node laid out under a temporary root with the baseline docs/deployment.md installs, kube-apiserver played by its
own webhook client (../shared/oracle's ``webhook`` mode) reading the installed registration afresh at each step,
as its reload does. The node install's upgrade and rollback run in tests/deploy/test_node_install.py (it needs
the installed venv)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.documentation import sh_block
from tests.kube_apiserver.node import ControlPlaneNode, create_pod, pod
from tests.kube_apiserver.test_kubeadm_steps import run_block
from tests.kube_apiserver.test_oracle_webhook import ORACLE, _namespaces_file, _oracle_admission_config, _review
from tests.policy_text import validating_policy_yaml
from tests.server.harness import REPO_ROOT

LIFECYCLE = "docs/lifecycle.md"
#: What docs/deployment.md installs first ("What to install first").
BASELINE = ("protect-admission-config.static.k8s.io.yaml", "deny-privileged.static.k8s.io.yaml")
REGISTRATION = "/etc/kubernetes/admission/validating-webhooks/staticadm.static.k8s.io.yaml"

pytestmark = pytest.mark.skipif(not ORACLE.is_file(), reason=f"{ORACLE} is absent (kube-apiserver's admission code "
                                                             "as a command, from ../shared beside the checkout)")


@pytest.fixture
def node(short_tmp_path: Path, tmp_path: Path) -> Iterator[ControlPlaneNode]:
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    for name in BASELINE:
        (baseline / name).write_text((REPO_ROOT / "manifests" / "examples" / name).read_text())
    node = ControlPlaneNode(short_tmp_path / "node")
    node.kubeadm_init_pki()
    node.install_config(manifests=baseline)
    node.start()
    node.install_admission_files()
    yield node
    node.stop()


def _kube_apiserver(node: ControlPlaneNode, tmp_path: Path, requests: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """kube-apiserver's decisions for ``requests`` (name: attributes) under the registration installed now."""
    directory = tmp_path / "oracle"
    if directory.exists():
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()
    config = _oracle_admission_config(node, directory)
    lines = "".join(json.dumps(_review(name, attributes)) + "\n" for name, attributes in requests.items())
    completed = subprocess.run([str(ORACLE), "webhook", "--admission-config", str(config),
                                "--namespaces", str(_namespaces_file(directory))],
                               input=lines, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return {decision["uid"]: decision for decision in map(json.loads, completed.stdout.splitlines())}


REQUESTS = {"plain pod": create_pod(pod("web")), "privileged pod": create_pod(pod("debug", privileged=True))}


def _outcome(decision: dict[str, Any]) -> tuple[bool, int]:
    return decision["allowed"], 200 if decision["allowed"] else decision["code"]


def _run(node: ControlPlaneNode, tmp_path: Path, first_line: str) -> None:
    completed = run_block(sh_block(LIFECYCLE, first_line), node, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.slow  # a node's daemon stopped, broken and restored in turn: 15 s end to end
def test_break_glass_when_staticadm_is_down_or_wrong(node: ControlPlaneNode, tmp_path: Path) -> None:
    up = _kube_apiserver(node, tmp_path, REQUESTS)
    assert _outcome(up["plain pod"]) == (True, 200) and _outcome(up["privileged pod"]) == (False, 403)
    node.stop()
    down = _kube_apiserver(node, tmp_path, REQUESTS)
    # The outage: failurePolicy Fail refuses what the registration covers.
    assert _outcome(down["plain pod"]) == (False, 500), down["plain pod"]
    assert 'failed calling webhook "validate.staticadm.io"' in down["plain pod"]["message"]

    # Down: Ignore admits what staticadm cannot answer, and says so in the audit annotations.
    _run(node, tmp_path, "staticadm webhook-config --manifests /etc/staticadm/manifests")
    assert "failurePolicy: Ignore" in node.path(REGISTRATION).read_text()
    ignored = _kube_apiserver(node, tmp_path, REQUESTS)
    assert _outcome(ignored["plain pod"]) == (True, 200) and _outcome(ignored["privileged pod"]) == (True, 200)
    assert any(key.startswith("failed-open.validating.webhook.admission.k8s.io/")
               for key in ignored["privileged pod"].get("auditAnnotations") or {}), ignored["privileged pod"]
    node.start()  # back: its decisions count again under Ignore
    assert _outcome(_kube_apiserver(node, tmp_path, REQUESTS)["privileged pod"]) == (False, 403)
    node.generate_webhooks()  # Fail again, as docs/deployment.md generates it

    # Wrong: a policy that refuses every pod, served; the registration aside stops every call.
    wrong = node.path("/etc/staticadm/manifests/refuse-all.static.k8s.io.yaml")
    wrong.write_text(validating_policy_yaml("refuse-all", validations="  - expression: 'false'\n"
                                                                      "    message: refused by mistake\n"))
    node.generate_webhooks()
    refused = _kube_apiserver(node, tmp_path, REQUESTS)
    assert not refused["plain pod"]["allowed"] and "refused by mistake" in refused["plain pod"]["message"]
    _run(node, tmp_path, "install -d -m 0755 /etc/kubernetes/admission-aside/validating-webhooks")
    assert not node.path(REGISTRATION).exists()
    assert node.path("/etc/kubernetes/admission/validating-webhooks").is_dir()
    aside = _kube_apiserver(node, tmp_path, REQUESTS)
    assert _outcome(aside["plain pod"]) == (True, 200) and _outcome(aside["privileged pod"]) == (True, 200)
    wrong.unlink()  # fixed
    _run(node, tmp_path, "for kind in validating mutating; do")
    assert node.path(REGISTRATION).exists()
    node.generate_webhooks()  # the fixed directory's registration
    back = _kube_apiserver(node, tmp_path, REQUESTS)
    assert _outcome(back["plain pod"]) == (True, 200) and _outcome(back["privileged pod"]) == (False, 403)


def test_removal_in_order_never_refuses_a_write(node: ControlPlaneNode, tmp_path: Path) -> None:
    # 1. The registration out, staticadm still running.
    _run(node, tmp_path, "rm -f /etc/kubernetes/admission/validating-webhooks/staticadm.static.k8s.io.yaml")
    assert sorted(path.name for path in node.path("/etc/kubernetes/admission").rglob("*.yaml")) == [
        "admission-configuration.yaml", "webhook-kubeconfig.yaml"]
    # 2. kube-apiserver's reload: a fresh read of the directories. Nothing calls staticadm any more.
    after = _kube_apiserver(node, tmp_path, REQUESTS)
    assert _outcome(after["privileged pod"]) == (True, 200)
    # 3. The units stopped (systemctl recorded; the test stops the daemon it runs as the unit would).
    calls = tmp_path / "systemctl.calls"
    (tmp_path / "bin").mkdir(exist_ok=True)
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    systemctl.chmod(0o755)
    _run(node, tmp_path, "systemctl disable --now staticadm.service staticadm.socket")
    node.stop()
    stopped = _kube_apiserver(node, tmp_path, REQUESTS)
    assert _outcome(stopped["plain pod"]) == (True, 200) and _outcome(stopped["privileged pod"]) == (True, 200)
    # 4. The flags (kubeadm's part, not run here), then the files.
    _run(node, tmp_path, "rm -rf /etc/kubernetes/admission /etc/staticadm")
    assert calls.read_text().splitlines() == ["disable --now staticadm.service staticadm.socket", "daemon-reload"]
    for gone in ("/etc/kubernetes/admission", "/etc/staticadm", "/usr/local/bin/staticadm"):
        assert not node.path(gone).exists(), gone
    assert node.path("/etc/kubernetes/pki/front-proxy-ca.crt").exists()  # kubeadm's, untouched


def test_the_wrong_order_is_the_outage_the_page_warns_of(node: ControlPlaneNode, tmp_path: Path) -> None:
    """Units stopped before the registration is out: kube-apiserver refuses the writes it covers."""
    node.stop()
    assert _outcome(_kube_apiserver(node, tmp_path, REQUESTS)["plain pod"]) == (False, 500)


def test_the_static_pod_upgrade_and_rollback(node: ControlPlaneNode, tmp_path: Path) -> None:
    manifests = node.path("/etc/kubernetes/manifests")
    manifests.mkdir(parents=True)
    shipped = (REPO_ROOT / "manifests" / "kube-apiserver" / "staticadm-pod.yaml").read_text()
    (manifests / "staticadm-pod.yaml").write_text(shipped)
    _run(node, tmp_path, "cp /etc/kubernetes/manifests/staticadm-pod.yaml /etc/kubernetes/staticadm-pod.yaml.previous")
    upgraded = (manifests / "staticadm-pod.yaml").read_text()
    assert upgraded == shipped.replace("image: localhost/staticadm:0.1.0", "image: localhost/staticadm:0.2.0")
    assert upgraded != shipped
    # The copy kept is outside the kubelet's directory: one pod, not two.
    assert sorted(path.name for path in manifests.iterdir()) == ["staticadm-pod.yaml"]
    _run(node, tmp_path, "mv /etc/kubernetes/staticadm-pod.yaml.previous")
    assert (manifests / "staticadm-pod.yaml").read_text() == shipped
    assert not node.path("/etc/kubernetes/staticadm-pod.yaml.previous").exists()


def test_every_block_of_the_page_is_run() -> None:
    """Each sh block of the page is one a test here or in test_node_install.py runs (named by its start)."""
    text = (REPO_ROOT / LIFECYCLE).read_text()
    blocks = [sh_block(LIFECYCLE, body.strip().splitlines()[0].strip()) for body in text.split("```sh\n")[1:]]
    sources = Path(__file__).read_text() + (Path(__file__).parent / "test_node_install.py").read_text()
    run = [json.loads(f'"{start}"') for start in
           re.findall(r'(?:\brun\(|_run\(node, tmp_path, |sh_block\(LIFECYCLE, )"((?:[^"\\]|\\.)+)"', sources)]
    unrun = [block.splitlines()[0] for block in blocks if not any(block.startswith(start) for start in run)]
    assert len(blocks) == 10 and not unrun, unrun
