"""``staticadm diff LIVE NEW REQUEST...``: what a new manifest directory would answer differently, offline.

Each request is evaluated as kube-apiserver would send it to each endpoint (/mutate and /validate),
against the live and the new directory, and compared exactly as the daemon's shadow mode compares
(:mod:`staticadm.admission.comparison`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from staticadm.admission.comparison import Difference, compare_reviews
from staticadm.admission.endpoints import ENDPOINTS
from staticadm.admission.namespaces import NamespaceSource, RequestOnlyNamespaces
from staticadm.admission.request import AdmissionRequest, describe_subject
from staticadm.offline.decision_report import API_VERSION
from staticadm.offline.request_builder import RequestSettings
from staticadm.offline.review import (
    EXIT_DENIED,
    EXIT_INVALID_MANIFESTS,
    EXIT_OK,
    EXIT_UNUSABLE_INPUT,
    AuditSource,
    RequestSources,
    describe_place,
    load_snapshot,
)
from staticadm.progress import Progress
from staticadm.snapshot import Snapshot
from staticadm.tables import TABLE_OUTPUTS, write_table
from staticadm.yamltext import dump_yaml

#: Exit code when some request would be answered differently (as review's "denied": a finding).
EXIT_DIFFERENT = EXIT_DENIED
#: /mutate first, as kube-apiserver calls the mutating webhooks before the validating ones.
ENDPOINT_ORDER = ("mutate", "validate")


def _difference_json(endpoint: str, difference: Difference) -> dict[str, Any]:
    return {"endpoint": endpoint, "difference": str(difference.kind), "livePolicies": list(difference.live_policies),
            "newPolicies": list(difference.new_policies), "detail": difference.detail}


def _differences(live: Snapshot, new: Snapshot, namespaces: NamespaceSource,
                 request: AdmissionRequest) -> list[dict[str, Any]]:
    differences = []
    for endpoint in ENDPOINT_ORDER:
        evaluate = ENDPOINTS[endpoint]
        for difference in compare_reviews(evaluate(live, namespaces, request), evaluate(new, namespaces, request)):
            differences.append(_difference_json(endpoint, difference))
    return differences


def run_diff(live_dir: str, new_dir: str, request_paths: Sequence[str], output: str, stdin: TextIO, stdout: TextIO,
             stderr: TextIO, settings: RequestSettings | None = None, old_path: str | None = None,
             namespaces: NamespaceSource | None = None, audit: AuditSource | None = None) -> int:
    """Exit 0 when no request would be answered differently, 3 when some would; 1 when either directory
    is invalid; 2 on unusable input."""
    live = load_snapshot(live_dir, stderr, "staticadm diff: (live)")
    new = load_snapshot(new_dir, stderr, "staticadm diff: (new)")
    if live is None or new is None:
        return EXIT_INVALID_MANIFESTS
    requests = RequestSources(tuple(request_paths), settings or RequestSettings(), old_path, audit).read(
        stdin, stderr, "diff")
    if requests is None:
        return EXIT_UNUSABLE_INPUT
    namespaces = namespaces or RequestOnlyNamespaces()
    found: list[dict[str, Any]] = []
    compared = 0
    with Progress(stderr, "comparing requests", requests.known_total) as progress:
        for item in requests:
            progress.advance()
            compared += 1
            differences = _differences(live, new, namespaces, item.request)
            if differences:
                request = item.request
                found.append({"input": item.source, "document": item.document, "item": item.item or None,
                              "uid": request.uid, "operation": request.operation,
                              "kind": request.original_kind.to_json(), "resource": request.original_resource.to_json(),
                              "subResource": request.original_sub_resource, "namespace": request.namespace,
                              "name": request.name, "object": describe_subject(request), "audit": item.audit,
                              "differences": differences})
    if not requests.report(stderr, "diff"):
        return EXIT_UNUSABLE_INPUT
    summary = {"requests": compared, "different": len(found)}
    report = {"apiVersion": API_VERSION, "kind": "DiffReport", "summary": summary, "differences": found}
    if output == "json":
        stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    elif output == "yaml":
        stdout.write(dump_yaml(report))
    elif output in TABLE_OUTPUTS:
        _table(found, stdout, wide=output == "wide", compared=compared)
    else:
        for entry in found:
            where = f"{describe_place(entry['input'], entry['document'], entry['item'] or '')} ({entry['object']})"
            for change in entry["differences"]:
                policies = "; ".join(part for part in (
                    f"live: {', '.join(change['livePolicies'])}" if change["livePolicies"] else "",
                    f"new: {', '.join(change['newPolicies'])}" if change["newPolicies"] else "") if part)
                stdout.write(f"{where}: {change['endpoint']}: {change['difference']}: {change['detail']}"
                             + (f" [{policies}]" if policies else "") + "\n")
        stdout.write(f"{summary['different']} of {summary['requests']} request(s) would be answered differently\n")
    return EXIT_DIFFERENT if found else EXIT_OK


def _table(found: list[dict[str, Any]], out: TextIO, *, wide: bool, compared: int) -> None:
    """A row per difference: the object, the endpoint, what would change and the policies behind it; ``wide``:
    the live and new policies apart, and where the request came from."""
    rows: list[list[object]] = []
    for entry in found:
        resource = entry["resource"]["resource"] + (f".{entry['resource']['group']}" if entry["resource"]["group"]
                                                     else "")
        for change in entry["differences"]:
            row: list[object] = [entry["namespace"], entry["name"] or "(generated)", resource, entry["operation"],
                                 change["endpoint"], change["difference"], change["detail"]]
            if wide:
                row += [",".join(change["livePolicies"]), ",".join(change["newPolicies"]),
                        describe_place(entry["input"], entry["document"], entry["item"] or "")]
            else:
                row.append(",".join(dict.fromkeys([*change["livePolicies"], *change["newPolicies"]])))
            rows.append(row)
    headers = ["NAMESPACE", "NAME", "RESOURCE", "OPERATION", "ENDPOINT", "DIFFERENCE", "DETAIL"]
    write_table(out, [*headers, *(("LIVE POLICIES", "NEW POLICIES", "INPUT") if wide else ("POLICIES",))], rows,
                empty=f"No differences in {compared} request(s).")
