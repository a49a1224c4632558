"""Helpers shared by the manifest tests: real files in temporary directories."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from staticadm.manifests import LoadResult, ManifestError, load_manifest_directory

V1 = "admissionregistration.k8s.io/v1"

VAP: dict[str, Any] = {
    "apiVersion": V1,
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "p.static.k8s.io"},
    "spec": {
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}
            ]
        },
        "validations": [{"expression": "object.spec.replicas <= 5"}],
    },
}
VAPB: dict[str, Any] = {
    "apiVersion": V1,
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "b.static.k8s.io"},
    "spec": {"policyName": "p.static.k8s.io", "validationActions": ["Deny"]},
}
MAP: dict[str, Any] = {
    "apiVersion": V1,
    "kind": "MutatingAdmissionPolicy",
    "metadata": {"name": "m.static.k8s.io"},
    "spec": {
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
            ]
        },
        "reinvocationPolicy": "Never",
        "mutations": [
            {
                "patchType": "JSONPatch",
                "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/metadata/labels', value: {}}]"},
            }
        ],
    },
}
MAPB: dict[str, Any] = {
    "apiVersion": V1,
    "kind": "MutatingAdmissionPolicyBinding",
    "metadata": {"name": "mb.static.k8s.io"},
    "spec": {"policyName": "m.static.k8s.io"},
}


def obj(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with dotted-path changes; a value of ``DELETE`` removes the key."""
    result = copy.deepcopy(base)
    for dotted, value in changes.items():
        keys = dotted.split("__")
        target = result
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
        last: Any = int(keys[-1]) if isinstance(target, list) else keys[-1]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value
    return result


DELETE = object()


def write_yaml(directory: Path, name: str, *docs: Any) -> Path:
    path = directory / name
    path.write_text("---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in docs))
    return path


def write_json(directory: Path, name: str, doc: Any) -> Path:
    path = directory / name
    path.write_text(json.dumps(doc))
    return path


def load(directory: Path, **kwargs: Any) -> LoadResult:
    return load_manifest_directory(str(directory), **kwargs)


def find(result: LoadResult, field: str, fragment: str = "") -> ManifestError:
    """The error on ``field`` whose message contains ``fragment``; fails listing all errors."""
    for error in result.errors:
        if error.field == field and fragment in error.message:
            return error
    listing = "\n".join(f"  {e.field!r}: {e}" for e in result.errors)
    raise AssertionError(f"no error on {field!r} containing {fragment!r}; errors:\n{listing}")


def structural_errors(result: LoadResult) -> list[ManifestError]:
    """Errors not caused by CEL compilation, for tests about files and decoding only."""
    return [e for e in result.errors if "staticadm.cel" not in e.message and not e.field.lower().endswith("expression")]
