"""Connections: bounded in number and in time, so no client can hold the listeners.

aiohttp reads headers for as long as a client takes, keeps idle connections for an hour and accepts as
many as the process has descriptors; a local user (the TCP port needs no credentials) could then stop
both listeners with a thousand idle connections. Here:

- a connection must finish its request headers within ``header_timeout`` of connecting or of its previous
  answer; an idle keep-alive connection is closed after ``idle_timeout``;
- at most ``max_connections`` are open, counted from accept, TLS handshakes in progress included: a new one
  over the cap closes the oldest connection still in its handshake, one whose ClientHello has not arrived whole
  first (a client that stalls there loses its place to the newcomer, so stalled handshakes can never hold the
  listener, and a client whose handshake is under way is not the one closed while any such staller is left),
  else the longest-idle connection, or is closed itself when every connection is busy with a request;
- the soft ``RLIMIT_NOFILE`` is raised to the hard limit at start, and the cap stays below it;
- accept errors (EMFILE and the like) are logged once per interval with a count, not once per attempt
  with a traceback;
- memory freed by closed TLS connections, finished or not, is handed back to the system (``malloc_trim``) after
  a burst;
- stopping, idle connections are closed at once and every request that has arrived is answered first; a
  worker that retires also answers the first request of every connection it has accepted, handshakes
  still running included (:meth:`ConnectionGuard.drain`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import fcntl
import resource
import sys
import termios
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from staticadm.server.fast_http import DirectReply, response_bytes
from staticadm.server.tls_front import Refusal, tls_front_factory

#: The listen backlog; asyncio accepts up to this many connections at once per listener before the
#: guard sees any of them.
ACCEPT_BACKLOG = 128
#: Descriptors kept for everything but connections (listeners, files, the manifest directory watch) and
#: for the accept bursts of two listeners: asyncio may accept a burst on the next readiness event before
#: the previous burst's connections reach the guard, so three bursts each.
RESERVED_DESCRIPTORS = 64 + 2 * 3 * ACCEPT_BACKLOG
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 90.0
SWEEP_INTERVAL = 1.0
#: Closed connections after which freed memory is returned to the system.
TRIM_AFTER_CLOSED = 256
ACCEPT_ERROR_LOG_INTERVAL = 10.0


def raise_open_file_limit() -> tuple[int, int]:
    """Raises the soft RLIMIT_NOFILE to the hard limit; returns (soft, hard) as they are now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def connection_cap(configured: int, soft_limit: int) -> int:
    """The connection cap: what was asked, but always below the descriptors the process may open."""
    return max(1, min(configured, soft_limit - RESERVED_DESCRIPTORS))


@dataclass
class ConnectionStats:
    opened: int = 0
    shed: int = 0
    timed_out: int = 0


@dataclass
class ConnectionGuard:
    """Tracks every connection of the listeners and enforces the limits above."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    on_event: Callable[[str], None] = lambda _kind: None
    connections: dict[GuardedRequestHandler, None] = field(default_factory=dict)
    stats: ConnectionStats = field(default_factory=ConnectionStats)
    #: The process is retiring: every answer says ``Connection: close``, so clients reconnect elsewhere.
    draining: bool = False
    #: Takes an admission request that arrived whole in one read and answers it later through the callback it is
    #: given, or returns False to leave it to aiohttp (``app.fast_reviews``).
    fast_answer: Callable[[bytes, DirectReply], bool] | None = None
    #: Accepted connections whose TLS handshake has not finished, oldest first (``tls_front`` tells of their
    #: accept, their handshake's end (``opened``) and their loss (``handshake_abandoned``)).
    _handshaking: dict[GuardedRequestHandler, None] = field(default_factory=dict)
    _closed_since_trim: int = 0
    _trim: Callable[[int], int] | None = None

    def __post_init__(self) -> None:
        self._trim = _malloc_trim()

    # -- called by the connections ----------------------------------------------------------------

    def handshake_began(self, connection: GuardedRequestHandler) -> bool:
        """A TLS connection was accepted: it counts against the cap from now; False when it must be closed at
        once (everything busy)."""
        if not self._make_room():
            self.on_event("rejected")
            return False
        self._handshaking[connection] = None
        return True

    def handshake_abandoned(self, connection: GuardedRequestHandler) -> None:
        """A connection was lost before its handshake completed (refused, timed out, closed by its client)."""
        if self._handshaking.pop(connection, ...) is not ...:
            self._closed_since_trim += 1

    def opened(self, connection: GuardedRequestHandler) -> bool:
        """Registers a new connection (a TLS one once its handshake is done); False when it must be closed at
        once (everything busy)."""
        self.stats.opened += 1
        admitted_at_accept = self._handshaking.pop(connection, ...) is not ...
        if not admitted_at_accept and not self._make_room():
            self.on_event("rejected")
            return False
        self.connections[connection] = None
        return True

    def closed(self, connection: GuardedRequestHandler) -> None:
        if self.connections.pop(connection, ...) is not ...:
            self._closed_since_trim += 1

    def _make_room(self) -> bool:
        """Below the cap, or brought below it by closing the oldest handshake, else the longest-idle connection;
        False when every connection is busy with a request. What is closed is forgotten now, not when its
        connection_lost runs: a burst of accepts must each close another."""
        if len(self.connections) + len(self._handshaking) < self.max_connections:
            return True
        if self._handshaking:
            oldest_handshake = next((c for c in self._handshaking if not c.handshake_under_way),
                                    next(iter(self._handshaking)))
            self.handshake_abandoned(oldest_handshake)
            victim = oldest_handshake
        else:
            idle = [c for c in self.connections if not c.busy]
            if not idle:
                return False
            victim = min(idle, key=lambda c: c.idle_since)
            self.closed(victim)
        self.stats.shed += 1
        self.on_event("shed")
        victim.close_now()
        return True

    # -- stopping ---------------------------------------------------------------------------------

    def _waiting_for(self, now: float, first_requests: bool) -> int:
        """Connections :meth:`drain` still waits for: any open one, and with ``first_requests`` the TLS
        handshakes still running within their timeout (a connection accepted before the listeners closed is
        this worker's to answer)."""
        handshaking = sum(1 for c in self._handshaking if now - c.accepted_at <= self.header_timeout)
        return len(self.connections) + (handshaking if first_requests else 0)

    async def drain(self, timeout: float, *, first_requests: bool, interval: float = 0.01) -> int:
        """Closes every connection as soon as it is idle, as Go's ``Server.Shutdown`` does: answered, with
        nothing of a next request received, not even in the kernel's buffer. A request that has arrived is
        answered first, and every answer now closes its connection (``draining``). With ``first_requests``
        (a retiring worker, whose clients cannot know it is leaving) a connection that has not sent its first
        request yet gets its header timeout for it; otherwise (shutting down) it is closed too. Called once
        the listeners are closed; returns how many connections are left when ``timeout`` passes (0: none)."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while True:
            for connection in list(self.connections):
                if connection.idle(fresh_too=not first_requests) or connection.answered_and_closing():
                    self.closed(connection)
                    connection.close_now()
            now = time.monotonic()
            left = self._waiting_for(now, first_requests)
            if not left or now >= deadline:
                return left
            await asyncio.sleep(interval)

    # -- the sweeper ------------------------------------------------------------------------------

    def sweep(self, now: float | None = None) -> int:
        """Closes connections past their header or idle timeout; returns how many."""
        now = time.monotonic() if now is None else now
        expired = [c for c in self.connections if c.expired(now, self.header_timeout, self.idle_timeout)]
        for connection in expired:
            self.stats.timed_out += 1
            self.on_event("timeout")
            self.closed(connection)
            connection.close_now()
        # The handshake's own timer closes a stalled handshake at header_timeout; this is the backstop.
        stalled = [c for c in self._handshaking if now - c.accepted_at > self.header_timeout + SWEEP_INTERVAL]
        for connection in stalled:
            self.stats.timed_out += 1
            self.on_event("timeout")
            self.handshake_abandoned(connection)
            connection.close_now()
        if self._closed_since_trim >= TRIM_AFTER_CLOSED and self._trim is not None:
            # TLS connections leave their buffers in malloc's free lists: give them back after a burst.
            self._closed_since_trim = 0
            self._trim(0)
        return len(expired)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            self.sweep()


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection handler, reporting to a :class:`ConnectionGuard`."""

    def __init__(self, manager: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.accepted_at = time.monotonic()
        #: A request is being handled (from its first byte to the end of its answer).
        self.busy = False
        #: When the connection last became idle (connected, or answered a request).
        self.idle_since = time.monotonic()
        #: When bytes of the next request started arriving, if they have.
        self.header_started: float | None = None
        #: The connection's transport while its TLS handshake runs (``transport`` is set once it is done).
        self._accepted_transport: asyncio.Transport | None = None
        #: OpenSSL has answered the client's whole ClientHello (``tls_front.HandshakeWatcher``).
        self.handshake_under_way = False
        #: Requests answered in ``data_received`` (``app.fast_reviews``); aiohttp's own count does not see them.
        self.answered_directly = 0
        #: Once a read went to aiohttp, every later one does: its parser may hold part of a request.
        self._reads_to_aiohttp = False
        #: While a request taken by ``fast_answer`` waits for its answer: the reads that arrived meanwhile, handled
        #: once it is written, so answers go out in the order their requests came.
        self._reads_held: list[bytes] | None = None

    def handshake_began(self, transport: asyncio.Transport) -> bool:
        self.accepted_at = time.monotonic()
        self._accepted_transport = transport
        return self.guard.handshake_began(self)

    def handshake_abandoned(self) -> None:
        self._accepted_transport = None
        self.guard.handshake_abandoned(self)

    def handshake_answered(self) -> None:
        self.handshake_under_way = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._accepted_transport = None
        super().connection_made(transport)
        self.idle_since = time.monotonic()
        if not self.guard.opened(self):
            self.close_now()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        held = self._reads_held
        if held is not None:
            # A client that pipelines: nothing more is read until the answer before is written.
            held.append(data)
            if len(held) == 1 and self.transport is not None:
                self.transport.pause_reading()
            return
        if not self._reads_to_aiohttp:
            fast = self.guard.fast_answer
            # Not while writing is paused (the transport holds more than its high-water mark of unsent answers):
            # a client that does not read its answers is aiohttp's, whose handler waits for them to drain.
            if (fast is not None and self.transport is not None and not self.busy and not self.guard.draining
                    and not getattr(self, "_messages", None) and not self.writing_paused):
                self.request_started()
                try:
                    taken = fast(data, self._answer_directly)
                except Exception:  # a bug of the direct path: aiohttp's handler answers the request instead
                    taken = False
                if taken:
                    self._reads_held = []
                    return
                self.busy = False
            self._reads_to_aiohttp = True
        if not self.busy and self.header_started is None:
            self.header_started = time.monotonic()
        super().data_received(data)

    def _answer_directly(self, status: int, reason: str, body: bytes) -> None:
        """The answer to the request ``fast_answer`` took; then the reads held meanwhile, in order."""
        held, self._reads_held = self._reads_held, None
        self.answered_directly += 1
        self.request_finished()
        transport = self.transport
        if transport is None or transport.is_closing():  # the client went away meanwhile
            return
        # Decided when written: a process that began retiring meanwhile still tells its client to go elsewhere.
        draining = self.guard.draining
        transport.write(response_bytes(status, reason, body, close=draining))
        if draining:
            transport.close()
            return
        if held:
            transport.resume_reading()
            for data in held:
                self.data_received(data)

    @property
    def answered_none(self) -> bool:
        """No request of this connection has been answered yet, by aiohttp or directly."""
        return self._request_count == 0 and self.answered_directly == 0

    def request_started(self) -> None:
        self.busy = True
        self.header_started = None

    def request_finished(self) -> None:
        self.busy = False
        self.idle_since = time.monotonic()

    def idle(self, *, fresh_too: bool = False) -> bool:
        """Waiting for a next request of which nothing has arrived (with ``fresh_too``, or for a first one):
        its last answer was written whole (aiohttp's handler waits for a message), no request is queued or
        half received, and the kernel holds no unread byte of one. Bytes still on their way can always
        meet a close; Go's server has the same window, this one is as narrow as it gets."""
        waiter = getattr(self, "_waiter", None)
        if (not fresh_too and self.answered_none) or self.busy or self.header_started is not None \
                or waiter is None or waiter.done() or getattr(self, "_messages", None):
            return False
        return _unread_bytes(self.transport) == 0

    def answered_and_closing(self) -> bool:
        """Its last answer closed it (one written while draining says ``Connection: close``) and left the TLS layer
        (an answer is far smaller than a socket's send buffer, so it is with the kernel, which delivers it after the
        process exits): only the TLS close is left, which a client that keeps the socket may never complete."""
        transport = self.transport
        return (not self.busy and transport is not None and transport.is_closing()
                and transport.get_write_buffer_size() == 0)

    def expired(self, now: float, header_timeout: float, idle_timeout: float) -> bool:
        if self.busy:
            return False
        if self.header_started is not None:
            return now - self.header_started > header_timeout
        # A new connection must send its first request promptly; a kept-alive one may wait longer.
        limit = header_timeout if self.answered_none else idle_timeout
        return now - self.idle_since > limit

    def close_now(self) -> None:
        transport = self.transport or self._accepted_transport
        if transport is not None:
            transport.close()


class GuardedServer(web.Server):
    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def __call__(self) -> RequestHandler:
        try:
            return GuardedRequestHandler(self, self.guard, loop=self._loop, **self._kwargs)
        except TypeError:  # aiohttp moved an argument: fall back to its own handler, unguarded
            return super().__call__()


class GuardedAppRunner(web.AppRunner):
    """An AppRunner whose connections report to ``guard``."""

    def __init__(self, app: web.Application, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.guard = guard

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        guarded = GuardedServer(server.request_handler, request_factory=server.request_factory,
                                handler_cancellation=getattr(server, "_handler_cancellation", False),
                                loop=server._loop, guard=self.guard, **server._kwargs)
        return guarded


def request_began(request: web.Request) -> GuardedRequestHandler | None:
    """The guarded connection ``request`` came on, marked busy until ``request_ended``; None for another kind of
    connection (aiohttp's own handler, when it moved an argument: ``GuardedServer``)."""
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler):
        protocol.request_started()
        return protocol
    return None


def request_ended(connection: GuardedRequestHandler | None, response: web.StreamResponse | None) -> None:
    """``request_began``'s connection is idle again; a ``response`` written while the guard drains closes it."""
    if connection is None:
        return
    if response is not None and connection.guard.draining:
        response.force_close()
    connection.request_finished()


def tracked(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
            ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``handler``, marking the connection busy while one of its requests is handled. A wrapper of each route
    rather than an aiohttp middleware: an application with middlewares runs each request through aiohttp's
    chain of them plus one of its own (``_fix_request_current_app``), ~3 µs a request the null server does not pay."""
    async def handle(request: web.Request) -> web.StreamResponse:
        connection = request_began(request)
        response = None
        try:
            response = await handler(request)
            return response
        finally:
            request_ended(connection, response)

    return handle


class AcceptErrorLimiter:
    """A loop exception handler that logs repeated accept failures once per interval, with a count."""

    def __init__(self, logger: Any, interval: float = ACCEPT_ERROR_LOG_INTERVAL) -> None:
        self._logger = logger
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", "unexpected error in the event loop"))
        error = context.get("exception")
        key = f"{message}:{type(error).__name__ if error else ''}"
        now = time.monotonic()
        if now - self._last.get(key, -self._interval) < self._interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._last[key] = now
        repeated = self._suppressed.pop(key, 0)
        self._logger.error("event loop error", msg_detail=message, err=str(error) if error else None,
                           repeated_since_last_report=repeated)


def _unread_bytes(transport: asyncio.BaseTransport | None) -> int:
    """Bytes received by the kernel on ``transport``'s socket and not read yet (0 when it cannot tell)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return 0
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return int.from_bytes(answer, sys.byteorder)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class GuardedSockSite(web.SockSite):
    """A SockSite whose TLS handshakes must finish within ``handshake_timeout`` (asyncio's default is
    60 s, during which a connection that never speaks is not yet seen by the guard), and whose clients that
    do not speak TLS are answered and closed at once, as Go's server does (:mod:`tls_front`); ``refused``
    hears of each."""

    def __init__(self, runner: web.BaseRunner, sock: Any, *, handshake_timeout: float,
                 refused: Refusal = lambda _reason, _detail: None, **kwargs: Any) -> None:
        super().__init__(runner, sock, **kwargs)
        self.handshake_timeout = handshake_timeout
        self.refused = refused

    def server(self) -> asyncio.AbstractServer | None:
        """The loop's server for the socket, once started (the listener watch asks it whether it serves)."""
        return self._server

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        if self._ssl_context is None:
            self._server = await loop.create_server(server, sock=self._sock, backlog=self._backlog)
            return
        front = tls_front_factory(server, self._ssl_context, self.handshake_timeout, self.refused)
        self._server = await loop.create_server(front, sock=self._sock, backlog=self._backlog)
