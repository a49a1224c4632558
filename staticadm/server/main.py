"""``staticadm serve``: wire the manifest source, the listeners and the application together.

Startup mirrors kube-apiserver with static manifests: the listeners come up first (so probes get an
honest "not ready" instead of "connection refused"), the first load must succeed or the process exits
non-zero listing every error, and only then does the daemon report ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from aiohttp import web

from staticadm.admission.namespaces import (
    NamespaceFileError,
    NamespaceSource,
    RequestOnlyNamespaces,
    parse_namespaces,
)
from staticadm.reload import ManifestSource, ReloadResult
from staticadm.server import logging as server_logging
from staticadm.server.app import ServerState, create_app, wait_idle
from staticadm.server.config import ServeConfig
from staticadm.server.listeners import (
    Listener,
    ListenerError,
    ServingTls,
    bind_tcp_socket,
    bind_unix_socket,
    ensure_self_signed,
    remove_unix_socket,
    socket_inode,
    split_activated,
)
from staticadm.server.metrics import Metrics
from staticadm.server.systemd import Notifier, listen_fds

EXIT_OK = 0
EXIT_FAILED = 1


def serve(config: ServeConfig, stderr: TextIO | None = None) -> int:
    server_logging.configure(config.log_format, config.log_level)
    return asyncio.run(_Daemon(config, stderr or sys.stderr).run())


class _Daemon:
    def __init__(self, config: ServeConfig, stderr: TextIO) -> None:
        self.config = config
        self.stderr = stderr
        self.log = server_logging.get_logger("staticadm")
        self.metrics = Metrics()
        self.notifier = Notifier()
        self.unix_paths: list[tuple[Path, int | None]] = []
        self.tls: ServingTls | None = None
        self.source = ManifestSource(config.manifests, poll_interval=config.poll_interval, logger=self.log,
                                     on_reload=self._on_reload, on_reloading=self._on_reloading)

    def _fail(self, message: str) -> int:
        self.stderr.write(f"staticadm serve: {message}\n")
        self.stderr.flush()
        return EXIT_FAILED

    # -- reload notifications (the source calls these; the startup load runs in a worker thread) --

    def _status_text(self, result: ReloadResult | None = None) -> str:
        served = self.source.current
        text = f"serving {served.describe()}" if served is not None else "loading manifests"
        if result is not None and result.status == "failure":
            text += f"; last reload failed with {len(result.errors)} error(s), see the log"
        return text

    def _on_reloading(self, reason: str) -> None:
        # Only a SIGHUP is a reload systemd waits for (Type=notify-reload); automatic reloads are
        # reported through STATUS alone so that `systemctl status` does not flicker.
        if reason == "signal":
            self.notifier.reloading()

    def _on_reload(self, result: ReloadResult) -> None:
        loop_time = time.time()
        if result.status in ("success", "failure"):
            served = result.served
            self.metrics.record_reload(result.status, loop_time,
                                       served.content_hash if result.status == "success" and served else None)
        if result.reason == "startup":
            return
        if result.reason == "signal":
            self.notifier.ready(self._status_text(result))
        else:
            self.notifier.status(self._status_text(result))

    # -- setup -------------------------------------------------------------------------------------

    def _namespaces(self) -> NamespaceSource:
        path = self.config.namespaces
        if path is None:
            return RequestOnlyNamespaces()
        try:
            return parse_namespaces(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise ListenerError(f"--namespaces {path}: {error.strerror or error}") from error
        except NamespaceFileError as error:
            raise ListenerError(f"--namespaces {path}: {error}") from error

    def _listeners(self) -> list[tuple[Listener, bool]]:
        """(listener, uses TLS) pairs; activated sockets replace the configured ones of their family."""
        activated_unix, activated_tcp = split_activated(listen_fds())
        listeners: list[tuple[Listener, bool]] = []
        for sock in activated_unix:
            listeners.append((Listener("unix", sock, f"activated unix socket {sock.getsockname()!r}"), False))
        if not activated_unix and self.config.socket is not None:
            path = self.config.socket
            sock = bind_unix_socket(path, self.config.socket_mode)
            self.unix_paths.append((path, socket_inode(path)))
            listeners.append((Listener("unix", sock, f"unix:{path}"), False))
        for sock in activated_tcp:
            listeners.append((Listener("https", sock, f"activated https://{_address(sock)}"), True))
        if not activated_tcp and self.config.listen is not None:
            host, port = self.config.listen
            sock = bind_tcp_socket(host, port)
            listeners.append((Listener("https", sock, f"https://{_address(sock)}"), True))
        if not listeners:
            raise ListenerError("no listener: give --socket or --listen (or start with socket activation)")
        if any(tls for _, tls in listeners):
            self.tls = self._serving_tls()
        return listeners

    def _serving_tls(self) -> ServingTls:
        cert, key = self.config.tls_cert, self.config.tls_key
        if cert is None or key is None:
            state_dir = self.config.state_dir or Path(".")
            try:
                generated = ensure_self_signed(state_dir)
            except (OSError, ValueError) as error:
                raise ListenerError(f"--state-dir {state_dir}: cannot create the serving certificate: {error}") \
                    from error
            cert, key = generated.cert, generated.key
            # The operator needs this file for the webhook configuration's caBundle.
            self.log.info("serving with a certificate signed by the staticadm local CA; use it as caBundle",
                          ca=str(generated.ca_cert), cert=str(cert), created=generated.created)
        return ServingTls(cert, key, self.config.client_ca, self.log)

    # -- run ---------------------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            namespaces = self._namespaces()
            listeners = self._listeners()
        except ListenerError as error:
            return self._fail(str(error))
        executor = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2), thread_name_prefix="staticadm-eval")
        state = ServerState(self.source, namespaces, self.metrics, self.log, executor,
                            body_timeout=self.config.body_timeout)
        # Requests have been drained by then (see below); this only bounds closing idle connections.
        runner = web.AppRunner(create_app(state), shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        for listener, tls in listeners:
            site = web.SockSite(runner, listener.sock, ssl_context=self.tls.context if tls and self.tls else None)
            await site.start()
            self.log.info("listening", address=listener.description)

        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.source.reload_now)

        background: list[asyncio.Task[None]] = []
        exit_code = EXIT_OK
        try:
            self.source.start_watching()
            load = loop.run_in_executor(None, self.source.load_initial)
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait([load, stopped], return_when=asyncio.FIRST_COMPLETED)
            if not load.done():
                # Asked to stop while the first load was still running: nothing was ever served.
                stopped.cancel()
                return EXIT_OK
            stopped.cancel()
            initial = load.result()
            if initial.status != "success":
                lines = [f"failed to load static policy manifests from {str(self.config.manifests)!r}:"]
                lines.extend(f"  {error}" for error in initial.errors)
                exit_code = self._fail("\n".join(lines))
                return exit_code
            self.notifier.ready(self._status_text())
            background.append(asyncio.create_task(self.source.run(), name="manifest-source"))
            background.append(asyncio.create_task(self.notifier.watchdog_loop(), name="systemd-watchdog"))
            if self.tls is not None:
                background.append(asyncio.create_task(self.tls.watch(), name="tls-reload"))
            await stop.wait()
            self.log.info("shutting down; finishing in-flight requests", grace_seconds=self.config.shutdown_grace)
            return EXIT_OK
        finally:
            state.shutting_down = True
            self.notifier.stopping()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            for task in background:
                task.cancel()
            for task in background:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            # Stop accepting first, then let running requests finish. aiohttp's own graceful shutdown
            # stops reading from connections at once, which would cut off a body still arriving, so the
            # wait for in-flight requests happens before it.
            for site in list(runner.sites):
                await site.stop()
            if not await wait_idle(state, self.config.shutdown_grace):
                self.log.warning("requests still running after the shutdown grace period; closing them",
                                 in_flight=state.in_flight)
            await runner.cleanup()
            for path, inode in self.unix_paths:
                remove_unix_socket(path, inode)
            self.source.close()
            executor.shutdown(wait=False, cancel_futures=True)
            if exit_code == EXIT_OK:
                self.log.info("stopped")


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

