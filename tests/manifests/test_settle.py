"""When a reload may read the directory: files being written are waited for, nothing else (real inotify events).

Reloads have no fixed delay: an atomic rename is complete when it lands. ``WriteTracker`` learns from the
directory's events which manifest files are open for writing; ``read_directory`` does not read again what
has not changed since the previous read.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from staticadm.manifests.files import read_directory
from staticadm.source import ManifestSource, ReloadStatus
from staticadm.writes import EVENT_GRACE, WriteTracker
from tests.server.harness import wait_for


class _Feed(FileSystemEventHandler):
    def __init__(self, tracker: WriteTracker) -> None:
        self.tracker = tracker
        self.seen: list[FileSystemEvent] = []

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.tracker.observe(event)
        self.seen.append(event)


@contextlib.contextmanager
def _watching(directory: Path, tracker: WriteTracker) -> Iterator[_Feed]:
    """Real inotify events of ``directory`` into ``tracker``, as the directory watcher feeds it."""
    feed = _Feed(tracker)
    observer = Observer(generate_full_events=True)  # type: ignore[call-arg]
    observer.schedule(feed, str(directory))
    observer.start()
    try:
        yield feed
    finally:
        observer.stop()
        observer.join(5)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, WriteTracker, _Feed]]:
    directory = tmp_path / "manifests"
    directory.mkdir()
    tracker = WriteTracker()
    with _watching(directory, tracker) as feed:
        yield directory, tracker, feed


def _unsettled(tracker: WriteTracker, directory: Path) -> list[str]:
    return tracker.unsettled((path.name, path.stat().st_mtime_ns) for path in directory.iterdir())


def _seen(feed: _Feed, kind: str, name: str) -> bool:
    return any(event.event_type == kind and Path(os.fsdecode(event.dest_path or event.src_path)).name == name
               for event in list(feed.seen))


def test_a_file_renamed_in_is_settled_as_soon_as_its_event_is_seen(watched: tuple[Path, WriteTracker, _Feed],
                                                                    tmp_path: Path) -> None:
    directory, tracker, feed = watched
    staging = tmp_path / "staging.yaml"
    staging.write_text("kind: x\n")
    os.replace(staging, directory / "a.yaml")  # modified a moment ago, but complete
    assert wait_for(lambda: _seen(feed, "moved", "a.yaml"))
    assert _unsettled(tracker, directory) == []


@contextlib.contextmanager
def _half_written(path: Path, feed: _Feed) -> Iterator[TextIO]:
    """``path`` open for writing, its first write seen by the tracker."""
    with path.open("w") as handle:
        handle.write("kind: half")
        handle.flush()
        assert wait_for(lambda: _seen(feed, "modified", path.name))
        yield handle


def test_a_file_open_for_writing_is_unsettled_until_it_is_closed(watched: tuple[Path, WriteTracker, _Feed]) -> None:
    directory, tracker, feed = watched
    with _half_written(directory / "a.yaml", feed) as handle:
        time.sleep(EVENT_GRACE + 0.1)  # long after its modification: still open, still unsettled
        assert _unsettled(tracker, directory) == ["a.yaml"]
        handle.write(" and the rest\n")
    assert wait_for(lambda: _seen(feed, "closed", "a.yaml"))
    assert _unsettled(tracker, directory) == []


def test_a_modification_whose_event_has_not_arrived_is_waited_for_a_moment() -> None:
    # Nothing watches here (polling, SIGHUP): a file changed just now may still be being written.
    tracker = WriteTracker()
    now = time.time_ns()
    assert tracker.unsettled([("a.yaml", now)]) == ["a.yaml"]
    assert tracker.unsettled([("a.yaml", now - int(EVENT_GRACE * 1e9) - 1)]) == []


def test_files_the_loader_does_not_read_are_never_waited_for(watched: tuple[Path, WriteTracker, _Feed]) -> None:
    directory, tracker, feed = watched
    with _half_written(directory / "notes.txt", feed):
        assert tracker.unsettled([]) == []


def test_an_unchanged_file_is_not_read_again_and_a_changed_one_always_is(tmp_path: Path) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text("kind: old\n")
    new.write_text("kind: A\n")
    first = read_directory(str(tmp_path), max_file_bytes=1 << 20)
    # Rewritten in place right after the read, with the same size: file times may not have moved (their
    # clock ticks every few milliseconds), so what was read this close to its change is read again.
    new.write_text("kind: B\n")
    second = read_directory(str(tmp_path), max_file_bytes=1 << 20, previous=first)
    assert {Path(f.path).name: f.data for f in second.files} == {"new.yaml": b"kind: B\n", "old.yaml": b"kind: old\n"}
    time.sleep(0.1)
    third = read_directory(str(tmp_path), max_file_bytes=1 << 20, previous=second)
    fourth = read_directory(str(tmp_path), max_file_bytes=1 << 20, previous=third)
    assert [f.data for f in fourth.files] == [b"kind: B\n", b"kind: old\n"]
    assert all(a.data is b.data for a, b in zip(third.files, fourth.files, strict=True))  # not read again
    assert not fourth.changing


def test_a_writer_that_never_stops_is_given_up_on_and_the_last_good_kept(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    source = ManifestSource(tmp_path)
    assert source.reload("startup").status is ReloadStatus.SUCCESS
    stop = threading.Event()

    def scribble(handle: TextIO) -> None:
        while not stop.is_set():
            handle.write("# more\n")
            handle.flush()
            time.sleep(0.02)

    with _watching(tmp_path, source.writes), (tmp_path / "a.yaml").open("w") as handle:
        writer = threading.Thread(target=scribble, args=(handle,))
        writer.start()
        try:
            result = source.reload("watch")
        finally:
            stop.set()
            writer.join()
    assert result.status is ReloadStatus.FAILURE and result.served is not None
    assert "a.yaml" in str(result.errors[0]) and "kept being written" in str(result.errors[0])
