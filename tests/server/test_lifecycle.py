"""Startup before the first snapshot, systemd notifications with the watchdog, and what traffic leaves behind."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO_ROOT
from tests.server.harness import (
    RELOADS,
    REQUESTS,
    DaemonFactory,
    denied_message,
    policy_yaml,
    review,
    wait_for,
    write_atomically,
)

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs unix sockets")


class NotifySocket:
    """The service manager's end of sd_notify: a datagram socket the test owns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.seen: list[str] = []

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        """The first message from now on for which ``predicate`` holds; every message is kept in ``seen``."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching notification within {timeout} s; seen: {self.seen}")
            self.sock.settimeout(remaining)
            try:
                message = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            self.seen.append(message)
            if predicate(message):
                return message

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    notify = NotifySocket(tmp_path / "notify.sock")
    yield notify
    notify.close()


def _fields(message: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in message.splitlines() if "=" in line)


# -- before the first snapshot -----------------------------------------------------------------------


def test_missing_directory_is_not_ready_then_picked_up_without_any_event(make_daemon: DaemonFactory,
                                                                         tmp_path: Path,
                                                                         notify_socket: NotifySocket) -> None:
    # A volume mounted late: not even the parent exists yet, so no watch can see it appear and only the
    # retry loop (0.5 s doubling) finds it.
    manifests = tmp_path / "volume" / "not-yet" / "manifests"
    daemon = make_daemon(policy=None, start=False, manifests=manifests,
                         env={"NOTIFY_SOCKET": str(notify_socket.path)})
    daemon.start(wait=False)
    status = notify_socket.wait_for(lambda m: "STATUS=" in m)
    assert "READY=1" not in status and "not ready" in _fields(status)["STATUS"]
    assert wait_for(lambda: daemon.status("/readyz") == 503, timeout=30)
    verbose = daemon.get("/readyz?verbose").body.decode()
    assert "[-]manifests-loaded failed" in verbose and "readyz check failed" in verbose
    assert daemon.get("/healthz").status == 503
    assert daemon.get("/livez").status == 200
    for path in ("/validate", "/mutate"):
        answer = daemon.validate(review({"deny": "true"}), path=path)
        assert answer.status == 503, answer.body
        assert answer.json()["reason"] == "ServiceUnavailable"
        assert answer.json()["message"] == "not yet ready to handle request"
    assert daemon.get("/readyz", via="https").status == 503
    assert str(manifests) in daemon.log() and "retrying" in daemon.log()
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "deny.yaml").write_text(policy_yaml("late volume"))
    manifests.parent.mkdir(parents=True)
    os.rename(staging, manifests)
    assert wait_for(lambda: daemon.get("/readyz").status == 200, timeout=20)
    ready = notify_socket.wait_for(lambda m: "READY=1" in m)
    assert _fields(ready)["STATUS"].startswith("serving hash=sha256:")
    assert "late volume" in (denied_message(daemon) or "")
    # One failure per attempt, each counted, and the identical errors of a retry are not logged again.
    failures = daemon.metric(RELOADS, {"status": "failure"})
    assert failures >= 1
    assert daemon.log().count('"msg":"manifest error"') < failures + 1
    assert daemon.metric(RELOADS, {"status": "success"}) == 1


def test_sigterm_while_not_ready_exits_cleanly(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = make_daemon(policy=None, start=False, manifests=tmp_path / "absent")
    daemon.start(wait=False)
    assert wait_for(lambda: daemon.status("/readyz") == 503, timeout=30)
    assert daemon.stop() == 0
    assert daemon.socket_path is not None and not daemon.socket_path.exists()


# -- systemd -----------------------------------------------------------------------------------------


def test_watchdog_status_and_reload_notifications(make_daemon: DaemonFactory, notify_socket: NotifySocket) -> None:
    # WATCHDOG_USEC=300 ms: the daemon must ping at half of it, from the start and for as long as it runs.
    daemon = make_daemon(start=False, env={"NOTIFY_SOCKET": str(notify_socket.path), "WATCHDOG_USEC": "300000"})
    daemon.start(wait=False)
    ready = notify_socket.wait_for(lambda m: "READY=1" in m)
    status = _fields(ready)["STATUS"]
    assert status.startswith("serving hash=sha256:") and "policies=1 bindings=1" in status
    daemon.wait_ready()
    pings_before = sum(m == "WATCHDOG=1" for m in notify_socket.seen)
    for _ in range(4):
        notify_socket.wait_for(lambda m: m == "WATCHDOG=1", timeout=10)
    assert pings_before + 4 <= sum(m == "WATCHDOG=1" for m in notify_socket.seen)

    # Type=notify-reload: RELOADING=1 with the monotonic time, then READY=1 with the new status.
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("v2"))
    assert wait_for(lambda: "v2" in (denied_message(daemon) or ""))
    assert daemon.process is not None
    notify_socket.seen.clear()
    daemon.process.send_signal(signal.SIGHUP)
    reloading = notify_socket.wait_for(lambda m: "RELOADING=1" in m)
    monotonic = int(_fields(reloading)["MONOTONIC_USEC"])
    assert abs(monotonic - time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000) < 30_000_000
    again = notify_socket.wait_for(lambda m: "READY=1" in m)
    assert _fields(again)["STATUS"].startswith("serving hash=sha256:")
    assert notify_socket.seen.index(reloading) < notify_socket.seen.index(again)

    # A broken file: the status says so while the old snapshot keeps serving; no READY/RELOADING flicker.
    notify_socket.seen.clear()
    write_atomically(daemon.manifests / "broken.yaml", "kind: [\n")
    failed = notify_socket.wait_for(lambda m: "STATUS=" in m and "failed" in m)
    assert "READY=1" not in failed and "RELOADING=1" not in failed
    assert "v2" in (denied_message(daemon) or "")
    notify_socket.wait_for(lambda m: m == "WATCHDOG=1", timeout=10)

    daemon.process.send_signal(signal.SIGTERM)
    notify_socket.wait_for(lambda m: "STOPPING=1" in m)
    assert daemon.process.wait(timeout=20) == 0


def test_watchdog_is_off_for_another_pid(make_daemon: DaemonFactory, notify_socket: NotifySocket) -> None:
    # WATCHDOG_PID names the process the manager watches; a child that inherited it must not ping.
    daemon = make_daemon(start=False, env={"NOTIFY_SOCKET": str(notify_socket.path), "WATCHDOG_USEC": "100000",
                                           "WATCHDOG_PID": "1"})
    daemon.start()
    notify_socket.wait_for(lambda m: "READY=1" in m)
    time.sleep(0.5)  # several watchdog periods
    notify_socket.sock.setblocking(False)
    try:
        while True:
            notify_socket.seen.append(notify_socket.sock.recv(4096).decode())
    except BlockingIOError:
        pass
    assert "WATCHDOG=1" not in notify_socket.seen


# -- what known traffic leaves in the metrics and the log ---------------------------------------------


def test_request_metrics_and_log_lines_after_known_traffic(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--log-level", "info"])
    for index in range(3):
        daemon.validate(review({"deny": "true"}, uid=f"deny-{index}"))
    for index in range(2):
        daemon.validate(review({"deny": "no"}, uid=f"allow-{index}"), via="https")
    daemon.validate(review({"deny": "true"}, uid="mut"), path="/mutate")
    daemon.request("POST", "/validate", body=b"{", headers={"Content-Type": "application/json"})
    daemon.request("POST", "/validate?timeout=0s", json=review())
    daemon.get("/readyz")

    assert daemon.metric(REQUESTS, {"endpoint": "validate", "code": "200", "decision": "deny"}) == 3
    assert daemon.metric(REQUESTS, {"endpoint": "validate", "code": "200", "decision": "allow"}) == 2
    assert daemon.metric(REQUESTS, {"endpoint": "validate", "code": "400", "decision": "error"}) == 2
    assert daemon.metric(REQUESTS, {"endpoint": "mutate", "code": "200"}) == 1
    assert daemon.metric(REQUESTS, {"code": "500"}) == 0
    assert daemon.metric("staticadm_admission_request_duration_seconds_count", {"endpoint": "validate"}) == 7
    assert daemon.metric("staticadm_admission_evaluation_timeouts_total") == 0

    lines = [orjson.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    decisions = [line for line in lines if line.get("msg") == "admission decision"]
    # One line per denied request, naming policy, binding and request, and nothing for allowed ones at info.
    assert sorted(line["uid"] for line in decisions) == ["deny-0", "deny-1", "deny-2"]
    for line in decisions:
        assert line["policy"] == "deny-label.static.k8s.io" and line["binding"] == "deny-label.static.k8s.io"
        assert line["allowed"] is False and line["action"] == "deny" and line["level"] == "info"
        assert line["kind"] == "v1/Pod" and line["object"] == "default/web" and line["user"] == "alice"
        assert "latency_ms" in line
        # RFC 3339, UTC: readable by every log tool without knowing it is an epoch.
        stamp = datetime.datetime.fromisoformat(line["ts"])
        assert line["ts"].endswith("Z") and stamp.tzinfo is not None
        assert abs((datetime.datetime.now(datetime.UTC) - stamp).total_seconds()) < 600
    assert not any(str(line.get("uid")).startswith("allow-") for line in lines)
    rejected = [line for line in lines if line.get("msg") == "rejected admission request"]
    assert sorted(line["code"] for line in rejected) == [400, 400]
    assert all(line["level"] != "debug" for line in lines)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_unreadable_namespaces_file_stops_the_start_naming_it(make_daemon: DaemonFactory, tmp_path: Path,
                                                                 workers: str) -> None:
    broken = tmp_path / "namespaces.yaml"
    broken.write_text("apiVersion: v1\nkind: Namespace\nmetadata: [not, a, map]\n")
    daemon = make_daemon(start=False, args=["--namespaces", str(broken), "--workers", workers])
    completed = subprocess.run(daemon.command(), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    # With workers too: the supervisor refuses it before any worker starts, instead of replacing workers
    # that each fail on it, forever.
    assert completed.returncode != 0
    assert f"--namespaces {broken}" in completed.stderr
