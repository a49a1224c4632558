"""tools/generate_openapi_schemas.py on a small hand-written OpenAPI v3 document, then merged with SchemaCatalog."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from staticadm.patch.apply import AtomicMutationError, PatchSchemaError, SchemaCatalog, apply_configuration

ROOT = Path(__file__).resolve().parents[2]


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_openapi_schemas", ROOT / "tools" / "generate_openapi_schemas.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


P = "#/components/schemas/"
SPEC: dict[str, Any] = {
    "components": {
        "schemas": {
            "example.v1.Widget": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Widget"}],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"allOf": [{"$ref": P + "example.v1.Meta"}], "default": {}},
                    "spec": {"$ref": P + "example.v1.Spec"},
                },
            },
            "example.v1.WidgetList": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "WidgetList"}],
                "properties": {"items": {"type": "array", "items": {"$ref": P + "example.v1.Widget"}}},
            },
            "example.v1.Meta": {
                "type": "object",
                "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}},
            },
            "example.v1.Spec": {
                "type": "object",
                "properties": {
                    "ports": {
                        "type": "array",
                        "items": {"$ref": P + "example.v1.Port"},
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port", "protocol"],
                    },
                    # no list-type: the v2-era patch strategy is honoured
                    "owners": {
                        "type": "array",
                        "items": {"$ref": P + "example.v1.Owner"},
                        "x-kubernetes-patch-strategy": "merge",
                        "x-kubernetes-patch-merge-key": "uid",
                    },
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "selector": {"$ref": P + "example.v1.Meta", "x-kubernetes-map-type": "atomic"},
                    "free": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {"a": {"type": "integer"}},
                    },
                    "size": {"$ref": P + "io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
                    "quantity": {"$ref": P + "io.k8s.apimachinery.pkg.api.resource.Quantity"},
                    "raw": {"$ref": P + "io.k8s.apimachinery.pkg.runtime.RawExtension"},
                    "closed": {"type": "object", "additionalProperties": False},
                },
            },
            "example.v1.Port": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "port": {"type": "integer"},
                    "protocol": {"type": "string", "default": "TCP"},
                },
            },
            "example.v1.Owner": {
                "type": "object",
                "properties": {"uid": {"type": "string"}, "name": {"type": "string"}},
            },
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            },
            "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
            "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object"},
        }
    }
}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> SchemaCatalog:
    d = tmp_path_factory.mktemp("v3")
    (d / "apis__example.com__v1_openapi.json").write_text(json.dumps(SPEC))
    out = d / "out.json.gz"
    tool = load_tool()
    assert tool.main(["--openapi-v3-dir", str(d), "--kubernetes-version", "0.0.1", "-o", str(out)]) == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert doc["meta"]["kubernetesVersion"] == "0.0.1" and "openapi-spec/v3" in doc["meta"]["source"]
    assert doc["gvks"] == {"example.com/v1": {"Widget": "example.v1.Widget"}}  # List kinds dropped
    types = doc["types"]
    assert types["example.v1.Port"]["map"]["defaults"] == {"protocol": "TCP"}
    assert types["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] == "@__untyped_deduced_"
    assert types["io.k8s.apimachinery.pkg.api.resource.Quantity"] == "untyped"
    assert "io.k8s.apimachinery.pkg.runtime.RawExtension" not in types
    return SchemaCatalog(doc)


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"labels": {"a": "1"}}, "spec": spec}


def test_generated_schema_merges(catalog: SchemaCatalog) -> None:
    s = catalog.schema_for("example.com/v1", "Widget")
    assert not s.deduced
    obj = widget(ports=[{"port": 1, "protocol": "TCP"}], owners=[{"uid": "u1", "name": "a"}], free={"a": 1})
    patch = {
        "metadata": {"labels": {"b": "2"}},
        "spec": {
            "ports": [{"port": 1, "name": "x"}, {"port": 2}],
            "owners": [{"uid": "u1", "name": "b"}],
            "free": {"anything": {"goes": [1]}},
            "size": "50%",
            "quantity": 1,
        },
    }
    out = apply_configuration(obj, patch, s)
    assert out["spec"]["ports"] == [{"port": 1, "protocol": "TCP", "name": "x"}, {"port": 2}]
    assert out["spec"]["owners"] == [{"uid": "u1", "name": "b"}]
    assert out["spec"]["free"] == {"a": 1, "anything": {"goes": [1]}}
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"spec": {"tags": ["x"]}}, ".spec.tags"),
        ({"spec": {"selector": {"labels": {}}}}, ".spec.selector"),
        ({"spec": {"raw": {"a": 1}}}, ".spec.raw"),
    ],
)
def test_generated_atomics(catalog: SchemaCatalog, patch: dict[str, Any], path: str) -> None:
    with pytest.raises(AtomicMutationError, match=rf": {path}$"):
        apply_configuration(widget(), patch, catalog.schema_for("example.com/v1", "Widget"))


def test_generated_closed_map(catalog: SchemaCatalog) -> None:
    with pytest.raises(PatchSchemaError, match=r"\.spec\.closed\.x: field not declared in schema$"):
        apply_configuration(widget(), {"spec": {"closed": {"x": 1}}}, catalog.schema_for("example.com/v1", "Widget"))
