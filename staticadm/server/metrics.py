"""Prometheus metrics in a private registry.

A private :class:`CollectorRegistry` (not the process-global default) keeps tests and embedders from
seeing each other's series and keeps the exposition to what we define. Names mirror kube-apiserver's
so that dashboards written for in-process static admission carry over with the prefix swapped.

With ``serve --workers N`` every process writes its series into ``$PROMETHEUS_MULTIPROC_DIR``
(prometheus_client's multiprocess mode, chosen when that variable is set before the library is
imported) and the exposition is the sum over the supervisor and every worker, live or dead.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

MULTIPROCESS_DIRECTORY = "PROMETHEUS_MULTIPROC_DIR"
#: How often a worker refreshes gauges whose value is read from elsewhere (dropped log lines).
REFRESH_INTERVAL = 5.0

PREFIX = "staticadm"

# Evaluation of a compiled policy takes microseconds to a few milliseconds; the default Prometheus
# buckets start at 5 ms and would put almost every request in the first bucket.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Every series the daemon exports; one instance per process (or per test)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_DIRECTORY))
        self._dropped: Callable[[], float] | None = None
        self._request_children: dict[tuple[str, int, str], tuple[Any, Any]] = {}
        self._check_children: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}
        self._mutation_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self.requests = Counter(
            f"{PREFIX}_admission_requests_total",
            "AdmissionReview HTTP requests by endpoint, HTTP status code and admission decision.",
            ("endpoint", "code", "decision"), registry=self.registry)
        self.request_duration = Histogram(
            f"{PREFIX}_admission_request_duration_seconds",
            "Time from receiving an AdmissionReview request to writing its answer.",
            ("endpoint",), buckets=LATENCY_BUCKETS, registry=self.registry)
        policy_labels = ("policy", "policy_binding", "error_type", "enforcement_action")
        self.policy_checks = Counter(
            f"{PREFIX}_validating_admission_policy_check_total",
            "Validation admission policy check total, labeled by policy and binding; mirrors "
            "apiserver_validating_admission_policy_check_total.",
            policy_labels, registry=self.registry)
        self.policy_check_duration = Histogram(
            f"{PREFIX}_validating_admission_policy_check_duration_seconds",
            "Validation admission latency for individual validation expressions in seconds, labeled by policy "
            "and binding; mirrors apiserver_validating_admission_policy_check_duration_seconds.",
            policy_labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        mutation_labels = ("policy", "policy_binding", "error_type")
        self.mutation_checks = Counter(
            f"{PREFIX}_mutating_admission_policy_check_total",
            "Mutation admission policy check total, labeled by policy and further identified by binding; "
            "mirrors apiserver_mutating_admission_policy_check_total.",
            mutation_labels, registry=self.registry)
        self.mutation_check_duration = Histogram(
            f"{PREFIX}_mutating_admission_policy_check_duration_seconds",
            "Mutation admission latency for individual mutation expressions in seconds, labeled by policy and "
            "binding; mirrors apiserver_mutating_admission_policy_check_duration_seconds.",
            mutation_labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self._log_drops = Gauge(
            f"{PREFIX}_log_lines_dropped",
            "Log lines dropped since start because the log reader (journald, the container runtime) did not "
            "keep up; logging never blocks admission.", registry=self.registry, multiprocess_mode="sum")
        self.connection_events = Counter(
            f"{PREFIX}_connections_closed_total",
            "Connections closed by the daemon: timeout (headers or idle past their limit), shed (idle, to make "
            "room under the connection cap), rejected (over the cap with every connection busy).",
            ("reason",), registry=self.registry)
        self.background_task_failures = Counter(
            f"{PREFIX}_background_task_failures_total",
            "Background tasks (reload, watchdog, certificate reload, connection sweeper) that failed and were "
            "restarted.", ("task",), registry=self.registry)
        self.evaluation_timeouts = Counter(
            f"{PREFIX}_admission_evaluation_timeouts_total",
            "AdmissionReview requests answered with a timeout because their deadline passed before they "
            "could be evaluated.",
            ("endpoint",), registry=self.registry)
        reload_prefix = f"{PREFIX}_manifest_admission_config_controller"
        self.reloads = Counter(
            f"{reload_prefix}_automatic_reloads_total",
            "Total number of manifest directory reload attempts that ended with the given status.",
            ("status",), registry=self.registry)
        self.reload_timestamp = Gauge(
            f"{reload_prefix}_automatic_reload_last_timestamp_seconds",
            "Unix time of the last manifest directory reload with the given status.",
            ("status",), registry=self.registry, multiprocess_mode="max")
        self.config_info = Gauge(
            f"{reload_prefix}_last_config_info",
            "The content hash of the manifest directory currently served: 1 (with --workers, hashes served "
            "earlier stay listed at 0).",
            ("hash",), registry=self.registry, multiprocess_mode="max")
        self.worker_config_info = Gauge(
            f"{PREFIX}_worker_config_info",
            "With --workers: the content hash each worker serves (1), by worker process id.",
            ("hash",), registry=self.registry, multiprocess_mode="liveall")
        self._worker_hash: str | None = None
        self.worker_restarts = Counter(
            f"{PREFIX}_worker_restarts_total",
            "With --workers: workers that died (a native crash included) and were replaced.",
            registry=self.registry)
        self.worker_recycles = Counter(
            f"{PREFIX}_worker_recycles_total",
            "With --workers: workers replaced because they grew past --worker-memory-growth.",
            registry=self.registry)
        self._config_hash: str | None = None
        self.cluster_api_requests = Counter(
            f"{PREFIX}_cluster_api_requests_total",
            "Calls to kube-apiserver for the cluster view (--kubeconfig) by operation (list, watch, get, sar) "
            "and result (ok, error).",
            ("operation", "result"), registry=self.registry)
        self.cluster_api_duration = Histogram(
            f"{PREFIX}_cluster_api_request_duration_seconds",
            "Duration of calls to kube-apiserver for the cluster view (a watch: how long it streamed).",
            ("operation",), buckets=(*LATENCY_BUCKETS, 30.0, 60.0, 300.0, 600.0), registry=self.registry)
        self.cluster_watch_restarts = Counter(
            f"{PREFIX}_cluster_watch_restarts_total",
            "Relists of the cluster view after a watch ended abnormally: expired (410 Gone) or error.",
            ("resource", "reason"), registry=self.registry)
        self.cluster_cache_synced = Gauge(
            f"{PREFIX}_cluster_cache_synced",
            "1 once the cluster view's cache of the resource has listed (with workers: the least of them).",
            ("resource",), registry=self.registry, multiprocess_mode="livemin")
        self.cluster_cache_objects = Gauge(
            f"{PREFIX}_cluster_cache_objects",
            "Objects in the cluster view's cache of the resource.",
            ("resource",), registry=self.registry, multiprocess_mode="livemax")
        self.shadow_evaluations = Counter(
            f"{PREFIX}_shadow_evaluations_total",
            "Requests evaluated again against --shadow-manifests, by endpoint.",
            ("endpoint",), registry=self.registry)
        self.shadow_differences = Counter(
            f"{PREFIX}_shadow_differences_total",
            "Shadow answers that differ from the live one, by endpoint and difference (allowed_to_denied, "
            "denied_to_allowed, patch, warnings).",
            ("endpoint", "difference"), registry=self.registry)
        self.shadow_skipped = Counter(
            f"{PREFIX}_shadow_skipped_total",
            "Requests not shadowed, by reason (busy: too many shadow evaluations pending; no_configuration: "
            "the shadow directory has not loaded; error).",
            ("reason",), registry=self.registry)
        self.shadow_reloads = Counter(
            f"{PREFIX}_shadow_reloads_total",
            "Reload attempts of the --shadow-manifests directory by status.",
            ("status",), registry=self.registry)
        self.shadow_config_info = Gauge(
            f"{PREFIX}_shadow_config_info",
            "The content hash of the shadow directory being evaluated: 1 (earlier hashes 0).",
            ("hash",), registry=self.registry, multiprocess_mode="max")
        self._shadow_hash: str | None = None
        self.tls_handshake_failures = Counter(
            f"{PREFIX}_tls_handshake_failures_total",
            "TLS handshakes the HTTPS listener refused, by OpenSSL's reason (PEER_DID_NOT_RETURN_A_CERTIFICATE: "
            "no client certificate; CERTIFICATE_VERIFY_FAILED: not signed by client-ca).",
            ("reason",), registry=self.registry)
        self.missing_cluster_view = Gauge(
            f"{PREFIX}_policies_missing_cluster_view",
            "Policies served that read namespaceObject or call authorizer (reads) while this daemon has no "
            "cluster view for it (serve --kubeconfig): their expressions fail and their failurePolicy decides.",
            ("reads",), registry=self.registry, multiprocess_mode="livemax")
        self.authorizer_cache_lookups = Counter(
            f"{PREFIX}_cluster_authorizer_cache_total",
            "authorizer checks looked up in the SubjectAccessReview decision cache, by result (hit, miss).",
            ("result",), registry=self.registry)
        # Pre-create the status series so a scrape shows 0 rather than nothing before the first failure.
        for status in ("success", "failure"):
            self.reloads.labels(status=status)

    def watch_log_drops(self, dropped: Callable[[], float]) -> None:
        """Exports the log writer's dropped-line count (read at scrape time; with workers, refreshed by
        :meth:`refresh_loop`, because a scrape reads the other processes' files, not their memory)."""
        self._dropped = dropped
        if not self.multiprocess:
            self._log_drops.set_function(dropped)

    async def refresh_loop(self) -> None:
        while True:
            if self._dropped is not None:
                self._log_drops.set(self._dropped())
            await asyncio.sleep(REFRESH_INTERVAL)

    def set_worker_hash(self, content_hash: str) -> None:
        if self._worker_hash is not None and self._worker_hash != content_hash:
            self.worker_config_info.labels(hash=self._worker_hash).set(0)
        self._worker_hash = content_hash
        self.worker_config_info.labels(hash=content_hash).set(1)

    def record_reload(self, status: str, timestamp: float, content_hash: str | None = None) -> None:
        self.reloads.labels(status=status).inc()
        self.reload_timestamp.labels(status=status).set(timestamp)
        if content_hash is not None:
            self.set_config_hash(content_hash)

    def set_config_hash(self, content_hash: str) -> None:
        # Exactly one series at a time: an old hash left at 1 would look like drift between replicas.
        if self._config_hash is not None and self._config_hash != content_hash:
            if self.multiprocess:
                # A series written to the shared files cannot be removed, only set.
                self.config_info.labels(hash=self._config_hash).set(0)
            else:
                self.config_info.remove(self._config_hash)
        self._config_hash = content_hash
        self.config_info.labels(hash=content_hash).set(1)

    def record_shadow_reload(self, status: str, content_hash: str | None) -> None:
        self.shadow_reloads.labels(status=status).inc()
        if content_hash is None:
            return
        if self._shadow_hash is not None and self._shadow_hash != content_hash:
            self.shadow_config_info.labels(hash=self._shadow_hash).set(0)
        self._shadow_hash = content_hash
        self.shadow_config_info.labels(hash=content_hash).set(1)

    def record_request(self, endpoint: str, code: int, decision: str, seconds: float | None) -> None:
        key = (endpoint, code, decision)
        children = self._request_children.get(key)
        if children is None:
            children = (self.requests.labels(endpoint, str(code), decision), self.request_duration.labels(endpoint))
            self._request_children[key] = children
        children[0].inc()
        if seconds is not None:
            children[1].observe(seconds)

    def record_policy_check(self, policy: str, binding: str, error_type: str, action: str, seconds: float) -> None:
        key = (policy, binding, error_type, action)
        children = self._check_children.get(key)
        if children is None:
            # Looking up a labelled child costs more than updating it; a request records one per check.
            children = (self.policy_checks.labels(*key), self.policy_check_duration.labels(*key))
            self._check_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def record_mutation_check(self, policy: str, binding: str, error_type: str, seconds: float) -> None:
        key = (policy, binding, error_type)
        children = self._mutation_children.get(key)
        if children is None:
            children = (self.mutation_checks.labels(*key), self.mutation_check_duration.labels(*key))
            self._mutation_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    # -- the cluster view's observer (staticadm.cluster.namespaces.ClusterObserver) ------------------------

    def api_call(self, operation: str, seconds: float, error: bool) -> None:
        self.cluster_api_requests.labels(operation, "error" if error else "ok").inc()
        self.cluster_api_duration.labels(operation).observe(seconds)

    def watch_restart(self, resource: str, reason: str) -> None:
        self.cluster_watch_restarts.labels(resource, reason).inc()

    def cache_state(self, resource: str, synced: bool, objects: int) -> None:
        self.cluster_cache_synced.labels(resource).set(1 if synced else 0)
        self.cluster_cache_objects.labels(resource).set(objects)

    def authorizer_cache(self, hit: bool) -> None:
        self.authorizer_cache_lookups.labels("hit" if hit else "miss").inc()

    def exposition(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        if self._dropped is not None:
            self._log_drops.set(self._dropped())
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
