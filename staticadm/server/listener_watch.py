"""A listener that stops listening ends the process, loudly, so that its supervisor starts it again.

A listening socket can die under a running daemon: ``shutdown()`` called on it (through any descriptor of the same
socket: one inherited, or taken with ``pidfd_getfd``), its descriptor closed by a bug elsewhere in the process,
or the event loop giving it up after an accept error. Neither event loop says so: asyncio's logs the failed
accept (our limiter: once per 10 s) and retries for ever; uvloop's (libuv 1.51) retries without a word, and
older ones closed the listener. Either way the daemon runs on, systemd sees it alive, and kube-apiserver's
calls fail under their failurePolicy until someone restarts it.

So each process checks every listener it serves once a second (never per request): its descriptor still the
socket it was when serving started (``fstat``'s device and inode: a closed descriptor's number is soon another
file's), still listening (``SO_ACCEPTCONN``: a TCP socket that was shut down is not), not hung up (``poll``: a unix
socket that was shut down still says it listens, but reports a hang-up and refuses every connection), and the
loop's server for it still serving. The first that fails is logged with the listener and the cause, counted,
and the process exits with :data:`EXIT_LISTENER_FAILED`: systemd (``Restart=always``) or, for a worker, the
supervisor starts it again. Listeners our own shutdown closes are not checked: the watch stops first.
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: How often every listener is checked.
LISTENER_CHECK_INTERVAL = 1.0
#: The exit status of a process one of whose listeners stopped listening (1 is a failed start).
EXIT_LISTENER_FAILED = 3
#: What ``poll`` reports for a socket nothing can connect to any more.
_DEAD_EVENTS = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


def socket_identity(sock: socket.socket) -> tuple[int, int]:
    """What the socket's descriptor refers to: (device, inode) of the socket itself."""
    info = os.fstat(sock.fileno())
    return info.st_dev, info.st_ino


@dataclass(frozen=True, slots=True)
class WatchedListener:
    #: ``unix``, ``https`` or ``metrics``: the metric's label.
    kind: str
    #: As the ``listening`` line logged it (``unix:PATH``, ``https://ADDRESS``...).
    description: str
    sock: socket.socket
    #: The descriptor and what it referred to when the watch was set up, before the loop served it.
    fd: int
    identity: tuple[int, int]
    #: The loop's server for it; None where this process holds the socket without serving it (the supervisor).
    server: Callable[[], asyncio.AbstractServer | None] = lambda: None

    @staticmethod
    def of(kind: str, description: str, sock: socket.socket,
           server: Callable[[], asyncio.AbstractServer | None] = lambda: None) -> WatchedListener:
        return WatchedListener(kind, description, sock, sock.fileno(), socket_identity(sock), server)


def listener_problem(listener: WatchedListener) -> str | None:
    """Why ``listener`` no longer takes connections, or None while it does."""
    fd = listener.fd
    try:
        info = os.fstat(fd)
    except OSError as error:
        return f"its descriptor {fd} was closed ({error.strerror or error})"
    if (info.st_dev, info.st_ino) != listener.identity or listener.sock.fileno() != fd:
        return f"its descriptor {fd} was closed (the number now refers to another file)"
    server = listener.server()
    if server is not None and not server.is_serving():
        return "the event loop stopped serving it"
    try:
        accepting = listener.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    except OSError as error:
        return f"its state cannot be read ({error.strerror or error})"
    if not accepting:
        return "the socket no longer listens (SO_ACCEPTCONN is 0: it was shut down or disconnected)"
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    for _fd, events in poller.poll(0):
        if events & _DEAD_EVENTS:
            return (f"the socket was shut down (poll reports a hang-up, events 0x{events:x}): it refuses every "
                    "connection")
    return None


class ListenerWatch:
    """Checks ``listeners`` every ``interval`` until one fails (``on_failure`` is told which and why, once) or
    ``stopping()`` says the process is shutting down, when listeners closing are its own doing."""

    def __init__(self, listeners: Sequence[WatchedListener], on_failure: Callable[[WatchedListener, str], None],
                 stopping: Callable[[], bool], interval: float = LISTENER_CHECK_INTERVAL) -> None:
        self.listeners = list(listeners)
        self._on_failure = on_failure
        self._stopping = stopping
        self._interval = interval

    def check(self) -> tuple[WatchedListener, str] | None:
        """The first listener that stopped listening and why; None while every one listens or when stopping."""
        if self._stopping():
            return None
        for listener in self.listeners:
            problem = listener_problem(listener)
            if problem is not None:
                return listener, problem
        return None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            failed = self.check()
            if failed is not None:
                self._on_failure(*failed)
                return
