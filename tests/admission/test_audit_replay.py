"""Replaying an audit log of any size: each result names its object, lines that are no audit event are counted and
skipped by number, a line longer than any event kube-apiserver writes is refused unread, and results come out as
the log is read."""

from __future__ import annotations

import gzip
import json
import select
import subprocess
import sys
from pathlib import Path

from tests.admission.test_audit_log import EXAMPLES, event, pod, pod_ref, recorded_log, run, write_log
from tests.server.harness import REPO_ROOT

#: A wrapper that runs a command and prints the largest resident set of its children in KiB (Linux ru_maxrss):
#: the command's own peak, whatever ran before it in the test process.
PEAK_RSS = ("import resource, subprocess, sys\n"
            "code = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
            "stderr=open(sys.argv[0] + '.err', 'w')).returncode\n"
            "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def _uids(out: str) -> list[str]:
    return [json.loads(line)["request"]["uid"] for line in out.splitlines()]


def test_each_result_names_the_object_the_request_writes(tmp_path: Path) -> None:
    log = write_log(tmp_path / "audit.log", recorded_log())
    code, out, _ = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(log))
    assert code == 3
    headers = [line for line in out.splitlines() if not line.startswith(" ")]
    assert headers == [f"{log} line 2: CREATE pods shop/debug (request a1)",
                       f"{log} line 5: UPDATE deployments.apps shop/api (request a4)",
                       f"{log} line 7: CREATE pods shop/applied (request a6)",
                       f"{log} line 8: DELETE pods shop/web (request a7)"]


def test_lines_that_are_no_audit_event_are_counted_and_skipped_by_number(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [json.dumps(value) for value in recorded_log()]
    lines.insert(2, "garbage written by a full disk")
    half_written = json.dumps(event("b1", "create", pod_ref("late"), request_object=pod("late")))[:120]
    log.write_text("\n".join(lines) + "\n" + half_written)
    code, out, err = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(log), "-o", "json")
    assert code == 3, err
    assert _uids(out) == ["a1", "a4", "a6", "a7"]
    assert f"{log}: 10 event(s), 4 request(s) evaluated" in err
    assert "; 2 malformed line(s) skipped (line 3: not JSON (" in err and "; line 12: not JSON (" in err


def test_a_line_longer_than_any_event_is_refused_by_number_and_the_next_is_read(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    oversized = json.dumps(event("big", "create", pod_ref("big"), request_object=pod("big"),
                                 padding="x" * (7 * 1024 * 1024)))
    log.write_text(oversized + "\n" + json.dumps(recorded_log()[1]) + "\n")
    code, out, err = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(log), "-o", "json")
    assert code == 3 and _uids(out) == ["a1"]
    assert ("1 malformed line(s) skipped (line 1: longer than 6 MiB, more than any event kube-apiserver writes "
            "(its request limit is 3 MiB a body); skipped unread)") in err


def test_a_400_mib_line_in_a_small_gzip_is_refused_without_being_held(tmp_path: Path) -> None:
    log = tmp_path / "audit.log.gz"
    chunk = b"a" * (1024 * 1024)
    with gzip.open(log, "wb", compresslevel=1) as handle:
        handle.write(b'{"kind":"Event","apiVersion":"audit.k8s.io/v1","padding":"')
        for _ in range(400):
            handle.write(chunk)
        handle.write(b'"}\n' + json.dumps(recorded_log()[1]).encode() + b"\n")
    assert log.stat().st_size < 4 * 1024 * 1024
    wrapper = tmp_path / "peak.py"
    wrapper.write_text(PEAK_RSS)
    completed = subprocess.run([sys.executable, str(wrapper), sys.executable, "-m", "staticadm", "review",
                                "--manifests", str(EXAMPLES), "--audit-log", str(log)],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    code, peak_kib = map(int, completed.stdout.split())
    err = Path(str(wrapper) + ".err").read_text()
    assert code == 3, err  # the event after it was read and denied
    assert "line 1: longer than 6 MiB" in err
    assert peak_kib < 150 * 1024, f"peak RSS {peak_kib // 1024} MiB"


def test_results_come_out_while_the_log_is_still_being_written() -> None:
    process = subprocess.Popen([sys.executable, "-m", "staticadm", "review", "--manifests", str(EXAMPLES),
                                "--audit-log", "-", "-o", "json"], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        for value in recorded_log()[:2]:  # a1, received and then completed
            process.stdin.write(json.dumps(value).encode() + b"\n")
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], 60)
        assert ready, "no result while the log stays open"
        assert json.loads(process.stdout.readline())["request"]["uid"] == "a1"
        process.stdin.write(json.dumps(recorded_log()[4]).encode() + b"\n")  # a4
        process.stdin.close()
        assert [json.loads(line)["request"]["uid"] for line in process.stdout] == ["a4"]
        assert process.wait(timeout=60) == 3
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
