"""A renewal of the generated serving certificate that fails never takes the serving certificate away.

The daemon (a subprocess) holds a certificate that falls due for renewal seconds after it starts; then the
renewal meets a real fault: a full file system (a small tmpfs, filled), a read-only one (a read-only bind
mount), a CA that cannot sign (its key replaced by one that is not the CA certificate's), a directory that group
and others may now write (checked again before each write). Each time the current certificate keeps serving
every request, the failure is logged once per attempt with its cause and counted under that cause, and once the
fault is gone the next attempt, after the back-off, renews. Mounting needs root (CI runs as root): skipped, with
the reason, where mount is not permitted.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from staticadm.deploy.certs import RENEW_BEFORE, create_certificates
from tests.server.harness import DaemonFactory, wait_for
from tests.server.test_certificate_lifetime import HttpsClient, _serial

FAILURES = "staticadm_tls_certificate_renewal_failures_total"
RENEWAL_FAILED = "cannot renew the generated serving certificate; the current one keeps serving"


def _mount(*argv: str) -> None:
    completed = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        pytest.skip(f"mount {' '.join(argv)} is not permitted here: {completed.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    made: list[Path] = []
    yield made
    for path in reversed(made):
        _umount(path)


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def _failure_lines(log: str) -> list[dict[str, object]]:
    lines = []
    for line in log.splitlines():
        if RENEWAL_FAILED in line:
            lines.append(orjson.loads(line))
    return lines


Fault = Callable[[Path, Path, list[Path]], Callable[[], None]]


def _disk_full(state: Path, tls: Path, mounts: list[Path]) -> Callable[[], None]:
    filler = _fill(state)
    return filler.unlink


def _read_only(state: Path, tls: Path, mounts: list[Path]) -> Callable[[], None]:
    _mount("--bind", str(tls), str(tls))
    mounts.append(tls)
    _mount("-o", "remount,bind,ro", str(tls))

    def undo() -> None:
        _umount(tls)
        mounts.remove(tls)
    return undo


def _ca_cannot_sign(state: Path, tls: Path, mounts: list[Path]) -> Callable[[], None]:
    original = (tls / "ca.key").read_bytes()
    stranger = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (tls / "ca.key").write_bytes(stranger)

    def undo() -> None:
        (tls / "ca.key").write_bytes(original)
    return undo


def _opened_to_others(state: Path, tls: Path, mounts: list[Path]) -> Callable[[], None]:
    tls.chmod(0o777)
    return lambda: tls.chmod(0o700)


@pytest.mark.slow
@pytest.mark.parametrize(("cause", "fault", "workers"), [
    ("no_space", _disk_full, "1"), ("read_only", _read_only, "1"), ("ca", _ca_cannot_sign, "1"),
    ("unsafe_directory", _opened_to_others, "1"),
    # With workers the supervisor renews; its count reaches /metrics through whichever worker answers.
    ("ca", _ca_cannot_sign, "2")])
def test_a_failed_renewal_keeps_the_current_certificate_serving(make_daemon: DaemonFactory, tmp_path: Path,
                                                                 mounts: list[Path], cause: str, fault: Fault,
                                                                 workers: str) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if cause == "no_space":
        _mount("-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(state))
        mounts.append(state)
    tls = state / "tls"
    # Due 20 s from now: the fault is made once the daemon serves (one that opens the directory to others would
    # have it refuse to start).
    create_certificates(tls, validity=RENEW_BEFORE + datetime.timedelta(seconds=20))
    serving = _serial(tls / "serving.crt")
    daemon = make_daemon(state_dir=state, args=["--workers", workers])
    undo = fault(state, tls, mounts)
    client = HttpsClient(daemon.port or 0, tls / "ca.crt")
    client.start()
    try:
        assert wait_for(lambda: daemon.metric(FAILURES, {"cause": cause}) >= 1, timeout=30), daemon.log()[-3000:]
        # Once per attempt, with its cause: as many log lines as counted failures (read in that order, so a
        # further attempt in between can only add a line).
        counted = daemon.metric(FAILURES, {"cause": cause})
        lines = _failure_lines(daemon.log())
        assert len(lines) >= counted and all(line["cause"] == cause for line in lines), lines
        assert all(daemon.metric(FAILURES, {"cause": other}) == 0 for other in
                   ("no_space", "read_only", "unsafe_directory", "io", "ca") if other != cause)
        assert _serial(tls / "serving.crt") == serving  # nothing was renamed into place
        served_before_fix = len(client.served)
        undo()
        # The next attempt, after the back-off (10 s after a first failure, 20 after a second), renews.
        assert wait_for(lambda: bool(client.served) and client.served[-1][0] != serving, timeout=60), \
            daemon.log()[-3000:]
    finally:
        client.stop()
    assert client.failures == []
    assert served_before_fix > 0 and all(serial == serving for serial, _ in client.served[:served_before_fix])
    assert "renewed the generated serving certificate with the same CA" in daemon.log()
    assert daemon.process is not None and daemon.process.poll() is None
