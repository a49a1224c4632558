"""How long ``staticadm audit --kubeconfig`` takes on a cluster of existing Pods.

A stand-in kube-apiserver (the cluster tests', over HTTPS with a bearer token) serves N copies of the
benchmark's fixture Pod in its namespace; ``staticadm audit`` runs as an operator runs it, as a
subprocess, against the 100-policy benchmark set (``bench/policies.py``). The time is the command's wall
clock: discovery, the paged lists, evaluating every Pod as a no-op UPDATE, and the report.

    .venv/bin/python -m bench.audit_existing                  # 10,000 Pods, 100 policies
    .venv/bin/python -m bench.audit_existing --pods 2000 --policies 10
    .venv/bin/python -m bench.audit_existing --pods 2000 --policies 10 --output policyreport   # the reports' cost
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.fixtures import pod  # noqa: E402
from bench.policies import NAMESPACE, NAMESPACE_LABELS, write_validating_set  # noqa: E402
from tests.cluster.apiserver import FakeApiServer  # noqa: E402
from tests.server.harness import free_port  # noqa: E402


def measure(pods: int, policies: int, page_size: int, output: str = "json") -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="staticadm-bench-audit-") as scratch:
        root = Path(scratch)
        apiserver = FakeApiServer(root / "apiserver", free_port())
        labels = {key: value for key, value in NAMESPACE_LABELS.items() if key != "kubernetes.io/metadata.name"}
        apiserver.set_namespace(NAMESPACE, labels)
        apiserver.add_resource("", "v1", "pods", "Pod")
        template = pod()
        objects = []
        for index in range(pods):
            item = copy.deepcopy(template)
            item["metadata"]["name"] = f"bench-{index:06d}"
            objects.append(item)
        apiserver.set_objects("", "v1", "pods", objects)
        apiserver.start()
        try:
            manifests = write_validating_set(root / "manifests", policies)
            kubeconfig = apiserver.kubeconfig(root / "kubeconfig")
            started = time.perf_counter()
            completed = subprocess.run(
                [sys.executable, "-m", "staticadm", "audit", str(manifests), "--kubeconfig", str(kubeconfig),
                 "--page-size", str(page_size), "-o", output], capture_output=True, text=True, cwd=REPO_ROOT)
            seconds = time.perf_counter() - started
        finally:
            apiserver.stop()
    if completed.returncode not in (0, 3):
        raise SystemExit(f"staticadm audit failed ({completed.returncode}):\n{completed.stderr}")
    if output != "json":
        import yaml

        reports = list(yaml.safe_load_all(completed.stdout))
        results = sum(len(report["results"]) for report in reports)
        return {"pods": pods, "policies": policies, "output": output, "reports": len(reports), "results": results,
                "seconds": round(seconds, 2), "objects_per_second": round(pods / seconds, 1)}
    report = json.loads(completed.stdout)
    return {"pods": pods, "policies": policies, "objects": report["summary"]["objects"], "seconds": round(seconds, 2),
            "objects_per_second": round(report["summary"]["objects"] / seconds, 1),
            "audit_seconds_reported": report["summary"]["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--policies", type=int, default=100)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--output", choices=("json", "policyreport", "openreport"), default="json",
                        help="what the audit prints: its AuditReport, or the reports (which explain every decision)")
    args = parser.parse_args()
    print(json.dumps(measure(args.pods, args.policies, args.page_size, args.output)))


if __name__ == "__main__":
    main()
