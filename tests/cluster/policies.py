"""The policies the cluster-view tests load: one ValidatingAdmissionPolicy on CREATE of one core resource,
and its binding."""

from __future__ import annotations

from tests.policy_text import validating_policy_yaml


def policy(name: str, resource: str, validations: str, binding_match: str = "") -> str:
    """``validations`` and ``binding_match`` are YAML as it stands under ``spec`` (two-space indent)."""
    return validating_policy_yaml(name, resource=resource, validations=validations, binding_match=binding_match)
