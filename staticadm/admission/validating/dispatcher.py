"""ValidatingAdmissionPolicy admission of one request: kube-apiserver's validating dispatcher.

A request goes one way through four stages, each a module that never calls back into an earlier one:

1. match: the candidate policies (``Snapshot.candidate_set``) are matched (``generic/dispatcher.py``) into
   steps in Kubernetes' order (configuration errors, what did not apply, each (policy, binding) to evaluate);
2. prune: the engine is given only what those policies' expressions can read of the objects (``cel/reads.py``),
   in the request's one activation (``admission/cel/activation.py``);
3. evaluate: one engine call answers whether the request is all clear for every invoked policy
   (``all_clear.py``); when it is not, each binding is run by the validator (``validator.py``);
4. decide: here, each decision is routed through its binding's validationActions and the first denial is
   reported, exactly as ``policy/validating/dispatcher.go`` does. Every decision is also returned as data (policy,
   binding, action, error type) for logs, metrics and the explain view.

Stage: decide (``validating/dispatcher.go``). Receives the snapshot, the namespace source and the parsed request;
builds the request's match view once (for the match stage) and from it the request's activations, the one value
(:class:`RequestActivations`: request, match view, CEL inputs) the later stages receive; hands on a
:class:`ValidationOutcome`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from staticadm.admission.cel.activation import RequestActivations
from staticadm.admission.generic.dispatcher import (
    INVOKED,
    POLICY_DONE,
    SKIPPED,
    Invocation,
    Matched,
    match_validating,
    not_matched_why,
    policy_candidate_set,
)
from staticadm.admission.matching.matcher import describe_request, is_excluded
from staticadm.admission.matching.plan import MATCHED_ORIGINAL, RequestMatch, matched_as
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.outcomes import DecisionRecord, NotMatched
from staticadm.admission.request import AdmissionRequest
from staticadm.admission.response import (
    MAX_AUDIT_ANNOTATION_VALUE_BYTES,
    ValidationFailure,
    audit_annotations,
    denial_message,
    denial_status,
    review_response,
    truncate_bytes,
    warning_message,
)
from staticadm.admission.validating.all_clear import (
    AnswersByInput,
    PolicyClear,
    SetProgram,
    all_clear,
    input_key,
    set_program,
)
from staticadm.admission.validating.validator import NOTHING, ValidateResult, validate
from staticadm.admission.vocabulary import (
    AuditAnnotationAction,
    DecisionAction,
    DecisionEvaluation,
    DecisionSite,
    EnforcementAction,
    ErrorType,
)
from staticadm.cel import admission_environment
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.model import ValidatingAdmissionPolicyBinding
from staticadm.snapshot import Snapshot


@dataclass(slots=True)  # not frozen: one per request (a frozen dataclass builds through object.__setattr__)
class ValidationOutcome:
    response: Mapping[str, Any]
    allowed: bool
    status: Mapping[str, Any] | None
    warnings: tuple[str, ...]
    annotations: Mapping[str, str]
    decisions: tuple[DecisionRecord, ...]
    #: (policy, binding) pairs that matched and were evaluated, in evaluation order.
    matched: tuple[tuple[str, str], ...]
    #: Candidates that did not apply, and why (unindexed policies are left to :func:`explain_unmatched`).
    not_matched: tuple[NotMatched, ...]
    excluded: bool = False


_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class _Denial:
    policy: str
    binding: str | None
    message: str
    reason: str


@dataclass(slots=True)
class _Dispatch:
    """The mutable bookkeeping of one dispatch; never escapes ``evaluate_validating``."""

    activations: RequestActivations
    denied: list[_Denial] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failures: list[ValidationFailure] = field(default_factory=list)
    published: dict[str, str] = field(default_factory=dict)
    records: list[DecisionRecord] = field(default_factory=list)
    matched: list[tuple[str, str]] = field(default_factory=list)
    not_matched: list[NotMatched] = field(default_factory=list)
    #: What the validator decided for a policy on this request, by (policy, resource, kind, namespaceObject):
    #: the same for each of its bindings (see evaluate_validating), or None to validate for each binding.
    validated: dict[tuple[Any, ...], tuple[ValidateResult, float]] | None = None

    def skipped(self, policy: str, binding: str | None, why: str | Callable[[], str]) -> None:
        self.not_matched.append(NotMatched(policy, binding, why))

    def config_error(self, compiled: CompiledValidatingPolicy, binding: str | None, error: str) -> None:
        """``addConfigError``: denies under Fail regardless of validationActions; Ignore drops it."""
        if compiled.failure_policy == "Ignore":
            self.records.append(DecisionRecord(compiled.name, binding, EnforcementAction.ALLOW,
                                               ErrorType.INVALID_ERROR, error, site=DecisionSite.CONFIGURATION))
            return
        prefix = "failed to configure policy" if binding is None else "failed to configure binding"
        if compiled.failure_policy == "Fail":
            message = f"{prefix}: {error}"
        else:
            message = f"unrecognized failure policy: '{compiled.failure_policy}'"
        self.denied.append(_Denial(compiled.name, binding, message, ""))
        self.records.append(DecisionRecord(compiled.name, binding, EnforcementAction.DENY, ErrorType.INVALID_ERROR,
                                           message, site=DecisionSite.CONFIGURATION))


def _evaluate_binding(state: _Dispatch, invocation: Invocation[CompiledValidatingPolicy],
                      collector: dict[str, list[str]]) -> None:
    compiled = invocation.compiled
    binding = cast(ValidatingAdmissionPolicyBinding, invocation.binding)
    policy_name, binding_name = compiled.name, binding.metadata.name
    namespace_object, namespace_error = state.activations.view.namespace_object(compiled.uses_namespace_object)
    if namespace_error is not None:
        state.config_error(compiled, binding_name, namespace_error)
        return
    shared = state.validated
    # By identity: the resource and kind are the request's own objects, and hashing them costs more.
    key = (id(compiled), id(invocation.resource), id(invocation.kind), id(namespace_object))
    remembered = shared.get(key) if shared is not None else None
    if remembered is None:
        started = time.perf_counter()
        result = validate(compiled, invocation.resource, invocation.kind, namespace_object, state.activations)
        seconds = time.perf_counter() - started
        if shared is not None:
            shared[key] = (result, seconds)
    else:
        result, seconds = remembered
    if result.skipped_by is not None:
        reason = (f'matchCondition "{result.skipped_by}" evaluated to false' if result.skipped_by
                  else "matchConditions failed to evaluate and failurePolicy is Ignore")
        state.not_matched.append(NotMatched(policy_name, binding_name, reason))
        return
    state.matched.append((policy_name, binding_name))
    if result is NOTHING:
        return
    actions = binding.spec.validation_actions
    for decision in result.decisions:
        # The decision's place in kube-apiserver's list (one per validation, or a single one for the
        # whole binding), which the validation_failure annotation reports.
        index = decision.expression_index if decision.expression_index is not None else 0
        if decision.action is DecisionAction.ADMIT:
            # kube-apiserver's dispatcher observes an admit only when the evaluation errored (failurePolicy
            # Ignore); a validation that passed is not a check of its own in apiserver_..._check_total.
            if decision.evaluation is DecisionEvaluation.ERROR:
                state.records.append(DecisionRecord(policy_name, binding_name, EnforcementAction.ALLOW,
                                                    decision.error_type,
                                                    decision.message, expression_index=decision.expression_index,
                                                    seconds=seconds, site=decision.site))
            continue
        for action in actions:
            if action == "Deny":
                state.denied.append(_Denial(policy_name, binding_name, decision.message, decision.reason))
                enforced = EnforcementAction.DENY
            elif action == "Audit":
                state.failures.append(ValidationFailure(decision.message, binding.spec.policy_name, binding_name,
                                                        index, tuple(actions)))
                enforced = EnforcementAction.AUDIT
            elif action == "Warn":
                state.warnings.append(warning_message(policy_name, binding_name, decision.message))
                enforced = EnforcementAction.WARN
            else:
                continue
            state.records.append(DecisionRecord(policy_name, binding_name, enforced, decision.error_type,
                                                decision.message, decision.reason, decision.expression_index, seconds,
                                                decision.site))
    for annotation in result.audit:
        if annotation.action is AuditAnnotationAction.PUBLISH:
            _collect(collector, ((annotation.key, annotation.value),))
        elif annotation.action is AuditAnnotationAction.ERROR:
            # auditAnnotation errors deny whatever the validationActions say.
            state.denied.append(_Denial(policy_name, binding_name, annotation.error, ""))
            state.records.append(DecisionRecord(policy_name, binding_name, EnforcementAction.DENY,
                                                ErrorType.INVALID_ERROR, annotation.error, seconds=seconds,
                                                site=DecisionSite.AUDIT_ANNOTATION))


def _clear_policies(activations: RequestActivations, matched: Matched,
                    kept: AnswersByInput) -> tuple[_SetOf, list[PolicyClear]] | None:
    """The invoked policies that can join a set's program and what each does, when one engine call finds the
    request all clear for all of them (``all_clear.py``), or found an earlier request with the same input so
    (``kept``); None when the bindings are to be evaluated one by one."""
    if matched.config_errors or not matched.invoked:
        return None
    program = matched.program
    if program is None:
        program = _SetOf.of(matched)
        if program is None:
            return None
        matched.program = program
    if program.entry is None:
        return None
    request = activations.request
    resource, kind = request.original_resource, request.original_kind
    namespace_object, namespace_error = activations.view.namespace_object(program.uses_namespace_object)
    if namespace_error is not None:
        return None
    key = None
    if not program.uses_namespace_object and kept.worth_looking_up(program.entry):
        key = input_key(activations.given(resource, kind))
        if (found := kept.answer(program.entry, key)) is not None:
            return program, found
    context = activations.scope(activations.for_evaluation(resource, kind, namespace_object), None)
    found = all_clear(program.entry, program.joined, context)
    if found is None:
        return None
    if key is not None:
        kept.keep(program.entry, key, found)
    return program, found


@dataclass(frozen=True, slots=True)
class _SetOf:
    """The set program of a matched request's invoked policies that can join one; None when a policy matched as
    another resource than the request's own (matchPolicy Equivalent: an activation of its own)."""

    joined: tuple[CompiledValidatingPolicy, ...]
    entry: SetProgram | None
    uses_namespace_object: bool
    #: Whether every invoked policy joined.
    whole: bool

    @classmethod
    def of(cls, matched: Matched) -> _SetOf | None:
        """None while the set's program is being built off the request path (``generic/deferred.py``)."""
        joined = tuple(compiled for compiled in matched.invoked if compiled.joins_sets)
        equivalent = any(step[0] == INVOKED and step[3] != MATCHED_ORIGINAL for step in matched.steps)
        entry = None
        if joined and not equivalent:
            entry = set_program(joined)
            if entry is None:
                return None
        return cls(joined, entry, any(compiled.uses_namespace_object for compiled in joined),
                   len(joined) == len(matched.invoked))


def _published(program: _SetOf, found: list[PolicyClear]) -> dict[str, str]:
    """The audit annotations of a request all clear for every policy it invokes: each policy's bindings publish
    the same values (what the validator decides never depends on the binding), so each key has one value. Made
    once per reading the set program keeps (``SetProgram.last_reading``); a copy is returned."""
    entry = program.entry
    last = entry.last_reading if entry is not None else None
    if last is not None and last[1] is found and last[2] is not None:
        return dict(last[2])
    published = {}
    for compiled, clear in zip(program.joined, found, strict=True):
        for key, value in clear.published:
            published[f"{compiled.name}/{key}"] = truncate_bytes(value, MAX_AUDIT_ANNOTATION_VALUE_BYTES)
    if last is not None and last[1] is found:
        assert entry is not None
        entry.last_reading = (last[0], found, dict(published))
    return published


def _dispatch(state: _Dispatch, matched: Matched, clear: dict[int, PolicyClear] | None) -> None:
    """kube-apiserver's dispatcher loop over the matching phase's steps; the policies in ``clear`` (an all-clear
    request's) are not evaluated again."""
    view = state.activations.view
    request = view.request
    collector: dict[str, list[str]] = {}
    for step in matched.steps:
        what = step[0]
        if what == INVOKED:
            compiled, binding = step[1], step[2]
            found = clear.get(id(compiled)) if clear is not None else None
            if found is None:
                resource, kind = matched_as(step[3], request)
                _evaluate_binding(state, Invocation(compiled, binding, resource, kind), collector)
            elif found.skipped_by is not None:
                state.not_matched.append(NotMatched(compiled.name, binding.metadata.name,
                                                    f'matchCondition "{found.skipped_by}" evaluated to false'))
            else:
                state.matched.append((compiled.name, binding.metadata.name))
                _collect(collector, found.published)
        elif what == POLICY_DONE:
            for key, values in collector.items():
                state.published[f"{step[1].name}/{key}"] = values[0] if len(values) == 1 else ", ".join(values)
            collector = {}
        elif what == SKIPPED:
            state.not_matched.append(NotMatched(step[1], step[2], not_matched_why(step[3], view, step[4])))
        else:
            state.config_error(step[1], step[2], step[3])


def _collect(collector: dict[str, list[str]], published: Sequence[tuple[str, str]]) -> None:
    """An audit annotation a binding publishes, kept once per value for its policy."""
    for key, value in published:
        value = truncate_bytes(value, MAX_AUDIT_ANNOTATION_VALUE_BYTES)
        values = collector.setdefault(key, [])
        if value not in values:
            values.append(value)


def evaluate_validating(snapshot: Snapshot, namespaces: NamespaceSource, request: AdmissionRequest, *,
                        deadline: float | None = None, share_evaluations: bool = True,
                        prune_objects: bool = True, one_call: bool = True, explain: bool = True) -> ValidationOutcome:
    """The validating admission decision kube-apiserver would reach for ``request``; all CEL work stops at
    ``deadline`` (``time.perf_counter``), failing the remaining expressions as over budget.

    kube-apiserver runs a policy's validator once per binding that matched. What the validator decides
    depends on the policy, the activation (request, resource and kind matched, namespaceObject) and a
    fresh cost budget, never on the binding (its validationActions apply afterwards), and authorizer
    answers are fixed for the request: so with ``share_evaluations`` the second binding of a policy
    reuses the first one's decisions instead of evaluating every expression again, a match condition
    several policies share is evaluated once (charged to each policy's budget as it would have been), and a
    policy's validations first run together as one program, one by one only when that is not simply true.
    How a set of candidate policies matches a request is remembered by what its plans read of requests
    (``generic.dispatcher.match_validating``). False evaluates and matches everything per request and binding, as the
    straightforward reading of Kubernetes' loop (the tests compare the two). With ``one_call`` too, the
    policies the request invokes first run as one program that answers whether the request is all clear for
    every one of them (``all_clear.py``); the bindings are evaluated one by one only when it is not. With
    ``prune_objects`` the engine is given only the parts of the object and old object that the expressions of
    the policies that could match the request can read (``cel/reads.py``); False gives them whole. With
    ``explain`` False (the daemon, which never reads them) the outcome's ``matched`` and ``not_matched`` may be
    left empty.
    """
    excluded = is_excluded(request)
    candidates = None if excluded else policy_candidate_set(snapshot, request, mutating=False)
    if candidates is None or not candidates.positions:
        # No policy could match (most requests to a cluster's admission webhook): nothing to evaluate.
        response = review_response(request.review_api_version, request.uid, allowed=True)
        return ValidationOutcome(response, True, None, (), _NO_ANNOTATIONS, (), (), (), excluded)
    view = RequestMatch(request, namespaces)
    activations = RequestActivations(admission_environment(False), view, deadline, share=share_evaluations,
                                     reads=candidates.reads if prune_objects else None, rounds_key="validating",
                                     authorizer=candidates.asks_authorizer)
    matched = match_validating(snapshot.validating, candidates, view, remember=share_evaluations)
    cleared = (_clear_policies(activations, matched, AnswersByInput.of(snapshot))
               if one_call and share_evaluations else None)
    if cleared is not None and cleared[0].whole and not explain:
        # Nothing to decide and nobody to tell which bindings applied: only the annotations are left to publish
        # (most requests, so none of the dispatch's bookkeeping is made for them).
        annotations = _published(*cleared)
        response = review_response(request.review_api_version, request.uid, allowed=True, annotations=annotations)
        return ValidationOutcome(response, True, None, (), MappingProxyType(annotations), (), (), (), excluded)
    state = _Dispatch(activations=activations, validated={} if share_evaluations else None)
    clear = None if cleared is None else {id(compiled): found
                                          for compiled, found in zip(cleared[0].joined, cleared[1], strict=True)}
    _dispatch(state, matched, clear)

    warnings = tuple(dict.fromkeys(state.warnings))
    annotations = audit_annotations(state.failures, state.published)
    status = None
    if state.denied:
        first = state.denied[0]
        reason = first.reason or "Invalid"
        status = denial_status(denial_message(first.policy, first.binding, first.message), reason)
    response = review_response(request.review_api_version, request.uid, allowed=status is None, status=status,
                               warnings=warnings, annotations=annotations)
    return ValidationOutcome(
        response=response,
        allowed=status is None,
        status=status,
        warnings=warnings,
        annotations=MappingProxyType(annotations),
        decisions=tuple(state.records),
        matched=tuple(state.matched),
        not_matched=tuple(state.not_matched),
        excluded=excluded,
    )


def explain_unmatched(snapshot: Snapshot, request: AdmissionRequest,
                      outcome: ValidationOutcome) -> tuple[NotMatched, ...]:
    """Why each policy the evaluation never looked at does not apply (for ``review`` and explain)."""
    seen = {entry.policy for entry in outcome.not_matched} | {policy for policy, _ in outcome.matched}
    seen |= {record.policy for record in outcome.decisions}
    return never_looked_at(snapshot.validating, request, seen, outcome.excluded)


def never_looked_at(policies: Sequence[CompiledValidatingPolicy] | Sequence[CompiledMutatingPolicy],
                    request: AdmissionRequest, seen: set[str], excluded: bool) -> tuple[NotMatched, ...]:
    """Why each of ``policies`` not in ``seen`` (the ones a dispatch looked at) does not apply: the match
    index left them out because no resourceRule of theirs can match, or they have no binding."""
    reasons = []
    for compiled in policies:
        if compiled.name in seen:
            continue
        if excluded:
            reason = f"{describe_request(request)} is never sent through admission"
        elif not compiled.bindings:
            reason = "policy has no bindings"
        else:
            reason = f"no resourceRule matches {describe_request(request)}"
        reasons.append(NotMatched(compiled.name, None, reason))
    return tuple(reasons)
