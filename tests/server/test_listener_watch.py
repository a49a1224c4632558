"""A listener that stops listening ends the daemon with EXIT_LISTENER_FAILED, on both event loops.

It is made to happen as it really does, to the daemon as a subprocess: the test takes a duplicate of the daemon's
listening descriptor (``pidfd_getfd``: same user, so permitted) and shuts it down. ``shutdown()`` acts on the socket
both descriptors share: the daemon's accept fails from then on (EINVAL for TCP; a unix socket hangs up and refuses
every connection), which asyncio's loop logs and retries for ever and uvloop's retries without a word. The daemon
must say which listener died and why, and exit non-zero within a few seconds for systemd (or, for a worker, the
supervisor) to start it again; a SIGTERM must still end it with 0 and no such error.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import socket
import subprocess
from pathlib import Path

import orjson
import pytest

from staticadm.server.event_loop import uvloop_importable
from staticadm.server.listener_watch import EXIT_LISTENER_FAILED, WatchedListener, listener_problem
from tests.server.harness import Daemon, DaemonFactory, free_port

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs unix sockets")

#: The generic syscall table's numbers, shared by x86_64 and aarch64 (Linux >= 5.6).
PIDFD_OPEN = 434
PIDFD_GETFD = 438
#: Generous: the daemon checks every second, then shuts down (nothing in flight here).
EXIT_WAIT = 30.0
FAILURE_MESSAGE = "a listener stopped listening; exiting so that the process is started again"


def _syscall(number: int, *args: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(arg) for arg in args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


def _steal(pid: int, fd: int) -> int:
    """A duplicate of ``pid``'s descriptor ``fd`` in this process (the same open file description)."""
    if platform.machine() not in ("x86_64", "aarch64") and not hasattr(os, "pidfd_open"):
        pytest.skip(f"pidfd_open/pidfd_getfd syscall numbers not known for {platform.machine()}")
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else _syscall(PIDFD_OPEN, pid, 0)
    try:
        return _syscall(PIDFD_GETFD, pidfd, fd, 0)
    except OSError as error:
        if error.errno in (errno.ENOSYS, errno.EPERM, errno.EACCES):
            pytest.skip(f"the kernel refuses pidfd_getfd ({error.strerror}): Linux >= 5.6 and ptrace access to "
                        "the daemon (same user, yama ptrace_scope <= 1) are needed")
        raise
    finally:
        os.close(pidfd)


def _listening_socket(pid: int, kind: str, port: int | None) -> socket.socket:
    """A duplicate of the daemon's listening socket of ``kind`` (``unix``, or ``https`` on ``port``)."""
    for entry in sorted(Path(f"/proc/{pid}/fd").iterdir(), key=lambda path: int(path.name)):
        try:
            if not os.readlink(entry).startswith("socket:"):
                continue
        except OSError:
            continue
        sock = socket.socket(fileno=_steal(pid, int(entry.name)))
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        if listening and kind == "unix" and sock.family == socket.AF_UNIX:
            return sock
        if listening and kind == "https" and sock.family == socket.AF_INET and sock.getsockname()[1] == port:
            return sock
        sock.close()
    raise AssertionError(f"no listening {kind} socket in process {pid}")


def _log_lines(daemon: Daemon) -> list[dict[str, object]]:
    lines = []
    for line in daemon.log().splitlines():
        if line.startswith("{"):
            try:
                lines.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return lines


def _failures(daemon: Daemon) -> list[dict[str, object]]:
    return [line for line in _log_lines(daemon) if line.get("msg") == FAILURE_MESSAGE]


def _wait_exit(daemon: Daemon) -> int:
    assert daemon.process is not None
    try:
        return daemon.process.wait(timeout=EXIT_WAIT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the daemon kept running with a dead listener:\n{daemon.log()[-4000:]}") from None


@pytest.fixture(params=["asyncio", "uvloop"])
def event_loop_name(request: pytest.FixtureRequest) -> str:
    if request.param == "uvloop" and not uvloop_importable():
        pytest.skip("uvloop is not installed")
    return str(request.param)


@pytest.mark.parametrize("kind", ["unix", "https"])
def test_a_listener_shut_down_ends_the_daemon(make_daemon: DaemonFactory, event_loop_name: str, kind: str) -> None:
    daemon = make_daemon(args=["--event-loop", event_loop_name])
    assert daemon.process is not None
    dead = _listening_socket(daemon.process.pid, kind, daemon.port)
    dead.shutdown(socket.SHUT_RDWR)
    dead.close()
    assert _wait_exit(daemon) == EXIT_LISTENER_FAILED
    failures = _failures(daemon)
    assert len(failures) == 1, daemon.log()[-4000:]
    expected = f"unix:{daemon.socket_path}" if kind == "unix" else f"https://127.0.0.1:{daemon.port}"
    assert failures[0]["listener"] == expected
    assert "shut down" in str(failures[0]["cause"])
    assert f'"event_loop":"{event_loop_name}"' in daemon.log()
    # It shut down as on SIGTERM, the unix socket's file removed: systemd starts a clean process.
    assert '"msg":"stopped"' in daemon.log()
    assert daemon.socket_path is not None and not daemon.socket_path.exists()


def test_a_shared_listener_shut_down_ends_the_supervisor(make_daemon: DaemonFactory, event_loop_name: str) -> None:
    """With workers the supervisor holds the socket the workers accept from: a dead one is dead for every worker
    and every replacement, so the supervisor itself exits for systemd to start everything again."""
    daemon = make_daemon(args=["--event-loop", event_loop_name, "--workers", "2"])
    assert daemon.process is not None
    dead = _listening_socket(daemon.process.pid, "https", daemon.port)
    dead.shutdown(socket.SHUT_RDWR)
    dead.close()
    assert _wait_exit(daemon) == EXIT_LISTENER_FAILED
    supervisor = [line for line in _failures(daemon) if "worker" not in line]
    assert len(supervisor) == 1, daemon.log()[-4000:]
    assert supervisor[0]["listener"] == f"https://127.0.0.1:{daemon.port}"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_metrics_listener_shut_down_ends_the_process_serving_it(make_daemon: DaemonFactory, tmp_path: Path,
                                                                    event_loop_name: str, workers: str) -> None:
    """--metrics-listen is served by the single process, or by the supervisor: that process exits."""
    token = tmp_path / "metrics-token"
    token.write_text("a-token\n")
    port = free_port()
    daemon = make_daemon(args=["--event-loop", event_loop_name, "--workers", workers,
                               "--metrics-listen", f"127.0.0.1:{port}", "--metrics-token-file", str(token)])
    assert daemon.process is not None
    dead = _listening_socket(daemon.process.pid, "https", port)
    dead.shutdown(socket.SHUT_RDWR)
    dead.close()
    assert _wait_exit(daemon) == EXIT_LISTENER_FAILED
    failures = [line for line in _failures(daemon) if "worker" not in line]
    assert [line["listener"] for line in failures] == [f"https://127.0.0.1:{port} (/metrics)"], daemon.log()[-4000:]


def test_sigterm_still_exits_0_without_a_listener_failure(make_daemon: DaemonFactory, event_loop_name: str) -> None:
    daemon = make_daemon(args=["--event-loop", event_loop_name])
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGTERM)
    assert _wait_exit(daemon) == 0
    assert _failures(daemon) == []
    assert "stopped listening" not in daemon.log()


def test_a_closed_descriptor_is_told_from_its_number_reused(tmp_path: Path) -> None:
    """A descriptor number closed and taken by another file: the watch compares what it refers to, not the number."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "listener.sock"))
    sock.listen(8)
    watched = WatchedListener.of("unix", "unix:test", sock)
    assert listener_problem(watched) is None
    fd = sock.fileno()
    os.close(fd)  # behind the socket object's back, as a bug elsewhere in the process would
    try:
        assert listener_problem(watched) == f"its descriptor {fd} was closed (Bad file descriptor)"
        reused = os.open(tmp_path / "file", os.O_CREAT | os.O_RDONLY)
        try:
            assert reused == fd
            reused_problem = f"its descriptor {fd} was closed (the number now refers to another file)"
            assert listener_problem(watched) == reused_problem
        finally:
            os.close(reused)
    finally:
        sock.detach()
