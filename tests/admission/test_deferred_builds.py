"""Programs a request finds missing are built off the request path on a thread that defers, and the request is
decided exactly meanwhile, as it is where programs are built in place (``admission/generic/deferred.py``)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from staticadm.admission.generic import deferred
from staticadm.admission.namespaces import parse_namespaces
from staticadm.admission.validating.dispatcher import ValidationOutcome, evaluate_validating
from staticadm.snapshot import Snapshot
from tests.admission.helpers import DEPLOYMENT, binding, parsed, policy, review, snapshot

NAMESPACES = parse_namespaces("""
apiVersion: v1
kind: Namespace
metadata: {name: default, labels: {env: prod}}
""")

POLICIES = (
    policy("a.static.k8s.io", validations=[{"expression": "object.spec.replicas <= 5"},
                                           {"expression": "object.metadata.name.startsWith('w')"},
                                           {"expression": "object.metadata.labels.all(k, k != 'forbidden')"}],
           auditAnnotations=[{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}]),
    binding("a.static.k8s.io", "a.static.k8s.io", ("Deny",)),
    policy("b.static.k8s.io", matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels)"}],
           validations=[{"expression": "object.spec.replicas < 1000"},
                        {"expression": "size(object.metadata.name) < 9"}]),
    binding("b.static.k8s.io", "b.static.k8s.io", ("Warn",)),
)


class HeldBuilds(Executor):
    """An executor that runs what it was given when the test says so."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Future[Any], Callable[[], Any]]] = []
        self.closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[Any] = Future()
        self.waiting.append((future, lambda: fn(*args, **kwargs)))
        return future

    def run_all(self) -> None:
        waiting, self.waiting = self.waiting, []
        for future, build in waiting:
            future.set_result(build())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.closed = True


@pytest.fixture
def builds() -> Iterator[HeldBuilds]:
    executor = HeldBuilds()
    deferred.defer_on_this_thread(executor)
    try:
        yield executor
    finally:
        deferred.defer_on_this_thread(None)
        # Nothing a test left pending may stay pending for the next one.
        executor.run_all()


def _request(replicas: int) -> Any:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["replicas"] = replicas
    return parsed(review(obj=obj))


def _comparable(outcome: ValidationOutcome) -> Any:
    return (outcome.response, outcome.allowed, outcome.status, outcome.warnings, dict(outcome.annotations),
            [(r.policy, r.binding, r.action, r.error_type, r.message, r.reason, r.expression_index, r.site)
             for r in outcome.decisions],
            outcome.matched, [(n.policy, n.binding, n.reason) for n in outcome.not_matched])


def _decided_on_another_thread(snap: Snapshot, replicas: int) -> ValidationOutcome:
    outcomes: list[ValidationOutcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(evaluate_validating(snap, NAMESPACES,
                                                                                 _request(replicas))))
    thread.start()
    thread.join()
    return outcomes[0]


def _built_here(tmp_path: Path, replicas: int) -> Any:
    """What a thread that builds in place (not this test's, which defers) decides, on a snapshot of its own."""
    (tmp_path / "in-place").mkdir(exist_ok=True)
    return _comparable(_decided_on_another_thread(snapshot(tmp_path / "in-place", *POLICIES), replicas))


def _set_programs(snap: Snapshot) -> dict[tuple[int, ...], Any]:
    return snap.validating[0].sets.built


@pytest.mark.parametrize("replicas", [3, 7, 2000])
def test_a_request_is_decided_exactly_while_its_programs_are_built_off_its_path(
        tmp_path: Path, builds: HeldBuilds, replicas: int) -> None:
    snap = snapshot(tmp_path, *POLICIES)
    first = evaluate_validating(snap, NAMESPACES, _request(replicas))
    assert _comparable(first) == _built_here(tmp_path, replicas)
    assert _set_programs(snap) == {}, "the set's program is not built on the request path"
    handed_over = len(builds.waiting)
    assert handed_over >= 1
    # Requests before the build ends are decided the same way, and hand over nothing more.
    again = evaluate_validating(snap, NAMESPACES, _request(replicas))
    assert _comparable(again) == _comparable(first) and len(builds.waiting) == handed_over
    builds.run_all()
    (entry,) = _set_programs(snap).values()
    assert entry.program is not None
    built = evaluate_validating(snap, NAMESPACES, _request(replicas))
    assert _comparable(built) == _comparable(first)
    # All clear for both policies (3 replicas): the program answered. Otherwise the bindings were evaluated one by
    # one, and the validations that read no variables ran together first, their program built off the path too.
    assert (entry.answered, entry.misses) == ((1, 0) if replicas == 3 else (0, 1))
    if replicas != 3:
        assert all(compiled.together.built for compiled in snap.validating)
    assert builds.waiting == []


def test_a_thread_that_does_not_defer_builds_in_place(tmp_path: Path, builds: HeldBuilds) -> None:
    snap = snapshot(tmp_path, *POLICIES)
    assert _comparable(_decided_on_another_thread(snap, 7)) == _built_here(tmp_path, 7)
    assert len(_set_programs(snap)) == 1 and builds.waiting == []


def test_builds_run_on_the_builder_thread(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, *POLICIES)
    builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-build")
    deferred.defer_on_this_thread(builder)
    try:
        evaluate_validating(snap, NAMESPACES, _request(3))
        builder.shutdown(wait=True)
    finally:
        deferred.defer_on_this_thread(None)
    (entry,) = _set_programs(snap).values()
    evaluate_validating(snap, NAMESPACES, _request(3))
    assert entry.answered == 1


def test_a_build_that_raises_is_reported_once_and_its_requests_stay_exact() -> None:
    builds = HeldBuilds()
    reported: list[tuple[Callable[[], object], Exception]] = []
    deferred.defer_on_this_thread(builds, lambda build, error: reported.append((build, error)))
    key = ("test", object())

    def broken() -> None:
        raise ValueError("a bug in a build")

    failed = deferred.COUNTS.failed
    try:
        assert deferred.build_later(key, broken)
        builds.run_all()
    finally:
        deferred.defer_on_this_thread(None)
    assert [(build, str(error)) for build, error in reported] == [(broken, "a bug in a build")]
    assert deferred.COUNTS.failed == failed + 1
    deferred.defer_on_this_thread(builds)
    try:
        # Still pending: asked again, nothing more is handed over, and the caller goes on without the program.
        assert deferred.build_later(key, broken) and builds.waiting == []
    finally:
        deferred.defer_on_this_thread(None)


def test_a_stopped_builder_leaves_the_build_to_the_caller(builds: HeldBuilds) -> None:
    builds.shutdown()
    assert not deferred.build_later(("test", object()), lambda: None)
