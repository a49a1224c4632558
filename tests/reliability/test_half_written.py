"""A manifest file rewritten in place is never served half written.

A file holding a policy and its binding, rewritten in place (truncate, then write) in two pieces: the
first piece alone is a valid directory (the policy without its binding, which enforces nothing). At
205dae0 that state was served for a window of hundreds of milliseconds, and requests the policy denies
were admitted. A reload is now taken only from a directory that did not change while it was read.
"""

from __future__ import annotations

import threading
import time

from tests.server.harness import DaemonFactory, policy_yaml, review, wait_for


def test_an_in_place_rewrite_is_not_served_half_written(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(policy=None)
    target = daemon.manifests / "deny.static.k8s.io.yaml"
    full = policy_yaml("v1 denied", name="deny")
    target.write_text(full)
    assert wait_for(lambda: daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False)
    admitted: list[int] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            answer = daemon.validate(review({"deny": "true"})).json()["response"]
            if answer["allowed"]:
                admitted.append(1)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        for round_number in range(10):
            text = policy_yaml(f"v{round_number + 2} denied", name="deny")
            first, sep, rest = text.partition("---\n")
            with target.open("w") as file:  # truncates: in place, not atomic
                file.write(first + sep)
                file.flush()
                time.sleep(0.07)  # longer than the 50 ms quiet period the daemon waits for
                file.write(rest)
            time.sleep(0.3)
    finally:
        stop.set()
        prober.join()
    assert not admitted, f"{len(admitted)} requests admitted while the file was half written"
    assert "v11 denied" in daemon.validate(review({"deny": "true"})).json()["response"]["status"]["message"]


def test_a_writer_that_pauses_holding_the_file_open_is_waited_for(make_daemon: DaemonFactory) -> None:
    # Reloads have no fixed delay any more; what protects an in-place rewrite is knowing, from the file's
    # events, that it is open for writing until it is closed. A quiet period (50 ms) did not cover a writer
    # pausing longer: the policy alone, without its binding, was served and denied requests were admitted.
    daemon = make_daemon(policy=None)
    target = daemon.manifests / "deny.static.k8s.io.yaml"
    target.write_text(policy_yaml("v1 denied", name="deny"))
    assert wait_for(lambda: daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False)
    text = policy_yaml("v2 denied", name="deny")
    first, sep, rest = text.partition("---\n")
    answers: list[bool] = []
    with target.open("w") as file:  # truncates: in place, not atomic
        file.write(first + sep)
        file.flush()
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            answers.append(daemon.validate(review({"deny": "true"})).json()["response"]["allowed"])
        file.write(rest)
    assert wait_for(lambda: "v2 denied" in str(daemon.validate(review({"deny": "true"})).json()["response"]))
    assert answers and not any(answers), f"{sum(answers)} of {len(answers)} requests admitted mid-write"


def test_a_binding_removed_while_its_policy_stays_is_reported(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(policy=None)
    target = daemon.manifests / "deny.static.k8s.io.yaml"
    full = policy_yaml("denied", name="deny")
    target.write_text(full)
    assert wait_for(lambda: daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False)
    staging = daemon.workdir / "staging.yaml"
    staging.write_text(full.partition("---\n")[0])
    staging.replace(target)
    deadline = time.monotonic() + 10
    while "a binding was removed while its policy stays" not in daemon.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "a binding was removed while its policy stays" in daemon.log()
    assert "deny.static.k8s.io" in daemon.log()
