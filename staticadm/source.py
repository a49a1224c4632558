"""The manifest source: one reload of the directory into the snapshot being served, or the reason not.

This mirrors kube-apiserver's ``policy/manifest/source``: a full load and validation, then the content
hash check, then compilation into a snapshot, then an atomic swap; any error keeps the last good
snapshot. A load whose bytes hash to the snapshot being served is skipped before validation: identical
bytes validate identically, so this only saves the work (and, as upstream, records no metric).

:meth:`ManifestSource.reload` is synchronous and self-contained: no logging, no threads, no event
loop. The directory watcher (:mod:`staticadm.watch`) decides when to call it; the daemon reports what
it returned. Only this class replaces the snapshot. Readers take :attr:`ManifestSource.current` once per
request and keep that object for the whole request, so a swap never changes a request half way.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from staticadm.manifests import DEFAULT_MAX_FILE_BYTES, LoadResult, ManifestError, load_manifest_directory
from staticadm.manifests.files import DirectoryContents, read_directory, refusals
from staticadm.manifests.loader import LoadCache
from staticadm.model import TopLevel
from staticadm.snapshot import Snapshot, build_snapshot
from staticadm.writes import WriteTracker

#: A directory that keeps changing while it is read, or files that keep being written, are given this long
#: before the reload gives up (and keeps the last good snapshot): a writer that never stops must not postpone
#: reloading forever.
MAX_SETTLE = 2.0
#: How often a reload looks again while it waits for a file being written.
SETTLE_POLL = 0.005


class ReloadStatus(StrEnum):
    """The ``status`` label of the reload metrics."""

    SUCCESS = "success"
    FAILURE = "failure"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class Served:
    """The snapshot being served, with what the operator needs to identify it."""

    snapshot: Snapshot
    content_hash: str
    policies: int
    bindings: int
    loaded_at: float
    #: (policy name, binding name) of every binding, to notice a binding gone while its policy stays.
    bound: frozenset[tuple[str, str]] = frozenset()
    policy_names: frozenset[str] = frozenset()
    #: The directory as it was read for this snapshot: what workers are given to serve the very same bytes.
    contents: DirectoryContents | None = None
    #: Every policy and binding by (kind, name), to say what a reload changed.
    objects: Mapping[tuple[str, str], TopLevel] = field(default_factory=dict)

    def describe(self) -> str:
        return f"hash={self.content_hash or '(empty)'} policies={self.policies} bindings={self.bindings}"


@dataclass(frozen=True, slots=True)
class ReloadResult:
    status: ReloadStatus
    reason: str
    errors: tuple[ManifestError, ...] = ()
    warnings: tuple[ManifestError, ...] = ()
    #: What is served after this reload (None: nothing yet).
    served: Served | None = None
    #: What was served before this reload (success only).
    previous: Served | None = None

    @property
    def changes(self) -> tuple[list[str], list[str], list[str]]:
        """("Kind/name" added, changed, removed) by this reload; all empty unless it succeeded."""
        before, after = self.previous, self.served
        if self.status is not ReloadStatus.SUCCESS or after is None:
            return [], [], []
        old = before.objects if before is not None else {}
        new = after.objects

        def names(keys: Iterable[tuple[str, str]]) -> list[str]:
            return [f"{kind}/{name}" for kind, name in sorted(keys)]

        changed = [key for key in new.keys() & old.keys() if new[key] is not old[key] and new[key] != old[key]]
        return names(new.keys() - old.keys()), names(changed), names(old.keys() - new.keys())

    @property
    def dropped_bindings(self) -> list[tuple[str, str]]:
        """Bindings that are gone while their policy stays: what a half-written file looks like."""
        before, after = self.previous, self.served
        if self.status is not ReloadStatus.SUCCESS or before is None or after is None:
            return []
        return sorted((policy, binding) for policy, binding in before.bound - after.bound
                      if policy in after.policy_names)

    @property
    def failed_transiently(self) -> bool:
        """The files could not be read for want of descriptors or memory (``ManifestError.transient``): worth
        reading again without waiting for a change."""
        return self.status is ReloadStatus.FAILURE and any(error.transient for error in self.errors)


def _served_from(result: LoadResult, snapshot: Snapshot, contents: DirectoryContents) -> Served:
    bound = frozenset((binding.spec.policy_name, binding.metadata.name) for binding in result.bindings)
    names = frozenset(policy.metadata.name for policy in result.policies)
    objects = {(item.KIND, item.metadata.name): item for item in (*result.policies, *result.bindings)}
    return Served(snapshot, result.content_hash, len(result.policies), len(result.bindings), time.time(), bound,
                  names, contents, objects)


class ManifestSource:
    """Loads ``directory`` into snapshots and owns :attr:`current`. Calls must not overlap."""

    def __init__(self, directory: Path, *, allow_world_writable: bool = False) -> None:
        self.directory = directory
        self.allow_world_writable = allow_world_writable
        #: What the directory's file events say is being written (fed by the watcher, if any).
        self.writes = WriteTracker()
        #: The latest read of the directory, whose unchanged files the next read takes as they are.
        self._last_read: DirectoryContents | None = None
        self._current: Served | None = None
        #: What the load being served parsed and checked: exactly what the current snapshot uses.
        self._cache = LoadCache()

    @property
    def current(self) -> Served | None:
        return self._current

    @property
    def skipped(self) -> tuple[str, ...]:
        """The names the latest read of the directory skipped for their extension."""
        return self._last_read.skipped if self._last_read is not None else ()

    def reload(self, reason: str) -> ReloadResult:
        """Reads, validates and compiles the directory, and serves it if it is valid and changed.

        Never raises: a loader or compiler bug is a failed reload that keeps the last good snapshot.
        """
        try:
            return self._load_and_swap(reason)
        except Exception as error:
            message = f"failed to load the manifest directory: {type(error).__name__}: {error}"
            return self._failure(reason, (ManifestError(str(self.directory), message),))

    def _failure(self, reason: str, errors: tuple[ManifestError, ...],
                 warnings: tuple[ManifestError, ...] = ()) -> ReloadResult:
        return ReloadResult(ReloadStatus.FAILURE, reason, errors, warnings, self._current)

    def _read_settled(self) -> DirectoryContents | list[str]:
        """The directory as read while no file in it was being written (:class:`WriteTracker`) or changed
        during the read: an atomic rename is read at once, a file rewritten in place is waited for until it is
        closed. After ``MAX_SETTLE`` of waiting, the names still unsettled instead (a writer that never stops).
        Files unchanged since the previous read are not read again."""
        deadline = time.monotonic() + MAX_SETTLE
        while True:
            # Nothing is read while a file is known to be open for writing: a writer can take seconds.
            unsettled = self.writes.writing()
            if not unsettled:
                contents = self._last_read = read_directory(
                    str(self.directory), max_file_bytes=DEFAULT_MAX_FILE_BYTES, previous=self._last_read)
                unsettled = sorted({*contents.changing, *self.writes.unsettled(contents.listing)})
                if not unsettled:
                    return contents
            if time.monotonic() > deadline:
                return unsettled
            time.sleep(SETTLE_POLL)

    def _load_and_swap(self, reason: str) -> ReloadResult:
        contents = self._read_settled()
        if isinstance(contents, list):
            message = (f"manifest files kept being written for {MAX_SETTLE:g} s ({', '.join(contents)}); not "
                       "loaded (write manifest files atomically: a temporary file, then a rename)")
            return self._failure(reason, (ManifestError(str(self.directory), message),))
        # Checked before the unchanged shortcut: a chmod changes no byte, and must still stop the
        # directory from being trusted (the last good snapshot keeps serving).
        unsafe = self._unsafe(contents)
        if unsafe:
            return self._failure(reason, unsafe)
        return self._load(reason, contents)

    def apply(self, reason: str, contents: DirectoryContents) -> ReloadResult:
        """Serves ``contents``, a directory another process read and validated (the worker supervisor), so
        that every worker serves the very same bytes. Never raises."""
        try:
            return self._load(reason, contents)
        except Exception as error:
            message = f"failed to load the manifest directory: {type(error).__name__}: {error}"
            return self._failure(reason, (ManifestError(str(self.directory), message),))

    def _load(self, reason: str, contents: DirectoryContents) -> ReloadResult:
        current = self._current
        if current is not None and not contents.errors and contents.content_hash == current.content_hash:
            return ReloadResult(ReloadStatus.UNCHANGED, reason, served=current)
        # The loader compiles what was just read and hashed: one read per reload.
        result = load_manifest_directory(str(self.directory), contents=contents, cache=self._cache)
        if result.errors:
            return self._failure(reason, result.errors, result.warnings)
        snapshot = build_snapshot(result, current.snapshot if current is not None else None)
        served = _served_from(result, snapshot, contents)
        # The swap: a single reference assignment, atomic under the GIL; readers hold their own reference.
        self._current, self._cache = served, result.cache
        return ReloadResult(ReloadStatus.SUCCESS, reason, (), result.warnings, served, current)

    def _unsafe(self, contents: DirectoryContents) -> tuple[ManifestError, ...]:
        if self.allow_world_writable:
            return ()
        return refusals(contents, str(self.directory))
