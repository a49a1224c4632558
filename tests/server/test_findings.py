"""What ``staticadm check`` knows, the daemon says: on a real daemon, a policy refusing control-plane writes,
a policy without a binding and a file skipped for its extension are each
logged once (file, policy, the write refused), counted in ``staticadm_findings{finding}`` and noted in
``/readyz?verbose``; a reload that finds the same says nothing, and a fix resolves them."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.server.harness import REPO_ROOT, Daemon, DaemonFactory, wait_for

EXAMPLES = REPO_ROOT / "manifests" / "examples"
LIMITS = (EXAMPLES / "require-resource-limits.static.k8s.io.yaml").read_text()
#: require-resource-limits without its binding's kube-system exemption: it refuses kubeadm's pods.
LIMITS_EVERYWHERE = LIMITS.split("  # kube-system is")[0]
UNBOUND = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: unbound.static.k8s.io}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  validations: [{expression: "true"}]
"""


def _records(daemon: Daemon, message: str) -> list[dict[str, Any]]:
    return [record for record in (json.loads(line) for line in daemon.log().splitlines() if line.startswith("{"))
            if record.get("msg") == message]


def _count(daemon: Daemon, finding: str) -> float:
    return daemon.metric("staticadm_findings", {"finding": finding})


def _write(path: Path, text: str) -> None:
    staged = path.with_name("." + path.name + ".tmp")
    staged.write_text(text)
    staged.rename(path)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_daemon_reports_checks_findings_once_per_change(make_daemon: DaemonFactory, workers: str) -> None:
    daemon = make_daemon(policy=None, start=False, args=["--log-format", "json", "--workers", workers])
    limits = daemon.manifests / "require-resource-limits.static.k8s.io.yaml"
    limits.write_text(LIMITS_EVERYWHERE)
    (daemon.manifests / "unbound.static.k8s.io.yaml").write_text(UNBOUND)
    (daemon.manifests / "notes.txt").write_text("kept beside the manifests\n")
    daemon.start()

    expected = {"control_plane_write_refused": 7, "unbound_policy": 1,
                "skipped_file": 1, "unregistered": 0, "type_check_warning": 0}
    assert wait_for(lambda: {kind: _count(daemon, kind) for kind in expected} == expected, timeout=15), (
        daemon.get("/metrics").body.decode(), daemon.log())
    refusals = _records(daemon, "policy refuses a control-plane write")
    assert len(refusals) == 7
    etcd = next(record for record in refusals if "etcd mirror pod" in record["write"])
    assert etcd["file"] == str(limits) and etcd["policy"] == "require-resource-limits.static.k8s.io"
    assert etcd["write"].startswith("CREATE pods kube-system/etcd-control-plane-1 by system:node:control-plane-1")
    [unbound] = _records(daemon, "policy has no binding")
    assert unbound["policy"] == "unbound.static.k8s.io"
    [skipped] = _records(daemon, "file skipped for its extension")
    assert skipped["file"] == str(daemon.manifests / "notes.txt")
    notes = [line for line in daemon.get("/readyz?verbose").body.decode().splitlines() if line.startswith("note:")]
    assert any(line.startswith("note: control-plane-write-refused: 7: ValidatingAdmissionPolicy/require-resource-"
                               "limits.static.k8s.io: CREATE pods kube-system/") for line in notes), notes
    assert any(line.startswith("note: unbound-policy: 1:") for line in notes), notes
    assert any(line.startswith("note: skipped-file: 1:") for line in notes), notes
    assert daemon.status("/readyz") == 200

    # The same directory again (SIGHUP): nothing is said twice.
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGHUP)
    assert wait_for(lambda: len(_records(daemon, "manifest directory unchanged; the served configuration is current"))
                    >= 1, timeout=15), daemon.log()
    assert len(_records(daemon, "policy refuses a control-plane write")) == 7

    # The exemption restored: the refusals are resolved, the others stay.
    _write(limits, LIMITS)
    assert wait_for(lambda: _count(daemon, "control_plane_write_refused") == 0, timeout=15), daemon.log()
    assert len([record for record in _records(daemon, "finding resolved")
                if record["finding"] == "control_plane_write_refused"]) == 7
    assert _count(daemon, "unbound_policy") == 1
    assert wait_for(lambda: "note: control-plane-write-refused" not in daemon.get("/readyz?verbose").body.decode(),
                    timeout=15)
