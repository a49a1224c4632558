"""Texts a whole policy produces (messages, messageExpression results, audit annotation values) as kube-apiserver
words them, found by issue 44's red-team rounds.

Every expectation is kube-apiserver's, as its own admission code answers it (``../shared/oracle``):
``tests/differential/test_known_classes.py`` replays this table through the oracle. The object is
``tests/cel/test_generated_differences.py``'s custom kind.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cel.test_generated_differences import OBJECT
from tests.differential.generators import API
from tests.differential.harness import Answer, staticadm_answers, write_manifests

WIDGETS = {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["widgets"]}]}


@dataclass(frozen=True)
class Expected:
    """kube-apiserver's answer: allowed, the message after ``denied request: `` and the audit annotations (keys
    without the policy's prefix)."""

    allowed: bool
    message: str = ""
    audit: dict[str, str] = field(default_factory=dict)


#: (class, the ValidatingAdmissionPolicy's spec beyond its matchConstraints, kube-apiserver's answer).
CASES: list[tuple[str, dict[str, Any], Expected]] = [
    # validating/validator.go trims with strings.TrimSpace, whose unicode.IsSpace keeps U+001C..U+001F.
    ("TrimSpace", {"validations": [{"expression": "false", "messageExpression": "'\\x1c'"}]}, Expected(False, "\x1c")),
    ("TrimSpace", {"validations": [{"expression": "false", "messageExpression": "'static\\x1f'"}]},
     Expected(False, "static\x1f")),
    ("TrimSpace", {"validations": [{"expression": "false", "message": " static\x1f "}]}, Expected(False, "static\x1f")),
    ("TrimSpace", {"validations": [{"expression": "true"}], "auditAnnotations": [
        {"key": "k", "valueExpression": "' v\\x1e '"}]}, Expected(True, audit={"k": "v\x1e"})),
    ("TrimSpace", {"validations": [{"expression": "false", "messageExpression": "' \\u2028x\\u00a0\\u3000'"}]},
     Expected(False, "x")),
    # cel-go evaluates a composited variable as a program of its own, whose Eval recovers the panic of sort()/
    # distinct() handed a failing operand: the variable fails, and what reads it may absorb that error.
    ("lister panic", {"variables": [{"name": "x", "expression": "['b','a'].slice(1, 0).sort()"}],
                      "validations": [{"expression": "variables.x.size() == 0 || true"}]}, Expected(True)),
    ("lister panic", {"variables": [{"name": "x", "expression": "['b','a'].slice(1, 0).sort()"},
                                    {"name": "yy", "expression": "variables.x == [] || true"}],
                      "validations": [{"expression": "variables.yy"}]}, Expected(True)),
    ("lister panic", {"variables": [{"name": "x", "expression": "object.spec.items.distinct()"}],
                      "validations": [{"expression": "variables.x.size() == 0"}]},
     Expected(False, "expression 'variables.x.size() == 0' resulted in error: composited variable \"x\" fails to "
                     "evaluate: internal error: interface conversion: *types.Err is not traits.Lister: missing method "
                     "Add")),
    ("lister panic", {"variables": [{"name": "v", "expression": "object.spec.nope"},
                                    {"name": "w", "expression": "variables.v.distinct()"}],
                      "validations": [{"expression": "variables.w.size() == 0 || true"},
                                      {"expression": "variables.w.size() == 0"}]},
     Expected(False, "expression 'variables.w.size() == 0' resulted in error: composited variable \"w\" fails to "
                     "evaluate: internal error: interface conversion: *types.Err is not traits.Lister: missing method "
                     "Add")),
    ("lister panic", {"variables": [{"name": "v", "expression": "object.spec.nope"}],
                      "validations": [{"expression": "variables.v.size() > 0 || ['b','a'].slice(1, 0).sort() == []"}]},
     Expected(False, "expression 'variables.v.size() > 0 || ['b','a'].slice(1, 0).sort() == []' resulted in error: "
                     "internal error: interface conversion: *types.Err is not traits.Lister: missing method Add")),
    ("lister panic", {"validations": [{"expression": "['b','a'].slice(1, 0).sort() == [] || true"}],
                      "failurePolicy": "Ignore"}, Expected(True)),
    ("lister panic", {"validations": [{"expression": "true"}], "auditAnnotations": [
        {"key": "k", "valueExpression": "['b','a'].slice(1, 0).sort().join(',') + 'x'"}]},
     Expected(False, "expression '['b','a'].slice(1, 0).sort().join(',') + 'x'' resulted in error: internal error: "
                     "interface conversion: *types.Err is not traits.Lister: missing method Add")),
]


def policy_objects(index: int, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The policy of one case and its Deny binding, selecting the request labelled with the case's index."""
    name = f"case{index}.static.k8s.io"
    constraints = {**WIDGETS, "objectSelector": {"matchLabels": {"case": str(index)}}}
    return [{"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
             "spec": {"matchConstraints": constraints, **spec}},
            {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": {"name": f"case{index}b.static.k8s.io"},
             "spec": {"policyName": name, "validationActions": ["Deny"]}}]


def review_of(index: int) -> dict[str, Any]:
    labelled = copy.deepcopy(OBJECT)
    labelled["metadata"]["labels"] = {"case": str(index)}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"case-{index}", "kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
        "resource": {"group": "example.com", "version": "v1", "resource": "widgets"},
        "name": "w", "namespace": "default", "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": labelled}}


def write_cases(directory: Path) -> list[dict[str, Any]]:
    """Writes every case's policy into ``directory``; the requests, in the cases' order."""
    write_manifests(directory, [item for index, (_, spec, _) in enumerate(CASES)
                                for item in policy_objects(index, spec)])
    return [review_of(index) for index in range(len(CASES))]


def disagreement(index: int, expected: Expected, answer: Answer) -> str | None:
    """What of ``answer`` differs from kube-apiserver's expected one, or None."""
    prefix = (f"ValidatingAdmissionPolicy 'case{index}.static.k8s.io' with binding 'case{index}b.static.k8s.io' "
              "denied request: ")
    message = prefix + expected.message if not expected.allowed else ""
    audit = {f"case{index}.static.k8s.io/{key}": value for key, value in expected.audit.items()}
    found = (answer.allowed, answer.message, dict(answer.audit_annotations))
    if found != (expected.allowed, message, audit):
        return f"expected {(expected.allowed, message, audit)!r}, got {found!r}"
    return None


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> list[Answer]:
    directory = tmp_path_factory.mktemp("policy-texts")
    return staticadm_answers(directory, write_cases(directory))


@pytest.mark.parametrize(("index", "difference", "spec", "expected"),
                         [(index, *case) for index, case in enumerate(CASES)],
                         ids=[f"{index}-{case[0]}" for index, case in enumerate(CASES)])
def test_kube_apiserver_text(answers: list[Answer], index: int, difference: str, spec: dict[str, Any],
                             expected: Expected) -> None:
    problem = disagreement(index, expected, answers[index])
    assert problem is None, f"{difference}: {spec}: {problem}"
