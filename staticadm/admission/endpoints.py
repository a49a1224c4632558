"""The seam between the transport and admission evaluation: one function per webhook endpoint.

Each takes the snapshot fixed for the request and answers with the whole AdmissionReview plus the
per-(policy, binding) checks the server turns into metrics and log lines. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from staticadm.admission.mutating import evaluate_mutating
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.request import AdmissionRequest
from staticadm.admission.response import webhook_audit_annotations
from staticadm.admission.validating import evaluate_validating
from staticadm.admission.vocabulary import EnforcementAction, ErrorType
from staticadm.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """One (policy, binding) evaluation, for metrics and the per-decision log line."""

    policy: str
    binding: str
    action: EnforcementAction
    error_type: ErrorType
    seconds: float
    message: str = ""


@dataclass(frozen=True, slots=True)
class Review:
    #: The whole AdmissionReview to answer with, in the request's apiVersion.
    review: dict[str, Any]
    checks: tuple[PolicyCheck, ...]


class Evaluator(Protocol):
    def __call__(self, snapshot: Snapshot, namespaces: NamespaceSource, request: AdmissionRequest, *,
                 deadline: float | None = None) -> Review: ...


def _checks(decisions: Any) -> tuple[PolicyCheck, ...]:
    return tuple(PolicyCheck(record.policy, record.binding or "", record.action, record.error_type, record.seconds,
                             record.message) for record in decisions)


def validate(snapshot: Snapshot, namespaces: NamespaceSource, request: AdmissionRequest, *,
             deadline: float | None = None) -> Review:
    outcome = evaluate_validating(snapshot, namespaces, request, deadline=deadline, explain=False)
    review = dict(outcome.response)
    if outcome.annotations:
        # The in-process keys would all be dropped by kube-apiserver once it prefixes the webhook's name.
        review["response"] = {**review["response"], "auditAnnotations": webhook_audit_annotations(outcome.annotations)}
    return Review(review, _checks(outcome.decisions))


def mutate(snapshot: Snapshot, namespaces: NamespaceSource, request: AdmissionRequest, *,
           deadline: float | None = None) -> Review:
    outcome = evaluate_mutating(snapshot, namespaces, request, deadline=deadline)
    return Review(dict(outcome.response), _checks(outcome.decisions))


ENDPOINTS: dict[str, Evaluator] = {"validate": validate, "mutate": mutate}

