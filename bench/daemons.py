"""The servers under test as real subprocesses, and tiny blocking HTTP clients to poll them.

Blocking http.client rather than aiohttp: the harness only polls readiness and the rename probe, and a
fresh event loop per poll would cost more than the request being timed.
"""

from __future__ import annotations

import http.client
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Where ``staticadm`` is imported from by the servers; run.py's --source points it at another checkout
#: (an A/B comparison, or a clean export while the working tree is being edited).
SOURCE_ROOT = REPO_ROOT
READY_TIMEOUT = 120.0


class ServerFailed(RuntimeError):
    """The server exited or never became ready; the message carries its log."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def free_port() -> int:
    """A port nothing listens on, below the kernel's range of ephemeral ports where there is room: a port that
    ``bind(0)`` handed out is ephemeral, so once it is closed the kernel may give it to any outgoing connection (a
    test run makes thousands) before the server meant to listen there binds it."""
    below = _lowest_ephemeral_port()
    lowest, highest = _this_processes_share(_LOWEST_CHOSEN_PORT, below - 1)
    for _ in range(100):
        port = random.randint(lowest, highest) if highest > lowest else 0
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen = int(sock.getsockname()[1])
        _HANDED_OUT.add(chosen)
        return chosen
    raise OSError("no free port on 127.0.0.1 below the ephemeral range after 100 tries")


#: Ports this process has handed out: a server started with one may not be listening yet (a daemon takes a while
#: to bind), and a second caller must not be given it meanwhile.
_HANDED_OUT: set[int] = set()


def _this_processes_share(lowest: int, highest: int) -> tuple[int, int]:
    """Under pytest-xdist each worker chooses from a slice of its own: two workers never choose the same port
    between one's choice and its server's bind (seen in the suite: a daemon's --metrics-listen port taken)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()) or highest <= lowest:
        return lowest, highest
    index, width = int(worker[2:]), (highest - lowest + 1) // max(1, int(count))
    if width < 100 or index >= int(count):
        return lowest, highest
    return lowest + index * width, lowest + (index + 1) * width - 1


#: Ports below this are left to services that may be installed on the machine.
_LOWEST_CHOSEN_PORT = 10_000


def _lowest_ephemeral_port() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # unknown: bind(0) chooses


def _insecure_context() -> ssl.SSLContext:
    # Readiness only: wrk does not verify the certificate either, and both servers use the same one.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@dataclass
class Server:
    name: str
    command: list[str]
    log_path: Path
    port: int
    socket_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    #: Seconds from spawning the process to the first 200 from /readyz.
    ready_seconds: float = 0.0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = READY_TIMEOUT) -> Server:
        # SOURCE_ROOT first for staticadm, REPO_ROOT for bench (the null server) when they differ.
        path = os.pathsep.join(dict.fromkeys([str(SOURCE_ROOT), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
        env = {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep)}
        self.started_at = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command, cwd=SOURCE_ROOT, env=env, stdout=log, stderr=log)
        self._wait_ready(timeout)
        self.ready_seconds = time.perf_counter() - self.started_at
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"{self.name} exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            try:
                if self.request("GET", "/readyz", timeout=1.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        self.stop()
        raise ServerFailed(f"{self.name} not ready within {timeout:g} s:\n{self.log()[-4000:]}")

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=_insecure_context())

    def request(self, method: str, path: str, body: bytes | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
        connection = self._connection(timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def review(self, path: str, body: bytes) -> dict[str, Any]:
        status, data = self.request("POST", path, body)
        if status != 200:
            raise ServerFailed(f"{self.name} answered {path} with {status}: {data[:500]!r}\n{self.log()[-3000:]}")
        return dict(orjson.loads(data))

    def cpu_seconds(self) -> float:
        """User + system CPU of the process and its live descendants (a supervisor's workers)."""
        total = 0.0
        pending = [self.pid]
        while pending:
            pid = pending.pop()
            try:
                total += process_cpu_seconds(pid)
                pending += children(pid)
            except (OSError, ValueError, IndexError):
                continue
        return total

    def rss_kib(self) -> dict[str, int]:
        """VmRSS (now) and VmHWM (peak) of the process, in KiB."""
        figures: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                figures[key] = int(value.split()[0])
        return figures

    def stop(self) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The pids of process ``pid``'s children."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def null_server(workdir: Path, cert: Path, key: Path, processes: int = 1, loop: str = "asyncio") -> Server:
    """The null server on ``loop`` (``asyncio`` or ``uvloop``): the one the daemon it is compared with runs on."""
    port = free_port()
    command = [sys.executable, "-m", "bench.null_server", "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert),
               "--tls-key", str(key)]
    if loop != "asyncio":
        # Only then: with --source, an older checkout's null server (first on the path) has no such option.
        command += ["--event-loop", loop]
    if processes != 1:
        # Only then: with --source, an older checkout's null server (first on the path) has no such option.
        command += ["--processes", str(processes)]
    return Server("null server", command, workdir / f"null-server-{processes}.log", port)


def supports_event_loop() -> bool:
    """Whether the staticadm under test has ``serve --event-loop`` (an older --source checkout runs asyncio's)."""
    return (SOURCE_ROOT / "staticadm" / "server" / "event_loop.py").exists()


def daemon_event_loop(choice: str) -> str:
    """The loop (``asyncio`` or ``uvloop``) the staticadm under test runs on given ``--event-loop choice``."""
    if not supports_event_loop():
        return "asyncio"
    from staticadm.server.event_loop import resolve

    return resolve(choice)


def supports_workers() -> bool:
    """Whether the staticadm under test has ``serve --workers`` (an older --source checkout may not)."""
    return (SOURCE_ROOT / "staticadm" / "server" / "workers.py").exists()


def supports_cluster_view() -> bool:
    """Whether the staticadm under test has ``serve --kubeconfig``."""
    return (SOURCE_ROOT / "staticadm" / "cluster").is_dir()


def staticadm_server(workdir: Path, manifests: Path, state_dir: Path, namespaces: Path | None,
                     name: str = "staticadm", workers: int = 1, kubeconfig: Path | None = None,
                     loop: str = "asyncio") -> Server:
    """``staticadm serve`` as deployed: HTTPS with the state directory's generated certificate, a unix
    socket, JSON logs at info (allowed requests are debug, so not logged), no periodic poll during a run."""
    port = free_port()
    socket_path = workdir / f"{name}.sock"
    command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(manifests), "--socket", str(socket_path),
               "--listen", f"127.0.0.1:{port}", "--state-dir", str(state_dir), "--log-level", "info",
               "--poll-interval", "3600"]
    if namespaces is not None:
        command += ["--namespaces", str(namespaces)]
    if kubeconfig is not None:
        command += ["--kubeconfig", str(kubeconfig)]
    if supports_workers():
        command += ["--workers", str(workers)]
    elif workers != 1:
        raise ValueError("the staticadm under test has no --workers")
    if supports_event_loop():
        command += ["--event-loop", loop]
    elif loop != "asyncio":
        raise ValueError("the staticadm under test has no --event-loop")
    return Server(name, command, workdir / f"{name}.log", port, socket_path)
