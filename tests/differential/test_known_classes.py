"""The expectations the regression tests of issue 35's difference classes hold staticadm to are kube-apiserver's.

``tests/cel/test_generated_differences.py`` and ``tests/admission/test_match_condition_budget.py`` state
kube-apiserver's answers as values, so they run without the oracle; here each is replayed through the oracle
(one process per table, each case a policy selecting its own request by label), so an expectation that
kube-apiserver does not share fails.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.admission import test_match_condition_budget as budget
from tests.admission import test_policy_texts as texts
from tests.cel import test_generated_differences as classes
from tests.differential.generators import API
from tests.differential.harness import Answer, LoadRefused, oracle_answers, oracle_or_skip, write_manifests
from tests.manifests import test_go_yaml_documents as documents

oracle_or_skip()

WIDGETS = {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["widgets"]}]}


def _review(index: int, obj: dict[str, Any]) -> dict[str, Any]:
    labelled = copy.deepcopy(obj)
    labelled["metadata"].setdefault("labels", {})["case"] = str(index)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"case-{index}", "kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
        "resource": {"group": "example.com", "version": "v1", "resource": "widgets"},
        "name": labelled["metadata"]["name"], "namespace": "default", "operation": "CREATE",
        "userInfo": {"username": "alice"}, "object": labelled}}


def _selecting(index: int, kind: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    name = f"case{index}.static.k8s.io"
    binding: dict[str, Any] = {"policyName": name}
    if kind == "ValidatingAdmissionPolicy":
        binding["validationActions"] = ["Deny"]
    constraints = {**WIDGETS, "objectSelector": {"matchLabels": {"case": str(index)}}}
    return [{"apiVersion": API, "kind": kind, "metadata": {"name": name},
             "spec": {"matchConstraints": constraints, **spec}},
            {"apiVersion": API, "kind": f"{kind}Binding", "metadata": {"name": f"case{index}b.static.k8s.io"},
             "spec": binding}]


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _agrees(expected: classes.Outcome, answer: Answer) -> bool:
    if isinstance(expected, classes.Value):
        return answer.allowed
    if isinstance(expected, classes.Refused):
        return "compilation error: " in answer.message and expected.message in answer.message
    return not answer.allowed and answer.message.endswith(f"resulted in error: {expected.message}")


def test_the_cel_difference_classes_are_answered_as_kube_apiserver_answers(tmp_path: Path) -> None:
    objects, reviews = [], []
    for index, (_, expression, expected) in enumerate(classes.CASES):
        # A value is compared inside the expression; an error or refusal comes out of it whatever the comparison.
        checked = (f"({expression}) == dyn({_literal(expected.value)})" if isinstance(expected, classes.Value)
                   else expression)
        objects += _selecting(index, "ValidatingAdmissionPolicy", {"validations": [{"expression": checked}]})
        reviews.append(_review(index, classes.OBJECT))
    write_manifests(tmp_path, objects)
    answers = oracle_answers(tmp_path, reviews)
    disagreements = [f"{difference}: {expression}: expected {expected}, kube-apiserver: {answer.message or 'allowed'}"
                     for (difference, expression, expected), answer in zip(classes.CASES, answers, strict=True)
                     if not _agrees(expected, answer)]
    assert not disagreements, "\n".join(disagreements)


@pytest.mark.parametrize("kind", ["ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"])
def test_match_conditions_over_their_budget_are_answered_as_kube_apiserver_answers(tmp_path: Path,
                                                                                   kind: str) -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
           "spec": {"replicas": 3, "text": "a" * 50_000, "needle": "b" * 1_500}}
    objects, reviews, expected = [], [], []
    for index, case in enumerate(budget.CASES):
        conditions, failure_policy, denied = case.values
        spec: dict[str, Any] = {"failurePolicy": failure_policy, "matchConditions": conditions}
        if kind == "ValidatingAdmissionPolicy":
            spec["validations"] = [{"expression": "object.spec.replicas < 0"}]
        else:
            spec["reinvocationPolicy"] = "Never"
            spec["mutations"] = [{"patchType": "JSONPatch", "jsonPatch": {
                "expression": "[JSONPatch{op: 'add', path: '/metadata/labels/seen', value: 'yes'}]"}}]
        objects += _selecting(index, kind, spec)
        reviews.append(_review(index, obj))
        expected.append(denied)
    write_manifests(tmp_path, objects)
    answers = oracle_answers(tmp_path, reviews)
    for case, answer, denied in zip(budget.CASES, answers, expected, strict=True):
        # Where the conditions do not deny, the validating policy's own validation denies, the mutation patches.
        if denied:
            assert not answer.allowed and answer.message.endswith(budget.OUT_OF_BUDGET), (case.id, answer)
        elif kind == "ValidatingAdmissionPolicy":
            assert answer.allowed, (case.id, answer)
        else:
            assert answer.allowed and answer.patched is None, (case.id, answer)


def test_the_policy_text_classes_are_answered_as_kube_apiserver_answers(tmp_path: Path) -> None:
    reviews = texts.write_cases(tmp_path)
    answers = oracle_answers(tmp_path, reviews)
    disagreements = [f"{difference}: {spec}: {problem}"
                     for index, ((difference, spec, expected), answer) in enumerate(zip(texts.CASES, answers,
                                                                                        strict=True))
                     if (problem := texts.disagreement(index, expected, answer)) is not None]
    assert not disagreements, "\n".join(disagreements)


@pytest.mark.parametrize(("name", "text", "expected"), documents.CASES, ids=[case[0] for case in documents.CASES])
def test_manifest_files_load_as_kube_apiserver_loads_them(tmp_path: Path, name: str, text: str,
                                                          expected: str | None) -> None:
    directory = documents.write_case(tmp_path, text)
    try:
        oracle_answers(directory, [])
    except LoadRefused as refused:
        assert expected is not None and expected in str(refused), f"{name}: kube-apiserver refused it: {refused}"
    else:
        assert expected is None, f"{name}: kube-apiserver loaded it"
