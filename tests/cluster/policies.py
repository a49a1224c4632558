"""The policies the cluster-view tests load: one ValidatingAdmissionPolicy on CREATE of one core resource,
and its binding."""

from __future__ import annotations


def policy(name: str, resource: str, validations: str, binding_match: str = "") -> str:
    """``validations`` and ``binding_match`` are YAML as it stands under ``spec`` (two-space indent)."""
    full = f"{name}.static.k8s.io"
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {full}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["{resource}"]
  validations:
{validations}---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {full}
spec:
  policyName: {full}
  validationActions: [Deny]
{binding_match}"""
