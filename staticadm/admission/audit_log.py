"""kube-apiserver audit logs (``audit.k8s.io/v1`` Event, JSON lines) turned into the AdmissionReviews
kube-apiserver sent for those requests: requests from where operators have them.

An event records the request (verb, objectRef: resource, subresource, namespace, name, API group and
version; the user, or the impersonated user that admission saw) and, from level Request, the request's
body (``requestObject``) and, at RequestResponse, the answer's (``responseObject``). kube-apiserver
built its AdmissionReview from the same attributes (``webhook/request/admissionreview.go``):

- ``create`` is a CREATE of ``requestObject``; ``update`` an UPDATE of it, or a CREATE when kube-apiserver
  answered 201 (an update that created the object);
- ``patch`` carries only the patch in ``requestObject``: the object is ``responseObject`` (RequestResponse
  level; the object after every admission step and defaulting, as the validating phase saw it), a CREATE
  when the answer was 201 (server-side apply creating the object);
- ``delete`` is a DELETE whose ``oldObject`` is ``responseObject`` when kube-apiserver answered with the
  object (it answers some deletions with a Status only), with ``requestObject`` as its DeleteOptions.

Audit events never record the object before an UPDATE, so those requests carry no ``oldObject`` and say
so. What an event cannot give is never guessed: Metadata-level events (no body), patches without their
result, deletions without the deleted object, ``deletecollection`` and CONNECT requests (exec, attach,
port-forward, proxy: no body is recorded) are counted by reason and reported, not evaluated. Each
request is recorded at up to two stages (RequestReceived, ResponseComplete); one event per ``auditID`` is
used, the ResponseComplete one when present. The event's ``auditID`` becomes the request uid.
"""

from __future__ import annotations

import datetime
import gzip
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

from staticadm.admission.request_builder import BUILTIN_RESOURCES, ObjectInputError, admitted_object

AUDIT_API_VERSION = "audit.k8s.io/v1"
#: The verbs that reach admission with one object, and the operation each becomes.
WRITE_VERBS = ("create", "update", "patch", "delete")
#: Subresources kube-apiserver admits as CONNECT (the request has no recorded body).
CONNECT_SUBRESOURCES = frozenset({("pods", "exec"), ("pods", "attach"), ("pods", "portforward"), ("pods", "proxy"),
                                  ("services", "proxy"), ("nodes", "proxy")})
#: Stages in the order one is preferred over another for the same auditID.
_STAGE_RANK = {"ResponseComplete": 3, "Panic": 2, "ResponseStarted": 1, "RequestReceived": 0}
_OPTIONS_KINDS = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
_KINDS = {(group, resource): kind for (group, kind), (resource, _) in BUILTIN_RESOURCES.items()}


class AuditLogError(ValueError):
    """An audit log that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class AuditFilters:
    """Which recorded requests to take. Empty sets take everything."""

    verbs: frozenset[str] = frozenset()
    #: ``resource``, ``resource.group``, ``resource/subresource`` (``*`` for any subresource).
    resources: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()
    #: Bounds on the time kube-apiserver received the request (inclusive since, exclusive until).
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None

    def takes(self, event: dict[str, Any], ref: dict[str, Any], received: datetime.datetime | None) -> bool:
        if self.verbs and event.get("verb") not in self.verbs:
            return False
        if self.namespaces and str(ref.get("namespace") or "") not in self.namespaces:
            return False
        if self.resources and not any(_resource_matches(text, ref) for text in self.resources):
            return False
        if (self.since is not None or self.until is not None) and received is None:
            return False
        if self.since is not None and received is not None and received < self.since:
            return False
        return not (self.until is not None and received is not None and received >= self.until)


def _resource_matches(text: str, ref: dict[str, Any]) -> bool:
    if text == "*":
        return True
    resource_part, _, subresource = text.partition("/")
    resource, _, group = resource_part.partition(".")
    if resource != ref.get("resource") or (group and group != (ref.get("apiGroup") or "")):
        return False
    return subresource == "*" or subresource == (ref.get("subresource") or "")


def parse_timestamp(text: str) -> datetime.datetime:
    """RFC 3339 (``2024-05-01T10:00:00Z``, fractions and offsets allowed); ValueError otherwise."""
    value = datetime.datetime.fromisoformat(text.strip().replace("z", "Z"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone (RFC 3339 needs Z or an offset)")
    return value


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One AdmissionReview built from one audit event."""

    path: str
    line: int
    review: dict[str, Any]
    #: What the event says beside the request (for the reports): auditID, stage, level, verb, time,
    #: kube-apiserver's answer code, and notes on what the event could not give.
    audit: dict[str, Any]


@dataclass(slots=True)
class AuditReadSummary:
    """What a log held: every event counted once, by what became of it."""

    events: int = 0
    requests: int = 0
    #: Events of the selected requests that were not evaluated, by reason.
    not_evaluated: Counter[str] = field(default_factory=Counter)
    #: Events left out by the filters or because they are no admitted write (get, list, watch, ...).
    not_selected: int = 0

    def describe(self, path: str) -> str:
        text = f"{path}: {self.events} event(s), {self.requests} request(s) evaluated"
        if self.not_selected:
            text += f", {self.not_selected} not selected (filters, reads, other stages of the same request)"
        for reason, count in sorted(self.not_evaluated.items()):
            text += f"; {count} not evaluated: {reason}"
        return text


def _lines(path: str, stdin: TextIO | None) -> Iterator[tuple[int, bytes]]:
    if path == "-" and stdin is not None:
        for number, text in enumerate(stdin, 1):
            yield number, text.encode()
        return
    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        yield from enumerate(handle, 1)


def _events(path: str, number: int, value: Any) -> Iterator[dict[str, Any]]:
    """The events of one line: an Event, or an EventList (what the webhook backend sends)."""
    if not isinstance(value, dict):
        raise AuditLogError(f"{path}:{number}: an audit event must be a JSON object")
    if value.get("kind") == "EventList":
        items = value.get("items")
        if not isinstance(items, list):
            raise AuditLogError(f"{path}:{number}: EventList items must be an array")
        for item in items:
            yield from _events(path, number, item)
        return
    if value.get("apiVersion") != AUDIT_API_VERSION or value.get("kind") != "Event":
        raise AuditLogError(f"{path}:{number}: not an {AUDIT_API_VERSION} Event (apiVersion "
                            f"{value.get('apiVersion')!r}, kind {value.get('kind')!r})")
    yield value


def read_audit_log(path: str, filters: AuditFilters, stdin: TextIO | None = None
                   ) -> tuple[list[RecordedRequest], AuditReadSummary]:
    """Every selected request of the log, in the order kube-apiserver received them; AuditLogError for a
    file that cannot be read or a line that is not an audit event."""
    summary = AuditReadSummary()
    chosen: dict[str, tuple[int, int, dict[str, Any]]] = {}
    try:
        for number, raw in _lines(path, stdin):
            if not raw.strip():
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as error:
                raise AuditLogError(f"{path}:{number}: not JSON: {error}") from None
            for event in _events(path, number, value):
                summary.events += 1
                ref = event.get("objectRef")
                if event.get("verb") not in (*WRITE_VERBS, "deletecollection") or not isinstance(ref, dict) \
                        or not filters.takes(event, ref, _received(event)):
                    summary.not_selected += 1
                    continue
                audit_id = str(event.get("auditID") or f"{path}:{number}")
                rank = _STAGE_RANK.get(str(event.get("stage")), -1)
                if audit_id in chosen:
                    summary.not_selected += 1
                    if chosen[audit_id][0] >= rank:
                        continue
                chosen[audit_id] = (rank, number, event)
    except OSError as error:
        raise AuditLogError(f"{path}: cannot read: {error.strerror or error}") from None
    except (EOFError, gzip.BadGzipFile) as error:
        raise AuditLogError(f"{path}: not a complete gzip file: {error}") from None
    requests = []
    for _, number, event in sorted(chosen.values(), key=lambda entry: (_received_key(entry[2]), entry[1])):
        built = _review(event)
        if isinstance(built, str):
            summary.not_evaluated[built] += 1
            continue
        review, notes = built
        summary.requests += 1
        requests.append(RecordedRequest(path, number, review, _audit_facts(event, notes)))
    return requests, summary


def _received(event: dict[str, Any]) -> datetime.datetime | None:
    text = event.get("requestReceivedTimestamp") or event.get("stageTimestamp")
    if not isinstance(text, str):
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


def _received_key(event: dict[str, Any]) -> str:
    # MicroTime is written with a fixed number of digits in UTC, so the text orders as the time does.
    return str(event.get("requestReceivedTimestamp") or "")


def _audit_facts(event: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    status = event.get("responseStatus")
    code = status.get("code") if isinstance(status, dict) else None
    return {"auditID": str(event.get("auditID") or ""), "stage": str(event.get("stage") or ""),
            "level": str(event.get("level") or ""), "verb": str(event.get("verb") or ""),
            "requestReceivedTimestamp": str(event.get("requestReceivedTimestamp") or ""),
            "responseCode": code if isinstance(code, int) else None, "notes": notes}


def _body(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) and value else None


def _review(event: dict[str, Any]) -> tuple[dict[str, Any], list[str]] | str:
    """The AdmissionReview for one event and notes on it, or why it cannot be built."""
    level, verb = event.get("level"), str(event.get("verb"))
    ref: dict[str, Any] = event["objectRef"]
    resource, subresource = str(ref.get("resource") or ""), str(ref.get("subresource") or "")
    if verb == "deletecollection":
        return "deletecollection (the deleted objects are not in the event)"
    if (resource, subresource) in CONNECT_SUBRESOURCES:
        return f"CONNECT {resource}/{subresource} (no request body is recorded)"
    if level not in ("Request", "RequestResponse"):
        return f"level {level or 'unset'} (the event has no object)"
    status = event.get("responseStatus")
    code = status.get("code") if isinstance(status, dict) else None
    request_object, response_object = _body(event.get("requestObject")), _body(event.get("responseObject"))
    notes: list[str] = []
    old_object = None
    if verb == "create":
        operation, obj = "CREATE", request_object
        if obj is None:
            return "create without requestObject"
    elif verb == "update":
        operation, obj = ("CREATE" if code == 201 else "UPDATE"), request_object
        if obj is None:
            return "update without requestObject"
    elif verb == "patch":
        operation, obj = ("CREATE" if code == 201 else "UPDATE"), response_object
        if obj is None:
            return "patch without responseObject (only RequestResponse events record the patched object)"
        if _is_status(obj):
            return "patch answered with a Status (the request failed: no patched object)"
        notes.append("object: the responseObject (the patched object as kube-apiserver stored it, after "
                     "every admission step)")
    else:
        operation, obj = "DELETE", None
        old_object = response_object
        if old_object is None or _is_status(old_object):
            return "delete without the deleted object (kube-apiserver answered with a Status, or level Request)"
    if operation == "UPDATE":
        notes.append("oldObject: audit events never record the object before an update; policies reading "
                     "oldObject see null here")
    subject = obj if obj is not None else old_object
    assert subject is not None
    group = str(ref.get("apiGroup") or "")
    version = str(ref.get("apiVersion") or "")
    kind_group, kind_version, kind = _kind_of(subject, group, version, resource, subresource)
    if not kind or not version:
        return "the object's kind is unknown (no kind in the recorded object)"
    # The recorded body is what the client sent: kube-apiserver typed and defaulted it before admission.
    admitted: dict[str, dict[str, Any] | None] = {}
    try:
        for what, recorded in (("object", obj), ("oldObject", old_object)):
            admitted[what] = None
            if recorded is not None:
                admitted[what], defaulted, dropped = admitted_object(
                    _typed(recorded, kind_group, kind_version, kind), what)
                if defaulted:
                    notes.append(f"defaulted by Kubernetes: {', '.join(defaulted)}")
                if dropped:
                    notes.append(f"not fields of the kind (dropped, as kube-apiserver does): {', '.join(dropped)}")
    except ObjectInputError as error:
        return f"the recorded object does not fit its kind: {error}"
    request: dict[str, Any] = {
        "uid": str(event.get("auditID") or ""),
        "kind": {"group": kind_group, "version": kind_version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "operation": operation,
        "userInfo": _user(event),
        "object": admitted["object"],
        "oldObject": admitted["oldObject"],
        "dryRun": False,
    }
    request["requestKind"], request["requestResource"] = request["kind"], request["resource"]
    if subresource:
        request["subResource"] = request["requestSubResource"] = subresource
    metadata = subject.get("metadata")
    name = ref.get("name") or (metadata.get("name") if isinstance(metadata, dict) else None)
    if name:
        request["name"] = str(name)
    if ref.get("namespace"):
        request["namespace"] = str(ref["namespace"])
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(event.get("requestURI") or "")).query)
    dry_run = query.get("dryRun", [])
    request["dryRun"] = bool(dry_run)
    options: dict[str, Any] = {"kind": _OPTIONS_KINDS[operation], "apiVersion": "meta.k8s.io/v1"}
    if operation == "DELETE" and request_object is not None and request_object.get("kind") == "DeleteOptions":
        options = {**request_object, "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        options["dryRun"] = dry_run
    if query.get("fieldManager") and operation != "DELETE":
        options["fieldManager"] = query["fieldManager"][0]
    request["options"] = options
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}, notes


def _is_status(value: dict[str, Any]) -> bool:
    return value.get("kind") == "Status" and value.get("apiVersion") == "v1"


def _kind_of(subject: dict[str, Any], group: str, version: str, resource: str,
             subresource: str) -> tuple[str, str, str]:
    """The object's own group, version and kind (a subresource's object may be of another kind, such as
    autoscaling/v1 Scale); for an object recorded without them, the resource's built-in kind."""
    api_version, kind = subject.get("apiVersion"), subject.get("kind")
    if isinstance(api_version, str) and api_version and isinstance(kind, str) and kind:
        object_group, _, object_version = api_version.rpartition("/")
        return object_group, object_version, kind
    if subresource:
        return group, version, ""
    return group, version, _KINDS.get((group, resource), "")


def _typed(value: dict[str, Any], group: str, version: str, kind: str) -> dict[str, Any]:
    if "apiVersion" in value and "kind" in value:
        return value
    return {"apiVersion": f"{group}/{version}" if group else version, "kind": kind, **value}


def _user(event: dict[str, Any]) -> dict[str, Any]:
    """The user admission saw: the impersonated one when the request impersonated."""
    chosen = event.get("impersonatedUser") or event.get("user") or {}
    if not isinstance(chosen, dict):
        return {}
    return {key: chosen[key] for key in ("username", "uid", "groups", "extra") if chosen.get(key)}


def read_audit_logs(paths: Sequence[str], filters: AuditFilters, stdin: TextIO | None = None
                    ) -> tuple[list[RecordedRequest], list[str], list[str]]:
    """(requests, summaries, problems) over several logs (rotated files, in the order given)."""
    requests: list[RecordedRequest] = []
    summaries: list[str] = []
    problems: list[str] = []
    for path in paths:
        try:
            found, summary = read_audit_log(path, filters, stdin)
        except AuditLogError as error:
            problems.append(str(error))
            continue
        requests.extend(found)
        summaries.append(summary.describe("<stdin>" if path == "-" else path))
    return requests, summaries, problems
