"""Which control-plane writes kube-apiserver refuses while staticadm is down.

A webhook with ``failurePolicy: Fail`` that kube-apiserver cannot call refuses every request it is sent. So
an outage blocks exactly the control-plane writes (``control-plane-requests.yaml``) the registration sends
to such a webhook. Whether a webhook sends a request is decided by the same matching as a policy's
(rules, matchPolicy, namespace and object selectors, matchConditions in CEL): each Fail webhook is replayed
as a policy that refuses everything it matches, through the engine ``check``'s replay uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticadm.deploy.control_plane import ControlPlaneRequest, control_plane_requests, replay
from staticadm.deploy.exclusions import class_of
from staticadm.manifests.files import DirectoryContents, ManifestFile, content_hash
from staticadm.manifests.loader import load_manifest_directory
from staticadm.model import API_VERSION
from staticadm.snapshot import build_snapshot

_SUFFIX = ".static.k8s.io"


@dataclass(frozen=True, slots=True)
class BlockedWrite:
    """A control-plane write a Fail webhook is sent, refused while staticadm does not answer."""

    write: ControlPlaneRequest
    webhook: str

    def to_json(self) -> dict[str, Any]:
        request = self.write.request
        return {"object": self.write.description, "operation": request.operation,
                "resource": request.resource.group_resource(), "subResource": request.sub_resource,
                "namespace": request.namespace, "name": request.name, "user": request.user_info.username,
                "webhook": self.webhook}


def _as_policy(index: int, webhook: Mapping[str, Any]) -> list[dict[str, Any]]:
    name = f"webhook-{index}{_SUFFIX}"
    rules = webhook.get("rules")
    constraints: dict[str, Any] = {"resourceRules": [
        {key: rule[key] for key in ("operations", "apiGroups", "apiVersions", "resources", "scope") if key in rule}
        for rule in (rules if isinstance(rules, list) else []) if isinstance(rule, Mapping)],
        "matchPolicy": webhook.get("matchPolicy") or "Equivalent"}
    for key in ("namespaceSelector", "objectSelector"):
        if webhook.get(key):
            constraints[key] = webhook[key]
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": constraints,
                            "validations": [{"expression": "false", "message": "sent to the webhook"}]}
    if webhook.get("matchConditions"):
        spec["matchConditions"] = list(webhook["matchConditions"])
    return [{"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
             "spec": spec},
            {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
             "spec": {"policyName": name, "validationActions": ["Deny"]}}]


def blocked_writes(webhooks: Sequence[Mapping[str, Any]],
                   writes: Sequence[ControlPlaneRequest] | None = None) -> tuple[BlockedWrite, ...]:
    """The writes (by default every control-plane write) that a ``failurePolicy: Fail`` webhook of ``webhooks``
    is sent. A webhook whose matching cannot be loaded as a policy's is taken to send them all."""
    writes = control_plane_requests() if writes is None else writes
    failing = [webhook for webhook in webhooks if webhook.get("failurePolicy") in (None, "Fail")]
    if not failing:
        return ()
    documents = [document for index, webhook in enumerate(failing) for document in _as_policy(index, webhook)]
    data = "\n".join(f"---\n{json.dumps(document)}" for document in documents).encode()
    contents = DirectoryContents((ManifestFile("(registration)/webhooks.yaml", data, 0o644),), content_hash([data]),
                                 None, ())
    loaded = load_manifest_directory("(registration)", contents=contents)
    if loaded.errors:
        return tuple(BlockedWrite(write, ", ".join(str(w.get("name", "")) for w in failing)) for write in writes)
    names = {f"webhook-{index}{_SUFFIX}": str(webhook.get("name", "")) for index, webhook in enumerate(failing)}
    blocked: dict[str, BlockedWrite] = {}
    for block in replay(build_snapshot(loaded), writes):
        blocked.setdefault(block.write.description, BlockedWrite(block.write, names.get(block.policy, block.policy)))
    return tuple(blocked[write.description] for write in writes if write.description in blocked)


def write_class_description(write: ControlPlaneRequest) -> str:
    request = write.request
    entry = class_of(request.resource.group, request.resource.resource, request.namespace or "")
    return entry.description if entry is not None else "no class staticadm leaves out"
