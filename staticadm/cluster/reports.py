"""Writes staticadm's reports to the cluster with server-side apply, as ``kubectl apply --server-side`` does.

Each report is sent whole as an apply patch (``PATCH``, ``application/apply-patch+yaml``; JSON is YAML) under
the field manager ``staticadm``, with ``force`` so that staticadm owns the results it writes even when an earlier
run under another manager (a ``kubectl apply`` of ``-o policyreport`` output) set them: the report says what the
last audit found, and nothing else writes a report named ``staticadm``. kube-apiserver creates the report when it
is missing, so one call per report, none read first.

A namespace whose objects no longer have a result keeps no report: the reports named ``staticadm`` and labelled
``app.kubernetes.io/managed-by: staticadm`` in namespaces this run wrote none for are deleted (what the last audit
found is all a report says, as Kyverno removes the results of objects that are gone).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Sequence
from typing import Any

import orjson

from staticadm.admission.policy_reports import MANAGED_BY, REPORT_NAME, ReportForm
from staticadm.cluster.connection import ClusterError, KubeConnection
from staticadm.cluster.objects import ApiResource, list_objects

FIELD_MANAGER = "staticadm"
APPLY_PATCH = "application/apply-patch+yaml"
REQUEST_SECONDS = 60.0
#: kube-apiserver answers with the object as stored: about the size of what was sent.
_ANSWER_BYTES = 64 << 20


async def apply_reports(connection: KubeConnection, form: ReportForm,
                        documents: Sequence[dict[str, Any]]) -> list[str]:
    """Applies each report; what was applied, as kubectl says it (``policyreport.wgpolicyk8s.io/staticadm -n
    shop serverside-applied``). A refusal is a ClusterError naming the report and kube-apiserver's answer (a
    missing CRD: the resource is not found; RBAC: forbidden)."""
    query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
    applied = []
    for document in documents:
        namespace = str(document["metadata"].get("namespace") or "")
        path = form.path(namespace, str(document["metadata"]["name"]))
        deadline = asyncio.get_running_loop().time() + REQUEST_SECONDS
        try:
            await connection.request("PATCH", f"{path}?{query}", deadline=deadline, limit=_ANSWER_BYTES,
                                     body=orjson.dumps(document), content_type=APPLY_PATCH)
        except ClusterError as error:
            raise ClusterError(f"applying {form.describe(namespace)}: {error.message}", status=error.status,
                               reason=error.reason) from None
        applied.append(f"{form.describe(namespace)} serverside-applied")
    written = {str(document["metadata"].get("namespace") or "") for document in documents}
    return applied + await _delete_stale(connection, form, written)


async def _delete_stale(connection: KubeConnection, form: ReportForm, written: set[str]) -> list[str]:
    group, version = form.api_version.split("/")
    resource = ApiResource(group, version, form.namespaced_resource, form.namespaced_kind, namespaced=True,
                           preferred=True)
    selector = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
    stale: list[str] = []
    try:
        async for page in list_objects(connection, resource, label_selector=selector):
            for item in page:
                metadata = item.get("metadata") or {}
                namespace = str(metadata.get("namespace") or "")
                if metadata.get("name") == REPORT_NAME and namespace and namespace not in written:
                    stale.append(namespace)
    except ClusterError as error:
        raise ClusterError(f"listing the {form.namespaced_resource}.{group} staticadm wrote before: {error.message}",
                           status=error.status, reason=error.reason) from None
    deleted = []
    for namespace in stale:
        deadline = asyncio.get_running_loop().time() + REQUEST_SECONDS
        try:
            await connection.request("DELETE", form.path(namespace), deadline=deadline, limit=_ANSWER_BYTES)
        except ClusterError as error:
            if error.status == 404:  # gone meanwhile: what was wanted
                continue
            raise ClusterError(f"deleting {form.describe(namespace)}: {error.message}", status=error.status,
                               reason=error.reason) from None
        deleted.append(f"{form.describe(namespace)} deleted (no result in its namespace)")
    return deleted
