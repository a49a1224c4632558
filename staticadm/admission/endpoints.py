"""The seam between the transport and admission evaluation: one function per webhook endpoint.

Each takes the snapshot fixed for the request and answers with the whole AdmissionReview plus the
per-(policy, binding) checks the server turns into metrics and log lines. Pure: no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.request import AdmissionRequest
from staticadm.admission.response import review_response
from staticadm.admission.validating import evaluate_validating
from staticadm.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """One (policy, binding) evaluation, for metrics and the per-decision log line."""

    policy: str
    binding: str
    action: str
    error_type: str
    seconds: float
    message: str = ""


@dataclass(frozen=True, slots=True)
class Review:
    #: The whole AdmissionReview to answer with, in the request's apiVersion.
    review: dict[str, Any]
    checks: tuple[PolicyCheck, ...]


Evaluator = Callable[[Snapshot, NamespaceSource, AdmissionRequest], Review]


def validate(snapshot: Snapshot, namespaces: NamespaceSource, request: AdmissionRequest) -> Review:
    started = time.perf_counter()
    outcome = evaluate_validating(snapshot, namespaces, request)
    # evaluate_validating does not time each binding; every check is charged the whole evaluation, an
    # upper bound, so the duration histogram can only overstate a policy's cost.
    seconds = time.perf_counter() - started
    checks = tuple(PolicyCheck(record.policy, record.binding or "", record.action, record.error_type, seconds,
                               record.message) for record in outcome.decisions)
    return Review(dict(outcome.response), checks)


def mutate(_snapshot: Snapshot, _namespaces: NamespaceSource, request: AdmissionRequest) -> Review:
    # Mutating admission policies are loaded but not evaluated yet: until they are, /mutate allows
    # every request unchanged (no patch), which is what kube-apiserver does with no MAP bindings.
    return Review(review_response(request.review_api_version, request.uid, allowed=True), ())


ENDPOINTS: dict[str, Evaluator] = {"validate": validate, "mutate": mutate}
