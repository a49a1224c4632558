"""The README's newcomer path works as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.documentation import sh_block
from tests.server.harness import REPO_ROOT, free_port, stop_process, wait_for


def _environment(tmp_path: Path) -> dict[str, str]:
    """`staticadm` on PATH as the venv installs it: the interpreter running the tests, with this checkout."""
    shim = tmp_path / "bin" / "staticadm"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m staticadm "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO_ROOT)}


def test_the_first_policy_walkthrough_checks_and_tests_green(tmp_path: Path) -> None:
    script = sh_block("README.md", "mkdir -p my-policies/tests")
    env = _environment(tmp_path)
    completed = subprocess.run(["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "2 passed, 0 failed" in completed.stdout


def test_the_offline_quickstart_commands_work_as_written(tmp_path: Path) -> None:
    """Every file they name exists, and each command answers as its comment says (no command errors)."""
    script = sh_block("README.md", "staticadm check manifests/examples")
    env = _environment(tmp_path)
    commands = script.replace("\\\n", " ").splitlines()
    assert len(commands) == 4
    codes = []
    for command in commands:
        completed = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                   timeout=120)
        assert "Traceback" not in completed.stderr and "cannot read" not in completed.stderr, completed.stderr
        codes.append((completed.returncode, completed.stdout.strip().splitlines()[-1]))
    assert codes[0][0] == 0 and codes[1][0] == 3 and codes[2][0] == 3
    assert codes[3] == (0, "false")


def _serve_arguments(command: str) -> list[str]:
    words = shlex.split(command.replace("\\\n", " "))
    return words[words.index("serve") + 1:]


def test_the_first_command_and_the_quickstart_curl_lines_work_as_pasted(tmp_path: Path) -> None:
    """The set-up's daemon is the one the Quickstart's curl lines ask: the same explicit paths, and those lines
    answer (the /tmp paths moved under the test's directory and 8443 replaced, since other tests run at once)."""
    first = sh_block("README.md", "python3 -m venv .venv && .venv/bin/pip install -q -e . &&")
    serve = first.split("&&")[-1].strip()
    quickstart = sh_block("README.md", "staticadm serve --manifests manifests/examples")
    assert _serve_arguments(serve) == _serve_arguments(quickstart)
    assert serve.startswith(".venv/bin/staticadm serve")
    port = free_port()

    def moved(text: str) -> str:
        return text.replace("/tmp/staticadm", str(tmp_path / "staticadm")).replace("127.0.0.1:8443",
                                                                                  f"127.0.0.1:{port}")

    env = _environment(tmp_path)
    command = moved(serve.replace(".venv/bin/staticadm", "staticadm")).replace("\\\n", " ")
    with (tmp_path / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(["bash", "-c", f"exec {command} --listen 127.0.0.1:{port} --workers 1"],
                                  cwd=REPO_ROOT, env=env, stdout=log, stderr=log)
    try:
        curls = [line for line in re.split(r"(?<!\\)\n", sh_block("README.md", "curl --unix-socket"))
                 if line.startswith("curl")]
        assert len(curls) == 3

        def run(line: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(["bash", "-c", "curl -sS --fail " + moved(line).removeprefix("curl ")],
                                  cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30, check=False)

        assert wait_for(lambda: run(curls[0]).returncode == 0, timeout=60), (tmp_path / "daemon.log").read_text()
        assert "readyz check passed" in run(curls[0]).stdout
        answer = json.loads(run(curls[1]).stdout)
        assert answer["response"]["allowed"] is False, answer
        https = run(curls[2])
        assert (https.returncode, https.stdout) == (0, "ok"), https.stderr
    finally:
        stop_process(daemon)
