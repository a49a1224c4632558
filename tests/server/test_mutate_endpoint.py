"""``POST /mutate`` on the real daemon: the patch it answers with, applied by an independent JSON Patch
library, gives the object kube-apiserver's MutatingAdmissionPolicy plugin would make; hot reload and
failure answers go through the same listeners."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest

from tests.server.harness import DaemonFactory, review, wait_for, write_atomically

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs unix sockets")


def label_policy(value: str, *, failure: str = "Fail", expression: str | None = None) -> str:
    expression = expression or f'Object{{metadata: Object.metadata{{labels: {{"team": "{value}"}}}}}}'
    return f"""
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: team-label.static.k8s.io
spec:
  failurePolicy: {failure}
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: {json.dumps(expression)}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: team-label.static.k8s.io
spec:
  policyName: team-label.static.k8s.io
"""


def patched(answer: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    response = answer["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(original, json.loads(base64.b64decode(response["patch"])))


def test_mutate_answers_with_a_patch_on_both_listeners_and_follows_reloads(make_daemon: DaemonFactory,
                                                                           tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "team.static.k8s.io.yaml").write_text(label_policy("platform"))
    daemon = make_daemon(policy=None, manifests=manifests)
    request = review({"app": "web"}, uid="m1")
    original = request["request"]["object"]
    for via in ("unix", "https"):
        answer = daemon.validate(request, via=via, path="/mutate").json()
        assert answer["response"]["uid"] == "m1"
        assert patched(answer, original)["metadata"]["labels"] == {"app": "web", "team": "platform"}
    # /validate is not affected by mutating policies.
    assert daemon.validate(request).json()["response"] == {"uid": "m1", "allowed": True}
    assert daemon.metric("staticadm_admission_requests_total", {"endpoint": "mutate", "decision": "mutate"}) == 2
    assert daemon.metric("staticadm_mutating_admission_policy_check_total",
                         {"policy": "team-label.static.k8s.io", "error_type": "no_error"}) == 2
    assert daemon.metric("staticadm_validating_admission_policy_check_total") == 0
    lines = [orjson.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    mutations = [line for line in lines if line.get("action") == "mutate"]
    # One line per mutated request, naming every (policy, binding) that changed the object.
    assert [line["uid"] for line in mutations] == ["m1", "m1"]
    assert all(line["msg"] == "admission mutated" and line["mutations"] == [
        {"policy": "team-label.static.k8s.io", "binding": "team-label.static.k8s.io"}] for line in mutations)

    write_atomically(manifests / "team.static.k8s.io.yaml", label_policy("storage"))

    def serves_new_label() -> bool:
        answer = daemon.validate(request, path="/mutate").json()
        return patched(answer, original)["metadata"]["labels"].get("team") == "storage"

    assert wait_for(serves_new_label)


def test_mutation_errors_deny_under_fail_and_allow_unchanged_under_ignore(make_daemon: DaemonFactory,
                                                                          tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    broken = 'Object{metadata: Object.metadata{labels: {"team": object.metadata.labels["missing"]}}}'
    (manifests / "team.static.k8s.io.yaml").write_text(label_policy("x", expression=broken))
    daemon = make_daemon(policy=None, manifests=manifests)
    answer = daemon.validate(review({"app": "web"}, uid="m2"), path="/mutate").json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403 and answer["status"]["reason"] == "Invalid"
    assert answer["status"]["message"].startswith(
        "policy 'team-label.static.k8s.io' with binding 'team-label.static.k8s.io' denied request: expression ")

    write_atomically(manifests / "team.static.k8s.io.yaml", label_policy("x", expression=broken, failure="Ignore"))
    assert wait_for(lambda: daemon.validate(review({"app": "web"}, uid="m3"), path="/mutate").json()["response"]
                    == {"uid": "m3", "allowed": True})
