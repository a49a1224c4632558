"""SIGTERM is honoured whatever the file events: a flood of them cannot crowd out the signal.

Each file event used to be one ``call_soon_threadsafe``, a byte in the event loop's self-pipe, which is also
the signal wakeup fd and holds about 280 such bytes. While the loop was busy evaluating requests, a flood of
events filled it; SIGTERM's byte was dropped and the daemon ran on after systemd's stop.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import orjson
import pytest

from tests.reliability.policies import BUDGETED, hostile_review, policy_yaml
from tests.server.harness import Daemon, DaemonFactory

#: Writes to eight manifest names in turn (the kernel merges identical events only when they follow each other),
#: each an empty v1 List: valid, so no reload fails because of them.
FLOOD = r"""
import os, sys
paths = [os.path.join(sys.argv[1], f"churn-{i}.yaml") for i in range(8)]
for i in range(int(sys.argv[2])):
    fd = os.open(paths[i % 8], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"apiVersion: v1\nkind: List\nitems: []\n")
    os.close(fd)
"""


def _keep_busy(daemon: Daemon, stop: threading.Event) -> None:
    """Requests whose evaluation holds the event loop for its CEL budget, one after the other."""
    resource, _, _, spec = BUDGETED["nested-comprehensions"]
    body = orjson.dumps(hostile_review(resource, spec))
    request = (b"POST /validate HTTP/1.1\r\nHost: staticadm\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    assert daemon.socket_path is not None
    while not stop.is_set():
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(5)
                client.connect(str(daemon.socket_path))
                client.sendall(request)
                client.recv(65536)
        except OSError:
            time.sleep(0.01)


@pytest.mark.slow
def test_sigterm_is_honoured_under_a_flood_of_file_events(make_daemon: DaemonFactory) -> None:
    resource, expression, failure_policy, _ = BUDGETED["nested-comprehensions"]
    daemon = make_daemon(policy=None, start=False, args=["--log-level", "info"])
    (daemon.manifests / "slow.yaml").write_text(policy_yaml("nested-comprehensions", resource, expression,
                                                            failure_policy))
    for attempt in range(3):
        daemon.start()
        assert daemon.process is not None
        stop = threading.Event()
        clients = [threading.Thread(target=_keep_busy, args=(daemon, stop)) for _ in range(4)]
        floods = [subprocess.Popen([sys.executable, "-c", FLOOD, str(daemon.manifests), "100000"])
                  for _ in range(2)]
        try:
            for client in clients:
                client.start()
            time.sleep(1.5)
            daemon.process.send_signal(signal.SIGTERM)
            try:
                code = daemon.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
            assert code == 0, f"attempt {attempt}: SIGTERM not honoured\n{daemon.log()[-2000:]}"
        finally:
            stop.set()
            for flood in floods:
                flood.kill()
                flood.wait()
            for client in clients:
                client.join()
        for churn in daemon.manifests.glob("churn-*.yaml"):
            churn.unlink()
