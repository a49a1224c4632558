#!/usr/bin/env python3
"""Generate ``tests/reports/report_crd_schemas.json``: the JSON Schemas the tests check staticadm's PolicyReports and
OpenReports against, made from the published CustomResourceDefinitions' ``openAPIV3Schema``.

Sources (git repositories, a checkout or a bare clone; read with ``git show``, nothing else is copied):

- kubernetes-sigs/wg-policy-prototypes, ``policy-report/crd/v1alpha2/wgpolicyk8s.io_{policyreports,
  clusterpolicyreports}.yaml``, version ``v1alpha2`` (PolicyReport, ClusterPolicyReport);
- openreports/reports-api, ``config/crd/openreports.io_{reports,clusterreports}.yaml``, version ``v1alpha1``
  (Report, ClusterReport).

What is kept of each schema is what validation reads (``type``, ``properties``, ``items``, ``required``, ``enum``,
``additionalProperties``, ``format``, ``x-kubernetes-preserve-unknown-fields``); the descriptions are dropped. One
change makes the check as strict as kube-apiserver: an object schema with ``properties`` and neither
``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``, since
kube-apiserver prunes (or, with ``fieldValidation=Strict``, refuses) the fields a structural schema does not name,
so a field staticadm wrote that the CRD lacks would be lost in the cluster.

    git clone https://github.com/kubernetes-sigs/wg-policy-prototypes /tmp/wg
    git clone https://github.com/openreports/reports-api /tmp/or
    python tools/generate_report_schemas.py --wg-policy-prototypes /tmp/wg --reports-api /tmp/or
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

OUTPUT = Path(__file__).resolve().parent.parent / "tests" / "reports" / "report_crd_schemas.json"

#: (source option, repository, path in it, CRD version) per report kind.
SOURCES = {
    ("wgpolicyk8s.io/v1alpha2", "PolicyReport"): (
        "wg_policy_prototypes", "kubernetes-sigs/wg-policy-prototypes",
        "policy-report/crd/v1alpha2/wgpolicyk8s.io_policyreports.yaml", "v1alpha2"),
    ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport"): (
        "wg_policy_prototypes", "kubernetes-sigs/wg-policy-prototypes",
        "policy-report/crd/v1alpha2/wgpolicyk8s.io_clusterpolicyreports.yaml", "v1alpha2"),
    ("openreports.io/v1alpha1", "Report"): (
        "reports_api", "openreports/reports-api", "config/crd/openreports.io_reports.yaml", "v1alpha1"),
    ("openreports.io/v1alpha1", "ClusterReport"): (
        "reports_api", "openreports/reports-api", "config/crd/openreports.io_clusterreports.yaml", "v1alpha1"),
}

_KEPT = ("type", "required", "enum", "format", "x-kubernetes-preserve-unknown-fields")


def _git(repository: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True,
                          check=True).stdout


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The validation keywords of ``schema``, every object that names its fields closed to others."""
    out: dict[str, Any] = {key: schema[key] for key in _KEPT if key in schema}
    if "properties" in schema:
        out["properties"] = {name: closed(value) for name, value in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = closed(schema["additionalProperties"])
    elif "additionalProperties" in schema:
        out["additionalProperties"] = schema["additionalProperties"]
    if "items" in schema:
        out["items"] = closed(schema["items"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wg-policy-prototypes", dest="wg_policy_prototypes", type=Path, required=True,
                        help="a git clone of kubernetes-sigs/wg-policy-prototypes")
    parser.add_argument("--reports-api", dest="reports_api", type=Path, required=True,
                        help="a git clone of openreports/reports-api")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    schemas: dict[str, Any] = {}
    provenance: dict[str, Any] = {}
    for (api_version, kind), (option, repository, path, version) in SOURCES.items():
        clone: Path = getattr(args, option)
        commit = _git(clone, "rev-parse", "HEAD").strip()
        crd = yaml.safe_load(_git(clone, "show", f"{commit}:{path}"))
        if crd["spec"]["names"]["kind"] != kind or f"{crd['spec']['group']}/{version}" != api_version:
            print(f"{repository} {path}: not the CRD of {api_version} {kind}", file=sys.stderr)
            return 1
        served = [entry for entry in crd["spec"]["versions"] if entry["name"] == version]
        if not served:
            print(f"{repository} {path}: no version {version}", file=sys.stderr)
            return 1
        key = f"{api_version}/{kind}"
        schemas[key] = closed(served[0]["schema"]["openAPIV3Schema"])
        provenance[key] = {"repository": f"https://github.com/{repository}", "commit": commit, "path": path,
                           "version": version, "scope": crd["spec"]["scope"],
                           "plural": crd["spec"]["names"]["plural"]}
    document = {"generatedBy": "tools/generate_report_schemas.py", "provenance": provenance, "schemas": schemas}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
