"""kube-apiserver's webhook admission for one request: the MutatingAdmissionWebhook plugin (with
reinvocation) then the ValidatingAdmissionWebhook plugin, as ``plugin/webhook/mutating/dispatcher.go``,
``plugin/webhook/validating/dispatcher.go``, ``admission/reinvocation.go`` and ``admission/attributes.go``
run them, with what the request's client and the audit log get out of it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jsonpatch

from tests.kube_apiserver.calls import CallError, Exchange, admission_review, call, review_version, verify
from tests.kube_apiserver.configuration import AdmissionConfiguration, Node, PluginConfiguration, Webhook, host_port
from tests.kube_apiserver.matching import Attributes, EquivalentResources, Invocation, Matcher
from tests.kube_apiserver.statuses import (
    StatusError,
    dry_run_unsupported,
    internal_error,
    timeout,
    webhook_denied,
)
from tests.kube_audit import check_key_format as key_format_problems

VALIDATING_FAILED_OPEN = "failed-open.validating.webhook.admission.k8s.io/"
MUTATION = "mutation.webhook.admission.k8s.io/"
MUTATION_FAILED_OPEN = "failed-open." + MUTATION
PATCH = "patch.webhook.admission.k8s.io/"
def check_key_format(key: str) -> str | None:
    """``checkKeyFormat`` (admission/attributes.go): the error kube-apiserver logs for an audit annotation key
    it drops, None if it keeps it (the rules are ported once, in tests/kube_audit.py)."""
    problems = key_format_problems(key)
    if not problems:
        return None
    if len(key.split("/")) != 2:
        return f"{problems[0]}. (e.g. 'podsecuritypolicy.admission.k8s.io/admit-policy')"
    return (f"annotation key has invalid format {','.join(problems)}. A qualified name like "
            "'podsecuritypolicy.admission.k8s.io/admit-policy' is required.")


@dataclass
class AuditRecord:
    """The request's audit annotations (``attributesRecord.AddAnnotation``) and kube-apiserver's warnings log."""

    annotations: dict[str, tuple[str, str]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, value: str, level: str = "Metadata") -> str | None:
        problem = check_key_format(key)
        if problem is None:
            with self.lock:
                previous = self.annotations.get(key)
                if previous is not None and previous != (value, level):
                    problem = (f"admission annotations are not allowd to be overwritten, key:\"{key}\", "
                               f"old value: \"{previous[0]}\", new value:\"{value}\"")
                else:
                    self.annotations[key] = (value, level)
        return problem

    def warn(self, line: str) -> None:
        with self.lock:
            self.log.append(line)


@dataclass
class Outcome:
    """What the client of kube-apiserver gets back, and what the audit log records."""

    allowed: bool
    #: The Status returned to the client when the request is refused.
    status: Mapping[str, Any] | None
    #: The object after the mutating webhooks (what is stored when allowed).
    object: Mapping[str, Any] | None
    #: Audit annotations kept (key -> value), as the audit event's ``annotations`` carries them.
    audit_annotations: dict[str, str]
    #: Warning headers returned to the client, in order.
    warnings: list[str]
    #: kube-apiserver's own log lines (klog warnings), e.g. an audit annotation it dropped.
    log: list[str]
    exchanges: list[Exchange]

    @property
    def message(self) -> str:
        return str((self.status or {}).get("message", ""))


class WarningRecorder:
    """The request's warning recorder: empty and repeated warnings are dropped."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        with self._lock:
            if text and text not in self.warnings:
                self.warnings.append(text)


@dataclass
class _Request:
    attributes: Attributes
    deadline: float
    audit: AuditRecord
    warnings: WarningRecorder
    exchanges: list[Exchange]


class KubeApiserver:
    """The webhook admission plugins of one kube-apiserver, with its namespaces (the informer's view)."""

    def __init__(self, configuration: AdmissionConfiguration, node: Node | None = None, *,
                 namespaces: Mapping[str, Mapping[str, str]] | None = None,
                 equivalents: EquivalentResources | None = None) -> None:
        self.configuration = configuration
        self.node = node or Node()
        self.matcher = Matcher(namespaces if namespaces is not None else {}, equivalents or EquivalentResources())
        self.matcher.compile_conditions([*configuration.mutating.webhooks, *configuration.validating.webhooks])

    @classmethod
    def from_admission_config_file(cls, config_file: str, *, root: Path | None = None,
                                   **kwargs: Any) -> KubeApiserver:
        """kube-apiserver started with ``--admission-control-config-file=<config_file>`` on a node under ``root``."""
        node = Node(root)
        return cls(AdmissionConfiguration.load(config_file, node), node, **kwargs)

    def admit(self, attributes: Attributes) -> Outcome:
        request = _Request(attributes, time.monotonic() + attributes.timeout, AuditRecord(), WarningRecorder(), [])
        try:
            mutated = self._mutate(request)
            self._validate(request, replace(attributes, object=mutated))
        except StatusError as error:
            return self._outcome(request, False, error.status, attributes.object)
        return self._outcome(request, True, None, mutated)

    @staticmethod
    def _outcome(request: _Request, allowed: bool, status: Mapping[str, Any] | None,
                 obj: Mapping[str, Any] | None) -> Outcome:
        return Outcome(allowed, status, obj, {key: value for key, (value, _) in request.audit.annotations.items()},
                       request.warnings.warnings, request.audit.log, request.exchanges)

    # -- mutating -----------------------------------------------------------------------------------------

    def _mutate(self, request: _Request) -> Mapping[str, Any] | None:
        plugin = self.configuration.mutating
        state = _ReinvocationState()
        current = request.attributes
        current = self._mutating_round(request, plugin, current, state, reinvoke=False)
        if state.should_reinvoke:
            current = self._mutating_round(request, plugin, current, state, reinvoke=True)
        return current.object

    def _mutating_round(self, request: _Request, plugin: PluginConfiguration, attributes: Attributes,
                        state: _ReinvocationState, *, reinvoke: bool) -> Attributes:
        round_number = 1 if reinvoke else 0
        for index, webhook in enumerate(plugin.webhooks):
            invocation = self.matcher.should_call(webhook, attributes)
            if invocation is None or (reinvoke and webhook.uid not in state.reinvoke):
                continue
            failure: CallError | None = None
            try:
                patched, changed = self._call_mutating(request, plugin, webhook, invocation, attributes,
                                                       round_number, index)
            except CallError as error:
                failure, patched, changed = error, None, False
            if changed:
                state.require_reinvoking_previous()
            if webhook.spec.get("reinvocationPolicy") == "IfNeeded":
                state.previously_invoked.add(webhook.uid)
            if failure is not None:
                if webhook.failure_policy != "Ignore":
                    request.audit.warn(f"Failed calling webhook, failing closed {webhook.name}: {failure}")
                    raise internal_error(str(failure)) from failure
                request.audit.warn(f"Failed calling webhook, failing open {webhook.name}: {failure}")
                self._annotate(request, f"{MUTATION_FAILED_OPEN}round_{round_number}_index_{index}", webhook.name)
                if time.monotonic() >= request.deadline:
                    raise timeout("request did not complete within requested timeout") from failure
            elif patched is not None:
                attributes = replace(attributes, object=patched)
        return attributes

    def _call_mutating(self, request: _Request, plugin: PluginConfiguration, webhook: Webhook,
                       invocation: Invocation, attributes: Attributes, round_number: int,
                       index: int) -> tuple[Mapping[str, Any] | None, bool]:
        changed = False
        try:
            response = self._exchange(request, plugin, webhook, invocation, attributes, mutating=True)
            if not response.allowed:
                raise webhook_denied(webhook.name, dict(response.result) if response.result else None)
            if not response.patch:
                return None, False
            try:
                operations = json.loads(response.patch)
                if not isinstance(operations, list):
                    raise ValueError("a JSON patch is an array of operations")
            except ValueError as error:
                raise CallError(webhook.name, f"received undecodable patch in webhook response: {error}") from error
            if not operations:
                return None, False
            if attributes.object is None:
                raise internal_error(f"admission webhook \"{webhook.name}\" attempted to modify the object, which "
                                     "is not supported for this operation")
            if response.patch_type != "JSONPatch":
                raise CallError(webhook.name, f"unsupported patch type \"{response.patch_type}\"")
            try:
                patched = jsonpatch.JsonPatch(operations).apply(json.loads(json.dumps(attributes.object)))
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                raise internal_error(str(error)) from error
            changed = patched != attributes.object
            self._annotate(request, f"{PATCH}round_{round_number}_index_{index}",
                           json.dumps({"configuration": webhook.configuration_name, "webhook": webhook.name,
                                       "patch": operations, "patchType": "JSONPatch"}, separators=(",", ":")),
                           level="Request")
            return patched, changed
        finally:
            self._annotate(request, f"{MUTATION}round_{round_number}_index_{index}",
                           json.dumps({"configuration": webhook.configuration_name, "webhook": webhook.name,
                                       "mutated": changed}, separators=(",", ":")))

    # -- validating ---------------------------------------------------------------------------------------

    def _validate(self, request: _Request, attributes: Attributes) -> None:
        plugin = self.configuration.validating
        relevant = [invocation for webhook in plugin.webhooks
                    if (invocation := self.matcher.should_call(webhook, attributes)) is not None]
        if not relevant:
            return
        if time.monotonic() >= request.deadline:
            raise timeout("request did not complete within requested timeout")
        errors: list[StatusError] = []
        with ThreadPoolExecutor(max_workers=len(relevant)) as pool:
            futures = [pool.submit(self._call_validating, request, plugin, invocation, attributes, index)
                       for index, invocation in enumerate(relevant)]
            for future in as_completed(futures):  # the first error to arrive is the one returned
                error = future.result()
                if error is not None:
                    errors.append(error)
        if errors:
            raise errors[0]

    def _call_validating(self, request: _Request, plugin: PluginConfiguration, invocation: Invocation,
                         attributes: Attributes, index: int) -> StatusError | None:
        webhook = invocation.webhook
        try:
            response = self._exchange(request, plugin, webhook, invocation, attributes, mutating=False)
        except CallError as error:
            if webhook.failure_policy == "Ignore":
                request.audit.warn(f"Failed calling webhook, failing open {webhook.name}: {error}")
                self._annotate(request, f"{VALIDATING_FAILED_OPEN}round_0_index_{index}", webhook.name)
                return None
            request.audit.warn(f"Failed calling webhook, failing closed {webhook.name}: {error}")
            return internal_error(str(error))
        except StatusError as error:
            return error
        if response.allowed:
            return None
        denied = webhook_denied(webhook.name, dict(response.result) if response.result else None)
        request.audit.warn(f"rejected by webhook \"{webhook.name}\": {denied.message}")
        return denied

    # -- one call -----------------------------------------------------------------------------------------

    def _exchange(self, request: _Request, plugin: PluginConfiguration, webhook: Webhook, invocation: Invocation,
                  attributes: Attributes, *, mutating: bool) -> Any:
        if attributes.dry_run and webhook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise dry_run_unsupported(webhook.name)
        version = review_version(webhook)
        if version is None:
            raise CallError(webhook.name, "could not create admission objects: webhook does not accept known "
                                          "AdmissionReview versions (v1, v1beta1)", 400)
        uid, review = admission_review(attributes, invocation, version)
        credentials = plugin.kubeconfig.credentials_for(host_port(webhook.url), self.node)
        deadline = min(request.deadline, time.monotonic() + float(webhook.spec["timeoutSeconds"]))
        answer = call(webhook, credentials, review, deadline, request.exchanges)
        try:
            response = verify(uid, mutating, answer, version)
        except ValueError as error:
            raise CallError(webhook.name, f"received invalid webhook response: {error}") from error
        kind = "mutating" if mutating else "validating"
        for key, value in response.audit_annotations.items():
            prefixed = f"{webhook.name}/{key}"
            problem = request.audit.add(prefixed, value)
            if problem is not None:
                request.audit.warn(f"Failed to set admission audit annotation {prefixed} to {value} for {kind} "
                                   f"webhook {webhook.name}: {problem}")
        for warning in response.warnings:
            request.warnings.add(warning)
        return response

    @staticmethod
    def _annotate(request: _Request, key: str, value: str, level: str = "Metadata") -> None:
        problem = request.audit.add(key, value, level)
        if problem is not None:
            request.audit.warn(f"failed to set annotation {key}: {problem}")


@dataclass
class _ReinvocationState:
    """``webhookReinvokeContext`` plus the chain's ``ShouldReinvoke``."""

    previously_invoked: set[str] = field(default_factory=set)
    reinvoke: set[str] = field(default_factory=set)
    should_reinvoke: bool = False

    def require_reinvoking_previous(self) -> None:
        self.reinvoke |= self.previously_invoked
        self.previously_invoked = set()
        self.should_reinvoke = True
