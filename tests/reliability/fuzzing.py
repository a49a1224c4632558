"""Hypothesis strategies for hostile AdmissionReviews and manifests, and the example budget.

The suite runs a short budget; ``STATICADM_FUZZ_SCALE=N`` multiplies every test's ``max_examples``
for a long run by hand.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE = max(1, int(os.environ.get("STATICADM_FUZZ_SCALE", "1")))


def budget(examples: int) -> settings:
    return settings(max_examples=examples * SCALE, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# Odd text: control characters, bidi overrides, combining marks, non-characters, astral planes.
ODD_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from([
    "", "\u202e", "\u0000", "\ufeff", "\uffff", "a\u0301" * 20, "😀" * 10, "\U0010ffff", "CREATE\u200b",
    "admission.k8s.io/v1\u0000", "../../etc/passwd", "%s%n", "${jndi:x}",
])

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | ODD_TEXT)

JSON = st.recursive(SCALARS, lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(ODD_TEXT, children, max_size=4), max_leaves=12)


def valid_review(api_version: str = "admission.k8s.io/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": "fuzz-uid",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "",
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "uid": "1", "groups": ["system:authenticated"],
                         "extra": {"scopes": ["a"]}},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "web", "namespace": "default", "labels": {"deny": "true"}},
                       "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


#: Paths into a review that a mutation may replace with any JSON value, or delete.
PATHS: tuple[tuple[str, ...], ...] = (
    ("apiVersion",), ("kind",), ("request",), ("response",), ("request", "uid"), ("request", "kind"),
    ("request", "kind", "group"), ("request", "kind", "version"), ("request", "kind", "kind"),
    ("request", "resource"), ("request", "resource", "resource"), ("request", "subResource"),
    ("request", "requestKind"), ("request", "requestResource"), ("request", "requestSubResource"),
    ("request", "name"), ("request", "namespace"), ("request", "operation"), ("request", "userInfo"),
    ("request", "userInfo", "username"), ("request", "userInfo", "groups"), ("request", "userInfo", "extra"),
    ("request", "userInfo", "extra", "scopes"), ("request", "object"), ("request", "object", "metadata"),
    ("request", "object", "metadata", "labels"), ("request", "object", "metadata", "labels", "deny"),
    ("request", "object", "spec"), ("request", "object", "spec", "containers"), ("request", "oldObject"),
    ("request", "dryRun"), ("request", "options"),
)

API_VERSIONS = st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "admission.k8s.io/v2",
                                "v1", "", "admission.k8s.io/V1"])


@st.composite
def mutated_reviews(draw: st.DrawFn) -> Any:
    """A valid review with a few fields replaced by values of any type, deleted, or versions mixed."""
    document: Any = valid_review(draw(API_VERSIONS))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(PATHS))
        parent = document
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if draw(st.booleans()) and path[-1] in parent:
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON)
    return document


REVIEWS = mutated_reviews() | JSON


def deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for index in range(depth):
        value = {"a": value} if index % 2 else [value]
    return value


# -- manifests -----------------------------------------------------------------------------------------


VALID_POLICY: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "fuzz.static.k8s.io", "labels": {"a": "b"}},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                "operations": ["CREATE"], "resources": ["pods"]}]},
        "matchConditions": [{"name": "m", "expression": "true"}],
        "variables": [{"name": "v", "expression": "object.metadata.name"}],
        "validations": [{"expression": "variables.v != 'x'", "message": "no", "reason": "Forbidden"}],
        "auditAnnotations": [{"key": "k", "valueExpression": "'v'"}],
    },
}
VALID_BINDING: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "fuzz.static.k8s.io"},
    "spec": {"policyName": "fuzz.static.k8s.io", "validationActions": ["Deny"],
             "matchResources": {"namespaceSelector": {"matchLabels": {"a": "b"}}}},
}

MANIFEST_PATHS: tuple[tuple[str, ...], ...] = (
    ("apiVersion",), ("kind",), ("metadata",), ("metadata", "name"), ("metadata", "labels"), ("spec",),
    ("spec", "failurePolicy"), ("spec", "matchConstraints"), ("spec", "matchConstraints", "resourceRules"),
    ("spec", "matchConditions"), ("spec", "variables"), ("spec", "validations"), ("spec", "auditAnnotations"),
    ("spec", "policyName"), ("spec", "validationActions"), ("spec", "matchResources"), ("spec", "paramKind"),
)

CEL_SNIPPETS = st.sampled_from([
    "object.metadata.name", "1 +", "size(object) > 0", "object.spec.containers.all(c, c.image != '')",
    "params.x", "math.greatest(1, 2)", "'\\u0000'", "has(object.a.b.c)", "[1,2,3].map(x, x * x)",
    "cel.bind(x, 1, x)", "authorizer.requestResource.check('get').allowed()", "quantity('1Gi')",
    "x" * 5000, "(" * 200 + "1" + ")" * 200, "variables.v.size()", "'a'.matches('(')",
])


@st.composite
def mutated_manifests(draw: st.DrawFn) -> list[Any]:
    """A policy and its binding, with a few fields replaced by any JSON value or a CEL snippet."""
    objects = [copy.deepcopy(VALID_POLICY), copy.deepcopy(VALID_BINDING)]
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        target = draw(st.sampled_from(objects))
        path = draw(st.sampled_from(MANIFEST_PATHS))
        parent = target
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        choice = draw(st.integers(min_value=0, max_value=3))
        if choice == 0:
            parent.pop(path[-1], None)
        elif choice == 1 and path[-1] in ("validations", "matchConditions", "variables"):
            parent[path[-1]] = [{"name": "v", "expression": draw(CEL_SNIPPETS), "message": "m"}]
        else:
            parent[path[-1]] = draw(JSON)
    return objects
