"""What a user of the offline commands meets: interruption, progress on a terminal, wording, JUnit times."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import yaml

from staticadm.cli import main
from staticadm.progress import Progress
from tests.server import forked
from tests.server.harness import REPO_ROOT

EXAMPLES = REPO_ROOT / "manifests" / "examples"


def test_ctrl_c_exits_130_with_one_line_and_no_traceback() -> None:
    # A shell starts background jobs with SIGINT ignored, and Python then installs no handler for it; a
    # terminal's Ctrl-C reaches a process that has SIGINT at its default, so the command starts with that.
    process = subprocess.Popen([sys.executable, "-m", "staticadm", "cel", "eval", "--jsonl"], cwd=REPO_ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write('{"expr": "1 + 1"}\n')
    process.stdin.flush()
    assert process.stdout.readline() == '{"value":2}\n'  # running, and now waiting for the next line
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert "Traceback" not in err and err.strip() == "staticadm: interrupted"


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    many = tmp_path / "pods.yaml"
    many.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
                                         "spec": {"containers": []}} for i in range(300)]))
    completed = subprocess.run(f"'{sys.executable}' -m staticadm review --manifests '{EXAMPLES}' -f '{many}' "
                               "| head -1; exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                               capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert "Traceback" not in completed.stderr and "BrokenPipeError" not in completed.stderr
    assert completed.returncode == 141 and completed.stdout.count("\n") == 1


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_only_on_a_terminal_after_the_delay_and_clears_itself() -> None:
    terminal, pipe = Terminal(), io.StringIO()
    with Progress(terminal, "reviewing requests", 3, delay=0.05, interval=0.0) as shown, \
            Progress(pipe, "reviewing requests", 3, delay=0.0, interval=0.0) as hidden:
        shown.advance()
        assert terminal.getvalue() == ""  # a short run says nothing
        time.sleep(0.06)
        shown.advance()
        hidden.advance()
        shown.write_line("a note")
        shown.advance()
    output = terminal.getvalue()
    assert "\rreviewing requests: 2/3 (0 s)" in output and "\rreviewing requests: 3/3 (0 s)" in output
    assert "a note\n" in output and output.endswith("\r")  # the line is blanked at the end
    assert pipe.getvalue() == ""


def test_check_strict_says_kube_apiserver_would_load_a_directory_it_only_warns_about(tmp_path: Path) -> None:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "p.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "p.static.k8s.io"},
         "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["pods"]}]},
                  "validations": [{"expression": "object.spec.template.spec.x == 1"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "p.static.k8s.io"},
         # Outside kube-system: the control-plane writes `check` replays would fail on the expression too.
         "spec": {"policyName": "p.static.k8s.io", "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchExpressions": [
                      {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}}}}]))
    out = io.StringIO()
    assert main(["check", "--strict", str(directory)], stdout=out, stderr=io.StringIO()) == 1
    first = out.getvalue().splitlines()[0]
    assert first.startswith(f"{directory}: INVALID, 1 error; --strict: 1 type-checking error; kube-apiserver "
                            "would load it")
    assert "would refuse" not in out.getvalue()
    out = io.StringIO()
    assert main(["check", str(directory)], stdout=out, stderr=io.StringIO()) == 0
    assert out.getvalue().startswith(f"{directory}: OK")


def test_junit_testcases_carry_their_time(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    assert main(["test", str(EXAMPLES / "tests"), "--junit", str(junit)], stdout=io.StringIO(),
                stderr=io.StringIO()) == 0
    cases = list(ElementTree.parse(junit).getroot().iter("testcase"))
    assert cases and all(float(case.get("time", "-1")) >= 0 for case in cases)
    suite = next(ElementTree.parse(junit).getroot().iter("testsuite"))
    assert float(suite.get("time", "-1")) == sum(float(case.get("time", "0")) for case in suite) or \
        abs(float(suite.get("time", "0")) - sum(float(case.get("time", "0")) for case in suite)) < 1e-5


def test_review_takes_the_manifest_directory_as_check_and_diff_do(tmp_path: Path) -> None:
    request = REPO_ROOT / "tests" / "deploy" / "requests" / "deny-privileged" / "denied-privileged-init.json"
    for args in (["review", "--manifests", str(EXAMPLES), str(request)], ["review", str(EXAMPLES), str(request)],
                 ["review", str(EXAMPLES), "-f", str(request)]):
        out, err = io.StringIO(), io.StringIO()
        assert main(args, stdout=out, stderr=err) == 3, (args, err.getvalue())
        assert "decision: denied" in out.getvalue()
    err = io.StringIO()
    assert main(["review", str(request)], stdout=io.StringIO(), stderr=err) == 2
    assert "give the manifest directory" in err.getvalue()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    completed = forked.run([sys.executable, "-m", "staticadm", "review", "--help"], env=env)
    assert completed.returncode == 0 and completed.stdout.count("DIR") >= 2, completed
