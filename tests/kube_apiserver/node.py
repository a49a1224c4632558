"""A kubeadm control-plane node laid out under a temporary root, with staticadm running as its unit runs it.

The shipped files are installed as docs/deployment.md's steps install them; only absolute paths are re-rooted
under the temporary directory and the webhook port 8443 is replaced by a free one (other tests run at the
same time). kubeadm's part is played by ``tests.pki``: the cluster's front-proxy CA and kube-apiserver's
front-proxy-client certificate, where ``kubeadm init`` puts them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from staticadm.kinds import as_admitted
from tests.kube_apiserver.admission import KubeApiserver
from tests.kube_apiserver.matching import Attributes, GroupVersionKind, GroupVersionResource
from tests.pki import make_ca, make_leaf, write_ca
from tests.server import forked
from tests.server.harness import READY_TIMEOUT, REPO_ROOT, free_port, stop_process

SHIPPED_PORT = 8443
#: The absolute paths the shipped files name live under these; they are re-rooted in the tests.
NODE_PREFIXES = ("/etc/", "/var/", "/run/", "/opt/", "/usr/local/")
ADMISSION_CONFIG_FILE = "/etc/kubernetes/admission/admission-configuration.yaml"
_NODE_PATH = re.compile(r"(?<![\w./-])(/(?:etc|var|run|opt|usr/local)/[\w./@-]*)")


def reroot(text: str, root: Path, port: int) -> str:
    """``text`` with every node path under ``root`` and the shipped webhook port replaced by ``port``."""
    return with_port(_NODE_PATH.sub(lambda match: str(root) + match.group(1), text), port)


def with_port(text: str, port: int) -> str:
    return text.replace(f"127.0.0.1:{SHIPPED_PORT}", f"127.0.0.1:{port}")


@dataclass
class ControlPlaneNode:
    root: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | forked.ForkedDaemon | None = None

    def path(self, absolute: str) -> Path:
        return self.root / PurePosixPath(absolute).relative_to("/")

    @property
    def log_path(self) -> Path:
        return self.root / "staticadm.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- what kubeadm and the operator put on the node ------------------------------------------------

    def kubeadm_init_pki(self) -> None:
        """The front-proxy CA and kube-apiserver's front-proxy-client certificate (``kubeadm init phase certs``)."""
        pki = self.path("/etc/kubernetes/pki")
        pki.mkdir(parents=True, exist_ok=True)
        front_proxy = make_ca("front-proxy-ca")
        write_ca(front_proxy, pki / "front-proxy-ca.crt")
        make_leaf(front_proxy, server=False, directory=pki, stem="front-proxy-client")
        # The cluster CA signs users' certificates: one a cluster user could hold, to show it is refused.
        cluster = make_ca("kubernetes")
        write_ca(cluster, pki / "ca.crt")
        make_leaf(cluster, server=False, directory=pki, stem="some-user")

    def install_config(self, *, manifests: Path | None = None) -> Path:
        """systemd/staticadm.yaml to /etc/staticadm/staticadm.yaml, the examples (or ``manifests``) beside it."""
        config = self.path("/etc/staticadm/staticadm.yaml")
        config.parent.mkdir(parents=True, exist_ok=True)
        for stale in self.path("/etc/staticadm/manifests").glob("*.yaml"):
            stale.unlink()
        config.write_text(reroot((REPO_ROOT / "systemd" / "staticadm.yaml").read_text(), self.root, self.port))
        target = self.path("/etc/staticadm/manifests")
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted((manifests or REPO_ROOT / "manifests" / "examples").glob("*.yaml")):
            (target / source.name).write_text(source.read_text())
        target.chmod(0o755)
        return config

    # -- the daemon, as staticadm.service starts it ----------------------------------------------------

    def unit_environment(self) -> dict[str, str]:
        """What systemd gives ExecStart for the shipped unit (directories re-rooted)."""
        state, runtime = self.path("/var/lib/staticadm"), self.path("/run/staticadm")
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        runtime.mkdir(parents=True, exist_ok=True, mode=0o755)
        return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                "STATE_DIRECTORY": str(state), "RUNTIME_DIRECTORY": str(runtime),
                "CONFIGURATION_DIRECTORY": str(self.path("/etc/staticadm")),
                "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}

    def start(self, *extra: str, command: list[str] | None = None, env: dict[str, str] | None = None,
              wait: bool = True) -> None:
        environment = {**self.unit_environment(), **(env or {})}
        if "PYTHONPYCACHEPREFIX" in os.environ:
            # The suite's cache of compiled code (tests/conftest.py), read only here: the unit's environment keeps
            # PYTHONDONTWRITEBYTECODE; without the cache each of the node's processes compiles what it imports.
            environment.setdefault("PYTHONPYCACHEPREFIX", os.environ["PYTHONPYCACHEPREFIX"])
        if command is None:
            # The checkout's staticadm, as the unit's ExecStart runs the installed one.
            environment["PYTHONPATH"] = str(REPO_ROOT)
            command = [sys.executable, "-m", "staticadm", "serve",
                       "--config", str(self.path("/etc/staticadm/staticadm.yaml"))]
        command = [*command, "--listen", f"127.0.0.1:{self.port}", *extra]
        # The unit's environment is read as the daemon resolves its configuration, not as it imports: the checkout's
        # staticadm may be forked; a command of the test's own (the installed console script) runs as given.
        self.process = forked.start(command, workdir=Path("/"), environment=environment, log_path=self.log_path)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        socket_path = self.path("/run/staticadm/staticadm.sock")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"staticadm exited with {self.process.returncode}:\n{self.log()}")
            if socket_path.exists():
                try:
                    completed = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                                "--unix-socket", str(socket_path), "http://localhost/readyz"],
                                               capture_output=True, text=True, check=False, timeout=10)
                except subprocess.TimeoutExpired:
                    continue  # a starting daemon on a busy machine: ask again until the deadline
                if completed.stdout == "200":
                    return
            time.sleep(0.05)
        raise AssertionError(f"staticadm not ready within {timeout} s:\n{self.log()}")

    def stop(self) -> int:
        return stop_process(self.process)

    # -- kube-apiserver's side ------------------------------------------------------------------------

    def install_admission_files(self) -> None:
        """The kubeadm steps' files (docs/deployment.md, "kube-apiserver 1.36+"): admission configuration,
        webhook kubeconfig, generated webhooks."""
        admission = self.path("/etc/kubernetes/admission")
        for name in ("validating-webhooks", "mutating-webhooks"):
            (admission / name).mkdir(parents=True, exist_ok=True)
        for name in ("admission-configuration.yaml", "webhook-kubeconfig.yaml"):
            # kube-apiserver reads them on the node (KubeApiserver re-roots what they name): the port only.
            (admission / name).write_text(with_port((REPO_ROOT / "manifests" / "kube-apiserver" / name).read_text(),
                                                    self.port))
        self.generate_webhooks()

    def generate_webhooks(self, *extra: str) -> None:
        completed = forked.run(
            [sys.executable, "-m", "staticadm", "webhook-config",
             "--manifests", str(self.path("/etc/staticadm/manifests")),
             "--url", f"https://127.0.0.1:{self.port}", "--ca-file", str(self.path("/var/lib/staticadm/tls/ca.crt")),
             "--out-dir", str(self.path("/etc/kubernetes/admission")), *extra],
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=120)
        assert completed.returncode == 0, completed.stdout + completed.stderr

    def kube_apiserver(self, **kwargs: object) -> KubeApiserver:
        return KubeApiserver.from_admission_config_file(ADMISSION_CONFIG_FILE, root=self.root, **kwargs)  # type: ignore[arg-type]

    def webhook_kubeconfig(self) -> dict[str, object]:
        return yaml.safe_load(self.path("/etc/kubernetes/admission/webhook-kubeconfig.yaml").read_text())


def pod(name: str = "web", namespace: str = "shop", *, labels: dict[str, str] | None = None,
        image: str = "nginx:1.27", privileged: bool = False, limits: bool = True) -> dict[str, object]:
    container: dict[str, object] = {"name": "app", "image": image}
    if privileged:
        container["securityContext"] = {"privileged": True}
    if limits:
        container["resources"] = {"limits": {"cpu": "100m", "memory": "64Mi"}}
    # As kube-apiserver holds it when admission starts: typed and defaulted (a mutating webhook's patch is taken
    # against that object; an undefaulted one would have every default patched in).
    admitted = as_admitted({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
                            "spec": {"containers": [container]}})
    assert admitted is not None
    return admitted.value


def create_pod(obj: dict[str, object], **kwargs: object) -> Attributes:
    metadata = obj["metadata"]
    assert isinstance(metadata, dict)
    return Attributes(kind=GroupVersionKind("", "v1", "Pod"), resource=GroupVersionResource("", "v1", "pods"),
                      operation="CREATE", namespace=metadata["namespace"], name=metadata["name"], object=obj,
                      **kwargs)  # type: ignore[arg-type]
