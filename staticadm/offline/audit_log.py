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

A log is read as a stream, in constant memory whatever its size: each request is handed on when its last
stage is read (in the order kube-apiserver finished the requests, which is the log's), an event waiting for
its ResponseComplete is the only one kept, and a line is never read whole when it is longer than any event
kube-apiserver writes (``MAX_LINE_BYTES``). A line that is no audit event (the half-written last line of a
live log, a truncated or corrupt one) is counted and skipped by its number, never the end of the replay.
"""

from __future__ import annotations

import datetime
import gzip
import urllib.parse
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

from staticadm.kinds.resources import BUILTIN_RESOURCES
from staticadm.offline.request_builder import ObjectInputError, admitted_object

AUDIT_API_VERSION = "audit.k8s.io/v1"
#: The verbs that reach admission with one object, and the operation each becomes.
WRITE_VERBS = ("create", "update", "patch", "delete")
#: Subresources kube-apiserver admits as CONNECT (the request has no recorded body).
CONNECT_SUBRESOURCES = frozenset({("pods", "exec"), ("pods", "attach"), ("pods", "portforward"), ("pods", "proxy"),
                                  ("services", "proxy"), ("nodes", "proxy")})
#: Stages in the order one is preferred over another for the same auditID.
_STAGE_RANK = {"ResponseComplete": 3, "Panic": 2, "ResponseStarted": 1, "RequestReceived": 0}
#: From this rank on a stage is a request's last: nothing more is written for its auditID.
_FINAL_RANK = 2
#: kube-apiserver's limit on a request body (``MaxRequestBodyBytes``, 3 MiB).
REQUEST_BODY_LIMIT = 3 * 1024 * 1024
#: The longest line read: an event holds at most the request's body (``requestObject``, within the request
#: limit) and kube-apiserver's answer (``responseObject``, an object it stored, within the same limit), with a
#: few KiB of metadata; anything longer is no event kube-apiserver wrote, and is skipped without being held.
MAX_LINE_BYTES = 2 * REQUEST_BODY_LIMIT + 64 * 1024
#: Malformed lines named one by one in a summary; the rest are counted.
_MALFORMED_NAMED = 20
#: Audit IDs of requests already handed on that are remembered, to count a later event of the same request
#: as such (kube-apiserver writes a request's stages close together, so the recent ones are enough).
_RECENT_IDS = 100_000
#: Requests read at an earlier stage and waiting for their last, at most: this many, holding this many bytes of
#: log lines. kube-apiserver writes a request's stages close together, so a request still waiting past either
#: bound is handed on as it stands (as at the end of the log): a log whose audit policy omits ResponseComplete
#: (every event waits) is then read in bounded memory too.
_WAITING_EVENTS = 10_000
_WAITING_BYTES = 64 * 1024 * 1024
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
    #: Lines that are no audit event, skipped: how many, and the first ones as (line number, why).
    malformed: int = 0
    malformed_lines: list[tuple[int, str]] = field(default_factory=list)

    def skip_line(self, number: int, why: str) -> None:
        self.malformed += 1
        if len(self.malformed_lines) < _MALFORMED_NAMED:
            self.malformed_lines.append((number, why))

    def describe(self, path: str) -> str:
        text = f"{path}: {self.events} event(s), {self.requests} request(s) evaluated"
        if self.not_selected:
            text += f", {self.not_selected} not selected (filters, reads, other stages of the same request)"
        for reason, count in sorted(self.not_evaluated.items()):
            text += f"; {count} not evaluated: {reason}"
        if self.malformed:
            named = "; ".join(f"line {number}: {why}" for number, why in self.malformed_lines)
            more = self.malformed - len(self.malformed_lines)
            text += (f"; {self.malformed} malformed line(s) skipped ({named}"
                     + (f"; {more} more" if more else "") + ")")
        return text


class _LineTooLong:
    """A line longer than ``MAX_LINE_BYTES``, skipped without being held."""


_TOO_LONG = _LineTooLong()


def _bounded_lines(handle: Any, limit: int) -> Iterator[tuple[int, bytes | str | _LineTooLong]]:
    """(number, line) of a binary or text stream, each read up to ``limit`` (plus its newline): a longer one
    is read past in pieces of at most a MiB and yields ``_TOO_LONG``, so no line is ever held whole."""
    number = 0
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and line[-1:] not in (b"\n", "\n"):
            while True:
                rest = handle.readline(1024 * 1024)
                if not rest or rest[-1:] in (b"\n", "\n"):
                    break
            yield number, _TOO_LONG
            continue
        yield number, line


def _open_lines(path: str, stdin: TextIO | None, limit: int) -> Iterator[tuple[int, bytes | str | _LineTooLong]]:
    if path == "-" and stdin is not None:
        yield from _bounded_lines(getattr(stdin, "buffer", stdin), limit)
        return
    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        yield from _bounded_lines(handle, limit)


def _events(value: Any) -> list[dict[str, Any]] | str:
    """The events of one line (an Event, or an EventList: what the webhook backend sends), or why it
    holds none."""
    if not isinstance(value, dict):
        return "an audit event must be a JSON object"
    if value.get("kind") == "EventList":
        items = value.get("items")
        if not isinstance(items, list):
            return "EventList items must be an array"
        events: list[dict[str, Any]] = []
        for item in items:
            found = _events(item)
            if isinstance(found, str):
                return f"EventList item: {found}"
            events.extend(found)
        return events
    if value.get("apiVersion") != AUDIT_API_VERSION or value.get("kind") != "Event":
        return (f"not an {AUDIT_API_VERSION} Event (apiVersion {value.get('apiVersion')!r}, "
                f"kind {value.get('kind')!r})")
    return [value]


def check_readable(path: str) -> None:
    """AuditLogError naming ``path`` when it cannot be opened: found before any request is answered."""
    if path == "-":
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise AuditLogError(f"{path}: cannot read: {error.strerror or error}") from None


def stream_audit_log(path: str, filters: AuditFilters, summary: AuditReadSummary, stdin: TextIO | None = None,
                     *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[RecordedRequest]:
    """Every selected request of the log, each as soon as its last stage is read; ``summary`` counts every
    event and skipped line as it goes. AuditLogError when the file cannot be read (or its gzip stream
    ends early); a line that is no audit event is skipped and counted."""
    shown = "<stdin>" if path == "-" else path
    #: Requests read at an earlier stage, waiting for their last: (rank, line, event, line's length) by auditID,
    #: oldest first.
    waiting: dict[str, tuple[int, int, dict[str, Any], int]] = {}
    waiting_bytes = 0
    recent: deque[str] = deque()
    done: set[str] = set()

    def hand_on(number: int, event: dict[str, Any]) -> RecordedRequest | None:
        built = _review(event)
        if isinstance(built, str):
            summary.not_evaluated[built] += 1
            return None
        review, notes = built
        summary.requests += 1
        return RecordedRequest(path, number, review, _audit_facts(event, notes))

    def finished(audit_id: str) -> None:
        done.add(audit_id)
        recent.append(audit_id)
        if len(recent) > _RECENT_IDS:
            done.discard(recent.popleft())

    try:
        for number, raw in _open_lines(path, stdin, max_line_bytes):
            if isinstance(raw, _LineTooLong):
                summary.skip_line(number, f"longer than {max_line_bytes // (1024 * 1024)} MiB, more than any "
                                          "event kube-apiserver writes (its request limit is 3 MiB a body); "
                                          "skipped unread")
                continue
            if not raw.strip():
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as error:
                summary.skip_line(number, f"not JSON ({error})")
                continue
            events = _events(value)
            if isinstance(events, str):
                summary.skip_line(number, events)
                continue
            for event in events:
                summary.events += 1
                ref = event.get("objectRef")
                if event.get("verb") not in (*WRITE_VERBS, "deletecollection") or not isinstance(ref, dict) \
                        or not filters.takes(event, ref, _received(event)):
                    summary.not_selected += 1
                    continue
                audit_id = str(event.get("auditID") or f"{shown}:{number}")
                rank = _STAGE_RANK.get(str(event.get("stage")), -1)
                if audit_id in done:
                    summary.not_selected += 1
                    continue
                earlier = waiting.get(audit_id)
                if earlier is not None:
                    summary.not_selected += 1
                    if earlier[0] >= rank:
                        continue
                if earlier is not None:
                    waiting_bytes -= earlier[3]
                if rank >= _FINAL_RANK:
                    waiting.pop(audit_id, None)
                    finished(audit_id)
                    recorded = hand_on(number, event)
                    if recorded is not None:
                        yield recorded
                else:
                    waiting[audit_id] = (rank, number, event, len(raw))
                    waiting_bytes += len(raw)
                    while len(waiting) > _WAITING_EVENTS or (waiting_bytes > _WAITING_BYTES and len(waiting) > 1):
                        oldest = next(iter(waiting))
                        _, oldest_line, oldest_event, size = waiting.pop(oldest)
                        waiting_bytes -= size
                        finished(oldest)
                        recorded = hand_on(oldest_line, oldest_event)
                        if recorded is not None:
                            yield recorded
    except OSError as error:
        raise AuditLogError(f"{shown}: cannot read: {error.strerror or error}") from None
    except (EOFError, gzip.BadGzipFile) as error:
        raise AuditLogError(f"{shown}: not a complete gzip file: {error}") from None
    # Requests whose last stage the log does not hold (still running when it was copied, or an audit policy
    # that omits ResponseComplete), in the order they were read.
    for _, number, event, _ in sorted(waiting.values(), key=lambda entry: entry[1]):
        recorded = hand_on(number, event)
        if recorded is not None:
            yield recorded


def read_audit_log(path: str, filters: AuditFilters, stdin: TextIO | None = None
                   ) -> tuple[list[RecordedRequest], AuditReadSummary]:
    """Every selected request of a (small) log at once: ``stream_audit_log`` into a list."""
    summary = AuditReadSummary()
    return list(stream_audit_log(path, filters, summary, stdin)), summary


def _received(event: dict[str, Any]) -> datetime.datetime | None:
    text = event.get("requestReceivedTimestamp") or event.get("stageTimestamp")
    if not isinstance(text, str):
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


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


def stream_audit_logs(paths: Sequence[str], filters: AuditFilters, stdin: TextIO | None,
                      summaries: list[str], problems: list[str]) -> Iterator[RecordedRequest]:
    """The requests of several logs (rotated files, in the order given), streamed; each log's summary is
    appended to ``summaries`` when it has been read, a log that cannot be read to ``problems``."""
    for path in paths:
        summary = AuditReadSummary()
        try:
            yield from stream_audit_log(path, filters, summary, stdin)
        except AuditLogError as error:
            problems.append(str(error))
        summaries.append(summary.describe("<stdin>" if path == "-" else path))
