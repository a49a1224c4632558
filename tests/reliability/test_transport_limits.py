"""What a local user (or a careless operator) can do to the daemon's transport, and what it must survive.

Each case reproduces a way the daemon was taken down or stalled at 205dae0: slow request bodies holding
every evaluation slot, idle and half-sent connections holding every descriptor, compressed bodies inflated
on the event loop, a log reader that stops reading, a SIGHUP during start-up, a port conflict deleting the
winner's socket, admission requests refused while a restarted daemon loads. Bounds asserted here are the
properties ("answered before the slow clients' own timeout"), not performance targets.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gzip
import os
import resource
import signal
import socket
import subprocess
import sys
import termios
import time
from pathlib import Path

import aiohttp
import orjson

from staticadm.server.connections import RESERVED_DESCRIPTORS
from staticadm.server.logging import NonBlockingWriter
from tests.policy_text import validating_policy_yaml
from tests.server.harness import (
    REPO_ROOT,
    Daemon,
    DaemonFactory,
    free_port,
    raw_http,
    review,
    status_of,
    wait_for,
)

CONNECTIONS_CLOSED = "staticadm_connections_closed_total"


def _post_head(length: int, extra: str = "") -> bytes:
    return (f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()


async def _slow_body(path: Path, started: asyncio.Event, stop: asyncio.Event, connected: list[int],
                     failures: list[str] | None = None) -> None:
    last = ""
    try:
        # The daemon's accept backlog may be full for a moment: connect fails (EAGAIN, refused), or asyncio
        # takes an AF_UNIX connect that returned EAGAIN for done and the first write finds no connection.
        # A client connects again, as this one does.
        for _ in range(1000):
            try:
                _reader, writer = await asyncio.open_unix_connection(str(path))
            except OSError as error:
                last = repr(error)
                await asyncio.sleep(0.01)
                continue
            try:
                writer.write(_post_head(100_000))
                await writer.drain()
                break
            except OSError as error:
                last = repr(error)
                writer.close()
                await asyncio.sleep(0.01)
        else:
            if failures is not None:
                failures.append(f"no connection after 1000 attempts: {last}")
            return
        connected.append(1)
    except Exception as error:
        if failures is None:
            raise
        failures.append(repr(error))
        return
    finally:
        started.set()
    try:
        while not stop.is_set():
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.5)
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def test_slow_bodies_do_not_hold_up_complete_requests(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--body-timeout", "60"])
    assert daemon.socket_path is not None
    body = orjson.dumps(review({"deny": "true"}))

    async def scenario() -> list[tuple[int, float]]:
        stop = asyncio.Event()
        events = [asyncio.Event() for _ in range(150)]
        connected: list[int] = []
        failures: list[str] = []
        slow = [asyncio.create_task(_slow_body(daemon.socket_path, event, stop, connected, failures))
                for event in events]
        await asyncio.gather(*(event.wait() for event in events))
        if len(connected) < 140:
            closed = {reason: daemon.metric(CONNECTIONS_CLOSED, {"reason": reason})
                      for reason in ("shed", "rejected", "timeout")}
            notable = [line for line in daemon.log().splitlines() if '"level":"warning"' in line
                       or '"level":"error"' in line][-5:]
            raise AssertionError((len(connected), sorted(set(failures))[:5], closed, notable))
        answers = []
        for _ in range(20):
            started = time.monotonic()
            raw = await asyncio.to_thread(raw_http, daemon.socket_path, [_post_head(len(body)), body])
            answers.append((status_of(raw), time.monotonic() - started))
        stop.set()
        await asyncio.gather(*slow, return_exceptions=True)
        return answers

    answers = asyncio.run(scenario())
    # Answered, and long before the slow clients' 60 s body timeout would have freed a slot.
    assert all(status == 200 for status, _ in answers), answers
    assert max(seconds for _, seconds in answers) < 10, answers


def test_idle_and_half_sent_connections_are_closed_and_shed(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--max-connections", "30", "--header-timeout", "1", "--idle-timeout", "2"])
    assert daemon.socket_path is not None
    idle = []
    for _ in range(60):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(daemon.socket_path))
        idle.append(sock)
    half = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    half.connect(str(daemon.socket_path))
    half.sendall(b"POST /validate HTTP/1.1\r\nHost: local")
    # Over the cap, idle connections make room for new ones: a request still gets through.
    assert daemon.get("/livez").status == 200
    assert daemon.validate(review({"deny": "no"})).status == 200
    # The half-sent request is closed once its header time is up.
    half.settimeout(10)
    assert half.recv(1024) == b""
    assert wait_for(lambda: daemon.metric(CONNECTIONS_CLOSED, {"reason": "timeout"}) > 0)
    assert daemon.metric(CONNECTIONS_CLOSED, {"reason": "shed"}) > 0
    for sock in [*idle, half]:
        sock.close()


def test_the_open_file_limit_is_raised_and_the_cap_kept_below_it(make_daemon: DaemonFactory) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(1024, hard)
    daemon = make_daemon(start=False)
    daemon.launcher = ["prlimit", f"--nofile={lowered}:{hard}", "--"]
    daemon.start()
    line = next(line for line in daemon.log().splitlines() if "connection limits" in line)
    limits = orjson.loads(line)
    assert limits["open_file_limit"] == hard
    assert limits["max_connections"] <= hard - RESERVED_DESCRIPTORS


def test_many_connections_are_capped_below_the_descriptor_limit(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    daemon.launcher = ["prlimit", "--nofile=1200:1200", "--"]
    daemon.start()
    assert daemon.socket_path is not None
    flood = [_connect(daemon.socket_path) for _ in range(2000)]

    def serves() -> bool:
        try:
            return daemon.validate(review({"deny": "no"})).status == 200
        except (OSError, aiohttp.ClientError):
            # Accepted in the same burst as the flood, a new connection is as idle as theirs and may be
            # the one shed; a client (kube-apiserver) retries on a new connection.
            return False

    # The daemon kept at most its cap open, shedding idle ones, and still serves.
    assert wait_for(serves, timeout=10)
    assert daemon.metric(CONNECTIONS_CLOSED, {"reason": "shed"}) > 0
    assert "out of system resource" not in daemon.log()
    for sock in flood:
        sock.close()


def _connect(path: Path, patience: float = 5.0) -> socket.socket:
    """A unix connection, waiting while the daemon's accept backlog is full."""
    deadline = time.monotonic() + patience
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def test_descriptor_exhaustion_stops_neither_the_watchdog_nor_reloads(make_daemon: DaemonFactory,
                                                                       tmp_path: Path) -> None:
    notify = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.settimeout(0.2)
    daemon = make_daemon(start=False, env={"NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "400000"})
    # Fewer descriptors than one accept burst: connections exhaust them whatever the cap.
    daemon.launcher = ["prlimit", "--nofile=96:96", "--"]
    daemon.start()
    assert daemon.socket_path is not None
    flood = []
    for _ in range(200):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(2)
        try:
            sock.connect(str(daemon.socket_path))
        except OSError:
            sock.close()
            break
        flood.append(sock)
    # While the descriptors are exhausted the watchdog keeps pinging, and a change is reloaded.
    (daemon.manifests / "deny.yaml").write_text((daemon.manifests / "deny.yaml").read_text()
                                                .replace("v1: pods labelled", "v2: pods labelled"))
    uvloop = '"event_loop":"uvloop"' in daemon.log()

    def exhausted() -> bool:
        if uvloop:
            # libuv meets EMFILE by accepting what waits with a descriptor kept for it and closing it at once, and
            # reports nothing: the clients it closed are the sign that exhaustion did happen.
            return any(_closed_by_peer(sock) for sock in flood)
        return "out of system resource" in daemon.log()

    # Up to 3 s, until three pings have come while exhaustion is seen (a ping every 0.2 s: well under a second).
    messages: list[bytes] = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            messages.append(listener.recv(4096))
        if sum(b"WATCHDOG=1" in message for message in messages) >= 3 and exhausted():
            break
    assert sum(b"WATCHDOG=1" in message for message in messages) >= 3
    assert exhausted()  # exhaustion did happen
    for sock in flood:
        sock.close()
    # Once the flood is gone: ready, serving the reloaded policy, accept errors reported, not flooded.
    assert wait_for(lambda: daemon.status("/readyz") == 200, timeout=15)
    assert wait_for(lambda: "v2: pods" in (daemon.validate(review({"deny": "true"})).json()["response"]
                                          .get("status", {}).get("message", "")), timeout=15)
    assert daemon.log().count("out of system resource") < 20
    listener.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_compressed_bodies_are_refused_without_inflating(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    assert daemon.socket_path is not None
    # 2 MiB of zeros inflating to 2 GiB: refused from its header.
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
    raw = raw_http(daemon.socket_path, [_post_head(len(bomb), "Content-Encoding: gzip\r\n"), bomb])
    assert status_of(raw) == 415
    assert b"Content-Encoding" in raw
    assert daemon.get("/livez").status == 200


def test_a_stalled_log_reader_blocks_nothing(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    read_end, write_end = os.pipe()  # nobody reads read_end until the end
    process = subprocess.Popen(daemon.command(), cwd=daemon.workdir, env=env, stdout=write_end, stderr=write_end)
    os.close(write_end)
    daemon.process = process
    try:
        assert wait_for(lambda: daemon.status("/readyz") == 200, timeout=30)
        # --log-level debug: a line per request (about 220 bytes), twice what the pipe holds (64 KiB).
        for index in range(600):
            assert daemon.validate(review({"deny": "no"}, uid=f"u{index}")).status == 200
        assert daemon.get("/livez").status == 200
        pending = int.from_bytes(fcntl.ioctl(read_end, termios.FIONREAD, b"\0\0\0\0"), "little")
        assert pending >= 60_000  # the pipe is full: the daemon answered while its log writes could not
    finally:
        process.send_signal(signal.SIGTERM)
        with os.fdopen(read_end, "rb") as reader:
            reader.read()  # let the writer finish so the daemon can exit
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0


def test_the_log_writer_drops_and_counts_when_the_reader_stalls() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, True)
    stream = os.fdopen(write_end, "w")
    writer = NonBlockingWriter(stream, capacity=10)
    line = "x" * 1000 + "\n"
    started = time.monotonic()
    for _ in range(500):
        writer.write(line)
    assert time.monotonic() - started < 5  # not one blocked write
    assert writer.dropped > 0
    os.close(read_end)
    writer.close(timeout=1)
    with contextlib.suppress(OSError):
        stream.close()


def test_requests_wait_for_the_first_load_instead_of_failing(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = make_daemon(start=False)
    # Enough policies that loading takes a noticeable while.
    for index in range(600):
        name = f"p{index:04d}"
        (daemon.manifests / f"{name}.yaml").write_text(_named_policy(name))
    daemon.start(wait=False)
    assert daemon.socket_path is not None
    assert wait_for(lambda: daemon.socket_path is not None and daemon.socket_path.exists(), timeout=20)
    answer = daemon.validate(review({"deny": "true"}))
    assert answer.status == 200, answer.body
    assert answer.json()["response"]["allowed"] is False
    daemon.wait_ready()


def _named_policy(name: str) -> str:
    return validating_policy_yaml(
        name, group="apps", resource="deployments", failure_policy=None,
        validations=f"  - expression: \"object.spec.replicas <= {len(name)} || "
                    f"object.metadata.name.startsWith('{name}')\"\n")


def _sighup_handled(pid: int) -> bool:
    """Whether the process has set SIGHUP to ignored or caught (``SigIgn``/``SigCgt`` in /proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    mask = 1 << (signal.SIGHUP - 1)
    return bool((int(fields["SigIgn"], 16) | int(fields["SigCgt"], 16)) & mask)


def test_sighup_during_start_up_does_not_kill_the_daemon(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "staticadm", *daemon.command()[3:]]
    with daemon.log_path.open("ab") as log:
        process = subprocess.Popen(command, cwd=daemon.workdir, env=env, stdout=log, stderr=log)
    daemon.process = process
    # Before the interpreter runs our first line no process can handle a signal (SIGHUP's default action
    # ends it); the claim is about every moment after launch.py has set its disposition, so the signals
    # start the instant the kernel shows SIGHUP ignored or caught, then keep coming through start-up.
    deadline = time.monotonic() + 30
    while not _sighup_handled(process.pid):
        assert process.poll() is None and time.monotonic() < deadline, daemon.log()
        time.sleep(0.001)
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3):
        time.sleep(delay)
        process.send_signal(signal.SIGHUP)
    daemon.wait_ready()
    assert process.poll() is None


def test_losing_a_port_conflict_leaves_the_winners_socket_alone(make_daemon: DaemonFactory,
                                                                 tmp_path: Path) -> None:
    winner = make_daemon()
    assert winner.socket_path is not None and winner.port is not None
    loser_socket = tmp_path / "loser" / "staticadm.sock"
    loser = Daemon(workdir=tmp_path, manifests=winner.manifests, socket_path=loser_socket, port=winner.port,
                   state_dir=tmp_path / "state")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(loser.command(), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "--listen" in result.stderr
    assert not loser_socket.exists()
    assert winner.socket_path.exists() and winner.get("/livez").status == 200
    # The same with the winner's own socket path: the loser must not touch it.
    shared = Daemon(workdir=tmp_path, manifests=winner.manifests, socket_path=winner.socket_path,
                    port=free_port(), state_dir=tmp_path / "state")
    result = subprocess.run(shared.command(), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert winner.socket_path.exists() and winner.get("/livez").status == 200
