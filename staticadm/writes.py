"""Which manifest files are being written right now, as the directory's file events tell.

A reload must not take a file half written, and must wait for nothing else: kube-apiserver reloads on every
event, without any delay, and an atomic rename is complete when it lands. So a reload waits only for the files
this tracker names:

- **being written**: from the event that a regular file was created or modified until the event that it was
  closed after writing, renamed or removed; but for at most :data:`WRITE_PAUSE` after its last modification (a
  writer that pauses longer, or keeps a file open without writing, no longer holds reloads back);
- **not yet accounted for**: a file whose modification time is within :data:`EVENT_GRACE` of now and newer than
  every close or rename seen for it, whose events are still on their way (or that nothing watches: polling,
  a SIGHUP). A rename of any entry accounts for every file older than it: ConfigMap volumes write new files in
  a directory of their own, then publish them all by renaming ``..data``.

Fed from the watchdog thread, asked from the reload thread: every method takes the lock.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterable

from watchdog.events import FileSystemEvent

from staticadm.manifests.files import is_manifest_name

#: A writer that has not modified its file for this long no longer holds reloads back.
WRITE_PAUSE = 2.0
#: How long a modification may wait for its file event before the file is taken as it is.
EVENT_GRACE = 0.5
#: Past this many names remembered, those too old to matter are forgotten.
_PRUNE_AT = 1024

_NS = 1_000_000_000


class WriteTracker:
    """Manifest files being written or not yet accounted for; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Name -> time of its last modification seen (ns), while it has not been closed since.
        self._modified: dict[str, int] = {}
        #: Name -> when it was last closed after writing or renamed into place (ns).
        self._completed: dict[str, int] = {}
        #: When any entry of the directory was last renamed (ns).
        self._renamed = 0

    def observe(self, event: FileSystemEvent) -> None:
        """One watchdog event in the manifest directory (full events: a rename from elsewhere is a move)."""
        now = time.time_ns()
        kind = event.event_type
        source = os.path.basename(os.fsdecode(event.src_path))
        with self._lock:
            if kind == "moved":
                destination = os.path.basename(os.fsdecode(event.dest_path))
                self._modified.pop(source, None)
                self._modified.pop(destination, None)
                if destination:
                    self._completed[destination] = now
                self._renamed = now
            elif event.is_directory:
                return
            elif not is_manifest_name(source):
                pass  # a file the loader does not read (notes.txt, a temporary file to be renamed)
            elif kind == "modified" or (kind == "created" and _is_regular(os.fsdecode(event.src_path))):
                self._modified[source] = now
            elif kind == "closed":
                self._modified.pop(source, None)
                self._completed[source] = now
            elif kind == "deleted":
                self._modified.pop(source, None)
            if len(self._modified) + len(self._completed) > _PRUNE_AT:
                self._prune(now)

    def writing(self) -> list[str]:
        """The names being written now."""
        now = time.time_ns()
        with self._lock:
            return sorted(name for name, seen in self._modified.items() if now - seen < WRITE_PAUSE * _NS)

    def unsettled(self, files: Iterable[tuple[str, int]]) -> list[str]:
        """The names among ``files`` ((name, mtime_ns) as the directory was read) that a reload must wait for,
        with any other name being written."""
        waiting = set(self.writing())
        now = time.time_ns()
        with self._lock:
            for name, mtime in files:
                if now - mtime < EVENT_GRACE * _NS and mtime > max(self._completed.get(name, 0), self._renamed):
                    waiting.add(name)
        return sorted(waiting)

    def _prune(self, now: int) -> None:
        self._modified = {name: seen for name, seen in self._modified.items() if now - seen < WRITE_PAUSE * _NS}
        self._completed = {name: seen for name, seen in self._completed.items() if now - seen < EVENT_GRACE * _NS}


def _is_regular(path: str) -> bool:
    """A created regular file is being written; a symlink or a hard link is complete when it appears."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1
