"""Policies built to be slow, and requests that feed them."""

from __future__ import annotations

from typing import Any

from tests.policy_text import validating_policy_yaml, validation_yaml

GROUP = "hostile.example.com"


def policy_yaml(name: str, resource: str, expression: str, failure_policy: str = "Fail") -> str:
    """A policy matching ``resource`` in the hostile group, with its Deny binding."""
    return validating_policy_yaml(name, group=GROUP, resource=resource, operations='["CREATE", "UPDATE"]',
                                  failure_policy=failure_policy,
                                  validations=validation_yaml(expression, f"{name} rejected the object"))


def hostile_review(resource: str, spec: dict[str, Any], *, uid: str = "hostile") -> dict[str, Any]:
    kind = resource.rstrip("s").capitalize()
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": GROUP, "version": "v1", "kind": kind},
            "resource": {"group": GROUP, "version": "v1", "resource": resource},
            "operation": "CREATE",
            "name": "x",
            "namespace": "default",
            "userInfo": {"username": "mallory"},
            "object": {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": "x", "namespace": "default"},
                       "spec": spec},
        },
    }


#: name -> (resource, expression, failurePolicy, request spec). Each is cut by the CEL layer's budget
#: (1M comprehension iterations per expression, 0.1 s of CEL per request).
BUDGETED: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "nested-comprehensions": (
        "cubes", "object.spec.items.all(a, object.spec.items.all(b, object.spec.items.all(c, a + b + c >= 0)))",
        "Fail", {"items": list(range(400))}),
    "nested-comprehensions-ignored": (
        "squares", "object.spec.items.all(a, object.spec.items.all(b, a * b >= 0 && string(a).size() > 0))",
        "Ignore", {"items": list(range(3000))}),
    "string-building": (
        "strings", "object.spec.items.all(i, (object.spec.big + object.spec.big + object.spec.big).size() > 0 "
                   "&& object.spec.items.map(j, string(i) + string(j)).size() > 0)",
        "Fail", {"items": list(range(2000)), "big": "b" * 200_000}),
    "heavy-regex": (
        "regexes", "object.spec.strs.all(s, object.spec.items.all(i, s.matches('^(a|aa|aaa)*(b|c)+[^x]*$')))",
        "Fail", {"strs": ["a" * 20_000] * 50, "items": list(range(200))}),
}
