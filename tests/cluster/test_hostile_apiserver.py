"""The cluster view against a hostile kube-apiserver: calls that never answer, answers of any size, lists
that ignore ``limit``, watches that fail or flood, redirect loops, answers Go would not decode.

Each test is a real daemon against the stand-in (``tests/cluster/apiserver.py``, its ``Hostility``).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.apiserver import FakeApiServer
from tests.cluster.policies import ERRORED_CHECK_POLICY, PLAIN_POLICY, SELECTOR_POLICY, policy
from tests.cluster.stalls import LivezProbe
from tests.server.harness import DaemonFactory, Response, wait_for


def review(resource: str, kind: str, namespace: str, *, user: str = "alice", uid: str = "u",
           data: dict[str, str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "web", "namespace": namespace}}
    if data is not None:
        obj["data"] = data
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": kind},
                    "resource": {"group": "", "version": "v1", "resource": resource}, "operation": "CREATE",
                    "name": "web", "namespace": namespace, "userInfo": {"username": user}, "object": obj},
    }


def pod(uid: str = "u", user: str = "alice") -> dict[str, Any]:
    return review("pods", "Pod", "qa", uid=uid, user=user)


def service(uid: str = "s") -> dict[str, Any]:
    return review("services", "Service", "qa", uid=uid)


def start(make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path, *policies: str,
          env: dict[str, str] | None = None, **kubeconfig: Any) -> Any:
    """The stand-in (namespace qa, labelled environment=test) and a daemon whose cluster view has synced."""
    apiserver.set_namespace("qa", {"environment": "test"})
    apiserver.start()
    daemon = make_daemon(policy=None, start=False, env=env or {},
                         args=["--kubeconfig", str(apiserver.kubeconfig(tmp_path / "kubeconfig", **kubeconfig))])
    for index, text in enumerate(policies or (ERRORED_CHECK_POLICY, SELECTOR_POLICY, PLAIN_POLICY)):
        (daemon.manifests / f"policy-{index}.yaml").write_text(text)
    daemon.start()
    assert wait_for(lambda: synced(daemon), timeout=15), daemon.log()
    return daemon


def synced(daemon: Any) -> bool:
    return daemon.metric("staticadm_cluster_cache_synced", {"resource": "namespaces"}) == 1


def concurrently(daemon: Any, documents: list[dict[str, Any]], *, spacing: float = 0.0,
                 path: str = "/validate") -> Callable[[], list[Response]]:
    """Sends each document from its own thread (``spacing`` seconds apart); the returned function waits for
    the answers, in order."""
    answers: list[Response | None] = [None] * len(documents)

    def send(index: int) -> None:
        answers[index] = daemon.validate(documents[index], path=path)

    threads = []
    for index in range(len(documents)):
        thread = threading.Thread(target=send, args=(index,))
        thread.start()
        threads.append(thread)
        if spacing:
            time.sleep(spacing)

    def collect() -> list[Response]:
        for thread in threads:
            thread.join(60)
        assert all(answer is not None for answer in answers)
        return [answer for answer in answers if answer is not None]

    return collect


def message(response: Response) -> str:
    assert response.status == 200, (response.status, response.body)
    answer = response.json()["response"]
    assert not answer["allowed"], answer
    return str(answer["status"]["message"])


# -- item 5: every cluster call ends at the request's deadline and is named for what happened ----------------


@pytest.mark.slow
def test_a_hung_review_ends_at_the_deadline_whatever_the_requests_arrival(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = lambda spec: {"allowed": True}
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.hostility.hang = {"sar"}
    # Over 5 s, where aiohttp's own timeouts round up to the next whole second of loop time: arrivals spread
    # over a second each see that rounding differently.
    answers = concurrently(daemon, [pod(uid=f"u{i}") for i in range(12)], spacing=1 / 12,
                           path="/validate?timeout=6s")()
    for answer in answers:
        text = message(answer)  # never a 504: the policy's own errored() answer
        # The calls end half a second before the request's deadline (the budget named is from the call's start).
        assert re.search(r"SubjectAccessReview failed: POST /apis/authorization.k8s.io/v1/subjectaccessreviews: no "
                         rf"answer from {re.escape(apiserver.url)} within [\d.]+ s$", text), text


@pytest.mark.slow
def test_a_hung_namespace_get_is_named_not_guessed(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.hostility.hang = {"get"}
    documents = [review("configmaps", "ConfigMap", f"fresh-{i}") for i in range(6)]
    answers = concurrently(daemon, documents, spacing=1 / 6, path="/validate?timeout=6s")()
    for index, answer in enumerate(answers):
        text = message(answer)
        assert re.search(rf'namespace "fresh-{index}" could not be read from kube-apiserver: GET /api/v1/namespaces/'
                         rf"fresh-{index}: no answer from {re.escape(apiserver.url)} within [\d.]+ s", text), text
    assert "not found" not in "".join(message(answer) for answer in answers)


# -- item 6: requests waiting on kube-apiserver hold no evaluation slot -----------------------------------------


@pytest.mark.parametrize("operation", ["sar", "get"])
def test_requests_waiting_on_kube_apiserver_leave_the_evaluation_slots_to_others(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path, operation: str) -> None:
    apiserver.authorize = lambda spec: {"allowed": True}
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.hostility.hang = {operation}
    waiting = [pod(uid=f"u{i}", user=f"user-{i}") if operation == "sar" else
               review("configmaps", "ConfigMap", f"fresh-{i}") for i in range(80)]
    collect = concurrently(daemon, waiting, path="/validate?timeout=5s")
    time.sleep(1.0)
    # More requests wait on kube-apiserver than there are evaluation slots (64): one that needs nothing from it
    # is evaluated at once all the same, well within its own deadline.
    for index in range(5):
        answer = daemon.validate(service(uid=f"s{index}"), path="/validate?timeout=2s")
        assert answer.status == 200 and answer.json()["response"]["allowed"], answer.body
    for answer in collect():
        assert "no answer from" in message(answer)


# -- item 7: checks inside macros over a map ----------------------------------------------------------------------


EXISTS_POLICY = policy("any-key-readable", "configmaps", """\
  - expression: "object.data.exists(k, authorizer.group('').resource('configmaps').name(k).check('get').allowed())"
""")
LABELLING_POLICY = """apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: readable.static.k8s.io}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        object.data.exists(k, authorizer.group('').resource('configmaps').name(k).check('get').allowed())
        ? [JSONPatch{op: "add", path: "/metadata/labels", value: {"readable": "yes"}}] : []
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: readable.static.k8s.io}
spec: {policyName: readable.static.k8s.io}
"""
ALL_IGNORED_POLICY = policy("every-key-readable", "secrets", """\
  - expression: "object.data.all(k, authorizer.group('').resource('secrets').name(k).check('get').allowed())"
""").replace("failurePolicy: Fail", "failurePolicy: Ignore")


def test_authorizer_checks_over_a_map_decide_as_one_evaluation_does(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = lambda spec: {"allowed": True}
    daemon = start(make_daemon, apiserver, tmp_path, EXISTS_POLICY, ALL_IGNORED_POLICY, LABELLING_POLICY)
    keys = {f"key-{index:04d}": "v" for index in range(200)}
    for attempt in range(10):
        # A user of its own each time: no answer is cached, every round of the evaluation asks.
        answer = daemon.validate(review("configmaps", "ConfigMap", "qa", user=f"user-{attempt}", data=keys))
        assert answer.status == 200 and answer.json()["response"]["allowed"], answer.body
        # Mutations too: each round converts the mutated objects again, and finds the activations it had.
        answer = daemon.validate(review("configmaps", "ConfigMap", "qa", user=f"mutating-{attempt}", data=keys),
                                 path="/mutate")
        assert answer.status == 200 and "patch" in answer.json()["response"], answer.body
    # The third check passes the per-expression cost limit (350,000 each, 1,000,000): under Ignore, allowed.
    many = {f"key-{index:04d}": "v" for index in range(1000)}
    for attempt in range(3):
        answer = daemon.validate(review("secrets", "Secret", "qa", user=f"other-{attempt}", data=many))
        assert answer.status == 200 and answer.json()["response"]["allowed"], answer.body
    assert "actual cost limit exceeded" in daemon.log()


# -- item 8: every answer is bounded, and huge lists do not stall the daemon ----------------------------------


def test_answers_past_their_bound_are_errors_not_buffered(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = lambda spec: {"allowed": True}
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.add_namespaces(["fresh"])  # not sent to the open watch: the cache lacks it, a GET reads it
    apiserver.hostility.padding = {"sar": 8 << 20, "get": 20 << 20}
    text = message(daemon.validate(pod()))
    assert "SubjectAccessReview failed" in text and "is larger than the" in text and "bytes allowed for it" in text
    text = message(daemon.validate(review("configmaps", "ConfigMap", "fresh")))
    assert 'namespace "fresh" could not be read from kube-apiserver' in text and "is larger than the 16777216" in text


@pytest.mark.slow  # a 100,000-namespace list built, served and decoded: 20 s end to end
def test_a_hundred_thousand_namespaces_in_one_page_leave_the_daemon_responsive(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.add_namespaces([f"team-{index:06d}" for index in range(99_999)], {"environment": "production"})
    apiserver.hostility.ignore_limit = True
    assert daemon.socket_path is not None
    probe = LivezProbe(daemon.socket_path)
    apiserver.expire_watches()
    assert wait_for(lambda: daemon.metric("staticadm_cluster_cache_objects", {"resource": "namespaces"}) == 100_000,
                    timeout=60), daemon.log()
    longest = probe.longest()
    # The liveness probe's own timeout is 5 s; the page is decoded item by item, a few milliseconds at a time.
    assert longest < 1.0, longest
    assert not daemon.validate(review("configmaps", "ConfigMap", "qa")).json()["response"]["allowed"]
    assert daemon.validate(review("configmaps", "ConfigMap", "team-012345")).json()["response"]["allowed"]


def test_a_list_page_past_its_bound_is_refused(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.hostility.padding = {"list": 80 << 20}
    apiserver.expire_watches()
    assert wait_for(lambda: "is larger than the 67108864 bytes allowed" in daemon.get("/readyz?verbose").body.decode(),
                    timeout=20), daemon.get("/readyz?verbose").body.decode()


# -- item 9: relists and watches are paced as client-go paces them ---------------------------------------------


def list_starts(apiserver: FakeApiServer) -> int:
    return sum(1 for method, path in apiserver.requests
               if path.startswith("/api/v1/namespaces?") and "watch" not in path and "continue" not in path)


@pytest.mark.slow
def test_every_watch_failing_relists_at_client_gos_falling_rate(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.add_namespaces([f"team-{index:05d}" for index in range(2000)])
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.hostility.watch = "fail"
    before = list_starts(apiserver)
    apiserver.expire_watches()
    time.sleep(6.0)
    # client-go's reflector waits 0.8, 1.6, 3.2 s (each up to twice as long) whatever the lists did: at most
    # three relists in 6 s, where resetting the backoff after each successful list relists every second.
    relists = list_starts(apiserver) - before
    assert 1 <= relists <= 3, relists
    assert synced(daemon)


def test_a_bookmark_flood_ends_the_watch(make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.hostility.watch = "bookmarks"
    apiserver.expire_watches()
    assert wait_for(lambda: "sent events faster than a namespace watch carries them" in
                    daemon.get("/readyz?verbose").body.decode(), timeout=15), daemon.log()
    assert daemon.metric("staticadm_cluster_watch_restarts_total", {"reason": "error"}) >= 1
    answer = daemon.validate(service())
    assert answer.status == 200 and answer.json()["response"]["allowed"]


# -- item 13: redirect loops and answers Go cannot decode ------------------------------------------------------


def test_a_redirect_loop_is_named(make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = lambda spec: {"allowed": True}
    daemon = start(make_daemon, apiserver, tmp_path)
    apiserver.hostility.redirect_loop = {"sar"}
    text = message(daemon.validate(pod()))
    assert f"{apiserver.url} redirected more than 10 times (the last time to " \
           "/apis/authorization.k8s.io/v1/subjectaccessreviews)" in text, text


def test_an_answer_go_cannot_decode_is_an_error_and_never_cached(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = lambda spec: {"allowed": "true"}
    daemon = start(make_daemon, apiserver, tmp_path)
    for _ in range(2):
        text = message(daemon.validate(pod()))
        assert text.endswith("authorizer: SubjectAccessReview failed: json: cannot unmarshal string into Go struct "
                             "field SubjectAccessReviewStatus.status.allowed of type bool"), text
    # Errors are never cached: each request asked again.
    assert len(apiserver.sar_requests) >= 2


# -- item 3: the kubeconfig's key never reaches a file system ---------------------------------------------------


def test_kubeconfig_key_data_stays_in_memory(make_daemon: DaemonFactory, apiserver: FakeApiServer,
                                             tmp_path: Path) -> None:
    temporary = tmp_path / "tmpdir"
    temporary.mkdir()
    daemon = start(make_daemon, apiserver, tmp_path, SELECTOR_POLICY, env={"TMPDIR": str(temporary)},
                   client_certificate=True, embed=True)
    assert "client-key-data" in (tmp_path / "kubeconfig").read_text()
    assert not message(daemon.validate(review("configmaps", "ConfigMap", "qa"))).startswith("namespace")
    assert daemon.process is not None
    os.kill(daemon.process.pid, signal.SIGKILL)
    daemon.process.wait()
    # Nothing was written where temporary files go, so a killed process leaves no copy of the key.
    assert list(temporary.iterdir()) == []
