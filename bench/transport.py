"""Transport figures for the hardening note: complete requests behind slow bodies, idle TLS connections.

    python -m bench.transport [--source DIR]

- slow bodies: p50/p99/max of 200 complete /validate requests over the unix socket while 150 connections
  have sent their headers and one byte of their body (--body-timeout 60);
- idle TLS: RSS of the daemon with 1000 idle TLS connections open, after they close, and how many the
  daemon kept open.
``--source`` imports staticadm from another checkout (e.g. the previous release) for a before/after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.server.harness import free_port, policy_yaml, raw_http, review  # noqa: E402


def _start(source: Path, work: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], Path, int]:
    manifests = work / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "deny.yaml").write_text(policy_yaml("denied"))
    sock, port = work / "s.sock", free_port()
    env = {**os.environ, "PYTHONPATH": str(source)}
    command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(manifests), "--socket", str(sock),
               "--listen", f"127.0.0.1:{port}", "--state-dir", str(work / "state"), *extra]
    process = subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sock.exists() and (work / "state" / "tls" / "ca.crt").exists():
            try:
                if b" 200 " in raw_http(sock, [b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"], timeout=2)[:20]:
                    return process, sock, port
            except OSError:
                pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit("daemon did not become ready")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def slow_bodies(source: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        process, sock, _ = _start(source, Path(directory), ["--body-timeout", "60"])
        # 150 clients that send their headers and the first byte of a 100 kB body, then stall.
        stalled = []
        for _ in range(150):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(sock))
            client.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 100000\r\n\r\n ")
            stalled.append(client)
        time.sleep(1.0)
        body = orjson.dumps(review({"deny": "no"}))
        head = (f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        latencies = []
        for _ in range(200):
            started = time.monotonic()
            with contextlib.suppress(OSError):
                raw_http(sock, [head, body], timeout=70)
            latencies.append(time.monotonic() - started)
        for client in stalled:
            client.close()
        process.terminate()
        process.wait(timeout=30)
    ordered = sorted(latencies)
    return {"requests": len(ordered), "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
            "max_ms": ordered[-1] * 1000}


def idle_tls(source: Path, count: int = 1000) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        process, _, port = _start(source, work, [])
        context = ssl.create_default_context(cafile=str(work / "state" / "tls" / "ca.crt"))
        before = _rss_kib(process.pid)
        connections = []
        for _ in range(count):
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                connections.append(context.wrap_socket(raw, server_hostname="127.0.0.1"))
            except OSError:
                break
        time.sleep(1)
        held = len(os.listdir(f"/proc/{process.pid}/fd"))
        during = _rss_kib(process.pid)
        for connection in connections:
            connection.close()
        time.sleep(3)
        after = _rss_kib(process.pid)
        process.terminate()
        process.wait(timeout=30)
    return {"opened": len(connections), "daemon_fds_with_them_open": held, "rss_before_mib": before / 1024,
            "rss_with_them_mib": during / 1024, "rss_after_close_mib": after / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=REPO)
    options = parser.parse_args()
    print("slow bodies:", orjson.dumps(slow_bodies(options.source)).decode())
    print("idle TLS:", orjson.dumps(idle_tls(options.source)).decode())


if __name__ == "__main__":
    main()
