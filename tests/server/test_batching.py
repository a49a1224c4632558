"""Requests ready together are evaluated together (staticadm/server/batching.py): each still gets its own answer.

The unit tests drive :class:`EvaluationBatch` on a real event loop; the daemon test sends a burst of requests at
once over real TLS connections, allowed, denied and malformed ones mixed, and checks every answer against the
request it answers.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import orjson
import pytest

from staticadm.server.batching import AfterTheAnswers, EvaluationBatch
from tests.server.harness import DaemonFactory, review

_REQUEST = contextvars.ContextVar[str]("test_request")


def test_work_handed_over_in_one_turn_runs_in_one_callback_in_order() -> None:
    ran: list[int] = []

    async def main() -> list[int]:
        batch = EvaluationBatch()

        async def handler(number: int) -> int:
            def work() -> int:
                ran.append(number)
                return number * 10
            return await batch.submit(work)

        tasks = [asyncio.create_task(handler(number)) for number in range(5)]
        # The five handlers run in this turn, each up to its await: nothing has run yet, all five wait.
        await asyncio.sleep(0)
        assert batch.pending == 5 and ran == []
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert ran == [0, 1, 2, 3, 4]


def test_an_exception_reaches_only_the_handler_whose_work_raised_it() -> None:
    async def main() -> list[Any]:
        batch = EvaluationBatch()

        def work(number: int) -> int:
            if number == 2:
                raise ValueError("request 2 is malformed")
            return number

        return list(await asyncio.gather(*(batch.submit(lambda number=number: work(number)) for number in range(4)),
                                         return_exceptions=True))

    results = asyncio.run(main())
    assert results[:2] == [0, 1] and results[3] == 3
    assert isinstance(results[2], ValueError) and str(results[2]) == "request 2 is malformed"


def test_each_work_runs_in_its_handlers_context() -> None:
    async def main() -> list[str]:
        batch = EvaluationBatch()

        async def handler(name: str) -> str:
            _REQUEST.set(name)
            return await batch.submit(_REQUEST.get)

        return list(await asyncio.gather(*(handler(f"request-{number}") for number in range(3))))

    assert asyncio.run(main()) == ["request-0", "request-1", "request-2"]


def test_the_work_of_a_cancelled_handler_is_not_run() -> None:
    ran: list[str] = []

    async def main() -> None:
        batch = EvaluationBatch()
        gone = batch.submit(lambda: ran.append("gone"))
        kept = batch.submit(lambda: ran.append("kept"))
        gone.cancel()
        await kept

    asyncio.run(main())
    assert ran == ["kept"]


def test_a_loop_stopping_exception_cancels_the_work_not_yet_run() -> None:
    futures: list[asyncio.Future[Any]] = []
    ran: list[str] = []

    def stop() -> None:
        raise SystemExit(3)

    async def main() -> None:
        batch = EvaluationBatch()
        futures.extend([batch.submit(lambda: ran.append("first")), batch.submit(stop),
                        batch.submit(lambda: ran.append("last"))])
        await asyncio.gather(*futures)

    with pytest.raises(SystemExit):
        asyncio.run(main())
    assert ran == ["first"]
    assert futures[0].done() and not futures[0].cancelled()
    assert futures[1].cancelled() and futures[2].cancelled()


def test_work_that_answers_for_itself_runs_in_turn_and_a_bug_in_it_is_reported_not_spread() -> None:
    ran: list[str] = []
    reported: list[BaseException] = []

    def broken() -> None:
        raise RuntimeError("a bug of the direct path")

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
        batch = EvaluationBatch()
        batch.call(lambda: ran.append("direct 1"))
        submitted = batch.submit(lambda: ran.append("handler"))
        batch.call(broken)
        batch.call(lambda: ran.append("direct 2"))
        assert batch.pending == 4
        await submitted
        await asyncio.sleep(0)

    asyncio.run(main())
    assert ran == ["direct 1", "handler", "direct 2"]
    assert [str(error) for error in reported] == ["a bug of the direct path"]


def test_a_build_asked_for_by_an_evaluation_starts_after_the_handlers_it_resumed() -> None:
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1) as pool:
            builds = AfterTheAnswers(loop, pool)
            batch = EvaluationBatch()

            def evaluate() -> Any:
                started = builds.submit(order.append, "built")  # a program found missing, as deferred.py asks
                order.append("evaluated")
                return started

            async def handler() -> None:
                started = await batch.submit(evaluate)
                order.append("answered")  # the handler writes its answer here, before any other callback runs
                await asyncio.wrap_future(started)

            await asyncio.gather(handler(), handler())

    asyncio.run(main())
    assert order == ["evaluated", "evaluated", "answered", "answered", "built", "built"]


def test_a_build_handed_over_once_the_builder_stopped_fails_its_future() -> None:
    async def main() -> BaseException | None:
        pool = ThreadPoolExecutor(max_workers=1)
        builds = AfterTheAnswers(asyncio.get_running_loop(), pool)
        started = builds.submit(lambda: None)
        pool.shutdown()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert started.done()
        return started.exception()

    assert isinstance(asyncio.run(main()), RuntimeError)


def test_a_burst_of_requests_each_get_their_own_answer(make_daemon: DaemonFactory) -> None:
    """Forty-eight requests sent at once on connections of their own (read by the daemon in the same turns, so
    evaluated together): every answer carries its request's uid and its request's decision."""
    daemon = make_daemon()
    daemon.wait_ready()
    bodies: list[tuple[str, bytes]] = []
    for number in range(48):
        uid = f"burst-{number}"
        if number % 6 == 1:
            bodies.append((uid, orjson.dumps(review({"deny": "true"}, uid=uid, name=f"pod-{number}"))))
        elif number % 6 == 3:
            bodies.append((uid, b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '))
        elif number % 6 == 5:
            bodies.append((uid, orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                              "request": {"uid": uid}})))
        else:
            bodies.append((uid, orjson.dumps(review({"app": f"web-{number}"}, uid=uid, name=f"pod-{number}"))))

    async def burst() -> list[tuple[int, dict[str, Any]]]:
        connector = aiohttp.TCPConnector(ssl=daemon.ssl_context(), limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
            async def one(body: bytes) -> tuple[int, dict[str, Any]]:
                async with session.post(f"https://127.0.0.1:{daemon.port}/validate?timeout=10s", data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    return response.status, orjson.loads(await response.read())
            return list(await asyncio.gather(*(one(body) for _, body in bodies)))

    answers = asyncio.run(burst())
    for number, ((uid, _), (status, answer)) in enumerate(zip(bodies, answers, strict=True)):
        if number % 6 == 3:
            assert status == 400 and "not valid JSON" in answer["message"], (uid, answer)
        elif number % 6 == 5:
            assert status == 400 and "invalid AdmissionReview" in answer["message"], (uid, answer)
        else:
            assert status == 200, (uid, answer)
            response = answer["response"]
            assert response["uid"] == uid
            assert response["allowed"] is (number % 6 != 1), (uid, response)
            if number % 6 == 1:
                assert "pods labelled deny=true are not allowed" in response["status"]["message"]
