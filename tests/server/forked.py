"""Daemons started from a process that has already imported the daemon: multiprocessing's fork server.

The suite starts close to two hundred daemons; a fresh interpreter spends about a second of CPU importing the
daemon's code and libraries (``python -m bench.startup``: 1.1 s to ready, nearly all of it imports) before it does
anything a test looks at. Each xdist worker therefore keeps one fork server (``multiprocessing``'s ``forkserver``
start method: a single-threaded process, started once, that imports the daemon's modules and then forks a child per
request), and a daemon a test starts is such a child running the daemon's own entry point,
:func:`staticadm.launch.main`, with the test's arguments, working directory, environment and log file. It is a
process of its own with its own pid, signals, sockets and exit status; only the imports are shared, as a copy.

A daemon whose start differs in what the imports see takes a fresh interpreter instead (:func:`start`): one
behind a launcher (setpriv, prlimit, a mount namespace, socket activation) or with an environment of its own (a
variable read at import, PYTHONPATH hooks). ``STATICADM_TEST_FRESH_INTERPRETER=1`` makes every daemon a fresh
interpreter, for a run that checks the fork server changes no outcome.

This module is imported by the fork server and by each child before anything else of the suite: standard library
only.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

#: Set to 1: every daemon the suite starts is a fresh interpreter.
FRESH_INTERPRETER = "STATICADM_TEST_FRESH_INTERPRETER"

#: What ``staticadm serve`` imports before it serves (the rest it imports as it needs it, in the child).
PRELOAD = [__name__, "staticadm.launch", "staticadm.cli", "staticadm.server.main"]

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def fresh_interpreter_required() -> bool:
    return os.environ.get(FRESH_INTERPRETER, "") not in ("", "0")


def start(command: list[str], *, workdir: Path, environment: dict[str, str], log_path: Path,
          may_fork: bool = True) -> subprocess.Popen[bytes] | ForkedDaemon:
    """``command`` with its output appended to ``log_path``: forked from the fork server when it is the checkout's
    ``python -m staticadm`` as is (not behind a launcher, not an installed console script), ``may_fork`` (the
    caller's environment changes nothing the imports read) and the run allows it; a fresh interpreter otherwise."""
    module = [sys.executable, "-m", "staticadm"]
    with log_path.open("ab") as log:  # there before the process writes to it: the caller may read it at once
        if may_fork and command[:len(module)] == module and not fresh_interpreter_required():
            return ForkedDaemon(command[len(module):], workdir=workdir, environment=environment, log_path=log_path)
        return subprocess.Popen(command, cwd=workdir, env=environment, stdout=log, stderr=log)


def _run(arguments: list[str], workdir: str, environment: dict[str, str], log_path: str) -> None:
    """In the forked child: what ``python -m staticadm ARGS`` would run, with its output in ``log_path``."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = [str(Path(sys.executable).parent / "staticadm"), *arguments]
    from staticadm.launch import main

    raise SystemExit(main())


class ForkedDaemon:
    """A daemon forked from the fork server, with the part of :class:`subprocess.Popen`'s interface the suite uses.
    ``returncode`` follows Popen: the exit status, or minus the signal that ended the process."""

    def __init__(self, arguments: list[str], *, workdir: Path, environment: dict[str, str], log_path: Path) -> None:
        self.args = arguments
        # daemon=True: a daemon a failed test left running is ended with its xdist worker, not waited for.
        self._process = _CONTEXT.Process(target=_run, args=(arguments, str(workdir), environment, str(log_path)),
                                         daemon=True)
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signal_number: int) -> None:
        # As Popen: nothing is sent to a process known to have ended (its pid may be another's by now).
        if self.poll() is None:
            os.kill(self.pid, signal_number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
