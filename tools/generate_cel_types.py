#!/usr/bin/env python3
"""Generate ``staticadm/cel/schemas/kinds.json.gz``: the CEL types of the built-in Kubernetes kinds.

``staticadm check`` type-checks a ValidatingAdmissionPolicy's expressions against the kinds its match
constraints select, as kube-apiserver's ``TypeChecker`` does with ``common.SchemaDeclType`` over the
resolved OpenAPI schema. This keeps what that conversion reads: object properties, ``additionalProperties``
maps, array items, and the scalar type with the formats that change it (``byte`` -> bytes, ``date`` and
``date-time`` -> timestamp, ``duration`` -> duration; an integer's ``int32``/``int64``, which CEL reads as int and
the decoding of mutation results as the Go type); ``Quantity`` is a string and ``IntOrString``
(``x-kubernetes-int-or-string``) and schemas without a type (or with a choice of types) are ``dyn``.

Input: ``_definitions.json`` of the ``kubernetes-validate`` PyPI package (the Kubernetes OpenAPI
definitions of a release as JSON Schema)::

    pip download --no-deps -d /tmp/kv kubernetes-validate==1.37.0
    unzip -q /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl -d /tmp/kv/x
    python tools/generate_cel_types.py --kubernetes-version 1.36.0 \\
        /tmp/kv/x/kubernetes_validate/kubernetes-json-schema/v1.36.0-local/_definitions.json

Output (``format: 1``): ``{"meta": {...}, "kinds": {"<group>/<version>/<Kind>": "<definition>"},
"definitions": {"<definition>": type}}`` with
``type := "string" | "int" | "int32" | "int64" | "double" | "bool" | "bytes" | "timestamp" | "duration" | "dyn"
| {"ref": name} | {"list": type} | {"map": type} | {"object": {property: type}}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
from pathlib import Path
from typing import Any

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
REF_PREFIX = "#/$defs/"
OUTPUT = Path(__file__).resolve().parent.parent / "staticadm" / "cel" / "schemas" / "kinds.json.gz"


def _scalar(kind: str, schema: dict[str, Any]) -> Any:
    if kind == "string":
        return {"byte": "bytes", "date": "timestamp", "date-time": "timestamp",
                "duration": "duration"}.get(schema.get("format", ""), "string")
    if kind == "integer":
        # The Go type's width, for the errors of decoding into it (``staticadm/patch/decode.py``); CEL's is int.
        return {"int32": "int32", "int64": "int64"}.get(schema.get("format", ""), "int")
    return {"number": "double", "boolean": "bool"}.get(kind, "dyn")


def convert(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "dyn"
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF_PREFIX)
        return {"ref": name}
    if schema.get("x-kubernetes-int-or-string") or "oneOf" in schema or "anyOf" in schema:
        return "dyn"
    types = schema.get("type")
    if isinstance(types, list):
        types = [t for t in types if t != "null"]
        types = types[0] if len(types) == 1 else None
    if types == "array":
        return {"list": convert(schema.get("items"))}
    if types == "object" or (types is None and "properties" in schema):
        if schema.get("properties"):
            return {"object": {name: convert(value) for name, value in schema["properties"].items()}}
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            return {"map": convert(additional)}
        return "dyn"
    if isinstance(types, str):
        return _scalar(types, schema)
    return "dyn"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("definitions", type=Path)
    parser.add_argument("--kubernetes-version", required=True)
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args()
    source = json.loads(args.definitions.read_text())["$defs"]
    definitions: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for name, schema in source.items():
        definitions[name] = "string" if name == QUANTITY else "dyn" if name == INT_OR_STRING else convert(schema)
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            kinds[f"{gvk.get('group', '')}/{gvk['version']}/{gvk['kind']}"] = name
    document = {"meta": {"format": 1, "kubernetes": args.kubernetes_version, "source": args.definitions.name,
                         "generated": dt.date.today().isoformat(), "generator": "tools/generate_cel_types.py"},
                "kinds": dict(sorted(kinds.items())), "definitions": dict(sorted(definitions.items()))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as handle:
        json.dump(document, handle, separators=(",", ":"))
    print(f"{args.out}: {len(kinds)} kinds, {len(definitions)} definitions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
