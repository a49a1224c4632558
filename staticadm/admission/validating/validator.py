"""The validator of one ValidatingAdmissionPolicy for one binding: Kubernetes' ``validator.Validate``.

What a policy decides for a request (its match conditions, validations, messageExpressions and audit
annotations, with Kubernetes' cost scopes) as data: ``dispatcher.py`` routes each decision through the binding's
validationActions. Nothing here depends on the binding.

Stage: evaluate (``validating/validator.go``). Receives a compiled policy, the resource and kind it matched as, the
namespace object and the request's activations; hands on decisions as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from staticadm import gofmt
from staticadm.admission.cel.activation import RequestActivations
from staticadm.admission.cel.filter import evaluate_match_conditions, run_program
from staticadm.admission.generic import deferred
from staticadm.admission.outcomes import ExpressionFailure, aggregate_failures
from staticadm.admission.request import GroupVersionKind, GroupVersionResource
from staticadm.admission.vocabulary import (
    AuditAnnotationAction,
    DecisionAction,
    DecisionEvaluation,
    DecisionSite,
    ErrorType,
)
from staticadm.cel import BUDGET_EXHAUSTED_MESSAGE, CompiledExpression, EvalError
from staticadm.cel.cost import RUNTIME_CEL_COST_BUDGET, RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS
from staticadm.cel.evaluation import CostBudget, SharedActivation
from staticadm.cel.string_format import type_name
from staticadm.compiled import CompiledValidatingPolicy, ValidationsTogether

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
class AuditResult:
    key: str
    action: AuditAnnotationAction
    value: str = ""
    error: str = ""


@dataclass(slots=True)  # not frozen: built for every binding a match condition skips (see Invocation)
class ValidateResult:
    decisions: tuple[PolicyDecision, ...] = ()
    audit: tuple[AuditResult, ...] = ()
    #: Name of the matchCondition that evaluated to false, when one did.
    skipped_by: str | None = None


NOTHING = ValidateResult()
_PASSED: tuple[Any, ExpressionFailure | None] = (True, None)


def validate(compiled: CompiledValidatingPolicy, resource: GroupVersionResource, kind: GroupVersionKind,
              namespace_object: Mapping[str, Any] | None, activations: RequestActivations) -> ValidateResult:
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
            return ValidateResult(skipped_by=false_condition)
        if failures:
            if error_action is DecisionAction.ADMIT:
                return ValidateResult(skipped_by="")
            aggregated = aggregate_failures(failures)
            return ValidateResult((PolicyDecision(DecisionAction.DENY, DecisionEvaluation.ERROR, aggregated.message,
                                                   error_type=aggregated.error_type,
                                                   site=DecisionSite.MATCH_CONDITIONS),))

    activation = activations.for_evaluation(resource, kind, namespace_object)
    context = activations.scope(activation, RUNTIME_CEL_COST_BUDGET)
    outcomes: list[tuple[Any, ExpressionFailure | None]] = []
    all_passed = True
    passed: tuple[int, ...] = ()
    together = _validations_together(compiled) if activations.share else None
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
                return ValidateResult((_out_of_budget(error_action),))
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

    audit: list[AuditResult] = []
    if compiled.audit_annotations:
        audit_context = activations.scope(activation, RUNTIME_CEL_COST_BUDGET)
        for annotation, program in compiled.audit_annotations:
            value, failure = run_program(program, annotation.value_expression, audit_context)
            if failure is not None and failure.ends_scope:
                return ValidateResult((_out_of_budget(error_action),))
            if failure is not None:
                action = (AuditAnnotationAction.EXCLUDE if error_action is DecisionAction.ADMIT
                          else AuditAnnotationAction.ERROR)
                audit.append(AuditResult(annotation.key, action, error=failure.message))
            elif value is None:
                audit.append(AuditResult(annotation.key, AuditAnnotationAction.EXCLUDE))
            elif isinstance(value, str):
                trimmed = gofmt.trim_space(value)
                audit.append(AuditResult(annotation.key, AuditAnnotationAction.PUBLISH, trimmed) if trimmed
                             else AuditResult(annotation.key, AuditAnnotationAction.EXCLUDE))
            else:
                audit.append(AuditResult(annotation.key, AuditAnnotationAction.ERROR, error=(
                    f"valueExpression '{annotation.value_expression}' resulted in unsupported return type: "
                    f"{type_name(value)}. Return type must be either string or null.")))
    if not decisions and not audit:
        return NOTHING
    return ValidateResult(tuple(decisions), tuple(audit))


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
            candidate = gofmt.trim_space(result)
            if len(candidate.encode()) <= MAX_MESSAGE_EXPRESSION_BYTES and "\n" not in candidate:
                message = candidate
        if not message and spec.message:
            message = gofmt.trim_space(spec.message)
        if not message:
            message = f"failed expression: {gofmt.trim_space(spec.expression)}"
        decisions.append(PolicyDecision(DecisionAction.DENY, DecisionEvaluation.DENY, message, spec.reason or "Invalid",
                                        index))
    return decisions


def _out_of_budget(error_action: DecisionAction) -> PolicyDecision:
    """The one decision of a binding whose cost budget ran out."""
    return PolicyDecision(error_action, DecisionEvaluation.ERROR, BUDGET_EXHAUSTED_MESSAGE,
                          error_type=ErrorType.OUT_OF_BUDGET, site=DecisionSite.BUDGET)


def _validations_together(compiled: CompiledValidatingPolicy) -> ValidationsTogether | None:
    """The policy's validations as one program, built on first use; None while it is being built off the request
    path (``generic/deferred.py``): the validations then run one by one."""
    together = compiled.together
    if together.built:
        return together
    if deferred.build_later(("together", id(together)), compiled.validations_together):
        return None
    return compiled.validations_together()


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
