"""Plain objects sent offline as kube-apiserver holds them: the typed round trip of their kind (checked against
kube-apiserver's own decoding, the oracle's ``normalizedObject``) and Kubernetes' defaulting (fixed tables)."""

from __future__ import annotations

import copy
import io
import json
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from staticadm.cli import main
from staticadm.kinds import as_admitted
from staticadm.kinds.go_types import go_types
from staticadm.kinds.typed import TypedObjectError, round_trip
from staticadm.offline.request_builder import ObjectInputError, RequestSettings, build_request_for_object
from tests.conftest import CONFORMANCE, SHARED

ORACLE = SHARED / "oracle" / "k8s-admission-oracle"

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "team"},
    "spec": {"containers": [{"name": "app", "image": "nginx", "env": []}]},
}
DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team"},
    "spec": {"selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.2"}]}}},
}

STORAGE_CLASS: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": "fast"}, "provisioner": "example.com/csi"}
AUTOSCALER: dict[str, Any] = {
    "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": "team"},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 5,
             "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}},
}

#: Objects whose typed round trip is compared with kube-apiserver's: empty and zero values, quantities,
#: times, int-or-string, bytes, unknown fields, nested structs, several kinds.
ROUND_TRIP_OBJECTS: list[dict[str, Any]] = [
    POD,
    DEPLOYMENT,
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "p", "namespace": "team", "labels": {}, "annotations": {"a": ""},
                  "creationTimestamp": "2024-05-01T10:00:00.123+02:00", "finalizers": []},
     "spec": {"hostNetwork": False, "nodeSelector": {}, "priority": 0, "tolerations": [{"key": "k"}],
              "containers": [{"name": "c", "image": "", "args": [], "ports": [{"containerPort": 80},
                                                                             {"containerPort": 81, "hostPort": 0}],
                              "resources": {"limits": {"cpu": "0.5", "memory": "1024Mi", "ephemeral-storage": "1e3"},
                                            "requests": {"cpu": 2, "memory": "1.5Gi", "nvidia.com/gpu": "0"}},
                              "livenessProbe": {"httpGet": {"port": "http"}, "periodSeconds": 0},
                              "securityContext": {"privileged": False, "capabilities": {"drop": []}},
                              "unknownField": {"x": 1}}],
              "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}},
                          {"name": "s", "secret": {"secretName": "x", "items": []}}]}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "team"},
     "spec": {"ports": [{"port": 80}, {"port": 443, "targetPort": "https", "protocol": "TCP"}], "selector": {}}},
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team"},
     "data": {"k": "aGVsbG8="}, "stringData": {}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team"}, "data": {}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "team"},
     "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
    {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj", "namespace": "team"},
     "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}},
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ss", "namespace": "team"},
     "spec": {"serviceName": "s", "selector": {}, "template": {}, "volumeClaimTemplates": [
         {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}}]}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
     "metadata": {"name": "rb", "namespace": "team"},
     "subjects": [{"kind": "User", "name": "alice"}], "roleRef": {"kind": "Role", "name": "r"}},
    {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
     "metadata": {"name": "np", "namespace": "team"},
     "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]}},
    STORAGE_CLASS,
    AUTOSCALER,
]


#: A mutating policy changing every object, so the oracle reports normalizedObject (it does only when admission
#: changed the object).
LABEL_EVERYTHING = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: label.static.k8s.io}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: ['*'], apiVersions: ['*'], operations: ['*'], resources: ['*']}
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'x': 'y'}}]"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: label.static.k8s.io}
spec: {policyName: label.static.k8s.io}
"""


def _corpus_objects() -> list[dict[str, Any]]:
    """The objects (and old objects) of built-in kinds in the requests of the shared conformance corpora
    (about 240: pods, deployments, services, ... as their authors wrote them)."""
    reviews: list[Any] = []
    for path in sorted((CONFORMANCE / "k8s-admission" / "corpus").glob("*/request.json")):
        reviews.append(json.loads(path.read_text()))
    scenarios = CONFORMANCE / "scenarios" / "docs_scenarios.json"
    if scenarios.exists():
        reviews.extend(entry.get("request") for entry in json.loads(scenarios.read_text()))
    types = go_types()
    objects = []
    for review in reviews:
        request = review.get("request") if isinstance(review, dict) else None
        for obj in (request or {}).get("object"), (request or {}).get("oldObject"):
            # kube-apiserver never admits the review kinds (TokenReview, SubjectAccessReview, ...).
            if isinstance(obj, dict) and types.kind_type(str(obj.get("apiVersion")), str(obj.get("kind"))) \
                    and not str(obj.get("kind")).endswith("Review"):
                objects.append(obj)
    return objects


def _types_round_trip(obj: dict[str, Any]) -> dict[str, Any]:
    types = go_types()
    type_id = types.kind_type(obj["apiVersion"], obj["kind"])
    assert type_id is not None
    return round_trip(obj, type_id, types)[0]


@pytest.mark.skipif(not ORACLE.exists(), reason=f"kube-apiserver's admission code as a command not found at {ORACLE} "
                    "(clone the repository next to 'shared/' to run it; CI always does)")
def test_the_typed_round_trip_is_kube_apiservers(tmp_path: Path) -> None:
    # The oracle reports normalizedObject (its client-go typed decoding of the input, encoded again) when
    # admission changed the object: a mutating policy adds a label to everything.
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "label.static.k8s.io.yaml").write_text(LABEL_EVERYTHING)
    objects = ROUND_TRIP_OBJECTS + _corpus_objects()
    for obj, normalized in zip(objects, _oracle_normalized(objects, tmp_path / "manifests"), strict=True):
        assert normalized is not None, obj
        assert _types_round_trip(obj) == normalized, obj["kind"]


def _oracle_normalized(objects: list[dict[str, Any]], manifests: Path) -> list[dict[str, Any] | None]:
    """kube-apiserver's typed round trip of each object (the oracle's normalizedObject; None when it
    reported none)."""
    lines = []
    for index, obj in enumerate(objects):
        group, _, version = obj["apiVersion"].rpartition("/")
        lines.append(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(index), "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": "objects"}, "operation": "CREATE",
            "userInfo": {"username": "admin"}, "namespace": "team", "name": "n", "object": obj}}))
    completed = subprocess.run([str(ORACLE), "--manifests", str(manifests)], input="\n".join(lines) + "\n",
                               capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line).get("normalizedObject") for line in completed.stdout.splitlines()]


GENERATED_KINDS = [("v1", "Pod"), ("apps/v1", "Deployment"), ("v1", "Service"), ("batch/v1", "Job"),
                   ("batch/v1", "CronJob"), ("v1", "Secret"), ("apps/v1", "StatefulSet"), ("networking.k8s.io/v1",
                   "Ingress"), ("v1", "PersistentVolumeClaim"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
                   ("autoscaling/v2", "HorizontalPodAutoscaler"), ("v1", "Namespace"), ("policy/v1",
                   "PodDisruptionBudget")]


class _ObjectGenerator:
    """Objects of built-in kinds with fields present or not, null, empty, zero or set, and now and then a
    value of the wrong type: what the typed round trip must decide as kube-apiserver does."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.types = go_types()

    def kind_object(self) -> dict[str, Any]:
        api_version, kind = self.random.choice(GENERATED_KINDS)
        type_id = self.types.kind_type(api_version, kind)
        assert type_id is not None
        obj = self.struct(type_id, 1)
        obj.update(apiVersion=api_version, kind=kind, metadata={"name": "n", "namespace": "team"})
        if self.random.random() < 0.3:
            obj["metadata"]["creationTimestamp"] = self.random.choice(["2024-05-01T10:00:00.5+02:00", None, ""])
        return obj

    def struct(self, type_id: str, depth: int) -> dict[str, Any]:
        chance = 0.5 if depth <= 2 else 0.25
        return {go_field.name: self.value(go_field.ref, depth) for go_field in self.types.structs[type_id]
                if self.random.random() < chance}

    def value(self, ref: str, depth: int) -> Any:
        choose = self.random.choice
        if self.random.random() < 0.01:
            return choose(["s", 1, 1.5, True, [], {}, -1, 2**40])
        if ref.startswith("*"):
            return None if self.random.random() < 0.2 else self.value(ref[1:], depth)
        if ref.startswith(("[]", "map:")):
            shape = self.random.random()
            if shape < 0.4:
                return None if shape < 0.2 else ([] if ref.startswith("[]") else {})
            element = ref[2:] if ref.startswith("[]") else ref[4:]
            if ref.startswith("[]"):
                return [self.value(element, depth + 1) for _ in range(self.random.randint(1, 2))]
            return {choose(["a", "cpu", "memory"]): self.value(element, depth + 1) for _ in range(2)}
        if ref.startswith("@"):
            return {} if depth > 4 else self.struct(ref[1:], depth + 1)
        scalars: dict[str, list[Any]] = {
            "string": ["", "x", "Always"], "bool": [True, False], "float64": [0, 1.5, 2.0],
            "quantity": ["0", "0.5", "100m", "1Gi", "1024Mi", "1e3", "1.5Gi", "512", "0.1m", "-1", 2],
            "intorstring": [0, 80, "http", "25%", ""], "time": ["2024-05-01T10:00:00Z", None, ""],
            "microtime": ["2024-05-01T10:00:00.123456Z", None], "duration": ["1h30m", "0s", "250ms"],
            "bytes": ["aGVsbG8=", "", None], "any": [{"a": 1}, None, "x"], "raw": [{"a": 1}, None]}
        return choose(scalars.get(ref, [0, 1, 30]))


@pytest.mark.skipif(not ORACLE.exists(), reason=f"kube-apiserver's admission code as a command not found at {ORACLE}")
def test_generated_objects_round_trip_as_kube_apiserver_decodes_them(tmp_path: Path) -> None:
    # The oracle falls back to the object as given when kube-apiserver's decoding refuses it (a 400 in a
    # cluster): then the round trip must refuse it too.
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "label.static.k8s.io.yaml").write_text(LABEL_EVERYTHING)
    generator = _ObjectGenerator(seed=35)
    objects = [generator.kind_object() for _ in range(300)]
    types = go_types()
    refused = 0
    for obj, normalized in zip(objects, _oracle_normalized(objects, manifests), strict=True):
        type_id = types.kind_type(obj["apiVersion"], obj["kind"])
        assert type_id is not None
        try:
            ours = round_trip(obj, type_id, types)[0]
        except TypedObjectError:
            assert normalized == obj, obj  # refused there too (the oracle kept the object as given)
            refused += 1
            continue
        assert ours == normalized, obj
    assert 0 < refused < len(objects) / 2


def test_struct_fields_are_present_and_omitempty_empties_gone() -> None:
    typed = _types_round_trip(POD)
    container = typed["spec"]["containers"][0]
    assert container["resources"] == {} and "env" not in container
    assert typed["status"] == {} and "creationTimestamp" not in typed["metadata"]
    # Quantities canonical, times in UTC to the second, int-or-string kept, unknown fields dropped.
    pod = copy.deepcopy(POD)
    pod["metadata"]["creationTimestamp"] = "2024-05-01T10:00:00.5+02:00"
    pod["spec"]["containers"][0].update(resources={"limits": {"cpu": "0.5", "memory": "1024Mi", "storage": 1e3}},
                                        ports=[{"containerPort": 80}], typo=1)
    typed_object = as_admitted(pod)
    assert typed_object is not None
    container = typed_object.value["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi", "storage": "1k"}
    assert typed_object.value["metadata"]["creationTimestamp"] == "2024-05-01T08:00:00Z"
    assert typed_object.dropped == ("spec.containers[0].typo",)


def test_values_of_the_wrong_type_name_their_field() -> None:
    deployment = copy.deepcopy(DEPLOYMENT)
    deployment["spec"]["replicas"] = "3"
    with pytest.raises(ObjectInputError,
                       match=re.escape("object: spec.replicas: an integer (int32) is required, got a string")):
        build_request_for_object(deployment, None, RequestSettings(), uid_seed="x")
    deployment["spec"]["replicas"] = 2**31
    with pytest.raises(ObjectInputError, match=re.escape("spec.replicas: 2147483648 does not fit in int32")):
        build_request_for_object(deployment, None, RequestSettings(), uid_seed="x")
    # metav1.Time's UnmarshalJSON takes null as the zero time but does not parse "".
    with pytest.raises(ObjectInputError, match=re.escape("object: metadata.creationTimestamp: '' is not an RFC 3339")):
        build_request_for_object({**POD, "metadata": {"name": "p", "creationTimestamp": ""}}, None,
                                 RequestSettings(), uid_seed="x")


def test_custom_kinds_stay_as_given() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"env": []}}
    assert as_admitted(widget) is None
    built = build_request_for_object(widget, None, RequestSettings(), uid_seed="x")
    assert built.review["request"]["object"]["spec"] == {"env": []} and built.defaulted == ()


# (kind's object, field path, value Kubernetes' defaulting gives it): pkg/apis/*/v1/defaults.go and the
# +default markers of k8s.io/api.
DEFAULTS: list[tuple[dict[str, Any], str, Any]] = [
    (POD, "spec.containers[0].imagePullPolicy", "Always"),  # no tag: latest
    (DEPLOYMENT, "spec.template.spec.containers[0].imagePullPolicy", "IfNotPresent"),
    (POD, "spec.containers[0].terminationMessagePath", "/dev/termination-log"),
    (POD, "spec.containers[0].terminationMessagePolicy", "File"),
    (POD, "spec.restartPolicy", "Always"),
    (POD, "spec.dnsPolicy", "ClusterFirst"),
    (POD, "spec.terminationGracePeriodSeconds", 30),
    (POD, "spec.schedulerName", "default-scheduler"),
    (POD, "spec.securityContext", {}),
    (POD, "spec.enableServiceLinks", True),
    (DEPLOYMENT, "spec.replicas", 1),
    (DEPLOYMENT, "spec.strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%",
                                                                              "maxSurge": "25%"}}),
    (DEPLOYMENT, "spec.revisionHistoryLimit", 10),
    (DEPLOYMENT, "spec.progressDeadlineSeconds", 600),
    (DEPLOYMENT, "spec.template.spec.restartPolicy", "Always"),
    ({**DEPLOYMENT, "kind": "DaemonSet"}, "spec.updateStrategy",
     {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
    ({**DEPLOYMENT, "kind": "DaemonSet"}, "spec.revisionHistoryLimit", 10),
    ({**DEPLOYMENT, "kind": "ReplicaSet"}, "spec.replicas", 1),
    (ROUND_TRIP_OBJECTS[2], "spec.containers[0].ports[0].protocol", "TCP"),  # +default="TCP"
    (ROUND_TRIP_OBJECTS[2], "spec.containers[0].resources.requests.ephemeral-storage", "1e3"),  # from limits
    (ROUND_TRIP_OBJECTS[2], "spec.containers[0].livenessProbe",
     {"httpGet": {"port": "http", "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10,
      "successThreshold": 1, "failureThreshold": 3}),
    (ROUND_TRIP_OBJECTS[2], "spec.volumes[1].secret.defaultMode", 0o644),
    (ROUND_TRIP_OBJECTS[3], "spec.type", "ClusterIP"),
    (ROUND_TRIP_OBJECTS[3], "spec.sessionAffinity", "None"),
    (ROUND_TRIP_OBJECTS[3], "spec.ports[0].targetPort", 80),
    (ROUND_TRIP_OBJECTS[3], "spec.ports[0].protocol", "TCP"),
    (ROUND_TRIP_OBJECTS[3], "spec.internalTrafficPolicy", "Cluster"),
    (ROUND_TRIP_OBJECTS[4], "type", "Opaque"),
    (ROUND_TRIP_OBJECTS[6], "spec.completions", 1),
    (ROUND_TRIP_OBJECTS[6], "spec.backoffLimit", 6),
    (ROUND_TRIP_OBJECTS[6], "spec.podReplacementPolicy", "TerminatingOrFailed"),
    (ROUND_TRIP_OBJECTS[7], "spec.concurrencyPolicy", "Allow"),
    (ROUND_TRIP_OBJECTS[7], "spec.successfulJobsHistoryLimit", 3),
    (ROUND_TRIP_OBJECTS[8], "spec.podManagementPolicy", "OrderedReady"),
    (ROUND_TRIP_OBJECTS[8], "spec.volumeClaimTemplates[0].spec.volumeMode", "Filesystem"),
    (ROUND_TRIP_OBJECTS[8], "spec.persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain",
                                                                          "whenScaled": "Retain"}),
    (ROUND_TRIP_OBJECTS[9], "subjects[0].apiGroup", "rbac.authorization.k8s.io"),
    (ROUND_TRIP_OBJECTS[9], "roleRef.apiGroup", "rbac.authorization.k8s.io"),
    (ROUND_TRIP_OBJECTS[10], "spec.policyTypes", ["Ingress"]),
    (ROUND_TRIP_OBJECTS[10], "spec.ingress[0].ports[0].protocol", "TCP"),
    (STORAGE_CLASS, "reclaimPolicy", "Delete"),
    (STORAGE_CLASS, "volumeBindingMode", "Immediate"),
    ({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
     "preemptionPolicy", "PreemptLowerPriority"),
    (AUTOSCALER, "spec.minReplicas", 1),
    (AUTOSCALER, "spec.metrics", [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
    (AUTOSCALER, "spec.behavior.scaleDown", {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15}]}),
    (AUTOSCALER, "spec.behavior.scaleUp.policies", [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                                    {"type": "Percent", "value": 100, "periodSeconds": 15}]),
]


def _at(value: Any, path: str) -> Any:
    for part in path.replace("]", "").replace("[", ".").split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


@pytest.mark.parametrize(("obj", "path", "expected"), DEFAULTS,
                         ids=[f"{obj['kind']}:{path}" for obj, path, _ in DEFAULTS])
def test_kubernetes_defaulting(obj: dict[str, Any], path: str, expected: Any) -> None:
    built = build_request_for_object(obj, None, RequestSettings(), uid_seed="x")
    assert _at(built.review["request"]["object"], path) == expected
    assert any(entry == f"object: {path}" or entry.startswith(f"object: {path}.") for entry in built.defaulted)


def test_defaults_never_override_what_is_given() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"].update(restartPolicy="Never", terminationGracePeriodSeconds=0, dnsPolicy="Default")
    pod["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    built = build_request_for_object(pod, None, RequestSettings(), uid_seed="x")
    spec = built.review["request"]["object"]["spec"]
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"], spec["dnsPolicy"]) == ("Never", 0, "Default")
    assert spec["containers"][0]["imagePullPolicy"] == "Never"
    assert "object: spec.restartPolicy" not in built.defaulted


POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: typed.static.k8s.io}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
  - expression: >-
      object.kind != 'Pod' || (has(object.spec.containers[0].resources) && !has(object.spec.containers[0].env)
      && object.spec.containers[0].imagePullPolicy == 'Always' && object.spec.restartPolicy == 'Always'
      && object.spec.dnsPolicy == 'ClusterFirst' && object.spec.terminationGracePeriodSeconds == 30
      && object.spec.schedulerName == 'default-scheduler')
    message: the pod is not as kube-apiserver would send it
  - expression: >-
      object.kind != 'Deployment' || (object.spec.replicas == 1 && object.spec.strategy.type == 'RollingUpdate'
      && object.spec.strategy.rollingUpdate.maxSurge == '25%')
    message: the deployment is not as kube-apiserver would send it
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: typed.static.k8s.io}
spec: {policyName: typed.static.k8s.io, validationActions: [Deny]}
"""


def test_review_evaluates_the_typed_defaulted_object_and_says_what_was_defaulted(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "typed.static.k8s.io.yaml").write_text(POLICY)
    objects = tmp_path / "objects.yaml"
    objects.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n"
                       "  - {name: app, image: nginx, env: []}\n---\n" + json.dumps(DEPLOYMENT) + "\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["review", str(tmp_path / "manifests"), "-f", str(objects)], stdout=out, stderr=err) == 0, \
        out.getvalue() + err.getvalue()
    text = out.getvalue()
    assert "defaulted by Kubernetes: " in text and "object: spec.containers[0].imagePullPolicy" in text
    assert "object: spec.replicas" in text
    out = io.StringIO()
    assert main(["review", str(tmp_path / "manifests"), "-o", "json", "-f", str(objects)], stdout=out) == 0
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert "object: spec.strategy.type" in results[1]["defaulted"] and results[0]["dropped"] == []


@pytest.mark.parametrize("obj", ROUND_TRIP_OBJECTS, ids=[obj["kind"] for obj in ROUND_TRIP_OBJECTS])
def test_an_object_kube_apiserver_already_holds_is_left_as_it_is(obj: dict[str, Any]) -> None:
    # What kube-apiserver stored (an audit log's responseObject, a recorded AdmissionReview's object) is typed
    # and defaulted already: doing both again changes nothing.
    once = as_admitted(obj)
    assert once is not None
    twice = as_admitted(once.value)
    assert twice is not None and (twice.value, twice.defaulted, twice.dropped) == (once.value, (), ())
