"""A policy's match conditions run as kube-apiserver's matcher runs them (matchconditions/matcher.go over
cel/condition.go ``ForInput``): every condition is evaluated against the one 2.5M budget before any result is
read, so a false condition skips the policy only when the whole list ran within it; a budget running out
anywhere fails the matcher, which a false condition does not outweigh. The expected answers are kube-apiserver's
(``../shared/oracle`` answers the same, replayed in ``tests/differential/test_known_classes.py``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from staticadm.admission.mutating.dispatcher import evaluate_mutating
from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.admission.validating.dispatcher import evaluate_validating
from tests.admission.helpers import DEPLOYMENT, binding, parsed, policy, review, snapshot

#: About 750,000 each (50,000 x 1,500 / 100): under the per-expression limit, four of them over the 2.5M budget.
HEAVY = "!object.spec.text.contains(object.spec.needle)"
FALSE = {"name": "never", "expression": "object.spec.replicas < 0"}
BROKEN = {"name": "broken", "expression": "object.spec.nope == 1"}
OUT_OF_BUDGET = "validation failed due to running out of cost budget, no further validation rules will be run"


def heavy(count: int) -> list[dict[str, str]]:
    return [{"name": f"heavy{index}", "expression": HEAVY} for index in range(count)]


def _request() -> Any:
    obj: dict[str, Any] = copy.deepcopy(DEPLOYMENT)
    obj["spec"] = {**obj["spec"], "text": "a" * 50_000, "needle": "b" * 1_500}
    return parsed(review(obj=obj))


def _mutating(conditions: list[dict[str, str]], failure_policy: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": "m.static.k8s.io"},
         "spec": {"failurePolicy": failure_policy, "matchConditions": conditions, "reinvocationPolicy": "Never",
                  "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["deployments"]}]},
                  "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                      "expression": "[JSONPatch{op: 'add', path: '/metadata/labels/seen', value: 'yes'}]"}}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": "mb.static.k8s.io"}, "spec": {"policyName": "m.static.k8s.io"}},
    ]


CASES = [
    # (conditions, failurePolicy, denied with the budget's error)
    pytest.param([FALSE, *heavy(4)], "Fail", True, id="false-first-then-over-budget"),
    pytest.param([*heavy(4), FALSE], "Fail", True, id="over-budget-then-false"),
    pytest.param([FALSE, *heavy(4)], "Ignore", False, id="over-budget-ignored"),
    pytest.param([FALSE, *heavy(2)], "Fail", False, id="false-within-budget"),
    pytest.param([FALSE, BROKEN], "Fail", False, id="false-beats-an-error-after-it"),
    pytest.param([BROKEN, FALSE], "Fail", False, id="false-beats-an-error-before-it"),
]


@pytest.mark.parametrize("share", [True, False], ids=["one-call", "per-binding"])
@pytest.mark.parametrize(("conditions", "failure_policy", "denied"), CASES)
def test_validating_match_conditions_run_all_within_one_budget(tmp_path: Path, share: bool,
                                                               conditions: list[dict[str, str]],
                                                               failure_policy: str, denied: bool) -> None:
    snap = snapshot(tmp_path, policy(failurePolicy=failure_policy, matchConditions=conditions,
                                     validations=[{"expression": "object.spec.replicas < 0"}]), binding())
    outcome = evaluate_validating(snap, RequestOnlyNamespaces(), _request(), share_evaluations=share)
    assert outcome.allowed is not denied
    if denied:
        assert outcome.status is not None
        assert outcome.status["message"] == ("ValidatingAdmissionPolicy 'p.static.k8s.io' with binding "
                                             f"'b.static.k8s.io' denied request: {OUT_OF_BUDGET}")


@pytest.mark.parametrize(("conditions", "failure_policy", "denied"), CASES)
def test_mutating_match_conditions_run_all_within_one_budget(tmp_path: Path, conditions: list[dict[str, str]],
                                                             failure_policy: str, denied: bool) -> None:
    snap = snapshot(tmp_path, *_mutating(conditions, failure_policy))
    outcome = evaluate_mutating(snap, RequestOnlyNamespaces(), _request())
    assert outcome.allowed is not denied
    assert not outcome.patch
    if denied:
        assert outcome.status is not None
        assert outcome.status["message"] == f"policy 'm.static.k8s.io' with binding 'mb.static.k8s.io' denied " \
                                            f"request: {OUT_OF_BUDGET}"
