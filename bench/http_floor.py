"""What the HTTP layer costs an AdmissionReview: aiohttp's null server against a bare HTTP/1.1 protocol.

    python -m bench.http_floor [--rounds N] [--duration S] [--event-loop asyncio|uvloop|both]

Both servers do the null server's work (``bench/null_server.py``): read the body, parse it with orjson and answer
``allowed: true`` with its uid. Both use the same TLS settings and certificate on asyncio's own TLS
(``loop.create_server(ssl=...)``, as aiohttp's SockSite). The second replaces aiohttp's request and response
handling with an ``asyncio.Protocol`` that only knows keep-alive requests with a Content-Length. wrk drives each in
turn with the pod-create body, alternated ``--rounds`` times. Each row gives the server's CPU per request from the
kernel's accounting (``/proc/PID/stat``). ``--event-loop`` runs both on asyncio's loop (the default), uvloop's (its
TLS in C), or ``both``: the two pairs alternated in one run.

It is a measurement of how far below aiohttp's floor a request could go, for issue 46's CPU line at 10 policies.
The bare protocol is not a server to deploy: it refuses nothing and knows no chunked bodies, timeouts, limits or
shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
from pathlib import Path
from typing import cast

import orjson

from bench.daemons import Server, free_port, null_server, process_cpu_seconds
from bench.fixtures import pod_create_request
from bench.load import run_load
from bench.null_server import answer_body, ssl_context
from staticadm.server import event_loop

_READY = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


class _BareHttp(asyncio.Protocol):
    """Keep-alive HTTP/1.1 requests framed by Content-Length, answered as the null server answers them."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._body_length = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not checked with isinstance: uvloop's transports are no subclasses of asyncio's.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        buffer = self._buffer + data if self._buffer else data
        while buffer:
            if self._body_length < 0:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    break
                head, buffer = buffer[:end], buffer[end + 4:]
                if head.startswith(b"GET "):
                    self._transport.write(_READY)
                    continue
                self._body_length = _content_length(head)
            if len(buffer) < self._body_length:
                break
            body, buffer = buffer[:self._body_length], buffer[self._body_length:]
            self._body_length = -1
            self._transport.write(_answer(body))
        self._buffer = buffer


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _answer(body: bytes) -> bytes:
    answer = answer_body(body)
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer)


async def _serve(port: int, cert: str, key: str) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_BareHttp, "127.0.0.1", port, ssl=ssl_context(cert, key))
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()


def _measure(server: Server, body: bytes, duration: float) -> tuple[float, float, int]:
    """req/s, CPU µs per request and errors of one wrk run against ``server``, after a second of warm-up."""
    url = server.url + "/validate"
    run_load(url, body, duration=1.0, connections=32)
    before = process_cpu_seconds(server.pid)
    result = run_load(url, body, duration=duration, connections=32)
    spent = process_cpu_seconds(server.pid) - before
    return result.rps, spent / result.requests * 1e6 if result.requests else 0.0, result.error_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="alternated runs of each server (default 3)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per run (default 5)")
    parser.add_argument("--serve", metavar="PORT", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tls-cert", help=argparse.SUPPRESS)
    parser.add_argument("--tls-key", help=argparse.SUPPRESS)
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop", "both"), default="asyncio",
                        help="the loop both servers run on, or both loops in turn (default: asyncio)")
    args = parser.parse_args()
    loops = ["asyncio", "uvloop"] if args.event_loop == "both" else [args.event_loop]
    if args.serve is not None:
        event_loop.run(_serve(args.serve, args.tls_cert, args.tls_key), loops[0])
        return
    from staticadm.server.listeners import ensure_self_signed

    body = orjson.dumps(pod_create_request())
    with tempfile.TemporaryDirectory(prefix="staticadm-http-floor-") as temp:
        work = Path(temp)
        tls = ensure_self_signed(work / "state")
        servers: list[Server] = []
        for loop in loops:
            null = null_server(work, tls.cert, tls.key, loop=loop)
            null.name = f"null {loop}"
            port = free_port()
            bare = Server(f"bare {loop}", [sys.executable, "-m", "bench.http_floor", "--serve", str(port),
                                           "--tls-cert", str(tls.cert), "--tls-key", str(tls.key),
                                           "--event-loop", loop],
                          work / f"bare-{loop}.log", port)
            servers += [null.start(), bare.start()]
        try:
            print(f"{'server':<16} {'round':>5} {'req/s':>8} {'CPU µs/req':>10} {'errors':>6}")
            for round_number in range(1, args.rounds + 1):
                for server in servers:
                    rps, cpu_us, errors = _measure(server, body, args.duration)
                    print(f"{server.name:<16} {round_number:>5} {rps:>8.0f} {cpu_us:>10.0f} {errors:>6}", flush=True)
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    main()
