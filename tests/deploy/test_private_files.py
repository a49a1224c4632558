"""Keys and state are written only where no other local user can reach them, and never through a link.

Each attack is made as another local user (uid 65534, ``nobody``) would make it: a link planted in a directory
it may write, a directory it created first, a file it owns that a link points at. The daemon (a subprocess) and
``staticadm certs`` refuse such a directory with a message naming it, its owner, its mode and the fix, and write
nothing; a key is never written into, or handed to the owner of, what a link points at.
"""

from __future__ import annotations

import datetime
import os
import stat
import subprocess
from pathlib import Path

import pytest

from staticadm.atomicfile import write_atomically
from staticadm.deploy.certs import RENEW_BEFORE, create_certificates, ensure_self_signed
from tests.deploy.conftest import run_cli
from tests.server.harness import DaemonFactory

NOBODY = 65534
VICTIM_TEXT = b"the victim's own data\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="playing another local user (uid 65534) needs root")


def _victim(path: Path) -> Path:
    """A file of the other user's, which a link planted by that user points at."""
    path.write_bytes(VICTIM_TEXT)
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o644)
    return path


def _plant_link(link: Path, target: Path) -> None:
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)


def _assert_untouched(victim: Path) -> None:
    info = victim.stat()
    assert victim.read_bytes() == VICTIM_TEXT
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (NOBODY, 0o644)


def _stopped_daemon_log(make_daemon: DaemonFactory, state: Path) -> tuple[int, str]:
    daemon = make_daemon(state_dir=state, start=False)
    daemon.start(wait=False)
    assert daemon.process is not None
    code = daemon.process.wait(timeout=60)
    return code, daemon.log()


def test_the_daemon_refuses_a_tls_directory_others_may_write(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    """The issue's first finding: state/tls mode 0777 with ``.ca.key.tmp`` linked to a victim file."""
    state = tmp_path / "state"
    tls = state / "tls"
    tls.mkdir(parents=True)
    tls.chmod(0o777)
    victim = _victim(tmp_path / "victim")
    for name in ("ca.key", "ca.crt", "serving.key", "serving.crt"):
        _plant_link(tls / f".{name}.tmp", victim)
    code, log = _stopped_daemon_log(make_daemon, state)
    assert code != 0
    assert f"refusing to write keys or state in {tls}: owner root (uid 0), mode 0777" in log, log[-2000:]
    assert f"chown root {tls} && chmod go-w {tls}" in log
    _assert_untouched(victim)
    assert not (tls / "ca.key").exists() and not (tls / "ca.key").is_symlink()


def test_the_daemon_refuses_a_state_directory_another_user_made_first(make_daemon: DaemonFactory,
                                                                       tmp_path: Path) -> None:
    """``--state-dir /tmp/...``: another user creates it first (mode 0700, its own) and would read every key."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    code, log = _stopped_daemon_log(make_daemon, state)
    assert code != 0
    assert f"refusing to write keys or state in {state}: owner nobody (uid 65534), mode 0700" in log, log[-2000:]
    assert "it belongs to nobody (uid 65534), not to root (uid 0)" in log
    assert list(state.iterdir()) == []


def test_the_daemon_refuses_a_link_in_place_of_its_tls_directory(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (state / "tls").symlink_to(elsewhere)
    code, log = _stopped_daemon_log(make_daemon, state)
    assert code != 0
    assert f"{state / 'tls'} is not a directory" in log, log[-2000:]
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_certs_refuses_a_directory_others_may_write(tmp_path: Path, mode: int) -> None:
    out = tmp_path / "tls"
    out.mkdir()
    out.chmod(mode)
    victim = _victim(tmp_path / "victim")
    _plant_link(out / ".ca.key.tmp", victim)
    result = run_cli("certs", "--out-dir", str(out))
    assert result.code == 1
    assert f"refusing to write keys or state in {out}: owner root (uid 0), mode {mode:04o}" in result.stderr
    assert "group or others may write it" in result.stderr
    _assert_untouched(victim)
    assert sorted(p.name for p in out.iterdir()) == [".ca.key.tmp"]


def test_certs_refuses_a_ca_directory_of_another_user(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    ca.mkdir(mode=0o700)
    os.chown(ca, NOBODY, NOBODY)
    result = run_cli("certs", "--ca-dir", str(ca), "--out-dir", str(tmp_path / "tls"))
    assert result.code == 1
    assert f"refusing to write keys or state in {ca}: owner nobody (uid 65534), mode 0700" in result.stderr
    assert list(ca.iterdir()) == []


def test_a_renewed_key_is_never_handed_to_the_owner_of_a_linked_file(tmp_path: Path) -> None:
    """The issue's second finding: ``serving.key`` a link to a file of uid 65534. The new key is a regular file of
    the writing user, mode 0600; the linked file is left as it was."""
    out = tmp_path / "tls"
    assert run_cli("certs", "--out-dir", str(out)).code == 0
    victim = _victim(tmp_path / "victim")
    (out / "serving.key").unlink()
    _plant_link(out / "serving.key", victim)
    result = run_cli("certs", "--out-dir", str(out), "--renew")
    assert result.code == 0, result.stderr
    info = os.lstat(out / "serving.key")
    assert stat.S_ISREG(info.st_mode)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    _assert_untouched(victim)


def test_the_daemons_renewal_never_hands_the_key_to_the_owner_of_a_linked_file(tmp_path: Path) -> None:
    tls = tmp_path / "state" / "tls"
    create_certificates(tls, validity=RENEW_BEFORE - datetime.timedelta(days=1))
    victim = _victim(tmp_path / "victim")
    (tls / "serving.key").unlink()
    _plant_link(tls / "serving.key", victim)
    assert ensure_self_signed(tmp_path / "state", create_ca=False).created
    info = os.lstat(tls / "serving.key")
    assert stat.S_ISREG(info.st_mode) and (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    _assert_untouched(victim)


def test_a_planted_temporary_is_never_opened(tmp_path: Path) -> None:
    """Whatever name another user plants beside a file (the fixed ``.NAME.tmp`` of old), the write goes to a
    fresh temporary of its own and only the final name is replaced."""
    victim = _victim(tmp_path / "victim")
    _plant_link(tmp_path / ".report.xml.tmp", victim)
    write_atomically(tmp_path / "report.xml", b"<testsuites/>", 0o600)
    assert (tmp_path / "report.xml").read_bytes() == b"<testsuites/>"
    assert stat.S_IMODE((tmp_path / "report.xml").stat().st_mode) == 0o600
    _assert_untouched(victim)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".report.xml.tmp", "report.xml", "victim"]


def _socket_daemon_log(make_daemon: DaemonFactory, run: Path) -> tuple[int, str]:
    daemon = make_daemon(start=False, https=False)
    daemon.socket_path = run / "staticadm.sock"
    daemon.start(wait=False)
    assert daemon.process is not None
    try:
        code = daemon.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        daemon.stop()
        return 0, daemon.log()
    return code, daemon.log()


def test_the_daemon_refuses_a_socket_directory_another_user_made_first(make_daemon: DaemonFactory,
                                                                        tmp_path: Path) -> None:
    """The default runtime directory is /tmp/staticadm-UID without /run/staticadm and XDG_RUNTIME_DIR: another
    user who creates it first could swap the daemon's socket for their own (or, between its bind and a chmod by
    name, for a link: the chmod of old followed it)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    os.chown(run, NOBODY, NOBODY)
    code, log = _socket_daemon_log(make_daemon, run)
    assert code != 0
    assert f"refusing to create the unix socket in {run}: owner nobody (uid 65534), mode 0755" in log, log[-2000:]
    assert list(run.iterdir()) == []


@pytest.mark.parametrize("mode", [0o1777, 0o777])
def test_a_socket_in_a_shared_directory_of_roots_is_created_with_its_mode(make_daemon: DaemonFactory,
                                                                          tmp_path: Path, mode: int) -> None:
    """``--socket /tmp/...`` (sticky), or a pod's emptyDir (0777, root's, reachable by nobody outside the pod): the
    directory's mode is the operator's; the socket has its own mode from the moment it exists."""
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(mode)
    daemon = make_daemon(start=False, https=False)
    daemon.socket_path = run / "staticadm.sock"
    daemon.start()
    info = os.lstat(run / "staticadm.sock")
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o660
    assert sorted(p.name for p in run.iterdir()) == ["staticadm.sock"]


def test_temporaries_an_interrupted_write_left_are_removed(tmp_path: Path) -> None:
    """A crash between writing a temporary and renaming it leaves a private key under a name nobody reads; the next
    write of that file removes it (and the fixed ``.NAME.tmp`` of earlier versions)."""
    out = tmp_path / "tls"
    assert run_cli("certs", "--out-dir", str(out)).code == 0
    for stale in (".serving.key.0123456789abcdef.tmp", ".serving.key.tmp", ".serving.crt.fedcba9876543210.tmp"):
        (out / stale).write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    (out / ".ca.key.0123456789abcdef.tmp").write_bytes(b"not a name the renewal writes\n")
    assert run_cli("certs", "--out-dir", str(out), "--renew").code == 0
    assert sorted(p.name for p in out.iterdir()) == [".ca.key.0123456789abcdef.tmp", "ca.crt", "ca.key",
                                                      "serving.crt", "serving.key"]


def test_only_the_key_directory_itself_is_made_private(tmp_path: Path) -> None:
    """``certs --out-dir /etc/staticadm/tls`` on a fresh node: /etc/staticadm also holds the configuration and the
    manifests the daemon's user reads, so it is made as ``mkdir -p`` makes it; only tls/ is 0700."""
    out = tmp_path / "etc" / "staticadm" / "tls"
    assert run_cli("certs", "--out-dir", str(out)).code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o777 & ~_umask()


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
