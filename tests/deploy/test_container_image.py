"""The Containerfile built with podman, and the image run as the static pod runs it: ``check``, then ``serve``
as uid 65532 with a read-only root, the pod's writable volumes, arguments, environment and probes, answering
kube-apiserver's webhook client.

docker.io cannot be reached from the test machines, so the base (the Containerfile's ``BASE`` argument) is
made here: Debian bookworm by debootstrap with python3, its venv module and ``python`` (what
python:3.12-slim provides), trusting the host's CA bundle (the build fetches wheels from PyPI). It is kept
in podman's store between runs under a tag naming its inputs. Skipped, with the reason, where podman,
debootstrap or a container runtime cannot run.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.kube_apiserver.node import ControlPlaneNode, create_pod, pod, with_port
from tests.server.harness import REPO_ROOT

# A podman build of minutes (the image layers of pip installs): CI runs it, `pytest --slow` too.
pytestmark = pytest.mark.slow

IMAGE = "localhost/staticadm:test"
BASE_PACKAGES = "python3,python3-venv,python-is-python3,ca-certificates"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
NAMESPACES = {name: {"kubernetes.io/metadata.name": name} for name in ("shop",)}


def _podman(conf: Path, *argv: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(["podman", *argv], env={**os.environ, "CONTAINERS_CONF": str(conf)},
                               capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert completed.returncode == 0, f"podman {' '.join(argv)}:\n{completed.stdout}{completed.stderr}"
    return completed


def _containers_conf(directory: Path) -> Path:
    """What this kind of machine needs: runc (crun refuses its hybrid cgroups), cgroupfs, and rlimits no
    higher than the ones the test runs with (it may not raise them)."""
    _soft, nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    _soft, nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = min(nproc if nproc != resource.RLIM_INFINITY else 32768, 32768)  # podman caps its own at 32768
    conf = directory / "containers.conf"
    runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""
    conf.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                    f'[engine]\n{runtime}cgroup_manager = "cgroupfs"\nevents_logger = "file"\n')
    return conf


@pytest.fixture(scope="module")
def image() -> Iterator[Path]:
    if shutil.which("podman") is None:
        pytest.skip("no container builder: podman is not installed (.ci/run installs it from Debian's packages)")
    if os.geteuid() != 0:
        pytest.skip("the image test runs podman as root (rootless podman needs subuid ranges set up)")
    work = Path(tempfile.mkdtemp(prefix="staticadm-image-"))
    conf = _containers_conf(work)
    base = _base_image(conf, work)
    context = work / "context"
    for name in filter(None, subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                            cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode()
                       .split("\0")):
        if (REPO_ROOT / name).is_file():
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, context / name)
    started = time.monotonic()
    _podman(conf, "build", "--format", "docker", "--network", "host", "--build-arg", f"BASE={base}", "-t", IMAGE,
            "-f", "Containerfile", str(context), timeout=1200)
    print(f"podman build: {time.monotonic() - started:.1f} s")
    yield conf
    shutil.rmtree(work, ignore_errors=True)  # the image stays: the next build reuses its layers


def _base_image(conf: Path, work: Path) -> str:
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed: no base image can be made here (.ci/run installs it)")
    digest = hashlib.sha256((BASE_PACKAGES + HOST_CA_BUNDLE.read_text()).encode()).hexdigest()[:12]
    tag = f"localhost/staticadm-test-base:bookworm-{digest}"
    if _podman(conf, "image", "exists", tag, check=False).returncode == 0:
        return tag
    rootfs = work / "rootfs"
    started = time.monotonic()
    completed = subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm",
                                str(rootfs), "http://deb.debian.org/debian"], capture_output=True, text=True,
                               timeout=1200, check=False)
    if completed.returncode != 0:
        pytest.skip(f"debootstrap could not make a base image: {completed.stderr[-500:]}")
    print(f"debootstrap: {time.monotonic() - started:.1f} s")
    # This network's TLS: the host's trust store, for pip inside the build.
    shutil.copy(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
    (rootfs / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(["podman", "import", "-", tag], stdin=tar.stdout, capture_output=True, text=True,
                              env={**os.environ, "CONTAINERS_CONF": str(conf)}, timeout=600, check=False)
    tar.wait()
    assert imported.returncode == 0, imported.stderr
    shutil.rmtree(rootfs, ignore_errors=True)
    return tag


def test_check_runs_in_the_image_as_its_user(image: Path) -> None:
    completed = _podman(image, "run", "--rm", "--network", "none", "--read-only", "--entrypoint", "staticadm",
                        "-v", f"{REPO_ROOT / 'manifests' / 'examples'}:/manifests:ro", IMAGE, "check", "/manifests")
    assert completed.stdout.startswith("/manifests: OK"), completed.stdout
    user = _podman(image, "run", "--rm", "--network", "none", "--entrypoint", "id", IMAGE).stdout
    assert user.startswith("uid=65532(staticadm) gid=65532(staticadm)"), user


def test_the_static_pod_serves_kube_apiserver(image: Path, tmp_path: Path, short_tmp_path: Path) -> None:
    pod_manifest = yaml.safe_load((REPO_ROOT / "manifests/kube-apiserver/staticadm-pod.yaml").read_text())
    [container] = pod_manifest["spec"]["containers"]
    assert container["image"] == "localhost/staticadm:0.1.0" and container["imagePullPolicy"] == "Never"
    node = ControlPlaneNode(short_tmp_path / "node")
    node.kubeadm_init_pki()
    node.install_config()
    # The pod header's preparation: certificates for uid 65532, the manifests.
    tls = node.path("/etc/staticadm/tls")
    subprocess.run([sys.executable, "-m", "staticadm", "certs", "--ca-dir", str(node.path("/etc/staticadm/ca")),
                    "--out-dir", str(tls)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    # What the pod mounts holds no CA key (the CA stays in /etc/staticadm/ca, not mounted).
    assert sorted(path.name for path in tls.iterdir()) == ["serving.crt", "serving.key"]
    for path in tls.iterdir():
        os.chown(path, 65532, 65532)
    for path in (node.root, *node.root.rglob("*")):
        if path.is_dir():
            path.chmod(0o755)
    security = container["securityContext"]
    uid = pod_manifest["spec"]["securityContext"]["runAsUser"]
    # --read-only-tmpfs=false: podman would otherwise mount /tmp, /run and /var/tmp writable; the pod has only
    # the volumes it declares.
    argv = ["run", "-d", "--name", f"staticadm-{node.port}", "--network", "host", f"--user={uid}:{uid}",
            "--read-only-tmpfs=false",
            "--security-opt=no-new-privileges", "--cap-drop=all"]
    if security["readOnlyRootFilesystem"]:
        argv.append("--read-only")
    for variable in container.get("env", []):
        argv += ["--env", f"{variable['name']}={variable['value']}"]
    volumes = {volume["name"]: volume for volume in pod_manifest["spec"]["volumes"]}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            argv += ["-v", f"{node.path(volume['hostPath']['path'])}:{mount['mountPath']}:ro"]
        else:  # emptyDir: a directory the kubelet makes, mode 0777
            empty_dir = tmp_path / "pod-volumes" / mount["name"]
            empty_dir.mkdir(parents=True)
            empty_dir.chmod(0o777)
            argv += ["-v", f"{empty_dir}:{mount['mountPath']}:rw"]
    args = [with_port(arg, node.port) for arg in container["args"]]
    _podman(image, *argv, IMAGE, *args)
    name = f"staticadm-{node.port}"
    try:
        probe = container["readinessProbe"]["exec"]["command"]
        deadline = time.monotonic() + 60
        while _podman(image, "exec", name, *probe, check=False).returncode != 0:
            state = _podman(image, "inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
            assert state == "running" and time.monotonic() < deadline, _podman(image, "logs", name).stderr
            time.sleep(0.5)
        for kind in ("livenessProbe", "startupProbe"):
            assert _podman(image, "exec", name, *container[kind]["exec"]["command"], check=False).returncode == 0
        # kube-apiserver, with the webhook configurations made from the pod's CA.
        (node.path("/var/lib/staticadm/tls")).mkdir(parents=True)
        shutil.copy(node.path("/etc/staticadm/ca/ca.crt"), node.path("/var/lib/staticadm/tls/ca.crt"))
        node.install_admission_files()
        apiserver = node.kube_apiserver(namespaces=NAMESPACES)
        denied = apiserver.admit(create_pod(pod("debug", privileged=True)))
        assert not denied.allowed and denied.status is not None and denied.status["code"] == 403, \
            f"{denied.status}\n{_podman(image, 'logs', name).stderr}"
        assert apiserver.admit(create_pod(pod("web"))).allowed
        logs = _podman(image, "logs", name)
        starting = next(json.loads(line) for line in (logs.stdout + logs.stderr).splitlines()
                        if line.startswith("{") and json.loads(line).get("msg") == "starting staticadm")
        assert starting["config"]["workers"] == 2 and starting["config"]["client-ca"] == "/client-ca/front-proxy-ca.crt"
    finally:
        _podman(image, "rm", "-f", name, check=False)
