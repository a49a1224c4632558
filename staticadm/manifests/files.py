"""Directory listing, bounded reading and the content hash, as kube-apiserver's manifest loader does.

Rules (apiserver ``admission/plugin/manifest/loader.go``): direct children only, in byte order of the
name; an entry that is a directory (not following symlinks) is skipped, so ConfigMap ``..data`` and
timestamp directories are ignored while symlinked files are read; only ``.yaml``, ``.yml`` and
``.json`` extensions (case-insensitive, Go's ``filepath.Ext``); empty files are skipped and do not
contribute to the hash.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from staticadm.manifests.errors import ManifestError

MANIFEST_EXTENSIONS = frozenset({".yaml", ".yml", ".json"})


@dataclass(frozen=True, slots=True)
class ManifestFile:
    path: str
    data: bytes
    #: Mode bits of the file the path resolves to (symlinks followed), for the world-writable warning.
    mode: int


@dataclass(frozen=True, slots=True)
class DirectoryContents:
    files: tuple[ManifestFile, ...]
    content_hash: str
    directory_mode: int | None
    errors: tuple[ManifestError, ...]


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


def read_directory(directory: str, *, max_file_bytes: int) -> DirectoryContents:
    errors: list[ManifestError] = []
    try:
        directory_mode: int | None = os.stat(directory).st_mode
    except OSError as err:
        message = f"failed to read manifest directory {directory!r}: {err.strerror or err}"
        return DirectoryContents((), "", None, (ManifestError(directory, message),))
    if directory_mode is None or not stat.S_ISDIR(directory_mode):
        message = f"failed to read manifest directory {directory!r}: not a directory"
        return DirectoryContents((), "", directory_mode, (ManifestError(directory, message),))
    try:
        with os.scandir(directory) as scan:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in scan]
    except OSError as err:
        message = f"failed to read manifest directory {directory!r}: {err.strerror or err}"
        return DirectoryContents((), "", directory_mode, (ManifestError(directory, message),))

    # os.ReadDir sorts by the raw bytes of the name.
    entries.sort(key=lambda entry: os.fsencode(entry[0]))
    files: list[ManifestFile] = []
    for name, is_dir in entries:
        if is_dir or not is_manifest_name(name):
            continue
        path = os.path.join(directory, name)
        read = _read_file(path, max_file_bytes)
        if isinstance(read, ManifestError):
            errors.append(read)
            continue
        data, mode = read
        if data:
            files.append(ManifestFile(path, data, mode))
    return DirectoryContents(tuple(files), content_hash([f.data for f in files]), directory_mode, tuple(errors))


def read_files(paths: list[str], *, max_file_bytes: int) -> DirectoryContents:
    """Named manifest files, in the order given, read and hashed as a directory's would be (``check -f``,
    test files naming single manifests); the directory mode is not judged."""
    errors: list[ManifestError] = []
    files: list[ManifestFile] = []
    for path in paths:
        read = _read_file(path, max_file_bytes)
        if isinstance(read, ManifestError):
            errors.append(read)
        elif read[0]:
            files.append(ManifestFile(path, read[0], read[1]))
    return DirectoryContents(tuple(files), content_hash([f.data for f in files]), None, tuple(errors))


def world_writable(contents: DirectoryContents, directory: str) -> list[tuple[str, int]]:
    """(path, mode) of the directory and of every manifest file that any local user may write.

    Such a path lets anyone on the host change admission policy; the daemon refuses to load it unless
    told otherwise (``--allow-world-writable-manifests``). Files are judged by the mode of what their
    symlink resolves to, since that is what is read.
    """
    found: list[tuple[str, int]] = []
    if contents.directory_mode is not None and contents.directory_mode & stat.S_IWOTH:
        found.append((directory, stat.S_IMODE(contents.directory_mode)))
    found.extend((f.path, stat.S_IMODE(f.mode)) for f in contents.files if f.mode & stat.S_IWOTH)
    return found


def _read_file(path: str, max_file_bytes: int) -> tuple[bytes, int] | ManifestError:
    try:
        # O_NONBLOCK so a FIFO dropped into the directory cannot hang the loader; we then refuse
        # anything that is not a regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        return ManifestError(path, f"failed to read file {path!r}: {err.strerror or err}")
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
        return data, info.st_mode
    except OSError as err:
        return ManifestError(path, f"failed to read file {path!r}: {err.strerror or err}")
    finally:
        os.close(fd)


def _too_large(path: str, max_file_bytes: int) -> ManifestError:
    return ManifestError(path, f"file {path!r} is larger than the limit of {max_file_bytes} bytes")
