"""Which event loop the daemon runs on: asyncio's own, or uvloop (libuv) when it is installed.

uvloop runs the same coroutines with its transports, TLS and timers written in C: the daemon's HTTP and TLS work
per request costs less under it (docs/operations.md, "The daemon"; ``bench.run --event-loop`` measures either).
Everything the daemon does on its loop works on both (the TLS front's early refusal of non-TLS clients, handshake
deadlines and the connection cap, signals, subprocesses of ``--workers``, unix sockets): ``--event-loop`` picks
one (``asyncio``, the default), ``auto`` uvloop when it can be imported, else asyncio.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

# asyncio is imported where a loop runs: the command line reads EVENT_LOOPS to build its parser, and every
# command but serve would pay for asyncio's import without using it.
if TYPE_CHECKING:
    import asyncio

EVENT_LOOPS = ("auto", "asyncio", "uvloop")
#: asyncio's own: in quiet back-to-back bench pairs uvloop did not lower the CPU of a request the daemon has not
#: seen before beyond the host's noise, and out of descriptors libuv drops queued connections without a word
#: (docs/known-gaps.md).
DEFAULT_EVENT_LOOP = "asyncio"

_T = TypeVar("_T")


class EventLoopUnavailable(Exception):
    """``--event-loop uvloop`` where uvloop cannot be imported."""


def uvloop_importable() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def resolve(choice: str) -> str:
    """``asyncio`` or ``uvloop``: what ``choice`` (one of :data:`EVENT_LOOPS`) runs on here."""
    if choice == "auto":
        return "uvloop" if uvloop_importable() else "asyncio"
    if choice == "uvloop" and not uvloop_importable():
        raise EventLoopUnavailable("--event-loop uvloop: uvloop is not installed (pip install uvloop, or give "
                                   "--event-loop asyncio)")
    return choice


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of ``choice``'s loop; None for asyncio's default."""
    if resolve(choice) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def run(main: Coroutine[Any, Any, _T], choice: str) -> _T:
    """``asyncio.run(main)`` on the loop ``choice`` names."""
    import asyncio

    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)


def running_uvloop() -> bool:
    """Whether the running loop is uvloop's (its transports take only uvloop's own SSL protocol)."""
    import asyncio

    return type(asyncio.get_running_loop()).__module__.startswith("uvloop")
