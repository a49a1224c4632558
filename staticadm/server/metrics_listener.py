"""The metrics listener (``--metrics-listen``): ``/metrics`` for Prometheus over HTTPS with a bearer token, and
nothing else.

The admission listener's ``--client-ca`` is kubeadm's front-proxy CA, which signs kube-apiserver's client
certificate and nothing else (docs/deployment.md): a scraper must not hold a certificate from it, and a CA made
for Prometheus would let its holder send admission reviews. So the scraper has a door of its own: a second
HTTPS listener with the same serving certificate (the caBundle's CA verifies it), which asks no client
certificate and answers only ``GET /metrics`` carrying ``Authorization: Bearer <token>``, the token read from
``--metrics-token-file`` (Prometheus' ``authorization.credentials_file``). A token file replaced on disk is
used from the next scrape on. It is served by the process that owns the listeners (the single process, or the
workers' supervisor, which sums every worker's series), never on the admission path's event loop of a worker.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from staticadm.server.connections import ConnectionGuard, GuardedAppRunner, GuardedSockSite, tracked
from staticadm.server.listeners import ListenerError, ServingTls
from staticadm.server.metrics import CONTENT_TYPE

#: Scrapers are few: past this many open connections the longest-idle one is closed.
MAX_CONNECTIONS = 64
#: A token file larger than this is not a token.
MAX_TOKEN_BYTES = 4096


class MetricsToken:
    """The bearer token of ``--metrics-token-file``, read again when the file changes (a rotation); a file that
    cannot be read or is empty keeps the previous token, and is logged."""

    def __init__(self, path: Path, logger: Any) -> None:
        self.path = path
        self._log = logger
        self._seen: tuple[int, int, int] | None = None
        token = self._read()
        if isinstance(token, str):
            raise ListenerError(f"--metrics-token-file {path}: {token}")
        self._token = token

    def _read(self) -> bytes | str:
        """The token, or why there is none."""
        try:
            info = os.stat(self.path)
            with self.path.open("rb") as file:
                data = file.read(MAX_TOKEN_BYTES + 1)
        except OSError as error:
            return f"cannot be read by uid {os.geteuid()}: {error.strerror or error}"
        self._seen = (info.st_ino, info.st_mtime_ns, info.st_size)
        token = data.strip()
        if not token:
            return "is empty; write a random token into it (head -c 32 /dev/urandom | base64)"
        if len(data) > MAX_TOKEN_BYTES or any(byte < 0x21 or byte > 0x7E for byte in token):
            return "is not a token (printable ASCII without spaces, at most 4 KiB)"
        return token

    def _refresh(self) -> None:
        try:
            info = os.stat(self.path)
        except OSError:
            return
        if (info.st_ino, info.st_mtime_ns, info.st_size) == self._seen:
            return
        token = self._read()
        if isinstance(token, str):
            self._log.warning("the new metrics token file is not usable; the previous token stays in force",
                              file=str(self.path), err=token)
            return
        self._token = token
        self._log.info("reloaded the metrics token", file=str(self.path))

    def admits(self, authorization: str | None) -> bool:
        self._refresh()
        scheme, _, credentials = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), self._token)


def create_metrics_app(exposition: Callable[[], Awaitable[bytes]], token: MetricsToken) -> web.Application:
    async def metrics(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="use GET\n", headers={"Allow": "GET, HEAD"})
        if not token.admits(request.headers.get("Authorization")):
            return web.Response(status=401, text="a bearer token from --metrics-token-file is required\n",
                                headers={"WWW-Authenticate": 'Bearer realm="staticadm metrics"'})
        return web.Response(body=await exposition(), headers={"Content-Type": CONTENT_TYPE})

    async def not_found(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=404, text="only /metrics is served here\n")

    app = web.Application(client_max_size=4096)
    app.router.add_route("*", "/metrics", tracked(metrics))
    app.router.add_route("*", "/{path:.*}", tracked(not_found))
    return app


class MetricsListener:
    """The listener, its TLS (the serving certificate, reloaded as the admission listener's is, without a client
    CA) and its connections (bounded, timed out like the admission listener's)."""

    def __init__(self, sock: socket.socket, tls: ServingTls, token: MetricsToken,
                 exposition: Callable[[], Awaitable[bytes]], *, header_timeout: float, idle_timeout: float) -> None:
        self.sock = sock
        self.tls = tls
        self.guard = ConnectionGuard(max_connections=MAX_CONNECTIONS, header_timeout=header_timeout,
                                     idle_timeout=idle_timeout, on_event=lambda _reason: None)
        self._runner = GuardedAppRunner(create_metrics_app(exposition, token), guard=self.guard, shutdown_timeout=1.0,
                                        access_log=None, keepalive_timeout=idle_timeout)
        self._header_timeout = header_timeout
        self._site: GuardedSockSite | None = None

    def server(self) -> asyncio.AbstractServer | None:
        """The loop's server for the socket, once started."""
        return self._site.server() if self._site is not None else None

    async def start(self) -> None:
        await self._runner.setup()
        self._site = GuardedSockSite(self._runner, self.sock, handshake_timeout=self._header_timeout,
                                     ssl_context=self.tls.context, refused=self.tls.refusals.refuse)
        await self._site.start()

    async def stop(self) -> None:
        await self._runner.cleanup()
        self.sock.close()
