"""What evaluating one request's policies produced, for the decision, the explain view, logs and metrics:
a record per decision, the policies that did not apply, and why an expression gave no value.

Stage: decide, the records. Receives what the evaluators found; hands it on to the dispatchers, reports, logs and
metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from staticadm.admission.vocabulary import DecisionSite, EnforcementAction, ErrorType
from staticadm.cel import COST_LIMIT_MESSAGE, EvalError


# Not frozen: one per decision of every request (a frozen dataclass pays an object.__setattr__ per field to build);
# nothing changes one once made.
@dataclass(slots=True)
class DecisionRecord:
    """What happened for one decision of one (policy, binding): the explain view and metrics read it."""

    policy: str
    binding: str | None
    action: EnforcementAction
    error_type: ErrorType
    message: str = ""
    reason: str = ""
    expression_index: int | None = None
    #: Wall time spent on this (policy, binding), for the check-duration histogram.
    seconds: float = 0.0
    #: Where the decision comes from; ``expression_index`` indexes the validations or mutations.
    site: DecisionSite = DecisionSite.VALIDATION


@dataclass(slots=True)  # not frozen: one per candidate that does not apply, on every request (see Invocation)
class NotMatched:
    policy: str
    binding: str | None
    #: The reason, or how to say it (built only when read: see MatchOutcome.why).
    why: str | Callable[[], str]

    @property
    def reason(self) -> str:
        return self.why() if callable(self.why) else self.why


@dataclass(frozen=True, slots=True)
class ExpressionFailure:
    """Why one expression gave no value: Kubernetes' text, and its error type decided from the evaluation
    itself (kube-apiserver derives the same type from the text's prefix)."""

    message: str
    error_type: ErrorType

    @property
    def ends_scope(self) -> bool:
        """The scope's budget ran out: Kubernetes evaluates nothing more in it."""
        return self.error_type is ErrorType.OUT_OF_BUDGET


def expression_failure(source: str, outcome: EvalError) -> ExpressionFailure:
    if outcome.budget_exhausted:
        # Not about one expression: the scope's budget ran out and Kubernetes says so as it is.
        return ExpressionFailure(outcome.message, ErrorType.OUT_OF_BUDGET)
    if outcome.cost_exceeded:
        # One expression over its own limit is an invalid_error in kube-apiserver's metrics.
        return ExpressionFailure(f"expression '{source}' resulted in error: {COST_LIMIT_MESSAGE}",
                                 ErrorType.INVALID_ERROR)
    return ExpressionFailure(f"expression '{source}' resulted in error: {outcome.message}", ErrorType.INVALID_ERROR)


def aggregate_failures(failures: Sequence[ExpressionFailure]) -> ExpressionFailure:
    """``utilerrors.NewAggregate(errs)``: one error stays itself; several are listed, an invalid_error. Its text
    names each distinct message once (``aggregate.Error``), without brackets when only one is left."""
    if len(failures) == 1:
        return failures[0]
    messages = list(dict.fromkeys(failure.message for failure in failures))
    text = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    return ExpressionFailure(text, ErrorType.INVALID_ERROR)
