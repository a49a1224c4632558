"""Policies built to be slow: every request is answered in time, failurePolicy applies, others keep flowing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.reliability.policies import BUDGETED, hostile_review, policy_yaml
from tests.server.harness import REQUESTS, Daemon, DaemonFactory, review

#: kube-apiserver's default webhook timeout; the property is "answered well before it".
WEBHOOK_TIMEOUT = 10.0


def _hostile_daemon(make_daemon: DaemonFactory, extra: dict[str, str] | None = None) -> Daemon:
    daemon = make_daemon(start=False, args=["--log-level", "info"])
    for name, (resource, expression, failure_policy, _) in BUDGETED.items():
        (daemon.manifests / f"{name}.yaml").write_text(policy_yaml(name, resource, expression, failure_policy))
    for name, text in (extra or {}).items():
        (daemon.manifests / f"{name}.yaml").write_text(text)
    return daemon.start()


async def _post(session: aiohttp.ClientSession, path: str, document: Any) -> tuple[int, Any, float]:
    started = time.monotonic()
    async with session.post(f"http://localhost{path}", data=orjson.dumps(document),
                            headers={"Content-Type": "application/json"}) as response:
        body = await response.read()
        return response.status, orjson.loads(body), time.monotonic() - started


async def _get(session: aiohttp.ClientSession, path: str) -> tuple[int, float]:
    started = time.monotonic()
    async with session.get(f"http://localhost{path}") as response:
        await response.read()
        return response.status, time.monotonic() - started


def _session(daemon: Daemon) -> aiohttp.ClientSession:
    assert daemon.socket_path is not None
    return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(daemon.socket_path), limit=0),
                                 timeout=aiohttp.ClientTimeout(total=60))


# Its wall-clock bounds are what CPU budgets allow on a core of its own: no other test runs meanwhile.
@pytest.mark.alone
def test_budgeted_policies_are_cut_in_time_with_their_failure_policy(make_daemon: DaemonFactory) -> None:
    daemon = _hostile_daemon(make_daemon)

    async def scenario() -> None:
        async with _session(daemon) as session:
            for name, (resource, _, failure_policy, spec) in BUDGETED.items():
                status, answer, seconds = await _post(session, "/validate", hostile_review(resource, spec))
                assert status == 200, (name, answer)
                assert seconds < WEBHOOK_TIMEOUT / 2, (name, seconds)
                response = answer["response"]
                if failure_policy == "Fail":
                    assert response["allowed"] is False, (name, response)
                    assert f"{name}.static.k8s.io" in response["status"]["message"]
                else:
                    assert response["allowed"] is True, (name, response)

            # Hostile requests in parallel while benign requests and probes keep being answered: each
            # request's CEL work is bounded, so none holds the others up for long.
            hostile = [asyncio.create_task(_post(session, "/validate", hostile_review(resource, spec, uid=f"h{i}")))
                       for i in range(3) for resource, _, _, spec in BUDGETED.values()]
            benign: list[tuple[int, float]] = []
            while not all(task.done() for task in hostile):
                status, _, seconds = await _post(session, "/validate", review({"deny": "no"}))
                benign.append((status, seconds))
                benign.append(await _get(session, "/livez"))
            results = [task.result() for task in hostile]
            assert all(status == 200 for status, _, _ in results)
            assert max(seconds for _, _, seconds in results) < WEBHOOK_TIMEOUT
            assert benign and all(status == 200 for status, _ in benign)
            assert max(seconds for _, seconds in benign) < WEBHOOK_TIMEOUT / 2, benign

    asyncio.run(scenario())
    assert daemon.metric(REQUESTS, {"code": "500"}) == 0
    assert daemon.get("/readyz").status == 200


# Its wall-clock bounds are what CPU budgets allow on a core of its own: no other test runs meanwhile.
@pytest.mark.alone
def test_requests_are_answered_by_their_deadline_and_the_daemon_recovers(make_daemon: DaemonFactory) -> None:
    daemon = _hostile_daemon(make_daemon)
    resource, _, _, spec = BUDGETED["string-building"]

    async def scenario() -> None:
        async with _session(daemon) as session:
            # A burst of slow requests, each with a 50 ms deadline: each is cut at its deadline with its
            # policy's failurePolicy applied (Fail: denied), never left to run on.
            flood = await asyncio.gather(*(_post(session, "/validate?timeout=50ms", hostile_review(resource, spec,
                                                                                                  uid=f"slow-{i}"))
                                           for i in range(30)))
            for status, answer, seconds in flood:
                assert status in (200, 504), answer
                assert seconds < WEBHOOK_TIMEOUT / 2
                if status == 200:
                    assert answer["response"]["allowed"] is False
                    assert "cost limit exceeded" in answer["response"]["status"]["message"]
                else:
                    assert answer["reason"] == "Timeout"
            # The whole burst took about 30 deadlines, not 30 full CEL budgets.
            assert max(seconds for _, _, seconds in flood) < 30 * 0.05 + 2
            # Right after the flood a normal request is evaluated as usual.
            status, answer, seconds = await _post(session, "/validate", review({"deny": "true"}))
            assert status == 200 and answer["response"]["allowed"] is False
            assert seconds < WEBHOOK_TIMEOUT / 2

    asyncio.run(scenario())
    assert daemon.metric(REQUESTS, {"code": "500"}) == 0


#: One native call (join) that builds a string of items x big: charged by the size of its result after it
#: returns (as cel-go does, and the expression then fails over its limit), but while the engine builds it
#: the daemon's event loop is held.
JOIN_BOMB = "object.spec.items.map(j, object.spec.big).join().size() > 0"


# Slow: the daemon builds 400 MiB and the test watches its probes for seconds (8-12 s of a worker, as a known gap).
@pytest.mark.slow
@pytest.mark.xfail(reason="a join is charged after the engine has built its result (as in cel-go); building 400 MiB "
                          "holds the event loop meanwhile (docs/known-gaps.md)", strict=False)
def test_size_driven_expression_does_not_stall_other_requests(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = _hostile_daemon(make_daemon, {"join-bomb": policy_yaml("join-bomb", "bombs", JOIN_BOMB)})
    spec = {"items": list(range(400)), "big": "x" * 1_000_000}

    async def scenario() -> None:
        async with _session(daemon) as session:
            slow = asyncio.create_task(_post(session, "/validate", hostile_review("bombs", spec)))
            await asyncio.sleep(0.3)
            worst = 0.0
            while not slow.done():
                _, seconds = await _get(session, "/livez")
                worst = max(worst, seconds)
            status, _, seconds = await slow
            assert status == 200 and seconds < WEBHOOK_TIMEOUT
            assert worst < 0.5, f"/livez took {worst:.2f} s while one request was being evaluated"

    asyncio.run(scenario())
