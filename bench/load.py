"""Load generation: wrk with bench/post.lua, or a small aiohttp client when wrk is missing.

wrk (C, epoll, keep-alive) saturates a Python server with one thread; a Python client cannot: it
spends as much CPU per request as the server, so the fallback exists only so the smoke test can run
without wrk, and its figures are labelled as not saturating.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import percentile

LUA_SCRIPT = Path(__file__).with_name("post.lua")
WRK_TOOL = "wrk"
FALLBACK_TOOL = "python-fallback (not saturating)"


@dataclass(frozen=True, slots=True)
class LoadResult:
    tool: str
    requests: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    #: wrk's error classes; "status" counts responses >= 400, which must stay 0 for a valid run.
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rps": round(self.rps, 1)}


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def run_wrk(url: str, body: bytes | Sequence[bytes], *, duration: float, connections: int, threads: int = 1,
            timeout: float = 10.0) -> LoadResult:
    """``body``: one body for every request, or bodies sent in turn (JSON without newlines, one per line)."""
    many = not isinstance(body, bytes)
    with tempfile.NamedTemporaryFile(prefix="bench-body-", suffix=".json") as body_file:
        body_file.write(b"\n".join(body) if many else body)
        body_file.flush()
        # wrk rounds durations to whole seconds; a 0 s run would measure nothing.
        seconds = max(1, round(duration))
        command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", f"--timeout={timeout:g}s",
                   "-s", str(LUA_SCRIPT), url]
        completed = subprocess.run(command, env={**os.environ, "BENCH_BODY_FILE": body_file.name,
                                                "BENCH_BODY_LINES": "1" if many else "0"},
                                   capture_output=True, text=True, timeout=seconds + timeout + 30, check=False)
    for line in completed.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            data = json.loads(line.removeprefix("BENCH_RESULT "))
            return LoadResult(WRK_TOOL, data["requests"], data["duration_us"] / 1e6, data["p50_us"] / 1000,
                              data["p90_us"] / 1000, data["p99_us"] / 1000, data["max_us"] / 1000, data["errors"])
    raise RuntimeError(f"wrk produced no result (exit {completed.returncode}):\n{completed.stdout}\n{completed.stderr}")


async def _fallback(url: str, body: bytes | Sequence[bytes], duration: float, connections: int) -> LoadResult:
    import aiohttp

    context = ssl.create_default_context()
    # Like wrk: the benchmark's certificate is self-signed and verifying it is not what is measured.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    latencies: list[float] = []
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(ssl=context, limit=connections)
    bodies = [body] if isinstance(body, bytes) else list(body)
    sent_count = 0
    started = time.perf_counter()
    deadline = started + duration

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal sent_count
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            data = bodies[sent_count % len(bodies)]
            sent_count += 1
            try:
                async with session.post(url, data=data, headers=headers) as response:
                    await response.read()
                    if response.status >= 400:
                        errors["status"] += 1
            except TimeoutError:
                errors["timeout"] += 1
                continue
            except aiohttp.ClientError:
                errors["read"] += 1
                continue
            latencies.append(time.perf_counter() - sent)

    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    elapsed = time.perf_counter() - started
    if not latencies:
        return LoadResult(FALLBACK_TOOL, 0, elapsed, 0.0, 0.0, 0.0, 0.0, errors)
    ordered = sorted(latencies)
    return LoadResult(FALLBACK_TOOL, len(ordered), elapsed, statistics.median(ordered) * 1000,
                      percentile(ordered, 0.9) * 1000, percentile(ordered, 0.99) * 1000, ordered[-1] * 1000, errors)


def run_fallback(url: str, body: bytes | Sequence[bytes], *, duration: float, connections: int) -> LoadResult:
    return asyncio.run(_fallback(url, body, duration, connections))


def run_load(url: str, body: bytes | Sequence[bytes], *, duration: float, connections: int, threads: int = 1,
             force_fallback: bool = False) -> LoadResult:
    if wrk_available() and not force_fallback:
        return run_wrk(url, body, duration=duration, connections=connections, threads=threads)
    return run_fallback(url, body, duration=duration, connections=connections)
