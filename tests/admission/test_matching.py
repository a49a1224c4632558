"""Rule, scope, name, selector and exclusion matching (``policy/matching`` and the webhook predicates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from staticadm.admission.matching.matcher import matches, rule_matches, selector_matches
from staticadm.admission.namespaces import RequestOnlyNamespaces, parse_namespaces
from staticadm.model import LabelSelector, LabelSelectorRequirement, MatchResources, NamedRuleWithOperations
from tests.admission.helpers import binding, evaluate, parsed, policy, review, snapshot


def rule(resources: tuple[str, ...], *, groups: tuple[str, ...] = ("*",), versions: tuple[str, ...] = ("*",),
         operations: tuple[str, ...] = ("*",), scope: str | None = "*",
         names: tuple[str, ...] = ()) -> NamedRuleWithOperations:
    return NamedRuleWithOperations(resource_names=names, operations=operations, api_groups=groups,
                                   api_versions=versions, resources=resources, scope=scope)


POD = dict(group="", resource="pods", kind="Pod", obj={"metadata": {"name": "p", "labels": {"app": "a"}}})


@pytest.mark.parametrize(("resources", "sub", "expected"), [
    (("pods",), "", True),
    (("pods",), "exec", False),
    (("pods/*",), "", True),            # rules_test "r & subresources": includes the main resource
    (("pods/*",), "exec", True),
    (("pods/exec",), "exec", True),
    (("pods/exec",), "log", False),
    (("*/exec",), "exec", True),
    (("*/exec",), "", False),
    (("*",), "", True),
    (("*",), "exec", False),
    (("*/*",), "exec", True),
    (("*/*",), "", True),
    (("deployments",), "", False),
])
def test_resource_forms(resources: tuple[str, ...], sub: str, expected: bool) -> None:
    request = parsed(review(**POD, sub=sub, operation="CONNECT" if sub else "CREATE"))
    assert rule_matches(rule(resources), request, request.original_resource) is expected


@pytest.mark.parametrize(("scope", "namespace", "resource", "expected"), [
    ("*", "default", "pods", True),
    (None, "", "pods", True),
    ("Namespaced", "default", "pods", True),
    ("Namespaced", "", "nodes", False),
    ("Cluster", "", "nodes", True),
    ("Cluster", "default", "pods", False),
    ("Namespaced", "team", "namespaces", False),   # a Namespace carries its own name as namespace
    ("Cluster", "team", "namespaces", True),
    ("Bogus", "default", "pods", False),
])
def test_scope(scope: str | None, namespace: str, resource: str, expected: bool) -> None:
    request = parsed(review(group="", resource=resource, kind="X", namespace=namespace, obj=None, operation="DELETE"))
    assert rule_matches(rule(("*",), scope=scope), request, request.original_resource) is expected


def test_operations_groups_versions_are_exact_or_star() -> None:
    request = parsed(review())
    resource = request.original_resource
    assert rule_matches(rule(("deployments",), operations=("CREATE",)), request, resource)
    assert not rule_matches(rule(("deployments",), operations=("UPDATE", "DELETE")), request, resource)
    assert not rule_matches(rule(("deployments",), groups=("extensions",)), request, resource)
    assert not rule_matches(rule(("deployments",), versions=("v1beta1",)), request, resource)
    assert rule_matches(rule(("deployments",), groups=("apps",), versions=("v1",)), request, resource)


def _match(rules: tuple[NamedRuleWithOperations, ...], raw: dict, *, exclude: tuple = (),
           namespace_selector: LabelSelector | None = None, object_selector: LabelSelector | None = None,
           match_policy: str = "Equivalent", namespaces=None):  # type: ignore[no-untyped-def]
    match = MatchResources(namespace_selector=namespace_selector or LabelSelector(),
                           object_selector=object_selector or LabelSelector(),
                           resource_rules=rules, exclude_resource_rules=exclude, match_policy=match_policy)
    return matches(match, parsed(raw), namespaces or RequestOnlyNamespaces(), is_policy=True)


def test_resource_names() -> None:
    rules = (rule(("deployments",), names=("web", "api")),)
    assert _match(rules, review()).matched
    assert not _match(rules, review(name="other")).matched
    # CREATE with generateName: the name is empty, so a name list never matches.
    assert not _match(rules, review(name="")).matched


def test_exclude_resource_rules_win() -> None:
    outcome = _match((rule(("*",)),), review(), exclude=(rule(("deployments",), names=("web",)),))
    assert not outcome.matched
    assert outcome.reason == "CREATE apps/v1 deployments is excluded by excludeResourceRules"
    assert _match((rule(("*",)),), review(name="api"), exclude=(rule(("deployments",), names=("web",)),)).matched


def test_binding_with_nil_match_resources_matches_everything() -> None:
    assert matches(None, parsed(review()), RequestOnlyNamespaces(), is_policy=False).matched
    assert matches(None, parsed(review()), RequestOnlyNamespaces(), is_policy=True).error == (
        "policy contained no match constraints, a required field")


def test_empty_resource_rules_match_all_for_bindings() -> None:
    outcome = _match((), review())
    assert outcome.matched and outcome.resource is not None and outcome.resource.resource == "deployments"


def req(key: str, operator: str, *values: str) -> LabelSelectorRequirement:
    return LabelSelectorRequirement(key=key, operator=operator, values=values)


@pytest.mark.parametrize(("selector", "expected"), [
    (LabelSelector(), True),
    (LabelSelector(match_labels={"app": "a"}), True),
    (LabelSelector(match_labels={"app": "b"}), False),
    (LabelSelector(match_expressions=(req("app", "In", "a", "b"),)), True),
    (LabelSelector(match_expressions=(req("app", "In", "b"),)), False),
    (LabelSelector(match_expressions=(req("missing", "In", "a"),)), False),
    (LabelSelector(match_expressions=(req("app", "NotIn", "a"),)), False),
    (LabelSelector(match_expressions=(req("missing", "NotIn", "a"),)), True),
    (LabelSelector(match_expressions=(req("app", "Exists"),)), True),
    (LabelSelector(match_expressions=(req("missing", "Exists"),)), False),
    (LabelSelector(match_expressions=(req("app", "DoesNotExist"),)), False),
    (LabelSelector(match_expressions=(req("missing", "DoesNotExist"),)), True),
    (LabelSelector(match_labels={"app": "a"}, match_expressions=(req("tier", "Exists"),)), False),
])
def test_label_selector_semantics(selector: LabelSelector, expected: bool) -> None:
    assert selector_matches(selector, {"app": "a"}) is expected


def test_object_selector_uses_object_or_old_object() -> None:
    selector = LabelSelector(match_labels={"app": "old"})
    rules = (rule(("*",)),)
    old = {"metadata": {"labels": {"app": "old"}}}
    assert _match(rules, review(operation="UPDATE", old=old), object_selector=selector).matched
    assert not _match(rules, review(), object_selector=selector).matched
    # DELETE: object is null, oldObject carries the labels.
    assert _match(rules, review(operation="DELETE", obj=None, old=old), object_selector=selector).matched
    # An object without metadata (CONNECT options) never matches a non-empty selector, even a negative one.
    negative = LabelSelector(match_expressions=(req("x", "DoesNotExist"),))
    connect = review(operation="CONNECT", obj={"kind": "PodExecOptions"})
    assert not _match(rules, connect, object_selector=negative).matched


def test_namespace_selector_from_file_and_for_namespaces_themselves() -> None:
    rules = (rule(("*",)),)
    selector = LabelSelector(match_labels={"env": "prod"})
    namespaces = parse_namespaces('{"apiVersion": "v1", "kind": "List", "items": ['
                                  '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", '
                                  '"labels": {"env": "prod"}}}]}')
    assert _match(rules, review(), namespace_selector=selector, namespaces=namespaces).matched
    outcome = _match(rules, review(namespace="other"), namespace_selector=selector, namespaces=namespaces)
    assert outcome.error is not None and "the namespace selector needs label 'env'" in outcome.error
    # Cluster-scoped resources other than namespaces are never exempted.
    assert _match(rules, review(namespace="", group="", resource="nodes"), namespace_selector=selector).matched
    # A namespace CREATE is judged by the labels it is being created with.
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"env": "prod"}}}
    raw = review(group="", resource="namespaces", kind="Namespace", namespace="team", name="team", obj=ns)
    assert _match(rules, raw, namespace_selector=selector).matched


def test_selector_errors_only_when_everything_else_matches() -> None:
    selector = LabelSelector(match_labels={"env": "prod"})
    outcome = _match((rule(("pods",)),), review(), namespace_selector=selector)
    assert not outcome.matched and outcome.error is None


def test_exact_match_policy_ignores_received_version() -> None:
    raw = review()
    raw["request"]["requestResource"] = {"group": "apps", "version": "v1beta1", "resource": "deployments"}
    raw["request"]["requestKind"] = {"group": "apps", "version": "v1beta1", "kind": "Deployment"}
    rules = (rule(("deployments",), versions=("v1",)),)
    assert not _match(rules, raw, match_policy="Exact").matched
    outcome = _match(rules, raw)
    assert outcome.matched and outcome.kind is not None and outcome.kind.version == "v1"


def _hpa_review(sent: str, requested: str) -> dict[str, object]:
    raw = review(group="autoscaling", version=sent, resource="horizontalpodautoscalers",
                 kind="HorizontalPodAutoscaler", obj={"apiVersion": f"autoscaling/{sent}",
                                                      "kind": "HorizontalPodAutoscaler",
                                                      "metadata": {"name": "h"}, "spec": {"maxReplicas": 20}})
    raw["request"]["requestKind"]["version"] = requested  # type: ignore[index]
    raw["request"]["requestResource"]["version"] = requested  # type: ignore[index]
    return raw


def test_equivalent_matching_knows_the_other_versions_of_a_built_in_kind(tmp_path: Path) -> None:
    # policy/matching matchesResourceRules: under Equivalent a rule naming autoscaling/v1 HPAs matches an
    # autoscaling/v2 request. In process kube-apiserver converts the object; a webhook cannot, and the
    # policy fails naming that rather than not matching (mt18 of the k8s-admission corpus).
    hpa_rules = {"resourceRules": [{"apiGroups": ["autoscaling"], "apiVersions": ["v1"], "operations": ["*"],
                                    "resources": ["horizontalpodautoscalers"]}]}
    validations = [{"expression": "object.spec.maxReplicas <= 10",
                    "messageExpression": "'kind=' + request.kind.version + ' requestKind=' + "
                                         "request.requestKind.version"}]
    for match_policy, failure, expected in (("Equivalent", "Fail", "conversion"), ("Equivalent", "Ignore", None),
                                            ("Exact", "Fail", None)):
        work = tmp_path / f"{match_policy}-{failure}"
        work.mkdir()
        snap = snapshot(work, policy(matchConstraints={**hpa_rules, "matchPolicy": match_policy},
                                     failurePolicy=failure, validations=validations), binding())
        response = evaluate(snap, _hpa_review("v2", "v2")).response["response"]
        if expected is None:
            assert response["allowed"] is True
        else:
            assert response["status"]["message"] == (
                "ValidatingAdmissionPolicy 'p.static.k8s.io' denied request: failed to configure policy: failed to "
                "convert object version: staticadm received autoscaling/v2, Kind=HorizontalPodAutoscaler and cannot "
                "convert it to autoscaling/v1, Kind=HorizontalPodAutoscaler")
    # What a webhook registered for autoscaling/v1 under Equivalent receives: kube-apiserver converted it.
    snap = snapshot(tmp_path / "Equivalent-Fail", policy(matchConstraints=hpa_rules, validations=validations),
                    binding())
    message = evaluate(snap, _hpa_review("v1", "v2")).response["response"]["status"]["message"]
    assert message.endswith("denied request: kind=v1 requestKind=v2")
