"""Parsing an AdmissionReview (``admission.k8s.io/v1`` or ``v1beta1``) into a typed request.

kube-apiserver builds the review itself, so a malformed one means a misconfigured caller: we answer
with an error naming the first bad field instead of guessing. Parsing never raises on any JSON value.

Stage: parse (the first). Receives the AdmissionReview's JSON; hands on an :class:`AdmissionRequest`, its original
kind, resource and subresource resolved once, which every later stage reads as is.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from staticadm.json_types import json_type_name

REVIEW_API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    def to_json(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "kind": self.kind}


@dataclass(frozen=True, slots=True)
class GroupVersionResource:
    group: str
    version: str
    resource: str

    def to_json(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "resource": self.resource}

    def group_resource(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


NAMESPACES_RESOURCE = GroupVersionResource("", "v1", "namespaces")


#: The ``extra`` of a user without any: one shared read-only map.
_NO_EXTRA: Mapping[str, tuple[str, ...]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _NO_EXTRA)

    def to_json(self) -> dict[str, Any]:
        # authenticationv1.UserInfo has omitempty on every field.
        out: dict[str, Any] = {}
        if self.username:
            out["username"] = self.username
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {key: list(values) for key, values in self.extra.items()}
        return out


# Not frozen: one per request, and a frozen dataclass builds through object.__setattr__, once per field (19);
# nothing changes a request once parsed.
@dataclass(slots=True)
class AdmissionRequest:
    """One admission request as the webhook sees it.

    ``kind``/``resource``/``sub_resource`` are the version kube-apiserver sent the object in (what
    the staticadm webhook registration matched); ``request_*`` are the original request's. In-process
    policies match against the original, so :attr:`original_resource` and friends are what matching
    uses.
    """

    review_api_version: str
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: str
    sub_resource: str = ""
    request_kind: GroupVersionKind | None = None
    request_resource: GroupVersionResource | None = None
    request_sub_resource: str | None = None
    name: str = ""
    namespace: str = ""
    user_info: UserInfo = field(default_factory=UserInfo)
    object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    dry_run: bool | None = None
    options: Mapping[str, Any] | None = None
    #: The original request's kind, resource and subresource (``request_*``, else what was sent): resolved once
    #: here, read by matching, the activation and the answer alike (a slot read, not a call, per stage).
    original_kind: GroupVersionKind = field(init=False, repr=False, compare=False)
    original_resource: GroupVersionResource = field(init=False, repr=False, compare=False)
    original_sub_resource: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.original_kind = self.request_kind if self.request_kind is not None else self.kind
        self.original_resource = self.request_resource if self.request_resource is not None else self.resource
        self.original_sub_resource = (self.request_sub_resource if self.request_sub_resource is not None
                                      else self.sub_resource)


@dataclass(frozen=True, slots=True)
class RequestError:
    """Why a review could not be parsed; ``uid`` is echoed when it could be read."""

    message: str
    review_api_version: str = "admission.k8s.io/v1"
    uid: str = ""


class _Invalid(Exception):
    pass


def _type_name(value: Any) -> str:
    return json_type_name(value, boolean="boolean")


def _string(container: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str:
    value = container.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise _Invalid(f"{path}.{key} must be a string, got {_type_name(value)}")
    return value


def _object(container: Mapping[str, Any], key: str, path: str) -> dict[str, Any] | None:
    value = container.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid(f"{path}.{key} must be an object, got {_type_name(value)}")
    return value


def _group_version(container: Mapping[str, Any], key: str, last_field: str, *,
                   required: bool) -> tuple[str, str, str] | None:
    """Reads a {group, version, <kind|resource>} object; version and the last field must be non-empty."""
    value: Any = container.get(key)
    if value.__class__ is dict:
        # The shape every real request has, checked without building error paths (four per request).
        group, version, last = value.get("group", ""), value.get("version"), value.get(last_field)
        if group.__class__ is str and version.__class__ is str and last.__class__ is str and version and last:
            return group, version, last
    path = f"request.{key}"
    value = _object(container, key, "request")
    if value is None:
        if required:
            raise _Invalid(f"{path} is required")
        return None
    parts = (_string(value, "group", path), _string(value, "version", path), _string(value, last_field, path))
    for name, text in (("version", parts[1]), (last_field, parts[2])):
        if not text:
            raise _Invalid(f"{path}.{name} must not be empty")
    return parts


def _gvk(container: Mapping[str, Any], key: str, *, required: bool) -> GroupVersionKind | None:
    parts = _group_version(container, key, "kind", required=required)
    return None if parts is None else _kind(*parts)


def _gvr(container: Mapping[str, Any], key: str, *, required: bool) -> GroupVersionResource | None:
    parts = _group_version(container, key, "resource", required=required)
    return None if parts is None else _resource(*parts)


# Each kind and resource a request names is made once (a cluster sends a few hundred): requests share them, so
# comparing two is mostly an identity check, and parsing makes no new ones.
@functools.lru_cache(maxsize=4096)
def _kind(group: str, version: str, kind: str) -> GroupVersionKind:
    return GroupVersionKind(group, version, kind)


@functools.lru_cache(maxsize=4096)
def _resource(group: str, version: str, resource: str) -> GroupVersionResource:
    return GroupVersionResource(group, version, resource)


def _user_info(request: Mapping[str, Any]) -> UserInfo:
    value = _object(request, "userInfo", "request")
    if value is None:
        return UserInfo()
    path = "request.userInfo"
    groups = value.get("groups")
    if groups is None:
        groups = []
    if groups.__class__ is not list or not all(group.__class__ is str for group in groups):
        raise _Invalid(f"{path}.groups must be an array of strings")
    extra_raw = value.get("extra")
    if extra_raw is None:
        # Most users (service accounts, controllers): nothing to copy.
        return UserInfo(_string(value, "username", path), _string(value, "uid", path), tuple(groups), _NO_EXTRA)
    if not isinstance(extra_raw, dict):
        raise _Invalid(f"{path}.extra must be an object, got {_type_name(extra_raw)}")
    extra: dict[str, tuple[str, ...]] = {}
    for key, values in extra_raw.items():
        if values is None:
            values = []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise _Invalid(f"{path}.extra[{key}] must be an array of strings")
        extra[key] = tuple(values)
    return UserInfo(_string(value, "username", path), _string(value, "uid", path), tuple(groups),
                    MappingProxyType(extra))


def _shown(value: Any) -> str:
    """A wrong value as an error describes it: never its content, which comes from the request body (and
    could be anything a client sent, Secrets included)."""
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return _type_name(value)


def parse_admission_review(review: Any) -> AdmissionRequest | RequestError:
    """The typed request, or the first problem found (never raises)."""
    if not isinstance(review, dict):
        return RequestError(f"an AdmissionReview must be a JSON object, got {_type_name(review)}")
    api_version = review.get("apiVersion")
    if api_version not in REVIEW_API_VERSIONS:
        return RequestError(f"apiVersion must be one of {', '.join(REVIEW_API_VERSIONS)}, got {_shown(api_version)}")
    kind = review.get("kind")
    if kind != "AdmissionReview":
        return RequestError(f"kind must be AdmissionReview, got {_shown(kind)}", api_version)
    request = review.get("request")
    if not isinstance(request, dict):
        return RequestError("request is required" if request is None
                            else f"request must be an object, got {_type_name(request)}", api_version)
    uid = request.get("uid")
    if not isinstance(uid, str):
        return RequestError("request.uid must be a string", api_version)
    if not uid:
        return RequestError("request.uid must not be empty", api_version)
    try:
        return _parse_request(api_version, uid, request)
    except _Invalid as error:
        return RequestError(str(error), api_version, uid)


def _parse_request(api_version: str, uid: str, request: Mapping[str, Any]) -> AdmissionRequest:
    kind = _gvk(request, "kind", required=True)
    resource = _gvr(request, "resource", required=True)
    assert kind is not None and resource is not None
    operation = _string(request, "operation", "request", required=True)
    if operation not in OPERATIONS:
        raise _Invalid(f"request.operation must be one of {', '.join(OPERATIONS)}, got {_shown(operation)}")
    request_sub_resource = request.get("requestSubResource")
    if request_sub_resource is not None and not isinstance(request_sub_resource, str):
        raise _Invalid(f"request.requestSubResource must be a string, got {_type_name(request_sub_resource)}")
    dry_run = request.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise _Invalid(f"request.dryRun must be a boolean, got {_type_name(dry_run)}")
    request_kind = _gvk(request, "requestKind", required=False)
    request_resource = _gvr(request, "requestResource", required=False)
    sub_resource = _string(request, "subResource", "request")
    # Positional, in field order: a frozen dataclass's keyword call costs a third more (once per request).
    return AdmissionRequest(api_version, uid, kind, resource, operation, sub_resource, request_kind, request_resource,
                            request_sub_resource, _string(request, "name", "request"),
                            _string(request, "namespace", "request"), _user_info(request),
                            _object(request, "object", "request"), _object(request, "oldObject", "request"), dry_run,
                            _object(request, "options", "request"))


def describe_subject(request: AdmissionRequest) -> str:
    """What the request writes, as an operator names it: ``UPDATE deployments.apps shop/api``."""
    name = request.name or "(name generated)"
    what = request.original_resource.group_resource()
    if request.original_sub_resource:
        what += f"/{request.original_sub_resource}"
    return f"{request.operation} {what} {f'{request.namespace}/' if request.namespace else ''}{name}"


def request_uid(review: Any) -> str:
    """The uid of a review that may not parse, for echoing in an error response."""
    if isinstance(review, dict) and isinstance(review.get("request"), dict):
        uid = review["request"].get("uid")
        if isinstance(uid, str):
            return uid
    return ""
