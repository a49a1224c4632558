"""What a different set of policies would have answered differently: the shadow rollout's comparison.

Both answers are what kube-apiserver would receive from one endpoint for one request. A difference names
the policies that caused it: for a new denial the policies that deny in the new set, for a lifted one
those that denied in the live set, for a changed patch or warnings the policies that mutated or warned
in either. Pure: no I/O.

Stage: after answer (the daemon's ``--shadow-manifests``). Receives two answers to one request; hands on their
differences.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from staticadm.admission.endpoints import PolicyCheck, Review
from staticadm.admission.response import STATIC_SUFFIX
from staticadm.admission.vocabulary import EnforcementAction


class DifferenceKind(StrEnum):
    """The ``difference`` label of ``staticadm_shadow_differences_total``."""

    ALLOWED_TO_DENIED = "allowed_to_denied"
    DENIED_TO_ALLOWED = "denied_to_allowed"
    PATCH = "patch"
    WARNINGS = "warnings"
    #: Denied by both, with another message (or status reason or code): what the user reads changes.
    DENIAL_MESSAGE = "denial_message"
    #: Audit annotations recorded by one and not the other, or with other values.
    AUDIT_ANNOTATIONS = "audit_annotations"


@dataclass(frozen=True, slots=True)
class Difference:
    kind: DifferenceKind
    #: "policy/binding" that caused it, in the live and in the new set.
    live_policies: tuple[str, ...]
    new_policies: tuple[str, ...]
    detail: str


def _response(review: Review) -> dict[str, Any]:
    return review.review.get("response") or {}


def _by(checks: tuple[PolicyCheck, ...], *actions: EnforcementAction) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f"{check.policy}/{check.binding}" for check in checks if check.action in actions))


def _denial(status: dict[str, Any]) -> tuple[Any, Any, Any]:
    return status.get("code"), status.get("reason"), status.get("message")


def _describe_denial(status: dict[str, Any]) -> str:
    return f"{status.get('code')} {status.get('reason') or ''}: {status.get('message') or ''}".replace("  ", " ")


def _annotating(checks: tuple[PolicyCheck, ...], keys: list[str]) -> tuple[str, ...]:
    """The checks of the policies that own these annotation keys (``policy/key``, as kube-apiserver records
    them in-process; through the webhook ``policy_key`` without ``.static.k8s.io``), or those that audited."""
    def owns(policy: str, key: str) -> bool:
        return key.startswith((f"{policy}/", f"{policy.removesuffix(STATIC_SUFFIX)}_"))

    named = tuple(dict.fromkeys(f"{check.policy}/{check.binding}" for check in checks
                                if any(owns(check.policy, key) for key in keys)))
    return named or _by(checks, EnforcementAction.AUDIT)


def _annotation_difference(live: Review, new: Review, live_annotations: dict[str, str],
                           new_annotations: dict[str, str]) -> Difference | None:
    if live_annotations == new_annotations:
        return None
    gone = sorted(set(live_annotations) - set(new_annotations))
    added = sorted(set(new_annotations) - set(live_annotations))
    changed = sorted(key for key in set(live_annotations) & set(new_annotations)
                     if live_annotations[key] != new_annotations[key])
    parts = [f"audit annotations gone: {', '.join(gone)}"] if gone else []
    if added:
        parts.append(f"new audit annotations: {', '.join(added)}")
    if changed:
        parts.append("audit annotations changed: " + ", ".join(
            f"{key} {live_annotations[key]!r} -> {new_annotations[key]!r}" for key in changed))
    return Difference(DifferenceKind.AUDIT_ANNOTATIONS, _annotating(live.checks, gone + changed),
                      _annotating(new.checks, added + changed), "; ".join(parts))


def compare_reviews(live: Review, new: Review) -> tuple[Difference, ...]:
    live_answer, new_answer = _response(live), _response(new)
    differences = []
    live_allowed, new_allowed = bool(live_answer.get("allowed")), bool(new_answer.get("allowed"))
    if live_allowed and not new_allowed:
        message = (new_answer.get("status") or {}).get("message", "")
        differences.append(Difference(DifferenceKind.ALLOWED_TO_DENIED, (), _by(new.checks, EnforcementAction.DENY),
                                      f"would be denied: {message}"))
    elif new_allowed and not live_allowed:
        message = (live_answer.get("status") or {}).get("message", "")
        differences.append(Difference(DifferenceKind.DENIED_TO_ALLOWED, _by(live.checks, EnforcementAction.DENY), (),
                                      f"would be allowed; denied now: {message}"))
    if live_allowed and new_allowed and live_answer.get("patch") != new_answer.get("patch"):
        differences.append(Difference(DifferenceKind.PATCH, _by(live.checks, EnforcementAction.MUTATE),
                                      _by(new.checks, EnforcementAction.MUTATE),
                                      "the patch would differ" if live_answer.get("patch") and new_answer.get("patch")
                                      else "would be mutated" if new_answer.get("patch") else "would not be mutated"))
    if not live_allowed and not new_allowed:
        live_status, new_status = live_answer.get("status") or {}, new_answer.get("status") or {}
        if _denial(live_status) != _denial(new_status):
            differences.append(Difference(DifferenceKind.DENIAL_MESSAGE, _by(live.checks, EnforcementAction.DENY),
                                          _by(new.checks, EnforcementAction.DENY),
                                          f"would be denied with {_describe_denial(new_status)}; denied now with "
                                          f"{_describe_denial(live_status)}"))
    annotations = _annotation_difference(live, new, live_answer.get("auditAnnotations") or {},
                                         new_answer.get("auditAnnotations") or {})
    if annotations is not None:
        differences.append(annotations)
    live_warnings, new_warnings = set(live_answer.get("warnings") or ()), set(new_answer.get("warnings") or ())
    if live_warnings != new_warnings:
        added, removed = sorted(new_warnings - live_warnings), sorted(live_warnings - new_warnings)
        parts = ([f"new warnings: {'; '.join(added)}"] if added else []) + \
            ([f"warnings gone: {'; '.join(removed)}"] if removed else [])
        differences.append(Difference(DifferenceKind.WARNINGS, _by(live.checks, EnforcementAction.WARN),
                                      _by(new.checks, EnforcementAction.WARN), "; ".join(parts)))
    return tuple(differences)
