"""/mutate's evaluation in process: ``evaluate_mutating`` on a parsed request, without HTTP or JSON.

Run: python -m bench.mutate_micro

Two workloads: ``labels/annotations`` is bench.run's mutating set (6 MutatingAdmissionPolicies writing a label or
an annotation each) on the pod-create request, the daemon's ``/mutate`` row; ``sidecar`` is a container added by an
ApplyConfiguration and an env var added by a JSON Patch on the same Pod, typed and defaulted first as
kube-apiserver sends it: each of those mutations leaves the object typed and defaulted again
(``staticadm/kinds/mutated.py``), which a labels/annotations mutation needs not. Figures are process CPU time per
request (the median of five passes), so a busy machine inflates them less than wall time.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import policies
from bench.fixtures import pod_create_request
from staticadm.admission.mutating.dispatcher import evaluate_mutating
from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.admission.request import AdmissionRequest, parse_admission_review
from staticadm.kinds import as_admitted
from staticadm.manifests.loader import load_manifest_directory
from staticadm.snapshot import Snapshot, build_snapshot

API = "admissionregistration.k8s.io/v1"


def _policy(name: str, mutation: dict[str, Any]) -> list[dict[str, Any]]:
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    return [{"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
             "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                      "matchConstraints": {"resourceRules": rules}, "mutations": [mutation]}},
            {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
             "spec": {"policyName": name}}]


SIDECAR = [
    *_policy("a-sidecar.static.k8s.io", {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
        "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'sidecar', image: 'proxy:1'}]}}")}}),
    *_policy("b-env.static.k8s.io", {"patchType": "JSONPatch", "jsonPatch": {"expression": (
        "[JSONPatch{op: 'add', path: '/spec/containers/0/env/-', value: {'name': 'X', 'value': 'y'}}]")}}),
]


def _snapshot(write: Any) -> Snapshot:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "manifests"
        write(directory)
        loaded = load_manifest_directory(str(directory))
    assert not loaded.errors, loaded.errors
    return build_snapshot(loaded)


def _write_sidecar(directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / "sidecar.static.k8s.io.yaml").write_text(yaml.safe_dump_all(SIDECAR))


def _requests(count: int, admitted: bool) -> list[AdmissionRequest]:
    raw = pod_create_request()
    if admitted:
        typed = as_admitted(raw["request"]["object"])
        assert typed is not None
        raw["request"]["object"] = typed.value
    text = json.dumps(raw)
    found = []
    for _ in range(count):
        request = parse_admission_review(json.loads(text))
        assert isinstance(request, AdmissionRequest)
        found.append(request)
    return found


def _microseconds(snapshot: Snapshot, requests: list[AdmissionRequest]) -> float:
    namespaces = RequestOnlyNamespaces()
    first = evaluate_mutating(snapshot, namespaces, requests[0])
    assert first.allowed and first.patch, first.status
    passes = []
    for _ in range(5):
        start = time.process_time()
        for request in requests:
            evaluate_mutating(snapshot, namespaces, request)
        passes.append((time.process_time() - start) / len(requests) * 1e6)
    return statistics.median(passes)


def main() -> None:
    labels = _snapshot(lambda directory: policies.write_mutating_set(directory))
    sidecar = _snapshot(_write_sidecar)
    print(f"labels/annotations (6 policies): {_microseconds(labels, _requests(1500, admitted=False)):.0f} us/request")
    print(f"sidecar (2 policies): {_microseconds(sidecar, _requests(500, admitted=True)):.0f} us/request")


if __name__ == "__main__":
    main()
