"""The CPU a fresh staticadm process costs: each command as an operator (or the test suite) runs it, and a daemon's
start until /readyz answers 200. Most of it is Python importing what the command needs (issue 46).

Run: python -m bench.startup [--runs 3] [--source DIR]

Compiled code is cached for the run (PYTHONPYCACHEPREFIX in a temporary directory, one warm-up run first), as the
test suite runs its processes; each figure is user + system CPU of the process (a daemon's at ready).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
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
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each command (default: 3)")
    parser.add_argument("--source", type=Path, help="the checkout whose staticadm runs (default: this one)")
    options = parser.parse_args()
    if options.source is not None:
        daemons.SOURCE_ROOT = options.source.resolve()
    print(f"{'command':<18} {'median':>7} {'min':>7} {'max':>7}  (user + system CPU seconds, {options.runs} runs)")
    for label, seconds in measure(options.runs).items():
        print(f"{label:<18} {statistics.median(seconds):7.3f} {min(seconds):7.3f} {max(seconds):7.3f}")


if __name__ == "__main__":
    main()
