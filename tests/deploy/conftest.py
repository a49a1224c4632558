"""Shared helpers for the deployment kit tests: the real CLI, in-process and as a subprocess."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from pathlib import Path

from staticadm.cli import main
from tests.server import forked
from tests.server.harness import make_daemon

#: The daemon fixture from tests/server (the recipes of the operations page run against it).
__all__ = ["make_daemon"]

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "manifests" / "examples"
KUBE_APISERVER = REPO_ROOT / "manifests" / "kube-apiserver"
SYSTEMD = REPO_ROOT / "systemd"
REQUESTS = Path(__file__).resolve().parent / "requests"


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(*argv: str) -> Result:
    """``staticadm ARGV`` in this process, through the same entry point the console script uses."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(), stdout=stdout, stderr=stderr)
    return Result(code, stdout.getvalue(), stderr.getvalue())


def run_subprocess(*argv: str, timeout: float = 120.0) -> Result:
    """``staticadm ARGV`` as a separate process, as an operator runs it."""
    completed = forked.run([sys.executable, "-m", "staticadm", *argv], timeout=timeout)
    return Result(completed.returncode, completed.stdout, completed.stderr)
