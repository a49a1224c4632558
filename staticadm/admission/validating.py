"""ValidatingAdmissionPolicy evaluation: kube-apiserver's validating dispatcher and validator.

``evaluate_validating`` walks the (policy, binding) pairs in Kubernetes' order, routes each deny
decision through the binding's validationActions and reports the first denial, exactly as
``policy/validating/dispatcher.go`` and ``validator.go`` do. Every decision is also returned as data
(policy, binding, action, error type) for logs, metrics and the explain view.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from staticadm.admission.activation import (
    DecisionRecord,
    ExpressionFailure,
    NotMatched,
    RequestActivations,
    aggregate_failures,
    evaluate_match_conditions,
    namespace_object_for,
    policy_candidate_set,
    run_program,
)
from staticadm.admission.all_clear import PolicyClear, SetProgram, all_clear, set_program
from staticadm.admission.dispatch import (
    INVOKED,
    POLICY_DONE,
    SKIPPED,
    Invocation,
    Matched,
    match_validating,
    not_matched_why,
)
from staticadm.admission.match_plan import MATCHED_ORIGINAL, RequestMatch, matched_as
from staticadm.admission.matching import describe_request, is_excluded
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
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
from staticadm.admission.vocabulary import (
    AuditAnnotationAction,
    DecisionAction,
    DecisionEvaluation,
    DecisionSite,
    EnforcementAction,
    ErrorType,
)
from staticadm.cel import BUDGET_EXHAUSTED_MESSAGE, CompiledExpression, EvalError, admission_environment
from staticadm.cel.cost import RUNTIME_CEL_COST_BUDGET, RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS
from staticadm.cel.evaluation import CostBudget, SharedActivation
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.model import ValidatingAdmissionPolicyBinding
from staticadm.snapshot import Snapshot

#: ``celconfig.MaxEvaluatedMessageExpressionSizeBytes``.
MAX_MESSAGE_EXPRESSION_BYTES = 5 * 1024


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """One result of the validator for one binding (``PolicyDecision`` in Kubernetes)."""

    action: DecisionAction
    evaluation: DecisionEvaluation
    message: str = ""
    reason: str = ""
    #: Index of the validation; None for match-condition, configuration and audit-annotation results.
    expression_index: int | None = None
    #: Decided from the evaluation itself; kube-apiserver reads the same from the message's prefix.
    error_type: ErrorType = ErrorType.NO_ERROR
    site: DecisionSite = DecisionSite.VALIDATION


@dataclass(frozen=True, slots=True)
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
    validated: dict[tuple[Any, ...], tuple[_ValidateResult, float]] | None = None

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


def _cel_type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class _AuditResult:
    key: str
    action: AuditAnnotationAction
    value: str = ""
    error: str = ""


@dataclass(slots=True)  # not frozen: built for every binding a match condition skips (see Invocation)
class _ValidateResult:
    decisions: tuple[PolicyDecision, ...] = ()
    audit: tuple[_AuditResult, ...] = ()
    #: Name of the matchCondition that evaluated to false, when one did.
    skipped_by: str | None = None


_NOTHING = _ValidateResult()
_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})
_PASSED: tuple[Any, ExpressionFailure | None] = (True, None)


def _validate(compiled: CompiledValidatingPolicy, resource: GroupVersionResource, kind: GroupVersionKind,
              namespace_object: Mapping[str, Any] | None, activations: RequestActivations) -> _ValidateResult:
    """``validator.Validate`` for one binding, with Kubernetes' cost scopes: validations share one
    budget, messageExpressions what it left, audit annotations a budget of their own; a scope that runs
    out ends the binding's evaluation with one error decision."""
    error_action = DecisionAction.ADMIT if compiled.failure_policy == "Ignore" else DecisionAction.DENY

    if compiled.match_conditions:
        # Match conditions see the request's own resource and no namespaceObject, in their own scope.
        false_condition, failures = evaluate_match_conditions(compiled.match_conditions, activations.scope(
            activations.for_match_conditions(namespace_object), RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS),
            activations.remembered)
        if false_condition is not None:
            return _ValidateResult(skipped_by=false_condition)
        if failures:
            if error_action is DecisionAction.ADMIT:
                return _ValidateResult(skipped_by="")
            aggregated = aggregate_failures(failures)
            return _ValidateResult((PolicyDecision(DecisionAction.DENY, DecisionEvaluation.ERROR, aggregated.message,
                                                   error_type=aggregated.error_type,
                                                   site=DecisionSite.MATCH_CONDITIONS),))

    activation = activations.for_evaluation(resource, kind, namespace_object)
    context = activations.scope(activation, RUNTIME_CEL_COST_BUDGET)
    outcomes: list[tuple[Any, ExpressionFailure | None]] = []
    all_passed = True
    passed: tuple[int, ...] = ()
    together = compiled.validations_together() if activations.share else None
    if together is not None and together.program is not None and context.run_conjunction(together.program,
                                                                                         together.static_cost):
        # Those validations were all true, at what each would have cost; the others run one by one after them.
        # Order within a scope changes nothing: costs only add up, and a budget running out ends the scope as
        # one decision wherever it happens.
        passed = together.indexes
    for index, validation in enumerate(compiled.validations):
        if index in passed:
            outcomes.append(_PASSED)
            continue
        outcome = run_program(validation.expression, validation.validation.expression, context)
        if outcome[0] is not True:
            all_passed = False
            if outcome[1] is not None and outcome[1].ends_scope:
                return _ValidateResult((_out_of_budget(error_action),))
        outcomes.append(outcome)
    budget = context.budget
    assert budget is not None
    if (all_passed or all(value is True or failure is not None for value, failure in outcomes)) and (
            compiled.message_cost_bound is not None and compiled.message_cost_bound <= budget.remaining):
        # Nothing denied, and the messageExpressions cannot run out of what the budget has left: their
        # values are never read and they cannot fail, so they are not evaluated (see _messages).
        messages, message_error = None, None
    else:
        messages, message_error = _messages(compiled, activations, activation, budget)
    if all_passed and message_error is None:
        decisions: list[PolicyDecision] = []
    else:
        decisions = _decisions(compiled, outcomes, messages, message_error, error_action)

    audit: list[_AuditResult] = []
    if compiled.audit_annotations:
        audit_context = activations.scope(activation, RUNTIME_CEL_COST_BUDGET)
        for annotation, program in compiled.audit_annotations:
            value, failure = run_program(program, annotation.value_expression, audit_context)
            if failure is not None and failure.ends_scope:
                return _ValidateResult((_out_of_budget(error_action),))
            if failure is not None:
                action = (AuditAnnotationAction.EXCLUDE if error_action is DecisionAction.ADMIT
                          else AuditAnnotationAction.ERROR)
                audit.append(_AuditResult(annotation.key, action, error=failure.message))
            elif value is None:
                audit.append(_AuditResult(annotation.key, AuditAnnotationAction.EXCLUDE))
            elif isinstance(value, str):
                trimmed = value.strip()
                audit.append(_AuditResult(annotation.key, AuditAnnotationAction.PUBLISH, trimmed) if trimmed
                             else _AuditResult(annotation.key, AuditAnnotationAction.EXCLUDE))
            else:
                audit.append(_AuditResult(annotation.key, AuditAnnotationAction.ERROR, error=(
                    f"valueExpression '{annotation.value_expression}' resulted in unsupported return type: "
                    f"{_cel_type_name(value)}. Return type must be either string or null.")))
    if not decisions and not audit:
        return _NOTHING
    return _ValidateResult(tuple(decisions), tuple(audit))


def _decisions(compiled: CompiledValidatingPolicy, outcomes: list[tuple[Any, ExpressionFailure | None]],
               messages: list[Any] | None, message_error: str | None,
               error_action: DecisionAction) -> list[PolicyDecision]:
    """The decisions of validations that did not pass (a passing one is no decision anyone reads, and
    kube-apiserver's metrics skip it too)."""
    decisions = []
    for index, (validation, (value, failure)) in enumerate(zip(compiled.validations, outcomes, strict=True)):
        if failure is not None:
            decisions.append(PolicyDecision(error_action, DecisionEvaluation.ERROR, failure.message,
                                            expression_index=index, error_type=failure.error_type))
            continue
        if message_error is not None:
            decisions.append(PolicyDecision(error_action, DecisionEvaluation.ERROR,
                                            f"failed messageExpression: {message_error}", expression_index=index,
                                            error_type=ErrorType.INVALID_ERROR))
            continue
        if value is True:
            continue
        spec = validation.validation
        message = ""
        result = messages[index] if messages is not None else None
        if isinstance(result, str):
            candidate = result.strip()
            if len(candidate.encode()) <= MAX_MESSAGE_EXPRESSION_BYTES and "\n" not in candidate:
                message = candidate
        if not message and spec.message:
            message = spec.message.strip()
        if not message:
            message = f"failed expression: {spec.expression.strip()}"
        decisions.append(PolicyDecision(DecisionAction.DENY, DecisionEvaluation.DENY, message, spec.reason or "Invalid",
                                        index))
    return decisions


def _out_of_budget(error_action: DecisionAction) -> PolicyDecision:
    """The one decision of a binding whose cost budget ran out."""
    return PolicyDecision(error_action, DecisionEvaluation.ERROR, BUDGET_EXHAUSTED_MESSAGE,
                          error_type=ErrorType.OUT_OF_BUDGET, site=DecisionSite.BUDGET)


def _messages(compiled: CompiledValidatingPolicy, activations: RequestActivations, activation: SharedActivation,
              budget: CostBudget) -> tuple[list[Any] | None, str | None]:
    """The messageExpression results, by validation, and the error that ended their scope if any.

    Kubernetes evaluates every messageExpression (of passing validations too) with what the validations
    left of the budget, and when that runs out every validation without an error of its own becomes an
    error. Their values only matter for a denial, so the caller skips them when nothing was denied and
    they cannot cost more than the budget has left: each expression and variable costs at most
    ``MAX_EXPRESSION_COST`` unless it multiplies sizes (contains, matches, find); that bound is
    ``compiled.message_cost_bound``.
    """
    if not compiled.message_programs:
        return None, None
    results: list[Any] = [None] * len(compiled.validations)
    # messageExpressions get their own scope over what the validations left, and no authorizer.
    message_context = activations.scope(activation, budget)
    for index, validation in enumerate(compiled.validations):
        program = validation.message_expression
        if isinstance(program, CompiledExpression):
            result = message_context.run(program)
            if isinstance(result, EvalError) and result.budget_exhausted:
                return results, result.message
            results[index] = result
    return results, None


def _evaluate_binding(state: _Dispatch, invocation: Invocation[CompiledValidatingPolicy], request: AdmissionRequest,
                      namespaces: NamespaceSource, collector: dict[str, list[str]]) -> None:
    compiled = invocation.compiled
    binding = cast(ValidatingAdmissionPolicyBinding, invocation.binding)
    policy_name, binding_name = compiled.name, binding.metadata.name
    namespace_object, namespace_error = namespace_object_for(request, namespaces, compiled.uses_namespace_object)
    if namespace_error is not None:
        state.config_error(compiled, binding_name, namespace_error)
        return
    shared = state.validated
    # By identity: the resource and kind are the request's own objects, and hashing them costs more.
    key = (id(compiled), id(invocation.resource), id(invocation.kind), id(namespace_object))
    remembered = shared.get(key) if shared is not None else None
    if remembered is None:
        started = time.perf_counter()
        result = _validate(compiled, invocation.resource, invocation.kind, namespace_object, state.activations)
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
    if result is _NOTHING:
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


def _clear_policies(state: _Dispatch, matched: Matched, request: AdmissionRequest,
                    view: RequestMatch) -> tuple[_SetOf, list[PolicyClear]] | None:
    """The invoked policies that can join a set's program and what each does, when one engine call finds the
    request all clear for all of them (``all_clear.py``); None when the bindings are to be evaluated one by one."""
    if matched.config_errors or not matched.invoked:
        return None
    program = matched.program
    if program is None:
        program = matched.program = _SetOf.of(matched)
    if program.entry is None:
        return None
    resource, kind = request.original_resource, request.original_kind
    namespace_object, namespace_error = namespace_object_for(request, view, program.uses_namespace_object)
    if namespace_error is not None:
        return None
    activations = state.activations
    context = activations.scope(activations.for_evaluation(resource, kind, namespace_object), None)
    found = all_clear(program.entry, program.joined, context)
    return None if found is None else (program, found)


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
    def of(cls, matched: Matched) -> _SetOf:
        joined = tuple(compiled for compiled in matched.invoked if compiled.joins_sets)
        equivalent = any(step[0] == INVOKED and step[3] != MATCHED_ORIGINAL for step in matched.steps)
        return cls(joined, set_program(joined) if joined and not equivalent else None,
                   any(compiled.uses_namespace_object for compiled in joined), len(joined) == len(matched.invoked))


def _published(program: _SetOf, found: list[PolicyClear]) -> dict[str, str]:
    """The audit annotations of a request all clear for every policy it invokes: each policy's bindings publish
    the same values (what the validator decides never depends on the binding), so each key has one value."""
    published = {}
    for compiled, clear in zip(program.joined, found, strict=True):
        for key, value in clear.published:
            published[f"{compiled.name}/{key}"] = truncate_bytes(value, MAX_AUDIT_ANNOTATION_VALUE_BYTES)
    return published


def _dispatch(state: _Dispatch, matched: Matched, request: AdmissionRequest, view: RequestMatch,
              clear: dict[int, PolicyClear] | None) -> None:
    """kube-apiserver's dispatcher loop over the matching phase's steps; the policies in ``clear`` (an all-clear
    request's) are not evaluated again."""
    collector: dict[str, list[str]] = {}
    for step in matched.steps:
        what = step[0]
        if what == INVOKED:
            compiled, binding = step[1], step[2]
            found = clear.get(id(compiled)) if clear is not None else None
            if found is None:
                resource, kind = matched_as(step[3], request)
                _evaluate_binding(state, Invocation(compiled, binding, resource, kind), request, view, collector)
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
    (``dispatch.match_validating``). False evaluates and matches everything per request and binding, as the
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
    state = _Dispatch(activations=RequestActivations(admission_environment(False), request, deadline,
                                                     share=share_evaluations,
                                                     reads=candidates.reads if prune_objects else None,
                                                     rounds_key="validating"),
                      validated={} if share_evaluations else None)
    view = RequestMatch(request, namespaces)
    matched = match_validating(snapshot.validating, candidates, view, remember=share_evaluations)
    cleared = _clear_policies(state, matched, request, view) if one_call and share_evaluations else None
    if cleared is not None and cleared[0].whole and not explain:
        # Nothing to decide and nobody to tell which bindings applied: only the annotations are left to publish.
        state.published = _published(*cleared)
    else:
        clear = None if cleared is None else {id(compiled): found
                                              for compiled, found in zip(cleared[0].joined, cleared[1], strict=True)}
        _dispatch(state, matched, request, view, clear)

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
