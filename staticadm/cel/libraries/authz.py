"""Kubernetes CEL authz library (``k8s.io/apiserver/pkg/cel/library/authz.go``).

The builder calls (``group``, ``resource``, ``namespace``, ...) evaluate and validate their arguments
like Kubernetes. ``check`` asks the request's authorizer (:data:`ACTIVE_AUTHORIZER`, the cluster view's
SubjectAccessReview session with ``--kubeconfig``); with none, it fails at runtime, naming why.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from staticadm.cel.libraries.format import name_is_dns_label, name_is_dns_subdomain
from staticadm.cel.libraries.spec import CelFunctionError, Function, OpaqueType, Overload
from staticadm.cel.values import make_opaque, opaque_type_name

AUTHORIZER_TYPE_NAME = "kubernetes.authorization.Authorizer"
PATH_CHECK_TYPE_NAME = "kubernetes.authorization.PathCheck"
GROUP_CHECK_TYPE_NAME = "kubernetes.authorization.GroupCheck"
RESOURCE_CHECK_TYPE_NAME = "kubernetes.authorization.ResourceCheck"
DECISION_TYPE_NAME = "kubernetes.authorization.Decision"

NO_AUTHORIZER_MESSAGE = "authorization check not possible: no authorizer is configured in staticadm"

#: ``user`` value meaning "the principal that sent the admission request".
REQUEST_USER = ""


@dataclass(frozen=True, slots=True)
class CheckAttributes:
    """What one ``check(verb)`` asks: ``authorizer.AttributesRecord`` as the library fills it."""

    user: str
    verb: str
    path: str | None = None
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    field_selector: str = ""
    label_selector: str = ""


@dataclass(frozen=True, slots=True)
class CheckDecision:
    """What a Decision answers: ``allowed()``, ``reason()``, and ``error()`` (``errored()`` when set)."""

    allowed: bool
    reason: str
    error: str


class AuthorizationPending(CelFunctionError):
    """The check's answer is being fetched; this round of the request's evaluation is discarded."""

    def __init__(self) -> None:
        super().__init__("authorization check pending")


class RequestAuthorizer(Protocol):
    def authorize(self, attributes: CheckAttributes) -> CheckDecision:
        """The decision, or AuthorizationPending when it is not known yet."""
        ...


#: The authorizer of the request being evaluated. A context variable because the engine calls ``check``
#: with only its CEL arguments; the request it belongs to is the evaluation's context (as Go passes
#: ``context.Context``), set around each evaluation and never shared between requests.
ACTIVE_AUTHORIZER: ContextVar[RequestAuthorizer | None] = ContextVar("staticadm_active_authorizer", default=None)


def make_authorizer(user: str = REQUEST_USER) -> dict[str, Any]:
    """Runtime value for the ``authorizer`` variable (``user`` is set by ``serviceAccount``)."""
    return make_opaque(AUTHORIZER_TYPE_NAME, user=user)


def make_request_resource(
    group: str, resource: str, subresource: str = "", namespace: str = "", name: str = ""
) -> dict[str, Any]:
    """Runtime value for ``authorizer.requestResource``, preset like ``NewResourceAuthorizerVal``."""
    return _resource_check(make_authorizer(), group, resource, subresource, namespace, name)


def _resource_check(
    authorizer: dict[str, Any],
    group: str,
    resource: str,
    subresource: str = "",
    namespace: str = "",
    name: str = "",
    field_selector: str = "",
    label_selector: str = "",
) -> dict[str, Any]:
    return make_opaque(
        RESOURCE_CHECK_TYPE_NAME,
        user=authorizer.get("user", REQUEST_USER),
        group=group,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
        fieldSelector=field_selector,
        labelSelector=label_selector,
    )


def _expect(value: Any, type_name: str) -> dict[str, Any]:
    if opaque_type_name(value) != type_name:
        raise CelFunctionError("no such overload")
    return dict(value)


def _authorizer_path(authz: dict[str, Any], path: str) -> dict[str, Any]:
    a = _expect(authz, AUTHORIZER_TYPE_NAME)
    if len(path.strip()) == 0:
        raise CelFunctionError("path must not be empty")
    return make_opaque(PATH_CHECK_TYPE_NAME, user=a.get("user", REQUEST_USER), path=path)


def _authorizer_group(authz: dict[str, Any], group: str) -> dict[str, Any]:
    a = _expect(authz, AUTHORIZER_TYPE_NAME)
    return make_opaque(GROUP_CHECK_TYPE_NAME, user=a.get("user", REQUEST_USER), group=group)


def _authorizer_service_account(authz: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    _expect(authz, AUTHORIZER_TYPE_NAME)
    # Kubernetes validates the name before the namespace.
    if name_is_dns_subdomain(name, False):
        raise CelFunctionError("Invalid service account name")
    if name_is_dns_label(namespace, False):
        raise CelFunctionError("Invalid service account namespace")
    return make_authorizer(f"system:serviceaccount:{namespace}:{name}")


def _group_check_resource(group_check: dict[str, Any], resource: str) -> dict[str, Any]:
    g = _expect(group_check, GROUP_CHECK_TYPE_NAME)
    if len(resource.strip()) == 0:
        raise CelFunctionError("resource must not be empty")
    return _resource_check(g, g["group"], resource)


def _setter(field: str) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    def impl(resource_check: dict[str, Any], value: str) -> dict[str, Any]:
        r = _expect(resource_check, RESOURCE_CHECK_TYPE_NAME)
        r[field] = value
        return r

    return impl


def _check(check: dict[str, Any], verb: str) -> dict[str, Any]:
    # Both check overloads share this impl: at runtime a PathCheck and a ResourceCheck are both plain
    # dicts, so the engine may route either one here.
    kind = opaque_type_name(check)
    if kind not in (PATH_CHECK_TYPE_NAME, RESOURCE_CHECK_TYPE_NAME):
        raise CelFunctionError("no such overload")
    authorizer = ACTIVE_AUTHORIZER.get()
    if authorizer is None:
        raise CelFunctionError(NO_AUTHORIZER_MESSAGE)
    user = check.get("user", REQUEST_USER)
    if kind == PATH_CHECK_TYPE_NAME:
        attributes = CheckAttributes(user, verb, path=check["path"])
    else:
        attributes = CheckAttributes(user, verb, group=check["group"], resource=check["resource"],
                                     subresource=check["subresource"], namespace=check["namespace"],
                                     name=check["name"], field_selector=check["fieldSelector"],
                                     label_selector=check["labelSelector"])
    decision = authorizer.authorize(attributes)
    return make_opaque(DECISION_TYPE_NAME, allowed=decision.allowed, reason=decision.reason, error=decision.error)


def _decision_field(field: str) -> Callable[[dict[str, Any]], Any]:
    # A Decision only comes from check(); one built otherwise lacks the fields and stands for an
    # unavailable check.
    def impl(decision: dict[str, Any]) -> Any:
        d = _expect(decision, DECISION_TYPE_NAME)
        if field not in d:
            raise CelFunctionError(NO_AUTHORIZER_MESSAGE)
        return d[field]

    return impl


def _decision_errored(decision: dict[str, Any]) -> bool:
    return bool(_decision_field("error")(decision))


def _type_only(type_name: str) -> Callable[[dict[str, Any]], str]:
    # Kubernetes' receiver-only values have no string form; JSON output just names the type.
    def to_string(value: dict[str, Any]) -> str:
        return type_name

    return to_string


TYPES: tuple[OpaqueType, ...] = tuple(
    OpaqueType(name, _type_only(name))
    for name in (
        AUTHORIZER_TYPE_NAME,
        PATH_CHECK_TYPE_NAME,
        GROUP_CHECK_TYPE_NAME,
        RESOURCE_CHECK_TYPE_NAME,
        DECISION_TYPE_NAME,
    )
)

_A, _P, _G, _R, _D = (
    AUTHORIZER_TYPE_NAME,
    PATH_CHECK_TYPE_NAME,
    GROUP_CHECK_TYPE_NAME,
    RESOURCE_CHECK_TYPE_NAME,
    DECISION_TYPE_NAME,
)

FUNCTIONS: tuple[Function, ...] = (
    Function("path", (Overload("authorizer_path", (_A, "string"), _P, _authorizer_path, member=True),)),
    Function("group", (Overload("authorizer_group", (_A, "string"), _G, _authorizer_group, member=True),)),
    Function(
        "serviceAccount",
        (
            Overload(
                "authorizer_serviceaccount",
                (_A, "string", "string"),
                _A,
                _authorizer_service_account,
                member=True,
            ),
        ),
    ),
    Function("resource", (Overload("groupcheck_resource", (_G, "string"), _R, _group_check_resource, member=True),)),
    Function(
        "subresource",
        (Overload("resourcecheck_subresource", (_R, "string"), _R, _setter("subresource"), member=True),),
    ),
    Function(
        "namespace",
        (Overload("resourcecheck_namespace", (_R, "string"), _R, _setter("namespace"), member=True),),
    ),
    Function("name", (Overload("resourcecheck_name", (_R, "string"), _R, _setter("name"), member=True),)),
    Function(
        "check",
        (
            Overload("pathcheck_check", (_P, "string"), _D, _check, member=True),
            Overload("resourcecheck_check", (_R, "string"), _D, _check, member=True),
        ),
    ),
    Function("errored", (Overload("decision_errored", (_D,), "bool", _decision_errored, member=True),)),
    Function("error", (Overload("decision_error", (_D,), "string", _decision_field("error"), member=True),)),
    Function("allowed", (Overload("decision_allowed", (_D,), "bool", _decision_field("allowed"), member=True),)),
    Function("reason", (Overload("decision_reason", (_D,), "string", _decision_field("reason"), member=True),)),
    # AuthzSelectors (1.31+): recorded on the check, only consulted by a real authorizer.
    Function(
        "fieldSelector",
        (Overload("authorizer_fieldselector", (_R, "string"), _R, _setter("fieldSelector"), member=True),),
    ),
    Function(
        "labelSelector",
        (Overload("authorizer_labelselector", (_R, "string"), _R, _setter("labelSelector"), member=True),),
    ),
)
