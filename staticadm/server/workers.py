"""``staticadm serve --workers N``: N processes answering on the same sockets, one supervisor.

Python runs one request at a time per process, so a node's cores are used by processes. The supervisor
binds the listeners (or takes them from socket activation) and starts N workers that inherit them, so
the kernel spreads connections over the workers. It owns everything that must happen once: sd_notify
(READY, RELOADING, WATCHDOG, STATUS), the manifest directory's watch and validation, and reload
reporting. A reload is coordinated: the supervisor validates the directory and sends the bytes it read
to every worker, so all of them serve the very same content hash (each reports it back, and exports it
as ``staticadm_worker_config_info``). A worker that dies, a native crash included, is replaced while
the others keep serving; SIGTERM drains every worker. Metrics are written by every process into a
shared directory (Prometheus multiprocess mode) and any worker's ``/metrics`` shows their sum.

The control channel between the supervisor and a worker is a unix socket pair carrying pickled
messages: both ends are this program, started by the supervisor itself.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import pickle
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from staticadm.manifests.files import DirectoryContents
from staticadm.server.config import ServeConfig
from staticadm.server.listeners import Listener, SharedListeningSocket
from staticadm.source import ManifestSource, ReloadResult, ReloadStatus

#: Where a worker finds its configuration, listeners and control channel.
WORKER_ENVIRONMENT = "STATICADM_WORKER"
#: Replacing a worker that keeps dying is slowed down to this at most.
MAX_RESTART_DELAY = 30.0
#: A worker that lived this long is considered healthy again: its next restart is immediate.
HEALTHY_AFTER = 60.0
#: What a worker gets to finish its requests after SIGTERM beyond the shutdown grace.
STOP_MARGIN = 5.0
#: How often a worker compares its memory with its allowance (reading /proc/self/statm: microseconds).
MEMORY_CHECK_SECONDS = 5.0
#: How long a worker replaced for its memory keeps serving while its replacement starts, at most.
RETIRE_WAIT = 60.0
_HEADER = struct.Struct("!I")


# -- messages -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    """Supervisor -> worker: serve these contents (validated by the supervisor)."""

    reason: str
    contents: DirectoryContents


@dataclass(frozen=True, slots=True)
class NothingToServe:
    """Supervisor -> worker: the first load failed; answer 503 until a Load arrives."""


@dataclass(frozen=True, slots=True)
class DiskState:
    """Supervisor -> worker: whether the directory on disk is what is served (for /readyz?verbose)."""

    problem: str | None


@dataclass(frozen=True, slots=True)
class ShadowLoad:
    """Supervisor -> worker: evaluate these --shadow-manifests contents beside the served ones."""

    reason: str
    contents: DirectoryContents


@dataclass(frozen=True, slots=True)
class Serving:
    """Worker -> supervisor: the content hash the worker serves now ("" before its first snapshot)."""

    content_hash: str
    status: str


@dataclass(frozen=True, slots=True)
class Recycling:
    """Worker -> supervisor: the worker grew past its memory allowance; start its replacement, then stop it."""

    resident_bytes: int
    growth_bytes: int


def resident_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``), or 0 where there is none to read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


async def _send(writer: asyncio.StreamWriter, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_HEADER.pack(len(data)) + data)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> object:
    header = await reader.readexactly(_HEADER.size)
    return pickle.loads(await reader.readexactly(_HEADER.unpack(header)[0]))  # our own child: trusted


# -- the worker's side ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker is started with (passed in its environment)."""

    index: int
    config: ServeConfig
    #: (file descriptor, "unix" or "https", description) of each inherited listener.
    listeners: tuple[tuple[int, str, str], ...]
    control_fd: int

    def encode(self) -> str:
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> WorkerSpec:
        spec = pickle.loads(base64.b64decode(text))
        if not isinstance(spec, WorkerSpec):
            raise ValueError(f"{WORKER_ENVIRONMENT} does not describe a worker")
        return spec


class WorkerLink:
    """A worker's end of the control channel: its snapshots come from here, not from the directory."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        #: Resident bytes after the latest snapshot was loaded: what memory growth is measured from.
        self.loaded_size = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @property
    def index(self) -> int:
        return self.spec.index

    def listeners(self) -> list[tuple[Listener, bool]]:
        found = []
        for fd, kind, description in self.spec.listeners:
            sock = SharedListeningSocket(fileno=fd)
            os.set_inheritable(fd, False)
            found.append((Listener("unix" if kind == "unix" else "https", sock, description), kind == "https"))
        return found

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            sock = socket.socket(fileno=self.spec.control_fd)
            os.set_inheritable(self.spec.control_fd, False)
            self._reader, self._writer = await asyncio.open_unix_connection(sock=sock)
        return self._reader, self._writer

    async def first_load(self, source: ManifestSource, on_disk_problem: Callable[[str | None], None],
                         on_shadow: Callable[[ShadowLoad], None]) -> ReloadResult | None:
        """The supervisor's first word: a snapshot to serve, or None when its first load failed."""
        reader, _ = await self._connect()
        while True:
            message = await _receive(reader)
            if not _side_message(message, on_disk_problem, on_shadow):
                return await self._handle(source, message)

    async def run(self, source: ManifestSource, on_result: Callable[[ReloadResult | None], None],
                  on_disk_problem: Callable[[str | None], None], on_shadow: Callable[[ShadowLoad], None]) -> None:
        """Serves every later Load. The supervisor closing the channel means it is gone: the worker stops."""
        reader, _ = await self._connect()
        while True:
            try:
                message = await _receive(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                os.kill(os.getpid(), signal.SIGTERM)
                return
            if not _side_message(message, on_disk_problem, on_shadow):
                on_result(await self._handle(source, message))

    async def watch_memory(self, allowance_bytes: int, log: Any, interval: float = MEMORY_CHECK_SECONDS) -> None:
        """Asks the supervisor for a replacement once this worker has grown ``allowance_bytes`` beyond its
        size after its latest snapshot load (measured when the load was served), then keeps serving until
        the supervisor stops it."""
        while True:
            await asyncio.sleep(interval)
            baseline = self.loaded_size
            resident = resident_bytes()
            if baseline and resident - baseline > allowance_bytes:
                log.warning("worker memory grew past its allowance; asking for a replacement",
                            resident_mib=resident >> 20, after_load_mib=baseline >> 20,
                            allowance_mib=allowance_bytes >> 20)
                _, writer = await self._connect()
                await _send(writer, Recycling(resident, resident - baseline))
                return

    async def _handle(self, source: ManifestSource, message: object) -> ReloadResult | None:
        _, writer = await self._connect()
        if isinstance(message, NothingToServe):
            await _send(writer, Serving("", "nothing"))
            return None
        if not isinstance(message, Load):
            raise TypeError(f"unexpected control message {type(message).__name__}")
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(None, source.apply, message.reason, message.contents)
        served = source.current
        self.loaded_size = resident_bytes()
        await _send(writer, Serving(served.content_hash if served else "", str(result.status)))
        return result


def _side_message(message: object, on_disk_problem: Callable[[str | None], None],
                  on_shadow: Callable[[ShadowLoad], None]) -> bool:
    """Handles a message that does not change what the worker serves; False for one that does."""
    if isinstance(message, DiskState):
        on_disk_problem(message.problem)
        return True
    if isinstance(message, ShadowLoad):
        on_shadow(message)
        return True
    return False


def worker_main() -> int:
    """Entry point of a worker process (``python -m staticadm.server.workers``)."""
    from staticadm.server.main import serve_worker

    spec = WorkerSpec.decode(os.environ.pop(WORKER_ENVIRONMENT))
    return serve_worker(spec)


# -- the supervisor's side ------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Worker:
    index: int
    process: asyncio.subprocess.Process
    writer: asyncio.StreamWriter
    reader: asyncio.StreamReader
    started: float
    served_hash: str | None = None
    restarts: int = 0


@dataclass(slots=True)
class WorkerPool:
    """The supervisor's workers: started, told what to serve, replaced when they die, stopped."""

    count: int
    config: ServeConfig
    listeners: list[tuple[Listener, bool]]
    log: Any
    on_serving: Callable[[], None]
    on_restart: Callable[[], None]
    on_recycle: Callable[[], None] = lambda: None
    workers: dict[int, _Worker] = field(default_factory=dict)
    #: Workers being replaced for their memory: they serve until their replacement does, then drain.
    retiring: set[_Worker] = field(default_factory=set)
    _retirements: set[asyncio.Task[None]] = field(default_factory=set)
    stopping: bool = False
    #: What every worker must serve: the last Load (or NothingToServe) sent.
    latest: object | None = None
    #: The last DiskState sent, for workers started later.
    disk_state: DiskState | None = None
    #: The last shadow contents sent, for workers started later.
    shadow: ShadowLoad | None = None

    async def start(self) -> None:
        for index in range(self.count):
            await self._spawn(index, restarts=0)

    async def _spawn(self, index: int, restarts: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = [listener.sock.fileno() for listener, _ in self.listeners]
        spec = WorkerSpec(index, self.config, tuple(
            (listener.sock.fileno(), "https" if tls else "unix", listener.description)
            for listener, tls in self.listeners), theirs.fileno())
        env = {key: value for key, value in os.environ.items()
               if key not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS",
                              "LISTEN_FDNAMES")}
        env[WORKER_ENVIRONMENT] = spec.encode()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "staticadm.server.workers", pass_fds=[*fds, theirs.fileno()], env=env,
            stdin=asyncio.subprocess.DEVNULL)
        theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        worker = _Worker(index, process, writer, reader, time.monotonic(), restarts=restarts)
        self.workers[index] = worker
        self.log.info("worker started", worker=index, pid=process.pid)
        if self.latest is not None:
            await self._tell(worker, self.latest)
        if self.disk_state is not None:
            await self._tell(worker, self.disk_state)
        if self.shadow is not None:
            await self._tell(worker, self.shadow)

    async def _tell(self, worker: _Worker, message: object) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await _send(worker.writer, message)

    async def broadcast(self, message: object) -> None:
        if isinstance(message, DiskState | ShadowLoad):
            if isinstance(message, DiskState):
                self.disk_state = message
            else:
                self.shadow = message
            for worker in list(self.workers.values()):
                await self._tell(worker, message)
            return
        self.latest = message
        for worker in list(self.workers.values()):
            worker.served_hash = None
            await self._tell(worker, message)

    def serving(self) -> dict[int, str | None]:
        return {index: worker.served_hash for index, worker in self.workers.items()}

    async def watch(self, index: int) -> None:
        """Reads one worker's reports, and replaces it when it dies (until the pool stops)."""
        while True:
            worker = self.workers[index]
            recycling: Recycling | None = None
            while recycling is None:
                try:
                    message = await _receive(worker.reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                if isinstance(message, Serving):
                    worker.served_hash = message.content_hash
                    self.on_serving()
                elif isinstance(message, Recycling):
                    recycling = message
            if recycling is not None:
                if self.stopping:
                    return
                self.log.info("replacing a worker that grew past its memory allowance", worker=index,
                              pid=worker.process.pid, resident_mib=recycling.resident_bytes >> 20,
                              growth_mib=recycling.growth_bytes >> 20)
                self.on_recycle()
                self.retiring.add(worker)
                await self._spawn(index, restarts=0)
                retirement = asyncio.create_task(self._retire(worker, self.workers[index]))
                self._retirements.add(retirement)
                retirement.add_done_callback(self._retirements.discard)
                continue
            code = await worker.process.wait()
            worker.writer.close()
            if self.stopping:
                return
            self._mark_dead(worker.process.pid)
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
            lived = time.monotonic() - worker.started
            restarts = 0 if lived > HEALTHY_AFTER else worker.restarts + 1
            delay = 0.0 if restarts == 0 else min(0.5 * 2 ** (restarts - 1), MAX_RESTART_DELAY)
            self.log.error("worker died; replacing it", worker=index, pid=worker.process.pid, how=how,
                           lived_seconds=round(lived, 1), restart_in_seconds=delay)
            self.on_restart()
            await asyncio.sleep(delay)
            if self.stopping:
                return
            await self._spawn(index, restarts)

    async def _retire(self, old: _Worker, replacement: _Worker) -> None:
        """Retires ``old`` once ``replacement`` serves, or after ``RETIRE_WAIT`` seconds if it never does (the
        old one must not grow without bound meanwhile): SIGUSR1 makes it stop accepting, answer every request
        on its open connections, close them and exit, refusing nothing (SIGTERM would answer 503 meanwhile)."""
        deadline = time.monotonic() + RETIRE_WAIT
        while replacement.served_hash is None and time.monotonic() < deadline and not self.stopping:
            await asyncio.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            old.process.send_signal(signal.SIGTERM if self.stopping else signal.SIGUSR1)
        code = await old.process.wait()
        old.writer.close()
        self.retiring.discard(old)
        self._mark_dead(old.process.pid)
        self.log.info("replaced worker stopped", pid=old.process.pid, exit_code=code)

    @staticmethod
    def _mark_dead(pid: int) -> None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid)

    async def stop(self, grace: float) -> None:
        """SIGTERM to every worker (each drains its requests), SIGKILL to any still running after ``grace``."""
        self.stopping = True
        everyone = [*self.workers.values(), *self.retiring]
        for worker in everyone:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(worker.process.wait()) for worker in everyone]
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=grace + STOP_MARGIN)
        if pending:
            self.log.warning("workers did not stop in time; killing them", workers=len(pending))
            for worker in everyone:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
            await asyncio.wait(pending, timeout=STOP_MARGIN)
        for worker in everyone:
            self._mark_dead(worker.process.pid)


def load_message(result: ReloadResult) -> Load | None:
    """What the workers must serve after one of the supervisor's reloads (None: nothing changes)."""
    served = result.served
    if result.status is not ReloadStatus.SUCCESS or served is None or served.contents is None:
        return None
    return Load(result.reason, served.contents)


if __name__ == "__main__":
    # Run as a module, this file is __main__; the messages unpickled here are classes of the importable
    # module, so the worker runs that module's code, not this copy's.
    from staticadm.server import workers

    raise SystemExit(workers.worker_main())
