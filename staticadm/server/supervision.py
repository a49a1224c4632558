"""Background tasks that cannot die quietly.

The reload loop, the systemd watchdog pings, the certificate reload and the connection sweeper all run
for the daemon's lifetime. One that raised used to be gone for good (reloads silently stopped while
``/readyz`` still said ready). Each now runs under :func:`supervise`: a failure is logged and counted,
the task is restarted with a backoff, and while it waits to restart ``/readyz`` fails naming it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

MIN_BACKOFF = 0.5
MAX_BACKOFF = 30.0
#: A task that ran this long before failing starts over from the shortest backoff.
STABLE_AFTER = 60.0


@dataclass
class TaskHealth:
    """What each supervised task is doing, for readiness and the verbose health output."""

    #: Task name -> the error it last failed with, while it waits to be restarted.
    failing: dict[str, str] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)

    def healthy(self, name: str) -> bool:
        return name not in self.failing


async def supervise(name: str, run: Callable[[], Awaitable[None]], *, logger: Any, health: TaskHealth,
                    on_failure: Callable[[str], None] = lambda _name: None) -> None:
    """Runs ``run()`` until it returns; restarts it with a growing delay whenever it raises."""
    delay = MIN_BACKOFF
    while True:
        started = time.monotonic()
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if time.monotonic() - started > STABLE_AFTER:
                delay = MIN_BACKOFF
            health.failing[name] = f"{type(error).__name__}: {error}"
            health.restarts[name] = health.restarts.get(name, 0) + 1
            on_failure(name)
            logger.error("background task failed; restarting it", task=name, err=f"{type(error).__name__}: {error}",
                         retry_in_seconds=delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_BACKOFF)
        health.failing.pop(name, None)
        logger.info("background task restarted", task=name)
