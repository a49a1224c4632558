"""Writes staticadm's reports to the cluster with server-side apply, as ``kubectl apply --server-side`` does.

Each report is sent whole as an apply patch (``PATCH``, ``application/apply-patch+yaml``; JSON is YAML) under
the field manager ``staticadm``, with ``force`` so that staticadm owns the results it writes even when an earlier
run under another manager (a ``kubectl apply`` of ``-o policyreport`` output) set them: the report says what the
last audit found, and nothing else writes a report named ``staticadm``. kube-apiserver creates the report when it
is missing, so one call per report, none read first.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Sequence
from typing import Any

import orjson

from staticadm.admission.policy_reports import ReportForm
from staticadm.cluster.connection import ClusterError, KubeConnection

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
    return applied
