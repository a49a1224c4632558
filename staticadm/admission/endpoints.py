"""The seam between the transport and admission evaluation: one function per webhook endpoint.

Each takes the snapshot fixed for the request and answers with the whole AdmissionReview plus the
per-(policy, binding) checks the server turns into metrics and log lines. Pure: no I/O.

Stage: answer (the daemon's entry: the server's ``/validate`` and ``/mutate`` handlers call ``validate`` and
``mutate`` with the parsed request). Receives the snapshot, the namespace source and the parsed request; hands on a
:class:`Review`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Protocol

from staticadm.admission.mutating.dispatcher import MutationOutcome, evaluate_mutating
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.request import AdmissionRequest
from staticadm.admission.response import webhook_audit_annotations
from staticadm.admission.validating.dispatcher import ValidationOutcome, evaluate_validating
from staticadm.admission.vocabulary import EnforcementAction, ErrorType
from staticadm.snapshot import Snapshot


@dataclass(slots=True)  # not frozen, as DecisionRecord: one per decision of every request
class PolicyCheck:
    """One (policy, binding) evaluation, for metrics and the per-decision log line."""

    policy: str
    binding: str
    action: EnforcementAction
    error_type: ErrorType
    seconds: float
    message: str = ""


@dataclass(slots=True)  # not frozen: one per request
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


def combined_response(request: AdmissionRequest, mutation: MutationOutcome | None,
                       validation: ValidationOutcome | None) -> dict[str, Any]:
    """One AdmissionReview for the whole chain: the mutation's denial, or the validation's answer with the
    mutation's patch (what kube-apiserver would end up doing with both webhooks)."""
    if validation is None or (mutation is not None and not mutation.allowed):
        assert mutation is not None
        return dict(mutation.response)
    review = json.loads(json.dumps(validation.response))
    if mutation is not None and "patch" in mutation.response["response"] and validation.allowed:
        review["response"]["patchType"] = mutation.response["response"]["patchType"]
        review["response"]["patch"] = mutation.response["response"]["patch"]
    return review


def review_request(snapshot: Snapshot, namespaces: NamespaceSource, request: AdmissionRequest,
                   endpoint: str, explain: bool = False) -> tuple[MutationOutcome | None, ValidationOutcome | None]:
    """Runs the chosen endpoints: with "both", validation sees the object as the mutations left it. With
    ``explain`` the mutation outcome carries each mutation's own patch (for the whole-decision reports)."""
    mutation = None
    if endpoint in ("mutate", "both"):
        mutation = evaluate_mutating(snapshot, namespaces, request, explain=explain)
        if endpoint == "mutate" or not mutation.allowed:
            return mutation, None
        if mutation.patch:
            request = dataclasses.replace(request, object=mutation.mutated_object)
    return mutation, evaluate_validating(snapshot, namespaces, request)


ENDPOINTS: dict[str, Evaluator] = {"validate": validate, "mutate": mutate}

