"""What the daemon has loaded stays out of the cyclic garbage collector's way.

CPython's collector now and then walks every object of its oldest generation. Nearly all of a daemon's objects
are what it loaded once: modules, the compiled snapshot and, with the cluster view, the Kubernetes client library
(about 90,000 objects), none of which becomes garbage while it serves. Measured in the daemon with the cluster
view, such a walk took 80-110 ms, with the event loop stopped: every request waiting then was that late, the
daemon's latency tail. So after a load everything alive is frozen (``gc.freeze``: moved where the collector never
walks; it then took 5 ms) and the collector walks only what requests and caches made since. A reload thaws it,
collects what the snapshot before left in reference cycles and freezes again, a little after the reload (a burst
of reloads settles once), so that its one pause never delays the new snapshot's first answers.

What requests leave alive grows too: the CEL engine keeps the argument tuple and the result of every call it makes
into Python (docs/known-gaps.md), and the collector can neither free those (their count is never released) nor
stop walking them. With an ``authorizer`` policy, 700 requests a second grew the walk from 11 to 196 ms in a
minute. So every second what survived the young generations' collection is frozen too: the oldest generation's
walk then covers about a second of requests. Only a reference cycle that became garbage after surviving both young
collections is frozen with them; the next reload's settle collects it.

The same holds from the first instruction: what the daemon imports (about 64,000 objects the collector tracks) is
there to stay, yet while it imports the collector walked it over and over as it grew (about 150 collections, two of
them of everything, 100-150 ms of a start's 0.6-0.8 s of CPU), and the first settle walked it again. So the
collector is off while the daemon imports (``gc.disable()`` by the entry points, ``staticadm.launch`` and
``worker_process``, before their first import), and what the imports left is frozen once they are done
(``imports_done``), without a walk: they leave about 2,000 objects of garbage (measured), which the first reload's
settle collects. The first load's settle then walks only what that load made.
"""

from __future__ import annotations

import asyncio
import gc

#: Seconds after a reload before the heap is collected and frozen again.
SETTLE_DELAY = 2.0
#: Seconds between freezes of what survived the young generations.
SURVIVOR_FREEZE_INTERVAL = 1.0


def imports_done() -> None:
    """Freezes what the imports made (no walk) and turns the collector on: the daemon starts allocating what
    becomes garbage. Harmless where the collector was never paused."""
    gc.freeze()
    gc.enable()


class Heap:
    """Settles the process's heap after loads (on the event loop's thread)."""

    def __init__(self) -> None:
        self._pending: asyncio.TimerHandle | None = None

    def settle(self, *, keep_frozen: bool = False) -> None:
        """Collects every unreachable object, frozen ones included (with ``keep_frozen`` only those made since the
        last freeze: after the first load, what is frozen is what the imports made), then freezes what is left."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if not keep_frozen:
            gc.unfreeze()
        gc.collect()
        gc.freeze()

    def settle_later(self) -> None:
        """``settle`` in ``SETTLE_DELAY`` seconds (again from now if one is already due)."""
        if self._pending is not None:
            self._pending.cancel()
        self._pending = asyncio.get_running_loop().call_later(SETTLE_DELAY, self.settle)

    @staticmethod
    def freeze_survivors() -> None:
        """Collects the young generations (cheap: they hold what was made since the last call), then freezes
        what is left, so that no walk of the oldest generation grows with the process's uptime."""
        gc.collect(1)
        gc.freeze()

    async def keep_survivors_frozen(self) -> None:
        while True:
            await asyncio.sleep(SURVIVOR_FREEZE_INTERVAL)
            self.freeze_survivors()
