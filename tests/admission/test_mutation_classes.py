"""Issue 44's mutation classes: the object between mutations is the one kube-apiserver holds (typed again and
defaulted after each mutation of a built-in kind), and MutatingAdmissionPolicies do not run on DELETE.

Every expectation is kube-apiserver's, as its own admission code answers (``../shared/oracle``):
``tests/differential/test_mutation_classes_oracle.py`` replays this table through the oracle, so an expectation
written here that kube-apiserver does not share fails there. Objects are given typed and defaulted, as
kube-apiserver sends them (the oracle does not default; its README).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staticadm.kinds import as_admitted
from tests.differential.harness import Answer, staticadm_answers, write_manifests

API = "admissionregistration.k8s.io/v1"


def admitted(obj: dict[str, Any]) -> dict[str, Any]:
    typed = as_admitted(obj)
    assert typed is not None
    return typed.value


POD = admitted({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}})
DEPLOYMENT = admitted({"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": "d", "namespace": "default"},
                       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                                "template": {"metadata": {"labels": {"app": "d"}},
                                             "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}})
SECRET = admitted({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
                   "data": {"a": "YQ=="}})
EXEC = {"apiVersion": "v1", "kind": "PodExecOptions", "stdout": True, "container": "c", "command": ["ls"]}

KINDS: dict[str, tuple[str, str, str, str]] = {
    "Pod": ("", "v1", "Pod", "pods"), "Deployment": ("apps", "v1", "Deployment", "deployments"),
    "Secret": ("", "v1", "Secret", "secrets"), "PodExecOptions": ("", "v1", "PodExecOptions", "pods"),
}


def json_patch(expression: str) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def apply(expression: str) -> dict[str, Any]:
    return {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}


def changed(obj: dict[str, Any], *edits: tuple[tuple[str | int, ...], Any]) -> dict[str, Any]:
    """``obj`` with each (path, value) set (``None``: the key removed)."""
    result = copy.deepcopy(obj)
    for path, value in edits:
        node = result
        for step in path[:-1]:
            node = node[step]  # type: ignore[index]
        if value is None:
            del node[path[-1]]  # type: ignore[arg-type]
        else:
            node[path[-1]] = value  # type: ignore[index]
    return result


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    obj: dict[str, Any] | None
    mutations: tuple[dict[str, Any], ...]
    #: kube-apiserver's answer: allowed, code, message (the policy's text), patched object (None: unchanged).
    allowed: bool
    code: int = 200
    message: str = ""
    patched: dict[str, Any] | None = None
    operation: str = "CREATE"
    old: dict[str, Any] | None = None
    failure_policy: str = "Fail"
    conditions: tuple[dict[str, str], ...] = ()
    subresource: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


DENIED = "policy 'case{index}.static.k8s.io' with binding 'case{index}b.static.k8s.io' denied request: "

CASES: list[Case] = [
    # Class 1: the typed object drops the empty map a mutation added, so the next add under it has no parent.
    Case("annotations {} then a key", "Pod", POD,
         (json_patch("[JSONPatch{op: 'add', path: '/metadata/annotations', value: {}}]"),
          json_patch("[JSONPatch{op: 'add', path: '/metadata/annotations/a', value: 'b'}]")),
         False, 403, DENIED + 'JSON Patch: add operation does not apply: doc is missing path: '
                             '"/metadata/annotations/a": missing value'),
    # ... and an empty list merged in is no change at all, which a later has() sees.
    Case("initContainers [] then has()", "Pod", POD,
         (apply("Object{spec: Object.spec{initContainers: []}}"),
          json_patch("has(object.spec.initContainers) ? [JSONPatch{op: 'add', path: '/metadata/labels', "
                     "value: {'seen': 'yes'}}] : []")),
         True),
    Case("labels emptied are gone", "Pod", changed(POD, (("metadata", "labels"), {"app": "x"})),
         (json_patch("[JSONPatch{op: 'remove', path: '/metadata/labels/app'}]"),
          json_patch("has(object.metadata.labels) ? [JSONPatch{op: 'add', path: '/metadata/annotations', "
                     "value: {'labels': 'kept'}}] : []")),
         True, patched=POD),
    # Quantities and times written by a patch are held in their canonical forms.
    Case("quantities canonical", "Pod", POD,
         (json_patch("[JSONPatch{op: 'add', path: '/spec/containers/0/resources/requests', "
                     "value: {'cpu': '0.5', 'memory': '1024Mi'}}]"),),
         True, patched=changed(POD, (("spec", "containers", 0, "resources"),
                                     {"requests": {"cpu": "500m", "memory": "1Gi"}}))),
    Case("time canonical", "Deployment", DEPLOYMENT,
         (json_patch("[JSONPatch{op: 'add', path: '/metadata/creationTimestamp', "
                     "value: '2021-02-03T04:05:06.5+01:00'}]"),),
         True, patched=changed(DEPLOYMENT, (("metadata", "creationTimestamp"), "2021-02-03T03:05:06Z"))),
    # Values the typed object cannot hold: an internal error after a JSON Patch (whatever the failurePolicy) ...
    Case("quantity 'bad' by JSON Patch", "Deployment", DEPLOYMENT,
         (json_patch("[JSONPatch{op: 'add', path: '/spec/template/spec/containers/0/resources', "
                     "value: {'limits': {'cpu': 'bad'}}}]"),),
         False, 500, "Internal error occurred: quantities must match the regular expression "
                     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", failure_policy="Ignore"),
    Case("time 'yesterday' by JSON Patch", "Deployment", DEPLOYMENT,
         (json_patch("[JSONPatch{op: 'add', path: '/metadata/creationTimestamp', value: 'yesterday'}]"),),
         False, 500, 'Internal error occurred: parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": '
                     'cannot parse "yesterday" as "2006"'),
    Case("month out of range by JSON Patch", "Deployment", DEPLOYMENT,
         (json_patch("[JSONPatch{op: 'add', path: '/metadata/creationTimestamp', value: '2021-13-01T00:00:00Z'}]"),),
         False, 500, 'Internal error occurred: parsing time "2021-13-01T00:00:00Z": month out of range'),
    Case("bytes not base64 by JSON Patch", "Secret", SECRET,
         (json_patch("[JSONPatch{op: 'add', path: '/data/b', value: 'no!'}]"),),
         False, 500, "Internal error occurred: illegal base64 data at input byte 2"),
    # ... and an ordinary error after an ApplyConfiguration, under the failurePolicy.
    Case("fraction for an int32", "Deployment", DEPLOYMENT,
         (apply("Object{spec: Object.spec{replicas: dyn(2.5)}}"),),
         False, 403, DENIED + "unable to convert unstructured object to apps/v1, Kind=Deployment: "
                              "cannot convert float64 to int32"),
    Case("fraction for an int32, ignored", "Deployment", DEPLOYMENT,
         (apply("Object{spec: Object.spec{replicas: dyn(2.5)}}"),
          json_patch("[JSONPatch{op: 'add', path: '/metadata/labels', value: {'after': 'yes'}}]")),
         True, patched=changed(DEPLOYMENT, (("metadata", "labels"), {"after": "yes"})), failure_policy="Ignore"),
    Case("quantity 'bad' by apply", "Deployment", DEPLOYMENT,
         (apply("Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: "
                "[Object.spec.template.spec.containers{name: 'c', resources: "
                "Object.spec.template.spec.containers.resources{limits: {'cpu': 'bad'}}}]}}}}"),),
         False, 403, DENIED + "unable to convert unstructured object to apps/v1, Kind=Deployment: quantities must "
                              "match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    Case("IntOrString 2.5 by apply", "Deployment", DEPLOYMENT,
         (apply("Object{spec: Object.spec{strategy: Object.spec.strategy{rollingUpdate: "
                "Object.spec.strategy.rollingUpdate{maxSurge: 2.5}}}}"),),
         False, 403, DENIED + "unable to convert unstructured object to apps/v1, Kind=Deployment: "
                              "json: cannot unmarshal number 2.5 into Go value of type int32"),
    # An integer wider than its field wraps (Go's conversion): 2^32 + 1 is 1, the replicas the object has.
    Case("int32 wraps", "Deployment", DEPLOYMENT,
         (apply("Object{spec: Object.spec{replicas: 4294967297}}"),), True),
    # Class 2: the MAP plugin handles CREATE, UPDATE and CONNECT; a DELETE never reaches it.
    Case("no MAP on DELETE", "Pod", None,
         (json_patch("[JSONPatch{op: 'add', path: '/metadata/labels', value: {'a': 'b'}}]"),),
         True, operation="DELETE", old=POD, conditions=({"name": "c", "expression": "has(object.metadata.labels)"},)),
    Case("MAP on CONNECT", "PodExecOptions", EXEC,
         (json_patch("[JSONPatch{op: 'add', path: '/command/-', value: 'x'}]"),),
         True, operation="CONNECT", subresource="exec",
         patched=changed(EXEC, (("command",), ["ls", "x"]))),
]


def manifests(cases: list[Case]) -> list[dict[str, Any]]:
    """One policy per case, selecting its request by the request's name (``case<index>``): a label would be
    what the mutations change."""
    objects = []
    for index, case in enumerate(cases):
        group, version, _, resource = KINDS[case.kind]
        resources = [f"{resource}/{case.subresource}"] if case.subresource else [resource]
        constraints: dict[str, Any] = {"resourceRules": [{"apiGroups": [group], "apiVersions": [version],
                                                          "operations": ["*"], "resources": resources}]}
        conditions = [{"name": "selected", "expression": f"request.name == 'case{index}'"}, *case.conditions]
        spec: dict[str, Any] = {"matchConstraints": constraints, "failurePolicy": case.failure_policy,
                                "reinvocationPolicy": "Never", "matchConditions": conditions,
                                "mutations": list(case.mutations)}
        objects += [{"apiVersion": API, "kind": "MutatingAdmissionPolicy",
                     "metadata": {"name": f"case{index}.static.k8s.io"}, "spec": spec},
                    {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding",
                     "metadata": {"name": f"case{index}b.static.k8s.io"},
                     "spec": {"policyName": f"case{index}.static.k8s.io"}}]
    return objects


def review(case: Case, index: int) -> dict[str, Any]:
    group, version, kind, resource = KINDS[case.kind]
    request: dict[str, Any] = {
        "uid": f"case-{index}", "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": f"case{index}", "namespace": "default", "operation": case.operation,
        "userInfo": {"username": "alice"}, "object": case.obj, "oldObject": case.old}
    if case.subresource:
        request["subResource"] = case.subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def expected(case: Case, index: int) -> Answer:
    return Answer(case.allowed, case.code, case.message.format(index=index), (), {}, case.patched)


def comparable(answer: Answer) -> dict[str, Any]:
    found = answer.as_dict()
    if not answer.allowed:
        # A denied request's object goes nowhere (the oracle prints what the mutations before the denial left).
        found["patched"] = None
    return found


def run_cases(cases: list[Case], directory: Path, answers: Any) -> list[str]:
    """Each case answered (``answers``: the oracle's or staticadm's) and compared with its expectation."""
    write_manifests(directory, manifests(cases))
    found = answers(directory, [review(case, index) for index, case in enumerate(cases)])
    return [f"{case.id}: expected {json.dumps(comparable(expected(case, index)))}\n   got {json.dumps(comparable(got))}"
            for index, (case, got) in enumerate(zip(cases, found, strict=True))
            if comparable(got) != comparable(expected(case, index))]


def test_staticadm_answers_as_kube_apiserver(tmp_path: Path) -> None:
    problems = run_cases(CASES, tmp_path, staticadm_answers)
    assert not problems, "\n".join(problems)
