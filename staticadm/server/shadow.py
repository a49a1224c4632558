"""Shadow rollout: every request evaluated again against a second directory, without affecting the answer.

The live answer is sent first; the shadow evaluation runs after it on the same event loop (so it costs
CPU, not latency of the request it shadows), and at most MAX_PENDING at once: under a load the daemon
cannot shadow in full, requests are skipped and counted rather than queued without bound. Differences
are logged with the policies that caused them and counted by kind.

The shadow directory loads beside the live one (in a worker: from the supervisor, after the live one), and
may take longer: a request answered before its first load has an outcome waits for it (within the shadow's
deadline) rather than being skipped, so that every request from readiness on is shadowed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from staticadm.admission.comparison import compare_reviews
from staticadm.admission.endpoints import Evaluator, Review
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.request import AdmissionRequest
from staticadm.cluster.authorizer import SubjectAccessReviewer
from staticadm.server.logging import request_fields
from staticadm.server.metrics import Metrics
from staticadm.source import ManifestSource

MAX_PENDING = 64
#: A backstop only: the engine's cost limits bound an evaluation long before this.
SHADOW_DEADLINE_SECONDS = 10.0
#: How long a request answered before the shadow directory's first load waits for it (a large directory on a
#: busy node, loaded by the supervisor and then by each worker, takes seconds); at most MAX_PENDING wait.
FIRST_LOAD_WAIT_SECONDS = 60.0


class ShadowEvaluator:
    def __init__(self, source: ManifestSource, metrics: Metrics, logger: Any) -> None:
        self.source = source
        self._metrics = metrics
        self._log = logger
        self._pending: set[asyncio.Task[None]] = set()
        #: Set once the shadow directory's first load has an outcome, good or bad (in a worker: the supervisor's
        #: first shadow snapshot applied, or its word that the directory is invalid).
        self._first_load_over = asyncio.Event()

    def first_load_over(self) -> None:
        """The shadow directory's first load has an outcome: from now on no configuration means none to wait for."""
        self._first_load_over.set()

    def schedule(self, endpoint: str, evaluate: Evaluator, namespaces: NamespaceSource, request: AdmissionRequest,
                 live: Review, authorizer: SubjectAccessReviewer | None) -> None:
        if self.source.current is None and self._first_load_over.is_set():
            self._metrics.shadow_skipped.labels("no_configuration").inc()
            return
        if len(self._pending) >= MAX_PENDING:
            self._metrics.shadow_skipped.labels("busy").inc()
            return
        task = asyncio.get_running_loop().create_task(
            self._evaluate(endpoint, evaluate, namespaces, request, live, authorizer))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _evaluate(self, endpoint: str, evaluate: Evaluator, namespaces: NamespaceSource,
                        request: AdmissionRequest, live: Review, authorizer: SubjectAccessReviewer | None) -> None:
        # After the live answer has been written: this request's latency is not the shadow's.
        await asyncio.sleep(0)
        if self.source.current is None:
            try:
                async with asyncio.timeout(FIRST_LOAD_WAIT_SECONDS):
                    await self._first_load_over.wait()
            except TimeoutError:
                pass
        served = self.source.current
        if served is None:
            self._metrics.shadow_skipped.labels("no_configuration").inc()
            return
        snapshot, content_hash = served.snapshot, served.content_hash
        deadline = time.perf_counter() + SHADOW_DEADLINE_SECONDS

        def run() -> Review:
            return evaluate(snapshot, namespaces, request, deadline=deadline)

        async def round_() -> Review:
            return run()

        try:
            shadow = run() if authorizer is None else await authorizer.evaluate(
                request.user_info, round_, asyncio.get_running_loop().time() + SHADOW_DEADLINE_SECONDS)
        except Exception as error:  # the shadow never affects the live daemon, not even by a bug
            self._metrics.shadow_skipped.labels("error").inc()
            self._log.error("shadow evaluation failed", endpoint=endpoint, uid=request.uid, err=type(error).__name__)
            return
        self._metrics.shadow_evaluations.labels(endpoint).inc()
        for difference in compare_reviews(live, shadow):
            self._metrics.shadow_differences.labels(endpoint, difference.kind).inc()
            self._log.info("shadow difference", **request_fields(endpoint, request), difference=difference.kind,
                           live_policies=list(difference.live_policies),
                           shadow_policies=list(difference.new_policies), detail=difference.detail,
                           shadow_hash=content_hash)
