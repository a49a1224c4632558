"""The real daemon against policies and requests that used to crash it or flip its decisions.

- A variable holding a map of optional values killed the process (SIGSEGV) on the first matching request.
- The engine stops any evaluation after 10,000 loop iterations: a Pod with 10,000 environment variables
  slipped past a deny policy under Ignore and was denied under Fail whatever it held.
- A wall-clock budget cut large evaluations at random: the same request was admitted or denied by chance.
Kubernetes evaluates all of these, deterministically; so must staticadm.
"""

from __future__ import annotations

from typing import Any

from tests.policy_text import validating_policy_yaml, validation_yaml
from tests.server.harness import REQUESTS, DaemonFactory


def _policy(name: str, failure_policy: str, validation: str, variables: str = "") -> str:
    return validating_policy_yaml(name, failure_policy=failure_policy, variables=variables,
                                  validations=validation_yaml(validation, f"{name} denied it"))


def _pod_review(spec: dict[str, Any], labels: dict[str, str] | None = None, uid: str = "u") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE", "name": "web", "namespace": "default",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "web", "namespace": "default", "labels": labels or {}}, "spec": spec},
        },
    }


def test_a_map_of_optional_values_in_a_variable_is_evaluated(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    variables = """  variables:
  - name: meta
    expression: "{'team': object.metadata.?labels.?team}"
"""
    (daemon.manifests / "team.yaml").write_text(
        _policy("team", "Fail", "variables.meta.team.orValue('') != 'red'", variables))
    daemon.start()
    blue = daemon.validate(_pod_review({"containers": []}, {"team": "blue"})).json()["response"]
    red = daemon.validate(_pod_review({"containers": []}, {"team": "red"})).json()["response"]
    none = daemon.validate(_pod_review({"containers": []})).json()["response"]
    assert blue["allowed"] is True and none["allowed"] is True
    assert red["allowed"] is False and "team denied it" in red["status"]["message"]
    assert daemon.process is not None and daemon.process.poll() is None
    assert daemon.metric(REQUESTS, {"code": "500"}) == 0


def _env(count: int, forbidden: bool) -> dict[str, Any]:
    env = [{"name": f"VAR_{i}", "value": "x"} for i in range(count)]
    if forbidden:
        env[-1] = {"name": "LD_PRELOAD", "value": "/tmp/evil.so"}
    return {"containers": [{"name": "app", "image": "nginx", "env": env}]}


def test_ten_thousand_environment_variables_are_all_looked_at(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    check = "object.spec.containers.all(c, !has(c.env) || c.env.all(e, e.name != 'LD_PRELOAD'))"
    (daemon.manifests / "ignore.yaml").write_text(_policy("a-no-preload-ignore", "Ignore", check))
    (daemon.manifests / "fail.yaml").write_text(_policy("no-preload-fail", "Fail", check))
    daemon.start()
    harmful = daemon.validate(_pod_review(_env(10_000, forbidden=True))).json()["response"]
    harmless = daemon.validate(_pod_review(_env(10_000, forbidden=False))).json()["response"]
    # Under Ignore the harmful Pod must not slip past (that policy sorts first, so its denial is the one
    # reported); under Fail the harmless one must not be denied.
    assert harmful["allowed"] is False
    assert "a-no-preload-ignore.static.k8s.io" in harmful["status"]["message"]
    assert harmless["allowed"] is True, harmless


def test_the_same_large_request_always_gets_the_same_decision(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    check = ("object.spec.containers.all(c, !has(c.resources) || !has(c.resources.limits) "
             "|| !has(c.resources.limits.memory) || quantity(c.resources.limits.memory).isLessThan(quantity('1Gi')))")
    (daemon.manifests / "limits.yaml").write_text(_policy("memory-limits", "Ignore", check))
    daemon.start()
    containers = [{"name": f"c{i}", "image": "nginx", "resources": {"limits": {"memory": "512Mi"}}}
                  for i in range(9_500)]
    containers[-1]["resources"]["limits"]["memory"] = "2Gi"
    decisions = [daemon.validate(_pod_review({"containers": containers}, uid=f"try-{i}")).json()["response"]
                 for i in range(12)]
    # Kubernetes admits none of them: the last container's 2Gi is over the limit, every time.
    assert [d["allowed"] for d in decisions] == [False] * 12
    assert all("memory-limits denied it" in d["status"]["message"] for d in decisions)
