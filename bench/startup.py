"""The CPU a fresh staticadm process costs: each command as an operator (or the test suite) runs it, and a daemon's
start until /readyz answers 200. Most of it is Python importing what the command needs (issue 46). And what replacing
a killed worker of ``serve --workers 2`` costs until the replacement serves, in CPU and in seconds from the kill
(the supervisor's restart back-off included: 0.5 s for a worker that lived under a minute): forked by the zygote,
and started as a fresh interpreter (the zygote killed first).

Run: python -m bench.startup [--runs 3] [--source DIR]

Compiled code is cached for the run (PYTHONPYCACHEPREFIX in a temporary directory, one warm-up run first), as the
test suite runs its processes; each figure is user + system CPU of the process (a daemon's at ready).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import daemons

EXAMPLES = Path("manifests") / "examples"
#: (label, arguments of ``python -m staticadm``), relative to the source checkout.
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("--help", ("--help",)),
    ("version", ("version",)),
    ("check", ("check", str(EXAMPLES))),
    ("review", ("review", str(EXAMPLES), "-f", str(EXAMPLES / "tests" / "pod.yaml"))),
    ("test", ("test", str(EXAMPLES / "tests"))),
)


def _environment(cache: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    path = os.pathsep.join(dict.fromkeys([str(daemons.SOURCE_ROOT), os.environ.get("PYTHONPATH", "")]))
    env.update(PYTHONPYCACHEPREFIX=str(cache), PYTHONPATH=path.rstrip(os.pathsep))
    return env


def command_cpu(arguments: tuple[str, ...], env: dict[str, str]) -> float:
    """User + system CPU seconds of one ``python -m staticadm ARGUMENTS`` (its exit status is not looked at:
    review exits 3 on a denial)."""
    process = subprocess.Popen([sys.executable, "-m", "staticadm", *arguments], cwd=daemons.SOURCE_ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0  # reaped here: keep Popen from waiting for it again
    return usage.ru_utime + usage.ru_stime


def daemon_cpu(workdir: Path, env: dict[str, str]) -> float:
    """CPU seconds of ``staticadm serve`` (HTTPS with a generated certificate and a unix socket, one process) from
    its start until /readyz answers 200."""
    manifests = daemons.SOURCE_ROOT / EXAMPLES
    server = daemons.staticadm_server(workdir, manifests, workdir / "state", None)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        server.start()
        return server.cpu_seconds()
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved)


#: A worker's series on /metrics: which live worker serves a content hash.
_WORKER_SERIES = re.compile(r'^staticadm_worker_config_info\{hash="[^"]+",pid="(\d+)"\} 1\.0$', re.MULTILINE)
#: How long a replacement may take to serve before the measurement gives up.
REPLACEMENT_TIMEOUT = 60.0


def _title(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")


def _serving_workers(server: daemons.Server) -> set[int]:
    status, body = server.request("GET", "/metrics")
    return {int(pid) for pid in _WORKER_SERIES.findall(body.decode())} if status == 200 else set()


def _replacement_listening(log: str, victim: int) -> tuple[int, float] | None:
    """(pid, time) of the replacement of ``victim`` once it listens (a replacement listens once it serves the
    snapshot), from the daemon's JSON log."""
    replacing: int | None = None
    replacement: int | None = None
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("msg") == "worker died; replacing it" and entry.get("pid") == victim:
            replacing = entry["worker"]
        elif entry.get("msg") == "worker started" and replacing is not None and entry.get("worker") == replacing:
            replacement = entry["pid"]
        elif entry.get("msg") == "listening" and replacement is not None and entry.get("worker") == replacing:
            stamp = datetime.datetime.fromisoformat(entry["ts"].replace("Z", "+00:00"))
            return replacement, stamp.timestamp()
    return None


def worker_replacement(workdir: Path, env: dict[str, str], *, forked: bool) -> tuple[float, float]:
    """(CPU seconds, seconds) of replacing a killed worker of ``serve --workers 2`` until the replacement serves:
    forked by the zygote, or (``forked`` False: the zygote is killed first) a fresh interpreter."""
    manifests = daemons.SOURCE_ROOT / EXAMPLES
    server = daemons.staticadm_server(workdir, manifests, workdir / "state", None, workers=2)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        server.start()
        deadline = time.monotonic() + REPLACEMENT_TIMEOUT
        while len(before := _serving_workers(server)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        zygotes = [pid for pid in daemons.children(server.pid) if _title(pid).startswith("staticadm serve: zygote")]
        if not forked:
            for zygote in zygotes:
                os.kill(zygote, signal.SIGKILL)
            time.sleep(0.5)  # the supervisor notices, and starts fresh interpreters from then on
        elif not zygotes:
            raise daemons.ServerFailed("the daemon under test forks no workers (no zygote)")
        victim = min(before)
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        while time.time() < killed + REPLACEMENT_TIMEOUT:
            listening = _replacement_listening(server.log(), victim)
            if listening is not None:
                replacement, at = listening
                return daemons.process_cpu_seconds(replacement), at - killed
            time.sleep(0.01)
        raise daemons.ServerFailed(f"no replacement served within {REPLACEMENT_TIMEOUT:g} s:\n{server.log()[-3000:]}")
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved)


def measure(runs: int = 3) -> dict[str, list[float]]:
    """CPU seconds of each run, by command, the daemon's start as ``serve``."""
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="staticadm-startup-") as temporary:
        root = Path(temporary)
        env = _environment(root / "pycache")
        for label, arguments in COMMANDS:
            command_cpu(arguments, env)  # compiles what the command imports into the cache
            figures[label] = [command_cpu(arguments, env) for _ in range(runs)]
        figures["serve (to ready)"] = []
        for run in range(runs + 1):
            workdir = root / f"serve-{run}"
            workdir.mkdir()
            seconds = daemon_cpu(workdir, env)
            if run:  # the first one compiled the daemon's modules
                figures["serve (to ready)"].append(seconds)
        if daemons.supports_workers():
            forks = (daemons.SOURCE_ROOT / "staticadm" / "server" / "zygote.py").exists()
            for label, forked in (("worker forked", True), ("worker fresh", False))[0 if forks else 1:]:
                cpu, wall = [], []
                for run in range(runs):
                    workdir = root / f"{label.replace(' ', '-')}-{run}"
                    workdir.mkdir()
                    seconds, elapsed = worker_replacement(workdir, env, forked=forked)
                    cpu.append(seconds)
                    wall.append(elapsed)
                figures[f"{label} (CPU)"] = cpu
                figures[f"{label} (wall)"] = wall
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each command (default: 3)")
    parser.add_argument("--source", type=Path, help="the checkout whose staticadm runs (default: this one)")
    options = parser.parse_args()
    if options.source is not None:
        daemons.SOURCE_ROOT = options.source.resolve()
    print(f"{'command':<20} {'median':>7} {'min':>7} {'max':>7}  (user + system CPU seconds, or seconds from the kill "
          f"where (wall); {options.runs} runs)")
    for label, seconds in measure(options.runs).items():
        print(f"{label:<20} {statistics.median(seconds):7.3f} {min(seconds):7.3f} {max(seconds):7.3f}")


if __name__ == "__main__":
    main()
