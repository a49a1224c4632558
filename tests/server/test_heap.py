"""The daemon's heap after a load: frozen out of the collector's walks, and what earlier loads left collected."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from pathlib import Path

import pytest

from staticadm.server import heap
from staticadm.server.heap import Heap
from tests.server.harness import DaemonFactory, review


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


def test_settling_the_first_load_leaves_what_the_imports_froze_unwalked() -> None:
    try:
        imported = _cycle()
        heap.imports_done()  # as the entry point does before its first load
        loaded = _cycle()
        kept = _Node()
        Heap().settle(keep_frozen=True)
        assert imported() is not None, "the imports' garbage waits for the first reload's settle"
        assert loaded() is None
        assert kept not in gc.get_objects(), "what the load made is frozen"
        Heap().settle()
        assert imported() is None
    finally:
        gc.unfreeze()
        gc.enable()


#: Installed in every process of a daemon (supervisor and workers): records each collection the collector makes
#: and whether it came before the entry point's imports were done (nothing frozen yet).
_COLLECTION_RECORDER = """
import atexit, gc, json, os, sys
_collections = []
def _record(phase, info):
    if phase == "start":
        _collections.append([info["generation"], gc.get_freeze_count() > 0])
gc.callbacks.append(_record)
def _write():
    with open(os.path.join({directory!r}, f"{{os.getpid()}}.json"), "w") as out:
        with open("/proc/self/cmdline", "rb") as cmdline:
            title = cmdline.read().split(b"\\0")[0].decode()
        json.dump({{"argv": sys.argv, "title": title, "collections": _collections}}, out)
atexit.register(_write)
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_the_daemon_imports_without_a_collection_and_collects_once_it_runs(make_daemon: DaemonFactory,
                                                                            tmp_path: Path, workers: int) -> None:
    hook, records = tmp_path / "hook", tmp_path / "records"
    hook.mkdir()
    records.mkdir()
    (hook / "sitecustomize.py").write_text(_COLLECTION_RECORDER.format(directory=str(records)))
    daemon = make_daemon(args=["--workers", str(workers)], env={"PYTHONPATH": str(hook)})
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False
    assert daemon.stop() == 0
    runs = [json.loads(path.read_text()) for path in records.glob("*.json")]
    processes = [run for run in runs if "serve" in run["argv"] or run["argv"][0].endswith("worker_process.py")]
    # With workers: the supervisor, its zygote and the workers it forked (a copy of the supervisor each, so their
    # imports' collections are the supervisor's).
    assert len(processes) == (1 if workers == 1 else workers + 2), runs
    for run in processes:
        # Without the pause: about 150, two of them of every generation. The interpreter's own start (site,
        # runpy) may make a young collection before the entry point's first line runs.
        before = [generation for generation, after_imports in run["collections"] if not after_imports]
        assert len(before) <= 2 and 2 not in before, f"{run['argv']}: collections while importing: {before}"
        if not run["title"].startswith("staticadm serve: zygote"):  # it only forks: it makes no garbage
            assert any(after for _, after in run["collections"]), f"{run['argv']}: the collector never ran again"
