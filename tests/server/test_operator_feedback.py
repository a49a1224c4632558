"""What an operator is told: what a reload changed, that a restored directory is current again, that the
files on disk are invalid while the last good configuration serves, and what `check` says of an empty
directory."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

import staticadm
from staticadm.manifests.check import run_check
from tests.server.harness import DaemonFactory, policy_yaml, review, wait_for, write_atomically


def _reload_lines(log: str) -> list[dict[str, object]]:
    lines = []
    for line in log.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("msg") == "reloaded manifest config":
                lines.append(record)
    return lines


def test_a_reload_logs_what_it_added_changed_and_removed(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--log-format", "json"])
    first = _reload_lines(daemon.log())[-1]
    assert first["added"] == ["ValidatingAdmissionPolicy/deny-label.static.k8s.io",
                              "ValidatingAdmissionPolicyBinding/deny-label.static.k8s.io"]
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("changed message"))
    write_atomically(daemon.manifests / "other.yaml", policy_yaml("other", name="other", label="other"))
    assert wait_for(lambda: len(_reload_lines(daemon.log())) >= 2, timeout=15)
    time.sleep(0.5)
    merged = _reload_lines(daemon.log())[1:]
    added = [name for record in merged for name in record["added"]]  # type: ignore[union-attr]
    changed = [name for record in merged for name in record["changed"]]  # type: ignore[union-attr]
    assert "ValidatingAdmissionPolicy/other.static.k8s.io" in added
    assert changed == ["ValidatingAdmissionPolicy/deny-label.static.k8s.io"]
    (daemon.manifests / "other.yaml").unlink()
    assert wait_for(lambda: any(record["removed"] for record in _reload_lines(daemon.log())), timeout=15)
    removed = next(record["removed"] for record in _reload_lines(daemon.log()) if record["removed"])
    assert removed == ["ValidatingAdmissionPolicy/other.static.k8s.io",
                       "ValidatingAdmissionPolicyBinding/other.static.k8s.io"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_invalid_files_on_disk_show_in_readyz_until_restored(make_daemon: DaemonFactory, workers: str) -> None:
    daemon = make_daemon(args=["--workers", workers])
    good = (daemon.manifests / "deny.yaml").read_text()
    (daemon.manifests / "deny.yaml").write_text("kind: [")

    def noted() -> bool:
        body = daemon.get("/readyz?verbose").body.decode()
        return "note: the manifest directory on disk is invalid (1 error(s)" in body

    # Every worker is told, whichever one answers.
    assert wait_for(lambda: all(noted() for _ in range(6)), timeout=15), daemon.log()
    assert daemon.get("/readyz").status == 200  # still ready: the last good configuration serves
    write_atomically(daemon.manifests / "deny.yaml", good)
    assert wait_for(lambda: not any(noted() for _ in range(6)), timeout=15), daemon.log()
    assert wait_for(lambda: "the served configuration is current" in daemon.log(), timeout=5)


def test_check_warns_about_a_directory_with_no_manifests(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("policies go here")
    out = io.StringIO()
    assert run_check([str(tmp_path)], "text", out, io.StringIO()) == 0
    assert "holds no policies or bindings" in out.getvalue() and "every request is allowed" in out.getvalue()


def test_the_start_up_line_names_the_version_and_the_effective_configuration(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--log-format", "json", "--idle-timeout", "33"])
    first = json.loads(daemon.log().splitlines()[0])
    assert first["msg"] == "starting staticadm" and first["version"] == staticadm.__version__
    config = first["config"]
    assert config["manifests"] == str(daemon.manifests) and config["idle-timeout"] == 33.0
    assert config["workers"] == 1 and config["body-timeout"] == 10.0 and config["kubeconfig"] is None


def test_a_rejected_request_is_logged_with_its_uid(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    manifests = tmp_path / "broken"
    manifests.mkdir()
    (manifests / "bad.yaml").write_text("kind: [")
    daemon = make_daemon(policy=None, manifests=manifests, start=False, args=["--log-format", "json"])
    daemon.start(wait=False)
    assert wait_for(lambda: "loading manifest config failed" in daemon.log(), timeout=15)
    response = daemon.validate(review(uid="7f0c-rejected"))
    assert response.status == 503
    rejected = [json.loads(line) for line in daemon.log().splitlines()
                if line.startswith("{") and json.loads(line).get("msg") == "rejected admission request"]
    assert rejected and rejected[-1]["uid"] == "7f0c-rejected" and rejected[-1]["code"] == 503
