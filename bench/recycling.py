"""Paced keep-alive load against ``serve --workers``: does replacing a worker ever fail or stall a request?

kube-apiserver calls a webhook over a pool of keep-alive HTTPS connections and, for a POST, never retries a
request written on a connection the server then closed. This client does the same: ``--connections``
connections share requests paced at ``--rate`` per second; a connection whose server closed it while idle
(an EOF seen before the next request, as Go's transport notices in its read loop) or that was answered with
``Connection: close`` is replaced, which is no failure; a request that gets no answer (EOF, reset, or
nothing within ``--timeout``) is one. The policy calls ``quantity()``, ``url()`` and ``ip()`` on request
values, whose arguments the CEL engine keeps (docs/known-gaps.md), so with a small
``--worker-memory-growth`` workers are replaced every few seconds.

    python -m bench.recycling                                  # 120 s at 500 req/s, 8 connections
    python -m bench.recycling --duration 30 --json out.json
    python -m bench.recycling --stop-worker 15                 # SIGSTOP one worker for 15 s mid-run

Traffic goes to 127.0.0.1 only and stops after ``--duration``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import ssl
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.daemons import Server, free_port
from tests.policy_text import validating_policy_yaml
from tests.server.harness import review

#: Each request calls three library functions implemented in Python on values from the request.
POLICY = validating_policy_yaml("libraries", validations="""\
  - expression: "quantity(object.metadata.annotations['memory']).isLessThan(quantity('1Ti'))"
  - expression: "url(object.metadata.annotations['endpoint']).getHost() != ''"
  - expression: "ip(object.metadata.annotations['address']).family() == 4"
""")


def review_body(index: int) -> bytes:
    document = review(uid=f"recycling-{index}", name=f"pod-{index}")
    document["request"]["object"]["metadata"]["annotations"] = {
        "memory": f"{index % 1000 + 1}Mi", "endpoint": f"https://svc-{index % 997}.example.com:8443/x",
        "address": f"10.{index % 250}.{index // 250 % 250}.{index % 7 + 1}"}
    return orjson.dumps(document)


@dataclass
class Figures:
    sent: int = 0
    answered: int = 0
    #: Answered, but not 200 with this request's uid and allowed.
    wrong: int = 0
    #: Written on a connection that then ended without an answer.
    unanswered: int = 0
    #: No answer within --timeout.
    timed_out: int = 0
    #: Still waiting for a free connection when the run ended.
    never_sent: int = 0
    #: Answered, but later than 1 s after it was written.
    slow: int = 0
    #: Connections opened: the first ones, and one for each the server closed.
    connects: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)

        def quantile(q: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else 0.0

        figures = {key: value for key, value in asdict(self).items() if key not in ("latencies_ms", "failures")}
        return {**figures, "p50_ms": quantile(0.5), "p99_ms": quantile(0.99), "max_ms": quantile(1.0),
                "first_failures": self.failures[:10]}


async def _read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    body = await reader.readexactly(int(match.group(1))) if match else b""
    return head, body


async def _connection(port: int, context: ssl.SSLContext, queue: asyncio.Queue[tuple[int, bytes] | None],
                      figures: Figures, timeout: float) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    def drop() -> None:
        nonlocal reader, writer
        if writer is not None:
            writer.close()
        reader = writer = None

    while (item := await queue.get()) is not None:
        index, body = item
        if reader is None or writer is None or reader.at_eof():
            drop()
            figures.connects += 1
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=context), timeout)
            except (OSError, TimeoutError) as error:
                figures.sent += 1
                figures.unanswered += 1
                figures.failures.append(f"request {index}: connecting failed: {type(error).__name__}")
                continue
        writer.write(b"POST /validate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        figures.sent += 1
        written = time.monotonic()
        try:
            head, answer = await asyncio.wait_for(_read_answer(reader), timeout)
        except TimeoutError:
            figures.timed_out += 1
            figures.failures.append(f"request {index}: no answer within {timeout:g} s")
            drop()
            continue
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError) as error:
            figures.unanswered += 1
            figures.failures.append(f"request {index}: {type(error).__name__} after "
                                    f"{time.monotonic() - written:.3f} s")
            drop()
            continue
        elapsed = time.monotonic() - written
        figures.answered += 1
        figures.latencies_ms.append(elapsed * 1000)
        if elapsed > 1.0:
            figures.slow += 1
        response = orjson.loads(answer).get("response", {}) if head.startswith(b"HTTP/1.1 200") else {}
        if response.get("uid") != f"recycling-{index}" or response.get("allowed") is not True:
            figures.wrong += 1
            status_line = head.partition(b"\r\n")[0]
            figures.failures.append(f"request {index}: {status_line!r} {answer[:200]!r}")
        if re.search(rb"(?im)^connection:\s*close", head):
            drop()
    drop()


async def drive(port: int, rate: float, connections: int, duration: float, timeout: float) -> Figures:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    figures = Figures()
    queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
    clients = [asyncio.create_task(_connection(port, context, queue, figures, timeout)) for _ in range(connections)]
    bodies = [review_body(index) for index in range(int(rate * duration))]
    started = time.monotonic()
    for index, body in enumerate(bodies):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((index, body))
    # Requests still queued when the schedule ends waited for a connection all along: they count as not
    # sent, so that a server that answers nothing ends the run in time too.
    await asyncio.sleep(timeout)
    while not queue.empty():
        queue.get_nowait()
        figures.never_sent += 1
    for _ in clients:
        queue.put_nowait(None)
    await asyncio.gather(*clients)
    return figures


def _metric(text: str, name: str) -> float:
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(name + " "))


def _workers(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=500.0, help="requests per second (default 500)")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections (default 8)")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    parser.add_argument("--workers", default="2", help="serve --workers (default 2)")
    parser.add_argument("--worker-memory-growth", default="16", help="serve --worker-memory-growth MiB (default 16)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a request may wait for its answer")
    parser.add_argument("--stop-worker", type=float, default=0.0, metavar="SECONDS",
                        help="SIGSTOP one worker a third into the run for this long, then SIGCONT it")
    parser.add_argument("--workdir", type=Path, default=None, help="where the daemon's files go (default: a "
                        "temporary directory)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-recycling-"))
    manifests = workdir / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "libraries.yaml").write_text(POLICY)
    port = free_port()
    command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(manifests), "--socket", "",
               "--listen", f"127.0.0.1:{port}", "--state-dir", str(workdir / "state"), "--log-level", "info",
               "--poll-interval", "3600", "--workers", args.workers,
               "--worker-memory-growth", args.worker_memory_growth]
    server = Server("staticadm", command, workdir / "staticadm.log", port).start()
    stopper: asyncio.Task[None] | None = None

    async def run() -> Figures:
        nonlocal stopper
        if args.stop_worker:
            async def stop_one() -> None:
                await asyncio.sleep(args.duration / 3)
                victim = _workers(server.pid)[0]
                os.kill(victim, signal.SIGSTOP)
                await asyncio.sleep(args.stop_worker)
                # It may have been replaced (killed) meanwhile.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGCONT)

            stopper = asyncio.create_task(stop_one())
        figures = await drive(port, args.rate, args.connections, args.duration, args.timeout)
        if stopper is not None:
            await stopper
        return figures

    try:
        figures = asyncio.run(run())
        try:
            metrics = server.request("GET", "/metrics")[1].decode()
        except OSError as error:
            metrics = f"# unavailable: {error}"
    finally:
        server.stop()
    log = server.log()
    result = {
        "command": " ".join(command), "rate": args.rate, "connections": args.connections, "duration": args.duration,
        **figures.summary(),
        "metrics_scraped": not metrics.startswith("# unavailable"),
        "recycles": _metric(metrics, "staticadm_worker_recycles_total"),
        "restarts": _metric(metrics, "staticadm_worker_restarts_total"),
        "worker_deaths_logged": log.count("worker died; replacing it"),
        "sigbus_deaths_logged": log.count("killed by SIGBUS"),
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"daemon log: {server.log_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
