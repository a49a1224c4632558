"""Watching the manifest directory: when to call :meth:`ManifestSource.reload`.

File events (through watchdog's inotify observer), SIGHUP and a poll interval wake the watcher, which
reloads at once, as kube-apiserver's manifest source does (``util/filesystem.WatchUntil`` calls its loader
on every event): there is no fixed delay. Events that arrive during a reload make one more reload after
it. Files being written in place are the one thing a reload waits for, and the events tell which
(:class:`staticadm.writes.WriteTracker`, fed here). Reloads run on one worker thread, so they never overlap
and never hold the event loop; what each returned is handed to ``on_result`` on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from staticadm.manifests.files import is_manifest_name
from staticadm.source import ManifestSource, ReloadResult

DEFAULT_POLL_INTERVAL = 60.0
#: watchdog joins its emitter threads without a timeout when a watch is removed or the observer
#: stops, and that join has been seen to hang (SIGTERM never finishing); we wait this long at most.
OBSERVER_STOP_TIMEOUT = 2.0
#: Until a first snapshot is served, or while reads fail for want of descriptors or memory, the directory is
#: retried this often (doubling from the first value), so a volume mounted late, a fix without a file event
#: or a change made while the process was out of descriptors is picked up without waiting a whole poll interval.
FIRST_RETRY = 0.5
MAX_RETRY = 10.0

#: The events asked of the kernel (watchdog turns them into the inotify mask), so nothing else costs a wakeup.
#: In the manifest directory: every change of content, name or mode (a chmod is inotify's IN_ATTRIB, which
#: watchdog reports as its own Attrib events: a directory or file made world-writable is refused, and made
#: safe again is served, at once rather than at the next poll). Opens and reads are left out: reading the
#: directory opens every file, and reacting to our own reads would reload forever. Nor DirModifiedEvent: watchdog
#: makes one for the directory beside each event of an entry in it (a rename, a creation, a close after writing),
#: which is a second wakeup for every change, often landing once the first reload has begun (a second reload,
#: finding nothing new, on the first answers' interpreter), and a wakeup for a file the loader skips.
_DIRECTORY_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileModifiedEvent, FileClosedEvent, FileAttribEvent,
    DirCreatedEvent, DirDeletedEvent, DirMovedEvent, DirAttribEvent]
#: In its parent: only entries appearing, disappearing or being renamed (the directory or a symlink to it).
#: Writes to other files there (a log file beside the manifests, say) must not wake three watchdog threads
#: per write on the admission path's interpreter.
_PARENT_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileDeletedEvent, FileMovedEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


class DirectoryWatcher:
    """Calls ``source.reload`` on file events (coalesced), on :meth:`reload_now` and every ``poll_interval``."""

    def __init__(
        self,
        source: ManifestSource,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        logger: Any,
        on_result: Callable[[ReloadResult], None],
        on_reloading: Callable[[str], None] | None = None,
    ) -> None:
        self.source = source
        self.directory = source.directory
        self.poll_interval = poll_interval
        self._log = logger
        self._on_result = on_result
        self._on_reloading = on_reloading
        #: How long until the next retry while nothing is served.
        self.retry_seconds = FIRST_RETRY
        # One worker: loads never overlap, so the hash comparison and the swap see a consistent order.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="staticadm-reload")
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending_reason = "watch"
        self._observer: BaseObserver | None = None
        self._watches: dict[str, tuple[ObservedWatch, tuple[int, int]]] = {}
        #: A file event's wakeup is on its way to the event loop: later events ride on it. Each
        #: call_soon_threadsafe writes a byte to the loop's self-pipe, which is also the signal wakeup fd
        #: and holds ~280 such bytes: one write per event let a flood fill it and lose SIGTERM.
        self._event_pending = False

    async def reload(self, reason: str) -> ReloadResult:
        """One reload on the worker thread; its result is reported before this returns."""
        if self._on_reloading is not None:
            self._on_reloading(reason)
        result = await asyncio.get_running_loop().run_in_executor(self._executor, self.source.reload, reason)
        self._on_result(result)
        return result

    def reload_now(self, reason: str = "signal") -> None:
        """Ask for a reload soon (SIGHUP); safe to call from the event loop thread."""
        self._poke(reason)

    def _poke(self, reason: str) -> None:
        if self._wake is None:
            return
        # A signal outranks a file event in the log: it is what the operator asked for.
        if reason == "signal" or self._pending_reason != "signal":
            self._pending_reason = reason
        self._wake.set()

    def _file_event(self) -> None:
        """On a watchdog thread: wake the loop once for any number of events until it has taken the wakeup."""
        loop = self._loop
        if self._event_pending or loop is None or loop.is_closed():
            return
        self._event_pending = True
        try:
            loop.call_soon_threadsafe(self._take_file_events)
        except RuntimeError:  # the loop closed meanwhile
            self._event_pending = False

    def _take_file_events(self) -> None:
        # Cleared before poking, so an event arriving after this line wakes the loop again.
        self._event_pending = False
        self._poke("watch")

    def start(self) -> None:
        """Add the watches; call before the first load, so no change after that load can be missed."""
        if self._observer is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        # Full events: a file renamed in from elsewhere is a move (complete), not a creation (being written).
        self._observer = Observer(generate_full_events=True)  # type: ignore[call-arg]
        self._observer.daemon = True
        self._observer.start()
        self._sync_watches()

    async def run(self) -> None:
        """Reload on file events (coalesced), on :meth:`reload_now` and every ``poll_interval``."""
        self.start()
        assert self._wake is not None
        try:
            # The daemon's startup load ran before: a retry is due only if it served nothing.
            retrying = self.source.current is None
            while True:
                waiting = self.poll_interval
                if retrying:
                    waiting = min(self.retry_seconds, self.poll_interval)
                    self.retry_seconds = min(self.retry_seconds * 2, MAX_RETRY)
                try:
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
                    # that arrives as the wait ends, and this loop would then never stop on SIGTERM.
                    async with asyncio.timeout(waiting):
                        await self._wake.wait()
                    reason = self._pending_reason
                except TimeoutError:
                    reason = "retry" if retrying else "poll"
                self._wake.clear()
                self._pending_reason = "watch"
                # Watches are re-added before loading so that no event between the two is lost.
                self._sync_watches()
                result = await self.reload(reason)
                self._sync_watches()
                retrying = self.source.current is None or result.failed_transiently
                if not retrying:
                    self.retry_seconds = FIRST_RETRY
        finally:
            self._stop_observer()

    def _wanted_watches(self) -> dict[str, tuple[Callable[[FileSystemEvent], bool], list[type[FileSystemEvent]]]]:
        """Directories to watch, each with the events asked of the kernel and a filter on them.

        The directory itself (through its symlink, if it is one) sees file changes and ConfigMap
        ``..data`` swaps; its parent sees the directory, or a symlink to it, being removed, recreated
        or replaced, which no watch on the directory itself can report.
        """
        wanted: dict[str, tuple[Callable[[FileSystemEvent], bool], list[type[FileSystemEvent]]]] = {}
        path = Path(os.path.abspath(self.directory))
        name = path.name

        def names_directory(event: FileSystemEvent) -> bool:
            paths = [event.src_path, getattr(event, "dest_path", "")]
            return any(p and os.path.basename(os.fsdecode(p)) == name for p in paths)

        if path.parent.is_dir():
            wanted[str(path.parent)] = (names_directory, _PARENT_EVENTS)
        target = os.path.realpath(path)
        if os.path.isdir(target):
            wanted[target] = (self._directory_event, _DIRECTORY_EVENTS)
        return wanted

    def _directory_event(self, event: FileSystemEvent) -> bool:
        """On a watchdog thread: whether an event in the directory wakes a reload, after the write tracker
        has seen it (so the reload it wakes knows whether the file is complete)."""
        if not may_change_what_is_loaded(event):
            return False
        self.source.writes.observe(event)
        return True

    def _sync_watches(self) -> None:
        observer = self._observer
        if observer is None:
            return
        wanted = self._wanted_watches()
        for path in list(self._watches):
            watch, watched_identity = self._watches[path]
            if path not in wanted or _identity(path) != watched_identity:
                # A directory that was removed and recreated at the same path is a new inode; its old
                # inotify watch is dead and must be replaced.
                self._unschedule(watch)
                del self._watches[path]
        for path, (accept, events) in wanted.items():
            if path in self._watches:
                continue
            identity = _identity(path)
            if identity is None:
                continue
            try:
                watch = observer.schedule(_Handler(accept, self._file_event), path, recursive=False,
                                          event_filter=events)
            except OSError as error:
                # Polling still covers the directory; the watch is retried on the next tick.
                self._log.warning("cannot watch directory; relying on polling", path=path, err=str(error))
                continue
            self._watches[path] = (watch, identity)

    def _unschedule(self, watch: ObservedWatch) -> None:
        observer = self._observer
        if observer is None:
            return

        def unschedule() -> None:
            with contextlib.suppress(KeyError, OSError):
                observer.unschedule(watch)

        if not _bounded(unschedule, OBSERVER_STOP_TIMEOUT):
            self._log.warning("removing a directory watch did not finish; leaving it behind", path=watch.path)

    def _stop_observer(self) -> None:
        observer, self._observer = self._observer, None
        self._watches.clear()
        if observer is None:
            return

        def stop() -> None:
            observer.stop()
            observer.join(timeout=OBSERVER_STOP_TIMEOUT)

        if not _bounded(stop, OBSERVER_STOP_TIMEOUT * 2):
            # Its threads are daemon threads: they do not keep the process from exiting.
            self._log.warning("the file watcher did not stop in time; exiting without it")

    def close(self) -> None:
        self._stop_observer()
        self._executor.shutdown(wait=False, cancel_futures=True)


class _Handler(FileSystemEventHandler):
    def __init__(self, accept: Callable[[FileSystemEvent], bool], wake: Callable[[], None]) -> None:
        self._accept = accept
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if self._accept(event):
            self._wake()


def may_change_what_is_loaded(event: FileSystemEvent) -> bool:
    """Whether an event in the manifest directory can change what the loader reads: one about a manifest
    name (``.yaml``, ``.yml``, ``.json``, as kube-apiserver's loader reads), a directory or a symlink (a
    manifest may be read through one: ConfigMap volumes swap ``..data``), or a name that is gone (what it
    was is unknown). Writes to a plain file the loader skips (``notes.txt``, an editor's swap file) wake
    nothing, so they cannot hold a reload back."""
    if event.is_directory or event.event_type == "deleted":
        return True
    source = os.fsdecode(event.src_path)
    if event.event_type == "moved":
        return is_manifest_name(os.path.basename(source)) or _may_be_read(os.fsdecode(event.dest_path))
    return _may_be_read(source)


def _may_be_read(path: str) -> bool:
    if is_manifest_name(os.path.basename(path)):
        return True
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return True
    return not stat.S_ISREG(mode)


def _bounded(function: Callable[[], None], timeout: float) -> bool:
    """Run ``function`` on a daemon thread and wait at most ``timeout``; True if it finished."""
    thread = threading.Thread(target=function, name="staticadm-watch-stop", daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino

