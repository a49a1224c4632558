"""The live cluster view's namespaces (``--kubeconfig``): real daemons against a stand-in kube-apiserver."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from staticadm.cli import main
from tests.cluster.apiserver import FakeApiServer
from tests.cluster.policies import policy
from tests.server.harness import DaemonFactory, wait_for, write_atomically

SELECTOR_POLICY = policy("test-namespaces", "pods", """\
  - expression: "false"
    message: no pods in test namespaces
""", """\
  matchResources:
    namespaceSelector:
      matchLabels:
        environment: test
""")

NAMESPACE_OBJECT_POLICY = policy("team-owner", "configmaps", """\
  - expression: >-
      has(namespaceObject.metadata.annotations) && 'owner' in namespaceObject.metadata.annotations
      && namespaceObject.status.phase == 'Active' && namespaceObject.metadata.resourceVersion != ''
      && namespaceObject.spec.finalizers == ['kubernetes']
    messageExpression: "'namespace ' + namespaceObject.metadata.name + ' has no owner'"
""")


def pod_review(namespace: str, *, resource: str = "pods", kind: str = "Pod") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": f"uid-{namespace}", "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource}, "operation": "CREATE",
            "name": "web", "namespace": namespace, "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": kind, "metadata": {"name": "web", "namespace": namespace}},
        },
    }


def answer(daemon: Any, namespace: str, **kwargs: Any) -> dict[str, Any]:
    response = daemon.validate(pod_review(namespace, **kwargs))
    assert response.status == 200, response.body
    return response.json()["response"]  # type: ignore[no-any-return]


def allowed(daemon: Any, namespace: str) -> bool:
    return bool(answer(daemon, namespace)["allowed"])


def start_daemon(make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path, policy: str = SELECTOR_POLICY,
                 *, workers: int = 1, **kubeconfig: Any) -> Any:
    daemon = make_daemon(policy=None, start=False,
                         args=["--workers", str(workers),
                               "--kubeconfig", str(apiserver.kubeconfig(tmp_path / "kubeconfig", **kubeconfig))])
    (daemon.manifests / "policy.yaml").write_text(policy)
    return daemon.start()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_label_selector_decides_per_namespace_and_follows_label_changes(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path, workers: int) -> None:
    apiserver.set_namespace("qa", {"environment": "test"})
    apiserver.set_namespace("shop", {"environment": "production"})
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path, workers=workers)
    assert wait_for(lambda: not allowed(daemon, "qa"), timeout=10), daemon.log()
    assert answer(daemon, "qa")["status"]["message"].endswith("no pods in test namespaces")
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1)
    synced_at = len(apiserver.requests)
    assert allowed(daemon, "shop")
    # A label change arrives by the watch and flips the decision.
    changed = time.monotonic()
    apiserver.set_namespace("shop", {"environment": "test"})
    # Every worker keeps its own view: each answer (whichever worker gives it) must have flipped.
    assert wait_for(lambda: not any(allowed(daemon, "shop") for _ in range(4)), timeout=5)
    print(f"label change to decision: {time.monotonic() - changed:.3f} s")
    apiserver.set_namespace("qa", {"environment": "production"})
    assert wait_for(lambda: all(allowed(daemon, "qa") for _ in range(4)), timeout=5)
    assert daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1
    assert daemon.metric("staticadm_cluster_cache_objects", {"resource": "namespaces"}) == 2
    verbose = daemon.get("/readyz?verbose").body.decode()
    assert "note: cluster-view: namespaces synced (2 cached" in verbose
    # Once synced, lookups come from the cache: no per-request GETs.
    assert not [path for _, path in apiserver.requests[synced_at:] if path.startswith("/api/v1/namespaces/")]


def test_a_namespace_created_after_start_and_one_deleted(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("qa", {"environment": "test"})
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path)
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1)
    apiserver.set_namespace("new-team", {"environment": "test"})
    assert wait_for(lambda: not allowed(daemon, "new-team"), timeout=5)
    apiserver.delete_namespace("qa")

    def gone() -> bool:
        response = answer(daemon, "qa")
        return not response["allowed"] and 'namespaces "qa" not found' in response["status"]["message"]

    assert wait_for(gone, timeout=5), answer(daemon, "qa")
    # The deleted namespace was asked for by a live GET (it might have been re-created since).
    assert ("GET", "/api/v1/namespaces/qa") in apiserver.requests


def test_a_live_get_answers_a_namespace_the_watch_has_not_delivered(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path)
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1)
    # Stop the watch from delivering: the namespace is known only to a live GET.
    apiserver.token = "rotated"
    apiserver.expire_watches()
    apiserver.token = "admin-token"
    apiserver.set_namespace("fresh", {"environment": "test"})
    assert not allowed(daemon, "fresh")


def test_a_watch_ended_by_410_relists_and_recovers(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("qa", {"environment": "production"})
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path)
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1)
    assert allowed(daemon, "qa")
    apiserver.expire_watches()
    assert wait_for(lambda: daemon.metric("staticadm_cluster_watch_restarts_total",
                                          {"resource": "namespaces", "reason": "expired"}) >= 1)
    apiserver.set_namespace("qa", {"environment": "test"})
    assert wait_for(lambda: not allowed(daemon, "qa"), timeout=5)
    lists = [path for method, path in apiserver.requests if path.startswith("/api/v1/namespaces?limit")]
    assert len(lists) >= 2


def test_kube_apiserver_down_at_start_then_up(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("qa", {"environment": "test"})
    daemon = start_daemon(make_daemon, apiserver, tmp_path)  # ready without the cluster view
    response = answer(daemon, "qa")
    assert not response["allowed"]
    message = response["status"]["message"]
    assert 'namespace "qa"' in message and "unreachable" in message, message
    # Never a guess: the selector needs a label nobody can read yet, so the policy's failurePolicy decides.
    assert "not synced yet" in daemon.get("/readyz?verbose").body.decode()
    assert daemon.get("/readyz").status == 200
    apiserver.start()
    assert wait_for(lambda: not allowed(daemon, "qa") and "no pods in test namespaces" in
                    answer(daemon, "qa")["status"]["message"], timeout=15), daemon.log()
    apiserver.set_namespace("shop", {})
    assert wait_for(lambda: allowed(daemon, "shop"), timeout=5)


def test_namespace_object_carries_what_kube_apiserver_copies(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("owned", {}, annotations={"owner": "team-a"})
    apiserver.set_namespace("orphan", {})
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path, NAMESPACE_OBJECT_POLICY)
    review = {"resource": "configmaps", "kind": "ConfigMap"}
    assert wait_for(lambda: answer(daemon, "owned", **review)["allowed"], timeout=10), answer(daemon, "owned", **review)
    denied = answer(daemon, "orphan", **review)
    assert not denied["allowed"] and denied["status"]["message"].endswith("namespace orphan has no owner")


def test_client_certificates_and_a_rotated_token_file(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("qa", {"environment": "test"})
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path, client_certificate=True)
    assert wait_for(lambda: not allowed(daemon, "qa"), timeout=10), daemon.log()
    daemon.stop()

    token_file = tmp_path / "token"
    token_file.write_text("old-token")
    apiserver.token = "new-token"
    other = make_daemon(policy=None, start=False, workdir=tmp_path / "second",
                        args=["--kubeconfig", str(apiserver.kubeconfig(tmp_path / "kc2", token_file=token_file))])
    (tmp_path / "second").mkdir(exist_ok=True)
    (other.manifests / "policy.yaml").write_text(SELECTOR_POLICY)
    other.start()
    # 401 with the old token: the lookup fails, naming the cause.
    assert wait_for(lambda: "Unauthorized" in answer(other, "qa")["status"]["message"], timeout=10), other.log()
    token_file.write_text("new-token")  # the kubelet rotates a projected token in place
    assert wait_for(lambda: "no pods in test namespaces" in answer(other, "qa")["status"]["message"], timeout=15)


def test_review_with_a_kubeconfig_decides_as_the_daemon(apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("qa", {"environment": "test"})
    apiserver.set_namespace("shop", {"environment": "production"})
    apiserver.start()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "policy.yaml").write_text(SELECTOR_POLICY)
    kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig")
    pod = tmp_path / "pod.yaml"

    def review(namespace: str) -> tuple[int, str, str]:
        pod.write_text(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: {namespace}}}\n")
        out, err = io.StringIO(), io.StringIO()
        code = main(["review", "--manifests", str(manifests), "--kubeconfig", str(kubeconfig), "-f", str(pod)],
                    stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    code, out, _ = review("qa")
    assert code == 3 and "no pods in test namespaces" in out
    assert review("shop")[0] == 0
    code, out, _ = review("nowhere")
    assert code == 4 and 'namespaces "nowhere" not found' in out
    apiserver.stop()
    code, _, err = review("qa")
    assert code == 2 and "--kubeconfig" in err and "cannot list namespaces" in err and "unreachable" in err


def test_an_exec_credential_plugin(make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("qa", {"environment": "test"})
    apiserver.token = "from-the-plugin"
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path, exec_token="from-the-plugin")
    assert wait_for(lambda: "no pods in test namespaces" in answer(daemon, "qa")["status"]["message"],
                    timeout=10), daemon.log()


def test_a_namespace_larger_than_a_stream_line_buffer_arrives_by_the_watch(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.start()
    daemon = start_daemon(make_daemon, apiserver, tmp_path)
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1)
    # 300 KiB of annotations (kubectl's last-applied-configuration can be that large): one watch line.
    apiserver.set_namespace("big", {"environment": "test"}, annotations={"blob": "x" * 300_000})
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_objects", {"resource": "namespaces"}) == 1)
    assert not allowed(daemon, "big")
    assert daemon.metric("staticadm_cluster_watch_restarts_total", {"reason": "error"}) == 0
    assert not [path for _, path in apiserver.requests if path.startswith("/api/v1/namespaces/big")]


NAME_ONLY_POLICY = SELECTOR_POLICY.replace("      matchLabels:\n        environment: test\n",
                                           "      matchLabels:\n        kubernetes.io/metadata.name: qa\n")


def test_an_unresponsive_kube_apiserver_holds_up_only_requests_that_need_it(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    # A kube-apiserver that accepts connections and never answers (not started: its port is a silent
    # listener), so every list and GET waits until it gives up.
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", apiserver.port))
    silent.listen(64)
    try:
        daemon = start_daemon(make_daemon, apiserver, tmp_path)

        def timed(namespace: str) -> tuple[float, dict[str, Any]]:
            started = time.monotonic()
            response = daemon.validate(pod_review(namespace), path="/validate?timeout=2s")
            assert response.status == 200, response.body
            return time.monotonic() - started, response.json()["response"]

        elapsed, first = timed("qa")
        assert not first["allowed"] and 'namespace "qa"' in first["status"]["message"]
        assert elapsed < 2.0  # answered within the request's deadline, by failurePolicy
        # Within a second of that failure the next request for the namespace does not wait again.
        elapsed, again = timed("qa")
        assert elapsed < 0.5 and not again["allowed"]
        # A policy set that only reads namespace names never waits for kube-apiserver.
        write_atomically(daemon.manifests / "policy.yaml", NAME_ONLY_POLICY)
        assert wait_for(lambda: "no pods in test namespaces" in str(timed("qa")[1].get("status")), timeout=15)
        elapsed, other = timed("shop")
        assert elapsed < 0.5 and other["allowed"]
    finally:
        silent.close()


def test_the_synced_gauge_counts_a_worker_that_is_still_starting(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.set_namespace("qa", {"environment": "test"})
    apiserver.start()
    daemon = make_daemon(policy=None, start=False, args=["--workers", "2", "--kubeconfig",
                                                         str(apiserver.kubeconfig(tmp_path / "kubeconfig"))])
    (daemon.manifests / "policy.yaml").write_text(SELECTOR_POLICY)
    daemon.start(wait=False)

    def started(index: int) -> int | None:
        for line in daemon.log().splitlines():
            if line.startswith("{") and '"worker started"' in line and json.loads(line).get("worker") == index:
                return int(json.loads(line)["pid"])
        return None

    assert wait_for(lambda: started(1) is not None, timeout=30), daemon.log()
    slow = started(1)
    assert slow is not None
    # The second worker is held before it could write anything (as a loaded node delays its start).
    os.kill(slow, signal.SIGSTOP)
    try:
        assert wait_for(lambda: '"worker":0' in daemon.log() and "namespace cache synced" in daemon.log(),
                        timeout=30), daemon.log()
        daemon.wait_ready(every_worker=False)
        time.sleep(0.5)
        assert daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 0
    finally:
        os.kill(slow, signal.SIGCONT)
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1,
                    timeout=30)
