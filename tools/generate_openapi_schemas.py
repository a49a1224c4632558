#!/usr/bin/env python3
"""Generate ``staticadm/patch/schemas/builtin.json.gz``: the merge schemas of the built-in Kubernetes kinds.

``staticadm.patch.apply`` merges MutatingAdmissionPolicy ApplyConfigurations the way structured-merge-diff does in
kube-apiserver, which builds its schema per group-version from ``/openapi/v3`` with kube-openapi
``schemaconv.ToSchemaFromOpenAPI``. This script runs the same conversion offline and keeps only what the merge uses:
field names and types, ``additionalProperties``, list type and map keys (``x-kubernetes-list-type`` /
``x-kubernetes-list-map-keys``, or the older ``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key``, mapped
as ``getListElementRelationship`` does), ``x-kubernetes-map-type``, ``x-kubernetes-preserve-unknown-fields``, the
defaults of list-map key fields, and which definition serves which group/version/kind. ``x-kubernetes-int-or-string``
and ``x-kubernetes-embedded-resource`` need nothing of their own: schemaconv ignores both (an int-or-string schema has
no ``type`` and so becomes the deduced type, as does any type-less schema without properties).

Input, one of:

``--openapi-v3-dir DIR``
    The official per-group-version OpenAPI v3 documents (``api/openapi-spec/v3/*.json`` in kubernetes/kubernetes,
    identical to what ``kubectl get --raw /openapi/v3/<path>`` serves). For Kubernetes v1.36.0::

        git clone --depth 1 --branch v1.36.0 --filter=blob:none --sparse https://github.com/kubernetes/kubernetes k8s
        git -C k8s sparse-checkout set api/openapi-spec/v3
        python tools/generate_openapi_schemas.py --openapi-v3-dir k8s/api/openapi-spec/v3 --kubernetes-version 1.36.0

    or, file by file without git::

        mkdir v3 && cd v3 && for f in api__v1 apis__apps__v1 apis__batch__v1; do  # ...every *_openapi.json you need
          curl -fsSLO "https://raw.githubusercontent.com/kubernetes/kubernetes/v1.36.0/api/openapi-spec/v3/${f}_openapi.json"
        done

``--kubernetes-validate-defs FILE``
    ``_definitions.json`` from the ``kubernetes-validate`` PyPI package, which carries every definition of the
    Kubernetes OpenAPI spec of each release as JSON Schema with the ``x-kubernetes-*`` extensions kept (but without
    ``default`` values; the defaults of list-map key fields are filled from ``KNOWN_KEY_DEFAULTS`` below)::

        pip download --no-deps -d /tmp/kv kubernetes-validate==1.37.0
        unzip -q /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl -d /tmp/kv/x
        python tools/generate_openapi_schemas.py --kubernetes-version 1.36.0 --kubernetes-validate-defs \\
            /tmp/kv/x/kubernetes_validate/kubernetes-json-schema/v1.36.0-local/_definitions.json

The shipped file was generated the second way (no network access to GitHub where it was built); its ``meta`` records
the source. Both inputs give the same merge schema except where the v2-derived data lacks v3-only details.

Output format (``format: 1``), read by ``staticadm.patch.apply``::

    {"meta": {...}, "gvks": {"apps/v1": {"Deployment": "io.k8s.api.apps.v1.Deployment", ...}, ...},
     "types": {"<definition name>": <atom>}}

    atom    := "string" | "numeric" | "boolean" | "untyped"            scalar
             | "@<name>"                                               alias of another definition
             | {"map": {"fields": {name: ref}, "elem": ref?, "atomic": true?, "defaults": {field: value}?}}
             | {"list": {"elem": ref, "type": "atomic" | "set" | "map", "keys": [name, ...]?}}
    ref     := atom | {"ref": "<name>", "mapType": "atomic" | "granular"}
    built-in names: "__untyped_deduced_" (scalar | atomic list | granular map of itself),
                    "__untyped_atomic_" (scalar | atomic list | atomic map)
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

DEDUCED = "@__untyped_deduced_"
UNTYPED_ATOMIC = "@__untyped_atomic_"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
RAW_EXTENSION = "io.k8s.apimachinery.pkg.runtime.RawExtension"
REF_PREFIXES = ("#/components/schemas/", "#/$defs/", "#/definitions/", "/api/_definitions.json#/$defs/")

# ``+default=`` markers on list-map key fields in k8s.io/api (v1.36), needed when the input has no ``default`` values.
# Without them a patch list item that omits the key would fail with "omits key field ... (and doesn't have default
# value)" although kube-apiserver (whose v3 spec has the defaults) accepts it.
KNOWN_KEY_DEFAULTS: dict[tuple[str, str], Any] = {
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.LocalObjectReference", "name"): "",
}


class SchemaError(Exception):
    pass


def _ref_name(ref: str) -> str:
    for p in REF_PREFIXES:
        if ref.startswith(p):
            return ref[len(p) :]
    return ref.rsplit("/", 1)[-1]


def _type_of(s: dict[str, Any]) -> str:
    t = s.get("type")
    if isinstance(t, list):
        # JSON Schema renderings spell optional as ["object", "null"]; OpenAPI has one type.
        t = next((x for x in t if x != "null"), "")
    return t or ""


def _schema_ref(s: dict[str, Any]) -> str | None:
    if isinstance(s.get("$ref"), str):
        return _ref_name(s["$ref"])
    all_of = s.get("allOf")
    # kube-openapi special-cases a $ref wrapped in a single-element allOf (how v3 attaches defaults to refs).
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0].get("$ref"), str):
        return _ref_name(all_of[0]["$ref"])
    return None


def _list_relationship(ext: dict[str, Any], where: str) -> tuple[str, list[str]]:
    """kube-openapi ``getListElementRelationship``: ("atomic" | "set" | "map", keys)."""
    lt = ext.get("x-kubernetes-list-type")
    if lt is not None:
        if lt == "atomic":
            return "atomic", []
        if lt == "set":
            return "set", []
        if lt == "map":
            keys = ext.get("x-kubernetes-list-map-keys")
            if not isinstance(keys, list):
                raise SchemaError(f"{where}: missing map keys")
            return "map", [k for k in keys if isinstance(k, str)]
        raise SchemaError(f"{where}: unknown list type {lt}")
    ps = ext.get("x-kubernetes-patch-strategy")
    if ps is not None:
        if ps in ("merge", "merge,retainKeys"):
            key = ext.get("x-kubernetes-patch-merge-key")
            if key is None:
                return "set", []
            if not isinstance(key, str):
                raise SchemaError(f"{where}: uninterpreted merge key: {key!r}")
            return "map", [key]
        if ps == "retainKeys":
            return "atomic", []
        raise SchemaError(f"{where}: unknown patch strategy {ps}")
    return "atomic", []


def _map_type(ext: dict[str, Any], where: str) -> str | None:
    mt = ext.get("x-kubernetes-map-type")
    if mt is None:
        return None
    if mt not in ("atomic", "granular"):
        raise SchemaError(f"{where}: unknown map type {mt}")
    return str(mt)


def _primitive(typ: str, fmt: str | None) -> str:
    if typ in ("integer", "number"):
        return "numeric"
    if typ == "boolean":
        return "boolean"
    if typ == "string" and fmt in (None, "", "byte"):
        return "string"
    # int-or-string, date-time and every other string format are untyped scalars in schemaconv.
    return "untyped"


class Converter:
    """A port of kube-openapi ``schemaconv`` (``VisitSpec`` / ``makeOpenAPIRef``) producing the compact format."""

    def __init__(self, defs: dict[str, dict[str, Any]]) -> None:
        self.defs = defs
        self.out: dict[str, Any] = {}
        self.pending: list[str] = []

    def add(self, name: str) -> None:
        if name not in self.out and name not in self.pending:
            self.pending.append(name)

    def run(self) -> dict[str, Any]:
        while self.pending:
            name = self.pending.pop()
            if name in self.out:
                continue
            if name not in self.defs:
                raise SchemaError(f"reference to unknown definition {name}")
            self.out[name] = "untyped" if name == QUANTITY else self.visit(self.defs[name], name, preserve=False)
        return self.out

    def ref(self, s: dict[str, Any], where: str, preserve: bool) -> Any:
        name = _schema_ref(s)
        if name is not None:
            if name == RAW_EXTENSION:
                return UNTYPED_ATOMIC
            self.add(name)
            mt = _map_type(s, where)
            return {"ref": name, "mapType": mt} if mt else "@" + name
        return self.visit(s, "inlined in " + where, preserve)

    def visit(self, s: dict[str, Any], where: str, preserve: bool) -> Any:
        if s.get("x-kubernetes-preserve-unknown-fields") is True:
            preserve = True
        typ = _type_of(s)
        props: dict[str, Any] = s.get("properties") or {}
        if typ == "":
            if not props:
                return DEDUCED
            return self._map(s, props, where, preserve, elem=DEDUCED if preserve else None)
        if typ == "object":
            ap = s.get("additionalProperties")
            elem: Any
            if ap is None:
                elem = DEDUCED if preserve or not props else None
            elif isinstance(ap, dict):
                elem = self.ref(ap, where, preserve)
            elif ap is True:
                elem = DEDUCED
            else:
                elem = None
            return self._map(s, props, where, preserve, elem=elem)
        if typ == "array":
            items = s.get("items")
            if not isinstance(items, dict):
                raise SchemaError(f"{where}: structural schema arrays must have exactly one member subtype")
            lt, keys = _list_relationship(s, where)
            lst: dict[str, Any] = {"elem": self.ref(items, where, preserve), "type": lt}
            if keys:
                lst["keys"] = keys
            return {"list": lst}
        if typ in ("integer", "boolean", "number", "string"):
            return _primitive(typ, s.get("format"))
        raise SchemaError(f"{where}: unrecognized type: '{typ}'")

    def _map(self, s: dict[str, Any], props: dict[str, Any], where: str, preserve: bool, elem: Any) -> dict[str, Any]:
        m: dict[str, Any] = {"fields": {k: self.ref(v, where, preserve) for k, v in sorted(props.items())}}
        if elem is not None:
            m["elem"] = elem
        if _map_type(s, where) == "atomic":
            m["atomic"] = True
        return {"map": m}


def _iter_gvks(defs: dict[str, dict[str, Any]]) -> Iterable[tuple[str, str, str]]:
    for name, s in defs.items():
        for gvk in s.get("x-kubernetes-group-version-kind") or []:
            group, version, kind = gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")
            api_version = f"{group}/{version}" if group else version
            yield api_version, kind, name


def _key_defaults(types: dict[str, Any], defs: dict[str, dict[str, Any]]) -> None:
    """Attach ``default`` values to the fields used as list-map keys (``getAssociativeKeyDefault`` needs them)."""
    wanted: set[tuple[str, str]] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            lst = node.get("list")
            if isinstance(lst, dict) and lst.get("type") == "map":
                elem = lst.get("elem")
                if isinstance(elem, str) and elem.startswith("@"):
                    for k in lst.get("keys", []):
                        wanted.add((elem[1:], k))
            for v in node.values():
                walk(v)

    walk(types)
    for name, field in sorted(wanted):
        src = (defs.get(name, {}).get("properties") or {}).get(field, {})
        if "default" in src:
            value = src["default"]
        elif (name, field) in KNOWN_KEY_DEFAULTS:
            value = KNOWN_KEY_DEFAULTS[(name, field)]
        else:
            continue
        atom = types.get(name)
        if isinstance(atom, dict) and "map" in atom:
            atom["map"].setdefault("defaults", {})[field] = value


def load_v3_dir(path: Path) -> dict[str, dict[str, Any]]:
    defs: dict[str, dict[str, Any]] = {}
    files = sorted(path.glob("*.json"))
    if not files:
        raise SystemExit(f"no *.json files in {path}")
    for f in files:
        doc = json.loads(f.read_text())
        defs.update((doc.get("components") or {}).get("schemas") or {})
    return defs


def load_kubernetes_validate(path: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads(path.read_text())
    defs = doc.get("$defs") or doc.get("definitions")
    if not isinstance(defs, dict):
        raise SystemExit(f"{path}: no $defs/definitions object")
    return defs


def generate(defs: dict[str, dict[str, Any]], groups: set[str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    conv = Converter(defs)
    gvks: dict[str, dict[str, str]] = {}
    for api_version, kind, name in _iter_gvks(defs):
        group = api_version.rpartition("/")[0]
        if groups is not None and group not in groups:
            continue
        if kind.endswith("List") or kind in ("WatchEvent", "DeleteOptions", "Status"):
            # Lists and meta kinds are never the object of an admission request.
            continue
        gvks.setdefault(api_version, {})[kind] = name
        conv.add(name)
    types = conv.run()
    _key_defaults(types, defs)
    return {k: dict(sorted(v.items())) for k, v in sorted(gvks.items())}, dict(sorted(types.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--openapi-v3-dir", type=Path, help="directory of api/openapi-spec/v3/*.json files")
    src.add_argument("--kubernetes-validate-defs", type=Path, help="kubernetes-validate _definitions.json")
    ap.add_argument("--kubernetes-version", required=True, help="Kubernetes release of the input, e.g. 1.36.0")
    ap.add_argument("--source", help="free text recorded as meta.source (defaults to a description of the input)")
    ap.add_argument("--groups", help="comma-separated API groups to keep ('core' is the core group); all if unset")
    ap.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "staticadm" / "patch" / "schemas" / "builtin.json.gz",
    )
    args = ap.parse_args(argv)

    if args.openapi_v3_dir:
        defs = load_v3_dir(args.openapi_v3_dir)
        source = args.source or (
            f"kubernetes/kubernetes v{args.kubernetes_version} api/openapi-spec/v3/*.json (OpenAPI v3, official)"
        )
    else:
        defs = load_kubernetes_validate(args.kubernetes_validate_defs)
        source = args.source or (
            f"PyPI kubernetes-validate kubernetes-json-schema/v{args.kubernetes_version}-local/_definitions.json "
            "(the Kubernetes OpenAPI definitions as JSON Schema, x-kubernetes-* extensions kept; list-map key "
            "defaults from KNOWN_KEY_DEFAULTS)"
        )
    groups = None
    if args.groups is not None:
        groups = {"" if g.strip() in ("", "core") else g.strip() for g in args.groups.split(",")}

    gvks, types = generate(defs, groups)
    doc = {
        "meta": {
            "format": 1,
            "kubernetesVersion": args.kubernetes_version,
            "source": source,
            "generator": "tools/generate_openapi_schemas.py",
            "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "gvks": gvks,
        "types": types,
    }
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=False).encode()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0 keeps the file byte-identical across runs with the same input (apart from meta.generated).
    args.output.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    n_kinds = sum(len(v) for v in gvks.values())
    print(
        f"wrote {args.output}: {n_kinds} kinds in {len(gvks)} group-versions, {len(types)} types, "
        f"{len(raw)} bytes JSON, {args.output.stat().st_size} bytes gzipped",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
