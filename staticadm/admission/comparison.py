"""What a different set of policies would have answered differently: the shadow rollout's comparison.

Both answers are what kube-apiserver would receive from one endpoint for one request. A difference names
the policies that caused it: for a new denial the policies that deny in the new set, for a lifted one
those that denied in the live set, for a changed patch or warnings the policies that mutated or warned
in either. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from staticadm.admission.endpoints import PolicyCheck, Review
from staticadm.admission.vocabulary import EnforcementAction


class DifferenceKind(StrEnum):
    """The ``difference`` label of ``staticadm_shadow_differences_total``."""

    ALLOWED_TO_DENIED = "allowed_to_denied"
    DENIED_TO_ALLOWED = "denied_to_allowed"
    PATCH = "patch"
    WARNINGS = "warnings"


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
    live_warnings, new_warnings = set(live_answer.get("warnings") or ()), set(new_answer.get("warnings") or ())
    if live_warnings != new_warnings:
        added, removed = sorted(new_warnings - live_warnings), sorted(live_warnings - new_warnings)
        parts = ([f"new warnings: {'; '.join(added)}"] if added else []) + \
            ([f"warnings gone: {'; '.join(removed)}"] if removed else [])
        differences.append(Difference(DifferenceKind.WARNINGS, _by(live.checks, EnforcementAction.WARN),
                                      _by(new.checks, EnforcementAction.WARN), "; ".join(parts)))
    return tuple(differences)
