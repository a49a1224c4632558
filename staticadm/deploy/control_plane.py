"""The writes a kubeadm control plane cannot live without, replayed against a policy set by ``staticadm check``.

A policy that denies (or fails closed on) a kube-proxy or CoreDNS pod, a control-plane mirror pod, the
node's status or lease, or an event breaks the cluster at its next rollout or restart, whatever the
policy meant to catch: Kyverno and Gatekeeper exempt these for that reason. The requests are in
``control-plane-requests.yaml`` beside this module, written as kube-apiserver sends them to a validating
webhook; the mirror pods' status updates (the kubelet's ``pods/status`` writes) are derived here from the
mirror pods.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

import orjson

from staticadm.admission.endpoints import combined_response, review_request
from staticadm.admission.namespaces import NamespaceInfo, StaticNamespaces, namespace_info_from_object
from staticadm.admission.request import AdmissionRequest, RequestError, describe_subject, parse_admission_review
from staticadm.admission.vocabulary import EnforcementAction
from staticadm.manifests.check import Finding
from staticadm.manifests.errors import ManifestError
from staticadm.manifests.loader import LoadResult
from staticadm.model import MutatingAdmissionPolicy, ValidatingAdmissionPolicy
from staticadm.snapshot import Snapshot, build_snapshot
from staticadm.yamljson import parse_stream

#: The namespaces of a new kubeadm cluster, as kube-apiserver serves them: the name label is all they carry.
KUBEADM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, slots=True)
class ControlPlaneRequest:
    """One write the control plane makes, and the request kube-apiserver sends a webhook for it."""

    description: str
    request: AdmissionRequest

    @property
    def subject(self) -> str:
        """``CREATE pods kube-system/kube-proxy-7xk2p by system:serviceaccount:...``: what a report names."""
        return f"{describe_subject(self.request)} by {self.request.user_info.username}"


@dataclass(frozen=True, slots=True)
class ControlPlaneBlock:
    """A control-plane write the policy set refuses: which, by which policy (and binding), and what it said."""

    write: ControlPlaneRequest
    #: The refusing policy, or "" when the refusal names none (a denial of the whole mutating chain).
    policy: str
    binding: str | None
    #: ``deny`` (a validation or mutation said no) or an error type whose failurePolicy Fail refused it.
    cause: str
    message: str

    def to_json(self) -> dict[str, Any]:
        request = self.write.request
        return {
            "object": self.write.description,
            "operation": request.operation,
            "resource": request.resource.group_resource(),
            "subResource": request.sub_resource,
            "namespace": request.namespace,
            "name": request.name,
            "user": request.user_info.username,
            "policy": self.policy,
            "binding": self.binding,
            "cause": self.cause,
            "message": self.message,
        }


@functools.cache
def _entries_as_json() -> bytes:
    text = resources.files("staticadm.deploy").joinpath("control-plane-requests.yaml").read_text(encoding="utf-8")
    entries = [entry for entry in parse_stream(text) if entry is not None]
    mirror_status_updates = [_mirror_status_update(entry) for entry in entries if _is_mirror_pod_create(entry)]
    return orjson.dumps([*entries, *mirror_status_updates])


def _entries() -> list[Mapping[str, Any]]:
    """The data file's requests, a copy of their own for each caller. The file is parsed once a process: ``check``
    replays it twice a directory (the refused writes and the outage analysis), and parsing its YAML took longer
    than both replays (75 ms, against JSON's 1)."""
    entries: list[Mapping[str, Any]] = orjson.loads(_entries_as_json())
    return entries


def control_plane_requests() -> tuple[ControlPlaneRequest, ...]:
    """Every built-in write, the mirror pods' status updates after the requests of the data file."""
    return tuple(_write(entry) for entry in _entries())


def control_plane_reviews() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(description, AdmissionReview) of every built-in write, in :func:`control_plane_requests`' order: what
    kube-apiserver's admission is handed for each (the tests send them through its webhook client)."""
    return tuple((entry["description"], _review(entry)) for entry in _entries())


def kubeadm_namespaces() -> StaticNamespaces:
    infos: dict[str, NamespaceInfo] = {}
    for name in KUBEADM_NAMESPACES:
        infos[name] = namespace_info_from_object({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        })
    return StaticNamespaces(MappingProxyType(infos))


def replay(snapshot: Snapshot, writes: Sequence[ControlPlaneRequest] | None = None) -> tuple[ControlPlaneBlock, ...]:
    """Each write through both webhooks as the daemon answers them (mutating, then validating on the mutated
    object); a block for every policy that refuses one."""
    namespaces = kubeadm_namespaces()
    blocks: list[ControlPlaneBlock] = []
    for write in writes if writes is not None else control_plane_requests():
        mutation, validation = review_request(snapshot, namespaces, write.request, "both")
        answer = combined_response(write.request, mutation, validation)
        if answer["response"]["allowed"]:
            continue
        outcome = validation if validation is not None else mutation
        assert outcome is not None
        refusing = [record for record in outcome.decisions if record.action is EnforcementAction.DENY]
        if not refusing:
            status = answer["response"].get("status") or {}
            blocks.append(ControlPlaneBlock(write, "", None, "deny", str(status.get("message", ""))))
        for record in refusing:
            cause = "deny" if record.error_type == "no_error" else str(record.error_type)
            blocks.append(ControlPlaneBlock(write, record.policy, record.binding, cause, record.message))
    return tuple(blocks)


def control_plane_check(result: LoadResult) -> tuple[Finding, ...]:
    """``staticadm check``'s replay: a finding per refused write, located at the refusing policy's document."""
    # A validating and a mutating policy may share a name; the replay names the validating one first.
    policies: dict[str, ValidatingAdmissionPolicy | MutatingAdmissionPolicy] = {}
    for validating in result.validating_policies:
        policies.setdefault(validating.name, validating)
    for mutating in result.mutating_policies:
        policies.setdefault(mutating.name, mutating)
    findings = []
    for block in replay(build_snapshot(result)):
        message = refusal_message(block)
        policy = policies.get(block.policy)
        if policy is None:
            problem = ManifestError(result.directory, message)
        else:
            origin = policy.origin
            problem = ManifestError(origin.path, message, document=origin.document, items=origin.items,
                                    kind=policy.KIND, name=policy.name)
        findings.append(Finding(problem, "controlPlane", block.to_json()))
    return tuple(findings)


def refusal_message(block: ControlPlaneBlock) -> str:
    """What ``check`` (and the daemon) says about a refused control-plane write."""
    said = f"{block.cause}: {block.message}" if block.cause != "deny" else block.message
    return (f"refuses a write every kubeadm control plane makes, {block.write.subject} "
            f"({block.write.description}): {said}; exempt it (a namespaceSelector excluding kube-system, "
            f"a matchCondition on the user) or bind with validationActions [Warn, Audit]")


def _write(entry: Mapping[str, Any]) -> ControlPlaneRequest:
    description = entry["description"]
    review = _review(entry)
    parsed = parse_admission_review(review)
    if isinstance(parsed, RequestError):
        # The data ships with the package and a test parses every entry: this is a packaging fault.
        raise RuntimeError(f"built-in control-plane request {description!r}: {parsed.message}")
    return ControlPlaneRequest(description, parsed)


def _review(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionReview kube-apiserver sends for one entry: the request in the version the policy matched
    (nothing is converted), its options as the operation's, never a dry run."""
    operation = entry["operation"]
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[operation]
    request: dict[str, Any] = {
        "uid": _uuid_from(entry["description"]),
        "kind": entry["kind"],
        "resource": entry["resource"],
        "requestKind": entry["kind"],
        "requestResource": entry["resource"],
        "name": entry["name"],
        "operation": operation,
        "userInfo": entry["userInfo"],
        "object": entry.get("object"),
        "oldObject": entry.get("oldObject"),
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    }
    if entry.get("subResource"):
        request["subResource"] = request["requestSubResource"] = entry["subResource"]
    if entry.get("namespace"):
        request["namespace"] = entry["namespace"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _uuid_from(text: str) -> str:
    """A UUID-shaped identifier fixed by ``text``: the same request and object on every run of ``check``."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _is_mirror_pod_create(entry: Mapping[str, Any]) -> bool:
    obj = entry.get("object") or {}
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return entry["operation"] == "CREATE" and obj.get("kind") == "Pod" and MIRROR_ANNOTATION in annotations


def _mirror_status_update(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The kubelet's ``pods/status`` write once a mirror pod's containers run: the stored pod (uid,
    resourceVersion, creationTimestamp) before, the same pod Running after."""
    stored = copy.deepcopy(entry["object"])
    stored["metadata"].update({
        "uid": _uuid_from(stored["metadata"]["name"]),
        "resourceVersion": "412",
        "creationTimestamp": "2026-11-27T09:12:04Z",
    })
    running = copy.deepcopy(stored)
    running["metadata"]["resourceVersion"] = "413"
    started = "2026-11-27T09:12:05Z"
    running["status"] = {
        "phase": "Running",
        "qosClass": stored["status"]["qosClass"],
        "hostIP": "10.0.0.11",
        "hostIPs": [{"ip": "10.0.0.11"}],
        "podIP": "10.0.0.11",
        "podIPs": [{"ip": "10.0.0.11"}],
        "startTime": "2026-11-27T09:12:03Z",
        "conditions": [
            {"type": condition, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
            for condition in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "containerID": f"containerd://{hashlib.sha256(container['name'].encode()).hexdigest()}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
                "lastState": {},
            }
            for container in stored["spec"]["containers"]
        ],
    }
    return {
        "description": f"{entry['description'].removesuffix(' created by the kubelet')}: status update by the kubelet",
        "operation": "UPDATE",
        "resource": entry["resource"],
        "subResource": "status",
        "kind": entry["kind"],
        "namespace": entry["namespace"],
        "name": entry["name"],
        "userInfo": entry["userInfo"],
        "object": running,
        "oldObject": stored,
    }
