"""sd_notify(3) and sd_listen_fds(3) in plain socket code.

The protocol is a few datagrams on a unix socket, so a dependency (systemd-python, sdnotify) would add
a C extension or a package for twenty lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Mapping, MutableMapping

SD_LISTEN_FDS_START = 3


class Notifier:
    """Sends state changes to the service manager; every method is a no-op outside systemd."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        # A leading "@" names a socket in the abstract namespace.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._watchdog_interval = _watchdog_interval(env)
        #: Opened once, at start: under descriptor exhaustion a new socket per message would fail, and
        #: the watchdog pings would stop with it.
        self._sock: socket.socket | None = None
        if self._address:
            with contextlib.suppress(OSError):
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        #: Messages that could not be sent (the manager gone, descriptors exhausted).
        self.failures = 0

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, *fields: str) -> bool:
        """Sends one message; False when it could not be sent. Never raises."""
        if not self._address:
            return True
        message = "\n".join(fields).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message, self._address)
        except OSError:
            # The manager going away, or no descriptor left, must not take the daemon with it.
            self.failures += 1
            return False
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}")

    def reloading(self) -> None:
        # Type=notify-reload needs MONOTONIC_USEC to match the reload with the SIGHUP it sent.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> None:
        self.notify("STOPPING=1", "STATUS=shutting down")

    def status(self, status: str) -> None:
        self.notify(f"STATUS={status}")

    async def watchdog_loop(self) -> None:
        """Pings at half the watchdog interval, as sd_watchdog_enabled(3) recommends; returns if unset."""
        if not self._address or self._watchdog_interval is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(self._watchdog_interval / 2)


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 1_000_000


def listen_fds(environ: MutableMapping[str, str] | None = None, *, unset: bool = True) -> list[socket.socket]:
    """Sockets passed by socket activation, as sd_listen_fds(3) with ``unset_environment``.

    The variables are removed so that a child process we might start does not take them for its own.
    """
    env = os.environ if environ is None else environ
    pid = env.get("LISTEN_PID", "")
    count = env.get("LISTEN_FDS", "")
    if unset:
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            env.pop(name, None)
    if not pid.isdigit() or int(pid) != os.getpid() or not count.isdigit():
        return []
    sockets: list[socket.socket] = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count)):
        os.set_inheritable(fd, False)
        sockets.append(socket.socket(fileno=fd))
    return sockets
