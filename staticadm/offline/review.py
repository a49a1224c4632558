"""``staticadm review``: evaluate requests against a manifest directory, offline.

Each input document is an AdmissionReview or a plain Kubernetes object, for which the request
kube-apiserver would send is built (:mod:`staticadm.offline.request_builder`). The manifests are
loaded exactly as the daemon loads them; each request gets the response the daemon would send. This is
the one module of the package that does I/O, because it is a command.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from staticadm.admission.endpoints import combined_response, review_request
from staticadm.admission.mutating.dispatcher import MutationOutcome
from staticadm.admission.namespaces import (
    NamespaceFileError,
    NamespaceSource,
    RequestOnlyNamespaces,
    parse_namespaces,
)
from staticadm.admission.request import AdmissionRequest, RequestError, describe_subject, parse_admission_review
from staticadm.admission.response import webhook_audit_key
from staticadm.admission.validating.dispatcher import ValidationOutcome, explain_unmatched
from staticadm.admission.vocabulary import EnforcementAction, ErrorType
from staticadm.colour import Palette
from staticadm.manifests.files import document_files_under
from staticadm.offline.audit_log import AuditFilters, AuditLogError, check_readable, stream_audit_logs
from staticadm.offline.decision_report import API_VERSION, decision, request_summary
from staticadm.offline.object_lists import ObjectListError, expand_lists
from staticadm.offline.policy_reports import FORMS, ReportCollector, reported_object, write_reports
from staticadm.offline.request_builder import (
    ObjectInputError,
    RequestSettings,
    build_request_for_object,
    object_key,
    pair_old_objects,
)
from staticadm.progress import Progress
from staticadm.snapshot import Snapshot, build_snapshot
from staticadm.tables import TABLE_OUTPUTS, write_table
from staticadm.yamljson import ParseError, parse_stream
from staticadm.yamltext import dump_yaml

# The exit codes every command shares: 0 done, 1 invalid manifests, 2 unusable input or usage; review adds
# 3 (some request denied) and 4 (some policy failed to evaluate: an error, whatever failurePolicy made of it).
EXIT_OK = 0
EXIT_INVALID_MANIFESTS = 1
EXIT_UNUSABLE_INPUT = 2
EXIT_DENIED = 3
EXIT_EVALUATION_ERROR = 4

#: Which webhook endpoints to run; "both" runs them in kube-apiserver's order, mutating first.
ENDPOINTS = ("validate", "mutate", "both")


if TYPE_CHECKING:
    from staticadm.cluster.view import BlockingClusterView


def _read_text(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _documents(text: str) -> list[Any]:
    return [document for document in parse_stream(text) if document is not None]


@dataclass(frozen=True, slots=True)
class RequestInput:
    #: Where the request came from: the file (``<stdin>``), the document in it and, for an object of a
    #: List, its place in the list (``items[3]``; "" otherwise).
    source: str
    document: int
    request: AdmissionRequest
    item: str = ""
    #: For a request from an audit log, what its event says beside it (``audit_log.RecordedRequest``).
    audit: dict[str, Any] | None = None
    #: For a request built from a plain object: the fields Kubernetes' defaulting set
    #: (``object: spec.replicas``) and those its kind's Go struct does not have (dropped, as kube-apiserver does).
    defaulted: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The place as the text reports show it: ``file (document 1) items[3]``."""
        return describe_place(self.source, self.document, self.item)


def describe_place(source: str, document: int, item: str = "", *, documents: int = 0) -> str:
    """``file``, ``file (document 1)``, ``file items[3]``; document 0 is named only when the file is known
    to hold several documents (``documents``)."""
    where = f"{source} (document {document})" if document or documents > 1 else source
    return f"{where} {item}" if item else where


def _read_documents(path: str, stdin: TextIO) -> tuple[list[Any], str | None]:
    shown = "<stdin>" if path == "-" else path
    try:
        text = _read_text(path, stdin)
    except (OSError, UnicodeDecodeError) as error:
        return [], f"{shown}: cannot read: {error}"
    try:
        documents = _documents(text)
    except ParseError as error:
        return [], f"{shown}: not JSON or YAML: {error.problem}"
    if not documents:
        return [], f"{shown}: holds no document"
    return documents, None


def _load_inputs(path: str, stdin: TextIO, settings: RequestSettings,
                 olds: list[Any]) -> tuple[list[RequestInput], list[str]]:
    """Every request of one file, or a problem per document that cannot become one."""
    shown = "<stdin>" if path == "-" else path
    documents, problem = _read_documents(path, stdin)
    if problem is not None:
        return [], [problem]
    inputs, problems = [], []
    for index, document in enumerate(documents):
        try:
            listed = expand_lists(document)
        except ObjectListError as error:
            problems.append(f"{describe_place(shown, index, documents=len(documents))}: {error}")
            continue
        for entry in listed:
            where = describe_place(shown, index, entry.item, documents=len(documents))
            defaulted: tuple[str, ...] = ()
            dropped: tuple[str, ...] = ()
            if isinstance(entry.value, dict) and entry.value.get("kind") == "AdmissionReview":
                review = entry.value
            else:
                try:
                    old = pair_old_objects([entry.value], olds)[0] if settings.operation == "UPDATE" and olds \
                        else None
                    built = build_request_for_object(
                        entry.value, old, settings, uid_seed=f"{shown}#{index}#{entry.item}#{object_key(entry.value)}")
                except ObjectInputError as error:
                    problems.append(f"{where}: {error}")
                    continue
                review, defaulted, dropped = built.review, built.defaulted, built.dropped
            parsed = parse_admission_review(review)
            if isinstance(parsed, RequestError):
                problems.append(f"{where}: {parsed.message}")
            else:
                inputs.append(RequestInput(shown, index, parsed, entry.item, defaulted=defaulted, dropped=dropped))
    return inputs, problems


def read_requests(request_paths: Sequence[str], settings: RequestSettings, old_path: str | None,
                  stdin: TextIO) -> tuple[list[RequestInput], list[str]]:
    """Every request of every input (AdmissionReviews, or plain objects built into the request kube-apiserver
    would send), read before any is answered so a bad one never leaves half an output behind; every problem
    of every document is reported in the one run. A directory stands for its .json, .yaml and .yml files,
    recursively, in name order. Audit logs are streamed instead (``recorded_requests``)."""
    problems: list[str] = []
    olds: list[Any] = []
    if old_path is not None:
        documents, problem = _read_documents(old_path, stdin)
        if problem is not None:
            problems.append(f"--old {problem}")
        for index, document in enumerate(documents):
            try:
                olds.extend(entry.value for entry in expand_lists(document))
            except ObjectListError as error:
                shown = "<stdin>" if old_path == "-" else old_path
                problems.append(f"--old {describe_place(shown, index, documents=len(documents))}: {error}")
    requests: list[RequestInput] = []
    for path in _expand(request_paths):
        inputs, file_problems = _load_inputs(path, stdin, settings, olds)
        requests.extend(inputs)
        problems.extend(file_problems)
    return requests, problems


def recorded_requests(audit: AuditSource, stdin: TextIO, notes: list[str],
                      problems: list[str]) -> Iterator[RequestInput]:
    """The requests of the audit logs, one at a time as they are read (a log of any size in constant
    memory); what each log held is appended to ``notes`` once it has been read, what could not be read to
    ``problems``."""
    for entry in stream_audit_logs(audit.paths, audit.filters, stdin, notes, problems):
        shown = "<stdin>" if entry.path == "-" else entry.path
        parsed = parse_admission_review(entry.review)
        if isinstance(parsed, RequestError):
            problems.append(f"{shown}:{entry.line}: the request built from the event: {parsed.message}")
        else:
            yield RequestInput(shown, 0, parsed, f"line {entry.line}", entry.audit)


@dataclass(frozen=True, slots=True)
class AuditSource:
    """Audit logs to take requests from (``--audit-log``), and which of their requests."""

    paths: tuple[str, ...]
    filters: AuditFilters


def _expand(paths: Sequence[str]) -> list[str]:
    expanded: list[str] = []
    for path in paths:
        if path != "-" and Path(path).is_dir():
            expanded.extend(str(file) for file in document_files_under(Path(path)))
        else:
            expanded.append(path)
    return expanded


def _where(policy: str, binding: str | None) -> str:
    return f"policy {policy}" + (f" binding {binding}" if binding else "")


def _validation_lines(request: AdmissionRequest, outcome: ValidationOutcome, snapshot: Snapshot,
                      paint: Palette) -> list[str]:
    lines = []
    if outcome.allowed:
        lines.append(f"  decision: {paint.good('allowed')}")
    else:
        assert outcome.status is not None
        lines.append(f"  decision: {paint.bad('denied')} ({outcome.status['code']} {outcome.status['reason']})")
        lines.append(f"  message: {outcome.status['message']}")
    for warning in outcome.warnings:
        lines.append(f"  {paint.warn('warning')}: {warning}")
    for key, value in outcome.annotations.items():
        # The key as kube-apiserver records it in-process, and the one the daemon answers it under.
        lines.append(f"  audit annotation: {key}={value} (webhook key: {webhook_audit_key(key)})")
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


def _mutation_lines(outcome: MutationOutcome, paint: Palette) -> list[str]:
    lines = []
    if not outcome.allowed:
        assert outcome.status is not None
        lines.append(f"  mutation: {paint.bad('denied')} ({outcome.status['code']} {outcome.status['reason']})")
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


def load_snapshot(directory: str, stderr: TextIO, prefix: str) -> Snapshot | None:
    """The directory's snapshot, or None after writing every manifest error after ``prefix``."""
    from staticadm.manifests.loader import load_manifest_directory

    loaded = load_manifest_directory(directory)
    if loaded.errors:
        for error in loaded.errors:
            stderr.write(f"{prefix} {error}\n")
        return None
    return build_snapshot(loaded)


def run_review(manifests_dir: str, namespaces_file: str | None, output: str, request_paths: Sequence[str],
               stdin: TextIO, stdout: TextIO, stderr: TextIO, endpoint: str = "both",
               settings: RequestSettings | None = None, old_path: str | None = None,
               kubeconfig: str | None = None, audit: AuditSource | None = None,
               report_layout: str = "namespace") -> int:
    """Exit 0 when every request was allowed, 3 when one was denied, 4 when a policy failed to evaluate
    (before any denial counts); 1 on invalid manifests (as ``check``); 2 on an unusable request, old
    object, audit log or namespaces file."""
    sources = RequestSources(tuple(request_paths), settings or RequestSettings(), old_path, audit)
    snapshot = load_snapshot(manifests_dir, stderr, "staticadm review:")
    if snapshot is None:
        return EXIT_INVALID_MANIFESTS

    namespaces: NamespaceSource = RequestOnlyNamespaces()
    if namespaces_file is not None:
        try:
            namespaces = parse_namespaces(_read_text(namespaces_file, stdin))
        except (OSError, UnicodeDecodeError, NamespaceFileError) as error:
            stderr.write(f"staticadm review: {namespaces_file}: {error}\n")
            return EXIT_UNUSABLE_INPUT
    elif kubeconfig is not None:
        from staticadm.cluster.connection import ClusterError
        from staticadm.cluster.view import BlockingClusterView

        cluster = BlockingClusterView(Path(kubeconfig))
        try:
            cluster.open()
        except ClusterError as error:
            cluster.close()
            stderr.write(f"staticadm review: --kubeconfig {kubeconfig}: cannot list namespaces: {error.message}\n")
            return EXIT_UNUSABLE_INPUT
        namespaces = cluster.view.namespaces
        try:
            return _review_all(snapshot, namespaces, output, endpoint, sources, stdin, stdout, stderr, cluster,
                               report_layout)
        finally:
            cluster.close()
    return _review_all(snapshot, namespaces, output, endpoint, sources, stdin, stdout, stderr, None, report_layout)


@dataclass(frozen=True, slots=True)
class RequestSources:
    """Where the requests of ``review`` and ``diff`` come from."""

    paths: tuple[str, ...]
    settings: RequestSettings
    old_path: str | None = None
    audit: AuditSource | None = None

    def read(self, stdin: TextIO, stderr: TextIO, command: str) -> RequestStream | None:
        """Every request, or None after writing every problem found before any is answered: the requests
        of files, read at once, and the audit logs' after them, streamed."""
        requests, problems = read_requests(self.paths, self.settings, self.old_path, stdin)
        for path in self.audit.paths if self.audit is not None else ():
            try:
                check_readable(path)
            except AuditLogError as error:
                problems.append(str(error))
        for problem in problems:
            stderr.write(f"staticadm {command}: {problem}\n")
        return None if problems else RequestStream(requests, self.audit, stdin)


class RequestStream:
    """The requests of ``review`` and ``diff``: those of files, then those of audit logs as they are read.
    After the iteration, ``notes`` says what each log held and ``problems`` what could not be read."""

    def __init__(self, requests: list[RequestInput], audit: AuditSource | None, stdin: TextIO) -> None:
        self._requests = requests
        self._audit = audit
        self._stdin = stdin
        self.notes: list[str] = []
        self.problems: list[str] = []

    @property
    def known_total(self) -> int | None:
        """How many requests there are, when known before reading the audit logs (none given)."""
        return len(self._requests) if self._audit is None else None

    def __iter__(self) -> Iterator[RequestInput]:
        yield from self._requests
        if self._audit is not None:
            yield from recorded_requests(self._audit, self._stdin, self.notes, self.problems)

    def report(self, stderr: TextIO, command: str) -> bool:
        """Writes the notes and problems; True when every audit log was read to its end."""
        for problem in self.problems:
            stderr.write(f"staticadm {command}: {problem}\n")
        for note in self.notes:
            stderr.write(f"staticadm {command}: {note}\n")
        return not self.problems


def _review_all(snapshot: Snapshot, namespaces: NamespaceSource, output: str, endpoint: str,
                sources: RequestSources, stdin: TextIO, stdout: TextIO, stderr: TextIO,
                cluster: BlockingClusterView | None, report_layout: str = "namespace") -> int:
    requests = sources.read(stdin, stderr, "review")
    if requests is None:
        return EXIT_UNUSABLE_INPUT

    explain = output in ("json", "yaml", *FORMS)
    collector = ReportCollector(output, layout=report_layout) if output in FORMS else None
    with Progress(stderr, "reviewing requests", requests.known_total) as progress:
        code = _answer_all(snapshot, namespaces, output, endpoint, requests, stdout, cluster, explain, progress,
                           collector)
    if collector is not None:
        write_reports(collector.documents(), stdout)
    return code if requests.report(stderr, "review") else EXIT_UNUSABLE_INPUT


def _answer_all(snapshot: Snapshot, namespaces: NamespaceSource, output: str, endpoint: str,
                requests: Iterable[RequestInput], stdout: TextIO, cluster: BlockingClusterView | None,
                explain: bool, progress: Progress, collector: ReportCollector | None = None) -> int:
    denied = errored = False
    paint = Palette.for_stream(stdout)
    rows: list[list[object]] = []
    for item in requests:
        progress.advance()
        request = item.request
        if cluster is None:
            mutation, validation = review_request(snapshot, namespaces, request, endpoint, explain)
        else:
            mutation, validation = cluster.evaluate(
                request.user_info, functools.partial(review_request, snapshot, namespaces, request, endpoint, explain))
        answer = combined_response(request, mutation, validation)
        denied = denied or not answer["response"]["allowed"]
        errored = errored or _evaluation_failed(mutation, validation)
        if collector is not None:
            collector.add(reported_object(request), decision(snapshot, request, mutation, validation))
            continue
        if output in TABLE_OUTPUTS:
            rows.append(_table_row(item, answer, mutation, validation, output == "wide"))
            continue
        if explain:
            labelled = {"apiVersion": API_VERSION, "kind": "ReviewResult", "input": item.source,
                        "document": item.document, "item": item.item or None, "audit": item.audit,
                        "request": request_summary(request), "defaulted": list(item.defaulted),
                        "dropped": list(item.dropped), "allowed": answer["response"]["allowed"],
                        "review": answer,
                        **decision(snapshot, request, mutation, validation)}
            if output == "json":
                stdout.write(json.dumps(labelled, ensure_ascii=False, separators=(",", ":")) + "\n")
            else:
                stdout.write("---\n" + dump_yaml(labelled))
            # Each answer as it is known: a replay of a live log (--audit-log -) is read while it runs.
            stdout.flush()
            continue
        lines = [f"{item.label}: {describe_subject(request)} (request {request.uid})"]
        if item.defaulted:
            lines.append(f"  defaulted by Kubernetes: {', '.join(item.defaulted)}")
        if item.dropped:
            lines.append(f"  not fields of the kind (dropped, as kube-apiserver does): {', '.join(item.dropped)}")
        if item.audit is not None:
            lines.extend(_audit_lines(item.audit))
        if mutation is not None and (snapshot.mutating or endpoint == "mutate"):
            lines.extend(_mutation_lines(mutation, paint))
        if validation is not None:
            lines.extend(_validation_lines(request, validation, snapshot, paint))
        stdout.write("\n".join(lines) + "\n")
        stdout.flush()
    if output in TABLE_OUTPUTS:
        # A table's columns are as wide as their widest cell: it is printed once every request is answered.
        headers = [*_TABLE_HEADERS, *(_WIDE_HEADERS if output == "wide" else ())]
        decision_column = headers.index("DECISION")
        write_table(stdout, headers, rows, {decision_column: lambda text: (
            paint.good(text) if text == "allowed" else paint.bad(text))})
    if errored:
        return EXIT_EVALUATION_ERROR
    return EXIT_DENIED if denied else EXIT_OK


_TABLE_HEADERS = ("NAMESPACE", "NAME", "RESOURCE", "OPERATION", "DECISION", "WARNINGS", "MESSAGE")
_WIDE_HEADERS = ("PATCH", "ERRORS", "POLICIES", "INPUT")


def _table_row(item: RequestInput, answer: dict[str, Any], mutation: MutationOutcome | None,
               validation: ValidationOutcome | None, wide: bool) -> list[object]:
    """One request as a row: the object, the answer and why; ``wide``: the patch's operations, the evaluation
    errors, the policies that matched, and where the request came from."""
    request = item.request
    response = answer["response"]
    resource = request.original_resource.group_resource() + (
        f"/{request.original_sub_resource}" if request.original_sub_resource else "")
    warnings = len(response.get("warnings") or ())
    row: list[object] = [request.namespace, request.name or "(generated)", resource, request.operation,
                         "allowed" if response["allowed"] else "denied", warnings,
                         (response.get("status") or {}).get("message", "")]
    if wide:
        records = (*(mutation.decisions if mutation else ()), *(validation.decisions if validation else ()))
        matched = {policy for policy, _ in (*(mutation.invoked if mutation else ()),
                                            *(validation.matched if validation else ()))}
        patch = mutation.patch if mutation is not None and response["allowed"] else ()
        row += [len(patch), sum(record.error_type is not ErrorType.NO_ERROR for record in records),
                ",".join(sorted(matched)), item.label]
    return row


def _audit_lines(audit: dict[str, Any]) -> list[str]:
    answered = f", kube-apiserver answered {audit['responseCode']}" if audit["responseCode"] is not None else ""
    lines = [f"  audit event: {audit['verb']} at {audit['requestReceivedTimestamp'] or '?'} ({audit['level']}, "
             f"{audit['stage']}){answered}"]
    lines.extend(f"  note: {note}" for note in audit["notes"])
    return lines


def _evaluation_failed(mutation: MutationOutcome | None, validation: ValidationOutcome | None) -> bool:
    records = (mutation.decisions if mutation is not None else ()) + (validation.decisions if validation else ())
    return any(record.error_type is not ErrorType.NO_ERROR for record in records)
