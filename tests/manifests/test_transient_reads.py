"""A change made while the process is out of file descriptors is served once they are back, without another file
event or a poll: the directory watcher, in process, with real inotify events and a real EMFILE."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import structlog

from staticadm.source import ManifestSource, ReloadResult, ReloadStatus
from staticadm.watch import DirectoryWatcher
from tests.manifests.test_source import _binding, _policy

#: Longer than any test here: only file events and the watcher's own retries may start a reload.
NO_POLL = 3600.0


@contextlib.contextmanager
def _out_of_descriptors() -> Iterator[None]:
    """No new descriptor can be opened in this process until the block ends (EMFILE)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _staged(directory: Path, name: str, text: str) -> Callable[[], None]:
    """Publishes ``text`` as ``name`` atomically, as operators should, when called: the rename needs no new
    descriptor. The text waits in a directory of its own beside the watched one: written in the watched directory,
    its events could reach the watcher after the rename's (on a loaded machine they did), and a reload they started
    once descriptors were back was a file event's, not the retry a test waits for."""
    staging = directory.parent / f"{directory.name}.staging"
    staging.mkdir(exist_ok=True)
    path = staging / name
    path.write_text(text)
    return lambda: os.rename(path, directory / name)


async def _watch(directory: Path, scenario: Callable[[list[ReloadResult]], Awaitable[None]]) -> list[ReloadResult]:
    directory.chmod(0o755)
    results: list[ReloadResult] = []
    watcher = DirectoryWatcher(ManifestSource(directory), poll_interval=NO_POLL, logger=structlog.get_logger(),
                               on_result=results.append)
    task = asyncio.create_task(watcher.run())
    try:
        assert await _until(lambda: any(r.status is ReloadStatus.SUCCESS for r in results), 10)
        await scenario(results)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        watcher.close()
    return results


def test_a_change_read_while_descriptors_are_exhausted_is_served_once_they_are_back(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a", "object.metadata.name != 'v1'") + "---\n" + _binding("a"))

    async def scenario(results: list[ReloadResult]) -> None:
        before = len(results)
        publish = _staged(tmp_path, "a.yaml", _policy("a", "object.metadata.name != 'v2'") + "---\n" + _binding("a"))
        with _out_of_descriptors():
            publish()
            assert await _until(lambda: len(results) > before, 10)
        failed = results[before]
        assert failed.status is ReloadStatus.FAILURE and failed.reason == "watch"
        assert [error.transient for error in failed.errors] == [True]
        assert str(tmp_path) in str(failed.errors[0]) and "Too many open files" in str(failed.errors[0])
        # No file event from here on: the watcher's retry alone must pick the change up.
        assert await _until(lambda: results[-1].status is ReloadStatus.SUCCESS, 10)
        assert results[-1].reason == "retry"
        served = results[-1].served
        assert served is not None and any("'v2'" in str(value) for value in served.objects.values())

    asyncio.run(_watch(tmp_path, scenario))


def test_a_failure_of_the_files_themselves_waits_for_the_next_change(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a") + "---\n" + _binding("a"))

    async def scenario(results: list[ReloadResult]) -> None:
        before = len(results)
        _staged(tmp_path, "a.yaml", "kind: [unclosed\n")()
        assert await _until(lambda: len(results) > before, 10)
        assert results[before].status is ReloadStatus.FAILURE
        assert not any(error.transient for error in results[before].errors)
        # Reading the same files again cannot help: nothing is retried (the rename's events may each have
        # started a reload, all within moments).
        await asyncio.sleep(0.5)
        settled = len(results)
        await asyncio.sleep(2)
        assert len(results) == settled
        assert all(result.reason == "watch" for result in results[before:])

    asyncio.run(_watch(tmp_path, scenario))


def test_a_watch_started_after_a_successful_load_reloads_only_on_a_change(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a") + "---\n" + _binding("a"))
    tmp_path.chmod(0o755)
    source = ManifestSource(tmp_path)
    assert source.reload("startup").status is ReloadStatus.SUCCESS  # as the daemon loads before it watches

    async def watch_a_while() -> list[ReloadResult]:
        results: list[ReloadResult] = []
        watcher = DirectoryWatcher(source, poll_interval=NO_POLL, logger=structlog.get_logger(),
                                   on_result=results.append)
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(1.5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        watcher.close()
        return results

    assert asyncio.run(watch_a_while()) == []


def test_a_rename_starts_one_reload_and_a_file_the_loader_skips_starts_none(tmp_path: Path) -> None:
    # watchdog reports a modification of the directory beside each event of an entry in it: taken as a change of
    # its own, it woke a second reload per rename and one for every write of a file the loader skips.
    (tmp_path / "a.yaml").write_text(_policy("a") + "---\n" + _binding("a"))

    async def scenario(results: list[ReloadResult]) -> None:
        before = len(results)
        _staged(tmp_path, "b.yaml", _policy("b") + "---\n" + _binding("b"))()
        assert await _until(lambda: len(results) > before, 10)
        await asyncio.sleep(0.5)
        assert [(result.status, result.reason) for result in results[before:]] == [(ReloadStatus.SUCCESS, "watch")]
        settled = len(results)
        (tmp_path / "notes.txt").write_text("an operator's notes beside the manifests")
        await asyncio.sleep(0.5)
        assert results[settled:] == []

    asyncio.run(_watch(tmp_path, scenario))
