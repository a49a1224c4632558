"""The validating dispatcher and validator: every decision path, asserting the exact response."""

from __future__ import annotations

import json
from pathlib import Path

from staticadm.admission.namespaces import parse_namespaces
from tests.admission.helpers import DEPLOYMENT, allowed, binding, cel_error, denied, evaluate, policy, review, snapshot

P, B = "p.static.k8s.io", "b.static.k8s.io"


def test_false_validation_denies_with_expression_message(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(), binding())
    assert evaluate(snap, review()).response == denied(P, B, "failed expression: object.spec.replicas <= 5")


def test_passing_validation_allows(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(), binding())
    raw = review()
    raw["request"]["object"]["spec"]["replicas"] = 3
    assert evaluate(snap, raw).response == allowed()


def test_v1beta1_review_is_answered_in_v1beta1(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(), binding())
    response = evaluate(snap, review(api_version="admission.k8s.io/v1beta1")).response
    assert response == denied(P, B, "failed expression: object.spec.replicas <= 5",
                              api_version="admission.k8s.io/v1beta1")


def test_message_precedence(tmp_path: Path) -> None:
    validations = [
        {"expression": "false", "message": "  static message  ", "messageExpression": "'dynamic ' + 'message'"},
        {"expression": "false", "message": "fallback", "messageExpression": "'two\\nlines'"},
        {"expression": "false", "message": "fallback too", "messageExpression": "'   '"},
        {"expression": "false", "message": " trimmed "},
        {"expression": " false ", "messageExpression": "'x'.repeat(1)" if False else "'a' * 0 == '' ? '' : ''"},
    ]
    snap = snapshot(tmp_path, policy(validations=validations[:4]), binding(actions=("Warn",)))
    outcome = evaluate(snap, review())
    assert outcome.warnings == (
        f"Validation failed for ValidatingAdmissionPolicy '{P}' with binding '{B}': dynamic message",
        f"Validation failed for ValidatingAdmissionPolicy '{P}' with binding '{B}': fallback",
        f"Validation failed for ValidatingAdmissionPolicy '{P}' with binding '{B}': fallback too",
        f"Validation failed for ValidatingAdmissionPolicy '{P}' with binding '{B}': trimmed",
    )
    assert outcome.allowed


def test_too_long_message_expression_falls_back(tmp_path: Path) -> None:
    validations = [{"expression": "false", "messageExpression": "'abcdefghij'.repeat(513)" if False else
                    "[" + ",".join(["'abcdefghijklmnopqrstuvwxyz'"] * 200) + "].join('')"}]
    snap = snapshot(tmp_path, policy(validations=validations), binding())
    assert evaluate(snap, review()).status == {
        "code": 422, "reason": "Invalid",
        "message": f"ValidatingAdmissionPolicy '{P}' with binding '{B}' denied request: failed expression: false"}


def test_reason_sets_code(tmp_path: Path) -> None:
    for reason, code in (("Forbidden", 403), ("RequestEntityTooLarge", 413), ("Invalid", 422)):
        directory = tmp_path / reason
        directory.mkdir()
        snap = snapshot(directory, policy(validations=[{"expression": "false", "reason": reason, "message": "no"}]),
                        binding())
        assert evaluate(snap, review()).response == denied(P, B, "no", code=code, reason=reason)


def test_runtime_error_denies_with_422_and_no_reason_under_fail(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(validations=[{"expression": "object.spec.missing > 1"}]), binding())
    assert evaluate(snap, review()).response == denied(
        P, B, f"expression 'object.spec.missing > 1' resulted in error: {cel_error('object.spec.missing > 1')}")


def test_runtime_error_is_admitted_under_ignore(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(failurePolicy="Ignore", validations=[{"expression": "object.spec.missing > 1"}]),
                    binding())
    outcome = evaluate(snap, review())
    assert outcome.response == allowed()
    assert [(d.action, d.error_type) for d in outcome.decisions] == [("allow", "invalid_error")]


def test_runtime_error_with_warn_action_becomes_warning(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(validations=[{"expression": "object.spec.missing > 1"}]),
                    binding(actions=("Warn",)))
    assert evaluate(snap, review()).response == allowed(warnings=[
        f"Validation failed for ValidatingAdmissionPolicy '{P}' with binding '{B}': "
        f"expression 'object.spec.missing > 1' resulted in error: {cel_error('object.spec.missing > 1')}"])


def test_audit_action_writes_validation_failure_annotation(tmp_path: Path) -> None:
    validations = [{"expression": "true"}, {"expression": "false", "message": "<bad> & ugly"}]
    snap = snapshot(tmp_path, policy(validations=validations), binding(actions=("Audit", "Warn")))
    outcome = evaluate(snap, review())
    value = ('[{"message":"\\u003cbad\\u003e \\u0026 ugly","policy":"p.static.k8s.io","binding":"b.static.k8s.io",'
             '"expressionIndex":1,"validationActions":["Audit","Warn"]}]')
    assert outcome.response == allowed(
        warnings=[f"Validation failed for ValidatingAdmissionPolicy '{P}' with binding '{B}': <bad> & ugly"],
        auditAnnotations={"validation.policy.admission.k8s.io/validation_failure": value})
    assert json.loads(value)[0]["message"] == "<bad> & ugly"


def test_deny_and_audit_together(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(validations=[{"expression": "false", "message": "m"}]),
                    binding(actions=("Deny", "Audit")))
    response = evaluate(snap, review()).response
    assert response["response"]["status"]["message"].endswith("denied request: m")
    assert "validation.policy.admission.k8s.io/validation_failure" in response["response"]["auditAnnotations"]


def test_first_denial_in_policy_then_binding_order(tmp_path: Path) -> None:
    snap = snapshot(
        tmp_path,
        policy("b-policy.static.k8s.io", validations=[{"expression": "false", "message": "from b"}]),
        policy("a-policy.static.k8s.io", validations=[{"expression": "false", "message": "from a"}]),
        binding("z.static.k8s.io", "a-policy.static.k8s.io"),
        binding("y.static.k8s.io", "a-policy.static.k8s.io"),
        binding("x.static.k8s.io", "b-policy.static.k8s.io"),
    )
    outcome = evaluate(snap, review())
    assert outcome.response == denied("a-policy.static.k8s.io", "y.static.k8s.io", "from a")
    assert outcome.matched == (("a-policy.static.k8s.io", "y.static.k8s.io"),
                               ("a-policy.static.k8s.io", "z.static.k8s.io"),
                               ("b-policy.static.k8s.io", "x.static.k8s.io"))


def test_policy_without_binding_never_fires(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy())
    assert evaluate(snap, review()).response == allowed()


def test_variables_are_shared_and_lazy(tmp_path: Path) -> None:
    spec = {"variables": [{"name": "replicas", "expression": "object.spec.replicas"},
                          {"name": "unused", "expression": "object.spec.nothing"}],
            "validations": [{"expression": "variables.replicas < 5",
                             "messageExpression": "'replicas is ' + string(variables.replicas)"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == denied(P, B, "replicas is 10")


def test_variable_error_names_the_variable(tmp_path: Path) -> None:
    spec = {"variables": [{"name": "bad", "expression": "object.spec.nothing"}],
            "validations": [{"expression": "variables.bad == 1"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    message = evaluate(snap, review()).status["message"]  # type: ignore[index]
    assert message == (f"ValidatingAdmissionPolicy '{P}' with binding '{B}' denied request: expression "
                       "'variables.bad == 1' resulted in error: composited variable \"bad\" fails to evaluate: "
                       f"{cel_error('object.spec.nothing')}")


def test_match_condition_false_skips_binding(tmp_path: Path) -> None:
    spec = {"matchConditions": [{"name": "only-big", "expression": "object.spec.replicas > 100"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    outcome = evaluate(snap, review())
    assert outcome.response == allowed()
    assert outcome.not_matched[0].reason == 'matchCondition "only-big" evaluated to false'


def test_match_condition_false_beats_error(tmp_path: Path) -> None:
    spec = {"matchConditions": [{"name": "err", "expression": "object.spec.nothing == 1"},
                                {"name": "no", "expression": "false"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == allowed()


def test_match_condition_errors_aggregate_under_fail(tmp_path: Path) -> None:
    spec = {"matchConditions": [{"name": "e1", "expression": "object.spec.a == 1"},
                                {"name": "e2", "expression": "object.spec.b == 1"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == denied(
        P, B, f"[expression 'object.spec.a == 1' resulted in error: {cel_error('object.spec.a')}, "
              f"expression 'object.spec.b == 1' resulted in error: {cel_error('object.spec.b')}]")


def test_match_condition_errors_of_the_same_text_aggregate_to_one(tmp_path: Path) -> None:
    # utilerrors' aggregate names each distinct message once, without brackets when one is left (kube-apiserver's
    # admission code in ../shared/oracle answers so for two conditions failing alike).
    spec = {"matchConditions": [{"name": "e1", "expression": "object.spec.a == 1"},
                                {"name": "e2", "expression": "object.spec.a == 1"},
                                {"name": "e3", "expression": "object.spec.b == 1"},
                                {"name": "e4", "expression": "object.spec.a == 1"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == denied(
        P, B, f"[expression 'object.spec.a == 1' resulted in error: {cel_error('object.spec.a')}, "
              f"expression 'object.spec.b == 1' resulted in error: {cel_error('object.spec.b')}]")
    snap = snapshot(tmp_path, policy(matchConditions=spec["matchConditions"][:2]), binding())
    assert evaluate(snap, review()).response == denied(
        P, B, f"expression 'object.spec.a == 1' resulted in error: {cel_error('object.spec.a')}")


def test_a_value_taken_out_of_an_optional_reaches_library_functions_in_linked_programs(tmp_path: Path) -> None:
    # Linked with the variables it reads, the expression runs in its runtime form (optional accesses rewritten);
    # semver() of what orValue() took out of object.?spec.?version was refused there as holding an optional.
    # kube-apiserver's admission code (../shared/oracle) evaluates it: 0.1.0 is not above 1.2.0.
    spec = {"variables": [{"name": "v0", "expression": "object.spec.items.filter(i, i > 1)"}],
            "validations": [{"expression": "size(variables.v0) > 5 || "
                                           "semver(object.?spec.?version.orValue('1.0.0')).isGreaterThan(semver('1.2.0'))"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    obj = {**DEPLOYMENT, "spec": {"items": [1, 2, 3], "version": "0.1.0"}}
    assert evaluate(snap, review(obj=obj)).response == denied(
        P, B, "failed expression: size(variables.v0) > 5 || "
              "semver(object.?spec.?version.orValue('1.0.0')).isGreaterThan(semver('1.2.0'))")


def test_match_condition_error_is_skipped_under_ignore(tmp_path: Path) -> None:
    spec = {"failurePolicy": "Ignore", "matchConditions": [{"name": "e1", "expression": "object.spec.a == 1"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == allowed()


def test_audit_annotations_published_with_policy_prefix(tmp_path: Path) -> None:
    spec = {"validations": [{"expression": "true"}],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "'  ' + string(object.spec.replicas)"},
                                 {"key": "empty", "valueExpression": "'   '"},
                                 {"key": "nothing", "valueExpression": "null"}]}
    snap = snapshot(tmp_path, policy(**spec), binding("b1.static.k8s.io"), binding("b2.static.k8s.io"))
    assert evaluate(snap, review()).response == allowed(auditAnnotations={f"{P}/replicas": "10"})


def test_audit_annotations_published_even_when_denied(tmp_path: Path) -> None:
    spec = {"validations": [{"expression": "false", "message": "no"}],
            "auditAnnotations": [{"key": "k", "valueExpression": "'v'"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == denied(P, B, "no", auditAnnotations={f"{P}/k": "v"})


def test_audit_annotation_error_denies_whatever_the_actions(tmp_path: Path) -> None:
    spec = {"validations": [{"expression": "true"}],
            "auditAnnotations": [{"key": "k", "valueExpression": "string(object.spec.nothing)"}]}
    snap = snapshot(tmp_path, policy(**spec), binding(actions=("Warn",)))
    assert evaluate(snap, review()).response == denied(
        P, B, f"expression 'string(object.spec.nothing)' resulted in error: {cel_error('object.spec.nothing')}")


def test_binding_match_resources_intersect(tmp_path: Path) -> None:
    spec = {"matchResources": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                  "operations": ["UPDATE"], "resources": ["deployments"]}]}}
    snap = snapshot(tmp_path, policy(), binding(**spec))
    outcome = evaluate(snap, review())
    assert outcome.response == allowed()
    assert outcome.not_matched[0].binding == B
    assert evaluate(snap, review(operation="UPDATE", old=review()["request"]["object"])).allowed is False


def test_namespace_object_from_file(tmp_path: Path) -> None:
    spec = {"validations": [{"expression": "namespaceObject.metadata.labels.env == 'prod'",
                             "messageExpression": "'namespace ' + namespaceObject.metadata.name"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    namespaces = parse_namespaces("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: default\n"
                                  "  labels: {env: dev}\n")
    assert evaluate(snap, review(), namespaces).response == denied(P, B, "namespace default")


def test_match_conditions_never_see_the_namespace_object(tmp_path: Path) -> None:
    # Kubernetes evaluates matchConditions without namespaceObject, even when validations have it.
    spec = {"matchConditions": [{"name": "no-namespace", "expression": "namespaceObject == null"}],
            "validations": [{"expression": "namespaceObject.metadata.labels.env == 'prod'",
                             "messageExpression": "'namespace ' + namespaceObject.metadata.name"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    namespaces = parse_namespaces("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: default\n"
                                  "  labels: {env: dev}\n")
    assert evaluate(snap, review(), namespaces).response == denied(P, B, "namespace default")


def test_unknown_namespace_object_is_a_binding_error_not_a_null(tmp_path: Path) -> None:
    spec = {"validations": [{"expression": "namespaceObject == null"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == denied(
        P, B, 'failed to configure binding: namespace "default" is not known to staticadm, so namespaceObject is '
              "unavailable (give its Namespace object to the namespace source)")


def test_unknown_namespace_object_ignored_under_ignore(tmp_path: Path) -> None:
    spec = {"failurePolicy": "Ignore", "validations": [{"expression": "namespaceObject == null"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, review()).response == allowed()


def test_namespace_object_is_null_for_cluster_scoped_and_namespaces(tmp_path: Path) -> None:
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["namespaces"]}]
    spec = {"matchConstraints": {"resourceRules": rules},
            "validations": [{"expression": "namespaceObject == null", "message": "not null"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    raw = review(group="", resource="namespaces", kind="Namespace", namespace="team", name="team", obj=ns)
    assert evaluate(snap, raw).response == allowed()


def test_namespace_selector_on_unknown_label_is_a_binding_error(tmp_path: Path) -> None:
    spec = {"matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}
    snap = snapshot(tmp_path, policy(), binding(**spec))
    assert evaluate(snap, review()).response == denied(
        P, B, 'failed to configure binding: Internal error occurred: the labels of namespace "default" are not '
              "known to staticadm (no namespace source lists it); the namespace selector needs label 'env'")


def test_namespace_selector_on_name_label_needs_no_source(tmp_path: Path) -> None:
    spec = {"matchResources": {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}}}
    snap = snapshot(tmp_path, policy(), binding(**spec))
    assert evaluate(snap, review()).allowed is False
    assert evaluate(snap, review(namespace="kube-system")).response == allowed()


def test_excluded_review_resources_are_never_evaluated(tmp_path: Path) -> None:
    rules = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]
    snap = snapshot(tmp_path, policy(matchConstraints={"resourceRules": rules},
                                     validations=[{"expression": "false"}]), binding())
    raw = review(group="authorization.k8s.io", resource="subjectaccessreviews", kind="SubjectAccessReview",
                 namespace="", name="", obj={"spec": {}})
    outcome = evaluate(snap, raw)
    assert outcome.response == allowed()
    assert outcome.excluded
    raw = review(group="admissionregistration.k8s.io", resource="validatingadmissionpolicies",
                 kind="ValidatingAdmissionPolicy", namespace="", obj={"metadata": {"name": "x"}})
    assert evaluate(snap, raw).allowed is False


def test_unconvertible_equivalent_match_is_a_policy_error(tmp_path: Path) -> None:
    raw = review()
    raw["request"]["requestKind"] = {"group": "apps", "version": "v1beta1", "kind": "Deployment"}
    raw["request"]["requestResource"] = {"group": "apps", "version": "v1beta1", "resource": "deployments"}
    rules = [{"apiGroups": ["apps"], "apiVersions": ["v1beta1"], "operations": ["CREATE"],
              "resources": ["deployments"]}]
    snap = snapshot(tmp_path, policy(matchConstraints={"resourceRules": rules}), binding())
    assert evaluate(snap, raw).status == {"code": 422, "reason": "Invalid", "message": (
        f"ValidatingAdmissionPolicy '{P}' denied request: failed to configure policy: failed to convert object "
        "version: staticadm received apps/v1, Kind=Deployment and cannot convert it to apps/v1beta1, Kind=Deployment")}


def test_equivalent_match_uses_received_version(tmp_path: Path) -> None:
    raw = review()
    raw["request"]["requestKind"] = {"group": "apps", "version": "v1beta1", "kind": "Deployment"}
    raw["request"]["requestResource"] = {"group": "apps", "version": "v1beta1", "resource": "deployments"}
    spec = {"validations": [{"expression": "request.resource.version == 'v1' && "
                                           "request.requestResource.version == 'v1beta1'", "message": "wrong"},
                            {"expression": "false", "message": "reached"}]}
    snap = snapshot(tmp_path, policy(**spec), binding())
    assert evaluate(snap, raw).response == denied(P, B, "reached")
    exact = policy(matchConstraints={"matchPolicy": "Exact", "resourceRules": [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]})
    directory = tmp_path / "exact"
    directory.mkdir()
    assert evaluate(snapshot(directory, exact, binding()), raw).response == allowed()


def test_request_variable_fields(tmp_path: Path) -> None:
    expression = ("request.operation == 'CREATE' && request.name == 'web' && request.namespace == 'default' && "
                  "request.userInfo.username == 'alice' && request.kind.kind == 'Deployment' && "
                  "!has(request.subResource) && request.dryRun == false")
    snap = snapshot(tmp_path, policy(validations=[{"expression": expression, "message": "bad request"}]), binding())
    assert evaluate(snap, review()).response == allowed()


def test_index_skips_unrelated_policies(tmp_path: Path) -> None:
    objects = []
    for i in range(30):
        rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [f"r{i}"]}]
        objects.append(policy(f"p{i:02}.static.k8s.io", matchConstraints={"resourceRules": rules}))
        objects.append(binding(f"b{i:02}.static.k8s.io", f"p{i:02}.static.k8s.io"))
    snap = snapshot(tmp_path, *objects)
    assert snap.candidates("CREATE", {("apps", "deployments")}) == ()
    assert snap.candidates("CREATE", {("", "r7")}) == (7,)
    outcome = evaluate(snap, review())
    assert outcome.not_matched == () and outcome.decisions == ()
