"""The AdmissionReview kube-apiserver would send for a plain object, so policies can be tried on YAML.

kube-apiserver's admission attributes come from the request URL (resource, subresource, namespace,
name), the operation, the authenticated user and the object(s). For a plain object we take the group,
version and kind from the object, the resource and scope from the built-in API resources of Kubernetes
1.36 (``kubectl api-resources``), and for other kinds guess the resource as client-go's
``meta.UnsafeGuessKindToResource`` does (a scope taken from whether the object names a namespace).
A built-in kind's object (and old object) is sent as kube-apiserver holds it: decoded into its Go struct,
defaulted, encoded again (:mod:`staticadm.kinds`); a custom kind's as given.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticadm.admission.request import OPERATIONS
from staticadm.defaults import DEFAULT_USERNAME
from staticadm.kinds import TypedObjectError, as_admitted
from staticadm.kinds.resources import BUILTIN_RESOURCES
from staticadm.yamljson import copy_json

#: Kinds that are only ever the object of a subresource (group, kind) -> the subresource: their request names
#: the parent resource (``deployments/scale`` with an ``autoscaling/v1 Scale``), which the object cannot say.
SUBRESOURCE_KINDS: Mapping[tuple[str, str], str] = {
    ("autoscaling", "Scale"): "scale",
    ("policy", "Eviction"): "eviction",
    ("authentication.k8s.io", "TokenRequest"): "token",
}
_VERSION = re.compile(r"v\d+(?:(?:alpha|beta)\d+)?")

#: The options object kube-apiserver passes for each operation (``request.options``).
_OPTIONS_KINDS = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"


class ObjectInputError(ValueError):
    """A plain object that cannot be turned into an admission request; the message names the field."""


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """What the URL and the authenticated user would say about the request."""

    operation: str = "CREATE"
    username: str = DEFAULT_USERNAME
    uid: str = ""
    #: The groups the user authenticated with; the request carries ``user_groups`` of them.
    groups: tuple[str, ...] = ()
    #: None: the object's own namespace, else "default" for a namespaced kind (kubectl's default).
    namespace: str | None = None
    #: ``status``, or with the parent resource, as kubectl names resources: ``deployments.apps/scale``,
    #: ``widgets.v1beta1.example.com/scale`` (``parent_resource``).
    subresource: str = ""
    dry_run: bool = False


def user_groups(username: str, groups: Sequence[str]) -> tuple[str, ...]:
    """The groups kube-apiserver's authentication gives a user who authenticated with ``groups``: its
    ``AuthenticatedGroupAdder`` appends ``system:authenticated`` unless the user is ``system:anonymous`` or
    already in ``system:authenticated`` or ``system:unauthenticated``; the anonymous authenticator puts
    ``system:anonymous`` in ``system:unauthenticated``. ``review``, ``diff``, ``audit`` and ``staticadm test``
    all build their users here, so the same flags or case make the same request."""
    if username == ANONYMOUS:
        return tuple(groups) or (ALL_UNAUTHENTICATED,)
    if ALL_AUTHENTICATED in groups or ALL_UNAUTHENTICATED in groups:
        return tuple(groups)
    return (*groups, ALL_AUTHENTICATED)


def user_info(settings: RequestSettings) -> dict[str, Any]:
    """``request.userInfo`` of a built request."""
    return {"username": settings.username, "groups": list(user_groups(settings.username, settings.groups)),
            **({"uid": settings.uid} if settings.uid else {})}


def guess_resource(kind: str) -> str:
    """``meta.UnsafeGuessKindToResource``: the plural client-go guesses for a kind it does not know."""
    singular = kind.lower()
    if singular.endswith("endpoints"):
        return singular
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def parent_resource(subresource: str, object_group: str, object_version: str
                    ) -> tuple[tuple[str, str, str] | None, str]:
    """((group, version, resource) of the parent the subresource names, or None; the subresource's name).
    The parent is ``RESOURCE[.VERSION].GROUP`` as kubectl reads a resource argument (a second part that is a
    version makes it resource.version.group); without a version, the object's when it is of the parent's group,
    else v1 (every built-in resource with a scale subresource is v1)."""
    parent, slash, name = subresource.rpartition("/")
    if not slash:
        return None, subresource
    if not parent or not name:
        raise ObjectInputError(f"--subresource {subresource!r}: give RESOURCE[.GROUP]/SUBRESOURCE, e.g. "
                               "deployments.apps/scale")
    resource, _, rest = parent.partition(".")
    version, dot, group = rest.partition(".")
    if not (dot and _VERSION.fullmatch(version)):
        version, group = "", rest
    if not version:
        version = object_version if group == object_group else "v1"
    return (group, version, resource), name


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _identity(document: Any, what: str) -> tuple[str, str, dict[str, Any]]:
    if not isinstance(document, dict):
        raise ObjectInputError(f"{what} must be a Kubernetes object (a mapping), got {type(document).__name__}")
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if not isinstance(api_version, str) or not api_version:
        raise ObjectInputError(f"{what}: apiVersion must be a non-empty string")
    if not isinstance(kind, str) or not kind:
        raise ObjectInputError(f"{what}: kind must be a non-empty string")
    metadata = document.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ObjectInputError(f"{what}: metadata must be a mapping")
    return api_version, kind, metadata


def object_key(document: Any) -> tuple[str, str, str, str] | None:
    """(apiVersion, kind, namespace, name): how an old object is paired with its new one."""
    if not isinstance(document, dict) or not isinstance(document.get("metadata", {}), dict):
        return None
    metadata = document.get("metadata", {})
    return (str(document.get("apiVersion")), str(document.get("kind")), str(metadata.get("namespace") or ""),
            str(metadata.get("name") or ""))


@dataclass(frozen=True, slots=True)
class BuiltRequest:
    """The AdmissionReview for a plain object, and which of its fields Kubernetes' defaulting set
    (``object: spec.replicas``, ``oldObject: ...``) or its kind's struct dropped."""

    review: dict[str, Any]
    defaulted: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


def admitted_object(obj: dict[str, Any], what: str) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
    """A copy of ``obj`` as kube-apiserver holds it before admission (typed and defaulted when its kind is
    built in), with the fields defaulted and dropped, each named ``what: path``."""
    try:
        typed = as_admitted(obj)
    except TypedObjectError as error:
        raise ObjectInputError(f"{what}: {error}") from None
    if typed is None:
        return copy_json(obj), (), ()
    return (typed.value, tuple(f"{what}: {path}" for path in typed.defaulted),
            tuple(f"{what}: {path}" for path in typed.dropped))


def review_for_object(obj: Any, old: Any, settings: RequestSettings, *, uid_seed: str) -> dict[str, Any]:
    """The AdmissionReview for one object (see :func:`build_request_for_object`)."""
    return build_request_for_object(obj, old, settings, uid_seed=uid_seed).review


def build_request_for_object(obj: Any, old: Any, settings: RequestSettings, *, uid_seed: str) -> BuiltRequest:
    """The AdmissionReview for one object. ``obj`` is the object being written (for DELETE, the object
    being deleted, which kube-apiserver sends as oldObject); ``old`` is required for UPDATE only."""
    operation = settings.operation
    if operation not in OPERATIONS:
        raise ObjectInputError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    api_version, kind, metadata = _identity(obj, "the object")
    if operation == "UPDATE":
        if old is None:
            raise ObjectInputError("an UPDATE needs the object before the change (--old FILE)")
        old_version, old_kind, _ = _identity(old, "the old object")
        if (old_version, old_kind) != (api_version, kind):
            raise ObjectInputError(f"the old object is {old_version} {old_kind}, the object {api_version} {kind}")
    group, version = _group_version(api_version)
    parent, subresource = parent_resource(settings.subresource, group, version)
    object_namespace = metadata.get("namespace")
    if object_namespace is not None and not isinstance(object_namespace, str):
        raise ObjectInputError("the object: metadata.namespace must be a string")
    resource_group, resource_version = group, version
    if parent is not None:
        resource_group, resource_version, resource = parent
        scopes = [scoped for (known_group, _), (known, scoped) in BUILTIN_RESOURCES.items()
                  if (known_group, known) == (resource_group, resource)]
        namespaced = scopes[0] if scopes else bool(object_namespace or settings.namespace)
    elif (group, kind) in SUBRESOURCE_KINDS:
        raise ObjectInputError(f"an {api_version} {kind} is only the object of a {SUBRESOURCE_KINDS[group, kind]} "
                               "subresource: name whose, e.g. --subresource "
                               f"deployments.apps/{SUBRESOURCE_KINDS[group, kind]} (a case's subresource field)")
    elif (group, kind) in BUILTIN_RESOURCES:
        resource, namespaced = BUILTIN_RESOURCES[(group, kind)]
    else:
        resource = guess_resource(kind)
        namespaced = bool(object_namespace or settings.namespace)
    namespace = ""
    if namespaced:
        namespace = settings.namespace or object_namespace or "default"
        if object_namespace and object_namespace != namespace:
            raise ObjectInputError(f"the object's metadata.namespace {object_namespace!r} is not the request's "
                                   f"namespace {namespace!r}")
    name = metadata.get("name") or ""
    if not isinstance(name, str):
        raise ObjectInputError("the object: metadata.name must be a string")
    if not name and operation != "CREATE":
        raise ObjectInputError(f"a {operation} needs the object's metadata.name")
    written, defaulted, dropped = admitted_object(obj, "oldObject" if operation == "DELETE" else "object")
    old_written = None
    if operation == "UPDATE":
        old_written, old_defaulted, old_dropped = admitted_object(old, "oldObject")
        defaulted, dropped = defaulted + old_defaulted, dropped + old_dropped
    if namespaced:
        # kube-apiserver fills an empty namespace from the request URL before admission.
        written.setdefault("metadata", {})["namespace"] = namespace
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": resource_group, "version": resource_version, "resource": resource}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, uid_seed)),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "operation": operation,
        "userInfo": user_info(settings),
        "object": None if operation == "DELETE" else written,
        "oldObject": old_written if operation == "UPDATE" else (written if operation == "DELETE" else None),
        "dryRun": settings.dry_run,
    }
    if subresource:
        request["subResource"] = request["requestSubResource"] = subresource
    if name:
        request["name"] = name
    if namespace:
        request["namespace"] = namespace
    if operation in _OPTIONS_KINDS:
        request["options"] = {"kind": _OPTIONS_KINDS[operation], "apiVersion": "meta.k8s.io/v1"}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return BuiltRequest(review, defaulted, dropped)


def pair_old_objects(objects: Sequence[Any], olds: Sequence[Any]) -> list[Any]:
    """Each object's old version from ``olds``, matched by apiVersion, kind, namespace and name."""
    by_key = {object_key(old): old for old in olds}
    paired = []
    for obj in objects:
        key = object_key(obj)
        if key not in by_key:
            raise ObjectInputError(f"no old object for {key[1] if key else '?'} {key[3] if key else '?'!s} "
                                   "(old objects are matched by apiVersion, kind, namespace and name)")
        paired.append(by_key[key])
    return paired
