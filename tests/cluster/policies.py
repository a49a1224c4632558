"""The policies the cluster-view tests load: one ValidatingAdmissionPolicy on CREATE of one core resource,
and its binding."""

from __future__ import annotations

from tests.policy_text import validating_policy_yaml


def policy(name: str, resource: str, validations: str, binding_match: str = "", variables: str = "") -> str:
    """``validations``, ``binding_match`` and ``variables`` are YAML as it stands under ``spec`` (two-space
    indent)."""
    return validating_policy_yaml(name, resource=resource, validations=validations, binding_match=binding_match,
                                  variables=variables)
