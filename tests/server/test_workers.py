"""``serve --workers N``: one supervisor, N worker processes on the same sockets, one snapshot hash."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from staticadm.deploy.certs import ensure_self_signed
from staticadm.server.config import default_workers
from staticadm.server.workers import HEARTBEAT_TIMEOUT
from tests.cluster.policies import policy
from tests.server.harness import (
    REQUESTS,
    Daemon,
    DaemonFactory,
    denied_message,
    free_port,
    metric_value,
    mount_namespace,
    policy_yaml,
    review,
    wait_for,
    write_atomically,
)
from tests.server.test_daemon import LAUNCHER
from tests.server.test_lifecycle import NotifySocket, _fields, notify_socket  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs unix sockets")

WORKER_INFO = "staticadm_worker_config_info"
_SERIES = re.compile(r'^staticadm_worker_config_info\{hash="([^"]+)",pid="(\d+)"\} 1\.0$', re.MULTILINE)


def _serving(daemon: Daemon) -> dict[int, str]:
    """pid -> content hash, for every live worker (from any worker's /metrics)."""
    text = daemon.get("/metrics", via="unix" if daemon.socket_path else "https").body.decode()
    return {int(pid): content_hash for content_hash, pid in _SERIES.findall(text)}


def _all_serving(daemon: Daemon, count: int) -> dict[int, str] | None:
    try:
        serving = _serving(daemon)
    except OSError:
        return None
    return serving if len(serving) == count and len(set(serving.values())) == 1 else None


def _start_workers(make_daemon: DaemonFactory, count: int = 2, **kwargs: object) -> tuple[Daemon, dict[int, str]]:
    daemon = make_daemon(args=["--workers", str(count)], **kwargs)  # type: ignore[arg-type]
    assert wait_for(lambda: _all_serving(daemon, count) is not None, timeout=30), daemon.log()
    serving = _all_serving(daemon, count)
    assert serving is not None
    return daemon, serving


def test_workers_share_the_sockets_and_their_metrics_add_up(make_daemon: DaemonFactory) -> None:
    daemon, serving = _start_workers(make_daemon)
    assert os.getpid() not in serving and daemon.process is not None and daemon.process.pid not in serving
    for index in range(40):
        via = "unix" if index % 2 else "https"
        answer = daemon.validate(review({"deny": "true"}, uid=f"u{index}"), via=via).json()
        assert answer["response"]["allowed"] is False
        assert "pods labelled deny=true are not allowed" in answer["response"]["status"]["message"]
    text = daemon.get("/metrics").body.decode()
    # Every worker's requests, whichever worker answers the scrape.
    assert metric_value(text, REQUESTS, {"endpoint": "validate"}) == 40
    answered_by = {int(pid) for pid in re.findall(r'pid="(\d+)"', text)}
    assert set(serving) <= answered_by
    log = daemon.log()
    assert log.count("worker started") == 2 and "reloaded manifest config" in log


def test_a_dead_worker_is_replaced_while_the_others_serve(make_daemon: DaemonFactory) -> None:
    daemon, serving = _start_workers(make_daemon)
    victim = next(iter(serving))
    content_hash = serving[victim]
    os.kill(victim, signal.SIGSEGV)  # what a native crash looks like from outside
    failures = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            answer = daemon.validate(review({"deny": "true"}))
            assert answer.json()["response"]["allowed"] is False
        except OSError:
            failures += 1  # a connection the dying worker had accepted
        now = _all_serving(daemon, 2)
        if now is not None and victim not in now:
            break
    now = _all_serving(daemon, 2)
    assert now is not None and victim not in now and set(now.values()) == {content_hash}, daemon.log()
    assert failures <= 2
    assert daemon.metric("staticadm_worker_restarts_total") == 1
    assert "worker died; replacing it" in daemon.log() and "killed by SIGSEGV" in daemon.log()


def test_a_replacement_worker_accepts_connections_only_once_it_serves(make_daemon: DaemonFactory) -> None:
    """A worker started while its siblings serve takes no connection before its first snapshot: a probe never
    meets one still loading (503, manifests-loaded failed), nor does a review wait on its load."""
    daemon = make_daemon(args=["--workers", "2"], start=False)
    # Enough policies that a load takes a while, so that a replacement accepting early would be met.
    for index in range(60):
        (daemon.manifests / f"extra-{index:02d}.yaml").write_text(
            policy_yaml(f"extra {index}", name=f"extra-{index:02d}", label=f"extra-{index}"))
    daemon.start()
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=60), daemon.log()
    serving = _all_serving(daemon, 2)
    assert serving is not None
    victim = next(iter(serving))
    replaced = threading.Event()

    def probe() -> tuple[list[int], int]:
        answers: list[int] = []
        failures = 0
        while not replaced.is_set():
            try:
                answers.append(daemon.get("/readyz?verbose").status)
            except OSError:
                failures += 1  # a connection the killed worker had accepted
        return answers, failures

    with ThreadPoolExecutor(1) as pool:
        probing = pool.submit(probe)
        os.kill(victim, signal.SIGKILL)
        try:
            assert wait_for(lambda: (now := _all_serving(daemon, 2)) is not None and victim not in now, timeout=60), \
                daemon.log()
        finally:
            replaced.set()
        answers, failures = probing.result()
    assert len(answers) > 20 and set(answers) == {200}, (collections.Counter(answers), daemon.log())
    assert failures <= 2
    # The replacement (in the dead worker's slot) opens its listeners after its first load, which it does not
    # log; "connection limits" is logged before that load.
    lines = [orjson.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    died = max(number for number, line in enumerate(lines) if line.get("msg") == "worker died; replacing it")
    slot = lines[died]["worker"]
    said = [line.get("msg") for line in lines[died:] if line.get("worker") == slot]
    assert said.index("connection limits") < said.index("listening"), said


def test_a_reload_reaches_every_worker_with_one_hash(make_daemon: DaemonFactory, tmp_path: Path,
                                                      notify_socket: NotifySocket) -> None:  # noqa: F811
    daemon, before = _start_workers(make_daemon, env={"NOTIFY_SOCKET": str(notify_socket.path)})
    ready = notify_socket.wait_for(lambda m: "READY=1" in m)
    assert "2/2 workers serving it" in _fields(ready)["STATUS"]
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("a new message"))
    assert wait_for(lambda: (now := _all_serving(daemon, 2)) is not None and
                    set(now.values()) != set(before.values()), timeout=15), daemon.log()
    for _ in range(10):
        assert "a new message" in (denied_message(daemon) or "")
    # An invalid change: every worker keeps the last good snapshot.
    after = _all_serving(daemon, 2)
    (daemon.manifests / "broken.yaml").write_text("kind: [")
    assert wait_for(lambda: "keeping the last good configuration" in daemon.log(), timeout=15)
    assert _all_serving(daemon, 2) == after
    # SIGHUP goes to the supervisor: RELOADING=1, then READY=1 once every worker serves the result.
    (daemon.manifests / "broken.yaml").unlink()
    time.sleep(0.3)
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGHUP)
    notify_socket.wait_for(lambda m: "RELOADING=1" in m)
    notify_socket.wait_for(lambda m: "READY=1" in m)


def test_sigterm_drains_every_worker_and_removes_the_socket(make_daemon: DaemonFactory) -> None:
    daemon, serving = _start_workers(make_daemon)
    assert daemon.stop() == 0
    for pid in serving:
        assert wait_for(lambda pid=pid: not _alive(pid), timeout=10), f"worker {pid} still running"
    assert daemon.socket_path is not None and not daemon.socket_path.exists()
    assert "stopped" in daemon.log()


def test_workers_wait_not_ready_until_the_directory_is_valid(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(policy=None, start=False, args=["--workers", "2"])
    (daemon.manifests / "bad.yaml").write_text("kind: [")
    daemon.start(wait=False)
    assert wait_for(lambda: daemon.status("/readyz") == 503, timeout=30), daemon.log()
    answer = daemon.validate(review({"deny": "true"}))
    assert answer.status == 503 and answer.json()["reason"] == "ServiceUnavailable"
    (daemon.manifests / "bad.yaml").unlink()
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("fixed"))
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=30), daemon.log()
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False


def test_workers_serve_activated_sockets(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    activated, port = tmp_path / "activated.sock", free_port()
    daemon = make_daemon(start=False, args=["--workers", "2"])
    daemon.launcher = [sys.executable, str(launcher), str(activated), str(port)]
    original_command = daemon.command

    def command() -> list[str]:
        parts = original_command()
        return parts[:len(daemon.launcher or [])] + parts[len(daemon.launcher or []) + 1:]

    daemon.command = command  # type: ignore[method-assign]
    daemon.socket_path, daemon.port = activated, port
    daemon.start(wait=False)
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=30), daemon.log()
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes; only the supervisor could reap it.
    status = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False)
    return bool(status.stdout.strip()) and not status.stdout.strip().startswith("Z")


#: The kernel's TCP state of a listening socket in /proc/net/tcp.
_LISTEN = "0A"


def _held_sockets(pid: int, port: int) -> list[tuple[int, str]]:
    """(remote port, TCP state) of every socket on local ``port`` that process ``pid`` holds (its socket
    inodes, matched against the kernel's TCP table), each once: the table is read in pieces while other connections
    open and close, and can then list a socket twice. A listening socket has remote port 0."""
    inodes = set()
    with contextlib.suppress(OSError):
        for entry in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{entry}")
                if link.startswith("socket:["):
                    inodes.add(link[len("socket:["):-1])
    held: dict[str, tuple[int, str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    held[fields[9]] = (int(fields[2].rsplit(":", 1)[1], 16), fields[3])
    return list(held.values())


def _accepted_from(pid: int, port: int, client_ports: set[int]) -> int:
    """How many of our clients' connections to ``port`` process ``pid`` holds, so that other sockets
    opening or closing meanwhile do not count."""
    return sum(1 for remote, _ in _held_sockets(pid, port) if remote in client_ports)


@pytest.mark.skipif(not os.path.isfile("/proc/net/tcp"), reason="reads each worker's connections from /proc")
def test_connections_opened_together_spread_over_the_workers(make_daemon: DaemonFactory) -> None:
    # kube-apiserver (like wrk) opens its keep-alive connections in a burst and keeps them: if one worker
    # accepted them all, the others would never serve a request.
    daemon, serving = _start_workers(make_daemon)
    assert daemon.port is not None
    clients = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(16)]
    context = daemon.ssl_context()
    try:
        for client in clients:
            client.bind(("127.0.0.1", 0))
        ports = {client.getsockname()[1] for client in clients}

        def handshake(client: socket.socket) -> ssl.SSLSocket:
            # As a TLS client pool does: connect, then the handshake the worker that accepted must answer.
            client.connect(("127.0.0.1", daemon.port or 0))
            return context.wrap_socket(client, server_hostname="localhost")

        with ThreadPoolExecutor(max_workers=16) as pool:
            secured = list(pool.map(handshake, clients))

        def accepted() -> dict[int, int]:
            return {pid: _accepted_from(pid, daemon.port or 0, ports) for pid in serving}

        assert wait_for(lambda: sum(accepted().values()) == 16, timeout=10), accepted()
        assert min(accepted().values()) >= 3, accepted()
        for connection in secured:
            connection.close()
    finally:
        for client in clients:
            client.close()


def _post_review(connection: socket.socket, uid: str) -> tuple[bytes, dict[str, Any]]:
    """Sends one AdmissionReview on ``connection`` and reads the answer to the end of the connection (a
    retiring worker's answers close it): (head, decoded body)."""
    body = orjson.dumps(review({"app": "web"}, uid=uid))
    connection.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    head, _, answer = received.partition(b"\r\n\r\n")
    return head, orjson.loads(answer)


@pytest.mark.skipif(not os.path.isfile("/proc/net/tcp"), reason="reads each worker's connections from /proc")
def test_a_retiring_worker_answers_every_connection_it_accepted(make_daemon: DaemonFactory) -> None:
    # A worker replaced for its memory stops accepting, but connections it accepted just before are its own:
    # their clients cannot know they landed on a worker about to leave, and a client whose fresh
    # connection is closed unanswered (kube-apiserver's included) reports a failed call. Some of them have
    # not even finished their TLS handshake when the worker is told to retire.
    daemon, serving = _start_workers(make_daemon)
    port = daemon.port or 0
    context = daemon.ssl_context()
    context.check_hostname = False
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]
    try:
        ports = {client.getsockname()[1]: client for client in clients}
        assert wait_for(lambda: sum(_accepted_from(pid, port, set(ports)) for pid in serving) == 12,
                        timeout=10)
        retiring = max(serving, key=lambda pid: _accepted_from(pid, port, set(ports)))
        theirs = [ports[remote] for remote, _ in _held_sockets(retiring, port) if remote in ports]
        assert theirs
        # Half of them finish the handshake before the worker is told, half after.
        secured: dict[socket.socket, ssl.SSLSocket] = {
            client: context.wrap_socket(client) for client in theirs[::2]}
        os.kill(retiring, signal.SIGUSR1)
        # Its listener is closed once it has the signal: from then on it accepts nothing new.
        assert wait_for(lambda: all(state != _LISTEN for _, state in _held_sockets(retiring, port)), timeout=10)
        for client in theirs[1::2]:
            secured[client] = context.wrap_socket(client)
        for index, connection in enumerate(secured.values()):
            head, answer = _post_review(connection, f"retiring-{index}")
            assert head.startswith(b"HTTP/1.1 200 ") and b"Connection: close" in head, head
            assert answer["response"] == {"uid": f"retiring-{index}", "allowed": True}
            connection.close()
        assert wait_for(lambda: not _alive(retiring), timeout=20), daemon.log()
        assert "worker retired: its connections are closed" in daemon.log()
        assert "sent no complete request in time" not in daemon.log()
    finally:
        for client in clients:
            client.close()


#: Every request runs 1000 iterations, each calling the Quantity library (Python) with a new string.
LOOPING_POLICY = policy("loops", "pods",
                        '  - expression: "lists.range(1000).all(i, quantity(string(i)).isInteger())"\n')


@pytest.mark.slow
def test_a_worker_that_outgrows_its_memory_allowance_is_replaced_without_a_failed_request(
        make_daemon: DaemonFactory, tmp_path: Path) -> None:
    # Every loop iteration calls the Quantity library (Python) with a new string, and cel-expr-python keeps
    # each call's arguments: a 1 MiB allowance is used up after a few dozen of these requests.
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "loops.yaml").write_text(LOOPING_POLICY)
    daemon = make_daemon(policy=None, manifests=manifests, args=["--workers", "2", "--worker-memory-growth", "1"])
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=30), daemon.log()
    serving = _all_serving(daemon, 2)
    assert serving is not None
    content_hash = next(iter(serving.values()))
    failures = []
    sent = 0

    def replaced() -> bool:
        nonlocal sent
        for index in range(20):
            answer = daemon.validate(review({"app": "web"}, uid=f"r{index}"), via="https" if index % 2 else "unix")
            sent += 1
            if answer.status != 200 or answer.json()["response"]["allowed"] is not True:
                failures.append(answer.body)
        now = _all_serving(daemon, 2)
        return now is not None and not set(now) & set(serving) and daemon.metric("staticadm_worker_recycles_total") >= 2

    assert wait_for(replaced, timeout=90), daemon.log()
    assert failures == []
    now = _all_serving(daemon, 2)
    assert now is not None and set(now.values()) == {content_hash}
    log = daemon.log()
    assert "replacing a worker that grew past its memory allowance" in log and "replaced worker stopped" in log
    assert "worker died" not in log and daemon.metric("staticadm_worker_restarts_total") == 0
    # A replaced worker reports what it counted on its way out: every request stays counted.
    assert daemon.metric(REQUESTS, {"endpoint": "validate"}) == sent


# -- no file written: full and read-only file systems ------------------------------------------------------


def _deny_label_traffic(daemon: Daemon, count: int) -> None:
    """``count`` reviews over both listeners (or HTTPS alone), each answered with the policy's decision."""
    for index in range(count):
        via = "unix" if daemon.socket_path and index % 2 else "https"
        answer = daemon.validate(review({"deny": "true"}, uid=f"t{index}"), via=via)
        assert answer.status == 200, answer.body
        assert answer.json()["response"]["allowed"] is False


def test_a_full_file_system_fails_no_request_and_stops_no_worker(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    # Metrics used to be memory-mapped files in TMPDIR (or PROMETHEUS_MULTIPROC_DIR): on a full file system
    # the first write to a new page killed its process with SIGBUS, workers in a loop, the supervisor too.
    full = tmp_path / "full"
    full.mkdir()
    launcher = mount_namespace(f"mount -t tmpfs -o size=256k tmpfs {full} && mkdir {full}/metrics && "
                               f"{{ dd if=/dev/zero of={full}/fill bs=4k 2>/dev/null; true; }}")
    if launcher is None:
        pytest.skip("needs a private mount namespace (unshare) to mount a small tmpfs")
    daemon = make_daemon(start=False, args=["--workers", "2"],
                         env={"TMPDIR": str(full), "PROMETHEUS_MULTIPROC_DIR": str(full / "metrics")})
    daemon.launcher = launcher
    daemon.start(wait=False)
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=30), daemon.log()
    _deny_label_traffic(daemon, 40)
    assert daemon.metric(REQUESTS, {"endpoint": "validate"}) == 40
    assert daemon.metric("staticadm_worker_restarts_total") == 0
    assert "worker died" not in daemon.log()
    assert daemon.process is not None and daemon.process.poll() is None


def test_workers_start_with_nothing_writable(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    # The shipped static pod: read-only root file system, no writable /tmp, certificates given, no unix
    # socket, --workers auto. It used to exit 1 ("No usable temporary directory") before serving anything.
    launcher = mount_namespace("mount -o remount,bind,ro /")
    if launcher is None:
        pytest.skip("needs a private mount namespace (unshare) to make the root file system read-only")
    generated = ensure_self_signed(tmp_path / "pki")
    daemon = make_daemon(start=False, unix=False, env={"TMPDIR": str(tmp_path)},
                         args=["--workers", "auto", "--tls-cert", str(generated.cert),
                               "--tls-key", str(generated.key)])
    daemon.launcher = launcher
    daemon.ca_file = generated.ca_cert
    daemon.start(wait=False)
    workers = default_workers()
    assert wait_for(lambda: _all_serving(daemon, workers) is not None, timeout=60), daemon.log()
    _deny_label_traffic(daemon, 10)
    assert daemon.metric(REQUESTS, {"endpoint": "validate"}, via="https") == 10
    assert daemon.stop() == 0, daemon.log()


# -- retiring: idle keep-alive connections --------------------------------------------------------------


def _send_review(connection: socket.socket, uid: str) -> None:
    body = orjson.dumps(review({"app": "web"}, uid=uid))
    connection.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def _read_answer(connection: socket.socket) -> tuple[bytes, dict[str, Any]] | None:
    """One HTTP answer on a keep-alive connection: (head, decoded body); None when the connection ends, or
    nothing arrives within the socket's timeout, before it is complete."""
    received = b""
    try:
        while b"\r\n\r\n" not in received:
            chunk = connection.recv(65536)
            if not chunk:
                return None
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        assert found is not None, head
        while len(body) < int(found.group(1)):
            chunk = connection.recv(65536)
            if not chunk:
                return None
            body += chunk
    except (TimeoutError, ConnectionError, ssl.SSLError):
        return None
    return head, orjson.loads(body)


def _closed_by_server(connection: ssl.SSLSocket) -> bool:
    """Whether the server has closed this idle connection: what Go's transport notices (its read loop sees
    the end) before it reuses a pooled connection."""
    connection.setblocking(False)
    try:
        return connection.recv(1) == b""
    except (ssl.SSLWantReadError, BlockingIOError):
        return False
    except (ConnectionError, ssl.SSLError):
        return True
    finally:
        connection.setblocking(True)


def _keep_alive_pool(daemon: Daemon, size: int) -> list[ssl.SSLSocket]:
    """``size`` HTTPS connections, each answered once and kept open: kube-apiserver's pool between requests."""
    context = daemon.ssl_context()
    context.check_hostname = False
    pool = []
    for index in range(size):
        connection = context.wrap_socket(socket.create_connection(("127.0.0.1", daemon.port or 0), timeout=20))
        _send_review(connection, f"warm-{index}")
        answer = _read_answer(connection)
        assert answer is not None and answer[0].startswith(b"HTTP/1.1 200 ")
        pool.append(connection)
    return pool


def _held_by(pid: int, port: int, pool: list[ssl.SSLSocket]) -> list[ssl.SSLSocket]:
    remote_ports = {remote for remote, _ in _held_sockets(pid, port)}
    return [connection for connection in pool if connection.getsockname()[1] in remote_ports]


@pytest.mark.skipif(not os.path.isfile("/proc/net/tcp"), reason="reads each worker's connections from /proc")
def test_requests_on_idle_keep_alive_connections_are_answered_while_a_worker_retires(
        make_daemon: DaemonFactory) -> None:
    # aiohttp's shutdown stopped reading idle keep-alive connections but kept them open until its timeout:
    # a request sent on one meanwhile was never answered, and kube-apiserver does not retry a POST. Now a
    # retiring worker answers every request that has reached it and closes its idle connections at once,
    # which a client sees before it reuses them, as Go's transport does.
    daemon, serving = _start_workers(make_daemon)
    port = daemon.port or 0
    pool = _keep_alive_pool(daemon, 12)
    try:
        retiring = max(serving, key=lambda pid: len(_held_by(pid, port, pool)))
        theirs = _held_by(retiring, port, pool)
        assert len(theirs) >= 2, "the kernel gave one worker all the connections"
        early, late = theirs[::2], theirs[1::2]
        # Requests that reached the worker before it acts on its retirement: the worker is stopped while
        # they are sent and told to retire, then resumed with both waiting for it.
        os.kill(retiring, signal.SIGSTOP)
        try:
            for index, connection in enumerate(early):
                _send_review(connection, f"early-{index}")
            os.kill(retiring, signal.SIGUSR1)
        finally:
            os.kill(retiring, signal.SIGCONT)
        for index, connection in enumerate(early):
            answer = _read_answer(connection)
            assert answer is not None, f"early request {index} was not answered"
            head, decoded = answer
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert decoded["response"] == {"uid": f"early-{index}", "allowed": True}
        # Requests on idle connections while it retires: a connection it has closed is replaced first.
        assert wait_for(lambda: all(state != _LISTEN for _, state in _held_sockets(retiring, port)), timeout=10)
        time.sleep(1.0)
        context = daemon.ssl_context()
        context.check_hostname = False
        reconnected = 0
        for index, connection in enumerate(late):
            if _closed_by_server(connection):
                connection.close()
                connection = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=20))
                pool.append(connection)
                reconnected += 1
            connection.settimeout(5)
            _send_review(connection, f"late-{index}")
            answer = _read_answer(connection)
            assert answer is not None, f"late request {index} was not answered"
            assert answer[1]["response"] == {"uid": f"late-{index}", "allowed": True}
        assert reconnected == len(late)
        assert wait_for(lambda: not _alive(retiring), timeout=20), daemon.log()
        assert "worker retired: its connections are closed" in daemon.log()
    finally:
        for connection in pool:
            connection.close()


# -- heartbeat -------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile("/proc/net/tcp"), reason="reads each worker's connections from /proc")
def test_a_stopped_worker_is_killed_and_replaced(make_daemon: DaemonFactory) -> None:
    # A worker stopped by SIGSTOP (or with its event loop stuck) kept its keep-alive connections for ever:
    # requests on them waited as long as it was stopped, and the supervisor did not notice.
    daemon, serving = _start_workers(make_daemon)
    port = daemon.port or 0
    pool = _keep_alive_pool(daemon, 8)
    try:
        victim = max(serving, key=lambda pid: len(_held_by(pid, port, pool)))
        waiting = _held_by(victim, port, pool)[0]
        counted = daemon.metric(REQUESTS, {"endpoint": "validate"})
        assert counted >= 8
        os.kill(victim, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            waiting.settimeout(HEARTBEAT_TIMEOUT + 15)
            _send_review(waiting, "waiting")
            # Meanwhile the other worker answers new connections, and scrapes (the victim counted from its
            # previous report: no counter goes down).
            _deny_label_traffic(daemon, 4)
            assert daemon.metric(REQUESTS, {"endpoint": "validate"}) >= counted + 4
            # The victim is killed: its connection ends (unanswered: it was stopped) instead of waiting on.
            assert _read_answer(waiting) is None
            assert time.monotonic() - stopped < HEARTBEAT_TIMEOUT + 10
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
        assert wait_for(lambda: (now := _all_serving(daemon, 2)) is not None and victim not in now, timeout=30), \
            daemon.log()
        assert not _alive(victim)
        log = daemon.log()
        assert "worker stopped answering; killing it to replace it" in log and "killed by SIGKILL" in log
        assert daemon.metric("staticadm_worker_restarts_total") == 1
        assert daemon.metric(REQUESTS, {"endpoint": "validate"}) >= counted + 4
    finally:
        for connection in pool:
            connection.close()
