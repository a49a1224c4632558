"""Policies and objects that make every result a report can hold: pass, fail (Deny), warn (Warn only), error,
skip (a matchCondition), and a mutation; namespaced objects in three namespaces and a cluster-scoped one."""

from __future__ import annotations

from typing import Any

API = "admissionregistration.k8s.io/v1"
PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
NAMESPACES = {**PODS, "resources": ["namespaces"]}


def vap(name: str, rule: dict[str, Any], validations: list[dict[str, Any]], actions: list[str],
        **spec: Any) -> list[dict[str, Any]]:
    full = f"{name}.static.k8s.io"
    return [{"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": full},
             "spec": {"matchConstraints": {"resourceRules": [rule]}, "validations": validations, **spec}},
            {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": f"{name}-binding"
                                                                                                ".static.k8s.io"},
             "spec": {"policyName": full, "validationActions": actions}}]


MANIFESTS = [
    *vap("no-privileged", PODS, [{"expression": "object.spec.containers.all(c, !has(c.securityContext) || "
                                                "!has(c.securityContext.privileged) || !c.securityContext.privileged)",
                                  "messageExpression": "'privileged pod ' + object.metadata.name"}], ["Deny"]),
    *vap("team-label", PODS, [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                               "message": "no team label"}], ["Warn", "Audit"]),
    *vap("pinned-images", PODS, [{"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
                                  "message": "an image is :latest"}], ["Deny"],
         matchConditions=[{"name": "not-ops", "expression": "object.metadata.namespace != 'ops'"}]),
    *vap("node-pinned", PODS, [{"expression": "object.spec.nodeName == 'node-1'"}], ["Deny"],
         failurePolicy="Ignore"),
    *vap("namespace-owner", NAMESPACES, [{"expression": "has(object.metadata.labels) && "
                                                        "'owner' in object.metadata.labels",
                                          "message": "a namespace needs an owner label"}], ["Deny"]),
    {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": {"name": "add-managed.static.k8s.io"},
     "spec": {"matchConstraints": {"resourceRules": [PODS]}, "failurePolicy": "Fail", "reinvocationPolicy": "Never",
              "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                  "expression": "Object{metadata: Object.metadata{labels: {'managed': 'yes'}}}"}}]}},
    {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "add-managed.static.k8s.io"},
     "spec": {"policyName": "add-managed.static.k8s.io"}},
]


def pod(name: str, namespace: str, *, privileged: bool = False, team: bool = True,
        image: str = "nginx:1.27") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": image}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"team": "a"} if team else {}},
            "spec": {"containers": [container]}}


OBJECTS = [
    pod("ok", "shop"),
    pod("privileged", "shop", privileged=True),
    pod("no-team", "web", team=False),
    pod("latest", "ops", image="nginx:latest"),
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}},
]
