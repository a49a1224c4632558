"""Workers of ``serve --workers N`` forked from a copy of the supervisor made before it runs: the zygote.

A worker started as a fresh interpreter spends about a second of CPU importing the CEL engine, aiohttp and the
daemon before it can serve (``python -m bench.startup``), and a node is one worker short meanwhile each time a
worker dies, is killed for not answering or is replaced for its memory. The supervisor has imported all of that
itself; once its event loop runs it also has threads (the directory's watch, the build and analysis executors, the
log writer), and forking a process with threads copies locks another thread may hold. So, before any thread or
event loop exists, the supervisor forks one process that does nothing but fork workers when asked: each worker is
a copy of an interpreter that has imported everything and run nothing, ready in milliseconds.

Not ``multiprocessing``'s forkserver: that is a fresh interpreter which imports the daemon again (the cost this
avoids), and it listens on a socket in a temporary directory, while a worker must start on a full or read-only
file system.

The channel is a ``SOCK_SEQPACKET`` socket pair (one message per datagram, descriptors alongside):

- supervisor -> zygote: the pickled ``(spec, environment)`` of a worker; the worker's listeners and control socket
  travel as ``SCM_RIGHTS`` and replace the descriptor numbers in its spec;
- zygote -> supervisor: ``("started", pid)`` with a pidfd of the worker, or ``("failed", reason)``; and
  ``("exited", pid, returncode)`` once the zygote, its parent, has reaped it.

The supervisor signals a worker through its pidfd (never a pid the kernel may have reused). The zygote lives as
long as the channel: when the supervisor exits it reads end-of-file and exits, and its workers see their own
control channels close, as they do when a supervisor dies. If the zygote is gone (killed), the supervisor starts
fresh interpreters again, as it does where no zygote could be made.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import dataclasses
import os
import pickle
import select
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn, Protocol, Self, TypeVar

from setproctitle import getproctitle, setproctitle


class ForkableSpec(Protocol):
    """What the zygote needs of a worker's spec (``workers.WorkerSpec``): the same spec in the process that received
    its descriptors."""

    def with_descriptors(self, descriptors: list[int]) -> Self: ...


Spec = TypeVar("Spec", bound=ForkableSpec)

# The library finds the argv area it rewrites by walking back from the environment's first string: set up now, while
# the environment is the one the process started with, not once it has been replaced (as a forked worker's is).
getproctitle()

#: Largest request or reply (a pickled spec is a few kilobytes).
MESSAGE_BYTES = 1 << 20
#: How long the zygote has to answer a request: a fork takes milliseconds; one that does not answer is stopped or
#: stuck, and is replaced by fresh interpreters.
REPLY_SECONDS = 5.0
#: How long the supervisor's exit waits for the zygote to end on its own (it takes milliseconds; a loaded node
#: may not run it at once): only a stopped zygote waits it out.
CLOSE_SECONDS = 5.0
#: Most descriptors one worker is given (its listeners and its control socket).
MAX_DESCRIPTORS = 64
#: Signals an operator sends a process group (Ctrl-C, systemd's stop, reload, recycle): the zygote outlives none
#: of its supervisor's decisions by its own, so it ignores them; a worker gets the dispositions back.
_GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


class ZygoteGone(Exception):
    """The zygote did not start a worker (it is gone, or could not fork): start a fresh interpreter instead."""


@dataclasses.dataclass(eq=False)
class ForkedWorker:
    """A worker the zygote forked, with the part of ``asyncio.subprocess.Process``'s interface the pool uses."""

    pid: int
    _pidfd: int
    _exited: asyncio.Future[int | None]
    #: Set once its pidfd showed it has ended: the zygote must report its status before this fires.
    _report_due: asyncio.TimerHandle | None = None

    @property
    def returncode(self) -> int | None:
        """As Popen's: the exit code, or minus the signal that ended it; None while it runs (and when its exit
        status was lost with the zygote)."""
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int | None:
        return await asyncio.shield(self._exited)

    def send_signal(self, signum: int) -> None:
        if self._pidfd < 0:
            raise ProcessLookupError(f"worker {self.pid} has exited")
        signal.pidfd_send_signal(self._pidfd, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, code: int | None) -> None:
        if self._report_due is not None:
            self._report_due.cancel()
        if self._pidfd >= 0:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if not self._exited.done():
            self._exited.set_result(code)

    def _ended_orphaned(self) -> None:
        """Its end, once the zygote is gone: its status is read where it became our child (a supervisor that is
        PID 1, as in the container image, inherits the zygote's orphans), and is unknown elsewhere."""
        code = None
        with contextlib.suppress(ChildProcessError):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
        self._ended(code)


class Zygote:
    """The supervisor's end of the channel."""

    def __init__(self, pid: int, pidfd: int, channel: socket.socket) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._channel = channel
        self._replies: collections.deque[asyncio.Future[ForkedWorker]] = collections.deque()
        self._workers: dict[int, ForkedWorker] = {}
        self._reading = False
        self.gone = False
        #: Workers that had ended, unreaped, when the zygote was given up.
        self._ended_unreaped: list[ForkedWorker] = []
        #: Told why, once, when the zygote is found gone (not when closed).
        self.on_lost: Callable[[str], None] = lambda _why: None

    async def start(self, spec: ForkableSpec, environment: dict[str, str], descriptors: list[int]) -> ForkedWorker:
        """Forks a worker for ``spec`` (whose descriptor numbers are ``descriptors``' in this process)."""
        if self.gone:
            raise ZygoteGone("the zygote has exited")
        loop = asyncio.get_running_loop()
        if not self._reading:
            loop.add_reader(self._channel.fileno(), self._read)
            self._reading = True
        reply: asyncio.Future[ForkedWorker] = loop.create_future()
        try:
            socket.send_fds(self._channel, [pickle.dumps((spec, environment))], descriptors)
        except OSError as error:
            self._lost(f"writing to it failed: {error}")
            raise ZygoteGone(f"the zygote cannot be reached: {error}") from None
        self._replies.append(reply)
        try:
            async with asyncio.timeout(REPLY_SECONDS):
                return await reply
        except TimeoutError:
            # Stopped (SIGSTOP), or stuck: the slot it was to fill must not stay empty.
            self._give_up(f"it did not answer within {REPLY_SECONDS:g} s; killed")
            raise ZygoteGone(f"the zygote did not answer within {REPLY_SECONDS:g} s") from None

    def _read(self) -> None:
        while True:
            try:
                data, descriptors, _, _ = socket.recv_fds(self._channel, MESSAGE_BYTES, MAX_DESCRIPTORS)
            except BlockingIOError:
                return
            except OSError as error:
                self._lost(f"reading from it failed: {error}")
                return
            if not data:
                self._lost("it exited")
                return
            message = pickle.loads(data)
            if message[0] == "exited":
                _, pid, code = message
                worker = self._workers.pop(pid, None)
                if worker is not None:
                    worker._ended(code)
                continue
            reply = self._replies.popleft()
            if message[0] == "started" and len(descriptors) == 1:
                loop = asyncio.get_running_loop()
                # Known before this loop reads on: its "exited" may be the very next message.
                worker = self._workers[message[1]] = ForkedWorker(message[1], descriptors[0], loop.create_future())
                loop.add_reader(worker._pidfd, self._worker_ended, worker)
                if not reply.done():
                    reply.set_result(worker)
            else:
                for descriptor in descriptors:
                    os.close(descriptor)
                reply.set_exception(ZygoteGone(f"the zygote could not fork a worker: {message[1]}"))

    def _lost(self, why: str) -> None:
        """The zygote is gone: nothing more comes from it. Workers it started keep serving; no longer its children,
        each one's end is read from its pidfd (``ForkedWorker._ended_orphaned``)."""
        if self.gone:
            return
        self.gone = True
        self.on_lost(why)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(self._channel.fileno())
        self._channel.close()
        while self._replies:
            reply = self._replies.popleft()
            if not reply.done():
                reply.set_exception(ZygoteGone(f"the zygote is gone: {why}"))
        for worker in self._workers.values():
            if worker._report_due is not None:
                # Ended already, unreaped: done with once the zygote is (its orphans are someone else's by then).
                worker._report_due.cancel()
                self._ended_unreaped.append(worker)
            else:
                loop.add_reader(worker._pidfd, worker._ended_orphaned)
        self._workers.clear()
        loop.add_reader(self._pidfd, self._reap)

    def _worker_ended(self, worker: ForkedWorker) -> None:
        """``worker``'s pidfd says it has ended: its parent, the zygote, reaps it and reports its status at once. A
        zygote that does not within ``REPLY_SECONDS`` is stopped or stuck, and is given up (with that status)."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(worker._pidfd)
        worker._report_due = loop.call_later(REPLY_SECONDS, self._unreported, worker)

    def _unreported(self, worker: ForkedWorker) -> None:
        self._give_up(f"it did not report the exit of worker {worker.pid} within {REPLY_SECONDS:g} s; killed")

    def _give_up(self, why: str) -> None:
        if self.gone:
            return
        self._lost(why)
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _reap(self) -> None:
        """The zygote has exited: its status is collected (it is our child), so no zombie is left behind; so are
        those of the workers that ended before it without being reaped, where they became ours."""
        asyncio.get_running_loop().remove_reader(self._pidfd)
        os.close(self._pidfd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        for worker in self._ended_unreaped:
            worker._ended_orphaned()
        self._ended_unreaped.clear()

    def close(self) -> None:
        """Ends the zygote (it reads end-of-file and exits at once); workers are not affected."""
        if self.gone:
            return
        self.gone = True
        for worker in self._workers.values():
            worker._ended(None)
        self._workers.clear()
        if self._reading:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self._channel.fileno())
        self._channel.close()
        # It exits on reading end-of-file, in milliseconds (its exit handlers run: a process of the supervisor's
        # code); one that has not within CLOSE_SECONDS (stopped) is killed, so that the wait below is brief.
        ended, _, _ = select.select([self._pidfd], [], [], CLOSE_SECONDS)
        if not ended:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        os.close(self._pidfd)


def fork_zygote(serve_worker: Callable[[Spec], int]) -> Zygote | str:
    """Forks the zygote from this process, which must have no other thread yet; or says why it did not. Each worker
    it forks runs ``serve_worker``."""
    if threading.active_count() != 1:
        return "the process already runs other threads"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError) as error:
        return f"pidfds are not available ({error})"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid = os.fork()
    except OSError as error:
        ours.close()
        theirs.close()
        return f"fork failed: {error}"
    if pid == 0:  # pragma: no cover - the zygote's own process; its effect is tested from outside
        ours.close()
        code = 1
        try:
            # Listeners systemd passed (socket activation) among them: the zygote holds nothing of the daemon's.
            _close_all_but({0, 1, 2, theirs.fileno()})
            code = _serve(theirs, serve_worker)
        except BaseException:  # nothing may unwind into the supervisor's code in this copy
            traceback.print_exc()
        finally:
            _exit(code)
    theirs.close()
    ours.setblocking(False)
    return Zygote(pid, os.pidfd_open(pid), ours)


def _serve(channel: socket.socket, serve_worker: Callable[[Spec], int]) -> int:
    """The zygote: forks a worker for each request until the channel closes."""
    try:
        return _fork_on_request(channel, serve_worker)
    except ConnectionError:
        return 0  # the supervisor is gone while a reply was on its way: as end-of-file


def _fork_on_request(channel: socket.socket, serve_worker: Callable[[Spec], int]) -> int:
    setproctitle(f"staticadm serve: zygote of {os.getppid()} (forks its workers)")
    dispositions = {signum: signal.getsignal(signum) for signum in _GROUP_SIGNALS}
    for signum in _GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        for key, _ in selector.select():
            if key.fileobj is channel:
                data, descriptors, _, _ = socket.recv_fds(channel, MESSAGE_BYTES, MAX_DESCRIPTORS)
                if not data:
                    return 0
                try:
                    pid = os.fork()
                except OSError as error:
                    for descriptor in descriptors:
                        os.close(descriptor)
                    channel.send(pickle.dumps(("failed", str(error))))
                    continue
                if pid == 0:
                    selector.close()
                    channel.close()
                    _close_all_but({1, 2, *descriptors})
                    if 0 not in descriptors:
                        # As the supervisor's fresh interpreters were started: nothing to read.
                        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                    for signum, disposition in dispositions.items():
                        signal.signal(signum, disposition)
                    _exit(_run_worker(data, descriptors, serve_worker))
                for descriptor in descriptors:
                    os.close(descriptor)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = pid
                selector.register(pidfd, selectors.EVENT_READ)
                socket.send_fds(channel, [pickle.dumps(("started", pid))], [pidfd])
            else:
                pidfd = key.fd
                selector.unregister(pidfd)
                os.close(pidfd)
                pid = children.pop(pidfd)
                _, status = os.waitpid(pid, 0)
                channel.send(pickle.dumps(("exited", pid, os.waitstatus_to_exitcode(status))))


def _run_worker(request: bytes, descriptors: list[int], serve_worker: Callable[[Spec], int]) -> int:
    """A worker's process: the spec's descriptors are the ones received, in the order sent."""
    spec: Spec
    spec, environment = pickle.loads(request)
    spec = spec.with_descriptors(descriptors)
    os.environ.clear()
    os.environ.update(environment)
    try:
        return serve_worker(spec)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # reported as an interpreter would, then the process ends
        traceback.print_exc()
        return 1


def _close_all_but(kept: set[int]) -> None:
    """Closes every other descriptor, as ``close_fds`` does for a new program: a worker holds only what it is
    given (a copy of a listener the supervisor has closed would keep it open)."""
    start = 0
    for descriptor in sorted(kept):
        # Never an empty range: CPython closes [low, high - 1] with close_range(2), which reads a high of -1 as
        # the largest descriptor there is.
        if start < descriptor:
            os.closerange(start, descriptor)
        start = descriptor + 1
    os.closerange(start, max(os.sysconf("SC_OPEN_MAX"), start + 1))


def _exit(code: int) -> NoReturn:
    """Ends a forked process as an interpreter ends: exit handlers, then the streams, without unwinding into
    the code it was forked from."""
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)
