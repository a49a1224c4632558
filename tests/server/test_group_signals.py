"""A signal to the daemon's whole process group (Ctrl-C in a terminal, systemd's ``KillMode=control-group``)
reaches the supervisor and every worker at once: each worker still finishes its shutdown and says so."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.server.harness import REPO_ROOT, DaemonFactory, wait_for


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_every_worker_logs_stopped_when_the_process_group_is_signalled(make_daemon: DaemonFactory, tmp_path: Path,
                                                                        signum: signal.Signals) -> None:
    daemon = make_daemon(start=False, args=["--workers", "2", "--log-format", "json", "--body-timeout", "2"])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with daemon.log_path.open("ab") as log:
        # Its own process group, as a shell job or a systemd unit has.
        daemon.process = subprocess.Popen(daemon.command(), cwd=tmp_path, env=env, stdout=log, stderr=log,
                                          start_new_session=True)
    daemon.wait_ready()

    def lines() -> list[dict[str, object]]:
        return [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]

    def serving() -> set[object]:
        # Each worker logs its connection limits right before it takes signals; a signal before that would test
        # its start-up instead.
        return {line.get("worker") for line in lines() if line.get("worker") is not None
                and line.get("msg") == "connection limits"}

    assert wait_for(lambda: serving() == {0, 1}, timeout=30), daemon.log()
    time.sleep(0.5)  # past the few statements between that line and the signal handlers
    # Requests whose bodies are still arriving keep the workers' shutdowns going (up to --body-timeout) while the
    # supervisor's own SIGTERM reaches them, as a busy daemon's would.
    assert daemon.socket_path is not None
    clients = []
    for _ in range(8):
        client = socket.socket(socket.AF_UNIX)
        client.connect(str(daemon.socket_path))
        client.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n{\"apiVersion\":")
        clients.append(client)
    try:
        os.killpg(daemon.process.pid, signum)
        assert daemon.process.wait(timeout=60) == 0
    finally:
        for client in clients:
            client.close()
    stopped = [line.get("worker") for line in lines() if line.get("msg") == "stopped"]
    assert sorted(stopped, key=str) == sorted([0, 1, None], key=str), daemon.log()
