"""How many times one request is handed across a module boundary on its way through validating admission.

Starts at the daemon's validating entry (the function the server's ``/validate`` handler calls with the parsed
request) and, with ``sys.setprofile``, counts every Python call whose callee lives in a different module than its
caller and receives that parsed request object itself (by identity) among its arguments. Prints the count, the
modules visited in order and how many of those visits return to a module already left. The call into the entry
itself is not counted; property getters and methods of the request count (the request is their ``self``).

The request is a representative one: a Pod CREATE in a labelled namespace, hitting three ValidatingAdmissionPolicies
with match conditions, variables and a namespace selector (``representative_case``). Traced twice: cold (the first
request the snapshot sees) and warm (after another request of the same shape, as a running daemon has seen: the
match outcomes remembered by request shape, the all-clear answer kept by input).

    python tools/trace_request_path.py
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from staticadm.admission.endpoints import validate
from staticadm.admission.namespaces import NamespaceSource, StaticNamespaces, namespace_info_from_object
from staticadm.admission.request import AdmissionRequest, parse_admission_review
from staticadm.manifests.loader import load_manifest_directory
from staticadm.snapshot import Snapshot, build_snapshot

_PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}

_POLICIES: list[dict[str, Any]] = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
     "metadata": {"name": "no-privileged.static.k8s.io"},
     "spec": {"failurePolicy": "Fail",
              "matchConstraints": {"resourceRules": [_PODS],
                                   "namespaceSelector": {"matchExpressions": [
                                       {"key": "tier", "operator": "In", "values": ["apps"]}]}},
              "matchConditions": [{"name": "not-system",
                                   "expression": "!request.userInfo.username.startsWith('system:')"}],
              "variables": [{"name": "containers", "expression": "object.spec.containers"}],
              "validations": [{"expression": "variables.containers.all(c, !has(c.securityContext) || "
                                             "!has(c.securityContext.privileged) || !c.securityContext.privileged)",
                               "messageExpression": "'privileged containers in ' + request.namespace"}]}},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
     "metadata": {"name": "pinned-images.static.k8s.io"},
     "spec": {"failurePolicy": "Fail",
              "matchConstraints": {"resourceRules": [_PODS]},
              "matchConditions": [{"name": "labelled", "expression": "has(object.metadata.labels)"}],
              "variables": [{"name": "images", "expression": "object.spec.containers.map(c, c.image)"}],
              "validations": [{"expression": "variables.images.all(i, !i.endsWith(':latest'))",
                               "message": "images must be pinned"}]}},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
     "metadata": {"name": "team-label.static.k8s.io"},
     "spec": {"failurePolicy": "Fail",
              "matchConstraints": {"resourceRules": [_PODS]},
              "validations": [{"expression": "namespaceObject.metadata.labels.tier == 'apps' ? "
                                             "has(object.metadata.labels.team) : true"}]}},
]

_BINDINGS = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
     "metadata": {"name": policy["metadata"]["name"].replace(".static", "-binding.static")},
     "spec": {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}}
    for policy in _POLICIES
]

_NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"tier": "apps"}}}


def _review(uid: str) -> dict[str, Any]:
    pods = {"group": "", "version": "v1", "resource": "pods"}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web", "team": "a"}},
           "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "securityContext": {"privileged": False}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": pods,
                        "requestKind": {"group": "", "version": "v1", "kind": "Pod"}, "requestResource": pods,
                        "name": "web", "namespace": "shop", "operation": "CREATE",
                        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                        "object": pod, "oldObject": None}}


@dataclass(frozen=True)
class Case:
    snapshot: Snapshot
    namespaces: NamespaceSource
    requests: tuple[AdmissionRequest, AdmissionRequest]


def representative_case(directory: Path) -> Case:
    """The snapshot, the namespaces and two requests of the same shape (a warm-up one and the traced one)."""
    (directory / "policies.static.k8s.io.yaml").write_text(yaml.safe_dump_all([*_POLICIES, *_BINDINGS]))
    loaded = load_manifest_directory(str(directory))
    if loaded.errors:
        raise SystemExit("\n".join(str(error) for error in loaded.errors))
    namespaces = StaticNamespaces({"shop": namespace_info_from_object(_NAMESPACE)})
    requests = []
    for uid in ("705ab4f5-6393-11e8-b7cc-42010a800001", "705ab4f5-6393-11e8-b7cc-42010a800002"):
        parsed = parse_admission_review(_review(uid))
        assert isinstance(parsed, AdmissionRequest), parsed
        requests.append(parsed)
    return Case(build_snapshot(loaded), namespaces, (requests[0], requests[1]))


@dataclass(frozen=True)
class Trace:
    #: The module the entry lives in, then the callee module of each counted call, in order.
    modules: tuple[str, ...]
    #: The counted calls as ``caller module -> callee module.function``.
    calls: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.calls)

    @property
    def returns(self) -> int:
        """Counted calls into a module the request had already been in and left."""
        seen: set[str] = set()
        returns = 0
        for module in self.modules:
            returns += module in seen
            seen.add(module)
        return returns


def trace(entry: Callable[..., Any], request: AdmissionRequest, *args: Any, **kwargs: Any) -> Trace:
    """Calls ``entry(*args, request, **kwargs)``-style (``request`` must be among ``args``) and follows ``request``."""
    modules = [entry.__module__]
    calls: list[str] = []

    entry_code = getattr(entry, "__code__", None)

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or frame.f_back is None or frame.f_code is entry_code:
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "")
        if callee == caller or not callee.startswith("staticadm"):
            return
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
        names = code.co_varnames[:count]
        local = frame.f_locals
        if any(_holds(local.get(name), request) for name in names):
            modules.append(callee)
            calls.append(f"{caller} -> {callee}.{code.co_name}")

    sys.setprofile(profile)
    try:
        entry(*args)
    finally:
        sys.setprofile(None)
    return Trace(tuple(modules), tuple(calls))


def _holds(value: Any, request: AdmissionRequest) -> bool:
    if value is request:
        return True
    if isinstance(value, tuple | list):  # *args
        return any(item is request for item in value)
    if isinstance(value, dict):  # **kwargs
        return any(item is request for item in value.values())
    return False


def trace_validating(directory: Path) -> tuple[Trace, Trace]:
    """(cold, warm): the first request of a fresh snapshot, then the second request of the same shape."""
    case = representative_case(directory)
    first, second = case.requests
    cold = trace(validate, first, case.snapshot, case.namespaces, first)
    warm = trace(validate, second, case.snapshot, case.namespaces, second)
    return cold, warm


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        traces = trace_validating(Path(directory))
    for name, result in zip(("cold", "warm"), traces, strict=True):
        print(f"== {name}")
        for call in result.calls:
            print(f"  {call}")
        print(f"calls handing the request across modules: {result.count}")
        print(f"modules visited: {len(set(result.modules))} ({', '.join(dict.fromkeys(result.modules))})")
        print(f"returns to a module already left: {result.returns}")


if __name__ == "__main__":
    main()
