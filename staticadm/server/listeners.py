"""Where the daemon listens: a unix socket (plain HTTP) and HTTPS on a TCP address.

kube-apiserver can only call ``https://`` webhooks, so the TCP listener always speaks TLS; the unix
socket is for local tools and proxies, and its file mode is the access control.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import socket
import ssl
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

# The daemon's first-start certificate lives with ``staticadm certs`` so there is one implementation;
# re-exported here because the daemon's TLS setup reads it as part of the listeners.
from staticadm.atomicfile import UnsafeDirectoryError, refuse_unless_owned
from staticadm.deploy.certs import GeneratedTls, ensure_self_signed

__all__ = ["GeneratedTls", "Listener", "ListenerError", "ServingTls", "bind_tcp_socket", "bind_unix_socket",
           "ensure_self_signed", "remove_unix_socket", "socket_inode", "split_activated"]

#: How often certificate files are checked for changes; stat() is cheap and, unlike inotify, follows
#: the symlink swaps Kubernetes uses for Secret volumes without extra bookkeeping.
TLS_CHECK_INTERVAL = 1.0
#: What makes each TLS file, for the error that names the one a start is missing.
TLS_FILE_ORIGIN = ("`staticadm certs --ca-dir /etc/staticadm/ca --out-dir DIR` creates the serving certificate and "
                   "key (docs/deployment.md, \"Certificates\"); without --tls-cert the daemon makes its own under "
                   "--state-dir")
CLIENT_CA_ORIGIN = ("`kubeadm init` (and `kubeadm join --control-plane`) creates kubeadm's front-proxy CA, "
                    "/etc/kubernetes/pki/front-proxy-ca.crt; without kubeadm, name the CA of kube-apiserver's "
                    "--proxy-client-cert-file (docs/deployment.md, \"kube-apiserver 1.36+\")")


#: How often refused TLS handshakes are logged for one reason (the line counts those not logged).
HANDSHAKE_LOG_INTERVAL = 10.0
#: OpenSSL's reasons for a refused handshake, in the operator's terms.
HANDSHAKE_HINTS = {
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "the client presented no certificate, and client-ca requires one "
                                         "(kube-apiserver: the AdmissionConfiguration's kubeConfigFile; curl: --cert "
                                         "and --key, or use the unix socket)",
    "CERTIFICATE_VERIFY_FAILED": "the client's certificate is not signed by client-ca (or has expired)",
    "NO_SHARED_CIPHER": "the client offers none of the TLS 1.2 ECDHE AES-GCM/CHACHA20 suites",
    "UNSUPPORTED_PROTOCOL": "the client offers only TLS versions older than 1.2",
    "WRONG_VERSION_NUMBER": "the client did not speak TLS (plain HTTP to the HTTPS port?)",
    "HTTP_REQUEST": "the client sent plain HTTP to the HTTPS port (answered 400, as Go's net/http answers it)",
    "NOT_TLS": "the client did not speak TLS: its first bytes are no TLS record (closed at once)",
}


class HandshakeFailures:
    """Refused TLS handshakes: each counted by reason, logged at most once per interval per reason."""

    def __init__(self, logger: Any, count: Callable[[str], None], interval: float = HANDSHAKE_LOG_INTERVAL) -> None:
        self._log = logger
        self._count = count
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def __call__(self, error: ssl.SSLError) -> None:
        self.refuse(error.reason or type(error).__name__, str(error))

    def refuse(self, reason: str, detail: str) -> None:
        """A refused client, by OpenSSL or before it (``tls_front``): counted, and logged unless this reason
        was logged within the interval."""
        self._count(reason)
        now = time.monotonic()
        if now - self._last.get(reason, -self._interval) < self._interval:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
            return
        self._last[reason] = now
        self._log.warning("refused a TLS handshake", reason=reason,
                          hint=HANDSHAKE_HINTS.get(reason, "see the TLS error"), err=detail,
                          not_logged_since_last=self._suppressed.pop(reason, 0))


def _reporting_ssl_object(report: Callable[[ssl.SSLError], None]) -> type[ssl.SSLObject]:
    """An SSLObject class that reports the handshakes it refuses (asyncio drops those errors silently)."""

    class ReportingSSLObject(ssl.SSLObject):
        #: The handshake error, once OpenSSL has refused the client.
        refused: ssl.SSLError | None = None
        #: Told when OpenSSL refuses the client, to close the connection once the alert is out (tls_front).
        on_refused: Callable[[], None] | None = None
        #: Told once, when OpenSSL first has bytes for the client: its whole ClientHello arrived (tls_front).
        on_answered: Callable[[], None] | None = None
        #: The BIO OpenSSL writes to the client through (set with on_answered).
        outgoing: ssl.MemoryBIO | None = None

        def do_handshake(self) -> None:
            if self.refused is not None:
                raise self.refused
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                answered = self.on_answered
                if answered is not None and self.outgoing is not None and self.outgoing.pending:
                    self.on_answered = None
                    answered()
                raise
            except ssl.SSLError as error:
                report(error)
                # asyncio closes a failed handshake without writing the alert OpenSSL queued for the client
                # ("certificate required", "unknown ca"), so the client sees only a closed connection. Said
                # to want more input first, it writes what is queued; the next call (the client's next bytes
                # or its close) fails for real, and on_refused ends the connection soon after the alert.
                self.refused = error
                if self.on_refused is not None:
                    self.on_refused()
                raise ssl.SSLWantReadError(str(error)) from error

    return ReportingSSLObject


#: Mozilla's "intermediate" TLS 1.2 suites, which kube-apiserver as a webhook client offers.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


class ListenerError(Exception):
    """A listener that cannot be set up; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Listener:
    kind: str  # "unix" or "https"
    sock: socket.socket
    description: str


def open_doors(listeners: Sequence[tuple[Listener, bool]], client_ca: Path | None) -> list[tuple[str, str]]:
    """What lets any local user in: an HTTPS listener that asks no client certificate (every local user reaches
    loopback), a unix socket whose mode lets other users connect (connecting needs write permission). Said at
    start and in /readyz?verbose, never refused: a first run from a checkout is exactly this, on purpose.
    Each as (the listener, what is open)."""
    doors = []
    for listener, tls in listeners:
        if tls and client_ca is None:
            doors.append((listener.description, "asks no client certificate (no --client-ca): every local user "
                          "can send reviews and read /metrics"))
        elif not tls:
            mode = _socket_mode(listener)
            if mode is not None and mode & 0o002:
                doors.append((listener.description, f"mode {mode:04o}: every local user can connect (give "
                              "--socket-mode 0660, or SocketMode=0660 under socket activation)"))
    return doors


def _socket_mode(listener: Listener) -> int | None:
    """The permission bits of a unix socket's file, if it has one (an abstract or unnamed socket has none). A socket
    we bound is named by its description (``unix:PATH``): it was bound under a temporary name, then renamed."""
    if listener.description.startswith("unix:"):
        name: Any = listener.description.removeprefix("unix:")
    else:
        try:
            name = listener.sock.getsockname()
        except OSError:
            return None
    if not isinstance(name, str) or not name or name.startswith("\0"):
        return None
    try:
        return stat.S_IMODE(os.stat(name).st_mode)
    except OSError:
        return None


# -- unix socket -----------------------------------------------------------------------------------


def bind_unix_socket(path: Path, mode: int) -> socket.socket:
    """Bind ``path`` with ``mode``, replacing a stale socket but never a live one or another file.

    The socket is bound under a fresh temporary name, created with its mode (the umask set for the bind: a
    chmod by name would follow a link put in its place), and renamed into place, so there is no moment at
    which the path exists with other permissions, and a stale socket is replaced atomically. Its directory must
    belong to this user or root: one another user made first (``/tmp/staticadm-UID``) would let them put their own
    socket in the daemon's place. Its mode is the operator's: a pod's emptyDir is 0777 and reachable by nobody
    else.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    try:
        refuse_unless_owned(path.parent, os.stat(path.parent), what="create the unix socket in", shared_ok=True)
    except UnsafeDirectoryError as error:
        raise ListenerError(f"--socket {path}: {error}") from None
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if not stat.S_ISSOCK(existing.st_mode):
            raise ListenerError(f"--socket {path}: exists and is not a socket; refusing to replace it")
        if _socket_is_live(path):
            raise ListenerError(f"--socket {path}: another process is listening on it")
    # No longer than the usual socket name: a path within AF_UNIX's 107 bytes must stay so while temporary.
    temporary = path.with_name(f".{secrets.token_hex(6)}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # The process's umask, for the bind only: start-up, before any thread that creates files.
        umask = os.umask(0o777 & ~mode)
        try:
            sock.bind(str(temporary))
        finally:
            os.umask(umask)
        os.replace(temporary, path)
        sock.listen(128)
    except OSError as error:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise ListenerError(f"--socket {path}: {error.strerror or error}") from error
    sock.setblocking(False)
    return sock


def _socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        # Unknown state (e.g. permission denied): assume live rather than delete someone's socket.
        return True
    finally:
        probe.close()
    return True


def socket_inode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except OSError:
        return None


def remove_unix_socket(path: Path, inode: int | None) -> None:
    """Unlink our socket file at shutdown, unless another process has replaced it meanwhile."""
    if inode is not None and socket_inode(path) == inode:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# -- TCP -------------------------------------------------------------------------------------------


def bind_tcp_socket(host: str, port: int, *, option: str = "listen") -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenerError(f"--{option} {host}:{port}: {error}") from error
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        sock.close()
        hint = ""
        if error.errno == errno.EADDRINUSE:
            # 8443 is also minikube's kube-apiserver port and a common one for HA load balancers in front of it.
            hint = (f"; another program listens there (`ss -ltnp 'sport = :{port}'` names it): give staticadm another "
                    "port here and the same one in the webhook configuration's URL (webhook-config --url) and the "
                    "webhook kubeconfig's user entry")
        raise ListenerError(f"--{option} {host}:{port}: {error.strerror or error}{hint}") from error
    sock.setblocking(False)
    return sock


class SharedListeningSocket(socket.socket):
    """A listening socket inherited from the process that owns it (the worker supervisor), shared with the
    other workers. Its backlog is the owner's: asyncio calls ``listen()`` again when it starts serving,
    and that must not change the queue every worker accepts from."""

    def listen(self, backlog: int = 0, /) -> None:
        del backlog


def split_activated(sockets: Sequence[socket.socket]) -> tuple[list[socket.socket], list[socket.socket]]:
    """Activated sockets as (unix, tcp): unix ones serve plain HTTP, TCP ones HTTPS."""
    unix: list[socket.socket] = []
    tcp: list[socket.socket] = []
    for sock in sockets:
        sock.setblocking(False)
        (unix if sock.family == socket.AF_UNIX else tcp).append(sock)
    return unix, tcp


# -- TLS -------------------------------------------------------------------------------------------


def _fingerprint(paths: Sequence[Path]) -> tuple[Any, ...]:
    marks: list[Any] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            marks.append(None)
            continue
        marks.append((info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size))
    return tuple(marks)


class ServingTls:
    """The HTTPS listener's SSL context, with the certificate reloaded in place when its files change.

    aiohttp binds one SSLContext per site, so rotation reloads that same context: OpenSSL uses the
    context's current certificate for each new handshake, and open connections keep theirs. A new pair
    is first loaded into a scratch context so that a half-written or mismatched pair is rejected
    without touching the one serving.
    """

    def __init__(self, cert: Path, key: Path, client_ca: Path | None, logger: Any,
                 count_refused: Callable[[str], None] = lambda _reason: None,
                 on_loaded: Callable[[ServingTls], None] = lambda _tls: None) -> None:
        self.cert = cert
        self.key = key
        self.client_ca = client_ca
        self._log = logger
        #: When each certificate in use stops being valid (seconds since the epoch): ``serving``, and
        #: ``client-ca`` (its first certificate to expire) with --client-ca. Read from the files just loaded.
        self.expiries: dict[str, float] = {}
        #: Called after the first load and after every reload (the expiry metric, the renewal's schedule).
        self.on_loaded = on_loaded
        self.context = self._new_context()
        self._load_into(self.context)
        #: Every refused client of the listener, by OpenSSL or before it.
        self.refusals = HandshakeFailures(logger, count_refused)
        self.context.sslobject_class = _reporting_ssl_object(self.refusals)
        self._seen = _fingerprint(self._paths())
        self.expiries = self._read_expiries()
        on_loaded(self)

    def _paths(self) -> list[Path]:
        return [self.cert, self.key] + ([self.client_ca] if self.client_ca is not None else [])

    def _new_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # Every context, including those built when the files rotate, offers only forward-secret AEAD
        # suites on TLS 1.2 (TLS 1.3 suites are all strong).
        context.set_ciphers(TLS12_CIPHERS)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def _unreadable(self) -> str | None:
        """The first file of the three that cannot be opened, named with its option and what makes it: a start
        on a node not yet prepared names the one step that is missing."""
        files = [("--tls-cert", self.cert, TLS_FILE_ORIGIN), ("--tls-key", self.key, TLS_FILE_ORIGIN)]
        if self.client_ca is not None:
            files.append(("--client-ca", self.client_ca, CLIENT_CA_ORIGIN))
        for option, path, origin in files:
            try:
                with path.open("rb"):
                    pass
            except FileNotFoundError:
                return f"{option} {path}: no such file; {origin}"
            except OSError as error:
                return (f"{option} {path}: cannot be read by uid {os.geteuid()}: {error.strerror or error}; "
                        f"{origin}")
        return None

    def _load_into(self, context: ssl.SSLContext) -> None:
        problem = self._unreadable()
        if problem is not None:
            raise ListenerError(problem)
        try:
            context.load_cert_chain(str(self.cert), str(self.key))
            if self.client_ca is not None:
                context.load_verify_locations(cafile=str(self.client_ca))
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as error:
            raise ListenerError(f"cannot load TLS material ({self.cert}, {self.key}"
                                f"{', ' + str(self.client_ca) if self.client_ca else ''}): {error}") from error

    def reload_if_changed(self) -> bool:
        seen = _fingerprint(self._paths())
        if seen == self._seen:
            return False
        try:
            self._load_into(self._new_context())
        except ListenerError as error:
            # Writers rarely replace cert and key in one step; the next check retries with both.
            self._log.warning("new TLS material not usable yet; still serving the previous certificate",
                              err=str(error))
            return False
        self._load_into(self.context)
        self._seen = seen
        self.expiries = self._read_expiries()
        self._log.info("reloaded TLS serving certificate", cert=str(self.cert), key=str(self.key))
        self.on_loaded(self)
        return True

    def _read_expiries(self) -> dict[str, float]:
        """The files' notAfter, read after they loaded (a file replaced since is reloaded, and read, again)."""
        expiries: dict[str, float] = {}
        for name, path in (("serving", self.cert), ("client-ca", self.client_ca)):
            if path is None:
                continue
            try:
                certificates = x509.load_pem_x509_certificates(path.read_bytes())
            except (OSError, ValueError) as error:
                self._log.warning("cannot read the expiry of a TLS certificate in use", file=str(path), err=str(error))
                continue
            if name == "serving":
                certificates = certificates[:1]  # the leaf; a chain's CAs follow it
            expiries[name] = min(certificate.not_valid_after_utc.timestamp() for certificate in certificates)
        return expiries

    async def watch(self, interval: float = TLS_CHECK_INTERVAL) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()
