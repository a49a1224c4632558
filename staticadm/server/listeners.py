"""Where the daemon listens: a unix socket (plain HTTP) and HTTPS on a TCP address.

kube-apiserver can only call ``https://`` webhooks, so the TCP listener always speaks TLS; the unix
socket is for local tools and proxies, and its file mode is the access control.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How often certificate files are checked for changes; stat() is cheap and, unlike inotify, follows
#: the symlink swaps Kubernetes uses for Secret volumes without extra bookkeeping.
TLS_CHECK_INTERVAL = 1.0
SERVING_VALIDITY = datetime.timedelta(days=365)
CA_VALIDITY = datetime.timedelta(days=3650)
#: A generated serving certificate this close to expiry is replaced at startup.
RENEW_BEFORE = datetime.timedelta(days=30)


class ListenerError(Exception):
    """A listener that cannot be set up; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Listener:
    kind: str  # "unix" or "https"
    sock: socket.socket
    description: str


# -- unix socket -----------------------------------------------------------------------------------


def bind_unix_socket(path: Path, mode: int) -> socket.socket:
    """Bind ``path`` with ``mode``, replacing a stale socket but never a live one or another file.

    The socket is bound under a temporary name, given its mode, and renamed into place, so there is
    no moment at which the path exists with the default (umask) permissions, and a stale socket is
    replaced atomically.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if not stat.S_ISSOCK(existing.st_mode):
            raise ListenerError(f"--socket {path}: exists and is not a socket; refusing to replace it")
        if _socket_is_live(path):
            raise ListenerError(f"--socket {path}: another process is listening on it")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(temporary))
        os.chmod(temporary, mode)
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


def bind_tcp_socket(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenerError(f"--listen {host}:{port}: {error}") from error
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
        raise ListenerError(f"--listen {host}:{port}: {error.strerror or error}") from error
    sock.setblocking(False)
    return sock


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

    def __init__(self, cert: Path, key: Path, client_ca: Path | None, logger: Any) -> None:
        self.cert = cert
        self.key = key
        self.client_ca = client_ca
        self._log = logger
        self.context = self._new_context()
        self._load_into(self.context)
        self._seen = _fingerprint(self._paths())

    def _paths(self) -> list[Path]:
        return [self.cert, self.key] + ([self.client_ca] if self.client_ca is not None else [])

    def _new_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        return context

    def _load_into(self, context: ssl.SSLContext) -> None:
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
        self._log.info("reloaded TLS serving certificate", cert=str(self.cert), key=str(self.key))
        return True

    async def watch(self, interval: float = TLS_CHECK_INTERVAL) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()


# -- self-signed material --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GeneratedTls:
    ca_cert: Path
    cert: Path
    key: Path
    created: bool


def ensure_self_signed(state_dir: Path, *, now: datetime.datetime | None = None) -> GeneratedTls:
    """A CA and a serving certificate for 127.0.0.1, ::1 and localhost under ``state_dir/tls``.

    The CA is kept across restarts so the ``caBundle`` an operator put in the webhook configuration
    stays valid; only the serving certificate is reissued when it nears expiry.
    """
    now = now or datetime.datetime.now(datetime.UTC)
    directory = state_dir / "tls"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_cert_path, ca_key_path = directory / "ca.crt", directory / "ca.key"
    cert_path, key_path = directory / "serving.crt", directory / "serving.key"
    created = False
    if ca_cert_path.exists() and ca_key_path.exists():
        ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise ListenerError(f"{ca_key_path}: expected an EC private key")
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key, now)
        _write_private(ca_key_path, _key_pem(ca_key))
        _write_public(ca_cert_path, ca_cert.public_bytes(serialization.Encoding.PEM))
        created = True
    if created or not _serving_still_good(cert_path, key_path, ca_cert, now):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _serving_certificate(key, ca_key, ca_cert, now)
        _write_private(key_path, _key_pem(key))
        _write_public(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        created = True
    return GeneratedTls(ca_cert_path, cert_path, key_path, created)


def _serving_still_good(cert_path: Path, key_path: Path, ca_cert: x509.Certificate, now: datetime.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key_path.stat()
    except (OSError, ValueError):
        return False
    return cert.issuer == ca_cert.subject and cert.not_valid_after_utc - RENEW_BEFORE > now


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: datetime.datetime) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "staticadm local CA")])
    return (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _serving_certificate(key: ec.EllipticCurvePrivateKey, ca_key: ec.EllipticCurvePrivateKey,
                         ca_cert: x509.Certificate, now: datetime.datetime) -> x509.Certificate:
    san = x509.SubjectAlternativeName([
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ])
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "staticadm")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + SERVING_VALIDITY)
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write_private(path: Path, data: bytes) -> None:
    _write_atomically(path, data, 0o600)


def _write_public(path: Path, data: bytes) -> None:
    _write_atomically(path, data, 0o644)


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    # Created with its final mode (no window where a key is world-readable) and renamed into place so
    # the TLS watcher never sees half a file.
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
