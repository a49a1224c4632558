"""The daemon's heap after a load: frozen out of the collector's walks, and what earlier loads left collected."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from staticadm.server import heap
from staticadm.server.heap import Heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    return weakref.ref(first)


def test_settling_collects_cycles_frozen_before_and_freezes_what_is_alive() -> None:
    try:
        left = _cycle()
        gc.freeze()  # as a previous load left it: the cycle frozen with everything else
        gc.collect()
        assert left() is not None, "a frozen cycle is never walked by the collector"
        kept = _Node()
        Heap().settle()
        assert left() is None
        assert gc.get_freeze_count() > 0
        assert not gc.is_finalized(kept) and kept not in gc.get_objects(), "what is alive is frozen"
    finally:
        gc.unfreeze()


def test_a_reload_settles_once_after_a_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "SETTLE_DELAY", 0.05)

    async def burst() -> tuple[bool, bool]:
        target = Heap()
        target.settle_later()
        target.settle_later()
        left = _cycle()
        gc.freeze()
        await asyncio.sleep(0.01)
        before = left() is not None
        await asyncio.sleep(0.2)
        return before, left() is None

    try:
        assert asyncio.run(burst()) == (True, True)
    finally:
        gc.unfreeze()


def test_what_survives_the_young_generations_is_frozen_and_their_garbage_collected() -> None:
    try:
        gc.collect()
        gc.freeze()  # as after a load
        garbage = _cycle()  # a cycle nothing refers to: the young collection frees it
        alive = _Node()
        alive.other = _Node()
        assert alive in gc.get_objects()
        Heap.freeze_survivors()
        assert garbage() is None
        assert alive not in gc.get_objects(), "no collection of the oldest generation walks it any more"
    finally:
        gc.unfreeze()


def test_the_daemon_keeps_freezing_survivors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "SURVIVOR_FREEZE_INTERVAL", 0.01)

    async def serve_a_while() -> bool:
        task = asyncio.create_task(Heap().keep_survivors_frozen())
        made_later = _Node()
        await asyncio.sleep(0.1)
        task.cancel()
        return made_later not in gc.get_objects()

    try:
        assert asyncio.run(serve_a_while())
    finally:
        gc.unfreeze()
