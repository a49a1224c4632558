"""Runs policy test files with the daemon's engine and compares each answer with its expectation."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from staticadm.admission.endpoints import combined_response, review_request
from staticadm.admission.mutating.dispatcher import MutationOutcome
from staticadm.admission.namespaces import NamespaceFileError, NamespaceSource, RequestOnlyNamespaces, parse_namespaces
from staticadm.admission.request import RequestError, parse_admission_review
from staticadm.admission.validating.dispatcher import ValidationOutcome
from staticadm.admission.vocabulary import EnforcementAction
from staticadm.manifests.loader import load_manifest_paths
from staticadm.offline.decision_report import decision, request_summary
from staticadm.offline.request_builder import (
    ObjectInputError,
    RequestSettings,
    pair_old_objects,
    review_for_object,
)
from staticadm.policytest.selection import CaseSelector
from staticadm.policytest.spec import Expectation, TestCase, TestFile
from staticadm.snapshot import Snapshot, build_snapshot


@dataclass(frozen=True, slots=True)
class CaseResult:
    file: str
    test: str
    case: str
    passed: bool
    #: What differed, one line each (empty when passed).
    failures: tuple[str, ...]
    #: Diffs (expected vs got) of objects and patches, for the report.
    diffs: tuple[str, ...]
    #: The answer the engine gave, as kube-apiserver would receive it.
    response: dict[str, Any]
    #: The request (without its objects) and the whole decision (every policy's and binding's result,
    #: ``decision_report``); empty when the request could not be built.
    request: dict[str, Any] = dataclasses.field(default_factory=dict)
    decision: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Wall time of the evaluation (JUnit's testcase time).
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class FileResult:
    file: str
    test: str
    #: Why the file's cases could not run (invalid manifests, unusable namespaces); empty when they ran.
    problems: tuple[str, ...]
    cases: tuple[CaseResult, ...]


def _denier(mutation: MutationOutcome | None, validation: ValidationOutcome | None) -> tuple[str, str] | None:
    records = (mutation.decisions if mutation is not None and not mutation.allowed else ()) or \
        (validation.decisions if validation is not None else ())
    for record in records:
        if record.action is EnforcementAction.DENY:
            return record.policy, record.binding or ""
    return None


def _pretty(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _diff(label: str, expected: Any, got: Any) -> str:
    import difflib

    lines = difflib.unified_diff(_pretty(expected), _pretty(got), f"expected {label}", f"got {label}", lineterm="")
    return "\n".join(lines)


#: How many policies an unexpected allowance names before it counts the rest.
_WHY_POLICIES = 5


def why_allowed(summary: dict[str, Any], report: dict[str, Any]) -> str:
    """Why nothing denied the request: its user (what match conditions most often test) and what each
    policy made of it, the ones that looked at the request first."""
    user = summary.get("userInfo") or {}
    looked, passed_over = [], []
    for phase in ("mutating", "validating"):
        for policy in (report.get(phase) or {}).get("policies", []):
            name = policy["policy"]
            if not policy.get("bindings"):
                passed_over.append(f"{name}: not matched: {policy.get('reason') or 'no binding applies'}")
                continue
            for binding in policy["bindings"]:
                what = f"{name} binding {binding['binding']}"
                if binding["result"] == "skip":
                    looked.append(f"{what}: not matched: {binding.get('reason', '')}")
                elif "validationActions" in binding and binding["result"] == "fail":
                    looked.append(f"{what}: failed a validation, but its validationActions are "
                                  f"{binding['validationActions']}")
                else:
                    looked.append(f"{what}: {binding['result']}")
    named = [*looked, *passed_over]
    parts = [f"user {user.get('username', '')!r} in groups {list(user.get('groups') or [])}",
             *named[:_WHY_POLICIES]]
    if len(named) > _WHY_POLICIES:
        parts.append(f"{len(named) - _WHY_POLICIES} more not denying")
    if not named:
        parts.append("no policy in the manifests")
    return "; ".join(parts)


def compare(expect: Expectation, answer: dict[str, Any], denied_by: tuple[str, str] | None,
            mutated: Any, allowed_because: str = "") -> tuple[list[str], list[str]]:
    """(failures, diffs) of one answer against its expectation; ``allowed_because`` says why an allowed
    request was (``why_allowed``)."""
    failures: list[str] = []
    diffs: list[str] = []
    response = answer.get("response") or {}
    status = response.get("status") or {}
    allowed = bool(response.get("allowed"))
    if allowed != expect.allowed:
        why = f": {status.get('message')}" if status.get("message") else ""
        if allowed and allowed_because:
            why = f" ({allowed_because})"
        failures.append(f"expected {'allowed' if expect.allowed else 'denied'}, got "
                        f"{'allowed' if allowed else 'denied'}{why}")
    if expect.denied_by is not None:
        policy, binding = expect.denied_by
        if denied_by is None or denied_by[0] != policy or (binding and denied_by[1] != binding):
            failures.append(f"expected denied by policy {policy!r}{f' binding {binding!r}' if binding else ''}, got "
                            + (f"policy {denied_by[0]!r} binding {denied_by[1]!r}" if denied_by else "no denial"))
    message = str(status.get("message", ""))
    if expect.message_contains is not None and expect.message_contains not in message:
        failures.append(f"expected the message to contain {expect.message_contains!r}, got {message!r}")
    if expect.reason is not None and status.get("reason") != expect.reason:
        failures.append(f"expected reason {expect.reason!r}, got {status.get('reason')!r}")
    if expect.code is not None and status.get("code") != expect.code:
        failures.append(f"expected code {expect.code}, got {status.get('code')}")
    warnings = list(response.get("warnings") or [])
    if expect.warnings is not None:
        if not expect.warnings and warnings:
            failures.append(f"expected no warnings, got {warnings}")
        for wanted in expect.warnings:
            if not any(wanted in warning for warning in warnings):
                failures.append(f"expected a warning containing {wanted!r}, got {warnings}")
    if expect.audit_annotations is not None:
        annotations = response.get("auditAnnotations") or {}
        for key, wanted in expect.audit_annotations.items():
            if key not in annotations:
                failures.append(f"expected audit annotation {key!r}, got keys {sorted(annotations)}")
            elif wanted not in annotations[key]:
                failures.append(f"expected audit annotation {key!r} to contain {wanted!r}, got {annotations[key]!r}")
    if expect.patch is not None:
        import base64

        patch = orjson.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
        if patch != expect.patch:
            failures.append("the patch differs from the expected one")
            diffs.append(_diff("patch", expect.patch, patch))
    if expect.object is not None and mutated != expect.object:
        failures.append("the object after the mutations differs from the expected one")
        diffs.append(_diff("object", expect.object, mutated))
    return failures, diffs


def _review_documents(case: TestCase) -> list[tuple[str, dict[str, Any] | str]]:
    """(label, the AdmissionReview or why it cannot be built) for each request of the case: one per object
    (the objects of a List or of a multi-document file each get their own, labelled by their place)."""
    if case.review is not None:
        if not isinstance(case.review, dict):
            return [("", "review must be an AdmissionReview object")]
        return [("", case.review)]
    if case.recorded:
        return list(case.recorded)
    settings = RequestSettings(operation=case.operation, username=case.user.username, uid=case.user.uid,
                               groups=case.user.groups, namespace=case.namespace, subresource=case.subresource,
                               dry_run=case.dry_run)
    documents: list[tuple[str, dict[str, Any] | str]] = []
    for listed in case.objects:
        try:
            if not case.old_objects:
                old = None
            elif len(case.objects) == 1 and len(case.old_objects) == 1:
                old = case.old_objects[0].value
            else:
                old = pair_old_objects([listed.value], [entry.value for entry in case.old_objects])[0]
            documents.append((listed.item, review_for_object(listed.value, old, settings,
                                                             uid_seed=f"{case.name}#{listed.item}" if listed.item
                                                             else case.name)))
        except ObjectInputError as error:
            documents.append((listed.item, str(error)))
    return documents


def request_name(case: TestCase, label: str) -> str:
    """The name of one request of a case: ``case [place]`` when the case has several."""
    return f"{case.name} [{label}]" if label else case.name


def _run_request(snapshot: Snapshot, namespaces: NamespaceSource, test: TestFile, case: TestCase, name: str,
                 document: dict[str, Any] | str) -> CaseResult:
    def failed(message: str) -> CaseResult:
        return CaseResult(test.path, test.name, name, False, (message,), (), {})

    if isinstance(document, str):
        return failed(f"the request cannot be built: {document}")
    request = parse_admission_review(document)
    if isinstance(request, RequestError):
        return failed(f"the request is not a valid AdmissionReview: {request.message}")
    started = time.perf_counter()
    mutation, validation = review_request(snapshot, namespaces, request, case.endpoint, explain=True)
    seconds = time.perf_counter() - started
    answer = combined_response(request, mutation, validation)
    mutated = mutation.mutated_object if mutation is not None else request.object
    summary = request_summary(request)
    report = decision(snapshot, request, mutation, validation)
    failures, diffs = compare(case.expect, answer, _denier(mutation, validation), mutated,
                              why_allowed(summary, report))
    return CaseResult(test.path, test.name, name, not failures, tuple(failures), tuple(diffs), answer,
                      summary, report, seconds)


def run_file(test: TestFile, on_request: Callable[[], None] | None = None,
             selector: CaseSelector | None = None) -> FileResult | None:
    """The file's results; None when ``selector`` selects none of its requests (its manifests are then
    not even loaded)."""
    planned = [(case, request_name(case, label), document) for case in test.cases
               for label, document in _review_documents(case)
               if selector is None or selector.selects(test.name, request_name(case, label))]
    if selector is not None and not planned:
        return None
    loaded = load_manifest_paths(list(test.manifests))
    if loaded.errors:
        return FileResult(test.path, test.name, tuple(f"manifests: {error}" for error in loaded.errors), ())
    namespaces: NamespaceSource = RequestOnlyNamespaces()
    if test.namespaces:
        try:
            namespaces = parse_namespaces(json.dumps(list(test.namespaces)))
        except NamespaceFileError as error:
            return FileResult(test.path, test.name, (f"spec.namespaces: {error}",), ())
    snapshot = build_snapshot(loaded)
    results = []
    for case, name, document in planned:
        if on_request is not None:
            on_request()
        results.append(_run_request(snapshot, namespaces, test, case, name, document))
    return FileResult(test.path, test.name, (), tuple(results))


def case_to_json(result: CaseResult) -> dict[str, Any]:
    out = dataclasses.asdict(result)
    out["failures"] = list(result.failures)
    out["diffs"] = list(result.diffs)
    return out
