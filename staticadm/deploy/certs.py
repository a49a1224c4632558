"""The local CA and serving certificate kube-apiserver uses to reach staticadm over HTTPS.

One implementation serves two callers: the daemon creates the pair on first start when it is given no
certificate (:func:`ensure_self_signed`), and ``staticadm certs`` creates or renews it explicitly
(:func:`create_certificates`). Both write the same four files, so a directory made by one is usable by
the other:

- ``ca.crt`` / ``ca.key``: the CA; ``ca.crt`` is the webhook configuration's ``caBundle``;
- ``serving.crt`` / ``serving.key``: the HTTPS listener's certificate, signed by the CA.

``staticadm certs --ca-dir`` keeps the CA in a directory of its own, so what a daemon that is given its
certificate (the static pod) mounts holds no CA key: it never signs anything.

Private keys are written with mode 0600 and every file is replaced atomically, because the daemon
reloads the serving pair whenever the files change (rotation without a restart). Files are only written in
a :class:`~staticadm.atomicfile.PrivateDirectory` (owned by the writing user or root, not writable by group
or others): anything else is refused with an :class:`~staticadm.atomicfile.UnsafeDirectoryError` that says
how to fix it, so no other local user can plant a link there or read a key.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from staticadm.atomicfile import PrivateDirectory

SERVING_VALIDITY = datetime.timedelta(days=365)
CA_VALIDITY = datetime.timedelta(days=3650)
#: A generated serving certificate this close to expiry is replaced at startup.
RENEW_BEFORE = datetime.timedelta(days=30)
#: Clock skew allowance: a certificate is valid from slightly before it was made.
BACKDATE = datetime.timedelta(minutes=5)
#: kube-apiserver reaches a sidecar on the same host, so these are the only names it dials.
DEFAULT_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
SERVING_CERT = "serving.crt"
SERVING_KEY = "serving.key"


class CertificateError(ValueError):
    """Certificate material that cannot be used or created; the message says which and why."""


@dataclass(frozen=True, slots=True)
class GeneratedTls:
    ca_cert: Path
    cert: Path
    key: Path
    #: The serving certificate was written now (a new CA's first, or a renewal by the existing CA).
    created: bool
    #: The CA was created now (its caBundle is new); False when an existing CA signed a renewed certificate.
    ca_created: bool = False


@dataclass(frozen=True, slots=True)
class CertificateFiles:
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    #: False when an existing CA signed the new serving certificate (``--renew``).
    ca_created: bool

    @classmethod
    def in_directory(cls, directory: Path, *, ca_directory: Path | None = None,
                     ca_created: bool = False) -> CertificateFiles:
        """The serving pair in ``directory``, the CA in ``ca_directory`` (the same one unless given)."""
        ca_directory = ca_directory or directory
        return cls(ca_directory / CA_CERT, ca_directory / CA_KEY, directory / SERVING_CERT, directory / SERVING_KEY,
                   ca_created)


# -- the daemon's first start ----------------------------------------------------------------------


def ensure_self_signed(state_dir: Path, *, now: datetime.datetime | None = None,
                       create_ca: bool = True) -> GeneratedTls:
    """A CA and a serving certificate for 127.0.0.1, ::1 and localhost under ``state_dir/tls``.

    The CA is kept across restarts so the ``caBundle`` an operator put in the webhook configuration
    stays valid; only the serving certificate is reissued when it nears expiry. Without ``create_ca`` (a
    renewal while serving) a missing CA is an error rather than a new CA no webhook configuration trusts.
    """
    now = now or datetime.datetime.now(datetime.UTC)
    with PrivateDirectory.open(state_dir) as state, state.subdirectory("tls") as directory:
        files = CertificateFiles.in_directory(directory.path)
        ca_created = created = False
        if files.ca_cert.exists() and files.ca_key.exists():
            ca_cert, ca_key = load_ca(files.ca_cert, files.ca_key)
        elif not create_ca:
            raise CertificateError(f"{directory.path}: the CA ({CA_CERT}, {CA_KEY}) is missing, so the serving "
                                   "certificate cannot be renewed with it; restart the daemon to create a new CA "
                                   "(and a new caBundle)")
        else:
            ca_key = _new_key()
            ca_cert = ca_certificate(ca_key, now, CA_VALIDITY)
            _write_ca(directory, ca_key, ca_cert)
            ca_created = True
        if ca_created or not _serving_still_good(files.cert, files.key, ca_cert, now):
            _issue_serving(directory, ca_key, ca_cert, now, SERVING_VALIDITY, DEFAULT_HOSTS)
            created = True
    return GeneratedTls(files.ca_cert, files.cert, files.key, created, ca_created)


def current_generated(state_dir: Path, *, now: datetime.datetime | None = None) -> GeneratedTls | None:
    """The serving pair already under ``state_dir/tls`` if it loads as a matching pair that has not expired (what
    the daemon keeps serving when renewing it fails), else None."""
    now = now or datetime.datetime.now(datetime.UTC)
    files = CertificateFiles.in_directory(state_dir / "tls")
    try:
        ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    except (OSError, ValueError):
        return None
    if not _serving_still_good(files.cert, files.key, ca_cert, now - RENEW_BEFORE):
        return None
    return GeneratedTls(files.ca_cert, files.cert, files.key, created=False)


def _serving_still_good(cert_path: Path, key_path: Path, ca_cert: x509.Certificate, now: datetime.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return False
    # A key that is not the certificate's (a renewal interrupted between the two files) is reissued too.
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    matches = key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki)
    return matches and cert.issuer == ca_cert.subject and cert.not_valid_after_utc - RENEW_BEFORE > now


# -- staticadm certs -------------------------------------------------------------------------------


def create_certificates(directory: Path, *, hosts: Sequence[str] = DEFAULT_HOSTS,
                        validity: datetime.timedelta = SERVING_VALIDITY, ca_validity: datetime.timedelta = CA_VALIDITY,
                        force: bool = False, renew: bool = False, ca_directory: Path | None = None,
                        now: datetime.datetime | None = None) -> CertificateFiles:
    """Writes a CA and a serving certificate for ``hosts`` into ``directory`` (the CA into ``ca_directory``
    when given: then ``directory`` holds only the serving pair).

    With ``renew`` the existing CA signs a new serving certificate and is left alone, so the
    ``caBundle`` already in kube-apiserver's webhook configuration keeps verifying it: this is the
    routine rotation. Without it, existing files are only replaced with ``force`` (a new CA means a new
    ``caBundle`` everywhere).
    """
    now = now or datetime.datetime.now(datetime.UTC)
    if not hosts:
        raise CertificateError("at least one host name or IP address is required")
    names = [parse_host(host) for host in hosts]
    if validity <= datetime.timedelta(0) or ca_validity <= datetime.timedelta(0):
        raise CertificateError("certificate lifetimes must be positive")
    if validity > ca_validity and not renew:
        raise CertificateError("the serving certificate cannot outlive its CA: give fewer --days or more --ca-days")
    files = CertificateFiles.in_directory(directory, ca_directory=ca_directory)
    with PrivateDirectory.open(directory) as serving_dir, \
            PrivateDirectory.open(ca_directory or directory) as ca_dir:
        if renew:
            ca_cert, ca_key = load_ca(files.ca_cert, files.ca_key)
            if ca_cert.not_valid_after_utc < now + validity:
                raise CertificateError(f"{files.ca_cert}: the CA expires on "
                                       f"{ca_cert.not_valid_after_utc:%Y-%m-%d}, before the renewed serving "
                                       "certificate would; create a new CA with --force")
            _issue_serving(serving_dir, ca_key, ca_cert, now, validity, names)
            return files
        existing = [path for path in (files.ca_cert, files.ca_key, files.cert, files.key)
                    if os.path.lexists(path)]
        if existing and not force:
            raise FileExistsError(f"refusing to overwrite {', '.join(str(p) for p in existing)}: use --renew to "
                                  "reissue the serving certificate with the existing CA, or --force to replace all")
        ca_key = _new_key()
        ca_cert = ca_certificate(ca_key, now, ca_validity)
        _write_ca(ca_dir, ca_key, ca_cert)
        _issue_serving(serving_dir, ca_key, ca_cert, now, validity, names)
    return CertificateFiles.in_directory(directory, ca_directory=ca_directory, ca_created=True)


def parse_host(host: str) -> str:
    """``host`` checked to be an IP address or a DNS name, so a typo fails here and not in a handshake."""
    text = host.strip()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    valid = bool(text) and len(text) <= 253 and all(
        0 < len(label) <= 63 and label[0] != "-" and label[-1] != "-"
        and all(ch.isascii() and (ch.isalnum() or ch == "-") for ch in label)
        for label in labels)
    if not valid:
        raise CertificateError(f"{host!r} is neither an IP address nor a DNS name")
    return text.lower()


def load_ca(cert_path: Path, key_path: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        ca_cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except FileNotFoundError as error:
        raise CertificateError(f"{error.filename}: no such file (create the CA first)") from error
    except ValueError as error:
        raise CertificateError(f"{cert_path}, {key_path}: not a PEM certificate and key: {error}") from error
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{key_path}: expected an EC private key")
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if ca_key.public_key().public_bytes(*spki) != ca_cert.public_key().public_bytes(*spki):
        raise CertificateError(f"{key_path} is not the key of {cert_path}")
    return ca_cert, ca_key


# -- building blocks -------------------------------------------------------------------------------


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: accepted by every TLS stack kube-apiserver is built with, and cheap handshakes.
    return ec.generate_private_key(ec.SECP256R1())


def _issue_serving(directory: PrivateDirectory, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
                   now: datetime.datetime, validity: datetime.timedelta, hosts: Sequence[str]) -> None:
    key = _new_key()
    cert = serving_certificate(key, ca_key, ca_cert, now, validity, hosts)
    # Both written before either is renamed into place (a full disk fails before any file changes), key first:
    # the daemon only reloads once both files load as a matching pair, so the moment in between (new key, old
    # certificate) is rejected and the previous pair keeps serving.
    directory.write_together([(SERVING_KEY, _key_pem(key), 0o600),
                              (SERVING_CERT, cert.public_bytes(serialization.Encoding.PEM), 0o644)])


def _write_ca(directory: PrivateDirectory, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    directory.write_together([(CA_KEY, _key_pem(key), 0o600), (CA_CERT, cert.public_bytes(serialization.Encoding.PEM),
                                                                0o644)])


def ca_certificate(key: ec.EllipticCurvePrivateKey, now: datetime.datetime,
                   validity: datetime.timedelta = CA_VALIDITY) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "staticadm local CA")])
    return (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def serving_certificate(key: ec.EllipticCurvePrivateKey, ca_key: ec.EllipticCurvePrivateKey,
                        ca_cert: x509.Certificate, now: datetime.datetime,
                        validity: datetime.timedelta = SERVING_VALIDITY,
                        hosts: Sequence[str] = DEFAULT_HOSTS) -> x509.Certificate:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "staticadm")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        # Never past the CA: a chain is only as valid as its shortest-lived certificate.
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
