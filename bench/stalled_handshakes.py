"""Stalled TLS handshakes against the daemon's connection cap: what they hold, and what a good client sees.

``python -m bench.stalled_handshakes --clients 1500 --max-connections 64`` starts ``staticadm serve`` (one
process, HTTPS), opens CLIENTS connections that each send ``16 03 01 02 00`` (a TLS handshake record header
announcing 512 bytes) and then nothing, and reports the daemon's RSS and open descriptors before, while they
stall, and after they close, with the latency of a good client's request (a new TLS connection each) meanwhile.
Timing figures only: nothing here is asserted (the tests assert the cap and the descriptors).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.daemons import Server, free_port

STALL = bytes.fromhex("1603010200")
_REVIEW = json.dumps({
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                "name": "p", "namespace": "default", "userInfo": {"username": "alice"},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}},
}).encode()


def daemon_figures(pid: int) -> dict[str, float]:
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return {"rss_mib": round(rss / 1024, 1), "open_fds": len(os.listdir(f"/proc/{pid}/fd"))}


def good_request(port: int, timeout: float = 10.0) -> float | None:
    """Seconds for one /validate over a new verified-less TLS connection; None when it failed."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    started = time.perf_counter()
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    try:
        connection.request("POST", "/validate", body=_REVIEW, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            return None
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    return time.perf_counter() - started


def latencies(port: int, count: int) -> dict[str, object]:
    samples = [good_request(port) for _ in range(count)]
    done = sorted(s for s in samples if s is not None)
    if not done:
        return {"ok": 0, "failed": count}
    return {"ok": len(done), "failed": count - len(done), "p50_ms": round(statistics.median(done) * 1e3, 2),
            "max_ms": round(done[-1] * 1e3, 2)}


def stall(port: int, clients: int) -> list[socket.socket]:
    opened = []
    for _ in range(clients):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(STALL)
        except OSError:
            sock.close()
            continue
        opened.append(sock)
    return opened


def still_open(sockets: list[socket.socket]) -> int:
    """How many of ``sockets`` the daemon has not closed (a closed one reads as end of stream or a reset)."""
    count = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            count += 0 if sock.recv(1) == b"" else 1
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1500)
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--header-timeout", type=float, default=30.0,
                        help="the daemon's handshake/header timeout: long enough to measure while they stall")
    parser.add_argument("--good-requests", type=int, default=20)
    parser.add_argument("--event-loop", choices=("auto", "asyncio", "uvloop"), default="asyncio",
                        help="the daemon's event loop (staticadm serve --event-loop; default: its default)")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.clients + 256)), hard))
    with tempfile.TemporaryDirectory(prefix="stalled-handshakes-") as scratch:
        work = Path(scratch)
        (work / "manifests").mkdir()
        port = free_port()
        command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(work / "manifests"),
                   "--socket", "", "--listen", f"127.0.0.1:{port}", "--state-dir", str(work / "state"),
                   "--log-level", "warning", "--workers", "1", "--max-connections", str(args.max_connections),
                   "--header-timeout", str(args.header_timeout), "--event-loop", args.event_loop]
        server = Server("staticadm", command, work / "daemon.log", port).start()
        try:
            report: dict[str, object] = {"clients": args.clients, "max_connections": args.max_connections,
                                         "event_loop": args.event_loop}
            latencies(port, 5)  # warm
            time.sleep(1.5)
            report["before"] = {**daemon_figures(server.pid), "good_client": latencies(port, args.good_requests)}
            started = time.perf_counter()
            during: dict[str, object] = {}
            good = threading.Thread(target=lambda: during.update(latencies(port, args.good_requests)))
            good.start()
            sockets = stall(port, args.clients)
            report["stall_seconds_to_open"] = round(time.perf_counter() - started, 2)
            good.join()
            report["good_client_while_stalling_clients_connect"] = during
            time.sleep(1.5)
            report["stalled"] = {**daemon_figures(server.pid), "opened_by_clients": len(sockets),
                                 "still_open_at_daemon": still_open(sockets),
                                 "good_client": latencies(port, args.good_requests)}
            for sock in sockets:
                sock.close()
            time.sleep(3.0)  # the sweep (1 s) trims after the burst
            report["after_close"] = {**daemon_figures(server.pid), "good_client": latencies(port, args.good_requests)}
            # The same burst again: what stays after the first is reused, not added to.
            for sock in stall(port, args.clients):
                sock.close()
            time.sleep(3.0)
            report["after_a_second_burst"] = daemon_figures(server.pid)
        finally:
            server.stop()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
