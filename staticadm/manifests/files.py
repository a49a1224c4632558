"""Directory listing, bounded reading and the content hash, as kube-apiserver's manifest loader does.

Rules (apiserver ``admission/plugin/manifest/loader.go``): direct children only, in byte order of the
name; an entry that is a directory (not following symlinks) is skipped, so ConfigMap ``..data`` and
timestamp directories are ignored while symlinked files are read; only ``.yaml``, ``.yml`` and
``.json`` extensions (case-insensitive, Go's ``filepath.Ext``); empty files are skipped and do not
contribute to the hash.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from staticadm.manifests.errors import ManifestError

#: Read failures that end without any change to the files: out of descriptors (the process's or the system's)
#: or of kernel memory.
_TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})

MANIFEST_EXTENSIONS = frozenset({".yaml", ".yml", ".json"})


#: (device, inode, size, mtime_ns, ctime_ns) of a file: changes whenever it is written or replaced.
Stamp = tuple[int, int, int, int, int]
#: A file read this close after its last change is read again next time even if its stamp has not changed:
#: file times come from a clock that ticks every few milliseconds, so a write just after a read could leave
#: the same stamp. Older files with an unchanged stamp are not read again (a reload of 1,000 files reads one).
_REREAD_WITHIN_NS = 50_000_000


@dataclass(frozen=True, slots=True)
class ManifestFile:
    path: str
    data: bytes
    #: Mode bits of the file the path resolves to (symlinks followed), for the world-writable warning.
    mode: int
    stamp: Stamp = (0, 0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class OpenPath:
    """The manifest directory, or a manifest file reached through a symbolic link, whose resolved path passes
    through a directory where any local user could replace what the path leads to."""

    #: The directory or file, as named in the manifest directory.
    path: str
    #: The directory on its resolved path that lets any local user in, and that directory's mode bits.
    through: str
    mode: int
    #: Why: the directory is world-writable without the sticky bit, or with it the entry on the path in it
    #: belongs to a user other than root and this process's (anyone may have made it there).
    why: str


@dataclass(frozen=True, slots=True)
class DirectoryContents:
    files: tuple[ManifestFile, ...]
    content_hash: str
    directory_mode: int | None
    errors: tuple[ManifestError, ...]
    #: (name, mtime_ns) of every manifest name listed, empty files included: what a reload checks against the
    #: files known to be written (staticadm.writes).
    listing: tuple[tuple[str, int], ...] = ()
    #: Names of files that changed while they were being read, or were listed and gone when opened.
    changing: tuple[str, ...] = ()
    #: When the read began (time.time_ns()).
    read_at: int = 0
    #: Names of files skipped for their extension (not .yaml, .yml or .json), hidden names (editors' and
    #: atomic writers' temporary files) left out: kube-apiserver skips them without a word, check and the
    #: daemon say so.
    skipped: tuple[str, ...] = ()
    #: Manifest files listed with no bytes: skipped as kube-apiserver skips them, yet judged like the others for
    #: who may write them (an empty file anyone may write is one anyone may fill, or one that anyone emptied).
    empty_files: tuple[ManifestFile, ...] = ()
    #: The directory and each manifest reached through a symbolic link, when its resolved path lets any local user
    #: replace what it leads to (``PathWalk.open_path``).
    open_paths: tuple[OpenPath, ...] = ()


def go_ext(name: str) -> str:
    """``filepath.Ext``: from the last dot, so ``.yaml`` (a hidden file) has extension ``.yaml``."""
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 else ""


def is_manifest_name(name: str) -> bool:
    return go_ext(name).lower() in MANIFEST_EXTENSIONS


def document_files_under(directory: Path) -> list[Path]:
    """Every .json, .yaml and .yml file below ``directory``, recursively, in path order: the request and
    test files the offline commands take by the directory (the manifest loader reads only direct
    children; see read_directory)."""
    return sorted(path for path in directory.rglob("*")
                  if path.is_file() and path.suffix.lower() in MANIFEST_EXTENSIONS)


def content_hash(contents: list[bytes]) -> str:
    """sha256 over each non-empty file's bytes followed by a NUL, in order; "" when nothing has data."""
    digest = hashlib.sha256()
    has_data = False
    for data in contents:
        if not data:
            continue
        digest.update(data)
        digest.update(b"\x00")
        has_data = True
    return f"sha256:{digest.hexdigest()}" if has_data else ""


def read_directory(directory: str, *, max_file_bytes: int, previous: DirectoryContents | None = None
                   ) -> DirectoryContents:
    """The manifest files of ``directory``; those whose stamp is what it was in ``previous`` (a read of the same
    directory), and was already then, are taken from it instead of being read again."""
    read_at = time.time_ns()
    errors: list[ManifestError] = []
    try:
        directory_mode: int | None = os.stat(directory).st_mode
    except OSError as err:
        return DirectoryContents((), "", None, (_read_failure(directory, "manifest directory", err),), read_at=read_at)
    if directory_mode is None or not stat.S_ISDIR(directory_mode):
        message = f"failed to read manifest directory {directory!r}: not a directory"
        return DirectoryContents((), "", directory_mode, (ManifestError(directory, message),), read_at=read_at)
    try:
        with os.scandir(directory) as scan:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False), entry.is_symlink()) for entry in scan]
    except OSError as err:
        return DirectoryContents((), "", directory_mode, (_read_failure(directory, "manifest directory", err),),
                                 read_at=read_at)

    reusable = {} if previous is None else {
        file.path: file for file in previous.files if previous.read_at - file.stamp[4] > _REREAD_WITHIN_NS}
    # os.ReadDir sorts by the raw bytes of the name.
    entries.sort(key=lambda entry: os.fsencode(entry[0]))
    files: list[ManifestFile] = []
    listing: list[tuple[str, int]] = []
    changing: list[str] = []
    skipped: list[str] = []
    empty: list[ManifestFile] = []
    walk = PathWalk()
    opened = walk.open_path(directory)
    open_paths = [] if opened is None else [opened]
    for name, is_dir, is_link in entries:
        if is_dir:
            continue
        if not is_manifest_name(name):
            if not name.startswith("."):
                skipped.append(name)
            continue
        path = os.path.join(directory, name)
        read = _read_file(path, max_file_bytes, reusable.get(path))
        if isinstance(read, ManifestError):
            if _vanished(path):
                changing.append(name)  # removed since the listing: the directory changed while it was read
            else:
                errors.append(read)
            continue
        file, changed = read
        if is_link:
            opened = walk.open_path(path)
            if opened is not None:
                open_paths.append(opened)
        listing.append((name, file.stamp[3]))
        if changed:
            changing.append(name)
        (files if file.data else empty).append(file)
    return DirectoryContents(tuple(files), content_hash([f.data for f in files]), directory_mode, tuple(errors),
                             tuple(listing), tuple(changing), read_at, tuple(skipped), tuple(empty), tuple(open_paths))


def read_files(paths: list[str], *, max_file_bytes: int) -> DirectoryContents:
    """Named manifest files, in the order given, read and hashed as a directory's would be (``check -f``,
    test files naming single manifests); the directory mode is not judged."""
    errors: list[ManifestError] = []
    files: list[ManifestFile] = []
    empty: list[ManifestFile] = []
    for path in paths:
        read = _read_file(path, max_file_bytes)
        if isinstance(read, ManifestError):
            errors.append(read)
        else:
            (files if read[0].data else empty).append(read[0])
    walk = PathWalk()
    open_paths = [opened for opened in map(walk.open_path, [f.path for f in (*files, *empty)]) if opened is not None]
    return DirectoryContents(tuple(files), content_hash([f.data for f in files]), None, tuple(errors),
                             empty_files=tuple(empty), open_paths=tuple(open_paths))


def world_writable(contents: DirectoryContents, directory: str) -> list[tuple[str, int]]:
    """(path, mode) of the directory and of every manifest file that any local user may write.

    Such a path lets anyone on the host change admission policy; the daemon refuses to load it unless
    told otherwise (``--allow-world-writable-manifests``). Files are judged by the mode of what their
    symlink resolves to, since that is what is read. Empty files are judged too: were they not, any local user
    could empty a world-writable manifest and the daemon would load the directory without its policies.
    """
    found: list[tuple[str, int]] = []
    if contents.directory_mode is not None and contents.directory_mode & stat.S_IWOTH:
        found.append((directory, stat.S_IMODE(contents.directory_mode)))
    found.extend((f.path, stat.S_IMODE(f.mode)) for f in sorted((*contents.files, *contents.empty_files),
                                                               key=lambda f: f.path) if f.mode & stat.S_IWOTH)
    return found


class PathWalk:
    """Which paths any local user could replace what they lead to through a directory on their resolved path
    (their own mode is judged by ``world_writable``): one that others may write without the sticky bit, or one
    with it (``/tmp``) whose entry on the path belongs to neither root nor this process's user. One walk serves
    one read, and looks at each directory once: the links into one directory (a ConfigMap volume's) cost a
    readlink each."""

    def __init__(self) -> None:
        self._trusted = (0, os.geteuid())
        #: Path -> (its mode, the first directory on its way from / that lets any local user in, with that
        #: directory's mode and why, or None).
        self._ways: dict[str, tuple[int, tuple[str, int, str] | None]] = {}
        #: The directory a link names -> where it resolves to.
        self._directories: dict[str, str] = {}

    def open_path(self, path: str) -> OpenPath | None:
        """Where ``path`` is open to any local user; None when it is not, or cannot be resolved (reading it
        reports that)."""
        try:
            _, opening = self._way_to(self.resolved(path))
        except OSError:
            return None
        return None if opening is None else OpenPath(path, *opening)

    def resolved(self, path: str) -> str:
        """``os.path.realpath(path)``, with the directory a link names resolved once per walk: realpath(a/b) is
        realpath(a)/b whenever b is neither a link nor a dot name."""
        if not os.path.islink(path):
            return os.path.realpath(path)
        target = os.path.join(os.path.dirname(path), os.readlink(path))
        head, name = os.path.split(target)
        if name in ("", ".", ".."):
            return os.path.realpath(path)
        directory = self._directories.get(head)
        if directory is None:
            directory = self._directories[head] = os.path.realpath(head)
        candidate = os.path.join(directory, name)
        return os.path.realpath(candidate) if os.path.islink(candidate) else candidate

    def _way_to(self, resolved: str) -> tuple[int, tuple[str, int, str] | None]:
        known = self._ways.get(resolved)
        if known is not None:
            return known
        # realpath followed every link, so each entry is what the path passes through.
        info = os.lstat(resolved)
        parent = os.path.dirname(resolved)
        opening = None
        if parent != resolved:
            parent_mode, opening = self._way_to(parent)
            if opening is None and parent_mode & stat.S_IWOTH:
                if not parent_mode & stat.S_ISVTX:
                    opening = (parent, stat.S_IMODE(parent_mode), "others may write it")
                elif info.st_uid not in self._trusted:
                    opening = (parent, stat.S_IMODE(parent_mode),
                               f"others may write it, and {resolved!r} in it belongs to uid {info.st_uid}")
        self._ways[resolved] = (info.st_mode, opening)
        return info.st_mode, opening


#: How every refusal's message begins.
REFUSAL_PREFIX = "refusing to load: "


def refusals(contents: DirectoryContents, directory: str) -> tuple[ManifestError, ...]:
    """Why the daemon refuses to load ``contents`` at all, whatever they say: each world-writable path
    (``world_writable``) and each path that resolves through a directory any local user may write in
    (``PathWalk``). ``staticadm check`` reports the same errors, so it never passes a directory the daemon would not
    serve."""
    return (*(_world_writable_error(path, mode, directory) for path, mode in world_writable(contents, directory)),
            *(_open_path_error(opened, directory) for opened in contents.open_paths))


def _open_path_error(opened: OpenPath, directory: str) -> ManifestError:
    what = "manifest directory" if opened.path == directory else "manifest file"
    return ManifestError(opened.path, f"{REFUSAL_PREFIX}{what} {opened.path!r} resolves through {opened.through!r} "
                                      f"(mode {opened.mode:04o}: {opened.why}), so any local user could change "
                                      "admission policy; move what it leads to where only root may write, or start "
                                      "with --allow-world-writable-manifests")


def _world_writable_error(path: str, mode: int, directory: str) -> ManifestError:
    what = "manifest directory" if path == directory else "manifest file"
    return ManifestError(path, f"{REFUSAL_PREFIX}{what} {path!r} is world-writable (mode {mode:04o}), so any local "
                               "user could change admission policy; remove the write permission for others "
                               "(chmod o-w) or start with --allow-world-writable-manifests")


def _vanished(path: str) -> bool:
    """The entry itself is gone (not a symlink whose target is missing, which is an error to report)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _stamp(info: os.stat_result) -> Stamp:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _read_file(path: str, max_file_bytes: int, known: ManifestFile | None = None
               ) -> tuple[ManifestFile, bool] | ManifestError:
    """The file, and whether it changed while it was read; ``known`` is taken as it is if its stamp is the same."""
    if known is not None:
        try:
            info = os.stat(path)
        except OSError:
            pass  # reported by the read below
        else:
            if stat.S_ISREG(info.st_mode) and _stamp(info) == known.stamp:
                return ManifestFile(path, known.data, info.st_mode, known.stamp), False
    try:
        # O_NONBLOCK so a FIFO dropped into the directory cannot hang the loader; we then refuse
        # anything that is not a regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        return _read_failure(path, "file", err)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return ManifestError(path, f"failed to read file {path!r}: is a directory")
        if not stat.S_ISREG(info.st_mode):
            return ManifestError(path, f"failed to read file {path!r}: not a regular file")
        if info.st_size > max_file_bytes:
            return _too_large(path, max_file_bytes)
        chunks: list[bytes] = []
        remaining = max_file_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        # The file may have grown between fstat and read.
        if len(data) > max_file_bytes:
            return _too_large(path, max_file_bytes)
        stamp = _stamp(info)
        return ManifestFile(path, data, info.st_mode, stamp), _stamp(os.fstat(fd)) != stamp
    except OSError as err:
        return _read_failure(path, "file", err)
    finally:
        os.close(fd)


def _read_failure(path: str, what: str, err: OSError) -> ManifestError:
    return ManifestError(path, f"failed to read {what} {path!r}: {err.strerror or err}",
                         transient=err.errno in _TRANSIENT_ERRNOS)


def _too_large(path: str, max_file_bytes: int) -> ManifestError:
    return ManifestError(path, f"file {path!r} is larger than the limit of {max_file_bytes} bytes")
