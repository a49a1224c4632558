"""``authorizer`` checks answered by SubjectAccessReview through the stand-in kube-apiserver."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from staticadm.cli import main
from tests.cluster.apiserver import FakeApiServer
from tests.cluster.policies import policy
from tests.server.harness import DaemonFactory, wait_for

AUTHORIZER_POLICY = policy("secret-readers", "pods", """\
  - expression: >-
      authorizer.group('').resource('secrets').namespace(request.namespace).check('get').allowed()
    messageExpression: "'user ' + request.userInfo.username + ' may not read secrets'"
  - expression: "!variables.healthz.errored()"
    messageExpression: "'authorizer: ' + variables.healthz.error()"
  - expression: >-
      !authorizer.serviceAccount(request.namespace, 'builder').group('apps').resource('deployments')
      .check('delete').allowed()
      || authorizer.path('/dangerous').check('post').reason() == 'audited'
    message: the builder may delete deployments only where /dangerous is audited
""", variables="""\
  variables:
  - name: healthz
    expression: "authorizer.path('/healthz').check('get')"
""")  # a messageExpression has no authorizer of its own (Kubernetes compiles it without), but reads variables


def pod_review(user: str, namespace: str = "team-a", uid: str = "u1") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
            "name": "web", "namespace": namespace,
            "userInfo": {"username": user, "uid": f"{user}-uid", "groups": ["devs", "system:authenticated"],
                         "extra": {"scopes": ["a", "b"]}},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": namespace}},
        },
    }


class Rules:
    """The stand-in's authorizer: alice may read secrets; builder may delete deployments; /dangerous audited."""

    def __init__(self) -> None:
        self.broken = False

    def __call__(self, spec: dict[str, Any]) -> dict[str, Any]:
        if "nonResourceAttributes" in spec:
            path = spec["nonResourceAttributes"]["path"]
            if path == "/healthz":
                return {"allowed": True, **({"evaluationError": "webhook authorizer down"} if self.broken else {})}
            return {"allowed": False, "reason": "audited" if path == "/dangerous" else ""}
        attributes = spec["resourceAttributes"]
        if attributes.get("resource") == "secrets":
            allowed = spec.get("user") == "alice"
            return {"allowed": allowed, "reason": "RBAC: allowed" if allowed else ""}
        return {"allowed": spec.get("user", "").endswith(":builder")}


def start(make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path, policy: str = AUTHORIZER_POLICY) -> Any:
    apiserver.set_namespace("team-a", {})
    apiserver.start()
    daemon = make_daemon(policy=None, start=False,
                         args=["--kubeconfig", str(apiserver.kubeconfig(tmp_path / "kubeconfig"))])
    (daemon.manifests / "policy.yaml").write_text(policy)
    return daemon.start()


def answer(daemon: Any, user: str, path: str = "/validate") -> dict[str, Any]:
    response = daemon.validate(pod_review(user), path=path)
    assert response.status == 200, response.body
    return response.json()["response"]  # type: ignore[no-any-return]


def test_checks_are_subject_access_reviews_with_the_requests_user_and_cached(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = Rules()
    daemon = start(make_daemon, apiserver, tmp_path)
    assert answer(daemon, "alice")["allowed"], apiserver.sar_requests
    denied = answer(daemon, "bob")
    assert not denied["allowed"] and denied["status"]["message"].endswith("user bob may not read secrets")
    secrets = next(spec for spec in (review["spec"] for review in apiserver.sar_requests)
                   if spec.get("resourceAttributes", {}).get("resource") == "secrets" and spec["user"] == "alice")
    assert secrets == {"user": "alice", "uid": "alice-uid", "groups": ["devs", "system:authenticated"],
                       "extra": {"scopes": ["a", "b"]},
                       "resourceAttributes": {"verb": "get", "version": "*", "namespace": "team-a",
                                              "resource": "secrets"}}
    builder = next(review["spec"] for review in apiserver.sar_requests
                   if review["spec"].get("user", "").endswith(":builder"))
    assert builder == {"user": "system:serviceaccount:team-a:builder",
                       "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a"],
                       "resourceAttributes": {"verb": "delete", "version": "*", "group": "apps",
                                              "resource": "deployments"}}
    assert all(review["apiVersion"] == "authorization.k8s.io/v1" and review["kind"] == "SubjectAccessReview"
               for review in apiserver.sar_requests)
    reviews = len(apiserver.sar_requests)
    # The same checks again: answered from the cache, nothing sent.
    assert answer(daemon, "alice")["allowed"]
    assert not answer(daemon, "bob")["allowed"]
    assert len(apiserver.sar_requests) == reviews
    assert daemon.metric("staticadm_cluster_authorizer_cache_total", {"result": "hit"}) >= 4


def test_an_evaluation_error_and_an_unavailable_api_are_errored_decisions(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    rules = Rules()
    rules.broken = True
    apiserver.authorize = rules
    daemon = start(make_daemon, apiserver, tmp_path)
    denied = answer(daemon, "alice")
    assert not denied["allowed"] and denied["status"]["message"].endswith("authorizer: webhook authorizer down")
    # Not cached: once the chain recovers, the next request sees it.
    rules.broken = False
    assert answer(daemon, "alice")["allowed"]
    apiserver.authorize = None  # the API answers 404
    denied = daemon.validate(pod_review("carol"), path="/validate").json()["response"]
    # An errored check is not allowed(): the first validation denies, as in kube-apiserver.
    assert not denied["allowed"] and denied["status"]["message"].endswith("user carol may not read secrets")
    assert daemon.metric("staticadm_cluster_api_requests_total", {"operation": "sar", "result": "error"}) >= 1


def test_a_slow_review_is_an_errored_check_within_the_requests_deadline(
        make_daemon: DaemonFactory, apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = Rules()
    apiserver.sar_delay = 5.0
    only_errors = AUTHORIZER_POLICY.replace("""  - expression: >-
      authorizer.group('').resource('secrets').namespace(request.namespace).check('get').allowed()
    messageExpression: "'user ' + request.userInfo.username + ' may not read secrets'"
""", "")
    daemon = start(make_daemon, apiserver, tmp_path, only_errors)
    started = time.monotonic()
    response = daemon.validate(pod_review("dave"), path="/validate?timeout=2s")
    elapsed = time.monotonic() - started
    assert response.status == 200, response.body
    message = response.json()["response"]["status"]["message"]
    assert "no answer from" in message and "within" in message, message
    assert elapsed < 2.5


def test_without_a_kubeconfig_checks_fail_naming_why(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = make_daemon(policy=None, start=False)
    (daemon.manifests / "policy.yaml").write_text(AUTHORIZER_POLICY)
    daemon.start()
    assert wait_for(lambda: daemon.get("/readyz").status == 200)
    denied = answer(daemon, "alice")
    assert not denied["allowed"] and "no authorizer is configured" in denied["status"]["message"]


def test_review_with_a_kubeconfig_answers_checks_as_the_daemon(apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.authorize = Rules()
    apiserver.set_namespace("team-a", {})
    apiserver.start()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "policy.yaml").write_text(AUTHORIZER_POLICY)
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: team-a}\n")

    def review(user: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(["review", "--manifests", str(manifests), "--kubeconfig",
                     str(apiserver.kubeconfig(tmp_path / "kubeconfig")), "--user", user, "-f", str(pod)],
                    stdout=out, stderr=io.StringIO())
        return code, out.getvalue()

    assert review("alice")[0] == 0
    code, out = review("bob")
    assert code == 3 and "user bob may not read secrets" in out
