"""AdmissionReview responses and Kubernetes' wording for denials, warnings and audit annotations.

Stage: answer. Receives a dispatcher's decisions; hands on the AdmissionReview response and Kubernetes' wording.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticadm import gofmt
from staticadm.manifests.loader import STATIC_SUFFIX

VALIDATION_FAILURE_ANNOTATION = "validation.policy.admission.k8s.io/validation_failure"
#: kube-apiserver 1.37 keeps at most this many failures in the validation_failure annotation.
MAX_VALIDATION_FAILURES = 50
#: ``maxAuditAnnotationValueLength``: longer auditAnnotation values are cut to this many bytes.
MAX_AUDIT_ANNOTATION_VALUE_BYTES = 10 * 1024

#: ``validation.IsQualifiedName``: the part after kube-apiserver's ``<webhook name>/`` prefix.
WEBHOOK_KEY_MAX = 63
#: Where ``validation_failure`` reaches the audit log through the webhook. No "_": every policy's key
#: has one, so nothing else maps here.
WEBHOOK_VALIDATION_FAILURE_KEY = "validation-failure"
_DIGEST_CHARS = 16
#: What a shortened key keeps of the policy and of its key, around "__" and "_" + digest.
_SHORTENED_HEADS = WEBHOOK_KEY_MAX - _DIGEST_CHARS - 3
_SHORTENED_MIN_POLICY = 16

_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}


def reason_to_code(reason: str) -> int:
    """``reasonToCode`` in the validating dispatcher: anything unknown is 422, like Invalid."""
    return _CODES.get(reason, 422)


def denial_message(policy: str, binding: str | None, message: str) -> str:
    if binding is None:
        return f"ValidatingAdmissionPolicy '{policy}' denied request: {message}"
    return f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"


def warning_message(policy: str, binding: str, message: str) -> str:
    return f"Validation failed for ValidatingAdmissionPolicy '{policy}' with binding '{binding}': {message}"


def truncate_bytes(value: str, limit: int) -> str:
    """Go's ``value[:limit]`` on the UTF-8 bytes; a cut character becomes U+FFFD as Go's JSON would."""
    data = value.encode()
    if len(data) <= limit:
        return value
    return data[:limit].decode(errors="replace")


@dataclass(frozen=True, slots=True)
class ValidationFailure:
    """One entry of the ``validation_failure`` audit annotation (Audit action)."""

    message: str
    policy: str
    binding: str
    expression_index: int
    validation_actions: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "policy": self.policy, "binding": self.binding,
                "expressionIndex": self.expression_index, "validationActions": list(self.validation_actions)}


def audit_annotations(failures: Sequence[ValidationFailure], published: Mapping[str, str]) -> dict[str, str]:
    out = dict(published)
    if failures:
        recorded = [failure.to_json() for failure in failures[:MAX_VALIDATION_FAILURES]]
        out[VALIDATION_FAILURE_ANNOTATION] = gofmt.marshal_json(recorded)
    return out


@functools.lru_cache(maxsize=4096)
def webhook_audit_key(key: str) -> str:
    """The key under which the audit annotation kube-apiserver would record in-process as ``key`` is answered
    through the webhook, so that it survives: kube-apiserver prefixes each webhook key with ``<webhook
    name>/`` and drops (logging a warning) any that is then not a qualified name with exactly one "/".

    ``<policy>/<key>`` becomes ``<policy without .static.k8s.io>_<key>``: policy names are DNS subdomains
    (no "_") and keys start with a letter or digit, so the first "_" splits it back and no two keys meet.
    One longer than 63 characters keeps what fits of both around "__" (which no short form has, the
    policy part having no "_") and ends in 16 hex digits of the SHA-256 of the in-process key.
    """
    if key == VALIDATION_FAILURE_ANNOTATION:
        return WEBHOOK_VALIDATION_FAILURE_KEY
    policy, _, name = key.partition("/")
    stem = policy.removesuffix(STATIC_SUFFIX)
    short = f"{stem}_{name}"
    if len(short) <= WEBHOOK_KEY_MAX:
        return short
    digest = hashlib.sha256(key.encode()).hexdigest()[:_DIGEST_CHARS]
    stem_head = stem[:max(_SHORTENED_MIN_POLICY, _SHORTENED_HEADS - len(name))]
    return f"{stem_head}__{name[:_SHORTENED_HEADS - len(stem_head)]}_{digest}"


def webhook_audit_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    return {webhook_audit_key(key): value for key, value in annotations.items()}


def review_response(api_version: str, uid: str, *, allowed: bool, status: Mapping[str, Any] | None = None,
                    warnings: Sequence[str] = (), annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An AdmissionReview carrying a response, in the request's apiVersion (Go's omitempty applied)."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if status is not None:
        response["status"] = dict(status)
    if warnings:
        response["warnings"] = list(warnings)
    if annotations:
        response["auditAnnotations"] = dict(annotations)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def denial_status(message: str, reason: str) -> dict[str, Any]:
    return {"code": reason_to_code(reason), "reason": reason, "message": message}


def bad_request_response(api_version: str, uid: str, message: str) -> dict[str, Any]:
    """The answer to a review we could not read: denied with 400, so a broken caller fails closed."""
    status = {"code": 400, "reason": "BadRequest", "message": f"staticadm: invalid AdmissionReview: {message}"}
    return review_response(api_version, uid, allowed=False, status=status)
