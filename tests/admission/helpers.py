"""Builders shared by the admission tests: real manifests through the real loader, no stand-ins."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from staticadm.admission.namespaces import NamespaceSource, RequestOnlyNamespaces, parse_namespaces
from staticadm.admission.request import AdmissionRequest, parse_admission_review
from staticadm.admission.validating.dispatcher import ValidationOutcome, evaluate_validating
from staticadm.manifests.loader import load_manifest_directory
from staticadm.snapshot import Snapshot, build_snapshot

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"



#: Object and namespace selectors that generated policy sets draw from (None: no selector).
SELECTORS = (None, {"matchLabels": {"app": "web"}}, {"matchExpressions": [{"key": "app", "operator": "NotIn",
                                                                          "values": ["db"]}]})
NAMESPACE_SELECTORS = (None, {"matchLabels": {"env": "prod"}}, {"matchExpressions": [{"key": "env",
                                                                                      "operator": "Exists"}]})
#: An objectSelector and a namespaceSelector drawn from those (each left out when None): a policy's
#: matchConstraints or a binding's matchResources take them as they are.
DRAWN_SELECTORS = st.tuples(st.sampled_from(SELECTORS), st.sampled_from(NAMESPACE_SELECTORS)).map(
    lambda chosen: {key: selector for key, selector in zip(("objectSelector", "namespaceSelector"), chosen, strict=True)
                    if selector is not None})
#: The namespaces those selectors are matched against: one labelled env=prod, one without env.
MATCHING_NAMESPACES = parse_namespaces("""
apiVersion: v1
kind: Namespace
metadata: {name: default, labels: {env: prod}}
---
apiVersion: v1
kind: Namespace
metadata: {name: staging, labels: {team: a}}
""")

def policy(name: str = "p.static.k8s.io", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
        "validations": [{"expression": "object.spec.replicas <= 5"}],
    }
    body.update(spec)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": body}


def binding(name: str = "b.static.k8s.io", policy_name: str = "p.static.k8s.io", actions: tuple[str, ...] = ("Deny",),
            **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"policyName": policy_name, "validationActions": list(actions)}
    body.update(spec)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": body}


def snapshot(tmp_path: Path, *objects: dict[str, Any]) -> Snapshot:
    directory = tmp_path / "manifests"
    directory.mkdir(exist_ok=True)
    (directory / "all.yaml").write_text(yaml.safe_dump_all(objects))
    loaded = load_manifest_directory(str(directory))
    assert not loaded.errors, [str(e) for e in loaded.errors]
    return build_snapshot(loaded)


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
              "spec": {"replicas": 10}}


def review(*, operation: str = "CREATE", obj: Any = "default", old: Any = None, namespace: str = "default",
           name: str = "web", group: str = "apps", version: str = "v1", resource: str = "deployments",
           kind: str = "Deployment", sub: str = "", api_version: str = "admission.k8s.io/v1",
           **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": UID,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name, "namespace": namespace, "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": copy.deepcopy(DEPLOYMENT) if obj == "default" else obj,
        "oldObject": old,
    }
    if sub:
        request["subResource"] = sub
        request["requestSubResource"] = sub
    request.update(extra)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def parsed(raw: dict[str, Any]) -> AdmissionRequest:
    result = parse_admission_review(raw)
    assert isinstance(result, AdmissionRequest), result
    return result


def evaluate(snap: Snapshot, raw: dict[str, Any], namespaces: NamespaceSource | None = None) -> ValidationOutcome:
    return evaluate_validating(snap, namespaces or RequestOnlyNamespaces(), parsed(raw))


def denied(policy_name: str, binding_name: str, message: str, code: int = 422, reason: str = "Invalid",
           api_version: str = "admission.k8s.io/v1", **response: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"uid": UID, "allowed": False, "status": {
        "code": code, "reason": reason,
        "message": f"ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' "
                   f"denied request: {message}"}}
    body.update(response)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": body}


def allowed(api_version: str = "admission.k8s.io/v1", **response: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": {"uid": UID, "allowed": True, **response}}


def cel_error(expression: str, variables: dict[str, Any] | None = None) -> str:
    """The CEL layer's own error text for ``expression`` (its wording is tested in tests/cel)."""
    from staticadm.cel import EvalError, evaluate_standalone

    outcome = evaluate_standalone(expression, {"object": copy.deepcopy(DEPLOYMENT), **(variables or {})})
    assert isinstance(outcome, EvalError), outcome
    return outcome.message


#: What a request matching reads can differ by: its name (resourceNames), namespace (selectors, known or not), the
#: object's labels and, for an UPDATE, the old object's (None: a CREATE); ``shaped_request`` builds it.
MATCHING_SHAPES = st.fixed_dictionaries({
    "name": st.sampled_from(("web", "db")),
    "namespace": st.sampled_from(("default", "staging", "unknown")),
    "labels": st.sampled_from(({"app": "web"}, {"app": "db"}, {})),
    "old_labels": st.sampled_from((None, {"app": "web"}, {"app": "db"})),
    "replicas": st.sampled_from((1, 7)),
})


def shaped_request(shape: dict[str, Any]) -> AdmissionRequest:
    """A Deployment CREATE (or UPDATE, with ``old_labels``) of the ``MATCHING_SHAPES`` drawn."""
    obj = copy.deepcopy(DEPLOYMENT)
    obj["metadata"].update(name=shape["name"], namespace=shape["namespace"], labels=shape["labels"])
    obj["spec"].update(replicas=shape["replicas"], items=[1, 2])
    old = None
    if shape["old_labels"] is not None:
        old = copy.deepcopy(obj)
        old["metadata"]["labels"] = shape["old_labels"]
    return parsed(review(obj=obj, old=old, operation="UPDATE" if old else "CREATE", name=shape["name"],
                         namespace=shape["namespace"]))
