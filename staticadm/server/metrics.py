"""Prometheus metrics in a private registry.

A private :class:`CollectorRegistry` (not the process-global default) keeps tests and embedders from
seeing each other's series and keeps the exposition to what we define. Names mirror kube-apiserver's
so that dashboards written for in-process static admission carry over with the prefix swapped.

With ``serve --workers N`` every process keeps its series in memory, where updating one costs what it
costs a single process. A scrape, whichever worker it reaches, is answered by the supervisor from the
reports of every process (:class:`ProcessSum`): counters and histograms are summed over the supervisor,
every worker and every worker that has gone (whose last report is kept, folded into one total so that
replaced workers cost no memory), and each gauge is combined as its :data:`GaugeMode` says. Nothing is
written to a file: no file system, full or read-only, can fail a request or a worker.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Metric, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.utils import floatToGoString

from staticadm.admission.comparison import DifferenceKind
from staticadm.admission.generic.deferred import COUNTS
from staticadm.admission.validating.all_clear import LOOKUPS
from staticadm.admission.vocabulary import RequestDecision

PREFIX = "staticadm"

# Evaluation of a compiled policy takes microseconds to a few milliseconds; the default Prometheus
# buckets start at 5 ms and would put almost every request in the first bucket.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: What :class:`prometheus_client.ProcessCollector` exports (counters by their name without ``_total``).
PROCESS_FAMILIES = ("process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
                    "process_cpu_seconds", "process_open_fds", "process_max_fds")
#: The ``reason`` label of ``staticadm_connections_closed_total``.
CONNECTION_CLOSE_REASONS = ("timeout", "shed", "rejected")
#: The ``decision`` label values an endpoint answers with 200 (errors carry their own code).
ENDPOINT_DECISIONS = {
    "validate": tuple(decision.value for decision in RequestDecision
                      if decision not in (RequestDecision.MUTATE, RequestDecision.ERROR)),
    "mutate": tuple(decision.value for decision in RequestDecision if decision is not RequestDecision.ERROR),
}
SHADOW_DIFFERENCES = tuple(kind.value for kind in DifferenceKind)
SHADOW_SKIP_REASONS = ("busy", "no_configuration", "error")
CLUSTER_OPERATIONS = ("list", "watch", "get", "sar")

#: How a gauge's values in several processes make the exported value (prometheus_client's multiprocess
#: names): ``sum``/``max`` over every process, gone ones included; ``livemin``/``livemax`` over the running
#: ones; ``liveall``: one series per running process, labelled with its ``pid``.
GaugeMode = Literal["sum", "max", "liveall", "livemin", "livemax"]

#: (sample name, labels in their declared order, value).
Sample = tuple[str, tuple[tuple[str, str], ...], float]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family's samples in one process (or summed over several), as a worker reports them."""

    name: str
    kind: str
    documentation: str
    #: A gauge's :data:`GaugeMode`; "sum" for counters and histograms.
    mode: str
    samples: tuple[Sample, ...]


#: Everything one process exports, in registration order.
ProcessMetrics = tuple[Family, ...]


def _combine(mode: str, old: float, new: float) -> float:
    if mode.endswith("max"):
        return max(old, new)
    if mode.endswith("min"):
        return min(old, new)
    return old + new


def combine(parts: Iterable[tuple[str | None, ProcessMetrics]]) -> ProcessMetrics:
    """The series of several processes as one: ``parts`` are (pid, metrics) of running processes, and
    (None, metrics) for what gone processes left (their live-only gauges are not part of it)."""
    families: dict[str, tuple[Family, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = {}
    for pid, metrics in parts:
        for family in metrics:
            values = families.setdefault(family.name, (family, {}))[1]
            live_only = family.mode.startswith("live")
            if live_only and pid is None:
                continue
            for name, labels, value in family.samples:
                if family.mode == "liveall":
                    labels = (*labels, ("pid", str(pid)))
                key = (name, labels)
                old = values.get(key)
                values[key] = value if old is None else _combine(family.mode, old, value)
    return tuple(Family(family.name, family.kind, family.documentation, family.mode,
                        tuple((name, labels, value) for (name, labels), value in values.items()))
                 for family, values in families.values())


class _Reported:
    """A collector exporting reported families as they are."""

    def __init__(self, metrics: ProcessMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for family in self._metrics:
            metric = Metric(family.name, family.documentation, family.kind)
            for name, labels, value in family.samples:
                metric.add_sample(name, dict(labels), value)
            yield metric


def render(metrics: ProcessMetrics) -> bytes:
    """The Prometheus text exposition of ``metrics``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Reported(metrics))
    return generate_latest(registry)


class ProcessSum:
    """The supervisor's record of what every worker counted: each running worker's latest report, and one
    total of the last reports of workers that have gone.

    Each report a scrape shows is kept before it is shown, so no exported counter ever goes down, even when
    a worker dies or does not answer in time (its latest report stands in for it). A worker that dies loses
    only what it counted after its latest report; one that is replaced or stopped reports last on its way
    out."""

    def __init__(self) -> None:
        self.running: dict[int, ProcessMetrics] = {}
        self.gone: ProcessMetrics = ()

    def report(self, pid: int, metrics: ProcessMetrics) -> None:
        self.running[pid] = metrics

    def departed(self, pid: int) -> None:
        metrics = self.running.pop(pid, None)
        if metrics is not None:
            self.gone = combine([(None, self.gone), (None, metrics)])

    def total(self, own_pid: int, own: ProcessMetrics) -> ProcessMetrics:
        return combine([(str(own_pid), own), *((str(pid), metrics) for pid, metrics in self.running.items()),
                        (None, self.gone)])


class CountedLatencies:
    """A counter and a latency histogram that the request path updates together (each request, each policy check),
    kept as plain numbers and exported by a collector of the registry.

    prometheus_client's labelled children take a lock and walk the buckets on every update, ~1.5 µs a pair: with
    one pair per request and one per policy check, that was more than the rest of the bookkeeping around a request
    at 100 policies. Only the event loop's thread updates these, so the numbers need no lock.
    """

    def __init__(self, registry: CollectorRegistry, counter: tuple[str, str, tuple[str, ...]],
                 histogram: tuple[str, str, tuple[str, ...]], buckets: tuple[float, ...]) -> None:
        self._counter_name, self._counter_help, self._counter_labels = counter
        self._histogram_name, self._histogram_help, self._histogram_labels = histogram
        self._bounds = buckets
        #: Counter label values -> [count].
        self._counts: dict[tuple[str, ...], list[int]] = {}
        #: Histogram label values -> observations per bucket (the last one past every bound), then sum and count.
        self._latencies: dict[tuple[str, ...], list[float]] = {}
        registry.register(self)

    def count(self, labels: tuple[str, ...]) -> None:
        """Creates the counter's series at 0 (an alert on its rate works before the first event)."""
        self._counts.setdefault(labels, [0])

    def latency(self, labels: tuple[str, ...]) -> None:
        """Creates the histogram's series at 0."""
        self._latencies.setdefault(labels, [0.0] * (len(self._bounds) + 3))

    def record(self, labels: tuple[str, ...], latency_labels: tuple[str, ...], seconds: float | None) -> None:
        counts = self._counts.get(labels)
        if counts is None:
            counts = self._counts[labels] = [0]
        counts[0] += 1
        if seconds is None:
            return
        latencies = self._latencies.get(latency_labels)
        if latencies is None:
            latencies = self._latencies[latency_labels] = [0.0] * (len(self._bounds) + 3)
        # Prometheus buckets count observations less than or equal to their bound.
        latencies[bisect.bisect_left(self._bounds, seconds)] += 1
        latencies[-2] += seconds
        latencies[-1] += 1

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._counter_name, self._counter_help, labels=self._counter_labels)
        yield HistogramMetricFamily(self._histogram_name, self._histogram_help, labels=self._histogram_labels)

    def collect(self) -> Iterator[Metric]:
        counter = CounterMetricFamily(self._counter_name, self._counter_help, labels=self._counter_labels)
        for labels, counts in list(self._counts.items()):
            counter.add_metric([str(value) for value in labels], counts[0])
        yield counter
        histogram = HistogramMetricFamily(self._histogram_name, self._histogram_help, labels=self._histogram_labels)
        bounds = [*(floatToGoString(bound) for bound in self._bounds), "+Inf"]
        for labels, latencies in list(self._latencies.items()):
            cumulative = list(itertools.accumulate(latencies[:-2]))
            histogram.add_metric([str(value) for value in labels], list(zip(bounds, cumulative, strict=True)),
                                 latencies[-2])
        yield histogram


class _KeptAnswers:
    """Look-ups of the all-clear answers evaluation keeps across requests (``admission/all_clear.py``), counted by
    the evaluation as plain numbers and exported from them."""

    NAME = f"{PREFIX}_validating_kept_answers"

    def describe(self) -> Iterator[Metric]:
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.NAME, "Requests whose policies' answer was looked up among the answers "
                                     "kept for earlier requests with the same input, by result (found: "
                                     "answered without evaluating; not_found: evaluated).", labels=("result",))
        family.add_metric(("found",), LOOKUPS.found)
        family.add_metric(("not_found",), LOOKUPS.not_found)
        yield family


class _DeferredBuilds:
    """Programs requests found missing and left to the builder thread (``admission/generic/deferred.py``)."""

    NAME = f"{PREFIX}_deferred_program_builds"

    def describe(self) -> Iterator[Metric]:
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.NAME, "Programs a request found missing (a set of policies' all-clear "
                                     "program, a policy's validations run together) and that were built off the "
                                     "request path while requests were decided without them, by result (built; "
                                     "failed: a bug, logged, and the requests needing it stay exact).",
                                     labels=("result",))
        family.add_metric(("built",), COUNTS.built)
        family.add_metric(("failed",), COUNTS.failed)
        yield family
        yield GaugeMetricFamily(f"{self.NAME}_pending", "Programs handed to the builder thread and not built yet "
                                "(with workers: the most any running worker has).", value=COUNTS.pending)


class Metrics:
    """Every series the daemon exports; one instance per process (or per test)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._modes: dict[str, GaugeMode] = {}
        self.requests = CountedLatencies(self.registry, (
            f"{PREFIX}_admission_requests",
            "AdmissionReview HTTP requests by endpoint, HTTP status code and admission decision.",
            ("endpoint", "code", "decision")), (
            f"{PREFIX}_admission_request_duration_seconds",
            "Time from receiving an AdmissionReview request to writing its answer, by endpoint and admission "
            "decision (as kube-apiserver's webhook histogram is by its rejected label).",
            ("endpoint", "decision")), LATENCY_BUCKETS)
        policy_labels = ("policy", "policy_binding", "error_type", "enforcement_action")
        self.policy_checks = CountedLatencies(self.registry, (
            f"{PREFIX}_validating_admission_policy_check",
            "Validation admission policy check total, labeled by policy and binding; mirrors "
            "apiserver_validating_admission_policy_check_total.",
            policy_labels), (
            f"{PREFIX}_validating_admission_policy_check_duration_seconds",
            "Validation admission latency for individual validation expressions in seconds, labeled by policy "
            "and binding; mirrors apiserver_validating_admission_policy_check_duration_seconds.",
            policy_labels), LATENCY_BUCKETS)
        mutation_labels = ("policy", "policy_binding", "error_type")
        self.mutation_checks = CountedLatencies(self.registry, (
            f"{PREFIX}_mutating_admission_policy_check",
            "Mutation admission policy check total, labeled by policy and further identified by binding; "
            "mirrors apiserver_mutating_admission_policy_check_total.",
            mutation_labels), (
            f"{PREFIX}_mutating_admission_policy_check_duration_seconds",
            "Mutation admission latency for individual mutation expressions in seconds, labeled by policy and "
            "binding; mirrors apiserver_mutating_admission_policy_check_duration_seconds.",
            mutation_labels), LATENCY_BUCKETS)
        self.registry.register(_KeptAnswers())
        self.registry.register(_DeferredBuilds())
        self._modes[f"{_DeferredBuilds.NAME}_pending"] = "livemax"
        self._log_drops = self._gauge(
            f"{PREFIX}_log_lines_dropped",
            "Log lines dropped since start because the log reader (journald, the container runtime) did not "
            "keep up; logging never blocks admission.", mode="sum")
        self.connection_events = Counter(
            f"{PREFIX}_connections_closed_total",
            "Connections closed by the daemon: timeout (headers or idle past their limit), shed (idle, to make "
            "room under the connection cap), rejected (over the cap with every connection busy).",
            ("reason",), registry=self.registry)
        self.background_task_failures = Counter(
            f"{PREFIX}_background_task_failures_total",
            "Background tasks (reload, watchdog, certificate reload, connection sweeper) that failed and were "
            "restarted.", ("task",), registry=self.registry)
        self.listener_failures = Counter(
            f"{PREFIX}_listener_failures_total",
            "Listeners found no longer listening (shut down, their descriptor closed, given up by the event loop), "
            "by listener (unix, https, metrics); the process that served it then exits to be started again.",
            ("listener",), registry=self.registry)
        self.direct_answers = Counter(
            f"{PREFIX}_admission_requests_answered_directly_total",
            "AdmissionReview requests that arrived whole in one read and were taken from it and answered without "
            "aiohttp's request handling (server/fast_http.py): the same answers for less CPU.",
            registry=self.registry)
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
        self.reload_timestamp = self._gauge(
            f"{reload_prefix}_automatic_reload_last_timestamp_seconds",
            "Unix time of the last manifest directory reload with the given status.",
            ("status",), mode="max")
        self.config_info = self._gauge(
            f"{reload_prefix}_last_config_info",
            "The content hash of the manifest directory currently served: 1.",
            ("hash",), mode="max")
        self.worker_config_info = self._gauge(
            f"{PREFIX}_worker_config_info",
            "With --workers: the content hash each worker serves (1), by worker process id.",
            ("hash",), mode="liveall")
        self.worker_shadow_config_info = self._gauge(
            f"{PREFIX}_worker_shadow_config_info",
            "With --workers and --shadow-manifests: the content hash of the shadow directory each worker "
            "evaluates (1), by worker process id.",
            ("hash",), mode="liveall")
        #: The one hash each ``*_config_info`` gauge shows now, by gauge name.
        self._current_hash: dict[str, str] = {}
        self.worker_restarts = Counter(
            f"{PREFIX}_worker_restarts_total",
            "With --workers: workers that died (a native crash included) and were replaced.",
            registry=self.registry)
        self.worker_recycles = Counter(
            f"{PREFIX}_worker_recycles_total",
            "With --workers: workers replaced because they grew past --worker-memory-growth.",
            registry=self.registry)
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
        self.cluster_cache_synced = self._gauge(
            f"{PREFIX}_cluster_cache_synced",
            "1 once the cluster view's cache of the resource has listed (with workers: the least of them).",
            ("resource",), mode="livemin")
        self.cluster_cache_objects = self._gauge(
            f"{PREFIX}_cluster_cache_objects",
            "Objects in the cluster view's cache of the resource.",
            ("resource",), mode="livemax")
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
        self.shadow_config_info = self._gauge(
            f"{PREFIX}_shadow_config_info",
            "The content hash of the shadow directory being evaluated: 1 (earlier hashes 0).",
            ("hash",), mode="max")
        self._shadow_hash: str | None = None
        self.tls_handshake_failures = Counter(
            f"{PREFIX}_tls_handshake_failures_total",
            "TLS handshakes the HTTPS listener refused, by OpenSSL's reason (PEER_DID_NOT_RETURN_A_CERTIFICATE: "
            "no client certificate; CERTIFICATE_VERIFY_FAILED: not signed by client-ca).",
            ("reason",), registry=self.registry)
        self.tls_certificate_renewal_failures = Counter(
            f"{PREFIX}_tls_certificate_renewal_failures_total",
            "Renewals of the generated serving certificate that failed, by cause (no_space, read_only, "
            "unsafe_directory, io, ca); the current certificate kept serving.",
            ("cause",), registry=self.registry)
        # livemin: with workers, the oldest certificate any running process still serves.
        self.tls_certificate_expiry = self._gauge(
            f"{PREFIX}_tls_certificate_expiry_timestamp_seconds",
            "When each TLS certificate in use stops being valid, in seconds since the epoch: serving (the HTTPS "
            "listener's) and client-ca (the first of --client-ca's certificates to expire).",
            ("certificate",), mode="livemin")
        self.missing_cluster_view = self._gauge(
            f"{PREFIX}_policies_missing_cluster_view",
            "Policies served that read namespaceObject or call authorizer (reads) while this daemon has no "
            "cluster view for it (serve --kubeconfig): their expressions fail and their failurePolicy decides.",
            ("reads",), mode="livemax")
        # Set by the process that analyses what is served (the supervisor with workers): livemax over it.
        self.findings = self._gauge(
            f"{PREFIX}_findings",
            "What check's analyses find in the served configuration, by kind (finding): unregistered (policies "
            "the installed webhook registration does not send all of their requests, with --webhook-config-dir), "
            "control_plane_write_refused, unbound_policy, type_check_warning, skipped_file (a binding without its "
            "policy is a load error, as in kube-apiserver). Each finding is also logged once when it appears "
            "and noted in /readyz?verbose.",
            ("finding",), mode="livemax")
        self.authorizer_cache_lookups = Counter(
            f"{PREFIX}_cluster_authorizer_cache_total",
            "authorizer checks looked up in the SubjectAccessReview decision cache, by result (hit, miss).",
            ("result",), registry=self.registry)
        # Memory, CPU and open descriptors of each process: with workers, one series per running process
        # (labelled pid), since a sum of resident sizes or descriptor counts says nothing about any limit.
        ProcessCollector(registry=self.registry)
        self._modes.update(dict.fromkeys(PROCESS_FAMILIES, "liveall"))
        # Series whose label values are known in advance are exported at 0 from the start, so a rate or
        # an alert on them works before the first event, not only after it.
        for status in ("success", "failure"):
            self.reloads.labels(status=status)
        for reason in CONNECTION_CLOSE_REASONS:
            self.connection_events.labels(reason=reason)

    def export_from_start(self, endpoints: Iterable[str], *, shadow: bool, cluster: bool) -> None:
        """Creates at 0 every series of the families this daemon's configuration uses whose label values
        are known before any request (per-policy series appear with the policies' first checks)."""
        for endpoint in endpoints:
            self.evaluation_timeouts.labels(endpoint=endpoint)
            for decision in ENDPOINT_DECISIONS.get(endpoint, ()):
                self.requests.count((endpoint, "200", decision))
                self.requests.latency((endpoint, decision))
            if shadow:
                self.shadow_evaluations.labels(endpoint)
                for difference in SHADOW_DIFFERENCES:
                    self.shadow_differences.labels(endpoint, difference)
        if shadow:
            for status in ("success", "failure"):
                self.shadow_reloads.labels(status=status)
            for reason in SHADOW_SKIP_REASONS:
                self.shadow_skipped.labels(reason)
        if cluster:
            for operation in CLUSTER_OPERATIONS:
                self.cluster_api_duration.labels(operation)
                for result in ("ok", "error"):
                    self.cluster_api_requests.labels(operation, result)
            for reason in ("expired", "error"):
                self.cluster_watch_restarts.labels("namespaces", reason)
            for result in ("hit", "miss"):
                self.authorizer_cache_lookups.labels(result)

    def background_task(self, task: str) -> None:
        """A background task this process runs: its failure count is exported (at 0) from its start."""
        self.background_task_failures.labels(task=task)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...] = (), *, mode: GaugeMode) -> Gauge:
        gauge = Gauge(name, documentation, labels, registry=self.registry)
        self._modes[name] = mode
        return gauge

    def record_tls_expiries(self, expiries: dict[str, float]) -> None:
        for certificate, timestamp in expiries.items():
            self.tls_certificate_expiry.labels(certificate=certificate).set(timestamp)

    def watch_log_drops(self, dropped: Callable[[], float]) -> None:
        """Exports the log writer's dropped-line count, read at scrape time."""
        self._log_drops.set_function(dropped)

    def _show_only(self, gauge: Gauge, name: str, content_hash: str) -> None:
        # Exactly one series at a time: an old hash left at 1 would look like drift between replicas.
        previous = self._current_hash.get(name)
        if previous is not None and previous != content_hash:
            gauge.remove(previous)
        self._current_hash[name] = content_hash
        gauge.labels(hash=content_hash).set(1)

    def set_worker_hash(self, content_hash: str) -> None:
        self._show_only(self.worker_config_info, "worker", content_hash)

    def set_worker_shadow_hash(self, content_hash: str) -> None:
        self._show_only(self.worker_shadow_config_info, "worker-shadow", content_hash)

    def record_reload(self, status: str, timestamp: float, content_hash: str | None = None) -> None:
        self.reloads.labels(status=status).inc()
        self.reload_timestamp.labels(status=status).set(timestamp)
        if content_hash is not None:
            self.set_config_hash(content_hash)

    def set_config_hash(self, content_hash: str) -> None:
        self._show_only(self.config_info, "config", content_hash)

    def record_shadow_reload(self, status: str, content_hash: str | None) -> None:
        self.shadow_reloads.labels(status=status).inc()
        if content_hash is None:
            return
        if self._shadow_hash is not None and self._shadow_hash != content_hash:
            self.shadow_config_info.labels(hash=self._shadow_hash).set(0)
        self._shadow_hash = content_hash
        self.shadow_config_info.labels(hash=content_hash).set(1)

    def record_request(self, endpoint: str, code: int, decision: str, seconds: float | None) -> None:
        self.requests.record((endpoint, str(code), decision), (endpoint, decision), seconds)

    def record_policy_check(self, policy: str, binding: str, error_type: str, action: str, seconds: float) -> None:
        key = (policy, binding, error_type, action)
        self.policy_checks.record(key, key, seconds)

    def record_mutation_check(self, policy: str, binding: str, error_type: str, seconds: float) -> None:
        key = (policy, binding, error_type)
        self.mutation_checks.record(key, key, seconds)

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
        """This process's series (the whole daemon's with one process; see :class:`ProcessSum`)."""
        return generate_latest(self.registry)

    def report(self) -> ProcessMetrics:
        """This process's series, for the supervisor to add up. ``_created`` samples are left out: the time a
        series was created in one worker says nothing about a sum over workers that come and go."""
        families = []
        for metric in self.registry.collect():
            samples = tuple((sample.name, tuple(sample.labels.items()), sample.value) for sample in metric.samples
                            if not sample.name.endswith("_created"))
            families.append(Family(metric.name, metric.type, metric.documentation,
                                   self._modes.get(metric.name, "sum"), samples))
        return tuple(families)
