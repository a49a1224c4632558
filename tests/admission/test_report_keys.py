"""Every ``-o json`` report keys its fields in camelCase, as Kubernetes does, and the page on machine-readable output
names every field of the published ReviewResult schema."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import yaml

from staticadm.cli import main
from tests.server.harness import REPO_ROOT

EXAMPLES = REPO_ROOT / "manifests" / "examples"
POD = EXAMPLES / "tests" / "pod.yaml"
SCHEMAS = sorted((REPO_ROOT / "staticadm" / "schemas").glob("*.schema.json"))
CAMEL = re.compile(r"[a-z][a-zA-Z0-9]*")
#: Fields holding Kubernetes' own objects or free-form maps, whose keys are not the report's.
FOREIGN = frozenset({"object", "oldObject", "review", "response", "patch", "value", "auditAnnotations", "userInfo",
                     "annotations", "labels", "spec", "metadata"})


def _keys(value: Any, path: str = "$") -> list[str]:
    found = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if not CAMEL.fullmatch(key):
                found.append(f"{path}.{key}")
            if key not in FOREIGN:
                found.extend(_keys(inner, f"{path}.{key}"))
    elif isinstance(value, list):
        for inner in value:
            found.extend(_keys(inner, f"{path}[]"))
    return found


def _json(*args: str) -> list[Any]:
    out = io.StringIO()
    main(list(args), stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines()]


def test_every_report_keys_its_fields_in_camel_case(tmp_path: Path) -> None:
    empty, stricter = tmp_path / "live", tmp_path / "new"
    empty.mkdir()
    stricter.mkdir()
    (stricter / "pods.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "no-pods.static.k8s.io"},
         "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["pods"]}]},
                  "validations": [{"expression": "false", "message": "no pods"}],
                  "auditAnnotations": [{"key": "seen", "valueExpression": "'yes'"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "no-pods.static.k8s.io"},
         "spec": {"policyName": "no-pods.static.k8s.io", "validationActions": ["Deny"]}}]))
    broken = tmp_path / "broken.test.yaml"
    broken.write_text(yaml.safe_dump({"apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest",
                                      "metadata": {"name": "broken"}, "spec": {"manifests": "missing"}}))
    reports = {
        "check": _json("check", str(EXAMPLES), "-o", "json"),
        "review": _json("review", str(EXAMPLES), str(POD), "-o", "json"),
        "test": _json("test", str(EXAMPLES / "tests"), str(broken), "-o", "json"),
        "diff": _json("diff", str(empty), str(stricter), str(POD), "-o", "json"),
    }
    assert reports["diff"][0]["differences"], "the diff compared nothing"
    offending = {command: keys for command, documents in reports.items()
                 for keys in [[key for document in documents for key in _keys(document)]] if keys}
    assert not offending, offending


def _schema_fields(value: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "properties":
                names.update(inner)
            names |= _schema_fields(inner)
    elif isinstance(value, list):
        for inner in value:
            names |= _schema_fields(inner)
    return names


def test_the_machine_readable_output_page_names_every_field_of_the_schemas() -> None:
    page = (REPO_ROOT / "docs" / "policy-tests.md").read_text(encoding="utf-8")
    section = page[page.index("## Machine-readable output"):]
    assert len(SCHEMAS) >= 2, SCHEMAS
    for schema in SCHEMAS:
        assert f"`staticadm/schemas/{schema.name}`" in section, schema.name
        fields = _schema_fields(json.loads(schema.read_text()))
        assert not [name for name in fields if not CAMEL.fullmatch(name)]
        unnamed = sorted(name for name in fields if f"`{name}`" not in section)
        assert not unnamed, f"fields of {schema.name} the page does not name: {unnamed}"
