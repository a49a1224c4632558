"""kube-apiserver's own in-process cost for the benchmark's policy sets and requests.

``../shared/oracle/k8s-admission-oracle --repeat N`` (beside the checkout; see its README) runs k8s.io/apiserver's
ValidatingAdmissionPolicy and MutatingAdmissionPolicy plugins on static manifests, prints each decision (the
warm-up), then evaluates every request N more times and reports the time of one evaluation (from the decoded
request: deep copy, attributes, Admit with reinvocation, Validate) and the CPU of the whole loop divided by the
evaluations (Go's collector and other threads included). That is what kube-apiserver spends on the same policies
in process, where staticadm spends it behind a webhook: the figure the daemon's CPU per request is held against.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
ORACLE = REPO_ROOT.parent / "shared" / "oracle" / "k8s-admission-oracle"
TIMEOUT = 300.0


class OracleUnavailable(RuntimeError):
    """Why no figure could be taken (the binary is absent, or it failed); the row is skipped with this reason."""


@dataclass(frozen=True, slots=True)
class OracleFigures:
    """One request through kube-apiserver's admission plugins, ``repeat`` times after a warm-up."""

    repeat: int
    p50_us: float
    p99_us: float
    #: User + system CPU of the oracle's process per evaluation (Go's collector included).
    cpu_us: float
    #: kube-apiserver's decision, so a row is known to measure the same outcome as staticadm's.
    allowed: bool
    #: Whether kube-apiserver's mutating policies changed the object (every object, of several).
    patched: bool
    #: How many distinct requests the figures are over (each evaluated ``repeat`` times).
    requests: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"repeat": self.repeat, "requests": self.requests, "p50_us": round(self.p50_us, 1),
                "p99_us": round(self.p99_us, 1),
                "cpu_us": round(self.cpu_us, 1), "allowed": self.allowed, "patched": self.patched}


def available() -> str | None:
    """None when the oracle can run here, else why not."""
    if not ORACLE.is_file():
        return f"kube-apiserver's in-process cost not measured: {ORACLE} not found (../shared beside the checkout)"
    return None


def _namespace_list(namespace_file: Path, directory: Path) -> Path:
    """The oracle reads a v1 List of Namespaces; the benchmark's file holds one Namespace document."""
    items = [document for document in yaml.safe_load_all(namespace_file.read_text()) if document]
    path = directory / "namespaces-list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def measure(manifests: Path, namespaces: Path, body: bytes | list[bytes], repeat: int) -> OracleFigures:
    """kube-apiserver's in-process evaluation of the AdmissionReview ``body`` against ``manifests``; of a list of
    them, each evaluated ``repeat // len(body)`` times (at least once), the figures over them all."""
    bodies = body if isinstance(body, list) else [body]
    repeat = max(1, repeat // len(bodies))
    reason = available()
    if reason is not None:
        raise OracleUnavailable(reason)
    with tempfile.TemporaryDirectory(prefix="staticadm-oracle-") as temp:
        namespace_list = _namespace_list(namespaces, Path(temp))
        try:
            completed = subprocess.run(
                [str(ORACLE), "--manifests", str(manifests), "--namespaces", str(namespace_list),
                 "--repeat", str(repeat)],
                input=b"".join(one.rstrip(b"\n") + b"\n" for one in bodies), capture_output=True, timeout=TIMEOUT,
                check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise OracleUnavailable(f"{ORACLE.name} did not run: {error}") from None
    if completed.returncode != 0:
        raise OracleUnavailable(f"{ORACLE.name} exited with {completed.returncode}: "
                                f"{(completed.stdout + completed.stderr).decode(errors='replace')[-300:]}")
    try:
        decisions = [orjson.loads(line) for line in completed.stdout.splitlines()[:len(bodies)]]
        timing = orjson.loads(completed.stderr.strip().splitlines()[-1])
    except (IndexError, orjson.JSONDecodeError):
        decisions, timing = [], None
    if timing is None or len(decisions) < len(bodies):
        raise OracleUnavailable(f"{ORACLE.name} printed no decision or timing: "
                                f"{completed.stderr.decode(errors='replace')[-300:]}")
    failed = next((one for one in decisions if "error" in one), None)
    if failed is not None:
        raise OracleUnavailable(f"{ORACLE.name} could not evaluate the request: {failed['error']}")
    return OracleFigures(repeat=int(timing["repeat"]), p50_us=timing["ns_per_eval_p50"] / 1000,
                         p99_us=timing["ns_per_eval_p99"] / 1000, cpu_us=timing["cpu_ns_per_eval"] / 1000,
                         allowed=all(one.get("allowed") for one in decisions),
                         patched=all("patchedObject" in one for one in decisions), requests=len(bodies))
