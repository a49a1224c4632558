"""The words admission decisions are made of, as Kubernetes spells them.

Each enum's values are the strings kube-apiserver uses in its metric labels and that staticadm writes
to logs and metrics, so a value can be used wherever a plain string was (``StrEnum``).

Shared by every stage: the enums decisions are made of.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorType(StrEnum):
    """``ValidationErrorType`` / ``MutationErrorType`` (``policy/{validating,mutating}/metrics``)."""

    NO_ERROR = "no_error"
    COMPILE_ERROR = "compile_error"
    INVALID_ERROR = "invalid_error"
    #: The scope's cost budget ran out; a single expression over its own limit is an invalid_error.
    OUT_OF_BUDGET = "out_of_budget"


class DecisionAction(StrEnum):
    """``PolicyDecisionAction``: what the validator asks of one validation."""

    ADMIT = "admit"
    DENY = "deny"


class DecisionEvaluation(StrEnum):
    """``PolicyDecisionEvaluation``: what the expression itself did."""

    ADMIT = "admit"
    DENY = "deny"
    ERROR = "error"


class AuditAnnotationAction(StrEnum):
    """``AuditAnnotationConditionEvaluation``: what becomes of one auditAnnotation."""

    PUBLISH = "publish"
    EXCLUDE = "exclude"
    ERROR = "error"


class EnforcementAction(StrEnum):
    """What one (policy, binding) check did to the request: the ``enforcement_action`` metric label."""

    ALLOW = "allow"
    DENY = "deny"
    WARN = "warn"
    AUDIT = "audit"
    #: A mutating policy's mutations changed the object.
    MUTATE = "mutate"


class RequestDecision(StrEnum):
    """The answer to one AdmissionReview as the server's request metrics and logs label it."""

    ALLOW = "allow"
    WARN = "warn"
    DENY = "deny"
    MUTATE = "mutate"
    #: No decision: the request was malformed, timed out or hit an internal error.
    ERROR = "error"


class DecisionSite(StrEnum):
    """Which part of a (policy, binding) a decision comes from: the whole-decision reports say whether the
    validations or mutations ran at all (a configuration error, a failed match condition or a budget that
    ran out ends the binding before or during them)."""

    VALIDATION = "validation"
    MUTATION = "mutation"
    MATCH_CONDITIONS = "matchConditions"
    AUDIT_ANNOTATION = "auditAnnotation"
    CONFIGURATION = "configuration"
    #: The binding's cost budget ran out: one decision for the whole binding.
    BUDGET = "budget"
