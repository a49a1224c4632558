"""The report schemas the tests check against are the published CRDs': each names where it came from, and the
generator makes exactly the committed file from those sources (when clones of them are given)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.reports.schemas import SCHEMAS
from tools.generate_report_schemas import SOURCES, closed, main

#: Clones of the two source repositories, for regenerating the schemas (not in CI: they are fetched, not shared).
CLONES = {"wg": "STATICADM_WG_POLICY_PROTOTYPES", "openreports": "STATICADM_OPENREPORTS_REPORTS_API"}


def test_each_schema_names_its_repository_path_and_commit() -> None:
    document = json.loads(SCHEMAS.read_text())
    assert set(document["schemas"]) == {f"{api_version}/{kind}" for api_version, kind in SOURCES}
    for key, provenance in document["provenance"].items():
        assert provenance["repository"] in ("https://github.com/kubernetes-sigs/wg-policy-prototypes",
                                            "https://github.com/openreports/reports-api")
        assert re.fullmatch(r"[0-9a-f]{40}", provenance["commit"]), key
        assert provenance["path"].endswith(".yaml") and provenance["scope"] in ("Namespaced", "Cluster")
        results = document["schemas"][key]["properties"]["results"]["items"]
        assert results["additionalProperties"] is False and "result" in results["properties"]


def test_objects_that_name_their_fields_are_closed_as_kube_apiserver_prunes_them() -> None:
    schema = {"type": "object", "description": "x", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "string", "description": "y"}}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"c": {}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"d": {"type": "integer"}}}}}}
    assert closed(schema) == {"type": "object", "additionalProperties": False, "properties": {
        "a": {"type": "object", "additionalProperties": False, "properties": {"b": {"type": "string"}}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"c": {}}},
        "list": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                            "properties": {"d": {"type": "integer"}}}}}}


def test_the_generator_makes_the_committed_file_from_the_published_crds(tmp_path: Path) -> None:
    clones = {name: os.environ.get(variable) for name, variable in CLONES.items()}
    if not all(clones.values()):
        pytest.skip(f"set {' and '.join(CLONES.values())} to clones of kubernetes-sigs/wg-policy-prototypes and "
                    "openreports/reports-api at the commits the schema file names to regenerate it")
    output = tmp_path / "schemas.json"
    assert main(["--wg-policy-prototypes", str(clones["wg"]), "--reports-api", str(clones["openreports"]),
                 "--output", str(output)]) == 0
    assert json.loads(output.read_text()) == json.loads(SCHEMAS.read_text())
