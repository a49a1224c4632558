"""Colour on a terminal, plain text everywhere else: the commands run with their stdout on a real pseudo-terminal,
into a pipe, and on the terminal with NO_COLOR set."""

from __future__ import annotations

import os
import pty
import select
import sys
import time

from tests.server import forked
from tests.server.harness import REPO_ROOT

EXAMPLES = REPO_ROOT / "manifests" / "examples"
GREEN, RED, RESET = "\x1b[32m", "\x1b[31m", "\x1b[0m"


def _on_terminal(*args: str, no_color: bool = False) -> str:
    """What the command writes to a pseudo-terminal as its stdout."""
    controller, terminal = pty.openpty()
    env = {key: value for key, value in os.environ.items() if key not in ("NO_COLOR", "TERM")}
    env["TERM"] = "xterm"
    if no_color:
        env["NO_COLOR"] = "1"
    chunks = []
    try:
        # The command opens the terminal by its name; this end stays open until the command has ended, so the
        # terminal is never without a writer before the command holds it.
        process = forked.start_attached([sys.executable, "-m", "staticadm", *args], workdir=REPO_ROOT, environment=env,
                                        stdin=os.devnull, stdout=os.ttyname(terminal), stderr=os.devnull)
        deadline = time.monotonic() + 120
        while process.poll() is None:
            assert time.monotonic() < deadline, args
            if select.select([controller], [], [], 0.05)[0]:
                chunks.append(os.read(controller, 65536))
        while select.select([controller], [], [], 0)[0]:  # what it wrote last, still on the terminal
            chunks.append(os.read(controller, 65536))
        return b"".join(chunks).decode()
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)


def _piped(*args: str) -> str:
    return forked.run([sys.executable, "-m", "staticadm", *args], cwd=REPO_ROOT, timeout=120).stdout


def test_verdicts_are_coloured_on_a_terminal_only() -> None:
    tested = _on_terminal("test", str(EXAMPLES / "tests"))
    assert f"{GREEN}PASS{RESET}" in tested
    checked = _on_terminal("check", str(EXAMPLES))
    assert f"{GREEN}OK{RESET}" in checked
    denied_requests = REPO_ROOT / "tests" / "deploy" / "requests" / "deny-privileged"
    reviewed = _on_terminal("review", str(EXAMPLES), str(denied_requests))
    assert f"{RED}denied{RESET}" in reviewed
    for args in (("test", str(EXAMPLES / "tests")), ("check", str(EXAMPLES))):
        assert "\x1b[" not in _piped(*args)
        assert "\x1b[" not in _on_terminal(*args, no_color=True)
