"""Files replaced whole: written beside their final path with their final mode, synced, then renamed.

Every reader (the daemon's TLS watcher, kube-apiserver reading webhook manifests, a CI system reading a
report) sees the old file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    # Created with its final mode: no window in which a private key is world-readable.
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        previous: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        previous = None
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        # O_CREAT's mode is filtered by the umask and ignored for an existing file: set it outright.
        os.fchmod(fd, mode)
        if previous is not None and (previous.st_uid, previous.st_gid) != (os.geteuid(), os.getegid()):
            # A rotation run as root must leave the files readable by the daemon's user, which owned them.
            with contextlib.suppress(PermissionError):
                os.fchown(fd, previous.st_uid, previous.st_gid)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
