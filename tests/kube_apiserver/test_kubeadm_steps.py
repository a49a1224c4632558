"""The kubeadm steps (docs/deployment.md) and the troubleshooting recipe (docs/operations.md), run literally on
a node laid out under a temporary root (paths re-rooted, port 8443 replaced), ending with kube-apiserver's webhook
client getting decisions."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.documentation import sh_block
from tests.kube_apiserver.node import ControlPlaneNode, create_pod, pod, reroot, with_port
from tests.pki import make_ca, make_leaf, write_ca
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
        completed = _readiness_once_loaded(line, node, tmp_path)
        assert completed.returncode == 0, f"{line}\n{completed.stdout}{completed.stderr}\n{node.log()[-4000:]}"
        assert "readyz check passed" in completed.stdout, completed.stdout
    # Without the client certificate the HTTPS line fails, and says why.
    https = next(line for line in re.split(r"(?<!\\)\n", recipe) if "https://" in line)
    bare = re.sub(r"--cert \S+ \\\n\s+--key \S+ ", "", https)
    completed = run_block("curl -sS " + bare.removeprefix("curl "), node, tmp_path)
    assert completed.returncode != 0 and "certificate required" in completed.stderr, completed.stderr


def _readiness_once_loaded(line: str, node: ControlPlaneNode, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The recipe's readiness line, asked again while the worker that answers is still loading its snapshot.

    The shipped configuration runs workers (``--workers auto``), and each accepts connections before its first
    load, so a request waits for that load and /readyz answers 503 from a worker still loading
    (``[-]manifests-loaded failed``) even after another worker said ready. Any other answer is final."""
    deadline = time.monotonic() + 30
    while True:
        completed = run_block("curl -sS --fail-with-body " + line.removeprefix("curl "), node, tmp_path)
        if completed.returncode == 0 or "[-]manifests-loaded failed" not in completed.stdout:
            return completed
        if time.monotonic() > deadline:
            return completed
        time.sleep(0.1)


def _commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


class Kubeadm:
    """kubeadm's part of the new-cluster order, played on the node: ``init phase certs front-proxy-ca`` writes the
    CA (kept if present), ``init`` keeps it and issues kube-apiserver's front-proxy-client with it, as kubeadm's
    certificate phases do, and starts kube-apiserver with the flags the ClusterConfiguration gives it."""

    def __init__(self, node: ControlPlaneNode) -> None:
        self.node = node
        self.pki = node.path("/etc/kubernetes/pki")

    def _front_proxy_ca(self) -> tuple[Any, x509.Certificate]:
        cert, key = self.pki / "front-proxy-ca.crt", self.pki / "front-proxy-ca.key"
        if not cert.exists():
            self.pki.mkdir(parents=True, exist_ok=True)
            ca = make_ca("front-proxy-ca")
            write_ca(ca, cert)
            key.write_bytes(ca[0].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
        return (serialization.load_pem_private_key(key.read_bytes(), password=None),
                x509.load_pem_x509_certificate(cert.read_bytes()))

    def run(self, argv: list[str]) -> None:
        if argv[:4] == ["init", "phase", "certs", "front-proxy-ca"]:
            self._front_proxy_ca()
        elif argv[:1] == ["init"]:
            make_leaf(self._front_proxy_ca(), server=False, directory=self.pki, stem="front-proxy-client")
            cluster = yaml.safe_load((REPO_ROOT / "manifests/kube-apiserver/kubeadm-clusterconfiguration.yaml")
                                     .read_text())
            # kube-apiserver starts with these; a file they name that is missing stops it.
            for argument in cluster["apiServer"]["extraArgs"]:
                if argument["name"] == "admission-control-config-file":
                    assert self.node.path(argument["value"]).is_file(), argument
        else:
            raise AssertionError(f"kubeadm {' '.join(argv)}: not a step of the new-cluster order")


def test_a_new_cluster_in_the_documented_order(tmp_path: Path, short_tmp_path: Path) -> None:
    node = ControlPlaneNode(short_tmp_path / "node")
    node.install_config()  # installed as in "Install on a node", not started yet
    kubeadm = Kubeadm(node)
    block = sh_block(DEPLOYMENT, "kubeadm init phase certs front-proxy-ca")
    try:
        # Started before the CA exists, staticadm names the one missing file and what creates it.
        node.start(wait=False)
        assert node.process is not None and node.process.wait(timeout=60) != 0
        [refusal] = [line for line in node.log().splitlines() if line.startswith("staticadm serve:")]
        assert refusal == (f"staticadm serve: --client-ca {node.path('/etc/kubernetes/pki/front-proxy-ca.crt')}: no "
                           "such file; `kubeadm init` (and `kubeadm join --control-plane`) creates kubeadm's "
                           "front-proxy CA, /etc/kubernetes/pki/front-proxy-ca.crt; without kubeadm, name the CA of "
                           "kube-apiserver's --proxy-client-cert-file (docs/deployment.md, \"kube-apiserver 1.36+\")")
        for command in _commands(block):
            words = shlex.split(command)
            if words[0] == "kubeadm":
                kubeadm.run(words[1:])
            elif words[:2] == ["systemctl", "enable"]:
                node.start()  # the unit's ExecStart (tests/deploy/test_node_install.py runs the unit itself)
            else:
                completed = run_block(command, node, tmp_path)
                assert completed.returncode == 0, f"{command}\n{completed.stdout}{completed.stderr}"
        kubeconfig = node.path("/etc/kubernetes/admission/webhook-kubeconfig.yaml")
        kubeconfig.write_text(with_port(kubeconfig.read_text(), node.port))
        apiserver = node.kube_apiserver(namespaces=NAMESPACES)
        denied = apiserver.admit(create_pod(pod("debug", privileged=True)))
        assert not denied.allowed and 'admission webhook "validate.staticadm.io" denied the request' in denied.message
        assert apiserver.admit(create_pod(pod("web"))).allowed
    finally:
        node.stop()
