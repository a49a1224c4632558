"""Kept all-clear answers (admission/all_clear.py) under live conditions, each answer checked against a fresh one.

A daemon with two workers answers requests that repeat their inputs (so answers are kept and found), more
distinct inputs than the 1,024 a snapshot keeps (so the store is emptied and refilled), and the same requests on
either side of a reload that changes one of three policies (so answers kept before it must not be found after).
Every answer the daemon gives is compared with ``staticadm review`` of the same request against the directory it
served then, run in a separate process over each distinct input once: an evaluation with nothing kept.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from staticadm.admission.response import webhook_audit_annotations
from tests.server import forked
from tests.server.harness import REPO_ROOT, Daemon, DaemonFactory, wait_for, write_atomically
from tests.server.test_workers import _all_serving

KEPT = "staticadm_validating_kept_answers_total"
DISTINCT = 1100  # more than AnswersByInput.LIMIT (1,024)


def _policy(name: str, *, spec: str, binding_actions: str = "[Deny, Audit]") -> str:
    return f"""\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}.static.k8s.io}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}}
{spec}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}.static.k8s.io}}
spec:
  policyName: {name}.static.k8s.io
  validationActions: {binding_actions}
"""


def _tier(denied: str, prefix: str) -> str:
    return _policy("tier", spec=f"""\
  validations:
  - expression: >-
      !has(object.metadata.labels) || !('tier' in object.metadata.labels)
      || object.metadata.labels['tier'] != '{denied}'
    message: "tier {denied} is not allowed"
  auditAnnotations:
  - key: tier
    valueExpression: >-
      has(object.metadata.labels) && 'tier' in object.metadata.labels
      ? '{prefix}' + object.metadata.labels['tier'] : 'none'
""")


APP = _policy("app", spec="""\
  matchConditions:
  - name: not-skipped
    expression: "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"
  validations:
  - expression: >-
      !has(object.metadata.labels) || !('app' in object.metadata.labels)
      || size(object.metadata.labels['app']) < 12
    message: app names are shorter than 12
""")
WARN = _policy("warn", binding_actions="[Warn]", spec="""\
  validations:
  - expression: "!has(object.metadata.labels) || !('warn' in object.metadata.labels)"
    message: labelled warn
""")


def _request(index: int, uid: str) -> dict[str, Any]:
    labels = {"tier": "bad" if index % 97 == 5 else f"t{index % 600}", "app": "a" * (index % 15)}
    if index % 3 == 0:
        labels["skip"] = "yes"
    if index % 50 == 0:
        labels["warn"] = "yes"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                        "name": f"pod-{index}", "namespace": "default", "userInfo": {"username": "alice"},
                        "object": {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": f"pod-{index}", "namespace": "default", "labels": labels}}}}


def _fresh(manifests: Path, indexes: list[int], scratch: Path) -> dict[int, dict[str, Any]]:
    """``staticadm review`` of each input once, in a new process: index -> its response without the uid."""
    inputs = scratch / "requests.yaml"
    inputs.write_text(yaml.safe_dump_all([_request(index, f"fresh-{index}") for index in indexes]))
    completed = forked.run([sys.executable, "-m", "staticadm", "review", str(manifests), "-o", "json", "-f",
                            str(inputs)], timeout=300, cwd=REPO_ROOT)
    assert completed.returncode in (0, 3), completed.stderr[-3000:]
    answers = {}
    for line in completed.stdout.splitlines():
        result = orjson.loads(line)
        response = dict(result["review"]["response"])
        assert response.pop("uid") == f"fresh-{indexes[result['document']]}"
        if "auditAnnotations" in response:  # review names them as kube-apiserver in-process; /validate as a webhook
            response["auditAnnotations"] = webhook_audit_annotations(response["auditAnnotations"])
        answers[indexes[result["document"]]] = response
    assert len(answers) == len(indexes)
    return answers


async def _live(daemon: Daemon, indexes: list[int], tag: str) -> dict[str, dict[str, Any]]:
    """Each request on a connection of its own (so either worker may take it), eight at a time: uid -> response."""
    assert daemon.socket_path is not None
    connector = aiohttp.UnixConnector(path=str(daemon.socket_path), force_close=True)
    limit = asyncio.Semaphore(8)
    answers: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one(position: int, index: int) -> None:
            uid = f"{tag}-{position}-{index}"
            async with limit, session.post("http://localhost/validate", data=orjson.dumps(_request(index, uid)),
                                           headers={"Content-Type": "application/json"}) as response:
                assert response.status == 200, await response.text()
                answers[uid] = (await response.json())["response"]
        await asyncio.gather(*(one(position, index) for position, index in enumerate(indexes)))
    return answers


def _compare(live: dict[str, dict[str, Any]], fresh: dict[int, dict[str, Any]]) -> int:
    differences = []
    for uid, response in live.items():
        index = int(uid.rsplit("-", 1)[1])
        got = dict(response)
        assert got.pop("uid") == uid
        if got != fresh[index]:
            differences.append((uid, got, fresh[index]))
    assert not differences, differences[:5]
    return len(live)


@pytest.mark.slow
def test_kept_answers_match_a_fresh_evaluation_live(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "tier.yaml").write_text(_tier("bad", "v1:"))
    (manifests / "app.yaml").write_text(APP)
    (manifests / "warn.yaml").write_text(WARN)
    daemon = make_daemon(policy=None, manifests=manifests, https=False, args=["--workers", "2"])
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=30), daemon.log()[-3000:]
    before = _all_serving(daemon, 2)
    snapshot_a = tmp_path / "a"
    snapshot_a.mkdir()
    for path in manifests.iterdir():
        (snapshot_a / path.name).write_bytes(path.read_bytes())
    everything = list(range(DISTINCT))
    fresh_a = _fresh(snapshot_a, everything, tmp_path)
    assert any(not answer["allowed"] for answer in fresh_a.values())
    assert any(answer.get("warnings") for answer in fresh_a.values())

    # More distinct inputs than are kept, twice over, and a few inputs many times: kept, emptied, refilled.
    compared = _compare(asyncio.run(_live(daemon, everything + everything, "bound")), fresh_a)
    repeated = [index for index in range(40) for _ in range(5)]
    compared += _compare(asyncio.run(_live(daemon, repeated, "repeat")), fresh_a)
    assert daemon.metric(KEPT, {"result": "found"}) > 0, "no answer was found kept: nothing was exercised"

    # The same requests on either side of a reload that changes one policy (its denial and its annotation).
    around = list(range(0, 200, 7))
    compared += _compare(asyncio.run(_live(daemon, around, "before")), fresh_a)
    write_atomically(manifests / "tier.yaml", _tier("t7", "v2:"))
    assert wait_for(lambda: (now := _all_serving(daemon, 2)) is not None and now != before
                    and len(set(now.values())) == 1 and set(now.values()) != set((before or {}).values()),
                    timeout=30), daemon.log()[-3000:]
    fresh_b = _fresh(manifests, everything, tmp_path)
    assert any(fresh_a[i] != fresh_b[i] for i in around)
    compared += _compare(asyncio.run(_live(daemon, around + around, "after")), fresh_b)
    compared += _compare(asyncio.run(_live(daemon, everything, "all-after")), fresh_b)
    assert compared == 2 * DISTINCT + 200 + len(around) * 3 + DISTINCT
