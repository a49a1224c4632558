"""The operator's recipes of the docs, run as written: the troubleshooting grep picks errors and not denials,
a port 8443 taken by another program is named with what to do, and the audit RBAC example grants the
lists the examples' policies need."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from staticadm.manifests.loader import load_manifest_directory
from staticadm.yamljson import parse_stream
from tests.deploy.conftest import EXAMPLES, KUBE_APISERVER, REPO_ROOT
from tests.server.harness import DaemonFactory, review, wait_for, write_atomically


def _troubleshooting_grep() -> list[str]:
    """The grep of docs/operations.md's troubleshooting recipe, as its shell would split it."""
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    [line] = [line for line in text.splitlines() if line.strip().startswith("journalctl -u staticadm --since")]
    return shlex.split(line.split("|", 1)[1])


def test_the_troubleshooting_grep_shows_errors_and_not_denials(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(policy="pods labelled deny=true are not allowed")
    answer = daemon.validate(review({"deny": "true"}))
    assert answer.json()["response"]["allowed"] is False
    write_atomically(daemon.manifests / "deny.yaml", "apiVersion: admissionregistration.k8s.io/v1\nkind: Nonsense\n")
    assert wait_for(lambda: "reloading manifest config failed" in daemon.log(), timeout=15)
    log = daemon.log()
    assert '"error_type":"no_error"' in log  # the denial's line, which a plain `grep error` matched
    grep = _troubleshooting_grep()
    assert grep[0] == "grep"
    shown = subprocess.run(grep, input=log, capture_output=True, text=True, check=False).stdout.splitlines()
    assert any("reloading manifest config failed" in line for line in shown), shown
    assert not any('"error_type":"no_error"' in line for line in shown), shown


def test_a_taken_port_is_named_with_what_to_do(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "manifests").mkdir()
        completed = subprocess.run(
            [sys.executable, "-m", "staticadm", "serve", "--manifests", str(EXAMPLES), "--socket", "",
             "--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state"), "--workers", "1"],
            capture_output=True, text=True, timeout=60, check=False)
    assert completed.returncode != 0
    [line] = [line for line in completed.stderr.splitlines() if line.startswith("staticadm serve: --listen")]
    assert f"127.0.0.1:{port}: Address already in use" in line
    assert f"ss -ltnp 'sport = :{port}'" in line
    assert "webhook-config --url" in line


def test_the_audit_rbac_example_lists_what_the_example_policies_select() -> None:
    documents = [doc for doc in parse_stream((KUBE_APISERVER / "staticadm-audit-rbac.yaml").read_text()) if doc]
    [role] = [doc for doc in documents if doc["kind"] == "ClusterRole"]
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    loaded = load_manifest_directory(str(EXAMPLES))
    assert loaded.ok
    needed = set()
    for policy in loaded.policies:
        assert policy.spec.match_constraints is not None
        for rule in policy.spec.match_constraints.resource_rules:
            for group in rule.api_groups:
                needed.update((group, resource, "list") for resource in rule.resources if "/" not in resource)
    needed |= {("", "namespaces", verb) for verb in ("get", "list", "watch")}
    needed.add(("authorization.k8s.io", "subjectaccessreviews", "create"))
    assert needed <= granted, sorted(needed - granted)
    # Read-only but for the reviews: no write verb on anything the policies select.
    assert {verb for _, _, verb in granted} <= {"get", "list", "watch", "create"}
    assert [(g, r) for g, r, verb in granted if verb == "create"] == [("authorization.k8s.io", "subjectaccessreviews")]
    # And the page that explains it names the file.
    commands = (REPO_ROOT / "docs" / "commands.md").read_text()
    assert re.search(r"^## audit: what the cluster already holds$", commands, re.MULTILINE)
    assert "manifests/kube-apiserver/staticadm-audit-rbac.yaml" in commands
