"""``staticadm review``: evaluate AdmissionReview files against a manifest directory, offline.

The manifests are loaded exactly as the daemon loads them; each request gets the response the daemon
would send. This is the one module of the package that does I/O, because it is a command.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from staticadm.admission.mutating import MutationOutcome, evaluate_mutating
from staticadm.admission.namespaces import (
    NamespaceFileError,
    NamespaceSource,
    RequestOnlyNamespaces,
    parse_namespaces,
)
from staticadm.admission.request import AdmissionRequest, RequestError, parse_admission_review
from staticadm.admission.validating import ValidationOutcome, evaluate_validating, explain_unmatched
from staticadm.admission.vocabulary import EnforcementAction, ErrorType
from staticadm.snapshot import Snapshot, build_snapshot

# The exit codes every command shares: 0 done, 1 invalid manifests, 2 unusable input or usage.
EXIT_OK = 0
EXIT_INVALID_MANIFESTS = 1
EXIT_UNUSABLE_INPUT = 2

#: Which webhook endpoints to run; "both" runs them in kube-apiserver's order, mutating first.
ENDPOINTS = ("validate", "mutate", "both")


def _read_text(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _parse_review_text(text: str) -> Any:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return json.loads(text)
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    if len(documents) != 1:
        raise ValueError(f"expected one AdmissionReview document, found {len(documents)}")
    return documents[0]


def _load_request(path: str, stdin: TextIO) -> AdmissionRequest | str:
    shown = "<stdin>" if path == "-" else path
    try:
        text = _read_text(path, stdin)
    except (OSError, UnicodeDecodeError) as error:
        return f"{shown}: cannot read: {error}"
    try:
        review = _parse_review_text(text)
    except (ValueError, yaml.YAMLError) as error:
        return f"{shown}: not a JSON or YAML AdmissionReview: {error}"
    parsed = parse_admission_review(review)
    if isinstance(parsed, RequestError):
        return f"{shown}: {parsed.message}"
    return parsed


def _where(policy: str, binding: str | None) -> str:
    return f"policy {policy}" + (f" binding {binding}" if binding else "")


def _validation_lines(request: AdmissionRequest, outcome: ValidationOutcome, snapshot: Snapshot) -> list[str]:
    lines = []
    if outcome.allowed:
        lines.append("  decision: allowed")
    else:
        assert outcome.status is not None
        lines.append(f"  decision: denied ({outcome.status['code']} {outcome.status['reason']})")
        lines.append(f"  message: {outcome.status['message']}")
    for warning in outcome.warnings:
        lines.append(f"  warning: {warning}")
    for key, value in outcome.annotations.items():
        lines.append(f"  audit annotation: {key}={value}")
    if outcome.excluded:
        lines.append("  this resource is never sent through admission (kube-apiserver excludes it)")
    for policy, binding in outcome.matched:
        lines.append(f"  matched: policy {policy} binding {binding}")
    for record in outcome.decisions:
        if record.action is EnforcementAction.ALLOW and record.error_type is ErrorType.NO_ERROR:
            continue
        where = _where(record.policy, record.binding)
        index = f" validations[{record.expression_index}]" if record.expression_index is not None else ""
        lines.append(f"  {record.action}: {where}{index} ({record.error_type}): {record.message}")
    for entry in (*outcome.not_matched, *explain_unmatched(snapshot, request, outcome)):
        where = _where(entry.policy, entry.binding)
        lines.append(f"  not matched: {where}: {entry.reason}")
    return lines


def _describe_value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= 200 else text[:197] + "..."


def _mutation_lines(outcome: MutationOutcome) -> list[str]:
    lines = []
    if not outcome.allowed:
        assert outcome.status is not None
        lines.append(f"  mutation: denied ({outcome.status['code']} {outcome.status['reason']})")
        lines.append(f"  message: {outcome.status['message']}")
    elif outcome.patch:
        lines.append(f"  mutation: {len(outcome.patch)} patch operation(s)")
    else:
        lines.append("  mutation: none (object unchanged)")
    for operation in outcome.patch:
        target = operation["path"] or "/"
        if operation["op"] == "remove":
            lines.append(f"  patch: remove {target}")
        elif operation["op"] in ("move", "copy"):
            lines.append(f"  patch: {operation['op']} {operation['from']} -> {target}")
        else:
            lines.append(f"  patch: {operation['op']} {target} = {_describe_value(operation.get('value'))}")
    for policy, binding in outcome.invoked:
        lines.append(f"  mutated by: policy {policy} binding {binding}")
    for policy, binding in outcome.reinvoked:
        lines.append(f"  reinvoked: policy {policy} binding {binding}")
    for record in outcome.decisions:
        if record.error_type != "no_error":
            where = _where(record.policy, record.binding)
            lines.append(f"  {record.action}: {where} ({record.error_type}): {record.message}")
    for entry in outcome.not_matched:
        where = _where(entry.policy, entry.binding)
        lines.append(f"  not matched (mutating): {where}: {entry.reason}")
    return lines


def _combined_response(request: AdmissionRequest, mutation: MutationOutcome | None,
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
                   endpoint: str) -> tuple[MutationOutcome | None, ValidationOutcome | None]:
    """Runs the chosen endpoints: with "both", validation sees the object as the mutations left it."""
    mutation = None
    if endpoint in ("mutate", "both"):
        mutation = evaluate_mutating(snapshot, namespaces, request)
        if endpoint == "mutate" or not mutation.allowed:
            return mutation, None
        if mutation.patch:
            request = dataclasses.replace(request, object=mutation.mutated_object)
    return mutation, evaluate_validating(snapshot, namespaces, request)


def run_review(manifests_dir: str, namespaces_file: str | None, output: str, request_paths: Sequence[str],
               stdin: TextIO, stdout: TextIO, stderr: TextIO, endpoint: str = "both") -> int:
    """Exit 0 when every request was evaluated; 1 on invalid manifests (as ``check``); 2 on an unreadable
    request or namespaces file."""
    from staticadm.manifests.loader import load_manifest_directory

    loaded = load_manifest_directory(manifests_dir)
    if loaded.errors:
        for error in loaded.errors:
            stderr.write(f"staticadm review: {error}\n")
        return EXIT_INVALID_MANIFESTS
    snapshot = build_snapshot(loaded)

    namespaces: NamespaceSource = RequestOnlyNamespaces()
    if namespaces_file is not None:
        try:
            namespaces = parse_namespaces(_read_text(namespaces_file, stdin))
        except (OSError, UnicodeDecodeError, NamespaceFileError) as error:
            stderr.write(f"staticadm review: {namespaces_file}: {error}\n")
            return EXIT_UNUSABLE_INPUT

    # Read every request before answering any, so a bad one never leaves half an output behind.
    requests: list[tuple[str, AdmissionRequest]] = []
    problems = []
    for path in request_paths:
        loaded_request = _load_request(path, stdin)
        if isinstance(loaded_request, str):
            problems.append(loaded_request)
        else:
            requests.append((path, loaded_request))
    if problems:
        for problem in problems:
            stderr.write(f"staticadm review: {problem}\n")
        return EXIT_UNUSABLE_INPUT

    for path, request in requests:
        mutation, validation = review_request(snapshot, namespaces, request, endpoint)
        if output == "json":
            answer = _combined_response(request, mutation, validation)
            stdout.write(json.dumps(answer, ensure_ascii=False, separators=(",", ":")) + "\n")
            continue
        lines = [f"{'<stdin>' if path == '-' else path}: request {request.uid}"]
        if mutation is not None and (snapshot.mutating or endpoint == "mutate"):
            lines.extend(_mutation_lines(mutation))
        if validation is not None:
            lines.extend(_validation_lines(request, validation, snapshot))
        stdout.write("\n".join(lines) + "\n")
    return EXIT_OK
