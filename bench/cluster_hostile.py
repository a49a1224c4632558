"""The cluster view (``--kubeconfig``) against a hostile stand-in kube-apiserver: figures for issue 26.

    python -m bench.cluster_hostile [SCENARIO...] [--source DIR]

Scenarios (all by default):

- ``deadline``: a SubjectAccessReview, then a namespace GET, that never answer; requests with
  ``?timeout=10s``, 12 of them 1/12 s apart, then 64 at once: how many get a 504 (the webhook's
  failurePolicy) and how many the policy's own answer, and with which message;
- ``starvation``: 64 requests waiting on a hung SubjectAccessReview (and then on a hung namespace GET)
  while 20 requests that need no cluster call (``?timeout=5s``) are sent one after the other: their status
  and latency;
- ``sizes``: 20 concurrent 50 MB SubjectAccessReview answers (``?timeout=30s``; RSS before, peak, after);
  lists in one page (``limit`` ignored): 100 MB of namespaces (50,000 with a 2 KB annotation), 100,000
  namespaces, and a 100 MB unknown field (peak RSS, the longest /livez every 5 ms from another process);
- ``relist``: 20,000 namespaces and every watch failing at once: lists made in the first 30 s and in 120 s,
  and p50/p99 of unrelated requests meanwhile;
- ``bookmarks``: a watch that streams bookmarks as fast as it can: the daemon's CPU seconds in 12 s and
  p50/p99 of unrelated requests meanwhile.

The daemon runs with ``--workers 1``; ``--source`` imports staticadm from another checkout (for the figures
before a change) while the stand-in stays this checkout's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.stats import percentile  # noqa: E402
from tests.cluster.apiserver import FakeApiServer  # noqa: E402
from tests.cluster.policies import ERRORED_CHECK_POLICY, PLAIN_POLICY, SELECTOR_POLICY  # noqa: E402
from tests.cluster.stalls import LivezProbe  # noqa: E402
from tests.server.harness import free_port  # noqa: E402


def review(resource: str, kind: str, namespace: str, *, user: str = "alice", uid: str = "u") -> bytes:
    return orjson.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": kind},
                    "resource": {"group": "", "version": "v1", "resource": resource}, "operation": "CREATE",
                    "name": "web", "namespace": namespace, "userInfo": {"username": user},
                    "object": {"apiVersion": "v1", "kind": kind, "metadata": {"name": "web", "namespace": namespace}}},
    })


@dataclass
class Answer:
    status: int
    seconds: float
    message: str


class Daemon:
    def __init__(self, source: Path, work: Path, apiserver: FakeApiServer) -> None:
        manifests = work / "manifests"
        manifests.mkdir(parents=True)
        for name, text in (("authz", ERRORED_CHECK_POLICY), ("selector", SELECTOR_POLICY), ("plain", PLAIN_POLICY)):
            (manifests / f"{name}.yaml").write_text(text)
        self.socket = work / "staticadm.sock"
        command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(manifests),
                   "--socket", str(self.socket), "--listen", "", "--state-dir", str(work / "state"),
                   "--workers", "1", "--kubeconfig", str(apiserver.kubeconfig(work / "kubeconfig"))]
        self.log = (work / "daemon.log").open("wb")
        self.process = subprocess.Popen(command, cwd=work, env={**os.environ, "PYTHONPATH": str(source)},
                                        stdout=self.log, stderr=self.log)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def _proc(self, name: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
        return 0

    def rss_mib(self) -> float:
        return self._proc("VmRSS") / 1024

    def peak_mib(self) -> float:
        return self._proc("VmHWM") / 1024

    def reset_peak(self) -> None:
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(self.socket), limit=0),
                                     timeout=aiohttp.ClientTimeout(total=60))

    async def call(self, session: aiohttp.ClientSession, body: bytes, timeout: str = "10s") -> Answer:
        started = time.perf_counter()
        async with session.post(f"http://localhost/validate?timeout={timeout}", data=body,
                                headers={"Content-Type": "application/json"}) as response:
            data = orjson.loads(await response.read())
        seconds = time.perf_counter() - started
        if response.status != 200:
            return Answer(response.status, seconds, data.get("message", ""))
        answer = data["response"]
        return Answer(200, seconds, "allowed" if answer["allowed"] else answer["status"]["message"])

    async def metric(self, session: aiohttp.ClientSession, name: str) -> float:
        async with session.get("http://localhost/metrics") as response:
            text = (await response.read()).decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    async def ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                async with self.session() as session:
                    if await self.metric(session, 'staticadm_cluster_cache_synced{resource="namespaces"}') == 1:
                        return
            except (OSError, aiohttp.ClientError):
                pass
            await asyncio.sleep(0.1)
        raise SystemExit("the daemon's cluster view did not sync")


@contextmanager
def running(source: Path, namespaces: int = 2, annotation: int = 0) -> Iterator[tuple[Daemon, FakeApiServer]]:
    """The stand-in with ``namespaces`` namespaces (each annotated with ``annotation`` bytes) and a daemon that
    has listed them."""
    with tempfile.TemporaryDirectory(prefix="staticadm-hostile-") as temp:
        work = Path(temp)
        apiserver = FakeApiServer(work / "apiserver", free_port(), authorize=lambda spec: {"allowed": True})
        apiserver.set_namespace("qa", {"environment": "test"})
        for index in range(namespaces - 1):
            apiserver.set_namespace(f"team-{index:06d}", {"environment": "production"},
                                    annotations={"note": "n" * annotation} if annotation else None)
        apiserver.start()
        daemon = Daemon(source, work, apiserver)
        try:
            asyncio.run(daemon.ready())
            yield daemon, apiserver
        finally:
            daemon.stop()
            apiserver.stop()


def _shape(message: str) -> str:
    """A message with what differs between requests (namespace names, the stand-in's port) taken out."""
    message = re.sub(r"\b(fresh|burst)-\d+", "NAME", message)
    return re.sub(r"within [\d.]+ s", "within N s", re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", message))


def classify(answers: list[Answer]) -> str:
    kinds = Counter("504" if a.status == 504 else f"{a.status}: {_shape(a.message)[-110:]}" for a in answers)
    slowest = max(a.seconds for a in answers)
    return f"{dict(kinds)}; slowest {slowest:.3f} s"


async def _spaced(daemon: Daemon, bodies: list[bytes], spacing: float) -> list[Answer]:
    async with daemon.session() as session:
        tasks = []
        for body in bodies:
            tasks.append(asyncio.create_task(daemon.call(session, body)))
            await asyncio.sleep(spacing)
        return list(await asyncio.gather(*tasks))


def deadline(source: Path) -> None:
    with running(source) as (daemon, apiserver):
        apiserver.hostility.hang = {"sar"}
        spaced = asyncio.run(_spaced(daemon, [review("pods", "Pod", "qa", uid=str(i)) for i in range(12)], 1 / 12))
        print(f"deadline: hung SubjectAccessReview, 12 requests 1/12 s apart (timeout=10s): {classify(spaced)}")
        burst = asyncio.run(_spaced(daemon, [review("pods", "Pod", "qa", uid=str(i)) for i in range(64)], 0))
        print(f"deadline: hung SubjectAccessReview, 64 at once: {classify(burst)}")
        apiserver.hostility.hang = {"get"}
        spaced = asyncio.run(_spaced(daemon, [review("configmaps", "ConfigMap", f"fresh-{i}") for i in range(12)],
                                     1 / 12))
        print(f"deadline: hung namespace GET, 12 requests 1/12 s apart: {classify(spaced)}")
        burst = asyncio.run(_spaced(daemon, [review("configmaps", "ConfigMap", f"burst-{i}") for i in range(64)], 0))
        print(f"deadline: hung namespace GET, 64 at once: {classify(burst)}")


async def _starve(daemon: Daemon, hung: list[bytes]) -> tuple[list[Answer], list[Answer]]:
    async with daemon.session() as session:
        waiting = [asyncio.create_task(daemon.call(session, body)) for body in hung]
        await asyncio.sleep(0.5)
        unrelated = [await daemon.call(session, review("services", "Service", "qa", uid=f"s{i}"), timeout="5s")
                     for i in range(20)]
        return list(await asyncio.gather(*waiting)), unrelated


def starvation(source: Path) -> None:
    with running(source) as (daemon, apiserver):
        for operation, bodies in (
                ("sar", [review("pods", "Pod", "qa", user=f"u{i}", uid=str(i)) for i in range(64)]),
                ("get", [review("configmaps", "ConfigMap", f"fresh-{i}") for i in range(64)])):
            apiserver.hostility.hang = {operation}
            hung, unrelated = asyncio.run(_starve(daemon, bodies))
            latencies = sorted(a.seconds for a in unrelated)
            print(f"starvation ({operation} hung): 64 waiting: {classify(hung)}")
            print(f"starvation ({operation} hung): 20 unrelated one after the other: {classify(unrelated)}; "
                  f"median {statistics.median(latencies):.3f} s")


def _relisted(daemon: Daemon, apiserver: FakeApiServer, seconds: float) -> tuple[float, int]:
    """(the longest /livez round trip, from a process of its own, every 5 ms for ``seconds`` after every watch is
    ended; the list pages asked meanwhile)."""
    lists = apiserver.list_pages
    probe = LivezProbe(daemon.socket)
    apiserver.expire_watches()
    time.sleep(seconds)
    return probe.longest(), apiserver.list_pages - lists


def sizes(source: Path) -> None:
    with running(source) as (daemon, apiserver):
        apiserver.hostility.padding = {"sar": 50 << 20}
        before = daemon.rss_mib()
        daemon.reset_peak()

        async def twenty() -> list[Answer]:
            async with daemon.session() as session:
                return list(await asyncio.gather(*(
                    daemon.call(session, review("pods", "Pod", "qa", user=f"big{i}", uid=str(i)), timeout="30s")
                    for i in range(20))))

        answers = asyncio.run(twenty())
        time.sleep(1)
        print(f"sizes: 20 concurrent 50 MB SubjectAccessReview answers: {classify(answers)}; RSS {before:.0f} MiB "
              f"before, peak {daemon.peak_mib():.0f} MiB, {daemon.rss_mib():.0f} MiB after")
    for label, count, annotation in (("100 MB of namespaces (50,000 with a 2 KB annotation)", 50_000, 2048),
                                     ("100,000 namespaces", 100_000, 0)):
        with running(source, count, annotation) as (daemon, apiserver):
            apiserver.hostility.ignore_limit = True
            _relist_figures(daemon, apiserver, f"{label} in one page")
    with running(source) as (daemon, apiserver):
        apiserver.hostility.padding = {"list": 100 << 20}
        apiserver.hostility.ignore_limit = True
        _relist_figures(daemon, apiserver, "a list page with a 100 MB unknown field")


def _relist_figures(daemon: Daemon, apiserver: FakeApiServer, label: str) -> None:
    before = daemon.rss_mib()
    daemon.reset_peak()
    stall, pages = _relisted(daemon, apiserver, 15)

    async def objects() -> float:
        async with daemon.session() as session:
            return await daemon.metric(session, 'staticadm_cluster_cache_objects{resource="namespaces"}')

    print(f"sizes: {label}: longest /livez {stall * 1000:.0f} ms, RSS {before:.0f} MiB before, peak "
          f"{daemon.peak_mib():.0f} MiB, {daemon.rss_mib():.0f} MiB after ({pages} pages asked, "
          f"{asyncio.run(objects()):.0f} namespaces cached)")


async def _unrelated(daemon: Daemon, seconds: float) -> list[float]:
    latencies = []
    async with daemon.session() as session:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            answer = await daemon.call(session, review("services", "Service", "qa"))
            latencies.append(answer.seconds)
            await asyncio.sleep(0.01)
    return latencies


def _quantiles(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    return (f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {percentile(ordered, 0.99) * 1000:.1f} ms "
            f"({len(ordered)} requests)")


def relist(source: Path) -> None:
    with running(source, namespaces=20_000) as (daemon, apiserver):
        quiet = asyncio.run(_unrelated(daemon, 5))
        apiserver.hostility.watch = "fail"
        starts = apiserver.list_pages
        apiserver.expire_watches()
        storm = asyncio.run(_unrelated(daemon, 30))
        early = apiserver.list_pages - starts
        storm += asyncio.run(_unrelated(daemon, 90))
        pages = apiserver.list_pages - starts
        print(f"relist: 20,000 namespaces, every watch failing: {early / 40:.1f} full lists (of 40 pages) in the first "
              f"30 s, {pages / 40:.1f} in 120 s; unrelated before {_quantiles(quiet)}, during {_quantiles(storm)}")


def bookmarks(source: Path) -> None:
    with running(source) as (daemon, apiserver):
        quiet = asyncio.run(_unrelated(daemon, 5))
        apiserver.hostility.watch = "bookmarks"
        cpu = daemon.cpu_seconds()
        apiserver.expire_watches()
        flood = asyncio.run(_unrelated(daemon, 12))
        print(f"bookmarks: a watch streaming bookmarks: daemon CPU {daemon.cpu_seconds() - cpu:.1f} s in 12 s; "
              f"unrelated before {_quantiles(quiet)}, during {_quantiles(flood)}")


SCENARIOS = {"deadline": deadline, "starvation": starvation, "sizes": sizes, "relist": relist, "bookmarks": bookmarks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    parser.add_argument("--source", type=Path, default=REPO, help="the checkout whose staticadm runs")
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    for name in args.scenarios or SCENARIOS:
        SCENARIOS[name](args.source.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

