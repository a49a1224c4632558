"""Faults on reload: the last good snapshot keeps serving, errors are logged and counted, recovery is automatic."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from staticadm.manifests.files import read_directory
from tests.server.harness import (
    READY_TIMEOUT,
    RELOADS,
    REPO_ROOT,
    REQUESTS,
    Daemon,
    DaemonFactory,
    denied_message,
    free_port,
    policy_yaml,
    wait_for,
    write_atomically,
)

V1 = "v1: pods labelled deny=true are not allowed"


def _failures(daemon: Daemon) -> float:
    return daemon.metric(RELOADS, {"status": "failure"})


def _serves(daemon: Daemon, message: str) -> bool:
    return message in (denied_message(daemon) or "")


def _fault_then_recover(daemon: Daemon, fault: str, before: float, undo: Callable[[], None], recover: str) -> None:
    """A failure is counted after ``before`` while the last good policy serves; after ``undo`` it recovers."""
    assert wait_for(lambda: _failures(daemon) > before), f"{fault}: no failed reload counted\n{daemon.log()[-3000:]}"
    assert daemon.get("/readyz").status == 200
    assert _serves(daemon, V1) or _serves(daemon, "recovered"), fault
    undo()
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml(recover))
    assert wait_for(lambda: _serves(daemon, recover)), f"{fault}: did not recover\n{daemon.log()[-3000:]}"


def test_broken_files_keep_the_last_good_snapshot_and_recover(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    manifests = daemon.manifests

    # A truncated write, in place: half a policy.
    text = policy_yaml("never served")
    before = _failures(daemon)
    (manifests / "deny.yaml").write_text(text[: len(text) // 2])
    _fault_then_recover(daemon, "truncated write", before, lambda: None, "recovered 1")

    # A control character the YAML reader refuses (an exception inside the loader, not a manifest error).
    before = _failures(daemon)
    (manifests / "bad.yaml").write_bytes(b"kind: \x1b\n")
    _fault_then_recover(daemon, "control character", before, lambda: os.unlink(manifests / "bad.yaml"),
                        "recovered 2")

    # A symlink loop.
    before = _failures(daemon)
    os.symlink("loop-b.yaml", manifests / "loop-a.yaml")
    os.symlink("loop-a.yaml", manifests / "loop-b.yaml")

    def unloop() -> None:
        os.unlink(manifests / "loop-a.yaml")
        os.unlink(manifests / "loop-b.yaml")

    _fault_then_recover(daemon, "symlink loop", before, unloop, "recovered 3")
    assert "loop-a.yaml" in daemon.log()

    # A FIFO named like a manifest must not hang the loader.
    before = _failures(daemon)
    os.mkfifo(manifests / "fifo.yaml")
    _fault_then_recover(daemon, "fifo", before, lambda: os.unlink(manifests / "fifo.yaml"), "recovered 4")
    assert daemon.metric(REQUESTS, {"code": "500"}) == 0


def test_directory_renamed_away_and_back(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = make_daemon()
    away = tmp_path / "away"
    before = _failures(daemon)
    os.rename(daemon.manifests, away)
    assert wait_for(lambda: _failures(daemon) > before)
    assert _serves(daemon, V1) and daemon.get("/readyz").status == 200
    os.rename(away, daemon.manifests)
    time.sleep(0.3)  # the rename back is the same content: nothing to swap, but the watch must be renewed
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("back and watched"))
    assert wait_for(lambda: _serves(daemon, "back and watched"))


def test_event_storm_and_files_vanishing_mid_read(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    manifests = daemon.manifests
    stop = threading.Event()
    events = 0

    def storm() -> None:
        # Files appear and vanish as fast as we can: events by the thousand, and files that are listed
        # but gone by the time they are opened.
        nonlocal events
        index = 0
        while not stop.is_set():
            path = manifests / f"churn-{index % 50}.yaml"
            path.write_text("")
            path.unlink()
            (manifests / "noise.txt").write_text(str(index))
            index += 1
            # inotify: create, open, modify, close_write, delete; then open, modify, close_write.
            events += 8

    thread = threading.Thread(target=storm)
    thread.start()
    probes: list[float] = []
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            started = time.monotonic()
            assert daemon.get("/readyz").status == 200
            assert _serves(daemon, V1)
            probes.append(time.monotonic() - started)
    finally:
        stop.set()
        thread.join()
    assert events > 3000, events
    assert max(probes) < 2.0, max(probes)
    # Coalescing: a few reloads, not one per event.
    attempts = daemon.metric(RELOADS, {"status": "success"}) + _failures(daemon)
    assert attempts < 20, attempts
    write_atomically(manifests / "deny.yaml", policy_yaml("after the storm"))
    assert wait_for(lambda: _serves(daemon, "after the storm"))


def test_read_directory_never_raises_while_files_vanish(tmp_path: Path) -> None:
    stop = threading.Event()

    def churn() -> None:
        index = 0
        while not stop.is_set():
            path = tmp_path / f"f{index % 20}.yaml"
            path.write_text("kind: X\n")
            path.unlink()
            index += 1

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(300):
            contents = read_directory(str(tmp_path), max_file_bytes=1 << 20)
            for error in contents.errors:
                assert "No such file" in error.message, error
    finally:
        stop.set()
        thread.join()


# -- faults that need an unprivileged daemon (root reads anything) ------------------------------------

NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


#: The tests that start the daemon as ``nobody`` share one worker, so the probe below runs once a run.
needs_nobody = pytest.mark.xdist_group("unprivileged-daemon")


@pytest.fixture(scope="session")
def nobody_environment() -> Iterator[dict[str, str] | None]:
    """The environment ``nobody`` runs the daemon in, if it can import it from this checkout (not from one under a
    0700 directory). Asked when a test needs it, not when the module is collected. The suite's bytecode cache is
    private, so ``nobody`` gets one of its own for the run: the probe's import compiles every module (about 1.7 s of
    CPU) and the daemons it starts then read the compiled code instead of compiling it again each."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        yield None
        return
    cache = Path(tempfile.mkdtemp(prefix="staticadm-nobody-pycache-"))
    try:
        os.chown(cache, NOBODY, NOBODY)
        environment = {"PYTHONPATH": str(REPO_ROOT), "PYTHONPYCACHEPREFIX": str(cache)}
        probe = subprocess.run([*SETPRIV, sys.executable, "-c", "import staticadm.server.main"], cwd="/",
                               env={**os.environ, **environment}, capture_output=True, timeout=60)
        yield environment if probe.returncode == 0 else None
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture
def nobody_dir(nobody_environment: dict[str, str] | None) -> Iterator[Path]:
    if nobody_environment is None:
        pytest.skip("needs root to start the daemon as an unprivileged user")
    # tmp_path lives under a 0700 directory; the unprivileged daemon needs a path it can traverse.
    base = Path(tempfile.mkdtemp(prefix="staticadm-nobody-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _nobody_daemon(base: Path, environment: dict[str, str] | None, *, state: Path | None = None) -> Daemon:
    assert environment is not None  # nobody_dir skipped the test otherwise
    manifests = base / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "deny.yaml").write_text(policy_yaml(V1))
    run = base / "run"
    run.mkdir(exist_ok=True)
    os.chown(run, NOBODY, NOBODY)
    if state is None:
        state = base / "state"
        state.mkdir(exist_ok=True)
        os.chown(state, NOBODY, NOBODY)
    return Daemon(workdir=base, manifests=manifests, socket_path=run / "staticadm.sock", port=free_port(),
                  state_dir=state, launcher=SETPRIV, env={"PYTHONPYCACHEPREFIX": environment["PYTHONPYCACHEPREFIX"]})


@needs_nobody
def test_permission_denied_on_file_and_directory(nobody_dir: Path, nobody_environment: dict[str, str] | None) -> None:
    daemon = _nobody_daemon(nobody_dir, nobody_environment).start()
    try:
        secret = daemon.manifests / "other.yaml"
        secret.write_text(policy_yaml("other", name="other"))
        assert wait_for(lambda: daemon.metric(RELOADS, {"status": "success"}) >= 2), daemon.log()[-2000:]
        before = _failures(daemon)  # read first: the reload the write wakes can be done within milliseconds
        secret.chmod(0o000)
        write_atomically(daemon.manifests / "deny.yaml", policy_yaml("not while unreadable"))
        assert wait_for(lambda: _failures(daemon) > before)
        assert "Permission denied" in daemon.log() and str(secret) in daemon.log()
        assert _serves(daemon, V1)
        secret.chmod(0o644)
        daemon.process.send_signal(1)  # type: ignore[union-attr]  # a chmod may come with no event
        assert wait_for(lambda: _serves(daemon, "not while unreadable"))

        daemon.manifests.chmod(0o000)
        before = _failures(daemon)
        daemon.process.send_signal(1)  # type: ignore[union-attr]
        assert wait_for(lambda: _failures(daemon) > before)
        assert _serves(daemon, "not while unreadable") and daemon.get("/readyz").status == 200
        daemon.manifests.chmod(0o755)
        write_atomically(daemon.manifests / "deny.yaml", policy_yaml("readable again"))
        assert wait_for(lambda: _serves(daemon, "readable again"))
    finally:
        daemon.manifests.chmod(0o755)
        daemon.stop()


@needs_nobody
def test_unwritable_state_directory(nobody_dir: Path, nobody_environment: dict[str, str] | None) -> None:
    # No certificate yet and nowhere to write one: refuse to start, naming the directory.
    state = nobody_dir / "state"
    state.mkdir()
    daemon = _nobody_daemon(nobody_dir, nobody_environment, state=state)
    daemon.start(wait=False)
    assert daemon.process is not None and daemon.process.wait(timeout=READY_TIMEOUT) == 1
    assert f"--state-dir {state}" in daemon.log() and "Permission denied" in daemon.log()

    # Certificates already there (made by a privileged first start) and a read-only directory: the
    # daemon never needs to write after its first start.
    root_daemon = Daemon(workdir=nobody_dir, manifests=daemon.manifests, socket_path=None, port=free_port(),
                         state_dir=state).start()
    root_daemon.stop()
    for path in (state / "tls").iterdir():
        os.chown(path, NOBODY, NOBODY)
    (state / "tls").chmod(0o555)
    daemon = _nobody_daemon(nobody_dir, nobody_environment, state=state).start()
    try:
        assert daemon.get("/readyz", via="https").status == 200
        assert _serves(daemon, V1)
    finally:
        daemon.stop()


def test_sigterm_while_reloads_are_settling_exits_promptly(make_daemon: DaemonFactory) -> None:
    # SIGTERM landing while the source waits out its debounce used to be swallowed by Python 3.11's
    # asyncio.wait_for, leaving the daemon running forever after "shutting down".
    daemon = make_daemon(start=False)
    for attempt in range(4):
        daemon.start()
        assert daemon.process is not None
        write_atomically(daemon.manifests / "deny.yaml", policy_yaml(f"attempt {attempt}"))
        time.sleep(0.05 + 0.04 * attempt)  # inside and around the 100 ms debounce
        daemon.process.send_signal(15)
        assert daemon.process.wait(timeout=10) == 0, daemon.log()[-2000:]
