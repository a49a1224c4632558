"""Files replaced whole: written beside their final path with their final mode, synced, then renamed.

Every reader (the daemon's TLS watcher, kube-apiserver reading webhook manifests, a CI system reading a
report) sees the old file or the new one, never half of either.

The temporary file has a fresh random name and is created with ``O_CREAT|O_EXCL|O_NOFOLLOW``: a name planted
beforehand (a symlink to a victim file, a file of another user) is never opened, only skipped. The rename
replaces the final directory entry itself, a symlink included, never what it points at; an owner kept across a
rotation is the owner of that entry (``lstat``), set on the open descriptor (``fchown``), never through a link.

Secrets (keys, the daemon's state) go only into a :class:`PrivateDirectory`: one owned by the writing user (or
root) that neither its group nor others may write, so that no other local user can plant, replace or read what
is written there. The check is made on an open descriptor of the directory, every file is created relative to
that descriptor, and each write checks again that the path still names that directory with those rights.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import stat
from pathlib import Path

#: Attempts at a fresh temporary name before giving up (a collision of 64 random bits is someone guessing).
_TEMPORARY_ATTEMPTS = 8
#: ``.NAME.<16 hex digits>.tmp``: what ``_create_temporary`` names a temporary.
_STALE_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{16}\.tmp")


class UnsafeDirectoryError(PermissionError):
    """A directory another local user could write (or that is not the one checked): nothing is written in it."""


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """``data`` as the whole of ``path``, created with ``mode`` (no window in which a private key is readable by
    others); the owner of a regular file ``path`` replaces is kept when this runs as root (a rotation run as root
    leaves the files readable by the daemon's user, which owned them)."""
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _replace_in(directory, path.name, data, mode, shown=path)
    finally:
        os.close(directory)


class PrivateDirectory:
    """A directory only the writing user (or root) may change, opened once and written by name."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._identity = _identity(os.fstat(fd))

    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> PrivateDirectory:
        """``path`` (created with mode 0700 if missing and ``create``, its parents as ``mkdir -p`` makes them),
        refused with :class:`UnsafeDirectoryError` unless it is a directory owned by this user or root that group
        and others cannot write. A symlink to such a directory is followed: the directory it names is checked."""
        if create:
            _make_private(path)
        return cls._adopted(path, os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))

    @classmethod
    def _adopted(cls, path: Path, fd: int) -> PrivateDirectory:
        """The directory open as ``fd``, once checked (``fd`` is closed when it is refused)."""
        try:
            _refuse_unless_private(path, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def subdirectory(self, name: str) -> PrivateDirectory:
        """The directory ``name`` inside this one (created with mode 0700 if missing), checked the same way; a
        symlink there is refused rather than followed."""
        self.check()
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=self._fd)
        path = self.path / name
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._fd)
        except OSError as error:
            raise UnsafeDirectoryError(f"{path} is not a directory ({error.strerror}): a symlink or a file is where "
                                       "keys are kept; remove it") from error
        return self._adopted(path, fd)

    def check(self) -> None:
        """Raises :class:`UnsafeDirectoryError` if the directory's owner or mode changed since it was opened, or
        its path now names another directory (moved away and replaced)."""
        _refuse_unless_private(self.path, os.fstat(self._fd))
        try:
            current = os.stat(self.path)
        except OSError as error:
            raise UnsafeDirectoryError(f"{self.path} was removed or replaced since it was checked ({error.strerror}); "
                                       "nothing was written") from error
        if _identity(current) != self._identity:
            raise UnsafeDirectoryError(f"{self.path} was replaced by another directory since it was checked; "
                                       "nothing was written")

    def write(self, name: str, data: bytes, mode: int) -> Path:
        """``data`` as the whole of the file ``name``, after checking the directory again."""
        self.check()
        path = self.path / name
        _replace_in(self._fd, name, data, mode, shown=path)
        return path

    def write_together(self, files: list[tuple[str, bytes, int]]) -> None:
        """Each (name, data, mode) as a whole file, all written before any is renamed into place (see
        ``_replace_together``), after checking the directory again. Temporaries of these names that an
        interrupted write left (a crash, a power cut: a private key under a name nobody reads) are removed
        first; only this user or root can have made anything in a private directory."""
        self.check()
        self._remove_stale_temporaries({name for name, _, _ in files})
        _replace_together(self._fd, files, shown=self.path)

    def _remove_stale_temporaries(self, names: set[str]) -> None:
        for entry in os.listdir(self._fd):
            if (_STALE_TEMPORARY.fullmatch(entry) and entry[1:].rsplit(".", 2)[0] in names) \
                    or entry in {f".{name}.tmp" for name in names}:  # the fixed names of earlier versions
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry, dir_fd=self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> PrivateDirectory:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _replace_in(directory: int, name: str, data: bytes, mode: int, *, shown: Path) -> None:
    _replace_together(directory, [(name, data, mode)], shown=shown.parent)


def _replace_together(directory: int, files: list[tuple[str, bytes, int]], *, shown: Path) -> None:
    """Every file written to a temporary first, then each renamed in order: a full disk or a read-only file
    system fails before any final name changes, so a key never lands without its certificate."""
    written: list[tuple[str, str]] = []
    try:
        for name, data, mode in files:
            fd, temporary = _create_temporary(directory, name, mode, shown / name)
            written.append((temporary, name))
            try:
                # O_CREAT's mode is filtered by the umask: set it outright.
                os.fchmod(fd, mode)
                _keep_owner(fd, directory, name)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        while written:
            temporary, name = written[0]
            os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
            written.pop(0)
    finally:
        for temporary, _ in written:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=directory)
    with contextlib.suppress(OSError):  # the renames made durable; not every file system can sync a directory
        os.fsync(directory)


def _create_temporary(directory: int, name: str, mode: int, shown: Path) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TEMPORARY_ATTEMPTS):
        temporary = f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            return os.open(temporary, flags, mode & 0o700, dir_fd=directory), temporary
        except FileExistsError:
            continue
    raise FileExistsError(f"{shown.parent}: could not create a temporary file for {shown.name}: every fresh name "
                          "was taken (someone is creating files there)")


def _keep_owner(fd: int, directory: int, name: str) -> None:
    try:
        previous = os.lstat(name, dir_fd=directory)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(previous.st_mode):
        return  # a symlink (or anything else) says nothing about who should own the new file
    if (previous.st_uid, previous.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):
            os.fchown(fd, previous.st_uid, previous.st_gid)


def _make_private(path: Path) -> None:
    missing = []
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    for directory in reversed(missing):
        # Parents as mkdir -p makes them (0777 less the umask): /etc/staticadm may hold what others read.
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700 if directory == path else 0o777)


def _refuse_unless_private(path: Path, info: os.stat_result) -> None:
    refuse_unless_owned(path, info, what="write keys or state in")


def refuse_unless_owned(path: Path, info: os.stat_result, *, what: str, shared_ok: bool = False) -> None:
    """:class:`UnsafeDirectoryError` unless ``info`` (of ``path``) is a directory owned by this user or root that
    neither group nor others may write; with ``shared_ok`` its mode is not judged, only its owner. ``what`` says
    what would be done there."""
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectoryError(f"{path} is not a directory")
    user = os.geteuid()
    mode = stat.S_IMODE(info.st_mode)
    foreign = info.st_uid not in (user, 0)
    shared = bool(mode & (stat.S_IWGRP | stat.S_IWOTH)) and not shared_ok
    if not (foreign or shared):
        return
    why = []
    if foreign:
        why.append(f"it belongs to {_user_name(info.st_uid)}, not to {_user_name(user)}")
    if shared:
        why.append("its group or others may write it")
    fix = " && ".join(([f"chown {_login(user)} {path}"] if foreign or not shared_ok else [])
                      + ([f"chmod go-w {path}"] if not shared_ok else []))
    raise UnsafeDirectoryError(
        f"refusing to {what} {path}: owner {_user_name(info.st_uid)}, mode {mode:04o}; "
        f"{' and '.join(why)}, so another local user could read, plant or replace its files; fix it with "
        f"`{fix}` (as root), or choose a directory of your own")


def _user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _login(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino
