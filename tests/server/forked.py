"""Daemons and commands started from a process that has already imported them: multiprocessing's fork server.

The suite starts close to two hundred daemons; a fresh interpreter spends about a second of CPU importing the
daemon's code and libraries (``python -m bench.startup``: 1.1 s to ready, nearly all of it imports) before it does
anything a test looks at. Each xdist worker therefore keeps one fork server (``multiprocessing``'s ``forkserver``
start method: a single-threaded process, started once, that imports the daemon's modules and then forks a child per
request), and a daemon a test starts is such a child running the daemon's own entry point,
:func:`staticadm.launch.main`, with the test's arguments, working directory, environment and log file. It is a
process of its own with its own pid, signals, sockets and exit status; only the imports are shared, as a copy.

The offline commands the suite runs as an operator would (``staticadm check``, ``review``, ``webhook-config``, some
eighty runs, each about half a second of imports) are forked the same way (:func:`run`, in place of
:func:`subprocess.run`): the child's standard input, output and error are files of its own, and what it prints and
the status it exits with are what ``python -m staticadm ARGS`` would give.

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
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

#: Set to 1: every daemon the suite starts is a fresh interpreter.
FRESH_INTERPRETER = "STATICADM_TEST_FRESH_INTERPRETER"

#: What ``staticadm serve`` imports before it serves (the rest it imports as it needs it, in the child), and the
#: offline commands' own modules.
PRELOAD = [__name__, "staticadm.launch", "staticadm.cli", "staticadm.server.main", "staticadm.server.config",
           "staticadm.completion", "staticadm.manifests.check", "staticadm.deploy.checks", "staticadm.offline.review",
           "staticadm.offline.diff", "staticadm.deploy.webhooks", "staticadm.deploy.registration",
           "staticadm.offline.cluster_audit", "staticadm.policytest.report"]

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def fresh_interpreter_required() -> bool:
    return os.environ.get(FRESH_INTERPRETER, "") not in ("", "0")


def _forkable_arguments(command: list[str]) -> list[str] | None:
    """The arguments of ``command`` when it is the checkout's ``python -m staticadm`` as is and the run allows
    forking; None when it takes a fresh interpreter."""
    module = [sys.executable, "-m", "staticadm"]
    if command[:len(module)] != module or fresh_interpreter_required():
        return None
    return command[len(module):]


def start(command: list[str], *, workdir: Path, environment: dict[str, str], log_path: Path,
          may_fork: bool = True) -> subprocess.Popen[bytes] | ForkedDaemon:
    """``command`` with its output appended to ``log_path``: forked from the fork server when it is the checkout's
    ``python -m staticadm`` as is (not behind a launcher, not an installed console script), ``may_fork`` (the
    caller's environment changes nothing the imports read) and the run allows it; a fresh interpreter otherwise."""
    arguments = _forkable_arguments(command) if may_fork else None
    with log_path.open("ab") as log:  # there before the process writes to it: the caller may read it at once
        if arguments is not None:
            return ForkedDaemon(arguments, workdir=workdir, environment=environment, log_path=log_path)
        return subprocess.Popen(command, cwd=workdir, env=environment, stdout=log, stderr=log)


def start_attached(command: list[str], *, workdir: Path, environment: dict[str, str], stdin: str, stdout: str,
                   stderr: str) -> subprocess.Popen[bytes] | ForkedDaemon:
    """``command`` with its standard input, output and error the files at those paths (a terminal's, ``/dev/null``),
    opened by the process itself: forked as :func:`start` forks, a fresh interpreter otherwise."""
    arguments = _forkable_arguments(command)
    if arguments is not None:
        return ForkedDaemon(arguments, workdir=workdir, environment=environment, log_path=None,
                            streams=(stdin, stdout, stderr))
    with open(stdin, "rb") as input_file, open(stdout, "wb") as output, open(stderr, "wb") as errors:
        return subprocess.Popen(command, cwd=workdir, env=environment, stdin=input_file, stdout=output, stderr=errors)


def run(command: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        input: str | None = None, timeout: float | None = None, may_fork: bool = True,
        ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(command, capture_output=True, text=True, ...)``, forked from the fork server when ``command``
    is the checkout's ``python -m staticadm`` as is and ``may_fork`` (the environment changes nothing the imports
    read); a fresh interpreter otherwise. A run past ``timeout`` is killed and raises
    :class:`subprocess.TimeoutExpired`, as :func:`subprocess.run` does."""
    if not may_fork or _forkable_arguments(command) is None:
        return subprocess.run(command, cwd=cwd, env=env, input=input, timeout=timeout, capture_output=True,
                              text=True, check=False)
    files = Path(tempfile.mkdtemp(prefix="staticadm-run-"))
    try:
        streams = [files / name for name in ("stdin", "stdout", "stderr")]
        for stream in streams:
            stream.touch(mode=0o600)
        streams[0].write_text(input or "")
        process = start_attached(command, workdir=Path(cwd or os.getcwd()),
                                 environment=dict(os.environ if env is None else env),
                                 stdin=str(streams[0]), stdout=str(streams[1]), stderr=str(streams[2]))
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise subprocess.TimeoutExpired(command, timeout or 0.0) from None
        # As text=True reads them: universal newlines.
        stdout, stderr = (path.read_bytes().decode().replace("\r\n", "\n").replace("\r", "\n")
                          for path in streams[1:])
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)
    finally:
        shutil.rmtree(files, ignore_errors=True)


def _run(arguments: list[str], workdir: str, environment: dict[str, str], log_path: str | None,
         streams: tuple[str, str, str] | None = None) -> None:
    """In the forked child: what ``python -m staticadm ARGS`` would run, its output appended to ``log_path``, or with
    ``streams``: its standard input, output and error those three files."""
    if streams is None:
        assert log_path is not None
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    else:
        for number, (path, flags) in enumerate(zip(streams, (os.O_RDONLY, os.O_WRONLY, os.O_WRONLY), strict=True)):
            descriptor = os.open(path, flags | os.O_NOCTTY)
            os.dup2(descriptor, number)
            os.close(descriptor)
        # multiprocessing gave the child /dev/null as sys.stdin; a fresh interpreter reads descriptor 0.
        sys.stdin = open(0, encoding=sys.stdout.encoding, errors=sys.stdout.errors, closefd=False)  # noqa: SIM115
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = [str(Path(sys.executable).parent / "staticadm"), *arguments]
    from staticadm.launch import main

    raise SystemExit(main())


class ForkedDaemon:
    """A daemon or command forked from the fork server, with the part of :class:`subprocess.Popen`'s interface the
    suite uses.
    ``returncode`` follows Popen: the exit status, or minus the signal that ended the process."""

    def __init__(self, arguments: list[str], *, workdir: Path, environment: dict[str, str], log_path: Path | None,
                 streams: tuple[str, str, str] | None = None) -> None:
        self.args = arguments
        # daemon=True: a daemon a failed test left running is ended with its xdist worker, not waited for.
        self._process = _CONTEXT.Process(target=_run, args=(arguments, str(workdir), environment,
                                                            None if log_path is None else str(log_path), streams),
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
