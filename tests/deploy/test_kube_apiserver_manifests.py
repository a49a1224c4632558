"""The kube-apiserver wiring in manifests/kube-apiserver: valid YAML, the right API versions and fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import EXAMPLES, KUBE_APISERVER, run_cli


def _load(relative: str) -> Any:
    [document] = [d for d in yaml.safe_load_all((KUBE_APISERVER / relative).read_text()) if d is not None]
    return document


def test_admission_configuration_points_each_webhook_plugin_at_its_own_directory() -> None:
    config = _load("admission-configuration.yaml")
    assert config["apiVersion"] == "apiserver.config.k8s.io/v1"
    assert config["kind"] == "AdmissionConfiguration"
    plugins = {plugin["name"]: plugin["configuration"] for plugin in config["plugins"]}
    assert set(plugins) == {"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}
    directories = set()
    for configuration in plugins.values():
        assert configuration["apiVersion"] == "apiserver.config.k8s.io/v1"
        assert configuration["kind"] == "WebhookAdmissionConfiguration"
        assert set(configuration) == {"apiVersion", "kind", "staticManifestsDir", "kubeConfigFile"}
        # kube-apiserver's client certificate for staticadm's client-ca (systemd/staticadm.yaml).
        kubeconfig = _load("webhook-kubeconfig.yaml")
        assert configuration["kubeConfigFile"].endswith("/" + "webhook-kubeconfig.yaml")
        [user] = kubeconfig["users"]
        assert user["name"] == "127.0.0.1:8443" and {"client-certificate", "client-key"} <= set(user["user"])
        directory = configuration["staticManifestsDir"]
        assert directory.startswith("/")  # kube-apiserver refuses a relative staticManifestsDir
        directories.add(directory)
    assert len(directories) == 2  # one directory per plugin, each holding only its own kind


def test_static_webhook_configurations_have_the_shape_kube_apiserver_loads() -> None:
    for kind, relative, path in (
        ("ValidatingWebhookConfiguration", "validating-webhooks/staticadm.static.k8s.io.yaml", "/validate"),
        ("MutatingWebhookConfiguration", "mutating-webhooks/staticadm.static.k8s.io.yaml", "/mutate"),
    ):
        config = _load(relative)
        assert config["apiVersion"] == "admissionregistration.k8s.io/v1" and config["kind"] == kind
        assert config["metadata"]["name"].endswith(".static.k8s.io")
        assert Path(relative).name == config["metadata"]["name"] + ".yaml"
        for webhook in config["webhooks"]:
            assert webhook["clientConfig"] == {"url": f"https://127.0.0.1:8443{path}"}
            assert webhook["sideEffects"] == "None" and webhook["admissionReviewVersions"] == ["v1"]
            assert webhook["failurePolicy"] in ("Fail", "Ignore")


@pytest.mark.parametrize(("kind", "relative"), [
    ("ValidatingWebhookConfiguration", "validating-webhooks/staticadm.static.k8s.io.yaml"),
    ("MutatingWebhookConfiguration", "mutating-webhooks/staticadm.static.k8s.io.yaml"),
])
def test_checked_in_webhooks_match_what_webhook_config_generates(kind: str, relative: str, tmp_path: Path) -> None:
    # The checked-in files are the command's output for manifests/examples; keep them in step.
    assert run_cli("certs", "--out-dir", str(tmp_path)).code == 0
    result = run_cli("webhook-config", "--manifests", str(EXAMPLES), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tmp_path / "ca.crt"))
    assert result.code == 0, result.stderr
    generated = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == kind)
    del generated["metadata"]["annotations"]
    del generated["webhooks"][0]["clientConfig"]["caBundle"]
    assert _load(relative) == generated


def test_kubeadm_static_pod_runs_the_sidecar_unprivileged() -> None:
    pod = _load("staticadm-pod.yaml")
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"]["namespace"] == "kube-system"
    spec = pod["spec"]
    assert spec["hostNetwork"] is True  # kube-apiserver dials 127.0.0.1
    assert spec["securityContext"]["runAsNonRoot"] is True
    [container] = spec["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "--listen=127.0.0.1:8443" in container["args"]
    # HTTPS requires a client certificate (--client-ca) the kubelet's probes do not present: they ask the
    # unix socket, in the pod's runtime directory.
    assert "--socket=/run/staticadm/staticadm.sock" in container["args"]
    for probe, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        command = " ".join(container[probe]["exec"]["command"])
        assert "'/run/staticadm/staticadm.sock'" in command and f"GET {path} HTTP" in command, probe
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert mounts["manifests"]["readOnly"] is True
    assert {volume["name"] for volume in spec["volumes"]} == set(mounts)
    # Writable: exactly the state and runtime directories, emptyDirs; everything from the host read-only.
    writable = {mount["mountPath"] for mount in mounts.values() if not mount.get("readOnly")}
    assert writable == {"/var/lib/staticadm", "/run/staticadm"}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert all("emptyDir" in volumes[name] for name, mount in mounts.items() if not mount.get("readOnly"))
    assert "--state-dir=/var/lib/staticadm" in container["args"]
    # The memory limit follows from --workers (docs/deployment.md, "Container image and kubeadm static pod"):
    # (workers + 1) x 135 MB + workers x 64 MiB.
    [workers] = [int(arg.split("=")[1]) for arg in container["args"] if arg.startswith("--workers=")]
    limit_mib = int(container["resources"]["limits"]["memory"].removesuffix("Mi"))
    needed_mib = ((workers + 1) * 135e6) / 2**20 + workers * 64
    assert needed_mib <= limit_mib < needed_mib + 128, (workers, limit_mib, needed_mib)
    assert container["image"] == "localhost/staticadm:0.1.0" and container["imagePullPolicy"] == "Never"


def test_kubeadm_cluster_configuration_passes_the_admission_config_file() -> None:
    config = _load("kubeadm-clusterconfiguration.yaml")
    assert config["apiVersion"] == "kubeadm.k8s.io/v1beta4" and config["kind"] == "ClusterConfiguration"
    args = {arg["name"]: arg["value"] for arg in config["apiServer"]["extraArgs"]}
    path = args["admission-control-config-file"]
    [volume] = config["apiServer"]["extraVolumes"]
    assert path.startswith(volume["mountPath"] + "/")
