"""Open-loop load: requests sent at a fixed rate whatever the server does, latency from each one's scheduled time.

A closed-loop client (wrk) sends a connection's next request only when the previous answer is in, so a slow
answer delays the requests behind it and they are never counted as late: its p99 is throughput in another form.
Here request ``i`` is due at ``start + i / rate``; it is sent on an idle keep-alive connection when due, or as
soon as one frees up (HTTP/1.1 has no pipelining), and its latency runs from when it was due to when its answer is
complete: waiting for a connection, for the server's queue and the server's own work all count, as they would for
kube-apiserver's requests.

The client is one asyncio process of its own (run as ``python -m bench.open_loop``, one JSON line out), with the
request pre-formatted and answers read without an HTTP library: a few tens of µs of CPU per request, so it can
offer most of what one server core answers. The event loop's timers have millisecond resolution: requests due
within the same millisecond leave together (``lag_p99_ms`` reports how far behind its schedule the client got).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.stats import percentile

#: Connections opened before the run; requests due while all are busy wait for one.
DEFAULT_CONNECTIONS = 64
WARM_UP_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class OpenLoopResult:
    offered_rps: float
    #: Answers per second over the measured period (below the offered rate when the server cannot keep up).
    achieved_rps: float
    requests: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    #: How far behind its due time the client's scheduler got to the 99th percentile request (the client's own
    #: lag, at most a millisecond or so when it keeps up; waiting for a free connection is not in it).
    lag_p99_ms: float
    errors: int
    #: Requests still unanswered when the run ended (counted as errors too).
    unanswered: int

    def to_json(self) -> dict[str, Any]:
        return {key: round(value, 3) if isinstance(value, float) else value for key, value in asdict(self).items()}


class _Connection(asyncio.Protocol):
    """One keep-alive connection answering one request at a time."""

    def __init__(self, run: _Run) -> None:
        self._run = run
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._due = 0.0
        self._expected: int | None = None
        self._status_ok = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._run.lost(self)

    def send(self, due: float) -> None:
        self._due = due
        self._buffer.clear()
        self._expected = None
        assert self.transport is not None
        self.transport.write(self._run.request)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if self._expected is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).decode("latin-1")
            self._status_ok = head.startswith("HTTP/1.1 200")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            self._expected = end + 4 + length
        if len(buffer) >= self._expected:
            self._run.answered(self, self._due, self._status_ok)


class _Run:
    def __init__(self, request: bytes) -> None:
        self.request = request
        self.idle: list[_Connection] = []
        self.waiting: deque[float] = deque()
        self.latencies: list[float] = []
        self.lag: list[float] = []
        self.errors = 0
        self.outstanding = 0
        self.measuring_from = float("inf")
        self.loop = asyncio.get_running_loop()

    def due(self, when: float) -> None:
        self.outstanding += 1
        if when >= self.measuring_from:
            self.lag.append(self.loop.time() - when)
        if self.idle:
            self._send(self.idle.pop(), when)
        else:
            self.waiting.append(when)

    def _send(self, connection: _Connection, when: float) -> None:
        connection.send(when)

    def answered(self, connection: _Connection, due: float, ok: bool) -> None:
        self.outstanding -= 1
        if due >= self.measuring_from:
            self.latencies.append(self.loop.time() - due)
            if not ok:
                self.errors += 1
        if self.waiting:
            self._send(connection, self.waiting.popleft())
        else:
            self.idle.append(connection)

    def lost(self, connection: _Connection) -> None:
        if connection in self.idle:
            self.idle.remove(connection)


async def _open(run: _Run, host: str, port: int, context: ssl.SSLContext | None, count: int) -> list[_Connection]:
    loop = asyncio.get_running_loop()
    connections = []
    for _ in range(count):
        _, protocol = await loop.create_connection(lambda: _Connection(run), host, port, ssl=context,
                                                   server_hostname=host if context else None)
        connections.append(protocol)
    return connections


async def measure(url: str, body: bytes, rate: float, duration: float,
                  connections: int = DEFAULT_CONNECTIONS) -> OpenLoopResult:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 443
    context = None
    if parts.scheme == "https":
        context = ssl.create_default_context()
        # As wrk: the benchmark's certificate is self-signed, and verifying it is not what is measured.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    request = (f"POST {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1\r\n"
               f"Host: {host}:{port}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body
    run = _Run(request)
    opened = await _open(run, host, port, context, connections)
    run.idle.extend(opened)
    loop = asyncio.get_running_loop()
    interval = 1.0 / rate
    start = loop.time() + 0.05
    run.measuring_from = start + WARM_UP_SECONDS
    end = run.measuring_from + duration
    index = 0
    while True:
        now = loop.time()
        while (when := start + index * interval) <= now and when < end:
            run.due(when)
            index += 1
        if when >= end:
            break
        await asyncio.sleep(max(0.0, when - loop.time()))
    # Answers to requests due by the end, within a grace period; the rest are unanswered.
    grace = loop.time() + 10.0
    while run.outstanding and loop.time() < grace:
        await asyncio.sleep(0.01)
    for connection in opened:
        if connection.transport is not None:
            connection.transport.close()
    ordered = sorted(run.latencies)
    lag = sorted(run.lag)
    measured = len(ordered)
    return OpenLoopResult(
        offered_rps=rate, achieved_rps=measured / duration, requests=measured,
        p50_ms=percentile(ordered, 0.5) * 1000, p99_ms=percentile(ordered, 0.99) * 1000,
        p999_ms=percentile(ordered, 0.999) * 1000, max_ms=(ordered[-1] if ordered else float("nan")) * 1000,
        lag_p99_ms=percentile(lag, 0.99) * 1000, errors=run.errors + run.outstanding,
        unanswered=run.outstanding)


def run_open_loop(url: str, body: bytes, *, rate: float, duration: float,
                  connections: int = DEFAULT_CONNECTIONS) -> OpenLoopResult:
    """``measure`` in a process of its own (the client must not share the caller's interpreter)."""
    body_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-open-loop-{os.getpid()}.json"
    body_file.write_bytes(body)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "bench.open_loop", "--url", url, "--body-file", str(body_file), "--rate",
             f"{rate:g}", "--duration", f"{duration:g}", "--connections", str(connections)],
            capture_output=True, text=True, timeout=duration + WARM_UP_SECONDS + 60, check=False,
            cwd=Path(__file__).resolve().parents[1])
    finally:
        body_file.unlink(missing_ok=True)
    for line in completed.stdout.splitlines():
        if line.startswith("OPEN_LOOP "):
            data = json.loads(line.removeprefix("OPEN_LOOP "))
            return OpenLoopResult(**data)
    raise RuntimeError(f"open-loop client produced no result (exit {completed.returncode}):\n{completed.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.open_loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--body-file", required=True, type=Path)
    parser.add_argument("--rate", required=True, type=float, help="requests per second")
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds (after 1 s of warm-up)")
    parser.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = asyncio.run(measure(args.url, args.body_file.read_bytes(), args.rate, args.duration, args.connections))
    print("OPEN_LOOP " + json.dumps(asdict(result)), flush=True)
    print(f"# {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
