"""The Kubernetes authz library: exact declarations, builder semantics, and no authorizer at runtime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from staticadm.cel.libraries import authz
from staticadm.cel.libraries.spec import CelFunctionError

A = "kubernetes.authorization.Authorizer"
P = "kubernetes.authorization.PathCheck"
G = "kubernetes.authorization.GroupCheck"
R = "kubernetes.authorization.ResourceCheck"
D = "kubernetes.authorization.Decision"


def impl(overload_id: str) -> Callable[..., Any]:
    for function in authz.FUNCTIONS:
        for overload in function.overloads:
            if overload.overload_id == overload_id:
                return overload.impl
    raise KeyError(overload_id)


def test_type_names_match_kubernetes() -> None:
    assert authz.AUTHORIZER_TYPE_NAME == A
    assert authz.RESOURCE_CHECK_TYPE_NAME == R
    assert {t.name for t in authz.TYPES} == {A, P, G, R, D}


def test_signatures_match_kubernetes() -> None:
    decls = {(f.name, o.overload_id): (o.params, o.result, o.member) for f in authz.FUNCTIONS for o in f.overloads}
    assert decls == {
        ("path", "authorizer_path"): ((A, "string"), P, True),
        ("group", "authorizer_group"): ((A, "string"), G, True),
        ("serviceAccount", "authorizer_serviceaccount"): ((A, "string", "string"), A, True),
        ("resource", "groupcheck_resource"): ((G, "string"), R, True),
        ("subresource", "resourcecheck_subresource"): ((R, "string"), R, True),
        ("namespace", "resourcecheck_namespace"): ((R, "string"), R, True),
        ("name", "resourcecheck_name"): ((R, "string"), R, True),
        ("check", "pathcheck_check"): ((P, "string"), D, True),
        ("check", "resourcecheck_check"): ((R, "string"), D, True),
        ("errored", "decision_errored"): ((D,), "bool", True),
        ("error", "decision_error"): ((D,), "string", True),
        ("allowed", "decision_allowed"): ((D,), "bool", True),
        ("reason", "decision_reason"): ((D,), "string", True),
        ("fieldSelector", "authorizer_fieldselector"): ((R, "string"), R, True),
        ("labelSelector", "authorizer_labelselector"): ((R, "string"), R, True),
    }


def test_resource_check_builders() -> None:
    group = impl("authorizer_group")(authz.make_authorizer(), "apps")
    check = impl("groupcheck_resource")(group, "deployments")
    check = impl("resourcecheck_subresource")(check, "scale")
    check = impl("resourcecheck_namespace")(check, "test")
    check = impl("resourcecheck_name")(check, "backend")
    check = impl("authorizer_labelselector")(check, "app=x")
    check = impl("authorizer_fieldselector")(check, "spec.nodeName=n")
    assert check["@k8s"] == R
    assert (check["group"], check["resource"], check["subresource"], check["namespace"], check["name"]) == (
        "apps",
        "deployments",
        "scale",
        "test",
        "backend",
    )
    assert (check["labelSelector"], check["fieldSelector"]) == ("app=x", "spec.nodeName=n")


def test_request_resource_is_preset() -> None:
    rr = authz.make_request_resource("apps", "deployments", "status", "ns", "web")
    assert rr["@k8s"] == R
    assert (rr["group"], rr["resource"], rr["subresource"], rr["namespace"], rr["name"]) == (
        "apps",
        "deployments",
        "status",
        "ns",
        "web",
    )


@pytest.mark.parametrize("path", ["", "   "])
def test_empty_path_rejected(path: str) -> None:
    with pytest.raises(CelFunctionError, match=r"^path must not be empty$"):
        impl("authorizer_path")(authz.make_authorizer(), path)


@pytest.mark.parametrize("resource", ["", "  "])
def test_empty_resource_rejected(resource: str) -> None:
    group = impl("authorizer_group")(authz.make_authorizer(), "")
    with pytest.raises(CelFunctionError, match=r"^resource must not be empty$"):
        impl("groupcheck_resource")(group, resource)


def test_service_account_validation_order() -> None:
    sa = impl("authorizer_serviceaccount")
    assert sa(authz.make_authorizer(), "default", "builder")["user"] == "system:serviceaccount:default:builder"
    with pytest.raises(CelFunctionError, match=r"^Invalid service account name$"):
        sa(authz.make_authorizer(), "not@valid", "invalid@*name")
    with pytest.raises(CelFunctionError, match=r"^Invalid service account namespace$"):
        sa(authz.make_authorizer(), "not@a#valid!namespace", "validname")
    with pytest.raises(CelFunctionError, match=r"^Invalid service account namespace$"):
        sa(authz.make_authorizer(), "valid.example.com", "validname")


def test_check_reports_missing_authorizer() -> None:
    path_check = impl("authorizer_path")(authz.make_authorizer(), "/healthz")
    with pytest.raises(CelFunctionError) as exc:
        impl("pathcheck_check")(path_check, "get")
    assert "no authorizer is configured" in str(exc.value)
    rr = authz.make_request_resource("", "pods")
    with pytest.raises(CelFunctionError, match="no authorizer is configured"):
        impl("resourcecheck_check")(rr, "create")


def test_end_to_end_type_checks_and_fails_at_check() -> None:
    from staticadm.cel import EvalError, evaluate_standalone

    result = evaluate_standalone(
        "authorizer.group('apps').resource('deployments').namespace('ns').check('create').allowed()",
        {"authorizer": authz.make_authorizer()},
    )
    assert isinstance(result, EvalError)
    assert "no authorizer is configured" in str(result)
