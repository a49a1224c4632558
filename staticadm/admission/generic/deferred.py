"""Programs that evaluation builds on first use, built off the request path on the thread that serves requests.

Two programs are shortcuts built the first time a request needs them: a set of policies' all-clear program
(``validating/all_clear.py``) and a policy's validations run together (``CompiledValidatingPolicy.
validations_together``). Building one fuses, guards and loads every expression it joins: 5-30 ms for policies of
realistic weight, paid by the first request of every set a reload changed, which is the first answer an operator
waits for after dropping a file. Without the shortcut a request is decided exactly, one expression at a time, for a
fraction of that. So on a thread that defers (the daemon's event loop) a request that finds its program missing is
decided without it and the build goes to one builder thread; the requests after the build find the program. On
any other thread (check, test, offline evaluation, the daemon's analysis thread) the program is built where it is
needed. Either way the decision is the same: a shortcut only ever answers what the exact evaluation would.

Stage: evaluate. Holds no decision; hands builds from the serving thread to its builder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Executor

#: Told of a build that raised (on the builder thread): the daemon logs it.
FailureReport = Callable[[Callable[[], object], Exception], None]


class DeferredBuilds(threading.local):
    """Where the calling thread's builds run: its own executor, or None (build now); and who hears of a build that
    raised. One per thread, so the analysis thread, which evaluates against a snapshot of its own, never hands its
    builds to the serving one's."""

    def __init__(self) -> None:
        self.executor: Executor | None = None
        self.report_failure: FailureReport | None = None


_THIS_THREAD = DeferredBuilds()
#: Builds handed over and not finished, by their key: a program every request lacks until it is built is built
#: once. A key names objects by identity; the build holds those objects, so no identity is reused meanwhile.
_pending: set[Hashable] = set()
_pending_lock = threading.Lock()
#: Builds that raised: kept (and their keys pending) for good.
_failed: list[Callable[[], object]] = []


class BuildCounts:
    """Builds this process finished off the request path, and builds that raised (``/metrics``)."""

    def __init__(self) -> None:
        self.built = 0
        self.failed = 0

    @property
    def pending(self) -> int:
        """Builds handed over that have not finished (those that raised stay pending)."""
        return len(_pending) - len(_failed)


#: Only the builder thread counts: one writer.
COUNTS = BuildCounts()


def defer_on_this_thread(executor: Executor | None, report_failure: FailureReport | None = None) -> None:
    """From now on, builds asked for on this thread run on ``executor``, and one that raises is reported to
    ``report_failure``; None: where they are asked for."""
    _THIS_THREAD.executor = executor
    _THIS_THREAD.report_failure = report_failure


def build_later(key: Hashable, build: Callable[[], object]) -> bool:
    """Hands ``build`` (which makes a program and stores it where requests find it) to this thread's builder, once
    while a build of ``key`` is pending. False when this thread builds where it asks (the caller builds now)."""
    executor, report_failure = _THIS_THREAD.executor, _THIS_THREAD.report_failure
    if executor is None:
        return False
    with _pending_lock:
        if key in _pending:
            return True
        _pending.add(key)

    def run() -> None:
        try:
            build()
        except Exception as error:
            # A bug, reported once: the key stays pending (its objects alive, so their identities stay theirs), and
            # the requests that need the program stay exact, which decides the same, only slower.
            _failed.append(build)
            COUNTS.failed += 1
            if report_failure is not None:
                report_failure(build, error)
            return
        with _pending_lock:
            _pending.discard(key)
        COUNTS.built += 1

    try:
        executor.submit(run)
    except RuntimeError:  # the executor has shut down: the daemon is stopping
        with _pending_lock:
            _pending.discard(key)
        return False
    return True
