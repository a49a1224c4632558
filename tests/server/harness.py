"""The real daemon as a subprocess, and aiohttp clients over its unix socket and its HTTPS port."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from bench.daemons import free_port
from staticadm.writes import EVENT_GRACE
from tests.policy_text import validating_policy_yaml
from tests.server import forked

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
#: Environment variables the daemon reads only once it runs (systemd's notification and watchdog settings, the commit
#: an image records): a daemon started with them may still be forked.
READ_AS_IT_RUNS = frozenset({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "STATICADM_GIT_COMMIT"})
RELOADS = "staticadm_manifest_admission_config_controller_automatic_reloads_total"
REQUESTS = "staticadm_admission_requests_total"
#: Generous bound for a file event to be served; the daemon coalesces for 50 ms.
EVENT_WAIT = 5.0
#: The environment variable that makes every daemon a test starts run on this event loop (--event-loop).
TEST_EVENT_LOOP = "STATICADM_TEST_EVENT_LOOP"


def policy_yaml(message: str, *, name: str = "deny-label", label: str = "deny") -> str:
    """A policy denying pods labelled ``<label>=true``, with its binding, in one file (atomic together)."""
    return validating_policy_yaml(name, operations='["CREATE", "UPDATE"]', failure_policy=None, validations=f"""\
  - expression: >-
      !has(object.metadata.labels) || !('{label}' in object.metadata.labels)
      || object.metadata.labels['{label}'] != 'true'
    message: "{message}"
""")


def review(labels: dict[str, str] | None = None, *, uid: str = "uid-1", api_version: str = "admission.k8s.io/v1",
           name: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "name": name,
            "namespace": "default",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "namespace": "default", "labels": labels or {}}},
        },
    }


def written_before_start(path: Path, text: str) -> None:
    """``path`` written as a file the daemon finds when it starts, there since before: its modification time is put
    further back than the grace a startup load gives a just-modified file whose completion no file event has told
    of (``writes.EVENT_GRACE``). Written just before the start, the first load would wait that grace out, half a
    second of every test that starts a daemon; a test of that wait writes its file itself."""
    path.write_text(text)
    past = time.time() - 2 * EVENT_GRACE
    os.utime(path, (past, past))


def write_atomically(path: Path, text: str) -> None:
    temporary = path.parent.parent / f".{path.name}.tmp"
    temporary.write_text(text)
    os.replace(temporary, path)


#: The daemon's first load failed (not a reload: "reloading manifest config failed").
FIRST_LOAD_FAILED = re.compile(rb"(?<!re)loading manifest config failed")


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Daemon:
    workdir: Path
    manifests: Path
    socket_path: Path | None
    port: int | None
    state_dir: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    launcher: list[str] | None = None
    process: subprocess.Popen[bytes] | forked.ForkedDaemon | None = None
    ca_file: Path | None = None
    client_cert: tuple[Path, Path] | None = None
    #: Where this start's lines begin in the log, which a restarted daemon appends to.
    log_offset: int = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / "daemon.log"

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(self.manifests),
                   "--state-dir", str(self.state_dir), "--log-level", "debug", "--poll-interval", "3600"]
        command += ["--socket", str(self.socket_path) if self.socket_path else ""]
        command += ["--listen", f"127.0.0.1:{self.port}" if self.port else ""]
        if "--workers" not in self.args:
            # One process unless a test asks for workers: most tests look at that one process.
            command += ["--workers", "1"]
        if "--event-loop" not in self.args and os.environ.get(TEST_EVENT_LOOP):
            # The whole suite (or a part of it) run again on the other event loop.
            command += ["--event-loop", os.environ[TEST_EVENT_LOOP]]
        return (self.launcher or []) + command + self.args

    def start(self, *, wait: bool = True) -> Daemon:
        env = {**os.environ, **self.env}
        # Import the checkout under test, whatever is installed in the environment.
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # An environment of the test's own may be read at import (a PYTHONPATH hook) or by what the fork server
        # already ran (TMPDIR, which tempfile keeps once read): a fresh interpreter then, unless the daemon reads
        # each of those variables only as it runs.
        self.process = forked.start(self.command(), workdir=self.workdir, environment=env, log_path=self.log_path,
                                    may_fork=set(self.env) <= READ_AS_IT_RUNS)
        if wait:
            self.wait_ready()
        return self

    def log(self) -> str:
        """The daemon's log so far; while it runs, up to its last complete line: a reader of the file can meet a line
        half written (seen in CI: a finding's JSON cut at character 654 of 700), which is not yet the daemon's word."""
        text = self.log_path.read_text(errors="replace")
        if self.process is not None and self.process.poll() is None and not text.endswith("\n"):
            return text[:text.rfind("\n") + 1]
        return text

    def wait_ready(self, timeout: float = READY_TIMEOUT, *, every_worker: bool = True) -> None:
        """Until /readyz answers 200 and, with ``every_worker`` and several workers, each worker serves."""
        deadline = time.monotonic() + timeout
        via = "unix" if self.socket_path else "https"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited with {self.process.returncode}:\n{self.log()}")
            if FIRST_LOAD_FAILED.search(self.log_path.read_bytes()[self.log_offset:]):
                # Not ready until someone fixes the directory: no point waiting for that. (Only this start's first
                # load: a reload that failed in an earlier start, "reloading manifest config failed", is not it.)
                raise AssertionError(f"daemon cannot load its manifests:\n{self.log()}")
            if via == "https" and self.ca_file is None:
                ca = self.state_dir / "tls" / "ca.crt"
                if ca.exists():
                    self.ca_file = ca
                else:
                    time.sleep(0.05)
                    continue
            try:
                if self.get("/readyz", via=via).status == 200 and (not every_worker or self._every_worker_serving(via)):
                    return
            except (TimeoutError, OSError, aiohttp.ClientError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"daemon not ready within {timeout} s:\n{self.log()}")

    def _every_worker_serving(self, via: str) -> bool:
        """With several workers, one /readyz is answered by one of them and says nothing of the others, each of
        which serves once it has applied the supervisor's snapshot: staticadm_worker_config_info shows each."""
        workers = self.args[self.args.index("--workers") + 1] if "--workers" in self.args[:-1] else "1"
        if not workers.isdigit() or int(workers) <= 1:
            return True
        serving = [line for line in self.get("/metrics", via=via).body.decode().splitlines()
                   if line.startswith("staticadm_worker_config_info{") and line.endswith(" 1.0")]
        return len(serving) >= int(workers)

    def stop(self) -> int:
        return stop_process(self.process)

    # -- clients -------------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        ca = self.ca_file or self.state_dir / "tls" / "ca.crt"
        context = ssl.create_default_context(cafile=str(ca))
        if self.client_cert is not None:
            context.load_cert_chain(str(self.client_cert[0]), str(self.client_cert[1]))
        return context

    def request(self, method: str, path: str, *, via: str = "unix", body: bytes | None = None,
                json: Any = None, headers: dict[str, str] | None = None,
                ssl_context: ssl.SSLContext | None = None) -> Response:
        return asyncio.run(self._request(method, path, via, body, json, headers, ssl_context))

    def get(self, path: str, *, via: str = "unix") -> Response:
        return self.request("GET", path, via=via)

    def status(self, path: str, *, via: str = "unix") -> int | None:
        """The status of GET ``path``, or None while nothing answers (not listening yet, or gone)."""
        try:
            return self.get(path, via=via).status
        except (TimeoutError, OSError, aiohttp.ClientError):
            return None

    def validate(self, document: Any, *, via: str = "unix", path: str = "/validate") -> Response:
        return self.request("POST", path, via=via, json=document)

    async def _request(self, method: str, path: str, via: str, body: bytes | None, json: Any,
                       headers: dict[str, str] | None, ssl_context: ssl.SSLContext | None) -> Response:
        timeout = aiohttp.ClientTimeout(total=10)
        if via == "unix":
            assert self.socket_path is not None
            connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path=str(self.socket_path))
            url = f"http://localhost{path}"
        else:
            connector = aiohttp.TCPConnector(ssl=ssl_context or self.ssl_context(), force_close=True)
            url = f"https://127.0.0.1:{self.port}{path}"
        if json is not None:
            body = orjson.dumps(json)
            headers = {"Content-Type": "application/json", **(headers or {})}
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session, \
                session.request(method, url, data=body, headers=headers) as response:
            return Response(response.status, dict(response.headers), await response.read())

    def metric(self, name: str, labels: dict[str, str] | None = None, *, via: str = "unix") -> float:
        text = self.get("/metrics", via=via).body.decode()
        return metric_value(text, name, labels or {})


def stop_process(process: subprocess.Popen[bytes] | forked.ForkedDaemon | None) -> int:
    """SIGTERM, as systemd stops the service; killed if it has not exited within 20 s. Its exit status."""
    if process is None:
        return 0
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def metric_value(text: str, name: str, labels: dict[str, str]) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, _, value = line.rpartition(" ")
        sample_name, _, label_text = series.partition("{")
        if sample_name != name:
            continue
        if all(f'{key}="{val}"' in label_text for key, val in labels.items()):
            total += float(value)
    return total


def read_to_close(client: socket.socket, payload: bytes) -> tuple[bytes, bool]:
    """What the daemon answers ``payload`` with on ``client``, and whether it then closed the connection (a reset
    counts) before the socket's timeout."""
    client.sendall(payload)
    received = b""
    while True:
        try:
            chunk = client.recv(65536)
        except ConnectionResetError:
            return received, True
        except TimeoutError:
            return received, False
        if not chunk:
            return received, True
        received += chunk


def raw_http(socket_path: Path, payload: Sequence[bytes], *, pause: float = 0.0, shutdown_write: bool = False,
             timeout: float = 15.0) -> bytes:
    """Send ``payload`` pieces over the unix socket (pausing between them) and read the whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(socket_path))
        for index, piece in enumerate(payload):
            if index and pause:
                time.sleep(pause)
            sock.sendall(piece)
        if shutdown_write:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                break
        return b"".join(chunks)


def _complete(data: bytes) -> bool:
    length = content_length(data)
    return length is not None and len(body_of(data)) >= length


def content_length(data: bytes) -> int | None:
    """The Content-Length of the HTTP message ``data`` begins with; None without one."""
    for line in data.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return None


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def body_of(raw: bytes) -> bytes:
    return raw.partition(b"\r\n\r\n")[2]


def mount_namespace(setup: str) -> list[str] | None:
    """A launcher that runs the daemon in a private mount namespace once the shell commands ``setup`` (mounts)
    have run there: ``unshare -m`` as root, else in a user namespace (``unshare -rm``) where the kernel allows
    one; None when neither can (the caller skips). The daemon keeps the launcher's pid (both exec)."""
    if shutil.which("unshare") is None:
        return None
    for flags in ([["-m"]] if os.geteuid() == 0 else []) + [["-r", "-m"]]:
        probe = subprocess.run(["unshare", *flags, "sh", "-c", f"{setup} && exec true"], capture_output=True,
                               check=False, timeout=30)
        if probe.returncode == 0:
            return ["unshare", *flags, "sh", "-c", f'{setup} && exec "$@"', "sh"]
    return None


def wait_for(condition: Callable[[], bool], timeout: float = EVENT_WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def denied_message(daemon: Daemon, via: str = "unix") -> str | None:
    answer = daemon.validate(review({"deny": "true"}), via=via)
    assert answer.status == 200, answer.body
    response = answer.json()["response"]
    return None if response["allowed"] else response["status"]["message"]


DaemonFactory = Callable[..., Daemon]


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[DaemonFactory]:
    """Daemons on ``tmp_path/manifests`` (with the deny-label policy unless ``policy=None``), stopped after."""
    started: list[Daemon] = []

    def make(*, policy: str | None = "v1: pods labelled deny=true are not allowed", unix: bool = True,
             https: bool = True, args: list[str] | None = None, start: bool = True, **kwargs: Any) -> Daemon:
        # An explicit ``manifests`` path is left as the test made it (it may not exist yet).
        manifests = kwargs.pop("manifests", None)
        if manifests is None:
            manifests = tmp_path / "manifests"
            manifests.mkdir(exist_ok=True)
        if policy is not None:
            written_before_start(manifests / "deny.yaml", policy_yaml(policy))
        daemon = Daemon(workdir=kwargs.pop("workdir", tmp_path), manifests=manifests,
                        socket_path=tmp_path / "run" / "staticadm.sock" if unix else None,
                        port=free_port() if https else None, state_dir=kwargs.pop("state_dir", tmp_path / "state"),
                        args=args or [], **kwargs)
        started.append(daemon)
        if start:
            daemon.start()
        return daemon

    yield make
    for daemon in started:
        daemon.stop()
