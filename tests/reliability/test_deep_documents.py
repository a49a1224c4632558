"""Deeply nested YAML and JSON: refused with the file and place named, by the daemon and by every command.

libyaml's composer recursed in C: a 60 KB flow sequence nested 30,000 deep killed the daemon with SIGSEGV (the
supervisor with it, and the live daemon through its shadow directory), and `check -f` from ~40,000; 100,000
levels gave the other commands a RecursionError traceback. Everything runs as a subprocess here, so a crash
is a failed assertion rather than the end of the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server import forked
from tests.server.harness import RELOADS, REPO_ROOT, DaemonFactory, denied_message, wait_for, write_atomically

#: Deep enough to overflow libyaml's composer, within the daemon's 3 MiB file limit.
CRASHING_DEPTH = 30_000
CLI_DEPTH = 100_000


def _deep_pod(depth: int) -> str:
    return ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: "
            + "[" * depth + "]" * depth + "\n")


def _deep_policy(depth: int) -> str:
    return ("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
            "metadata: {name: deep.static.k8s.io}\nspec: {validations: " + "[" * depth + "]" * depth + "}\n")


def _staticadm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    return forked.run([sys.executable, "-m", "staticadm", *args], cwd=cwd, env=env, timeout=120)


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    manifests = tmp_path / "m"
    manifests.mkdir()
    for example in (REPO_ROOT / "manifests" / "examples").glob("*.yaml"):
        (manifests / example.name).write_text(example.read_text())
    (tmp_path / "deep.yaml").write_text(_deep_pod(CLI_DEPTH))
    (tmp_path / "deep.json").write_text(json.dumps({"kind": "Pod"})[:-1] + ', "spec": '
                                        + "[" * CLI_DEPTH + "]" * CLI_DEPTH + "}")
    (tmp_path / "namespaces.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\nspec: "
                                              + "{a: " * CLI_DEPTH + "1" + "}" * CLI_DEPTH + "\n")
    (tmp_path / "config.yaml").write_text("manifests: " + "[" * CLI_DEPTH + "]" * CLI_DEPTH + "\n")
    (tmp_path / "pod.json").write_text(json.dumps({"apiVersion": "v1", "kind": "Pod",
                                                   "metadata": {"name": "p", "namespace": "default"}}))
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.yaml").write_text("apiVersion: staticadm.io/v1alpha1\nkind: PolicyTest\nmetadata: {name: t}\n"
                                     "manifests: ../m\ncases: " + "[" * CLI_DEPTH + "]" * CLI_DEPTH + "\n")
    return tmp_path


# (arguments, documented exit code, the file the message must name)
COMMANDS = [
    (["check", "-f", "deep.yaml"], 1, "deep.yaml"),
    (["check", "-f", "deep.json"], 1, "deep.json"),
    (["review", "--manifests", "m", "-f", "deep.yaml"], 2, "deep.yaml"),
    (["review", "--manifests", "m", "-f", "deep.json"], 2, "deep.json"),
    (["review", "--manifests", "m", "--namespaces", "namespaces.yaml", "-f", "pod.json"], 2, "namespaces.yaml"),
    (["diff", "m", "m", "-f", "deep.yaml"], 2, "deep.yaml"),
    (["test", "tests"], 2, "test.yaml"),
    (["cel", "eval", "object", "--var", "object=@deep.yaml"], 2, "deep.yaml"),
    (["serve", "--config", "config.yaml"], 2, "config.yaml"),
]


@pytest.mark.parametrize(("args", "code", "named"), COMMANDS, ids=[" ".join(c[0][:2]) + " " + c[2] for c in COMMANDS])
def test_every_command_refuses_100000_levels_with_its_exit_code(inputs: Path, args: list[str], code: int,
                                                                 named: str) -> None:
    done = _staticadm(*args, cwd=inputs)
    output = done.stdout + done.stderr
    assert done.returncode == code, output[-2000:]
    assert "Traceback" not in output and "RecursionError" not in output
    assert named in output and "nested more than" in output, output[-2000:]


def test_cel_eval_refuses_deep_inline_values_and_jsonl_lines(inputs: Path) -> None:
    inline = _staticadm("cel", "eval", "object", "--var", "object=" + "[" * 60_000 + "]" * 60_000, cwd=inputs)
    assert inline.returncode == 2 and "--var object: invalid JSON: line 1, column" in inline.stderr
    assert "nested more than" in inline.stderr and "Traceback" not in inline.stderr
    line = json.dumps({"expr": "x", "vars": {"x": 1}}).replace("1}}", "[" * CLI_DEPTH + "]" * CLI_DEPTH + "}}")
    jsonl = forked.run([sys.executable, "-m", "staticadm", "cel", "eval", "--jsonl"], input=line + "\n",
                       env={"PYTHONPATH": str(REPO_ROOT)}, timeout=60)
    assert jsonl.returncode == 0 and "Traceback" not in jsonl.stderr
    answer = json.loads(jsonl.stdout)
    assert answer["phase"] == "input" and "nested more than" in answer["error"]


def test_cel_eval_refuses_a_yaml_alias_bomb(inputs: Path) -> None:
    # It grew to 4 GB and aborted with std::bad_alloc; check and test already refused the same file.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (inputs / "bomb.yaml").write_text("\n".join(lines) + "\n")
    done = _staticadm("cel", "eval", "size(object)", "--var", "object=@bomb.yaml", cwd=inputs)
    assert done.returncode == 2 and "bomb.yaml" in done.stderr and "alias bomb" in done.stderr, done.stderr[-2000:]


# -- the daemon ------------------------------------------------------------------------------------------


def _failure_logged(daemon_log: str, name: str, *, shadow: bool = False) -> bool:
    for line in daemon_log.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if bool(record.get("shadow")) == shadow and name in line and "nested more than" in line:
            return True
    return False


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_deep_manifest_keeps_the_last_good_snapshot_and_names_the_file(make_daemon: DaemonFactory,
                                                                         workers: str) -> None:
    daemon = make_daemon(args=["--workers", workers, "--log-format", "json"])
    before = daemon.metric(RELOADS, {"status": "failure"})
    write_atomically(daemon.manifests / "deep.yaml", _deep_policy(CRASHING_DEPTH))
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before, timeout=15), daemon.log()[-3000:]
    assert daemon.process is not None and daemon.process.poll() is None
    assert daemon.get("/readyz").status == 200
    assert "pods labelled deny=true" in (denied_message(daemon) or "")
    assert wait_for(lambda: _failure_logged(daemon.log(), "deep.yaml")), daemon.log()[-3000:]
    assert "the manifest directory on disk is invalid" in daemon.get("/readyz?verbose").body.decode()


def test_a_daemon_started_on_a_deep_manifest_stays_up_and_says_why(make_daemon: DaemonFactory) -> None:
    # The restart after the crash used to reload the same file and crash again.
    daemon = make_daemon(args=["--workers", "2", "--log-format", "json"], start=False)
    (daemon.manifests / "deep.yaml").write_text(_deep_policy(CRASHING_DEPTH))
    daemon.start(wait=False)
    assert wait_for(lambda: _failure_logged(daemon.log(), "deep.yaml"), timeout=30), daemon.log()[-3000:]
    assert daemon.get("/readyz").status == 503 and daemon.get("/livez").status == 200
    (daemon.manifests / "deep.yaml").unlink()
    assert wait_for(lambda: daemon.get("/readyz").status == 200, timeout=15)
    assert daemon.process is not None and daemon.process.poll() is None


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_deep_shadow_manifest_never_touches_the_live_daemon(make_daemon: DaemonFactory, tmp_path: Path,
                                                              workers: str) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    daemon = make_daemon(args=["--workers", workers, "--log-format", "json", "--shadow-manifests", str(shadow)])
    write_atomically(shadow / "deep.yaml", _deep_policy(CRASHING_DEPTH))
    assert wait_for(lambda: daemon.metric("staticadm_shadow_reloads_total", {"status": "failure"}) >= 1,
                    timeout=15), daemon.log()[-3000:]
    assert wait_for(lambda: _failure_logged(daemon.log(), "deep.yaml", shadow=True)), daemon.log()[-3000:]
    assert daemon.process is not None and daemon.process.poll() is None
    assert daemon.get("/readyz").status == 200
    assert "pods labelled deny=true" in (denied_message(daemon) or "")
