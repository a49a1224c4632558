"""Admission requests that are ready together are evaluated together, one after the other in one callback.

The event loop reads the requests of several connections in one turn and runs their handlers one after the
other; evaluated in each handler, every evaluation is followed by its response's encryption and write and by the
next request's reading, so each one finds the processor's caches holding TLS, HTTP and the kernel's work instead
of the policies, the engine and the interpreter's paths through them. Measured on a 2-core machine (a null server
evaluating in its handler, distinct Pod CREATEs): 155 µs of CPU per request evaluated in the handler, 117 µs when
the handlers that are ready together hand their work to one callback (about 10 requests each time) at 10 policies;
229 and 190 µs at 100 policies.

Only the order of the work changes: each request is evaluated alone against the snapshot its handler fixed, within
its own deadline, in the context (``contextvars``) of its own handler, and its handler answers with what its own
evaluation returned or raised. Requests are evaluated in the order their handlers asked, as the handlers would
have run. A request the connection took whole from its read (``app.fast_reviews``, no handler) joins the same
batch through ``call``, with work that writes its own answer.

A program the evaluation found missing is built on the builder thread (``admission/generic/deferred.py``); that
build is handed to it only once the answers of the turn that asked for it are written (``AfterTheAnswers``): a
build is tens of milliseconds of the interpreter, and started at once it takes the interpreter from the very
requests that found their program missing (the first answers after a reload, which an operator waits for).

Stage: the server's (I/O edge): receives work a handler hands over (``submit``); hands back its result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

#: (the work, the future its handler waits on, the handler's context); for work that delivers its own result
#: (``call``), the work alone, with None for the others.
_Waiting = tuple[Callable[[], Any], "asyncio.Future[Any] | None", contextvars.Context | None]


class EvaluationBatch:
    """The work handed over by the handlers that ran since the last callback, run together at the next one."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[_Waiting] = []

    def submit(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """A future of ``work()``'s value (or exception), run in the caller's context at the loop's next callback
        with the work the other handlers submit meanwhile."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._run_waiting)
        self._waiting.append((work, future, contextvars.copy_context()))
        return future

    def call(self, work: Callable[[], None]) -> None:
        """Run ``work`` at the loop's next callback with the rest, in order. It delivers its own result and must not
        raise: nothing waits on it (``app.fast_reviews``' answers, written by the work to their connection)."""
        if not self._waiting:
            asyncio.get_running_loop().call_soon(self._run_waiting)
        self._waiting.append((work, None, None))

    @property
    def pending(self) -> int:
        """How much work waits for the next callback."""
        return len(self._waiting)

    def _run_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        for index, (work, future, context) in enumerate(waiting):
            if future is None or context is None:
                try:
                    work()
                except Exception as error:
                    # Reported as a raising callback of the loop is; the work after it still runs.
                    asyncio.get_running_loop().call_exception_handler(
                        {"message": "exception in batched work", "exception": error})
                continue
            if future.cancelled():
                # Its handler is gone (the loop is closing, or the handler was cancelled): nobody reads an answer.
                continue
            try:
                result = context.run(work)
            except Exception as error:
                future.set_exception(error)
                continue
            except BaseException:
                # KeyboardInterrupt or SystemExit stops the loop: the work not yet run is cancelled, not lost.
                for _, rest, _ in waiting[index:]:
                    if rest is not None:
                        rest.cancel()
                raise
            future.set_result(result)


class AfterTheAnswers(concurrent.futures.Executor):
    """``executor``, given its work two loop turns after it is submitted (on the loop's thread): after the turn that
    submitted it, whose batch writes its direct answers, and the next, where the handlers that batch resumed write
    theirs. Nothing else about the work changes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: concurrent.futures.Executor) -> None:
        self._loop = loop
        self._executor = executor

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def hand_over() -> None:
            if result.cancelled():
                return
            try:
                started = self._executor.submit(fn, *args, **kwargs)
            except RuntimeError as error:  # shut down meanwhile: the daemon is stopping
                result.set_exception(error)
                return
            started.add_done_callback(lambda done: _copy_outcome(done, result))

        self._loop.call_soon(self._loop.call_soon, hand_over)
        return result

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._executor.shutdown(wait, cancel_futures=cancel_futures)


def _copy_outcome(done: concurrent.futures.Future[T], into: concurrent.futures.Future[T]) -> None:
    if into.done():  # cancelled by its caller meanwhile
        return
    if done.cancelled():
        into.cancel()
    elif (error := done.exception()) is not None:
        into.set_exception(error)
    else:
        into.set_result(done.result())
