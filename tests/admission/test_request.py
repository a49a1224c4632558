"""AdmissionReview parsing: every malformed input is an error naming the field, never an exception."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from staticadm.admission.request import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    RequestError,
    UserInfo,
    parse_admission_review,
)
from tests.admission.helpers import review


def _broken(**changes: Any) -> dict[str, Any]:
    raw = review()
    raw["request"].update(changes)
    return raw


@pytest.mark.parametrize(("raw", "message"), [
    (None, "an AdmissionReview must be a JSON object, got null"),
    ([], "an AdmissionReview must be a JSON object, got array"),
    ({"apiVersion": "v1", "kind": "AdmissionReview"},
     "apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1, got a string of 2 characters"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"},
     "kind must be AdmissionReview, got a string of 3 characters"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request is required"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": 3},
     "request must be an object, got number"),
    (_broken(uid=5), "request.uid must be a string"),
    (_broken(uid=""), "request.uid must not be empty"),
    (_broken(kind=None), "request.kind is required"),
    (_broken(kind={"group": "apps", "version": "v1"}), "request.kind.kind must not be empty"),
    (_broken(resource={"group": "apps", "version": "", "resource": "x"}), "request.resource.version must not be empty"),
    (_broken(operation="PATCH"),
     "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got a string of 5 characters"),
    (_broken(name=1), "request.name must be a string, got number"),
    (_broken(object="x"), "request.object must be an object, got string"),
    (_broken(dryRun="yes"), "request.dryRun must be a boolean, got string"),
    (_broken(userInfo={"groups": "admins"}), "request.userInfo.groups must be an array of strings"),
    (_broken(userInfo={"extra": {"k": "v"}}), "request.userInfo.extra[k] must be an array of strings"),
    (_broken(requestSubResource=1), "request.requestSubResource must be a string, got number"),
])
def test_errors_name_the_field(raw: Any, message: str) -> None:
    result = parse_admission_review(raw)
    assert isinstance(result, RequestError)
    assert result.message == message


def test_valid_review_parses() -> None:
    result = parse_admission_review(review(sub="scale"))
    assert isinstance(result, AdmissionRequest)
    assert result.uid and result.original_sub_resource == "scale" and result.user_info.username == "alice"


def test_missing_request_sub_resource_falls_back_to_sub_resource() -> None:
    raw = review()
    raw["request"]["subResource"] = "scale"
    result = parse_admission_review(raw)
    assert isinstance(result, AdmissionRequest) and result.original_sub_resource == "scale"


def test_every_field_lands_in_its_own_attribute() -> None:
    # Every string differs, so a field read into another attribute (parsing builds the request positionally) shows.
    raw = review(sub="scale", name="the-name", namespace="the-namespace", dryRun=True,
                 options={"kind": "CreateOptions"}, old={"old": True}, obj={"new": True})
    raw["request"].update(requestKind={"group": "rg", "version": "rv", "kind": "RK"},
                          requestResource={"group": "rg", "version": "rv", "resource": "rr"},
                          requestSubResource="status",
                          userInfo={"username": "u", "uid": "i", "groups": ["g"], "extra": {"k": ["v"]}})
    result = parse_admission_review(raw)
    assert result == AdmissionRequest(
        review_api_version="admission.k8s.io/v1", uid=raw["request"]["uid"],
        kind=GroupVersionKind("apps", "v1", "Deployment"), resource=GroupVersionResource("apps", "v1", "deployments"),
        operation="CREATE", sub_resource="scale", request_kind=GroupVersionKind("rg", "rv", "RK"),
        request_resource=GroupVersionResource("rg", "rv", "rr"), request_sub_resource="status", name="the-name",
        namespace="the-namespace", user_info=UserInfo("u", "i", ("g",), MappingProxyType({"k": ("v",)})),
        object={"new": True}, old_object={"old": True}, dry_run=True, options={"kind": "CreateOptions"})
    without_extra = parse_admission_review(review())
    assert isinstance(without_extra, AdmissionRequest)
    assert without_extra.user_info == UserInfo("alice", "", ("system:authenticated",))
