"""``staticadm serve --workers N``: N processes answering on the same sockets, one supervisor.

Python runs one request at a time per process, so a node's cores are used by processes. The supervisor
binds the listeners (or takes them from socket activation) and starts N workers that inherit them, so
the kernel spreads connections over the workers. It owns everything that must happen once: sd_notify
(READY, RELOADING, WATCHDOG, STATUS), the manifest directory's watch and validation, and reload
reporting. A reload is coordinated: the supervisor validates the directory and sends the bytes it read
to every worker, so all of them serve the very same content hash (each reports it back, and exports it
as ``staticadm_worker_config_info``). A worker that dies, a native crash included, is replaced while
the others keep serving, and so is one that stops answering the supervisor's heartbeat (stopped, or its
event loop stuck); SIGTERM drains every worker. Each process keeps its metrics in memory; a scrape that
reaches a worker is answered by the supervisor with the sum over every process (:class:`ProcessSum`).
Nothing is written to a file, so no full or read-only file system can stop a worker.

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
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from staticadm.manifests.files import DirectoryContents
from staticadm.server.config import ServeConfig
from staticadm.server.listener_watch import EXIT_LISTENER_FAILED
from staticadm.server.listeners import Listener, SharedListeningSocket
from staticadm.server.metrics import ProcessMetrics, ProcessSum, render
from staticadm.server.zygote import Zygote, ZygoteGone
from staticadm.source import ManifestSource, ReloadResult, ReloadStatus

#: What a worker process runs (its entry point imports this module and the daemon; this one imports neither).
WORKER_MODULE = "staticadm.server.worker_process"

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
#: How often the supervisor asks each worker for a sign of life (answered by the worker's event loop).
HEARTBEAT_INTERVAL = 1.0
#: A worker silent this long is killed and replaced: it is stopped (SIGSTOP), or its event loop is stuck.
#: kube-apiserver's default webhook timeout: a request waiting on that worker has failed by then anyway,
#: while no evaluation a policy can ask for holds the loop nearly as long (tests/reliability).
HEARTBEAT_TIMEOUT = 10.0
#: A new worker's first word may take this long (importing the engine on a loaded node).
START_TIMEOUT = 60.0
#: How long a scrape waits for the workers' reports; a worker that has not answered by then is counted
#: from its previous report.
SCRAPE_WAIT = 2.0
#: How long a worker waits for the supervisor's answer to a scrape.
SCRAPE_TIMEOUT = 5.0
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
    """Supervisor -> worker: whether the directories on disk are what is served (for /readyz?verbose)."""

    problem: str | None
    #: The same for --shadow-manifests.
    shadow_problem: str | None = None
    #: /readyz?verbose notes about check's findings, (note name, text) (staticadm.server.findings).
    findings: tuple[tuple[str, str], ...] = ()


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


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Supervisor -> worker: answer at once (:class:`HeartbeatAnswer`), to show the worker's loop turns."""

    sequence: int


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """Worker -> supervisor: the answer to a :class:`Heartbeat`."""

    sequence: int


@dataclass(frozen=True, slots=True)
class MetricsWanted:
    """Worker -> supervisor: a scrape of ``/metrics`` reached this worker; answer with :class:`MetricsText`."""

    request: int


@dataclass(frozen=True, slots=True)
class ReportMetrics:
    """Supervisor -> worker: send your series (:class:`MetricsReport`) for scrape round ``round``."""

    round: int


@dataclass(frozen=True, slots=True)
class MetricsReport:
    """Worker -> supervisor: the worker's series; round 0 is its last report, sent on its way out."""

    round: int
    metrics: ProcessMetrics


@dataclass(frozen=True, slots=True)
class MetricsText:
    """Supervisor -> worker: the exposition of every process's series, for the scrape ``request``."""

    request: int
    text: bytes


def resident_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``), or 0 where there is none to read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _write(writer: asyncio.StreamWriter, message: object) -> None:
    """Queues one message (written whole: messages from several tasks never interleave)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_HEADER.pack(len(data)) + data)


async def _send(writer: asyncio.StreamWriter, message: object) -> None:
    _write(writer, message)
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
    #: Other workers serve already (this one replaces a worker): accept connections only once the first
    #: snapshot is served.
    accept_after_first_load: bool = False

    def encode(self) -> str:
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    def with_descriptors(self, descriptors: list[int]) -> WorkerSpec:
        """This spec in a process that received its descriptors (the listeners', then the control channel's) as
        ``descriptors``."""
        numbers = iter(descriptors)
        return replace(self, listeners=tuple((next(numbers), kind, description)
                                             for _, kind, description in self.listeners), control_fd=next(numbers))

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
        #: Loads and NothingToServe, applied one after the other while other messages are answered.
        self._loads: asyncio.Queue[object] = asyncio.Queue()
        self._first: asyncio.Future[ReloadResult | None] | None = None
        #: Scrapes of this worker's /metrics waiting for the supervisor's sum, by request number.
        self._scrapes: dict[int, asyncio.Future[bytes]] = {}
        self._scrape_numbers = 0

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

    def _first_load(self) -> asyncio.Future[ReloadResult | None]:
        if self._first is None:
            self._first = asyncio.get_running_loop().create_future()
        return self._first

    async def first_load(self) -> ReloadResult | None:
        """The supervisor's first word, applied by :meth:`run`: a snapshot to serve, or None when its first
        load failed."""
        return await self._first_load()

    async def run(self, source: ManifestSource, *, on_result: Callable[[ReloadResult | None], None],
                  on_disk_state: Callable[[DiskState], None], on_shadow: Callable[[ShadowLoad], None],
                  metrics: Callable[[], ProcessMetrics]) -> None:
        """Answers the supervisor for the worker's whole life, from before its first load: heartbeats and
        metrics at once, snapshots in order (the first resolves :meth:`first_load`, later ones go to
        ``on_result``). The supervisor closing the channel means it is gone: the worker stops."""
        reader, writer = await self._connect()
        applying = asyncio.create_task(self._apply_loads(source, on_result))
        try:
            while True:
                try:
                    message = await _receive(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                if isinstance(message, Heartbeat):
                    _write(writer, HeartbeatAnswer(message.sequence))
                elif isinstance(message, ReportMetrics):
                    _write(writer, MetricsReport(message.round, metrics()))
                elif isinstance(message, MetricsText):
                    scrape = self._scrapes.pop(message.request, None)
                    if scrape is not None and not scrape.done():
                        scrape.set_result(message.text)
                elif isinstance(message, DiskState):
                    on_disk_state(message)
                elif isinstance(message, ShadowLoad):
                    on_shadow(message)
                elif isinstance(message, Load | NothingToServe):
                    self._loads.put_nowait(message)
                else:
                    raise TypeError(f"unexpected control message {type(message).__name__}")
                await writer.drain()
        finally:
            applying.cancel()

    async def _apply_loads(self, source: ManifestSource, on_result: Callable[[ReloadResult | None], None]) -> None:
        while True:
            result = await self._handle(source, await self._loads.get())
            first = self._first_load()
            if first.done():
                on_result(result)
            else:
                first.set_result(result)

    async def scrape(self, timeout: float = SCRAPE_TIMEOUT) -> bytes:
        """The exposition of every process's series, from the supervisor."""
        self._scrape_numbers += 1
        request = self._scrape_numbers
        answer = self._scrapes[request] = asyncio.get_running_loop().create_future()
        try:
            _, writer = await self._connect()
            await _send(writer, MetricsWanted(request))
            return await asyncio.wait_for(answer, timeout)
        finally:
            self._scrapes.pop(request, None)

    async def report_last(self, metrics: ProcessMetrics, timeout: float = 1.0) -> None:
        """Sends this worker's series one last time, on its way out, so that what it counted stays counted."""
        with contextlib.suppress(ConnectionError, RuntimeError, TimeoutError):
            _, writer = await self._connect()
            await asyncio.wait_for(_send(writer, MetricsReport(0, metrics)), timeout)

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


# -- the supervisor's side ------------------------------------------------------------------------


class WorkerProcess(Protocol):
    """A worker's process: a fresh interpreter (``asyncio.subprocess.Process``) or forked by the zygote."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int | None: ...

    def send_signal(self, signum: int) -> None: ...

    def kill(self) -> None: ...


@dataclass(slots=True, eq=False)
class _Worker:
    index: int
    process: WorkerProcess
    writer: asyncio.StreamWriter
    reader: asyncio.StreamReader
    started: float
    served_hash: str | None = None
    #: It has served a snapshot: connections it accepts get answers, not a wait for a load.
    has_served: bool = False
    restarts: int = 0
    #: Its request to be replaced for its memory, once made.
    recycling: Recycling | None = None
    wants_replacement: asyncio.Event = field(default_factory=asyncio.Event)
    #: When it last sent anything: its event loop was turning then.
    last_heard: float | None = None
    #: Killed for not answering its heartbeat (logged once).
    unresponsive: bool = False
    #: Reads everything it sends, from its start to its end.
    reading: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass(slots=True)
class WorkerPool:
    """The supervisor's workers: started, told what to serve, replaced when they die or stop answering,
    stopped; and the sum of their metrics."""

    count: int
    config: ServeConfig
    listeners: list[tuple[Listener, bool]]
    log: Any
    on_serving: Callable[[], None]
    on_restart: Callable[[], None]
    on_recycle: Callable[[], None] = lambda: None
    #: The supervisor's own series, part of every scrape's sum.
    own_metrics: Callable[[], ProcessMetrics] = tuple
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
    metrics: ProcessSum = field(default_factory=ProcessSum)
    #: Scrape rounds waiting for reports: round -> worker pid -> its report arrived.
    _rounds: dict[int, dict[int, asyncio.Future[None]]] = field(default_factory=dict)
    _round_numbers: int = 0
    _scrapes: set[asyncio.Task[None]] = field(default_factory=set)
    #: Forks workers from a copy of the supervisor that imported everything (None: fresh interpreters only).
    zygote: Zygote | None = None

    async def start(self) -> None:
        if self.zygote is not None:
            self.zygote.on_lost = self._zygote_lost
        for index in range(self.count):
            await self._spawn(index, restarts=0)

    async def _spawn(self, index: int, restarts: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = [listener.sock.fileno() for listener, _ in self.listeners]
        siblings_serve = any(worker.has_served and worker.process.returncode is None
                             for worker in (*self.workers.values(), *self.retiring))
        spec = WorkerSpec(index, self.config, tuple(
            (listener.sock.fileno(), "https" if tls else "unix", listener.description)
            for listener, tls in self.listeners), theirs.fileno(), accept_after_first_load=siblings_serve)
        env = {key: value for key, value in os.environ.items()
               if key not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS",
                              "LISTEN_FDNAMES")}
        process: WorkerProcess | None = None
        zygote = self.zygote
        if zygote is not None and not zygote.gone:
            try:
                process = await zygote.start(spec, env, [*fds, theirs.fileno()])
            except ZygoteGone as error:
                self.log.error("the zygote did not start a worker; starting a fresh interpreter (it imports the "
                               "daemon before it serves)", worker=index, reason=str(error))
        forked = process is not None
        if process is None:
            env[WORKER_ENVIRONMENT] = spec.encode()
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", WORKER_MODULE, pass_fds=[*fds, theirs.fileno()], env=env,
                stdin=asyncio.subprocess.DEVNULL)
        theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        worker = _Worker(index, process, writer, reader, time.monotonic(), restarts=restarts)
        worker.reading = asyncio.create_task(self._read(worker), name=f"worker-{index}-channel")
        self.workers[index] = worker
        self.log.info("worker started", worker=index, pid=process.pid, forked=forked)
        if self.latest is not None:
            self._tell(worker, self.latest)
        if self.disk_state is not None:
            self._tell(worker, self.disk_state)
        if self.shadow is not None:
            self._tell(worker, self.shadow)

    def _zygote_lost(self, why: str) -> None:
        self.log.error("the zygote is gone; workers are started as fresh interpreters from now on (each imports the "
                       "daemon before it serves)", pid=self.zygote.pid if self.zygote else None, reason=why)

    @staticmethod
    def _tell(worker: _Worker, message: object) -> None:
        """Queues ``message`` for ``worker`` without waiting for it to read: a stopped worker must not hold
        up the others (its messages wait in memory until it reads them or is replaced)."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            _write(worker.writer, message)

    async def broadcast(self, message: object) -> None:
        if isinstance(message, DiskState | ShadowLoad):
            if isinstance(message, DiskState):
                self.disk_state = message
            else:
                self.shadow = message
            for worker in list(self.workers.values()):
                self._tell(worker, message)
            return
        self.latest = message
        for worker in list(self.workers.values()):
            worker.served_hash = None
            self._tell(worker, message)

    def serving(self) -> dict[int, str | None]:
        return {index: worker.served_hash for index, worker in self.workers.items()}

    async def _read(self, worker: _Worker) -> None:
        """Everything ``worker`` says, until its end of the channel closes."""
        while True:
            try:
                message = await _receive(worker.reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            worker.last_heard = time.monotonic()
            if isinstance(message, Serving):
                worker.served_hash = message.content_hash
                worker.has_served = worker.has_served or bool(message.content_hash)
                self.on_serving()
            elif isinstance(message, Recycling):
                worker.recycling = message
                worker.wants_replacement.set()
            elif isinstance(message, MetricsReport):
                self.metrics.report(worker.pid, message.metrics)
                arrived = self._rounds.get(message.round, {}).get(worker.pid)
                if arrived is not None and not arrived.done():
                    arrived.set_result(None)
            elif isinstance(message, MetricsWanted):
                scrape = asyncio.create_task(self._scrape(worker, message.request))
                self._scrapes.add(scrape)
                scrape.add_done_callback(self._scrapes.discard)

    async def _scrape(self, asker: _Worker, request: int) -> None:
        """Answers a scrape that reached ``asker`` with :meth:`collect`'s sum."""
        self._tell(asker, MetricsText(request, await self.collect()))

    async def collect(self) -> bytes:
        """The exposition of every process's series: every worker reports (those that do not within
        ``SCRAPE_WAIT`` count with their previous report), summed with the supervisor's own (a scrape that
        reached a worker, or the supervisor's metrics listener)."""
        self._round_numbers += 1
        number = self._round_numbers
        everyone = [worker for worker in (*self.workers.values(), *self.retiring)
                    if worker.process.returncode is None]
        loop = asyncio.get_running_loop()
        arrivals = self._rounds[number] = {worker.pid: loop.create_future() for worker in everyone}
        try:
            for worker in everyone:
                self._tell(worker, ReportMetrics(number))
            if arrivals:
                await asyncio.wait(arrivals.values(), timeout=SCRAPE_WAIT)
        finally:
            del self._rounds[number]
        return render(self.metrics.total(os.getpid(), self.own_metrics()))

    async def _ended(self, worker: _Worker) -> None:
        """After ``worker`` exited: its last words are read (its last metrics report among them), then what
        it counted joins the total of gone workers."""
        if worker.reading is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(worker.reading), timeout=1.0)
            worker.reading.cancel()
        worker.writer.close()
        self.metrics.departed(worker.pid)

    async def heartbeat(self, interval: float = HEARTBEAT_INTERVAL, timeout: float = HEARTBEAT_TIMEOUT) -> None:
        """Asks every worker for a sign of life each ``interval``; kills one silent for ``timeout`` (``START_TIMEOUT``
        before its first word), which :meth:`watch` then replaces. A stopped process cannot answer, and neither
        can one whose event loop is stuck: requests on its connections would wait for ever, while the kernel
        keeps its share of new connections away from the live workers only while it accepts none."""
        sequence = 0
        previous = judged_from = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now - previous > interval + 1.0:
                # This loop was held up itself: answers may be waiting unread, so silence counts from now.
                judged_from = now
            previous = now
            for worker in list(self.workers.values()):
                heard = worker.last_heard
                silent = now - max(worker.started if heard is None else heard, judged_from)
                if worker.unresponsive or worker.process.returncode is not None or \
                        silent <= (START_TIMEOUT if heard is None else timeout):
                    continue
                worker.unresponsive = True
                self.log.error("worker stopped answering; killing it to replace it", worker=worker.index,
                               pid=worker.pid, silent_seconds=round(silent, 1))
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
            sequence += 1
            for worker in list(self.workers.values()):
                self._tell(worker, Heartbeat(sequence))
            await asyncio.sleep(interval)

    async def watch(self, index: int) -> None:
        """Replaces the worker in slot ``index`` when it dies or asks to be replaced, until the pool stops."""
        while True:
            worker = self.workers[index]
            exited = asyncio.ensure_future(worker.process.wait())
            replace = asyncio.ensure_future(worker.wants_replacement.wait())
            await asyncio.wait([exited, replace], return_when=asyncio.FIRST_COMPLETED)
            replace.cancel()
            if not exited.done():
                exited.cancel()
                if self.stopping:
                    return
                recycling = worker.recycling
                assert recycling is not None
                self.log.info("replacing a worker that grew past its memory allowance", worker=index,
                              pid=worker.pid, resident_mib=recycling.resident_bytes >> 20,
                              growth_mib=recycling.growth_bytes >> 20)
                self.on_recycle()
                self.retiring.add(worker)
                await self._spawn(index, restarts=0)
                retirement = asyncio.create_task(self._retire(worker, self.workers[index]))
                self._retirements.add(retirement)
                retirement.add_done_callback(self._retirements.discard)
                continue
            code = exited.result()
            await self._ended(worker)
            if self.stopping:
                return
            if code is None:
                how = "exit status unknown (its zygote had exited: the worker was no longer its child)"
            else:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
            if code == EXIT_LISTENER_FAILED:
                # Its own descriptor of a listener died (the shared socket itself: the supervisor exits too).
                how += " (a listener stopped listening, see its log)"
            lived = time.monotonic() - worker.started
            restarts = 0 if lived > HEALTHY_AFTER else worker.restarts + 1
            delay = 0.0 if restarts == 0 else min(0.5 * 2 ** (restarts - 1), MAX_RESTART_DELAY)
            self.log.error("worker died; replacing it", worker=index, pid=worker.pid, how=how,
                           lived_seconds=round(lived, 1), restart_in_seconds=delay)
            self.on_restart()
            await asyncio.sleep(delay)
            if self.stopping:
                return
            await self._spawn(index, restarts)

    async def _retire(self, old: _Worker, replacement: _Worker) -> None:
        """Retires ``old`` once ``replacement`` serves, or after ``RETIRE_WAIT`` seconds if it never does (the
        old one must not grow without bound meanwhile): SIGUSR1 makes it stop accepting, answer every request
        on its open connections, close them and exit, refusing nothing (SIGTERM would answer 503 meanwhile).
        One that has not exited when its requests' time is up (stopped, or stuck) is killed."""
        deadline = time.monotonic() + RETIRE_WAIT
        while replacement.served_hash is None and time.monotonic() < deadline and not self.stopping:
            await asyncio.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            old.process.send_signal(signal.SIGTERM if self.stopping else signal.SIGUSR1)
        bound = self.config.shutdown_grace + self.config.header_timeout + STOP_MARGIN
        try:
            code = await asyncio.wait_for(asyncio.shield(old.process.wait()), bound)
        except TimeoutError:
            self.log.error("replaced worker did not stop in time; killing it", pid=old.pid,
                           waited_seconds=round(bound, 1))
            with contextlib.suppress(ProcessLookupError):
                old.process.kill()
            code = await old.process.wait()
        await self._ended(old)
        self.retiring.discard(old)
        self.log.info("replaced worker stopped", pid=old.pid, exit_code=code)

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


def load_message(result: ReloadResult) -> Load | None:
    """What the workers must serve after one of the supervisor's reloads (None: nothing changes)."""
    served = result.served
    if result.status is not ReloadStatus.SUCCESS or served is None or served.contents is None:
        return None
    return Load(result.reason, served.contents)
