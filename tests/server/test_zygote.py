"""``serve --workers N`` forks its workers from the zygote, a copy of the supervisor made before it runs
(``staticadm/server/zygote.py``); without it, or once it is gone, workers are fresh interpreters again."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from staticadm.server.zygote import REPLY_SECONDS
from tests.server.harness import Daemon, DaemonFactory, review, wait_for
from tests.server.test_workers import LOOPING_POLICY, _alive, _all_serving, _start_workers

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs unix sockets")


def _lines(daemon: Daemon, message: str) -> list[dict[str, Any]]:
    return [entry for entry in map(json.loads, filter(lambda line: line.startswith("{"), daemon.log().splitlines()))
            if entry.get("msg") == message]


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as status:
        return int(status.read().rsplit(")", 1)[1].split()[1])


def _title(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()


def _descriptors(pid: int) -> list[str]:
    """What each of ``pid``'s descriptors is (``socket:[inode]``, ``anon_inode:[pidfd]``, a path)."""
    found = []
    for entry in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{entry}"))
        except FileNotFoundError:
            continue
    return found


def _zygote(daemon: Daemon) -> int:
    [started] = _lines(daemon, "zygote started: workers are forked from it")
    return int(started["pid"])


def test_workers_are_forked_by_the_zygote_and_named_in_ps(make_daemon: DaemonFactory) -> None:
    daemon, serving = _start_workers(make_daemon)
    assert daemon.process is not None
    zygote = _zygote(daemon)
    assert _parent(zygote) == daemon.process.pid
    assert _title(zygote) == f"staticadm serve: zygote of {daemon.process.pid} (forks its workers)"
    started = _lines(daemon, "worker started")
    assert [entry["forked"] for entry in started] == [True, True], started
    for entry in started:
        assert entry["pid"] in serving and _parent(entry["pid"]) == zygote
        assert _title(entry["pid"]) == f"staticadm serve: worker {entry['worker']}"
    # The zygote holds no socket of the daemon's: its channel to the supervisor only (and pidfds of its workers).
    sockets = [what for what in _descriptors(zygote) if what.startswith("socket:")]
    assert len(sockets) == 1, _descriptors(zygote)
    # A worker holds what it was given (stdin from /dev/null, the log, its listeners and control channel), not
    # the zygote's channel nor pidfds of its siblings.
    for pid in serving:
        held = _descriptors(pid)
        assert not any("pidfd" in what for what in held), held
        assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False


def test_a_replacement_is_forked_and_the_zygote_outlives_no_supervisor(make_daemon: DaemonFactory) -> None:
    daemon, serving = _start_workers(make_daemon)
    zygote = _zygote(daemon)
    victim = next(iter(serving))
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: (now := _all_serving(daemon, 2)) is not None and victim not in now, timeout=30), \
        daemon.log()
    started = _lines(daemon, "worker started")
    assert len(started) == 3 and started[-1]["forked"] is True and _parent(started[-1]["pid"]) == zygote
    [died] = _lines(daemon, "worker died; replacing it")
    assert died["pid"] == victim and died["how"] == "killed by SIGKILL"
    assert daemon.stop() == 0
    # Stopping drained every worker, and the zygote read the supervisor's end of their channel close.
    for pid in (zygote, *(entry["pid"] for entry in started)):
        assert wait_for(lambda pid=pid: not _alive(pid), timeout=10), f"{pid} still running"


def test_without_the_zygote_workers_are_fresh_interpreters(make_daemon: DaemonFactory) -> None:
    """The zygote killed (by an operator, the OOM killer): the supervisor says so at once, a worker that dies later
    is replaced by a fresh interpreter, and the workers the zygote had forked serve on until they end, their end
    seen without an exit status (only their parent could have read it)."""
    daemon, serving = _start_workers(make_daemon)
    zygote = _zygote(daemon)
    os.kill(zygote, signal.SIGKILL)
    assert wait_for(lambda: bool(_lines(daemon, "the zygote is gone; workers are started as fresh interpreters from "
                                                "now on (each imports the daemon before it serves)")), timeout=10)
    assert wait_for(lambda: not _alive(zygote), timeout=10), "the zygote is left a zombie"
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False
    victim = next(iter(serving))
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: (now := _all_serving(daemon, 2)) is not None and victim not in now, timeout=60), \
        daemon.log()
    [died] = _lines(daemon, "worker died; replacing it")
    assert died["how"] == "exit status unknown (its zygote had exited: the worker was no longer its child)"
    replacement = _lines(daemon, "worker started")[-1]
    assert replacement["forked"] is False and _title(replacement["pid"]) == f"staticadm serve: worker {died['worker']}"
    assert daemon.process is not None and _parent(replacement["pid"]) == daemon.process.pid
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False
    survivor = next(pid for pid in serving if pid != victim)
    assert daemon.stop() == 0
    assert wait_for(lambda: not _alive(survivor) and not _alive(replacement["pid"]), timeout=10)



def test_a_stopped_zygote_holds_up_no_replacement_and_no_shutdown(make_daemon: DaemonFactory) -> None:
    """SIGSTOP on the zygote (a debugger, a stray signal): a worker that dies is not reaped by it, so the supervisor,
    which sees the end on the worker's pidfd, kills the zygote once it has not reported the exit within its reply
    time, and starts the replacement as a fresh interpreter; the daemon stops as usual."""
    daemon, serving = _start_workers(make_daemon)
    zygote = _zygote(daemon)
    os.kill(zygote, signal.SIGSTOP)
    victim = next(iter(serving))
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: (now := _all_serving(daemon, 2)) is not None and victim not in now, timeout=60), \
        daemon.log()
    [lost] = _lines(daemon, "the zygote is gone; workers are started as fresh interpreters from now on (each "
                            "imports the daemon before it serves)")
    assert lost["reason"] == f"it did not report the exit of worker {victim} within {REPLY_SECONDS:g} s; killed"
    assert _lines(daemon, "worker started")[-1]["forked"] is False
    assert wait_for(lambda: not _alive(zygote), timeout=10), "the stopped zygote is still there"
    assert daemon.stop() == 0


@pytest.mark.slow
def test_a_stopped_zygote_holds_up_no_recycling(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    """A worker replaced for its memory asks a stopped zygote for its successor: no answer within the reply time,
    the zygote is killed and the successor is a fresh interpreter; no request fails meanwhile."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "loops.yaml").write_text(LOOPING_POLICY)
    daemon = make_daemon(policy=None, manifests=manifests, args=["--workers", "2", "--worker-memory-growth", "1"])
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=30), daemon.log()
    zygote = _zygote(daemon)
    os.kill(zygote, signal.SIGSTOP)
    failures = []

    def recycled() -> bool:
        for index in range(20):
            answer = daemon.validate(review({"app": "web"}, uid=f"r{index}"))
            if answer.status != 200 or answer.json()["response"]["allowed"] is not True:
                failures.append(answer.body)
        return daemon.metric("staticadm_worker_recycles_total") >= 1 and any(
            entry["forked"] is False for entry in _lines(daemon, "worker started"))

    assert wait_for(recycled, timeout=90), daemon.log()
    assert failures == []
    [lost] = _lines(daemon, "the zygote is gone; workers are started as fresh interpreters from now on (each "
                            "imports the daemon before it serves)")
    assert lost["reason"] == f"it did not answer within {REPLY_SECONDS:g} s; killed"
    assert wait_for(lambda: not _alive(zygote), timeout=10), "the stopped zygote is still there"
    assert daemon.stop() == 0


#: Runs the rest of its command line as a child subreaper (prctl PR_SET_CHILD_SUBREAPER, kept across execve): as PID 1
#: of the container image is, it inherits the orphans of its descendants.
SUBREAPER = """
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER): " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_a_supervisor_that_inherits_orphans_reads_their_status(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    """The zygote gone, a worker it forked is the supervisor's child when the supervisor is PID 1 (the container
    image) or a subreaper: its end is then reaped and reported with its status, and it leaves no zombie."""
    launcher = tmp_path / "subreaper.py"
    launcher.write_text(SUBREAPER)
    daemon = make_daemon(start=False, args=["--workers", "2"])
    daemon.launcher = [sys.executable, str(launcher)]
    daemon.start()
    assert wait_for(lambda: _all_serving(daemon, 2) is not None, timeout=30), daemon.log()
    serving = _all_serving(daemon, 2)
    assert serving is not None and daemon.process is not None
    supervisor, zygote = daemon.process.pid, _zygote(daemon)
    os.kill(zygote, signal.SIGKILL)
    assert wait_for(lambda: all(_parent(pid) == supervisor for pid in serving), timeout=10)
    victim = next(iter(serving))
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: bool(_lines(daemon, "worker died; replacing it")), timeout=30), daemon.log()
    [died] = _lines(daemon, "worker died; replacing it")
    assert died["pid"] == victim and died["how"] == "killed by SIGKILL"
    assert wait_for(lambda: not os.path.exists(f"/proc/{victim}"), timeout=10), "the worker is left a zombie"
    assert daemon.stop() == 0
