"""The null AdmissionReview server: staticadm's HTTP stack and TLS with no admission work.

It is the benchmark's baseline, so it does what every webhook must do and nothing else: aiohttp over a
pre-bound socket (as staticadm's SockSite), TLS 1.2+ with ALPN http/1.1 and the same certificate,
read the body, parse it with orjson, answer ``allowed: true`` with the request's uid. The ratio
staticadm/null is then the cost of staticadm's own work (matching, CEL, metrics, logging, thread
handoff), not of Python HTTP or TLS.

The daemon answers an AdmissionReview that arrives whole in one read without aiohttp's request handling
(``staticadm/server/fast_http.py``); this server keeps aiohttp's for every request, so the ratio also counts
that saving (``python -m bench.http_floor`` measures it).

It runs on the event loop the daemon under test runs on (``--event-loop``, as ``staticadm serve``'s), so the
ratio does not credit staticadm or the baseline with the loop's own speed.

Run: python -m bench.null_server --listen 127.0.0.1:PORT --tls-cert CERT --tls-key KEY [--processes N]
     [--event-loop asyncio|uvloop|auto]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import ssl

import orjson
from aiohttp import web

from staticadm.server import event_loop


def answer_body(body: bytes) -> bytes:
    """The null server's answer to an AdmissionReview's body: allowed, with the request's uid."""
    document = orjson.loads(body)
    answer = {"apiVersion": document.get("apiVersion", "admission.k8s.io/v1"), "kind": "AdmissionReview",
              "response": {"uid": (document.get("request") or {}).get("uid", ""), "allowed": True}}
    return orjson.dumps(answer)


async def _review(request: web.Request) -> web.Response:
    return web.Response(body=answer_body(await request.read()), content_type="application/json")


async def _ready(_request: web.Request) -> web.Response:
    return web.Response(text="ok", content_type="text/plain")


def create_app() -> web.Application:
    app = web.Application(client_max_size=3 * 1024 * 1024 + 256 * 1024)
    app.router.add_post("/validate", _review)
    app.router.add_post("/mutate", _review)
    app.router.add_get("/readyz", _ready)
    return app


def ssl_context(cert: str, key: str) -> ssl.SSLContext:
    # The same settings as staticadm.server.listeners.ServingTls, so the handshake and record costs match.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(cert, key)
    return context


def bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve(sock: socket.socket, cert: str, key: str) -> None:
    runner = web.AppRunner(create_app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=ssl_context(cert, key)).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description="null AdmissionReview server (benchmark baseline)")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--processes", type=int, default=1,
                        help="processes sharing the listening socket, as staticadm serve --workers N")
    parser.add_argument("--event-loop", choices=event_loop.EVENT_LOOPS, default="asyncio",
                        help="the event loop, as staticadm serve --event-loop (default: asyncio)")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    sock = bind(host, int(port))
    children = []
    for _ in range(args.processes - 1):
        pid = os.fork()
        if pid == 0:
            event_loop.run(serve(sock, args.tls_cert, args.tls_key), args.event_loop)
            os._exit(0)
        children.append(pid)
    try:
        event_loop.run(serve(sock, args.tls_cert, args.tls_key), args.event_loop)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
