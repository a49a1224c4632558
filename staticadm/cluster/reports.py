"""Writes staticadm's reports to the cluster with server-side apply, as ``kubectl apply --server-side`` does.

Each report is sent whole as an apply patch (``PATCH``, ``application/apply-patch+yaml``; JSON is YAML) under
the field manager ``staticadm``, with ``force`` so that staticadm owns the results it writes even when an earlier
run under another manager (a ``kubectl apply`` of ``-o policyreport`` output) set them: the report says what the
last audit found, and nothing else writes a report named ``staticadm``. kube-apiserver creates the report when it
is missing, so one call per report, none read first.

What an earlier run wrote and this one did not is deleted: the reports labelled
``app.kubernetes.io/managed-by: staticadm`` (namespaced and cluster-scoped) that are not among those just
applied, so a namespace or object that no longer has a result keeps no report (what the last audit found is all
the reports say, as Kyverno removes the results of objects that are gone).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Sequence
from typing import Any

import orjson

from staticadm.cluster.connection import ClusterError, KubeConnection
from staticadm.cluster.objects import ApiResource, list_objects
from staticadm.offline.policy_reports import MANAGED_BY, ReportForm

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
    written: set[tuple[str, str]] = set()
    for document in documents:
        namespace = str(document["metadata"].get("namespace") or "")
        name = str(document["metadata"]["name"])
        written.add((namespace, name))
        path = form.path(namespace, name)
        deadline = asyncio.get_running_loop().time() + REQUEST_SECONDS
        try:
            await connection.request("PATCH", f"{path}?{query}", deadline=deadline, limit=_ANSWER_BYTES,
                                     body=orjson.dumps(document), content_type=APPLY_PATCH)
        except ClusterError as error:
            raise ClusterError(f"applying {form.describe(namespace, name)}: {error.message}", status=error.status,
                               reason=error.reason) from None
        applied.append(f"{form.describe(namespace, name)} serverside-applied")
    return applied + await _delete_stale(connection, form, written)


async def _delete_stale(connection: KubeConnection, form: ReportForm, written: set[tuple[str, str]]) -> list[str]:
    group, version = form.api_version.split("/")
    selector = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
    stale: list[tuple[str, str]] = []
    for resource, kind, namespaced in ((form.cluster_resource, form.cluster_kind, False),
                                       (form.namespaced_resource, form.namespaced_kind, True)):
        listed = ApiResource(group, version, resource, kind, namespaced=namespaced, preferred=True)
        try:
            async for page in list_objects(connection, listed, label_selector=selector):
                for item in page:
                    metadata = item.get("metadata") or {}
                    key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
                    if key not in written and key[1]:
                        stale.append(key)
        except ClusterError as error:
            raise ClusterError(f"listing the {resource}.{group} staticadm wrote before: {error.message}",
                               status=error.status, reason=error.reason) from None
    deleted = []
    for namespace, name in stale:
        deadline = asyncio.get_running_loop().time() + REQUEST_SECONDS
        try:
            await connection.request("DELETE", form.path(namespace, name), deadline=deadline, limit=_ANSWER_BYTES)
        except ClusterError as error:
            if error.status == 404:  # gone meanwhile: what was wanted
                continue
            raise ClusterError(f"deleting {form.describe(namespace, name)}: {error.message}", status=error.status,
                               reason=error.reason) from None
        deleted.append(f"{form.describe(namespace, name)} deleted (no result this time)")
    return deleted
