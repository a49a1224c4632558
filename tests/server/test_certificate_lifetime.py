"""The serving certificate over the daemon's life: its expiry exported from start, a generated one renewed by the
same CA while the daemon runs (no restart, no failed request, with and without workers), a given one only
measured and warned about, and a CA rotated through a caBundle holding both CAs.

Time is not mocked: the real certificate code issues certificates that are due for renewal seconds after the
daemon starts (30 days and a few seconds of validity)."""

from __future__ import annotations

import datetime
import http.client
import json
import shutil
import ssl
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from staticadm.deploy.certs import RENEW_BEFORE, create_certificates
from tests.server.harness import DaemonFactory, metric_value, review, wait_for

EXPIRY = "staticadm_tls_certificate_expiry_timestamp_seconds"


def _not_after(path: Path) -> float:
    return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc.timestamp()


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


class HttpsClient(threading.Thread):
    """kube-apiserver's calls, one after the other with ``PAUSE`` between them: a new TLS connection for each
    /validate, verified with ``ca_file``; records each failure, and the serving certificate (serial, notAfter) each
    answer came with. Any time the daemon does not serve for longer than the pause (plus one call) meets a call.
    The pause keeps the client and the daemon from taking both cores for the tens of seconds a renewal test waits
    (a full handshake each time, as fast as they could: about 15 s of CPU a test, seven tests in the suite)."""

    #: Seconds between one call's end and the next call.
    PAUSE = 0.005

    def __init__(self, port: int, ca_file: Path) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.body = json.dumps(review()).encode()
        self.failures: list[str] = []
        self.served: list[tuple[int, float]] = []
        self.stopping = threading.Event()

    def call(self) -> tuple[int, float]:
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)
        try:
            connection.request("POST", "/validate", body=self.body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"status {response.status}")
            assert connection.sock is not None
            der = connection.sock.getpeercert(binary_form=True)
            assert der is not None
            certificate = x509.load_der_x509_certificate(der)
            return certificate.serial_number, certificate.not_valid_after_utc.timestamp()
        finally:
            connection.close()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.served.append(self.call())
            except (OSError, ssl.SSLError, http.client.HTTPException, RuntimeError) as error:
                self.failures.append(f"{type(error).__name__}: {error}")
            self.stopping.wait(self.PAUSE)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=15)


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_generated_certificate_is_renewed_while_serving(make_daemon: DaemonFactory, tmp_path: Path,
                                                          workers: str) -> None:
    tls = tmp_path / "state" / "tls"
    # What the daemon generated a year ago, due for renewal 20 seconds from
    # now (starting two workers on a loaded machine has taken over 8).
    create_certificates(tls, validity=RENEW_BEFORE + datetime.timedelta(seconds=20))
    ca_before = (tls / "ca.crt").read_bytes()
    old_expiry = _not_after(tls / "serving.crt")
    daemon = make_daemon(args=["--workers", workers])
    assert daemon.process is not None
    pid = daemon.process.pid
    # Exported from start, before any renewal.
    assert daemon.metric(EXPIRY, {"certificate": "serving"}) == old_expiry
    client = HttpsClient(daemon.port or 0, tls / "ca.crt")
    client.start()
    try:
        renewed = wait_for(lambda: bool(client.served) and client.served[-1][1] > old_expiry, timeout=45)
        time.sleep(0.5)  # and a little more traffic on the renewed certificate
    finally:
        client.stop()
    assert renewed, (client.failures[:5], daemon.log()[-3000:])
    assert client.failures == []
    # The old one was served first, then the new one, without a gap.
    assert client.served[0][1] == old_expiry
    new_expiry = _not_after(tls / "serving.crt")
    assert new_expiry - time.time() > 300 * 86400
    assert (tls / "ca.crt").read_bytes() == ca_before  # same CA: the caBundle kube-apiserver holds stays valid
    assert daemon.process.poll() is None and daemon.process.pid == pid  # no restart
    assert wait_for(lambda: daemon.metric(EXPIRY, {"certificate": "serving"}) == new_expiry, timeout=10)
    assert "renewed the generated serving certificate with the same CA" in daemon.log()
    assert "note: tls-certificate" not in daemon.get("/readyz?verbose").body.decode()


def test_a_given_certificate_is_measured_and_warned_about_but_never_written(make_daemon: DaemonFactory,
                                                                            tmp_path: Path) -> None:
    given = tmp_path / "given"
    create_certificates(given, validity=datetime.timedelta(days=10))
    before = {path.name: path.read_bytes() for path in given.iterdir()}
    daemon = make_daemon(args=["--tls-cert", str(given / "serving.crt"), "--tls-key", str(given / "serving.key")],
                         ca_file=given / "ca.crt")
    expiry = _not_after(given / "serving.crt")
    assert daemon.metric(EXPIRY, {"certificate": "serving"}) == expiry
    verbose = daemon.get("/readyz?verbose")
    assert verbose.status == 200  # a note, not a failed check
    text = verbose.body.decode()
    assert f"note: tls-certificate: serving certificate {given / 'serving.crt'} expires at" in text, text
    assert "(in 9.9 days)" in text or "(in 10.0 days)" in text, text
    assert wait_for(lambda: "the serving certificate given with --tls-cert expires soon" in daemon.log())
    time.sleep(1.5)
    assert {path.name: path.read_bytes() for path in given.iterdir()} == before
    assert daemon.validate(review(), via="https").status == 200


def test_the_client_ca_expiry_is_exported_too(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    clients = tmp_path / "clients"
    create_certificates(clients, ca_validity=datetime.timedelta(days=100), validity=datetime.timedelta(days=50))
    daemon = make_daemon(args=["--client-ca", str(clients / "ca.crt")], https=True,
                         client_cert=(clients / "serving.crt", clients / "serving.key"))
    assert daemon.metric(EXPIRY, {"certificate": "client-ca"}) == _not_after(clients / "ca.crt")
    assert daemon.metric(EXPIRY, {"certificate": "serving"}) > time.time() + 300 * 86400


def test_a_ca_is_rotated_through_a_bundle_holding_both(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    """docs/deployment.md's CA rotation: the new CA made elsewhere, both CAs in the caBundle, then the new files
    moved into place; kube-apiserver's calls never fail."""
    old, new, live = tmp_path / "old", tmp_path / "new", tmp_path / "live"
    create_certificates(old)
    create_certificates(new)
    live.mkdir()
    for name in ("serving.crt", "serving.key"):
        shutil.copy2(old / name, live / name)
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes((old / "ca.crt").read_bytes() + (new / "ca.crt").read_bytes())
    daemon = make_daemon(args=["--tls-cert", str(live / "serving.crt"), "--tls-key", str(live / "serving.key")],
                         ca_file=bundle)
    client = HttpsClient(daemon.port or 0, bundle)
    client.start()
    try:
        time.sleep(0.3)
        # Key first, then certificate, each atomically (what `mv` of the new files does, one by one).
        for name in ("serving.key", "serving.crt"):
            shutil.copy2(new / name, live / f".{name}.tmp")
            (live / f".{name}.tmp").rename(live / name)
        new_serial = _serial(new / "serving.crt")
        assert wait_for(lambda: bool(client.served) and client.served[-1][0] == new_serial, timeout=10), daemon.log()
        time.sleep(0.3)
    finally:
        client.stop()
    assert client.failures == []
    assert client.served[0][0] == _serial(old / "serving.crt")
    assert HttpsClient(daemon.port or 0, new / "ca.crt").call()[0] == new_serial
    with pytest.raises(ssl.SSLCertVerificationError):
        HttpsClient(daemon.port or 0, old / "ca.crt").call()
    assert metric_value(daemon.get("/metrics").body.decode(), EXPIRY, {"certificate": "serving"}) == _not_after(
        new / "serving.crt")


def test_a_generated_certificate_whose_ca_ends_first_is_reported_not_reissued_forever(make_daemon: DaemonFactory,
                                                                                      tmp_path: Path) -> None:
    tls = tmp_path / "state" / "tls"
    # A CA with 10 days left: no serving certificate it signs can last past them.
    create_certificates(tls, ca_validity=datetime.timedelta(days=10), validity=datetime.timedelta(days=5))
    daemon = make_daemon()
    assert wait_for(lambda: "the generated CA expires within 30 days" in daemon.log())
    time.sleep(2.5)
    log = daemon.log()
    assert log.count("the generated CA expires within 30 days") == 1
    assert log.count("renewed the generated serving certificate") <= 1
    assert "note: tls-certificate: serving certificate" in daemon.get("/readyz?verbose").body.decode()
    assert daemon.metric(EXPIRY, {"certificate": "serving"}) == _not_after(tls / "ca.crt")


def _log_records(text: str, message: str) -> list[dict[str, object]]:
    return [record for record in map(json.loads, filter(lambda line: line.startswith("{"), text.splitlines()))
            if record.get("msg") == message]


def test_a_start_up_renewal_says_it_kept_the_ca(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    """A generated certificate found due at start-up is renewed by the same CA, and the log says so in the words
    of a renewal while running; only a CA made now is told as new."""
    first = make_daemon(workdir=tmp_path, state_dir=tmp_path / "fresh")
    [created] = _log_records(first.log(), "serving with a certificate signed by the staticadm local CA; use it as "
                                          "caBundle")
    assert (created["ca_created"], created["serving_created"]) == (True, True)
    assert not _log_records(first.log(), "renewed the generated serving certificate with the same CA (the caBundle "
                                         "stays valid)")
    first.stop()
    first.log_path.unlink()

    tls = tmp_path / "due" / "tls"
    create_certificates(tls, validity=datetime.timedelta(days=10))  # within the 30 days: due at start-up
    ca_before = (tls / "ca.crt").read_bytes()
    daemon = make_daemon(workdir=tmp_path, state_dir=tmp_path / "due")
    [renewal] = _log_records(daemon.log(), "renewed the generated serving certificate with the same CA (the "
                                           "caBundle stays valid)")
    assert renewal["at"] == "startup" and renewal["ca"] == str(tls / "ca.crt")
    [serving] = _log_records(daemon.log(), "serving with a certificate signed by the staticadm local CA; use it as "
                                           "caBundle")
    assert (serving["ca_created"], serving["serving_created"]) == (False, True)
    assert (tls / "ca.crt").read_bytes() == ca_before
    assert _not_after(tls / "serving.crt") - time.time() > 300 * 86400
