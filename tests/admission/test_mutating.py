"""MutatingAdmissionPolicy evaluation: every answer's patch is applied with an independent JSON Patch
library (what kube-apiserver's webhook client does) and compared with the object Kubernetes would make."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch

from staticadm.admission.mutating.dispatcher import MutationOutcome, evaluate_mutating
from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.kinds import as_admitted
from staticadm.snapshot import Snapshot
from tests.admission.helpers import UID, parsed, review, snapshot


def admitted(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as kube-apiserver holds a Pod: typed and defaulted (what it sends, and what each mutation leaves)."""
    typed = as_admitted(obj)
    assert typed is not None
    return typed.value


POD = admitted({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"},
                                        {"name": "mesh-proxy", "image": "proxy:0.9", "args": ["--old"]}]}})

POD_RULES = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                "resources": ["pods"]}]}


def mutating_policy(name: str, *mutations: dict[str, Any], reinvocation: str = "Never", failure: str = "Fail",
                    **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"matchConstraints": POD_RULES, "mutations": list(mutations),
                            "reinvocationPolicy": reinvocation, "failurePolicy": failure}
    body.update(spec)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": body}


def mutating_binding(policy_name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": policy_name.replace(".static", "-binding.static")},
            "spec": {"policyName": policy_name, **spec}}


def apply_configuration(expression: str) -> dict[str, Any]:
    return {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}


def json_patch(expression: str) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def pod_review(obj: Any = None, **extra: Any) -> dict[str, Any]:
    return review(obj=copy.deepcopy(POD) if obj is None else obj, group="", resource="pods", kind="Pod",
                  **extra)


def mutate(snap: Snapshot, raw: dict[str, Any]) -> MutationOutcome:
    return evaluate_mutating(snap, RequestOnlyNamespaces(), parsed(raw))


def patched(outcome: MutationOutcome, original: Any) -> Any:
    """The object kube-apiserver ends up with after applying the answer's patch."""
    response = outcome.response["response"]
    assert response["allowed"] is True
    if "patch" not in response:
        return original
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(original, operations)


def single(tmp_path: Path, *mutations: dict[str, Any], **policy_spec: Any) -> Snapshot:
    return snapshot(tmp_path, mutating_policy("inject.static.k8s.io", *mutations, **policy_spec),
                    mutating_binding("inject.static.k8s.io"))


SIDECAR_APPLY = apply_configuration(
    'Object{spec: Object.spec{containers: [Object.spec.containers{name: "mesh-proxy", image: "proxy:1.0"}, '
    'Object.spec.containers{name: "log-shipper", image: "shipper:2"}]}}')


def test_sidecar_injection_with_apply_configuration_merges_containers_by_name(tmp_path: Path) -> None:
    outcome = mutate(single(tmp_path, SIDECAR_APPLY), pod_review())
    expected = copy.deepcopy(POD)
    # The existing mesh-proxy is updated field by field (its args stay); the new container is appended.
    expected["spec"]["containers"][1]["image"] = "proxy:1.0"
    expected["spec"]["containers"].append({"name": "log-shipper", "image": "shipper:2"})
    # kube-apiserver defaults the object after each mutation: the new container gets its pull policy and so on.
    expected = admitted(expected)
    assert expected["spec"]["containers"][2]["imagePullPolicy"] == "IfNotPresent"
    assert patched(outcome, POD) == expected
    assert outcome.mutated_object == expected
    assert outcome.invoked == (("inject.static.k8s.io", "inject-binding.static.k8s.io"),)


def test_sidecar_injection_with_json_patch(tmp_path: Path) -> None:
    expression = ('object.spec.containers.exists(c, c.name == "log-shipper") ? [] : '
                  '[JSONPatch{op: "add", path: "/spec/containers/-", '
                  'value: Object.spec.containers{name: "log-shipper", image: "shipper:2"}}]')
    snap = single(tmp_path, json_patch(expression))
    expected = copy.deepcopy(POD)
    expected["spec"]["containers"].append({"name": "log-shipper", "image": "shipper:2"})
    expected = admitted(expected)
    assert patched(mutate(snap, pod_review()), POD) == expected
    # Already injected: no patch at all.
    unchanged = mutate(snap, pod_review(obj=expected))
    assert "patch" not in unchanged.response["response"] and unchanged.patch == ()


def test_label_and_annotation_defaulting(tmp_path: Path) -> None:
    snap = single(tmp_path, apply_configuration(
        'Object{metadata: Object.metadata{labels: {"team": "platform"}, annotations: {"owner": request.userInfo.'
        'username}}}'), json_patch(
        '!has(object.metadata.labels) || !("tier" in object.metadata.labels) ? '
        '[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/tier"), '
        'value: "web"}] : []'))
    expected = copy.deepcopy(POD)
    expected["metadata"]["labels"].update({"team": "platform", "example.com/tier": "web"})
    expected["metadata"]["annotations"] = {"owner": "alice"}
    outcome = mutate(snap, pod_review())
    assert patched(outcome, POD) == expected
    # The second mutation saw the first one's result (labels present): order is kept.
    assert [record.action for record in outcome.decisions] == ["mutate", "mutate"]


def test_failed_test_operation_makes_the_mutation_a_no_op(tmp_path: Path) -> None:
    snap = single(tmp_path, json_patch(
        '[JSONPatch{op: "test", path: "/metadata/labels/app", value: "db"}, '
        'JSONPatch{op: "add", path: "/metadata/labels/guarded", value: "yes"}]'))
    outcome = mutate(snap, pod_review())
    assert outcome.allowed and outcome.patch == ()
    assert patched(outcome, POD) == POD
    matching = copy.deepcopy(POD)
    matching["metadata"]["labels"]["app"] = "db"
    expected = copy.deepcopy(matching)
    expected["metadata"]["labels"]["guarded"] = "yes"
    assert patched(mutate(snap, pod_review(obj=matching)), matching) == expected


def test_reinvocation_reruns_if_needed_policies_after_later_changes(tmp_path: Path) -> None:
    # "a-count" (IfNeeded) records how many containers it saw; "b-inject" then adds one. Kubernetes runs
    # a-count again, so the final annotation counts the injected container.
    count = mutating_policy("a-count.static.k8s.io", apply_configuration(
        'Object{metadata: Object.metadata{annotations: {"containers": string(size(object.spec.containers))}}}'),
        reinvocation="IfNeeded")
    inject = mutating_policy("b-inject.static.k8s.io", json_patch(
        'object.spec.containers.exists(c, c.name == "extra") ? [] : [JSONPatch{op: "add", '
        'path: "/spec/containers/-", value: {"name": "extra", "image": "x"}}]'))
    snap = snapshot(tmp_path, count, mutating_binding("a-count.static.k8s.io"), inject,
                    mutating_binding("b-inject.static.k8s.io"))
    outcome = mutate(snap, pod_review())
    result = patched(outcome, POD)
    assert result["metadata"]["annotations"] == {"containers": "3"}
    assert [c["name"] for c in result["spec"]["containers"]] == ["app", "mesh-proxy", "extra"]
    assert outcome.reinvoked == (("a-count.static.k8s.io", "a-count-binding.static.k8s.io"),)


def test_never_policies_are_not_reinvoked(tmp_path: Path) -> None:
    count = mutating_policy("a-count.static.k8s.io", apply_configuration(
        'Object{metadata: Object.metadata{annotations: {"containers": string(size(object.spec.containers))}}}'))
    inject = mutating_policy("b-inject.static.k8s.io", json_patch(
        '[JSONPatch{op: "add", path: "/spec/containers/-", value: {"name": "extra", "image": "x"}}]'))
    snap = snapshot(tmp_path, count, mutating_binding("a-count.static.k8s.io"), inject,
                    mutating_binding("b-inject.static.k8s.io"))
    outcome = mutate(snap, pod_review())
    assert patched(outcome, POD)["metadata"]["annotations"] == {"containers": "2"}
    assert outcome.reinvoked == ()


def test_evaluation_error_under_fail_denies_with_kubernetes_message(tmp_path: Path) -> None:
    snap = single(tmp_path, json_patch('[JSONPatch{op: "add", path: "/metadata/labels/x", '
                                       'value: object.metadata.missing}]'))
    outcome = mutate(snap, pod_review())
    assert not outcome.allowed and outcome.patch == ()
    status = outcome.response["response"]["status"]
    assert status["code"] == 403 and status["reason"] == "Invalid"
    assert status["message"].startswith(
        "policy 'inject.static.k8s.io' with binding 'inject-binding.static.k8s.io' denied request: "
        "expression '[JSONPatch{op: \"add\", path: \"/metadata/labels/x\", value: object.metadata.missing}]' "
        "resulted in error: ")
    assert status["details"]["causes"] == [{"message": status["message"]}]
    assert outcome.response["response"]["uid"] == UID


def test_errors_under_ignore_leave_the_object_and_keep_other_mutations(tmp_path: Path) -> None:
    snap = single(tmp_path, json_patch('[JSONPatch{op: "remove", path: "/metadata/nothing"}]'),
                  apply_configuration('Object{metadata: Object.metadata{labels: {"ok": "yes"}}}'),
                  failure="Ignore")
    outcome = mutate(snap, pod_review())
    expected = copy.deepcopy(POD)
    expected["metadata"]["labels"]["ok"] = "yes"
    assert patched(outcome, POD) == expected
    assert [(r.action, r.error_type) for r in outcome.decisions] == [("allow", "invalid_error"),
                                                                      ("mutate", "no_error")]
    assert outcome.decisions[0].message.startswith("JSON Patch: ")


def test_json_patch_failure_under_fail_denies(tmp_path: Path) -> None:
    outcome = mutate(single(tmp_path, json_patch('[JSONPatch{op: "replace", path: "/spec/nothing/x", value: 1}]')),
                     pod_review())
    assert not outcome.allowed
    assert "denied request: JSON Patch: " in outcome.response["response"]["status"]["message"]


def test_atomic_fields_in_an_apply_configuration_are_rejected(tmp_path: Path) -> None:
    outcome = mutate(single(tmp_path, apply_configuration(
        'Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", command: ["sh"]}]}}')),
        pod_review())
    assert not outcome.allowed
    message = outcome.response["response"]["status"]["message"]
    assert "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs" in message


def test_mismatched_object_type_names_are_rejected(tmp_path: Path) -> None:
    outcome = mutate(single(tmp_path, apply_configuration(
        'Object{spec: Object.spec{securityContext: Object.spec.wrong{runAsNonRoot: true}}}')), pod_review())
    assert not outcome.allowed
    assert ('type mismatch: unexpected type name "Object.spec.wrong", expected "Object.spec.securityContext"'
            in outcome.response["response"]["status"]["message"])


def test_match_conditions_see_the_object_as_mutated_so_far(tmp_path: Path) -> None:
    first = mutating_policy("a.static.k8s.io", apply_configuration(
        'Object{metadata: Object.metadata{labels: {"stage": "one"}}}'))
    second = mutating_policy("b.static.k8s.io", apply_configuration(
        'Object{metadata: Object.metadata{labels: {"stage": "two"}}}'),
        matchConditions=[{"name": "after-one", "expression": 'object.metadata.labels["stage"] == "one"'}])
    snap = snapshot(tmp_path, first, mutating_binding("a.static.k8s.io"), second,
                    mutating_binding("b.static.k8s.io"))
    assert patched(mutate(snap, pod_review()), POD)["metadata"]["labels"]["stage"] == "two"


def test_variables_are_available_to_mutations(tmp_path: Path) -> None:
    snap = single(tmp_path, apply_configuration(
        'Object{metadata: Object.metadata{labels: {"image-count": string(variables.images.size())}}}'),
        variables=[{"name": "images", "expression": "object.spec.containers.map(c, c.image)"}])
    assert patched(mutate(snap, pod_review()), POD)["metadata"]["labels"]["image-count"] == "2"


def test_delete_and_unmatched_requests_are_untouched(tmp_path: Path) -> None:
    snap = single(tmp_path, SIDECAR_APPLY)
    deployment = mutate(snap, review())
    assert deployment.allowed and deployment.patch == () and deployment.invoked == ()
    v1beta1 = mutate(snap, pod_review(api_version="admission.k8s.io/v1beta1"))
    assert v1beta1.response["apiVersion"] == "admission.k8s.io/v1beta1" and v1beta1.patch


def test_one_mutation_over_its_cost_limit_is_an_invalid_error(tmp_path: Path) -> None:
    """kube-apiserver's ``mutating.ErrorType`` calls out_of_budget only a scope that ran out of budget; one
    expression over its own limit is an invalid_error (its message is "expression ... resulted in error")."""
    pod = copy.deepcopy(POD)
    pod["metadata"]["annotations"] = {f"k{i}": "v" * 10 for i in range(3000)}
    expression = ('object.metadata.annotations.all(k, object.metadata.annotations.all(j, (k + j).size() > 0)) '
                  '? [JSONPatch{op: "test", path: "/kind", value: "Pod"}] : []')
    outcome = mutate(single(tmp_path, json_patch(expression)), pod_review(pod))
    assert [(r.action, r.error_type) for r in outcome.decisions] == [("deny", "invalid_error")]
    assert outcome.decisions[0].message.endswith("resulted in error: operation cancelled: actual cost limit exceeded")


# A JSON Patch's result is decoded strictly into the typed object of a built-in kind (json_patch.go), and a
# failure is an InternalError the dispatcher returns whatever the failurePolicy (dispatcher.go).
def test_a_json_patch_leaving_an_unknown_field_is_an_internal_error_whatever_the_failure_policy(
        tmp_path: Path) -> None:
    for failure in ("Fail", "Ignore"):
        work = tmp_path / failure
        work.mkdir()
        snap = single(work, json_patch(
            '[JSONPatch{op: "add", path: "/spec/containers/-", value: Object.spec.containers{name: "x", '
            'ports: [Object.spec.containers.ports{containerPortZ: 8080}]}}]'), failure=failure)
        outcome = mutate(snap, pod_review())
        cause = 'strict decoding error: unknown field "spec.containers[2].ports[0].containerPortZ"'
        assert outcome.status == {"status": "Failure", "message": f"Internal error occurred: {cause}",
                                  "reason": "InternalError", "details": {"causes": [{"message": cause}]}, "code": 500}
        assert outcome.response["response"]["allowed"] is False and "patch" not in outcome.response["response"]


def test_a_json_patch_writing_a_wrongly_typed_value_names_the_go_field(tmp_path: Path) -> None:
    snap = single(tmp_path, json_patch('[JSONPatch{op: "add", path: "/spec/priority", value: "high"}]'))
    assert mutate(snap, pod_review()).status["message"] == (  # type: ignore[index]
        "Internal error occurred: json: cannot unmarshal string into Go struct field PodSpec.spec.priority of type "
        "int32")


def test_fields_of_the_object_the_patch_did_not_write_are_not_decoded(tmp_path: Path) -> None:
    # A field newer than the shipped schemas, already in the object kube-apiserver sent, is its own business.
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0]["futureField"] = {"x": 1}
    snap = single(tmp_path, json_patch(
        '[JSONPatch{op: "add", path: "/spec/containers/0", value: Object.spec.containers{name: "first"}}]'))
    after = patched(mutate(snap, pod_review(pod)), pod)
    assert [c["name"] for c in after["spec"]["containers"]] == ["first", "app", "mesh-proxy"]
    # A custom resource decodes into an unstructured object: nothing to refuse.
    (tmp_path / "crd").mkdir()
    crd = snapshot(tmp_path / "crd", mutating_policy(
        "crd.static.k8s.io", json_patch('[JSONPatch{op: "add", path: "/spec/anything", value: 1}]'),
        matchConstraints={"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"],
                                             "operations": ["CREATE"], "resources": ["widgets"]}]}),
        mutating_binding("crd.static.k8s.io"))
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}
    outcome = mutate(crd, review(obj=widget, group="example.com", resource="widgets", kind="Widget"))
    assert patched(outcome, widget)["spec"] == {"anything": 1}
