"""``staticadm certs`` and the daemon's first-start certificate: one implementation, usable by both."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from staticadm.deploy.certs import ensure_self_signed
from tests.deploy.conftest import run_cli

FILES = ("ca.crt", "ca.key", "serving.crt", "serving.key")


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _verify_for(directory: Path, host: str) -> None:
    """Chain verification as a TLS client does it: the CA as the only root, the host as the server name."""
    store = Store([_cert(directory / "ca.crt")])
    builder = PolicyBuilder().store(store)
    try:
        subject: x509.verification.Subject = x509.IPAddress(ipaddress.ip_address(host))  # type: ignore[assignment]
    except ValueError:
        subject = x509.DNSName(host)
    builder.build_server_verifier(subject).verify(_cert(directory / "serving.crt"), [])


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_creates_a_ca_and_a_serving_certificate_for_loopback(tmp_path: Path) -> None:
    out = tmp_path / "tls"
    result = run_cli("certs", "--out-dir", str(out))
    assert result.code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert _mode(out / "ca.key") == 0o600 and _mode(out / "serving.key") == 0o600
    assert _mode(out / "ca.crt") == 0o644
    for host in ("127.0.0.1", "::1", "localhost"):
        _verify_for(out, host)
    serving = _cert(out / "serving.crt")
    lifetime = serving.not_valid_after_utc - serving.not_valid_before_utc
    assert datetime.timedelta(days=364) < lifetime < datetime.timedelta(days=366)
    ca = _cert(out / "ca.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert str(out / "ca.crt") in result.stdout


def test_hosts_and_days_are_honoured(tmp_path: Path) -> None:
    result = run_cli("certs", "--out-dir", str(tmp_path), "--hosts", "10.0.0.5,cp-1.example.internal",
                     "--hosts", "localhost", "--days", "30")
    assert result.code == 0, result.stderr
    names = _cert(tmp_path / "serving.crt").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["cp-1.example.internal", "localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
    _verify_for(tmp_path, "cp-1.example.internal")
    serving = _cert(tmp_path / "serving.crt")
    assert serving.not_valid_after_utc - serving.not_valid_before_utc < datetime.timedelta(days=31)


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    assert run_cli("certs", "--out-dir", str(tmp_path)).code == 0
    before = {name: (tmp_path / name).read_bytes() for name in FILES}
    refused = run_cli("certs", "--out-dir", str(tmp_path))
    assert refused.code == 1
    assert "refusing to overwrite" in refused.stderr and "--force" in refused.stderr
    assert {name: (tmp_path / name).read_bytes() for name in FILES} == before
    forced = run_cli("certs", "--out-dir", str(tmp_path), "--force")
    assert forced.code == 0, forced.stderr
    assert (tmp_path / "ca.crt").read_bytes() != before["ca.crt"]


def test_renew_keeps_the_ca_so_the_ca_bundle_stays_valid(tmp_path: Path) -> None:
    assert run_cli("certs", "--out-dir", str(tmp_path)).code == 0
    ca_before = (tmp_path / "ca.crt").read_bytes()
    serving_before = (tmp_path / "serving.crt").read_bytes()
    renewed = run_cli("certs", "--out-dir", str(tmp_path), "--renew")
    assert renewed.code == 0, renewed.stderr
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    assert (tmp_path / "serving.crt").read_bytes() != serving_before
    _verify_for(tmp_path, "127.0.0.1")
    assert _mode(tmp_path / "serving.key") == 0o600


def test_renew_without_a_ca_fails(tmp_path: Path) -> None:
    result = run_cli("certs", "--out-dir", str(tmp_path), "--renew")
    assert result.code == 1
    assert "ca.crt" in result.stderr and not (tmp_path / "serving.crt").exists()


def test_rejects_bad_hosts_and_lifetimes(tmp_path: Path) -> None:
    bad_host = run_cli("certs", "--out-dir", str(tmp_path), "--hosts", "not a host!")
    assert bad_host.code == 2 and "neither an IP address nor a DNS name" in bad_host.stderr
    longer_than_ca = run_cli("certs", "--out-dir", str(tmp_path / "b"), "--days", "400", "--ca-days", "100")
    assert longer_than_ca.code == 2 and "outlive" in longer_than_ca.stderr
    assert run_cli("certs", "--out-dir", str(tmp_path / "c"), "--days", "0").code == 2


def test_daemon_material_and_certs_command_share_one_layout(tmp_path: Path) -> None:
    # The daemon's first start makes state/tls; `certs --renew` on that directory rotates it in place,
    # and the daemon's next start keeps the renewed pair instead of making another.
    generated = ensure_self_signed(tmp_path)
    assert generated.created
    directory = generated.ca_cert.parent
    assert run_cli("certs", "--out-dir", str(directory), "--renew").code == 0
    renewed = (directory / "serving.crt").read_bytes()
    again = ensure_self_signed(tmp_path)
    assert not again.created
    assert again.cert.read_bytes() == renewed
    _verify_for(directory, "::1")


def test_daemon_renews_a_serving_certificate_close_to_expiry(tmp_path: Path) -> None:
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=350)
    first = ensure_self_signed(tmp_path, now=past)
    old_serving = first.cert.read_bytes()
    renewed = ensure_self_signed(tmp_path)
    assert renewed.created and renewed.cert.read_bytes() != old_serving
    _verify_for(first.ca_cert.parent, "localhost")


def test_rotation_keeps_the_owner_of_the_files(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root; the behaviour is for root-run rotations")
    assert run_cli("certs", "--out-dir", str(tmp_path)).code == 0
    for name in FILES:
        os.chown(tmp_path / name, 65532, 65532)
    assert run_cli("certs", "--out-dir", str(tmp_path), "--renew").code == 0
    for name in ("serving.crt", "serving.key"):
        info = (tmp_path / name).stat()
        assert (info.st_uid, info.st_gid) == (65532, 65532), name
