"""The manifest source: watch the directory, reload it, and own the one current snapshot.

This mirrors kube-apiserver's ``policy/manifest/source``: a full load and validation, then the content
hash check, then compilation into a snapshot, then an atomic swap; any error keeps the last good
snapshot and counts a failure. Two deliberate differences:

* events are coalesced (one reload once the directory has been quiet for ``debounce`` seconds),
  because an editor or ``kubectl cp`` produces a burst of events per save and each full load costs
  CEL compilation;
* a load whose bytes hash to the snapshot being served is skipped before validation: identical bytes
  validate identically, so this only saves the work, and no metric is recorded, as upstream.

Only this module replaces the snapshot. Readers take :attr:`ManifestSource.current` once per request
and keep that object for the whole request, so a swap never changes a request half way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from staticadm.manifests import DEFAULT_MAX_FILE_BYTES, LoadResult, ManifestError, load_manifest_directory
from staticadm.manifests.files import DirectoryContents, read_directory, world_writable

DEFAULT_POLL_INTERVAL = 60.0
#: Long enough to coalesce one editor save or `kubectl cp` (a few events within milliseconds); an atomic
#: rename is a single event and is served after this plus the load itself.
DEFAULT_DEBOUNCE = 0.05
#: A writer that never pauses must not postpone reloading forever.
MAX_COALESCE = 2.0
#: watchdog joins its emitter threads without a timeout when a watch is removed or the observer
#: stops, and that join has been seen to hang (SIGTERM never finishing); we wait this long at most.
OBSERVER_STOP_TIMEOUT = 2.0
#: Until a first snapshot is served, the directory is retried this often (doubling from the first
#: value), so a volume mounted late or a fix without a file event is picked up without waiting a whole
#: poll interval.
FIRST_RETRY = 0.5
MAX_RETRY = 10.0

ReloadStatus = Literal["success", "failure", "unchanged"]

# Reading the directory opens every file; reacting to our own reads would reload forever.
_IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})


@dataclass(frozen=True, slots=True)
class Served:
    """The snapshot being served, with what the operator needs to identify it."""

    snapshot: Any
    content_hash: str
    policies: int
    bindings: int
    loaded_at: float
    #: (policy name, binding name) of every binding, to notice a binding gone while its policy stays.
    bound: frozenset[tuple[str, str]] = frozenset()
    policy_names: frozenset[str] = frozenset()

    def describe(self) -> str:
        return f"hash={self.content_hash or '(empty)'} policies={self.policies} bindings={self.bindings}"


@dataclass(frozen=True, slots=True)
class ReloadResult:
    status: ReloadStatus
    reason: str
    errors: tuple[ManifestError, ...] = ()
    warnings: tuple[ManifestError, ...] = ()
    served: Served | None = None
    #: What was served before this reload (success only).
    previous: Served | None = None


# -- the seam to the loader and the snapshot builder -----------------------------------------------


def _load(directory: Path, contents: DirectoryContents | None = None) -> LoadResult:
    return load_manifest_directory(str(directory), contents=contents)


def _build(result: LoadResult) -> Any:
    from staticadm.snapshot import build_snapshot

    return build_snapshot(result)


def _served_from(result: LoadResult, snapshot: Any) -> Served:
    bound = frozenset((binding.spec.policy_name, binding.metadata.name) for binding in result.bindings)
    names = frozenset(policy.metadata.name for policy in result.policies)
    return Served(snapshot, result.content_hash, len(result.policies), len(result.bindings), time.time(), bound,
                  names)


def dropped_bindings(before: Served, after: Served) -> list[tuple[str, str]]:
    """Bindings that are gone while their policy stays: what a half-written file looks like."""
    return sorted((policy, binding) for policy, binding in before.bound - after.bound if policy in after.policy_names)


def directory_signature(directory: Path) -> tuple[tuple[str, int, int, int], ...] | None:
    """(name, size, mtime_ns, inode) of every entry: changes whenever a file is written or replaced."""
    try:
        with os.scandir(directory) as scan:
            found = []
            for entry in scan:
                info = entry.stat(follow_symlinks=True)
                found.append((entry.name, info.st_size, info.st_mtime_ns, info.st_ino))
    except OSError:
        return None
    return tuple(sorted(found))


# -- the source ------------------------------------------------------------------------------------


class ManifestSource:
    """Loads ``directory`` into snapshots and keeps :attr:`current` up to date."""

    def __init__(
        self,
        directory: Path,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        debounce: float = DEFAULT_DEBOUNCE,
        logger: Any,
        on_reload: Callable[[ReloadResult], None] | None = None,
        on_reloading: Callable[[str], None] | None = None,
        allow_world_writable: bool = False,
    ) -> None:
        self.directory = directory
        self.poll_interval = poll_interval
        self.debounce = debounce
        self._log = logger
        self._on_reload = on_reload
        self._on_reloading = on_reloading
        self.allow_world_writable = allow_world_writable
        self._current: Served | None = None
        #: The errors of the last failed load, so a retry failing identically logs one line, not all again.
        self._last_errors: tuple[str, ...] | None = None
        self._retry = FIRST_RETRY
        # One worker: loads never overlap, so the hash comparison and the swap see a consistent order.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="staticadm-reload")
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending_reason = "watch"
        self._observer: BaseObserver | None = None
        self._watches: dict[str, tuple[ObservedWatch, tuple[int, int]]] = {}

    @property
    def current(self) -> Served | None:
        return self._current

    # -- loading -----------------------------------------------------------------------------------

    def load_initial(self) -> ReloadResult:
        """The startup load; on failure :meth:`run` keeps retrying and the daemon stays not ready."""
        result = self._check_and_reload("startup")
        self._report(result)
        return result

    async def reload(self, reason: str) -> ReloadResult:
        loop = asyncio.get_running_loop()
        if self._on_reloading is not None:
            self._on_reloading(reason)
        result = await loop.run_in_executor(self._executor, self._check_and_reload, reason)
        self._report(result)
        return result

    def _check_and_reload(self, reason: str) -> ReloadResult:
        try:
            return self._load_and_swap(reason)
        except Exception as error:  # a loader bug must keep the old snapshot, not kill the watcher
            message = f"failed to load the manifest directory: {type(error).__name__}: {error}"
            return ReloadResult("failure", reason, (ManifestError(str(self.directory), message),))

    def _read_settled(self) -> DirectoryContents | None:
        """The directory as read while nothing changed in it: the same names, sizes, modification times
        and inodes before the read and one debounce after it. None when it kept changing for
        ``MAX_COALESCE`` (a writer at work: a file rewritten in place must not be served half written)."""
        deadline = time.monotonic() + MAX_COALESCE
        while True:
            before = directory_signature(self.directory)
            contents = read_directory(str(self.directory), max_file_bytes=DEFAULT_MAX_FILE_BYTES)
            time.sleep(self.debounce)
            if before is None or directory_signature(self.directory) == before:
                return contents
            if time.monotonic() > deadline:
                return None

    def _load_and_swap(self, reason: str) -> ReloadResult:
        current = self._current
        contents = self._read_settled()
        if contents is None:
            message = (f"the manifest directory kept changing for {MAX_COALESCE:g} s while being read; not loaded "
                       "(write manifest files atomically: a temporary file, then a rename)")
            return ReloadResult("failure", reason, (ManifestError(str(self.directory), message),))
        # Checked before the unchanged shortcut: a chmod changes no byte, and must still stop the
        # directory from being trusted (the last good snapshot keeps serving).
        unsafe = self._unsafe(contents)
        if unsafe:
            return ReloadResult("failure", reason, unsafe)
        if current is not None and not contents.errors and contents.content_hash == current.content_hash:
            return ReloadResult("unchanged", reason, served=current)
        # The loader compiles what was just read and hashed: one read per reload.
        result = _load(self.directory, contents)
        if not self.allow_world_writable:
            # The loader's own read is what gets compiled; its world-writable findings are errors here.
            promoted = tuple(w for w in result.warnings if w.message.endswith("is world-writable"))
            if promoted:
                return ReloadResult("failure", reason, tuple(self._unsafe_error(w.path, None) for w in promoted))
        if result.errors:
            return ReloadResult("failure", reason, result.errors, result.warnings)
        if current is not None and result.content_hash == current.content_hash:
            return ReloadResult("unchanged", reason, (), result.warnings, current)
        try:
            snapshot = _build(result)
        except Exception as error:  # a compile bug must keep the old snapshot, not kill the watcher
            message = f"failed to build the admission snapshot: {type(error).__name__}: {error}"
            return ReloadResult("failure", reason, (ManifestError(str(self.directory), message),), result.warnings)
        served = _served_from(result, snapshot)
        # The swap: a single reference assignment, atomic under the GIL; readers hold their own reference.
        self._current = served
        return ReloadResult("success", reason, (), result.warnings, served, current)

    def _unsafe(self, contents: DirectoryContents) -> tuple[ManifestError, ...]:
        if self.allow_world_writable:
            return ()
        return tuple(self._unsafe_error(path, mode) for path, mode in world_writable(contents, str(self.directory)))

    def _unsafe_error(self, path: str, mode: int | None) -> ManifestError:
        what = "manifest directory" if path == str(self.directory) else "manifest file"
        shown = f" (mode {mode:04o})" if mode is not None else ""
        return ManifestError(path, f"refusing to load: {what} {path!r} is world-writable{shown}, so any local user "
                                   "could change admission policy; remove the write permission for others "
                                   "(chmod o-w) or start with --allow-world-writable-manifests")

    def _report(self, result: ReloadResult) -> None:
        log = self._log.bind(directory=str(self.directory), reason=result.reason)
        if result.status != "failure":
            self._last_errors = None
        if result.status == "failure":
            signature = tuple(str(error) for error in result.errors)
            repeated = signature == self._last_errors
            self._last_errors = signature
            if not repeated:
                for error in result.errors:
                    log.error("manifest error", file=error.path, field=error.field, kind=error.kind,
                              name=error.name, err=str(error))
            if self._current is not None:
                log.error("reloading manifest config failed; keeping the last good configuration",
                          errors=len(result.errors), repeated=repeated, served_hash=self._current.content_hash)
            else:
                log.error("loading manifest config failed; not ready (admission requests get 503) and retrying",
                          errors=len(result.errors), repeated=repeated, retry_seconds=self._retry)
        elif result.status == "success":
            for warning in result.warnings:
                log.warning("manifest warning", file=warning.path, field=warning.field, err=str(warning))
            served = result.served
            assert served is not None
            if result.previous is not None:
                for policy, binding in dropped_bindings(result.previous, served):
                    log.warning("a binding was removed while its policy stays; if its file was being rewritten, "
                                "write manifest files atomically (a temporary file, then a rename)",
                                policy=policy, binding=binding)
            if not served.content_hash:
                log.warning("manifest directory holds no manifests; every request is allowed")
            log.info("reloaded manifest config", hash=served.content_hash, policies=served.policies,
                     bindings=served.bindings)
        if self._on_reload is not None:
            self._on_reload(result)

    # -- watching ----------------------------------------------------------------------------------

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

    def _poke_threadsafe(self, reason: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._poke, reason)

    def start_watching(self) -> None:
        """Add the watches; call before the first load, so no change after that load can be missed."""
        if self._observer is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._observer = Observer()
        self._observer.daemon = True
        self._observer.start()
        self._sync_watches()

    async def run(self) -> None:
        """Reload on file events (coalesced), on :meth:`reload_now` and every ``poll_interval``."""
        self.start_watching()
        assert self._wake is not None
        try:
            while True:
                waiting = self.poll_interval
                if self._current is None:
                    waiting = min(self._retry, self.poll_interval)
                    self._retry = min(self._retry * 2, MAX_RETRY)
                try:
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
                    # that arrives as the wait ends, and this loop would then never stop on SIGTERM.
                    async with asyncio.timeout(waiting):
                        await self._wake.wait()
                    reason = self._pending_reason
                except TimeoutError:
                    reason = "poll" if self._current is not None else "retry"
                else:
                    await self._quiet()
                self._wake.clear()
                self._pending_reason = "watch"
                # Watches are re-added before loading so that no event between the two is lost.
                self._sync_watches()
                await self.reload(reason)
                self._sync_watches()
        finally:
            self._stop_observer()

    async def _quiet(self) -> None:
        assert self._wake is not None
        deadline = time.monotonic() + MAX_COALESCE
        while time.monotonic() < deadline:
            self._wake.clear()
            try:
                async with asyncio.timeout(self.debounce):
                    await self._wake.wait()
            except TimeoutError:
                return

    def _wanted_watches(self) -> dict[str, Callable[[FileSystemEvent], bool]]:
        """Directories to watch, each with a filter on its events.

        The directory itself (through its symlink, if it is one) sees file changes and ConfigMap
        ``..data`` swaps; its parent sees the directory, or a symlink to it, being removed, recreated
        or replaced, which no watch on the directory itself can report.
        """
        wanted: dict[str, Callable[[FileSystemEvent], bool]] = {}
        path = Path(os.path.abspath(self.directory))
        name = path.name

        def names_directory(event: FileSystemEvent) -> bool:
            paths = [event.src_path, getattr(event, "dest_path", "")]
            return any(p and os.path.basename(os.fsdecode(p)) == name for p in paths)

        if path.parent.is_dir():
            wanted[str(path.parent)] = names_directory
        target = os.path.realpath(path)
        if os.path.isdir(target):
            wanted[target] = lambda _event: True
        return wanted

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
        for path, accept in wanted.items():
            if path in self._watches:
                continue
            identity = _identity(path)
            if identity is None:
                continue
            try:
                watch = observer.schedule(_Handler(accept, self._poke_threadsafe), path, recursive=False)
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
    def __init__(self, accept: Callable[[FileSystemEvent], bool], poke: Callable[[str], None]) -> None:
        self._accept = accept
        self._poke = poke

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _IGNORED_EVENTS or not self._accept(event):
            return
        self._poke("watch")


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

