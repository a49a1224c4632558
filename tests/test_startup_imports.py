"""Each command imports what it runs, not what another command needs (issue 46: the suite starts hundreds of them).

Building the parser, which every command does, reads only the defaults it shows (:mod:`staticadm.defaults`); the
offline commands run without the daemon's HTTP, TLS, logging and metrics libraries. What a fresh process holds
after the command is read from ``sys.modules``: no timing, only which modules were imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.harness import REPO_ROOT

EXAMPLES = REPO_ROOT / "manifests" / "examples"

#: The daemon's libraries: HTTP (server and cluster client), TLS certificates, structured logs, metrics, file events.
DAEMON_LIBRARIES = ("aiohttp", "cryptography", "structlog", "prometheus_client", "watchdog")

#: Run ``staticadm ARGS`` in this process as ``python -m staticadm`` would, then write the modules it imported.
_RUN = """
import json, sys
from staticadm.cli import main
try:
    main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as out:
        json.dump(sorted(sys.modules), out)
"""


def imported_by(args: list[str], tmp_path: Path) -> set[str]:
    modules = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-c", _RUN, str(modules), *args], cwd=REPO_ROOT, env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return set(json.loads(modules.read_text()))


def under(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(package for package in packages
                  if any(module == package or module.startswith(package + ".") for module in modules))


def test_help_builds_the_parser_without_the_engine_or_the_daemon(tmp_path: Path) -> None:
    modules = imported_by(["--help"], tmp_path)
    assert "staticadm.cli" in modules
    assert under(modules, (*DAEMON_LIBRARIES, "asyncio", "yaml", "cel_expr_python", "staticadm.cel",
                           "staticadm.admission", "staticadm.kinds", "staticadm.offline", "staticadm.deploy",
                           "staticadm.cluster", "staticadm.manifests")) == []


@pytest.mark.parametrize("args", [
    ["check", str(EXAMPLES)],
    ["review", str(EXAMPLES), "-f", str(EXAMPLES / "tests" / "pod.yaml")],
    ["test", str(EXAMPLES / "tests")],
], ids=["check", "review", "test"])
def test_an_offline_command_runs_without_the_daemons_libraries(args: list[str], tmp_path: Path) -> None:
    modules = imported_by(args, tmp_path)
    assert "staticadm.cel.environment" in modules  # it ran: the policies were compiled
    assert under(modules, (*DAEMON_LIBRARIES, "staticadm.server.main", "staticadm.cluster")) == []
