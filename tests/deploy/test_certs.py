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


def test_ca_dir_keeps_the_ca_key_out_of_the_serving_directory(tmp_path: Path) -> None:
    ca, tls = tmp_path / "ca", tmp_path / "tls"
    result = run_cli("certs", "--ca-dir", str(ca), "--out-dir", str(tls))
    assert result.code == 0, result.stderr
    assert sorted(path.name for path in ca.iterdir()) == ["ca.crt", "ca.key"]
    assert sorted(path.name for path in tls.iterdir()) == ["serving.crt", "serving.key"]
    assert _mode(ca) == 0o700 and _mode(ca / "ca.key") == 0o600
    store = Store([_cert(ca / "ca.crt")])
    PolicyBuilder().store(store).build_server_verifier(x509.DNSName("localhost")).verify(_cert(tls / "serving.crt"), [])
    before = _cert(tls / "serving.crt").serial_number
    renewed = run_cli("certs", "--ca-dir", str(ca), "--out-dir", str(tls), "--renew")
    assert renewed.code == 0, renewed.stderr
    assert _cert(tls / "serving.crt").serial_number != before
    PolicyBuilder().store(store).build_server_verifier(x509.DNSName("localhost")).verify(_cert(tls / "serving.crt"), [])
    assert sorted(path.name for path in tls.iterdir()) == ["serving.crt", "serving.key"]


def test_the_static_pod_as_documented_mounts_no_ca_key(tmp_path: Path) -> None:
    """The pod header's `staticadm certs` step, run as written under a temporary root: no hostPath the pod mounts
    holds a CA key (the daemon given --tls-cert never signs anything)."""
    import shlex

    import yaml

    from tests.deploy.conftest import KUBE_APISERVER

    manifest = (KUBE_APISERVER / "staticadm-pod.yaml").read_text()
    [step] = [line.removeprefix("#").strip() for line in manifest.splitlines()
              if line.startswith("#") and line.removeprefix("#").strip().startswith("staticadm certs ")]
    argv = shlex.split(step.split("(")[0])
    root = tmp_path / "node"
    rerooted = [str(root) + word if word.startswith("/etc/") else word for word in argv[1:]]
    result = run_cli(*rerooted)
    assert result.code == 0, result.stderr
    pod = yaml.safe_load(manifest)
    mounted = [root / volume["hostPath"]["path"].lstrip("/") for volume in pod["spec"]["volumes"]
               if "hostPath" in volume]
    tls = root / "etc/staticadm/tls"
    assert tls in mounted
    for path in mounted:
        files = [path] if path.is_file() else list(path.rglob("*")) if path.is_dir() else []
        for file in files:
            assert b"PRIVATE KEY" not in file.read_bytes() or file == tls / "serving.key", file
    # The caBundle the header names is the CA that signed what the pod serves.
    assert "--ca-file /etc/staticadm/ca/ca.crt" in manifest
    store = Store([_cert(root / "etc/staticadm/ca/ca.crt")])
    PolicyBuilder().store(store).build_server_verifier(x509.IPAddress(ipaddress.ip_address("127.0.0.1"))).verify(
        _cert(tls / "serving.crt"), [])
