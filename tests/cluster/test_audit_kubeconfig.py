"""``staticadm audit`` finds its kubeconfig as kubectl does, says plainly why a cluster cannot be reached, and ends
a list whose continue token comes back (a list that would never end) with an error naming the resource."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.cluster.apiserver import FakeApiServer
from tests.cluster.test_audit import MANIFESTS, cluster, run_audit
from tests.server import forked
from tests.server.harness import REPO_ROOT, free_port


def _manifests(tmp_path: Path) -> Path:
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    return manifests


def _audit_command(tmp_path: Path, home: Path, kubeconfig_env: str | None) -> subprocess.CompletedProcess[str]:
    """``staticadm audit DIR`` without --kubeconfig, as an operator runs it, with this $HOME and $KUBECONFIG."""
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    env["HOME"] = str(home)
    if kubeconfig_env is not None:
        env["KUBECONFIG"] = kubeconfig_env
    return forked.run([sys.executable, "-m", "staticadm", "audit", str(_manifests(tmp_path))], timeout=120,
                      cwd=REPO_ROOT, env=env)


def test_kubeconfig_files_listed_in_the_environment_merge_as_kubectl_merges_them(
        tmp_path: Path, apiserver: FakeApiServer) -> None:
    cluster(apiserver, pod_count=4)
    whole = yaml.safe_load(apiserver.kubeconfig(tmp_path / "whole").read_text())
    # The first file sets the context kubectl uses and a cluster entry the second file's must not replace.
    first = {"apiVersion": "v1", "kind": "Config", "current-context": "staticadm",
             "contexts": whole["contexts"]}
    second = {"apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
              "clusters": whole["clusters"], "users": whole["users"],
              "contexts": [{"name": "staticadm", "context": {"cluster": "nowhere", "user": "nobody"}}]}
    (tmp_path / "first").write_text(yaml.safe_dump(first))
    (tmp_path / "second").write_text(yaml.safe_dump(second))
    home = tmp_path / "home"
    home.mkdir()
    listed = os.pathsep.join([str(tmp_path / "missing"), str(tmp_path / "first"), str(tmp_path / "second")])
    completed = _audit_command(tmp_path, home, listed)
    assert completed.returncode == 3, completed.stderr
    assert "2 would be denied" in completed.stdout


def test_without_kubeconfig_or_environment_the_home_file_is_read(tmp_path: Path, apiserver: FakeApiServer) -> None:
    cluster(apiserver, pod_count=4)
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    apiserver.kubeconfig(home / ".kube" / "config")
    completed = _audit_command(tmp_path, home, None)
    assert completed.returncode == 3, completed.stderr
    empty_home = tmp_path / "empty-home"
    empty_home.mkdir()
    completed = _audit_command(tmp_path, empty_home, None)
    assert completed.returncode == 2
    assert f"no kubeconfig: give --kubeconfig FILE, set $KUBECONFIG, or create {empty_home}/.kube/config" \
        in completed.stderr


def test_an_unreachable_server_is_named_with_the_reason(tmp_path: Path, apiserver: FakeApiServer) -> None:
    port = free_port()  # nothing listens there
    config = yaml.safe_load(apiserver.kubeconfig(tmp_path / "kubeconfig").read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    completed = forked.run([sys.executable, "-m", "staticadm", "audit", str(_manifests(tmp_path)),
                            "--kubeconfig", str(tmp_path / "kubeconfig")], timeout=120, cwd=REPO_ROOT)
    assert completed.returncode == 2
    assert f"cannot connect to 127.0.0.1:{port}: Connection refused" in completed.stderr
    assert "SSLContext object" not in completed.stderr


def test_a_continue_token_given_again_ends_the_list_naming_the_resource(tmp_path: Path,
                                                                        apiserver: FakeApiServer) -> None:
    apiserver.hostility.repeat_continue = {"objects"}
    cluster(apiserver)
    code, _, err = run_audit(tmp_path, apiserver, "--page-size", "5")
    assert code == 2
    assert ("listing configmaps/v1: page 2 came with a continue token an earlier page gave, so the list would never "
            "end; stopped") in err
    pages = [path for _, path in apiserver.requests if path.startswith("/api/v1/configmaps")]
    assert len(pages) == 2


def test_a_namespace_list_whose_continue_token_comes_back_ends_too(tmp_path: Path, apiserver: FakeApiServer) -> None:
    apiserver.hostility.repeat_continue = {"list"}
    cluster(apiserver)
    code, _, err = run_audit(tmp_path, apiserver)
    assert code == 2 and "listing namespaces: page 2 came with a continue token an earlier page gave" in err
