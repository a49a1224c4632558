"""``staticadm serve``: wire the manifest source, the listeners and the application together.

Startup: the listeners come up first (so probes get an honest "not ready" instead of "connection
refused"), then the manifest directory is loaded. kube-apiserver refuses to start when its initial load
fails (KEP-5793); a sidecar that exited would only be restarted in a loop by its supervisor, with no
listener to tell kube-apiserver anything. So an invalid or missing directory at startup leaves the
daemon up but not ready: every error is logged, ``/readyz`` and the admission endpoints answer 503
(kube-apiserver then applies the webhook's failurePolicy), the directory is retried on every file event
and with a backoff, and the daemon reports ready (READY=1 to systemd) once a load succeeds.
"""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TextIO

from setproctitle import setproctitle

from staticadm import __version__
from staticadm.admission.endpoints import ENDPOINTS
from staticadm.admission.generic import deferred
from staticadm.admission.namespaces import (
    NamespaceFileError,
    NamespaceSource,
    RequestOnlyNamespaces,
    parse_namespaces,
)
from staticadm.analysis import QUICK_KINDS, SLOW_KINDS, Analyser, FindingKind
from staticadm.atomicfile import UnsafeDirectoryError
from staticadm.cluster.view import ClusterView
from staticadm.deploy.certs import current_generated
from staticadm.deploy.registration import signature as registration_signature
from staticadm.manifests.cluster_reads import AUTHORIZER, NAMESPACE_OBJECT, ClusterReads, cluster_reads, unanswerable
from staticadm.server import event_loop
from staticadm.server import logging as server_logging
from staticadm.server.app import ServerState, create_app, fast_reviews, wait_idle
from staticadm.server.batching import AfterTheAnswers
from staticadm.server.certificates import (
    RENEWAL_FAILURE_CAUSES,
    CertificateLifetime,
    expiry_note,
    renewal_failure_cause,
)
from staticadm.server.config import ServeConfig, effective_options
from staticadm.server.connections import (
    ACCEPT_BACKLOG,
    AcceptErrorLimiter,
    ConnectionGuard,
    GuardedAppRunner,
    GuardedSockSite,
    connection_cap,
    raise_open_file_limit,
)
from staticadm.server.event_loop import running_uvloop
from staticadm.server.findings import FindingsReporter, note_name
from staticadm.server.heap import Heap, imports_done
from staticadm.server.listener_watch import EXIT_LISTENER_FAILED, ListenerWatch, WatchedListener
from staticadm.server.listeners import (
    HANDSHAKE_HINTS,
    Listener,
    ListenerError,
    ServingTls,
    bind_tcp_socket,
    bind_unix_socket,
    ensure_self_signed,
    open_doors,
    remove_unix_socket,
    socket_inode,
    split_activated,
)
from staticadm.server.metrics import Metrics, ProcessMetrics
from staticadm.server.metrics_listener import MetricsListener, MetricsToken
from staticadm.server.reporting import ReloadReporter
from staticadm.server.shadow import ShadowEvaluator
from staticadm.server.supervision import TaskHealth, supervise
from staticadm.server.systemd import Notifier, listen_fds
from staticadm.server.workers import (
    DiskState,
    Load,
    NothingToServe,
    ShadowLoad,
    WorkerLink,
    WorkerPool,
    WorkerSpec,
    load_message,
)
from staticadm.server.zygote import Zygote, fork_zygote
from staticadm.source import ManifestSource, ReloadResult, ReloadStatus, Served
from staticadm.watch import DirectoryWatcher

EXIT_OK = 0
#: Supervisor -> worker: stop accepting, answer what is open, close connections, exit (see WorkerPool._retire).
RETIRE_SIGNAL = signal.SIGUSR1
#: Go's net/http rstAvoidanceDelay: how long a connection is read after an answer that left its body unread.
LINGERING_SECONDS = 0.5
#: How often the installed webhook registration's files are looked at (--webhook-config-dir).
REGISTRATION_POLL_SECONDS = 1.0
#: How long after a reload its analysis starts: the analysis thread holds the GIL for tens of milliseconds, and
#: every release the event loop makes (accept, read, write) waits up to the switch interval to get it back, so
#: the new snapshot's first answers would be late by several intervals each. Findings are logged this much later.
ANALYSIS_DELAY = 0.1
EXIT_FAILED = 1
#: libuv (uvloop) accepts until a listener's queue is empty; with this set it yields between two accepts (libuv's
#: "give other processes a chance to accept connections"), so connections opened together spread over the workers
#: sharing the listener, as asyncio's loop does them with a backlog of 1 (``open_sites``).
LIBUV_SINGLE_ACCEPT = "UV_TCP_SINGLE_ACCEPT"


def serve(config: ServeConfig, stderr: TextIO | None = None) -> int:
    """Runs the daemon: in this process, or with ``config.workers`` > 1 as the workers' supervisor."""
    imports_done()
    try:
        loop_name = event_loop.resolve(config.event_loop)
    except event_loop.EventLoopUnavailable as error:
        (stderr or sys.stderr).write(f"staticadm serve: {error}\n")
        return EXIT_FAILED
    # Before the log writer's thread (or any other) exists: the zygote is a copy of this process as it is now.
    zygote = fork_zygote(serve_worker) if config.workers > 1 else None
    writer = server_logging.configure(config.log_format, config.log_level, non_blocking=True)
    daemon: _Daemon
    if zygote is None:
        daemon = _Daemon(config, stderr or sys.stderr)
    elif isinstance(zygote, str):
        daemon = _Supervisor(config, stderr or sys.stderr, None)
        daemon.log.warning("workers are started as fresh interpreters (each imports the daemon before it serves): "
                           "no zygote could be forked", reason=zygote)
    else:
        daemon = _Supervisor(config, stderr or sys.stderr, zygote)
        daemon.log.info("zygote started: workers are forked from it", pid=zygote.pid)
    if writer is not None:
        daemon.metrics.watch_log_drops(lambda: float(writer.dropped))
    daemon.log.info("starting staticadm", version=__version__, python=platform.python_version(),
                    event_loop=loop_name, config=effective_options(config))
    if config.workers == 1:
        daemon.log.warning("one process (--workers 1): nothing replaces it while the memory the CEL engine keeps "
                           "grows (docs/known-gaps.md); with 2 or more, a worker that grows is replaced without "
                           "failing a request")
    try:
        return event_loop.run(daemon.run(), config.event_loop)
    finally:
        if writer is not None:
            writer.close()


def serve_worker(spec: WorkerSpec) -> int:
    """One worker of ``serve --workers N``: the daemon on inherited listeners, fed by its supervisor; in a fresh
    interpreter (``worker_process.py``) or forked by the supervisor's zygote (``zygote.py``)."""
    imports_done()
    setproctitle(f"staticadm serve: worker {spec.index}")
    # Read by libuv when a listener starts: before the event loop exists.
    os.environ.setdefault(LIBUV_SINGLE_ACCEPT, "1")
    config = spec.config
    writer = server_logging.configure(config.log_format, config.log_level, non_blocking=True)
    daemon = _Daemon(config, sys.stderr, link=WorkerLink(spec))
    if writer is not None:
        daemon.metrics.watch_log_drops(lambda: float(writer.dropped))
    try:
        return event_loop.run(daemon.run(), config.event_loop)
    finally:
        if writer is not None:
            writer.close()


def disk_problem(result: ReloadResult) -> str | None:
    """For /readyz?verbose: why the directory on disk is not what is served, if it is not."""
    if result.status is not ReloadStatus.FAILURE:
        return None
    # The same words whether or not a good load came before: only what is served differs.
    if result.served is None:
        return (f"the manifest directory on disk is invalid ({_failed_since(result)}); nothing is served yet "
                "(admission requests get 503)")
    return (f"the manifest directory on disk is invalid ({_failed_since(result)}); serving the last good "
            f"configuration {result.served.content_hash or '(empty)'}")


def shadow_problem(result: ReloadResult) -> str | None:
    """For /readyz?verbose: why the --shadow-manifests directory on disk is not what is shadowed, if it is not
    (the daemon stays ready: the shadow directory never decides a request)."""
    if result.status is not ReloadStatus.FAILURE:
        return None
    if result.served is None:
        return f"the shadow manifest directory on disk is invalid ({_failed_since(result)}); nothing is shadowed"
    return (f"the shadow manifest directory on disk is invalid ({_failed_since(result)}); shadowing the last good "
            f"configuration {result.served.content_hash or '(empty)'}")


def _failed_since(result: ReloadResult) -> str:
    return f"{len(result.errors)} error(s) since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, see the log"


class _Daemon:
    def __init__(self, config: ServeConfig, stderr: TextIO, link: WorkerLink | None = None) -> None:
        self.config = config
        self.stderr = stderr
        #: Set in a worker: snapshots come from the supervisor, which also owns systemd and the listeners.
        self.link = link
        self.state: ServerState | None = None
        self._side_tasks: set[asyncio.Future[None]] = set()
        self.heap = Heap()
        #: One thread: reloads in quick succession are analysed one after the other, not all at once, and never
        #: on the event loop (requests and reloads' swaps do not wait for them).
        self._analysis_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="staticadm-analysis")
        #: Builds the programs requests find missing (``admission/generic/deferred.py``), so none waits for one;
        #: handed each build once the answers that found it missing are written (``batching.AfterTheAnswers``).
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="staticadm-build")
        self.log = server_logging.get_logger("staticadm")
        if link is not None:
            self.log = self.log.bind(worker=link.index)
        self.metrics = Metrics()
        self.analyser = Analyser(str(config.manifests),
                                 str(config.webhook_config_dir) if config.webhook_config_dir is not None else None)
        #: check's findings about what is served: reported by the process that loads (not by workers).
        self.findings = FindingsReporter(self.log, lambda kind, count: self.metrics.findings.labels(
            finding=kind).set(count)) if link is None else None
        #: /readyz?verbose notes about the findings, by kind (in a worker: as the supervisor sent them).
        self._finding_notes: dict[str, str] = {}
        self._analysis_running = False
        self._analysis_again = False
        self.notifier = Notifier()
        self.health = TaskHealth()
        #: (content hash, policies whose cluster reads this daemon cannot answer) of the last snapshot looked at.
        self._cluster_gaps: tuple[str, list[ClusterReads]] | None = None
        #: READY=1 has been sent: set by the first successful load, never unset.
        self.announced = False
        #: What run() returns once it has stopped: EXIT_LISTENER_FAILED after a listener stopped listening.
        self.exit_status = EXIT_OK
        self.unix_paths: list[tuple[Path, int | None]] = []
        self.tls: ServingTls | None = None
        #: The generated serving certificate was (re)issued as the daemon started.
        self._issued_at_start = False
        self.source = ManifestSource(config.manifests, allow_world_writable=config.allow_world_writable_manifests)
        self.watcher = DirectoryWatcher(self.source, poll_interval=config.poll_interval, logger=self.log,
                                        on_result=self._on_reload, on_reloading=self._on_reloading)
        self.reporter = ReloadReporter(self.log, config.manifests)
        #: --shadow-manifests: the second directory, loaded and reloaded by the same rules, never served.
        self.shadow_source: ManifestSource | None = None
        self.shadow_watcher: DirectoryWatcher | None = None
        self.shadow_log = self.log.bind(shadow=True)
        if config.shadow_manifests is not None:
            self.shadow_source = ManifestSource(config.shadow_manifests,
                                                allow_world_writable=config.allow_world_writable_manifests)
            self.shadow_reporter = ReloadReporter(self.shadow_log, config.shadow_manifests)
            if link is None:
                self.shadow_watcher = DirectoryWatcher(self.shadow_source, poll_interval=config.poll_interval,
                                                       logger=self.shadow_log, on_result=self._on_shadow_reload)

    def _on_shadow_reload(self, result: ReloadResult) -> None:
        # Counted and shown before it is logged: nothing about the files (their names) may lose the failure.
        if result.status is not ReloadStatus.UNCHANGED:
            served = result.served
            self.metrics.record_shadow_reload(str(result.status),
                                              served.content_hash if served and result.status is ReloadStatus.SUCCESS
                                              else None)
        if self.state is not None:
            self.state.shadow_problem = shadow_problem(result)
            if self.state.shadow is not None:
                self.state.shadow.first_load_over()
        watcher = self.shadow_watcher
        self.shadow_reporter.report(result, retry_seconds=watcher.retry_seconds if watcher else 0.0)

    async def _run_shadow(self) -> None:
        """Single process: the shadow directory's first load (not awaited by readiness), then its watch."""
        watcher = self.shadow_watcher
        assert watcher is not None
        watcher.start()
        await watcher.reload("startup")
        await watcher.run()

    def _reload_all(self) -> None:
        self.watcher.reload_now()
        if self.shadow_watcher is not None:
            self.shadow_watcher.reload_now()

    def _apply_shadow(self, message: ShadowLoad) -> None:
        """A worker: the supervisor validated new shadow contents; apply them off the event loop."""
        source = self.shadow_source
        if source is None:
            return

        async def apply() -> None:
            loop = asyncio.get_running_loop()
            # The supervisor counted this reload (staticadm_shadow_reloads_total): a worker applying the bytes
            # it validated is the same reload, not another one. What each worker evaluates is its own gauge.
            result = await loop.run_in_executor(None, source.apply, message.reason, message.contents)
            if result.status is ReloadStatus.SUCCESS and result.served is not None:
                self.metrics.set_worker_shadow_hash(result.served.content_hash)
            if self.state is not None and self.state.shadow is not None:
                self.state.shadow.first_load_over()

        self._in_background(apply())

    def _in_background(self, work: Awaitable[None]) -> None:
        """Runs ``work`` on the loop, holding a reference until it ends (the loop keeps only weak ones)."""
        task = asyncio.ensure_future(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def _fail(self, message: str) -> int:
        self.stderr.write(f"staticadm serve: {message}\n")
        self.stderr.flush()
        return EXIT_FAILED

    # -- reload results (on the event loop thread, the startup load's too) ---------------------------

    def _status_text(self, result: ReloadResult | None = None) -> str:
        served = self.source.current
        if served is not None:
            text = f"serving {served.describe()}"
            if result is not None and result.status is ReloadStatus.FAILURE:
                text += f"; last reload failed with {len(result.errors)} error(s), see the log"
        elif result is not None and result.status is ReloadStatus.FAILURE:
            text = f"not ready: manifest directory invalid ({len(result.errors)} error(s), see the log); retrying"
        else:
            text = "loading manifests"
        return text

    def _on_reloading(self, reason: str) -> None:
        # Only a SIGHUP is a reload systemd waits for (Type=notify-reload); automatic reloads are
        # reported through STATUS alone so that `systemctl status` does not flicker.
        if reason == "signal" and self.announced:
            self.notifier.reloading()

    def _on_disk_state(self, disk: DiskState) -> None:
        self._finding_notes = dict(disk.findings)
        if self.state is not None:
            self.state.disk_problem, self.state.shadow_problem = disk.problem, disk.shadow_problem
            if disk.shadow_problem is not None and self.state.shadow is not None:
                # The supervisor could not load the shadow directory: nothing is coming to wait for.
                self.state.shadow.first_load_over()

    def _on_worker_load(self, result: ReloadResult | None) -> None:
        served = self.source.current
        if served is not None:
            self.metrics.set_worker_hash(served.content_hash)
        if result is not None and result.status is ReloadStatus.SUCCESS:
            self.heap.settle_later()
        if result is not None and result.status is ReloadStatus.FAILURE:
            # The supervisor validated these bytes; failing here is a fault of this process.
            for error in result.errors:
                self.log.error("worker failed to load what the supervisor validated", err=str(error))

    def _analyse_later(self) -> None:
        """Run check's analyses on what is served, in the analysis thread, and report what changed. Called
        after every reload (the swap is done by then) and when the webhook registration's files change; a
        call while an analysis runs makes it run once more when it ends."""
        reporter = self.findings
        if reporter is None:
            return
        if self._analysis_running:
            self._analysis_again = True
            return
        self._analysis_running = True

        async def analyse() -> None:
            loop = asyncio.get_running_loop()
            try:
                await asyncio.sleep(ANALYSIS_DELAY)
                while True:
                    self._analysis_again = False
                    served = self.source.current
                    try:
                        # What the load declares first (milliseconds), then what needs compiling and evaluating.
                        quick = await loop.run_in_executor(self._analysis_executor, self.analyser.quick, served,
                                                           self.source.skipped)
                        reporter.report(quick, QUICK_KINDS)
                        self._on_findings(reporter.notes)
                        slow = await loop.run_in_executor(self._analysis_executor, self.analyser.slow, served)
                    except Exception as error:  # an analysis bug must not stop reloads or serving
                        self.log.error("analysing the served configuration failed",
                                       err=f"{type(error).__name__}: {error}")
                        return
                    reporter.report(slow, SLOW_KINDS)
                    self._on_findings(reporter.notes)
                    if not self._analysis_again:
                        return
            finally:
                self._analysis_running = False

        self._in_background(analyse())

    def _on_findings(self, notes: dict[str, str]) -> None:
        self._finding_notes = notes

    def _finding_note(self, name: str) -> str:
        return self._finding_notes.get(name, "")

    async def _watch_registration(self) -> None:
        """Analyse again whenever a file of the installed webhook registration changes (polled: it is a couple of
        files, and kube-apiserver reads them on its own schedule)."""
        directory = self.config.webhook_config_dir
        assert directory is not None
        last = registration_signature(str(directory))
        while True:
            await asyncio.sleep(REGISTRATION_POLL_SECONDS)
            current = registration_signature(str(directory))
            if current != last:
                last = current
                self._analyse_later()

    def _on_reload(self, result: ReloadResult) -> None:
        # Counted and shown before it is logged: nothing about the files (their names) may lose the failure.
        self._record_reload(result)
        if self.state is not None:
            self.state.disk_problem = disk_problem(result)
        self.reporter.report(result, retry_seconds=self.watcher.retry_seconds)
        self._analyse_later()
        self._report_missing_cluster_view(result)
        self._notify(result)
        if result.status is ReloadStatus.SUCCESS:
            self.heap.settle_later()

    def _missing_cluster_view(self, served: Served | None) -> list[ClusterReads]:
        """Policies of ``served`` reading namespaceObject or calling authorizer that this daemon cannot answer."""
        if served is None:
            return []
        if self._cluster_gaps is None or self._cluster_gaps[0] != served.content_hash:
            missing = unanswerable(cluster_reads(served.objects.values()),
                                   kubeconfig=self.config.kubeconfig is not None,
                                   namespaces_file=self.config.namespaces is not None)
            self._cluster_gaps = (served.content_hash, missing)
        return self._cluster_gaps[1]

    def _report_missing_cluster_view(self, result: ReloadResult) -> None:
        """At every load and reload: the policies whose cluster reads will fail, logged and counted."""
        if result.status is not ReloadStatus.SUCCESS:
            return
        missing = self._missing_cluster_view(result.served)
        for entry in missing:
            self.log.warning("policy reads the cluster view, which this daemon does not have: its expressions fail "
                             "and its failurePolicy decides every request it matches",
                             kind=entry.kind, policy=entry.policy, bindings=list(entry.bindings),
                             reads=list(entry.reads),
                             hint="serve --kubeconfig (docs/deployment.md, \"Cluster view\"); namespaceObject also "
                                  "from --namespaces")
        for read in (NAMESPACE_OBJECT, AUTHORIZER):
            self.metrics.missing_cluster_view.labels(reads=read).set(
                sum(1 for entry in missing if read in entry.reads))

    def _missing_cluster_view_note(self) -> str:
        missing = self._missing_cluster_view(self.source.current)
        if not missing:
            return ""
        return ("; ".join(entry.describe() for entry in missing) + " without the cluster view (serve "
                "--kubeconfig): those expressions fail and the failurePolicy decides")

    def _record_reload(self, result: ReloadResult) -> None:
        if result.status is not ReloadStatus.UNCHANGED:
            served = result.served
            self.metrics.record_reload(result.status, time.time(),
                                       served.content_hash if result.status is ReloadStatus.SUCCESS and served
                                       else None)

    def _notify(self, result: ReloadResult) -> None:
        if not self.announced:
            if result.status is ReloadStatus.SUCCESS:
                self.announced = True
                self.notifier.ready(self._status_text(result))
            else:
                self.notifier.status(self._status_text(result))
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
        """(listener, uses TLS) pairs; activated sockets replace the configured ones of their family.
        On failure nothing stays bound and no socket file of ours is left behind (the loser of a port
        conflict must not leave a dead socket where clients look for the winner's)."""
        listeners: list[tuple[Listener, bool]] = []
        try:
            self._bind_listeners(listeners)
        except ListenerError:
            self._close_listeners(listeners)
            raise
        for listener, door in open_doors(listeners, self.config.client_ca):
            self.log.warning("open to every local user", listener=listener, detail=door)
        return listeners

    def _bind_listeners(self, listeners: list[tuple[Listener, bool]]) -> list[tuple[Listener, bool]]:
        activated_unix, activated_tcp = split_activated(listen_fds())
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

    def _close_listeners(self, listeners: list[tuple[Listener, bool]]) -> None:
        """After a failed start: close what was bound and remove only the socket files we created."""
        for listener, _ in listeners:
            listener.sock.close()
        for path, inode in self.unix_paths:
            remove_unix_socket(path, inode)
        self.unix_paths.clear()

    def _serving_tls(self) -> ServingTls:
        cert, key = self.config.tls_cert, self.config.tls_key
        if cert is None or key is None:
            state_dir = self.config.state_dir or Path(".")
            try:
                generated = ensure_self_signed(state_dir)
            except (OSError, ValueError) as error:
                # A renewal that fails never takes a certificate that still serves away, at start-up either (the
                # lifetime task retries); a directory others could write is refused whatever it holds.
                current = None if isinstance(error, UnsafeDirectoryError) else current_generated(state_dir)
                if current is None:
                    raise ListenerError(f"--state-dir {state_dir}: cannot create the serving certificate: "
                                        f"{error}") from error
                cause = renewal_failure_cause(error)
                self.log.error("cannot renew the generated serving certificate; the current one keeps serving",
                               state_dir=str(state_dir), cause=cause, err=f"{type(error).__name__}: {error}")
                self.metrics.tls_certificate_renewal_failures.labels(cause=cause).inc()
                generated = current
            cert, key = generated.cert, generated.key
            self._issued_at_start = generated.created
            if generated.created and not generated.ca_created:
                # Due (or missing) at start-up: the same words as a renewal while running, since it is one.
                self.log.info("renewed the generated serving certificate with the same CA (the caBundle stays valid)",
                              ca=str(generated.ca_cert), cert=str(cert), at="startup")
            # The operator needs this file for the webhook configuration's caBundle.
            self.log.info("serving with a certificate signed by the staticadm local CA; use it as caBundle",
                          ca=str(generated.ca_cert), cert=str(cert), ca_created=generated.ca_created,
                          serving_created=generated.created)
        for reason in HANDSHAKE_HINTS:
            self.metrics.tls_handshake_failures.labels(reason=reason)
        return ServingTls(cert, key, self.config.client_ca, self.log,
                          lambda reason: self.metrics.tls_handshake_failures.labels(reason=reason).inc(),
                          on_loaded=lambda tls: self.metrics.record_tls_expiries(tls.expiries))

    def _certificate_lifetime(self) -> CertificateLifetime:
        """Only the process that made the serving certificate renews it: a worker is given its paths as if
        they were --tls-cert, and picks up what the supervisor writes as it picks up any rotation."""
        assert self.tls is not None
        generated = self.config.tls_cert is None
        state_dir = (self.config.state_dir or Path(".")) if generated else None
        for cause in RENEWAL_FAILURE_CAUSES:
            self.metrics.tls_certificate_renewal_failures.labels(cause=cause)
        return CertificateLifetime(
            self.tls, self.log, state_dir=state_dir, just_issued=generated and self._issued_at_start,
            on_renewal_failure=lambda cause: self.metrics.tls_certificate_renewal_failures.labels(cause=cause).inc())

    def _metrics_listener(self, exposition: Callable[[], Awaitable[bytes]]) -> MetricsListener | None:
        """--metrics-listen, in the process that owns the listeners: the serving certificate without a client CA,
        and the token of --metrics-token-file (staticadm.server.metrics_listener says why)."""
        config = self.config
        if config.metrics_listen is None or config.metrics_token_file is None:
            return None
        token = MetricsToken(config.metrics_token_file, self.log)
        host, port = config.metrics_listen
        sock = bind_tcp_socket(host, port, option="metrics-listen")
        try:
            serving = self.tls or self._serving_tls()
            tls = ServingTls(serving.cert, serving.key, None, self.log)
        except ListenerError:
            sock.close()
            raise
        return MetricsListener(sock, tls, token, exposition, header_timeout=config.header_timeout,
                               idle_timeout=config.idle_timeout)

    async def _start_metrics_listener(self, listener: MetricsListener | None,
                                      supervised: Callable[[str, Callable[[], Awaitable[None]]], asyncio.Task[None]],
                                      background: list[asyncio.Task[None]]) -> None:
        if listener is None:
            return
        await listener.start()
        background.append(supervised("metrics-tls-reload", listener.tls.watch))
        background.append(supervised("metrics-connection-sweeper", listener.guard.run))
        self.log.info("listening", address=f"https://{_address(listener.sock)}", serves="/metrics (bearer token)")

    def _listener_watch(self, watched: list[WatchedListener], stop: asyncio.Event) -> ListenerWatch:
        """Every listener this process serves (or holds, in the supervisor), checked once a second until ``stop``
        (our own shutdown closes them); one that stopped listening stops the process with EXIT_LISTENER_FAILED."""
        for listener in watched:
            self.metrics.listener_failures.labels(listener=listener.kind)

        def failed(listener: WatchedListener, cause: str) -> None:
            self.log.error("a listener stopped listening; exiting so that the process is started again",
                           listener=listener.description, cause=cause, exit_code=EXIT_LISTENER_FAILED)
            self.metrics.listener_failures.labels(listener=listener.kind).inc()
            self.notifier.status(f"{listener.description} stopped listening ({cause}); exiting")
            self.exit_status = EXIT_LISTENER_FAILED
            stop.set()

        return ListenerWatch(watched, failed, stop.is_set)

    @staticmethod
    def _watched_metrics_listener(listener: MetricsListener | None) -> list[WatchedListener]:
        if listener is None:
            return []
        return [WatchedListener.of("metrics", f"https://{_address(listener.sock)} (/metrics)", listener.sock,
                                   listener.server)]

    # -- run ---------------------------------------------------------------------------------------

    async def run(self) -> int:
        deferred.defer_on_this_thread(AfterTheAnswers(asyncio.get_running_loop(), self._builder),
                                      self._deferred_build_failed)
        try:
            return await self._serve()
        finally:
            deferred.defer_on_this_thread(None)
            self._builder.shutdown(wait=False, cancel_futures=True)

    def _deferred_build_failed(self, build: Callable[[], object], error: Exception) -> None:
        """On the builder thread: a bug, whose requests are decided without the program it was building."""
        self.log.error("building a program off the request path failed; the requests that need it are decided "
                       "without it", build=repr(build)[:300], err=f"{type(error).__name__}: {error}",
                       exc_info=error)

    async def _serve(self) -> int:
        loop = asyncio.get_running_loop()
        # Repeated accept failures (EMFILE) are reported once per interval, not once per attempt.
        loop.set_exception_handler(AcceptErrorLimiter(self.log))
        soft_limit, _hard = raise_open_file_limit()
        try:
            namespaces = self._namespaces()
            listeners = self.link.listeners() if self.link is not None else self._listeners()
        except ListenerError as error:
            return self._fail(str(error))

        async def exposition() -> bytes:
            return self.metrics.exposition()

        try:
            metrics_listener = self._metrics_listener(exposition) if self.link is None else None
        except ListenerError as error:
            self._close_listeners(listeners)
            return self._fail(str(error))
        if self.link is not None and any(tls for _, tls in listeners):
            self.tls = self._serving_tls()
        cluster = None
        if self.config.kubeconfig is not None:
            # Each serving process keeps its own view, as each kube-apiserver instance does; it is not
            # waited for: until it has synced, lookups it cannot answer fail under failurePolicy.
            cluster = ClusterView.connect(
                self.config.kubeconfig, observer=self.metrics, logger=self.log,
                authorized_ttl=self.config.authorization_cache_authorized_ttl,
                unauthorized_ttl=self.config.authorization_cache_unauthorized_ttl)
            self.metrics.cache_state("namespaces", False, 0)
            namespaces = cluster.namespaces
        state = self.state = ServerState(self.source, namespaces, self.metrics, self.log,
                                         body_timeout=self.config.body_timeout)
        if cluster is not None:
            state.fetch_namespace = cluster.namespaces.fetch
            state.authorizer = cluster.authorizer
            state.ready_notes["cluster-view"] = cluster.namespaces.describe
        state.ready_notes["missing-cluster-view"] = self._missing_cluster_view_note
        for kind in FindingKind:
            state.ready_notes[note_name(kind)] = partial(self._finding_note, note_name(kind))
        if self.tls is not None:
            serving_tls = self.tls
            state.ready_notes["tls-certificate"] = lambda: expiry_note(serving_tls)
        state.extra_ready_checks["background-tasks"] = lambda: not self.health.failing
        doors = "; ".join(f"{listener} {door}" for listener, door in open_doors(listeners, self.config.client_ca))
        state.ready_notes["open-to-local-users"] = lambda: doors
        if self.shadow_source is not None:
            state.shadow = ShadowEvaluator(self.shadow_source, self.metrics, self.shadow_log)
        self.metrics.export_from_start(ENDPOINTS, shadow=self.shadow_source is not None, cluster=cluster is not None)
        guard = ConnectionGuard(
            max_connections=connection_cap(self.config.max_connections, soft_limit),
            header_timeout=self.config.header_timeout, idle_timeout=self.config.idle_timeout,
            on_event=lambda reason: self.metrics.connection_events.labels(reason=reason).inc())
        guard.fast_answer = fast_reviews(state)
        # Requests have been drained by then (see below); this only bounds closing idle connections.
        # auto_decompress off: compressed bodies are refused (415), never inflated on the event loop.
        # An answer sent before its request's body was read whole (too large, too slow, cut short) is followed by
        # the connection's close after at most LINGERING_SECONDS of reading what the client still sends, as Go's
        # server waits (rstAvoidanceDelay) so that the answer is not lost to a reset; aiohttp's default, 10 s,
        # kept such a connection, and a shutdown waiting on it, that long.
        runner = GuardedAppRunner(create_app(state), guard=guard, shutdown_timeout=1.0, access_log=None,
                                  keepalive_timeout=self.config.idle_timeout, auto_decompress=False,
                                  lingering_time=LINGERING_SECONDS)
        await runner.setup()
        # Who each descriptor is, taken before any loop serves it: a descriptor closed later may be reused.
        watched = self._watched_metrics_listener(metrics_listener)

        async def open_sites() -> None:
            for listener, tls in listeners:
                # asyncio accepts up to ``backlog`` connections each time a listener is ready. A worker sharing
                # the listener takes one and goes back to its loop, so that connections opened together (a
                # client's keep-alive pool, which then stays where it landed) spread over the workers instead
                # of all going to whichever woke first; the kernel's queue keeps the supervisor's length.
                # uvloop has no such bound (libuv accepts until the queue is empty, yielding between accepts in a
                # worker: LIBUV_SINGLE_ACCEPT) and hands the backlog to listen() itself, past SharedListeningSocket: the
                # supervisor's length is given then, never 1, which would shorten the queue every worker shares.
                single = self.link is not None and not running_uvloop()
                guarded_site = GuardedSockSite(runner, listener.sock, handshake_timeout=self.config.header_timeout,
                                               ssl_context=self.tls.context if tls and self.tls else None,
                                               refused=self.tls.refusals.refuse if self.tls else lambda _r, _d: None,
                                               backlog=1 if single else ACCEPT_BACKLOG)
                watched.append(WatchedListener.of(listener.kind, listener.description, listener.sock,
                                                  guarded_site.server))
                await guarded_site.start()
                self.log.info("listening", address=listener.description)

        # A worker started while its siblings serve (a replacement) accepts nothing before its first snapshot:
        # connections meanwhile go to the siblings, so no request waits on its load and no probe it would
        # answer 503 sees the daemon unready. A process that is the only one serving accepts at once: requests
        # wait for the first load within their own deadlines, and /livez answers while it runs.
        joining = self.link is not None and self.link.spec.accept_after_first_load
        if not joining:
            await open_sites()
        self.log.info("connection limits", max_connections=guard.max_connections, open_file_limit=soft_limit,
                      header_timeout=guard.header_timeout, idle_timeout=guard.idle_timeout)

        stop = asyncio.Event()
        for stop_signal in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(stop_signal, stop.set)
        retiring = False
        if self.link is None:
            loop.add_signal_handler(signal.SIGHUP, self._reload_all)
        else:
            # Reloads are the supervisor's: a SIGHUP sent to the whole process group changes nothing here.
            loop.add_signal_handler(signal.SIGHUP, lambda: None)

            def retire() -> None:
                # The supervisor replaces this worker (its memory): its replacement already serves.
                nonlocal retiring
                retiring = True
                stop.set()

            loop.add_signal_handler(RETIRE_SIGNAL, retire)

        def supervised(name: str, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
            self.metrics.background_task(name)
            return asyncio.create_task(supervise(
                name, run, logger=self.log, health=self.health,
                on_failure=lambda task: self.metrics.background_task_failures.labels(task=task).inc()), name=name)

        background: list[asyncio.Task[None]] = []
        try:
            # The watchdog pings from the start: a first load that takes long is not a hang.
            background.append(supervised("systemd-watchdog", self.notifier.watchdog_loop))
            background.append(supervised("connection-sweeper", guard.run))
            await self._start_metrics_listener(metrics_listener, supervised, background)
            if not joining:
                background.append(supervised("listener-watch", self._listener_watch(watched, stop).run))
            if cluster is not None:
                background.append(supervised("namespace-informer", cluster.namespaces.run))
            if self.shadow_watcher is not None:
                background.append(supervised("shadow-manifest-source", self._run_shadow))
            link = self.link
            if link is None:
                # Watches first, so no change after the first load can be missed.
                self.watcher.start()
                load: asyncio.Future[ReloadResult | None] = loop.run_in_executor(None, self.source.reload, "startup")
            else:
                # From the start: the supervisor's heartbeats and scrapes are answered during the first load.
                background.append(supervised("control-channel", lambda: link.run(
                    self.source, on_result=self._on_worker_load, on_disk_state=self._on_disk_state,
                    on_shadow=self._apply_shadow, metrics=self.metrics.report)))
                state.scrape = link.scrape
                load = asyncio.ensure_future(link.first_load())
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait([load, stopped], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
            if not load.done():
                # Asked to stop while the first load was still running: nothing was ever served.
                stopped.cancel()
                return EXIT_OK
            stopped.cancel()
            # A failed first load is logged error by error; the watcher keeps retrying and the first
            # success sends READY=1 (see _on_reload).
            first = load.result()
            if link is None:
                assert first is not None
                self._on_reload(first)
                background.append(supervised("manifest-source", self.watcher.run))
                if self.config.webhook_config_dir is not None:
                    background.append(supervised("webhook-registration", self._watch_registration))
            else:
                self._on_worker_load(first)
                background.append(supervised("memory-allowance", lambda: link.watch_memory(
                    self.config.worker_memory_growth << 20, self.log)))
            state.first_load_done.set()
            if joining:
                await open_sites()
                background.append(supervised("listener-watch", self._listener_watch(watched, stop).run))
            # What the first load made is there to stay: out of the collector's walks from now on. What the
            # imports made was frozen before it (heap.imports_done).
            self.heap.settle(keep_frozen=True)
            background.append(supervised("heap-freezer", self.heap.keep_survivors_frozen))
            if self.tls is not None:
                background.append(supervised("tls-reload", self.tls.watch))
                if link is None:
                    background.append(supervised("tls-lifetime", self._certificate_lifetime().run))
            await stop.wait()
            self.log.info("shutting down; finishing in-flight requests", grace_seconds=self.config.shutdown_grace)
            return self.exit_status
        finally:
            if retiring:
                # Unlike a shutdown, nothing is refused: no new connections, every request that arrives on an
                # open one answered, idle connections closed (their clients reconnect to the other workers).
                # A connection accepted just before the listeners closed gets its first request answered too:
                # a client cannot tell it from one the other workers would have taken.
                # aiohttp's own shutdown would drop a request arriving on an idle keep-alive connection and
                # then wait out its timeout: idle connections are closed at once instead (Go's Shutdown).
                for site in list(runner.sites):
                    await site.stop()
                left = await guard.drain(self.config.header_timeout + self.config.shutdown_grace,
                                         first_requests=True)
                if left:
                    self.log.warning("retiring with connections still open; closing them", connections=left)
                else:
                    self.log.info("worker retired: its connections are closed")
            state.shutting_down = True
            state.first_load_done.set()
            self.notifier.stopping()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, RETIRE_SIGNAL):
                if self.link is not None and signum in (signal.SIGTERM, signal.SIGINT):
                    # A signal to the whole process group (Ctrl-C in a terminal, systemd's KillMode=control-group)
                    # reaches each worker and the supervisor, which then sends its own SIGTERM: at its default
                    # action that second signal would kill a worker in the middle of its shutdown, its "stopped"
                    # unsaid. The worker is stopping already; the supervisor's SIGKILL after the grace bounds it.
                    loop.add_signal_handler(signum, lambda: None)
                else:
                    loop.remove_signal_handler(signum)
            for task in background:
                task.cancel()
            # Bounded: a task that ignored its cancellation must not keep the process from exiting.
            if background:
                done, pending = await asyncio.wait(background, timeout=5.0)
                for task in done:
                    if not task.cancelled() and task.exception() is not None:
                        self.log.error("background task failed", task=task.get_name(), err=str(task.exception()))
                if pending:
                    self.log.warning("background tasks did not stop; exiting without them",
                                     tasks=[task.get_name() for task in pending])
            self.log.debug("shutdown: background tasks stopped")
            # Stop accepting first, then let running requests finish. aiohttp's own graceful shutdown
            # stops reading from connections at once, which would cut off a body still arriving, so the
            # wait for in-flight requests happens before it; idle connections are closed at once.
            for site in list(runner.sites):
                await site.stop()
            self.log.debug("shutdown: listeners closed", in_flight=state.in_flight)
            grace_ends = time.monotonic() + self.config.shutdown_grace
            await guard.drain(self.config.shutdown_grace, first_requests=False)
            if not await wait_idle(state, max(0.0, grace_ends - time.monotonic())):
                self.log.warning("requests still running after the shutdown grace period; closing them",
                                 in_flight=state.in_flight)
            if metrics_listener is not None:
                await metrics_listener.stop()
            await runner.cleanup()
            if cluster is not None:
                await cluster.close()
            self.log.debug("shutdown: connections closed")
            for path, inode in self.unix_paths:
                remove_unix_socket(path, inode)
            if self.link is None:
                self.watcher.close()
            if self.shadow_watcher is not None:
                self.shadow_watcher.close()
            self._analysis_executor.shutdown(wait=False, cancel_futures=True)
            self.notifier.close()
            if self.link is not None:
                # Every request has been answered: what this worker counted reaches the supervisor's total.
                await self.link.report_last(self.metrics.report())
            self.log.info("stopped")


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"



class _Supervisor(_Daemon):
    """``serve --workers N``: binds the listeners, validates and watches the directory, owns systemd's
    notifications, and keeps N workers serving the same snapshot (see :mod:`staticadm.server.workers`)."""

    def __init__(self, config: ServeConfig, stderr: TextIO, zygote: Zygote | None) -> None:
        super().__init__(config, stderr)
        self.pool: WorkerPool | None = None
        self.zygote = zygote
        #: A successful reload whose READY=1 (or STATUS) waits for every worker to serve its hash.
        self._pending: ReloadResult | None = None
        #: What workers show in /readyz?verbose about both directories.
        self._disk_state = DiskState(None)

    def _workers_serving(self, content_hash: str) -> int:
        pool = self.pool
        return 0 if pool is None else sum(1 for served in pool.serving().values() if served == content_hash)

    def _status_text(self, result: ReloadResult | None = None) -> str:
        text = super()._status_text(result)
        served = self.source.current
        if self.pool is not None and served is not None:
            text += f"; {self._workers_serving(served.content_hash)}/{self.pool.count} workers serving it"
        return text

    def _send(self, message: Load | NothingToServe | DiskState | ShadowLoad) -> None:
        assert self.pool is not None
        self._in_background(self.pool.broadcast(message))

    def _on_reload(self, result: ReloadResult) -> None:
        # Counted and shown before it is logged: nothing about the files (their names) may lose the failure.
        self._record_reload(result)
        if self.pool is not None:
            self._disk_state = replace(self._disk_state, problem=disk_problem(result))
            self._send(self._disk_state)
        self.reporter.report(result, retry_seconds=self.watcher.retry_seconds)
        self._analyse_later()
        self._report_missing_cluster_view(result)
        message = load_message(result)
        if message is not None:
            self._pending = result
            self._send(message)
            return
        if self.source.current is None and self.pool is not None and self.pool.latest is None:
            # Nothing valid yet: workers stop holding requests and answer 503 until a Load arrives.
            self._send(NothingToServe())
        self._notify(result)

    def _on_findings(self, notes: dict[str, str]) -> None:
        unchanged = notes == self._finding_notes
        super()._on_findings(notes)
        if self.pool is not None and not unchanged:
            self._disk_state = replace(self._disk_state, findings=tuple(sorted(notes.items())))
            self._send(self._disk_state)

    def _on_shadow_reload(self, result: ReloadResult) -> None:
        if self.pool is not None:
            self._disk_state = replace(self._disk_state, shadow_problem=shadow_problem(result))
            self._send(self._disk_state)
        super()._on_shadow_reload(result)
        served = result.served
        if self.pool is not None and result.status is ReloadStatus.SUCCESS and served is not None \
                and served.contents is not None:
            self._send(ShadowLoad(result.reason, served.contents))

    def _on_serving(self) -> None:
        """A worker reported the hash it serves."""
        pending, served = self._pending, self.source.current
        if pending is not None and served is not None and self.pool is not None and \
                self._workers_serving(served.content_hash) == self.pool.count:
            self._pending = None
            self._notify(pending)
            return
        if self.announced:
            self.notifier.status(self._status_text())

    def _own_metrics(self) -> ProcessMetrics:
        """The supervisor's series for a scrape. ``staticadm_cluster_cache_synced`` is the least over the workers
        that have reported, and a worker still starting has not (nor listed the namespaces): the supervisor
        holds it at 0 until every worker has reported once, so it never says synced for one that has not."""
        pool = self.pool
        if self.config.kubeconfig is not None and pool is not None:
            starting = any(worker.pid not in pool.metrics.running for worker in pool.workers.values())
            self.metrics.cluster_cache_synced.labels("namespaces").set(0 if starting else 1)
        return self.metrics.report()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(AcceptErrorLimiter(self.log))
        try:
            # Read here only to refuse a bad file before any worker starts: each worker reads it for itself,
            # and a file every worker fails on would otherwise restart workers forever.
            self._namespaces()
            listeners = self._listeners()
        except ListenerError as error:
            return self._fail(str(error))

        async def exposition() -> bytes:
            assert self.pool is not None
            return await self.pool.collect()

        try:
            metrics_listener = self._metrics_listener(exposition)
        except ListenerError as error:
            self._close_listeners(listeners)
            return self._fail(str(error))
        for listener, _ in listeners:
            self.log.info("listening", address=listener.description, workers=self.config.workers)
        # The workers serve the listeners; the supervisor holds them, and sees them die as the workers do.
        watched = [WatchedListener.of(listener.kind, listener.description, listener.sock)
                   for listener, _ in listeners] + self._watched_metrics_listener(metrics_listener)
        config = self.config
        if self.tls is not None:
            # Generated (or checked) once here, so workers do not race to create the same files.
            config = replace(config, tls_cert=self.tls.cert, tls_key=self.tls.key)
        pool = self.pool = WorkerPool(config.workers, config, listeners, self.log, self._on_serving,
                                      self.metrics.worker_restarts.inc, self.metrics.worker_recycles.inc,
                                      self._own_metrics, zygote=self.zygote)
        stop = asyncio.Event()
        for stop_signal in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(stop_signal, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_all)

        def supervised(name: str, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
            self.metrics.background_task(name)
            return asyncio.create_task(supervise(
                name, run, logger=self.log, health=self.health,
                on_failure=lambda task: self.metrics.background_task_failures.labels(task=task).inc()), name=name)

        background: list[asyncio.Task[None]] = []
        try:
            background.append(supervised("systemd-watchdog", self.notifier.watchdog_loop))
            self.watcher.start()
            await pool.start()
            background.extend(asyncio.create_task(pool.watch(index), name=f"worker-{index}")
                              for index in range(pool.count))
            background.append(supervised("worker-heartbeat", pool.heartbeat))
            await self._start_metrics_listener(metrics_listener, supervised, background)
            background.append(supervised("listener-watch", self._listener_watch(watched, stop).run))
            if self.tls is not None:
                # The workers serve the files; the supervisor renews them (and measures them for /metrics).
                background.append(supervised("tls-reload", self.tls.watch))
                background.append(supervised("tls-lifetime", self._certificate_lifetime().run))
            load = loop.run_in_executor(None, self.source.reload, "startup")
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait([load, stopped], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
            if not load.done():
                stopped.cancel()
                return EXIT_OK
            stopped.cancel()
            self._on_reload(load.result())
            background.append(supervised("manifest-source", self.watcher.run))
            if self.config.webhook_config_dir is not None:
                background.append(supervised("webhook-registration", self._watch_registration))
            if self.shadow_watcher is not None:
                background.append(supervised("shadow-manifest-source", self._run_shadow))
            await stop.wait()
            self.log.info("shutting down; workers finish their in-flight requests",
                          grace_seconds=self.config.shutdown_grace)
            return self.exit_status
        finally:
            self.notifier.stopping()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            if metrics_listener is not None:
                await metrics_listener.stop()
            await pool.stop(self.config.shutdown_grace)
            if self.zygote is not None:
                self.zygote.close()
            for task in background:
                task.cancel()
            await asyncio.wait(background, timeout=5.0) if background else None
            self._close_listeners(listeners)
            self.watcher.close()
            if self.shadow_watcher is not None:
                self.shadow_watcher.close()
            self._analysis_executor.shutdown(wait=False, cancel_futures=True)
            self.notifier.close()
            self.log.info("stopped")
