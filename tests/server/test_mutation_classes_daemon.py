"""Issue 44's mutation classes through the real daemon: each row of ``tests/admission/test_mutation_classes.py``
(kube-apiserver's answers, replayed through its own admission code there) posted to ``/mutate``, its patch applied
by an independent JSON Patch library as kube-apiserver's webhook client does, then the result posted to
``/validate``, so what the mutations leave is what validation sees."""

from __future__ import annotations

import base64
import copy
import json
import socket
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.admission.test_mutation_classes import API, CASES, expected, manifests, review
from tests.server.harness import DaemonFactory

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs unix sockets")

#: Denies a Pod whose object has initContainers: the "initContainers [] then has()" row must not reach it.
NO_INIT_CONTAINERS = [
    {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "no-init.static.k8s.io"},
     "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                      "operations": ["CREATE"], "resources": ["pods"]}]},
              "validations": [{"expression": "!has(object.spec.initContainers)", "message": "initContainers"}]}},
    {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "no-init.static.k8s.io"},
     "spec": {"policyName": "no-init.static.k8s.io", "validationActions": ["Deny"]}},
]


def test_mutate_then_validate_answers_each_class_as_kube_apiserver(make_daemon: DaemonFactory,
                                                                   tmp_path: Path) -> None:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "classes.static.k8s.io.yaml").write_text(
        yaml.safe_dump_all([*manifests(CASES), *NO_INIT_CONTAINERS]))
    daemon = make_daemon(policy=None, manifests=directory)
    problems = []
    for index, case in enumerate(CASES):
        request = review(case, index)
        answer = daemon.validate(request, path="/mutate").json()["response"]
        want = expected(case, index)
        status = answer.get("status") or {}
        got: dict[str, Any] = {"allowed": answer["allowed"], "code": status.get("code", 200),
                               "message": status.get("message", "")}
        if answer["allowed"] != want.allowed or (not want.allowed and (got["code"], got["message"]) != (
                want.code, want.message)):
            problems.append(f"{case.id}: /mutate answered {got}, kube-apiserver {want.as_dict()}")
            continue
        if not answer["allowed"]:
            continue
        original = request["request"]["object"]
        result = (jsonpatch.apply_patch(copy.deepcopy(original), json.loads(base64.b64decode(answer["patch"])))
                  if "patch" in answer else original)
        if (None if result == original else result) != want.patched:
            problems.append(f"{case.id}: /mutate made {json.dumps(result)}, kube-apiserver {want.patched}")
        mutated = copy.deepcopy(request)
        mutated["request"]["object"] = result
        validation = daemon.validate(mutated).json()["response"]
        if not validation["allowed"]:
            problems.append(f"{case.id}: /validate denied what /mutate left: {validation['status']['message']}")
    assert not problems, "\n".join(problems)
