"""The README's newcomer path works as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.documentation import sh_block
from tests.server.harness import REPO_ROOT


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
