"""staticadm and kube-apiserver's own admission code (``../shared/oracle/k8s-admission-oracle``) on the same
manifests and requests, each answer reduced to what kube-apiserver decides.

The oracle runs k8s.io/apiserver's ValidatingAdmissionPolicy and MutatingAdmissionPolicy plugins (policy mode):
mutating policies first, with reinvocation, then validating policies on the mutated object. staticadm runs the
same chain in process (``review_request`` with "both", as ``staticadm review`` does). One oracle process reads
every request of a policy set (one AdmissionReview a line), so a run costs one process per set.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticadm.admission.endpoints import combined_response, review_request
from staticadm.admission.namespaces import NamespaceSource, RequestOnlyNamespaces, parse_namespaces
from staticadm.manifests.loader import load_manifest_directory
from staticadm.snapshot import build_snapshot
from tests.admission.helpers import parsed
from tests.conftest import SHARED

ORACLE = SHARED / "oracle" / "k8s-admission-oracle"


def oracle_or_skip() -> Path:
    """The oracle's path; skips the calling test (or module, at import time) when it is not beside the checkout."""
    if not ORACLE.is_file():
        pytest.skip(f"kube-apiserver's admission oracle not found at {ORACLE} (clone the repository next to "
                    "'shared/' to run the differential tests; CI always does)", allow_module_level=True)
    return ORACLE


@dataclass(frozen=True, slots=True)
class Answer:
    """What kube-apiserver decides for one request, as both sides report it."""

    allowed: bool
    code: int
    message: str
    warnings: tuple[str, ...]
    audit_annotations: Mapping[str, str]
    #: The object after mutation; None when admission left it unchanged.
    patched: Any

    def as_dict(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "code": self.code, "message": self.message, "warnings": list(self.warnings),
                "auditAnnotations": dict(self.audit_annotations), "patched": self.patched}


class LoadRefused(Exception):
    """A side refused the manifests: its text."""


def write_manifests(directory: Path, objects: Sequence[Mapping[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policies.yaml").write_text(yaml.safe_dump_all([dict(item) for item in objects]))


def namespace_list(namespaces: Mapping[str, Mapping[str, str]]) -> str:
    """A v1 List of Namespace objects with these labels (JSON text), for both sides."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}
        for name, labels in namespaces.items()]})


def oracle_answers(directory: Path, reviews: Sequence[Mapping[str, Any]],
                   namespaces: Path | None = None) -> list[Answer]:
    """The oracle's answer to each of ``reviews`` (uids must be distinct) on the manifests in ``directory``."""
    lines = "".join(json.dumps(review) + "\n" for review in reviews)
    command = [str(ORACLE), "--manifests", str(directory)]
    if namespaces is not None:
        command += ["--namespaces", str(namespaces)]
    run = subprocess.run(command, input=lines, capture_output=True, text=True, timeout=300, check=False)
    outputs = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    if run.returncode == 2 and outputs and "loadError" in outputs[0]:
        raise LoadRefused(outputs[0]["loadError"])
    assert run.returncode == 0, f"oracle exited {run.returncode}: {run.stderr[-2000:]}"
    assert len(outputs) == len(reviews), run.stderr[-2000:]
    answers = []
    for output in outputs:
        assert "error" not in output, output
        patched = output.get("patchedObject")
        if patched is not None and patched == output.get("normalizedObject"):
            patched = None
        answers.append(Answer(output["allowed"], output["code"], output.get("policyMessage", ""),
                              tuple(output.get("warnings") or ()), dict(output.get("auditAnnotations") or {}),
                              patched))
    return answers


def staticadm_answers(directory: Path, reviews: Sequence[Mapping[str, Any]],
                      namespaces: Path | None = None) -> list[Answer]:
    """staticadm's answer to each of ``reviews`` on the manifests in ``directory``, in process."""
    loaded = load_manifest_directory(str(directory))
    if loaded.errors:
        raise LoadRefused("; ".join(str(error) for error in loaded.errors))
    snapshot = build_snapshot(loaded)
    known: NamespaceSource = (RequestOnlyNamespaces() if namespaces is None
                              else parse_namespaces(namespaces.read_text()))
    answers = []
    for raw in reviews:
        request = parsed(json.loads(json.dumps(raw)))
        mutation, validation = review_request(snapshot, known, request, "both")
        response = combined_response(request, mutation, validation)["response"]
        status = response.get("status") or {}
        annotations = dict(validation.annotations) if validation is not None else {}
        patched = mutation.mutated_object if mutation is not None and mutation.patch else None
        answers.append(Answer(response["allowed"], status.get("code", 200) if not response["allowed"] else 200,
                              status.get("message", "") if not response["allowed"] else "",
                              tuple(response.get("warnings") or ()), annotations, patched))
    return answers


def differences(expected: Answer, actual: Answer) -> list[str]:
    """The fields of ``actual`` (staticadm) that differ from ``expected`` (the oracle), described."""
    found = []
    for field, want in expected.as_dict().items():
        if field == "patched" and not expected.allowed:
            # A denied request's object goes nowhere: the oracle prints what the mutations before the denial left.
            continue
        got = actual.as_dict()[field]
        if got != want:
            found.append(f"{field}: oracle {want!r}, staticadm {got!r}")
    return found
