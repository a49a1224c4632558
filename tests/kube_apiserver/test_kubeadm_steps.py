"""The kubeadm steps (docs/deployment.md) and the troubleshooting recipe (docs/operations.md), run literally on
a node laid out under a temporary root (paths re-rooted, port 8443 replaced), ending with kube-apiserver's webhook
client getting decisions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.documentation import sh_block
from tests.kube_apiserver.node import ControlPlaneNode, create_pod, pod, reroot, with_port
from tests.server.harness import REPO_ROOT

DEPLOYMENT, OPERATIONS = "docs/deployment.md", "docs/operations.md"
NAMESPACES = {name: {"kubernetes.io/metadata.name": name} for name in ("shop", "kube-system")}


def run_block(script: str, node: ControlPlaneNode, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``script`` re-rooted under the node, with ``staticadm`` being this checkout's."""
    shim = tmp_path / "bin" / "staticadm"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m staticadm "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", reroot(script, node.root, node.port)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def node(short_tmp_path: Path) -> Iterator[ControlPlaneNode]:
    node = ControlPlaneNode(short_tmp_path / "node")
    node.kubeadm_init_pki()  # kubeadm init: the front-proxy CA and kube-apiserver's front-proxy-client
    node.install_config()  # step 1: staticadm installed (tests/deploy/test_node_install.py runs that part)
    node.start()
    yield node
    node.stop()


def test_the_kubeadm_steps_end_with_kube_apiserver_getting_decisions(node: ControlPlaneNode, tmp_path: Path) -> None:
    completed = run_block(sh_block(DEPLOYMENT, "install -d -m 0755 /etc/kubernetes/admission/"), node, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    admission = node.path("/etc/kubernetes/admission")
    assert sorted(path.relative_to(admission).as_posix() for path in admission.rglob("*.yaml")) == [
        "admission-configuration.yaml", "mutating-webhooks/staticadm.static.k8s.io.yaml",
        "validating-webhooks/staticadm.static.k8s.io.yaml", "webhook-kubeconfig.yaml"]
    # The installed files are the shipped ones; only the webhook's port differs on this test node.
    kubeconfig = admission / "webhook-kubeconfig.yaml"
    assert kubeconfig.read_text() == (REPO_ROOT / "manifests/kube-apiserver/webhook-kubeconfig.yaml").read_text()
    kubeconfig.write_text(with_port(kubeconfig.read_text(), node.port))

    # Step 4: kube-apiserver started with the admission configuration the kubeadm configuration names.
    apiserver = node.kube_apiserver(namespaces=NAMESPACES)
    denied = apiserver.admit(create_pod(pod("debug", privileged=True)))
    assert not denied.allowed and denied.status is not None and denied.status["code"] == 403, denied.status
    assert 'admission webhook "validate.staticadm.io" denied the request' in denied.message
    allowed = apiserver.admit(create_pod(pod("web")))
    assert allowed.allowed, allowed.status
    assert [exchange.status for exchange in allowed.exchanges] == [200, 200]


def test_the_troubleshooting_recipe_works_with_the_shipped_configuration(node: ControlPlaneNode,
                                                                        tmp_path: Path) -> None:
    recipe = sh_block(OPERATIONS, "curl --unix-socket /run/staticadm/staticadm.sock")
    # The curl lines, not journalctl (no journal here): each must print the verbose readiness.
    for line in re.split(r"(?<!\\)\n", recipe):
        if not line.startswith("curl"):
            continue
        completed = run_block("curl -sS --fail " + line.removeprefix("curl "), node, tmp_path)
        assert completed.returncode == 0, f"{line}\n{completed.stdout}{completed.stderr}"
        assert "readyz check passed" in completed.stdout, completed.stdout
    # Without the client certificate the HTTPS line fails, and says why.
    https = next(line for line in re.split(r"(?<!\\)\n", recipe) if "https://" in line)
    bare = re.sub(r"--cert \S+ \\\n\s+--key \S+ ", "", https)
    completed = run_block("curl -sS " + bare.removeprefix("curl "), node, tmp_path)
    assert completed.returncode != 0 and "certificate required" in completed.stderr, completed.stderr
