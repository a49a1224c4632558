"""The published report CRDs' schemas (``report_crd_schemas.json``, made by tools/generate_report_schemas.py from
kubernetes-sigs/wg-policy-prototypes and openreports/reports-api, provenance inside) and a check of a report
against them as kube-apiserver would check it on a write."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parent / "report_crd_schemas.json"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@cache
def _published() -> dict[str, Any]:
    return dict(json.loads(SCHEMAS.read_text(encoding="utf-8")))


def crd(api_version: str, kind: str) -> dict[str, Any]:
    """Where the CRD of the kind came from and its scope (Namespaced or Cluster)."""
    return dict(_published()["provenance"][f"{api_version}/{kind}"])


def schema_problems(document: dict[str, Any]) -> list[str]:
    """Every way ``document`` breaks its CRD's openAPIV3Schema (an unknown kind is one), and the metadata
    kube-apiserver checks itself: a DNS-subdomain name, a namespace exactly when the CRD is namespaced."""
    key = f"{document.get('apiVersion')}/{document.get('kind')}"
    published = _published()
    if key not in published["schemas"]:
        return [f"{key}: no published CRD (known: {sorted(published['schemas'])})"]
    validator = jsonschema.Draft7Validator(published["schemas"][key])
    problems = [f"{key}: {'/'.join(map(str, error.absolute_path))}: {error.message}"
                for error in validator.iter_errors(document)]
    metadata = document.get("metadata") or {}
    if not _DNS_SUBDOMAIN.match(str(metadata.get("name", ""))):
        problems.append(f"{key}: metadata.name {metadata.get('name')!r} is not a DNS subdomain")
    namespaced = published["provenance"][key]["scope"] == "Namespaced"
    if namespaced != bool(metadata.get("namespace")):
        problems.append(f"{key}: metadata.namespace {metadata.get('namespace')!r} for a "
                        f"{published['provenance'][key]['scope']} kind")
    return problems


def summary_adds_up(document: dict[str, Any]) -> bool:
    results = [entry["result"] for entry in document["results"]]
    return document["summary"] == {name: results.count(name) for name in ("pass", "fail", "warn", "error", "skip")}
