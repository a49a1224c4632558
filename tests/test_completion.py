"""``staticadm completion bash|zsh|fish``: scripts each shell accepts, completing what the parser takes, run by the
shells themselves."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from staticadm.cli import build_parser
from staticadm.completion import SHELLS, describe_parser
from tests.server import forked
from tests.server.harness import REPO_ROOT


def _script(shell: str, tmp_path: Path) -> Path:
    completed = forked.run([sys.executable, "-m", "staticadm", "completion", shell], cwd=REPO_ROOT, timeout=60)
    assert completed.returncode == 0, completed.stderr
    path = tmp_path / f"staticadm.{shell}"
    path.write_text(completed.stdout)
    return path


@pytest.mark.parametrize("shell", SHELLS)
def test_each_script_is_valid_for_its_shell_and_names_every_command(shell: str, tmp_path: Path) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (.ci/run installs it)")
    script = _script(shell, tmp_path)
    checked = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    text = script.read_text()
    commands = [command.path[-1] for command in describe_parser(build_parser()).subcommands]
    assert "review" in commands and "completion" in commands
    missing = [command for command in commands if command not in text]
    assert not missing, missing


def _bash_complete(script: Path, *words: str) -> list[str]:
    program = (f"source {script}; COMP_WORDS=({' '.join(repr(word) for word in words)}); "
               f"COMP_CWORD={len(words) - 1}; _staticadm; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    completed = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.split()


def test_bash_completes_commands_subcommands_options_and_their_values(tmp_path: Path) -> None:
    script = _script("bash", tmp_path)
    assert _bash_complete(script, "staticadm", "rev") == ["review"]
    assert _bash_complete(script, "staticadm", "cel", "") == ["eval", "-h", "--help", "--no-color"]
    assert _bash_complete(script, "staticadm", "review", "DIR", "-o", "") == [
        "table", "wide", "text", "json", "yaml", "policyreport", "openreport"]
    assert _bash_complete(script, "staticadm", "review", "--aud") == [
        "--audit-log", "--audit-verb", "--audit-resource", "--audit-namespace", "--audit-since", "--audit-until"]
    assert _bash_complete(script, "staticadm", "completion", "") == ["bash", "zsh", "fish"]
    (tmp_path / "policies").mkdir()
    assert _bash_complete(script, "staticadm", "check", "--manifests", f"{tmp_path}/pol") == [f"{tmp_path}/policies"]


def test_fish_completes_the_same(tmp_path: Path) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed (.ci/run installs it)")
    script = _script("fish", tmp_path)

    def complete(line: str) -> list[str]:
        completed = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C '{line}'"],
                                   capture_output=True, text=True, timeout=60)
        assert completed.returncode == 0, completed.stderr
        return [entry.split("\t")[0] for entry in completed.stdout.splitlines()]

    assert complete("staticadm rev") == ["review"]
    assert complete("staticadm review -o ") == sorted(["table", "wide", "text", "json", "yaml", "policyreport",
                                                       "openreport"])
    assert complete("staticadm cel ") == ["eval"]
    assert "--dry-run" in complete("staticadm review --dry")
