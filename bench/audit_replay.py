"""Peak memory and time of ``staticadm review --audit-log`` replaying a large audit log.

Writes a log of N RequestResponse events (each request at RequestReceived and ResponseComplete, as
kube-apiserver's log backend writes them, a Pod of about 6 KiB in each body: ~9 KiB a line on average), then runs
``staticadm review --manifests manifests/examples --audit-log LOG -o json`` as a subprocess and reports its
wall time and peak resident set (ru_maxrss of the child). The target (issue 36): under 150 MB at 20,000
events, whatever the log's size.

    .venv/bin/python -m bench.audit_replay                   # 20,000 events
    .venv/bin/python -m bench.audit_replay --events 5000 --code /work/main   # another checkout's code
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
TARGET_MIB = 150


def _pod(index: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-{index}", "namespace": "shop",
                         "annotations": {"note": "x" * 6000}, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27",
                                     "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}}


def _event(index: int, stage: str) -> dict[str, Any]:
    value: dict[str, Any] = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse", "auditID": f"id-{index}",
        "stage": stage, "requestURI": "/api/v1/namespaces/shop/pods", "verb": "create",
        "user": {"username": "admin", "groups": ["system:authenticated"]},
        "objectRef": {"resource": "pods", "namespace": "shop", "name": f"web-{index}", "apiVersion": "v1"},
        "requestObject": _pod(index), "requestReceivedTimestamp": "2026-05-01T10:00:00.000000Z",
    }
    if stage == "ResponseComplete":
        value["responseStatus"] = {"metadata": {}, "code": 201}
        value["responseObject"] = _pod(index)
    return value


def write_log(path: Path, events: int) -> None:
    with path.open("w") as handle:
        for index in range(events // 2):
            handle.write(json.dumps(_event(index, "RequestReceived"), separators=(",", ":")) + "\n")
            handle.write(json.dumps(_event(index, "ResponseComplete"), separators=(",", ":")) + "\n")


def measure(events: int, code: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="staticadm-bench-replay-") as scratch:
        log = Path(scratch) / "audit.log"
        write_log(log, events)
        started = time.monotonic()
        completed = subprocess.run([sys.executable, "-m", "staticadm", "review", "--manifests",
                                    str(REPO_ROOT / "manifests" / "examples"), "--audit-log", str(log), "-o", "json"],
                                   cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
        seconds = time.monotonic() - started
        if completed.returncode not in (0, 3):
            raise SystemExit(f"review exited {completed.returncode}: {completed.stderr[-2000:]}")
        return {"log_mib": log.stat().st_size / 2**20, "seconds": seconds,
                "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose staticadm runs")
    args = parser.parse_args()
    result = measure(args.events, args.code)
    verdict = "PASS" if result["peak_mib"] < TARGET_MIB else "FAIL"
    print(f"{args.events} events, log {result['log_mib']:.0f} MiB: {result['seconds']:.1f} s, peak RSS "
          f"{result['peak_mib']:.0f} MiB (target < {TARGET_MIB} MiB: {verdict})")


if __name__ == "__main__":
    main()
