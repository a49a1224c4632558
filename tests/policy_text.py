"""ValidatingAdmissionPolicy manifests as the daemon tests write them to disk: one policy and its Deny binding in
one file (so that they load together), with the parts a test varies left to it."""

from __future__ import annotations


def validating_policy_yaml(name: str, *, validations: str, group: str = "", resource: str = "pods",
                           operations: str = '["CREATE"]', failure_policy: str | None = "Fail", variables: str = "",
                           binding_match: str = "", actions: str = "[Deny]") -> str:
    """``validations``, ``variables`` and ``binding_match`` are YAML as it stands under ``spec`` (two-space
    indent); ``name`` gets the ``.static.k8s.io`` suffix; no ``failure_policy`` leaves Kubernetes' default."""
    full = f"{name}.static.k8s.io"
    failure = f"  failurePolicy: {failure_policy}\n" if failure_policy is not None else ""
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {full}
spec:
{failure}  matchConstraints:
    resourceRules:
    - apiGroups: ["{group}"]
      apiVersions: ["v1"]
      operations: {operations}
      resources: ["{resource}"]
{variables}  validations:
{validations}---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {full}
spec:
  policyName: {full}
  validationActions: {actions}
{binding_match}"""


def validation_yaml(expression: str, message: str) -> str:
    """One entry of ``validations`` (the expression quoted as a YAML flow scalar)."""
    return f"  - expression: {expression!r}\n    message: \"{message}\"\n"
