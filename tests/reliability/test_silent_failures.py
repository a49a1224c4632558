"""No reload failure is silent, and only what kube-apiserver's loader reads can hold a reload back.

A file name that is not UTF-8 reached the JSON log line as a lone surrogate (``os.fsdecode``), which orjson
refuses: the manifest-source task died on the log line, before the failure was counted or shown. A file
the loader never reads (``notes.txt``) rewritten every 20 ms made every reload fail ("kept changing").
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server.harness import RELOADS, Daemon, DaemonFactory, denied_message, policy_yaml, wait_for, write_atomically

#: ``bad-\xff.yaml``: a Latin-1 name, as a tarball or an old editor may leave it.
UNDECODABLE_NAME = os.fsdecode(b"bad-\xff.yaml")
SHADOW_RELOADS = "staticadm_shadow_reloads_total"


def _records(daemon: Daemon) -> list[dict[str, Any]]:
    return [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]


def _logged_with_name(daemon: Daemon, *, shadow: bool) -> bool:
    return any(record.get("msg") == "manifest error" and bool(record.get("shadow")) == shadow
               and "bad-\\xff.yaml" in record.get("file", "") for record in _records(daemon))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_undecodable_file_name_is_logged_counted_and_shown(make_daemon: DaemonFactory, workers: str) -> None:
    daemon = make_daemon(args=["--workers", workers, "--log-format", "json"])
    before = daemon.metric(RELOADS, {"status": "failure"})
    (daemon.manifests / UNDECODABLE_NAME).write_text("kind: [\n")
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before, timeout=15), daemon.log()[-3000:]
    assert wait_for(lambda: _logged_with_name(daemon, shadow=False)), daemon.log()[-3000:]
    assert wait_for(lambda: "manifest directory on disk is invalid" in daemon.get("/readyz?verbose").body.decode())
    verbose = daemon.get("/readyz?verbose").body.decode()
    assert "[+]background-tasks ok" in verbose, verbose
    assert "pods labelled deny=true" in (denied_message(daemon) or "")
    # The source survived the failure: the fix is picked up from its file events.
    (daemon.manifests / UNDECODABLE_NAME).unlink()
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("after the bad name"))
    assert wait_for(lambda: "after the bad name" in (denied_message(daemon) or ""), timeout=15), daemon.log()[-3000:]
    assert not [r for r in _records(daemon) if "background task" in r.get("msg", "")]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_undecodable_file_name_in_the_shadow_directory_is_logged_counted_and_shown(
        make_daemon: DaemonFactory, tmp_path: Path, workers: str) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "policy.yaml").write_text(policy_yaml("shadow rule"))
    daemon = make_daemon(args=["--workers", workers, "--log-format", "json", "--shadow-manifests", str(shadow)])
    assert wait_for(lambda: daemon.metric(SHADOW_RELOADS, {"status": "success"}) >= 1, timeout=15)
    (shadow / UNDECODABLE_NAME).write_text("kind: [\n")
    assert wait_for(lambda: daemon.metric(SHADOW_RELOADS, {"status": "failure"}) >= 1, timeout=15), \
        daemon.log()[-3000:]
    assert wait_for(lambda: _logged_with_name(daemon, shadow=True)), daemon.log()[-3000:]
    assert wait_for(lambda: "shadow manifest directory on disk is invalid"
                    in daemon.get("/readyz?verbose").body.decode()), daemon.get("/readyz?verbose").body.decode()
    assert daemon.get("/readyz").status == 200
    assert "[+]background-tasks ok" in daemon.get("/readyz?verbose").body.decode()
    (shadow / UNDECODABLE_NAME).unlink()
    assert wait_for(lambda: "shadow manifest directory" not in daemon.get("/readyz?verbose").body.decode(),
                    timeout=15), daemon.log()[-3000:]


def test_a_file_the_loader_never_reads_holds_no_reload_back(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--log-format", "json"])
    stop = threading.Event()

    def scribble() -> None:
        index = 0
        while not stop.is_set():
            (daemon.manifests / "notes.txt").write_text(f"edit {index}\n")
            index += 1
            time.sleep(0.02)

    thread = threading.Thread(target=scribble)
    thread.start()
    try:
        time.sleep(0.5)
        write_atomically(daemon.manifests / "deny.yaml", policy_yaml("served while notes.txt changes"))
        assert wait_for(lambda: "served while notes.txt changes" in (denied_message(daemon) or ""), timeout=10), \
            daemon.log()[-3000:]
    finally:
        stop.set()
        thread.join()
    assert daemon.metric(RELOADS, {"status": "failure"}) == 0, daemon.log()[-3000:]
    assert "kept changing" not in daemon.log() and "kept being written" not in daemon.log()
