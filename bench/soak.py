"""Soak: many admission requests against the real daemon while its manifests are rewritten every few seconds.

Watches the daemon's RSS and open file descriptors; the run passes when neither grows after warm-up.
Traffic goes to this machine only (a unix socket, or HTTPS on 127.0.0.1) and stops by itself at
``--requests`` or ``--duration``, whichever comes first.

    python -m bench.soak                                   # 1,000,000 requests (or 30 min), wrk if installed
    python -m bench.soak --requests 200000 --duration 120  # a shortened run by hand
    python -m bench.soak --client asyncio                  # aiohttp over the unix socket instead of wrk

wrk (``apt-get install wrk``) drives HTTPS in segments of ``--segment`` seconds; the asyncio client
keeps ``--connections`` keep-alive connections busy over the unix socket.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.daemons import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]

POLICY = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: soak.static.k8s.io
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["pods"]
  validations:
  - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
    message: "generation {generation}: no latest tags"
  - expression: "!has(object.metadata.labels) || !('deny' in object.metadata.labels)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: soak.static.k8s.io
spec:
  policyName: soak.static.k8s.io
  validationActions: [Deny]
"""

REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "soak",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "name": "web",
        "namespace": "default",
        "userInfo": {"username": "soak", "groups": ["system:authenticated"]},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default",
                                                                   "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": f"c{i}", "image": f"registry.local/app:{i}"}
                                           for i in range(4)]}},
    },
}

WRK_SCRIPT = """
local file = assert(io.open(os.getenv("SOAK_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
function done(summary, latency, requests)
  io.write(string.format('SOAK_RESULT {"requests":%d,"non2xx":%d,"errors":%d,"p99_us":%d}\\n',
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(99)))
end
"""


@dataclass
class Sample:
    seconds: float
    requests: int
    rss_kib: int
    fds: int


@dataclass
class Totals:
    requests: int = 0
    non_2xx: int = 0
    errors: int = 0
    reloads: int = 0
    samples: list[Sample] = field(default_factory=list)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _write_policy(directory: Path, generation: int) -> None:
    temporary = directory.parent / ".soak.yaml.tmp"
    temporary.write_text(POLICY.format(generation=generation))
    os.replace(temporary, directory / "soak.yaml")


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(tempfile.mkdtemp(prefix="staticadm-soak-"))
        self.manifests = self.workdir / "manifests"
        self.manifests.mkdir()
        _write_policy(self.manifests, 0)
        self.socket_path = self.workdir / "staticadm.sock"
        self.port = free_port()
        self.body_file = self.workdir / "review.json"
        self.body_file.write_bytes(orjson.dumps(REVIEW))
        self.totals = Totals()
        self.started = 0.0
        self.stop = threading.Event()
        self.process: subprocess.Popen[bytes] | None = None

    # -- daemon ------------------------------------------------------------------------------------

    def start_daemon(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        log = (self.workdir / "daemon.log").open("wb")
        command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(self.manifests),
                   "--socket", str(self.socket_path), "--listen", f"127.0.0.1:{self.port}",
                   "--state-dir", str(self.workdir / "state"), "--log-level", "warning"]
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"daemon exited: {(self.workdir / 'daemon.log').read_text()}")
            if self.socket_path.exists() and asyncio.run(self._status("/readyz")) == 200:
                return
            time.sleep(0.1)
        raise SystemExit("daemon not ready within 60 s")

    async def _status(self, path: str) -> int | None:
        try:
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(self.socket_path))) as session, \
                    session.get(f"http://localhost{path}") as response:
                return response.status
        except (OSError, aiohttp.ClientError):
            return None

    def stop_daemon(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    # -- background: reloads and samples -----------------------------------------------------------

    def reloader(self) -> None:
        generation = 0
        while not self.stop.wait(self.args.reload_interval):
            generation += 1
            _write_policy(self.manifests, generation)
            self.totals.reloads += 1

    def sample(self) -> Sample:
        assert self.process is not None
        sample = Sample(time.monotonic() - self.started, self.totals.requests, _rss_kib(self.process.pid),
                        _fds(self.process.pid))
        self.totals.samples.append(sample)
        print(f"  t={sample.seconds:7.1f}s requests={sample.requests:>9,} rss={sample.rss_kib / 1024:7.1f} MiB "
              f"fds={sample.fds}", flush=True)
        return sample

    def sampler(self) -> None:
        while not self.stop.wait(self.args.sample_interval):
            self.sample()

    # -- clients -----------------------------------------------------------------------------------

    def done(self) -> bool:
        return (self.totals.requests >= self.args.requests
                or time.monotonic() - self.started >= self.args.duration)

    def run_wrk(self) -> None:
        script = self._wrk_script()
        env = {**os.environ, "SOAK_BODY_FILE": str(self.body_file)}
        while not self.done():
            left = self.args.duration - (time.monotonic() - self.started)
            seconds = max(1, int(min(self.args.segment, left)))
            output = subprocess.run(["wrk", "-t", str(self.args.threads), "-c", str(self.args.connections),
                                     "-d", f"{seconds}s", "-s", str(script),
                                     f"https://127.0.0.1:{self.port}/validate"],
                                    env=env, capture_output=True, text=True, timeout=seconds + 60).stdout
            match = re.search(r"SOAK_RESULT (\{.*\})", output)
            if match is None:
                raise SystemExit(f"wrk printed no result:\n{output}")
            result = json.loads(match.group(1))
            self.totals.requests += result["requests"]
            self.totals.non_2xx += result["non2xx"]
            self.totals.errors += result["errors"]

    def run_asyncio(self) -> None:
        asyncio.run(self._asyncio_clients())

    async def _asyncio_clients(self) -> None:
        body = self.body_file.read_bytes()
        headers = {"Content-Type": "application/json"}
        connector = aiohttp.UnixConnector(path=str(self.socket_path), limit=self.args.connections)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:

            async def worker() -> None:
                while not self.done():
                    try:
                        async with session.post("http://localhost/validate", data=body, headers=headers) as reply:
                            await reply.read()
                            if reply.status // 100 != 2:
                                self.totals.non_2xx += 1
                    except (OSError, aiohttp.ClientError, TimeoutError):
                        self.totals.errors += 1
                    self.totals.requests += 1

            await asyncio.gather(*(worker() for _ in range(self.args.connections)))

    def warm_up(self) -> None:
        """Traffic over both listeners and a reload before the baseline sample.

        Lazily created resources (TLS session state, the evaluation threads, watch descriptors, allocator
        arenas) belong in the baseline; what grows after it is what the soak is looking for.
        """
        limit, duration = self.args.requests, self.args.duration
        self.args.requests, self.args.duration = 3000, 30
        self.started = time.monotonic()
        self.run_asyncio()
        if shutil.which("wrk"):
            subprocess.run(["wrk", "-t", "1", "-c", str(self.args.connections), "-d", "2s", "-s",
                            str(self._wrk_script()), f"https://127.0.0.1:{self.port}/validate"],
                           env={**os.environ, "SOAK_BODY_FILE": str(self.body_file)}, capture_output=True,
                           timeout=60)
        _write_policy(self.manifests, -1)
        time.sleep(2)
        self.args.requests, self.args.duration = limit, duration
        self.totals = Totals()

    def _wrk_script(self) -> Path:
        script = self.workdir / "soak.lua"
        script.write_text(WRK_SCRIPT)
        return script

    # -- run ---------------------------------------------------------------------------------------

    def run(self) -> int:
        client = self.args.client
        if client == "auto":
            client = "wrk" if shutil.which("wrk") else "asyncio"
        print(f"soak: client={client} requests<={self.args.requests:,} duration<={self.args.duration:g}s "
              f"reload every {self.args.reload_interval:g}s; workdir {self.workdir}", flush=True)
        self.start_daemon()
        assert self.process is not None
        self.warm_up()
        self.started = time.monotonic()
        first = self.sample()
        threads = [threading.Thread(target=self.reloader, daemon=True),
                   threading.Thread(target=self.sampler, daemon=True)]
        for thread in threads:
            thread.start()
        try:
            self.run_wrk() if client == "wrk" else self.run_asyncio()
        finally:
            self.stop.set()
            for thread in threads:
                thread.join()
        elapsed = time.monotonic() - self.started
        # Connections the load generator just dropped take a moment to be closed (TLS shutdown).
        settle = time.monotonic() + 10
        while time.monotonic() < settle and _fds(self.process.pid) > first.fds:
            time.sleep(0.2)
        last = self.sample()
        ready = asyncio.run(self._status("/readyz"))
        code = self.stop_daemon()
        return self.report(first, last, elapsed, ready, code)

    def report(self, first: Sample, last: Sample, elapsed: float, ready: int | None, exit_code: int) -> int:
        samples = self.totals.samples
        # The baseline was taken after a warm-up (see warm_up); growth from it is a leak.
        rss_growth = (last.rss_kib - first.rss_kib) / 1024
        summary: dict[str, Any] = {
            "requests": self.totals.requests, "seconds": round(elapsed, 1),
            "requests_per_second": round(self.totals.requests / elapsed), "non_2xx": self.totals.non_2xx,
            "errors": self.totals.errors, "reloads": self.totals.reloads,
            "rss_mib": {"start": round(first.rss_kib / 1024, 1), "end": round(last.rss_kib / 1024, 1),
                        "max": round(max(s.rss_kib for s in samples) / 1024, 1)},
            "fds": {"start": first.fds, "end": last.fds, "max": max(s.fds for s in samples)},
            "ready_at_end": ready == 200, "exit_code": exit_code,
        }
        print("SOAK_SUMMARY " + json.dumps(summary), flush=True)
        leaks = rss_growth > self.args.max_rss_growth_mib or last.fds > first.fds
        ok = not leaks and ready == 200 and exit_code == 0 and self.totals.non_2xx == 0 and self.totals.errors == 0
        print("soak: " + ("PASS" if ok else "FAIL") + f" (RSS growth {rss_growth:+.1f} MiB, "
              f"fds {first.fds} -> {last.fds})", flush=True)
        if ok:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000, help="stop after this many (default: 1000000)")
    parser.add_argument("--duration", type=float, default=1800, help="or after this many seconds (default: 1800)")
    parser.add_argument("--reload-interval", type=float, default=3.0,
                        help="rewrite the manifest every N seconds (default: 3)")
    parser.add_argument("--client", choices=("auto", "wrk", "asyncio"), default="auto",
                        help="load generator (default: wrk if installed, else asyncio)")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections (default: 32)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (default: 1)")
    parser.add_argument("--segment", type=float, default=15, help="seconds per wrk run (default: 15)")
    parser.add_argument("--sample-interval", type=float, default=10, help="seconds between samples (default: 10)")
    parser.add_argument("--max-rss-growth-mib", type=float, default=20,
                        help="RSS growth after warm-up that counts as a leak (default: 20)")
    return Soak(parser.parse_args(argv)).run()


if __name__ == "__main__":
    raise SystemExit(main())
