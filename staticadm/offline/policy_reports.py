"""The decisions of ``audit`` and ``review`` as the reports the cluster's dashboards read: PolicyReport and
ClusterPolicyReport (``wgpolicyk8s.io/v1alpha2``, the Policy WG's API that Policy Reporter, Kyverno and Trivy
write and read) or their successor, Report and ClusterReport (``openreports.io/v1alpha1``).

Two layouts (:data:`LAYOUTS`). ``namespace``: one report per namespace holds the results of the namespaced
objects in it, one cluster-scoped report those of cluster-scoped objects (namespaces, nodes, ...); each result
names its object in ``resources`` (an ObjectReference: a namespace's report covers many objects, so its own
``scope``, one object, is unset). ``object``: one report per object, as Kyverno's reports controller writes
them, its ``scope`` the object (in the object's namespace, or cluster-scoped for a cluster-scoped object),
named by the object's uid (else a digest of its reference) and, when the uid is known, owned by the object so
that kube-apiserver's garbage collector removes it with the object. A result is one (policy binding, object),
named by the policy and ``properties.binding`` (as Kyverno reports ValidatingAdmissionPolicies).
``result`` is what those APIs define:

- ``pass``: the binding applied and every validation held (a MutatingAdmissionPolicy binding: it ran);
- ``fail``: a validation failed and the binding's validationActions include Deny (the requirement is scored);
- ``warn``: a validation failed under a binding that only warns or audits (``scored: false``);
- ``error``: the policy could not be evaluated (an expression, a match condition, a configuration or the cost
  budget failed), whatever its failurePolicy made of it;
- ``skip``: the binding selected the object but a matchCondition excluded it (the APIs' "not selected for
  evaluation", as Kyverno reports a rule whose preconditions fail).

A policy whose rules or a binding whose matchResources do not select the object has no result for it (as Kyverno
reports: the object is outside the policy's scope). The summary counts the results by ``result``.

This module only shapes documents from :func:`staticadm.offline.decision_report.decision` outputs; the commands
write or apply them.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The ``source`` of every result (and, in OpenReports, of every report).
SOURCE = "staticadm"
#: The name of every report staticadm writes: one per namespace, so the namespace tells them apart.
REPORT_NAME = "staticadm"
#: The label every report carries, as Kyverno labels its own (``app.kubernetes.io/managed-by: kyverno``).
MANAGED_BY = {"app.kubernetes.io/managed-by": "staticadm"}
RESULTS = ("pass", "fail", "warn", "error", "skip")
#: How results are grouped into reports: by namespace, or one report per object (Kyverno's layout).
LAYOUTS = ("namespace", "object")
_VALIDATING, _MUTATING = "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"


@dataclass(frozen=True, slots=True)
class ReportForm:
    """One of the two report APIs: its group version, kinds and resources (for server-side apply)."""

    api_version: str
    namespaced_kind: str
    cluster_kind: str
    namespaced_resource: str
    cluster_resource: str
    #: OpenReports carries ``source`` on the report too; the Policy WG's v1alpha2 on each result only.
    report_source: bool

    def path(self, namespace: str, name: str = REPORT_NAME) -> str:
        """The object's API path, as kube-apiserver serves it."""
        if namespace:
            return f"/apis/{self.api_version}/namespaces/{namespace}/{self.namespaced_resource}/{name}"
        return f"/apis/{self.api_version}/{self.cluster_resource}/{name}"

    def describe(self, namespace: str, name: str = REPORT_NAME) -> str:
        """As kubectl names what it applied: ``policyreport.wgpolicyk8s.io/staticadm``."""
        kind = self.namespaced_kind if namespace else self.cluster_kind
        group = self.api_version.split("/")[0]
        return f"{kind.lower()}.{group}/{name}" + (f" -n {namespace}" if namespace else "")


FORMS = {
    "policyreport": ReportForm("wgpolicyk8s.io/v1alpha2", "PolicyReport", "ClusterPolicyReport", "policyreports",
                               "clusterpolicyreports", report_source=False),
    "openreport": ReportForm("openreports.io/v1alpha1", "Report", "ClusterReport", "reports", "clusterreports",
                             report_source=True),
}


@dataclass(frozen=True, slots=True)
class ReportedObject:
    """The object a result is about, as an ObjectReference names it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def report_name(self) -> str:
        """The name of the object's own report: its uid (as Kyverno names them), else a digest of what names it,
        so that the same object always gets the same report."""
        if self.uid:
            return self.uid
        named = "/".join((self.api_version, self.kind, self.namespace, self.name))
        return f"staticadm-{hashlib.sha256(named.encode()).hexdigest()[:20]}"

    def reference(self) -> dict[str, str]:
        reference = {"apiVersion": self.api_version, "kind": self.kind}
        for key, value in (("namespace", self.namespace), ("name", self.name), ("uid", self.uid)):
            if value:
                reference[key] = value
        return reference


def _skipped_by_match_conditions(reason: str) -> bool:
    # The reasons staticadm.admission.validating.dispatcher and .mutating give a binding a matchCondition excluded.
    return reason.startswith(("matchCondition ", "matchConditions "))


def _joined(messages: list[str]) -> str:
    return "; ".join(message for message in messages if message)


def _policy_error(errors: list[dict[str, Any]], base: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """The one result of a policy that failed as a whole (its match conditions, its params): every binding's."""
    return ("error", _joined([error["message"] for error in errors]),
            {**base, "errorType": errors[0]["errorType"], "enforcement": errors[0]["enforcement"]})


def _validating_results(policy: Mapping[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    """(result, message, properties) per binding of one ValidatingAdmissionPolicy's decision."""
    base = {"policyKind": _VALIDATING, "failurePolicy": str(policy.get("failurePolicy") or "")}
    if policy.get("errors"):
        return [_policy_error(policy["errors"], base)]
    out = []
    for binding in policy.get("bindings") or ():
        properties = {**base, "binding": binding["binding"],
                      "validationActions": ",".join(binding.get("validationActions") or ())}
        result = binding["result"]
        if result == "skip":
            if _skipped_by_match_conditions(binding.get("reason", "")):
                out.append(("skip", binding["reason"], properties))
            continue
        validations = binding.get("validations") or []
        if result == "pass":
            out.append(("pass", f"{len(validations)} validation(s) passed", properties))
        elif result == "fail":
            failed = [validation for validation in validations if validation["result"] == "fail"]
            properties["validations"] = ",".join(str(validation["index"]) for validation in failed)
            scored = "Deny" in (binding.get("validationActions") or ())
            out.append(("fail" if scored else "warn", _joined([validation.get("message", "")
                                                                for validation in failed]), properties))
        else:
            errors = [*binding.get("errors", ()), *(v for v in validations if v["result"] == "error")]
            properties["errorType"] = str(errors[0].get("errorType", "")) if errors else ""
            out.append(("error", _joined([error.get("message", "") for error in errors]), properties))
    return out


def _mutating_results(policy: Mapping[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    base = {"policyKind": _MUTATING, "failurePolicy": str(policy.get("failurePolicy") or "")}
    if policy.get("errors"):
        return [_policy_error(policy["errors"], base)]
    out = []
    for binding in policy.get("bindings") or ():
        properties = {**base, "binding": binding["binding"]}
        if binding["result"] == "skip":
            if _skipped_by_match_conditions(binding.get("reason", "")):
                out.append(("skip", binding["reason"], properties))
            continue
        if binding["result"] == "error":
            messages = [error["message"] for error in binding["errors"]] + [
                mutation.get("message", "") for mutation in binding["mutations"] if mutation["result"] == "error"]
            out.append(("error", _joined(messages), properties))
            continue
        properties["mutated"] = "true" if binding["mutated"] else "false"
        out.append(("pass", "mutated the object" if binding["mutated"] else "left the object unchanged",
                    properties))
    return out


def results_for(decided: Mapping[str, Any], obj: ReportedObject,
                timestamp: Mapping[str, int] | None = None, *, name_object: bool = True) -> list[dict[str, Any]]:
    """The results of one object's decision (``decision_report.decision``): mutating policies first, as they
    ran, then validating ones, each in name order; ``name_object``: each names the object in ``resources``
    (not needed when the report's scope is the object)."""
    found: list[tuple[str, tuple[str, str, dict[str, str]]]] = []
    for phase, shape in (("mutating", _mutating_results), ("validating", _validating_results)):
        report = decided.get(phase)
        for policy in (report or {}).get("policies", ()):
            found.extend((policy["policy"], entry) for entry in shape(policy))
    results = []
    for policy, (result, message, properties) in found:
        entry: dict[str, Any] = {"source": SOURCE, "policy": policy, "result": result, "scored": result != "warn"}
        if name_object:
            entry["resources"] = [obj.reference()]
        entry["properties"] = {key: value for key, value in properties.items() if value}
        if message:
            entry["message"] = message
        if timestamp is not None:
            entry["timestamp"] = dict(timestamp)
        results.append(entry)
    return results


class ReportCollector:
    """The results of every object, then the reports. ``namespace`` layout: one per namespace with results, and
    the cluster one (always, so that applying it replaces what an earlier run left there). ``object`` layout:
    one per object with results, in the order the objects came."""

    def __init__(self, form: str, timestamp: float | None = None, layout: str = "namespace") -> None:
        self.form = FORMS[form]
        self.layout = layout
        self._timestamp = None if timestamp is None else {"seconds": int(timestamp), "nanos": 0}
        self._results: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._objects: list[tuple[ReportedObject, list[dict[str, Any]]]] = []

    def add(self, obj: ReportedObject, decided: Mapping[str, Any]) -> None:
        per_object = self.layout == "object"
        results = results_for(decided, obj, self._timestamp, name_object=not per_object)
        if not results:  # an object no policy selects, in a namespace of such objects: no report
            return
        if per_object:
            self._objects.append((obj, results))
        else:
            self._results[obj.namespace].extend(results)

    def documents(self) -> list[dict[str, Any]]:
        """``namespace``: the cluster report first, then the namespaces' in name order."""
        if self.layout == "object":
            return [self._report(obj.namespace, results, obj) for obj, results in self._objects]
        return [self._report(namespace, self._results.get(namespace, []))
                for namespace in sorted({"", *self._results})]

    def _report(self, namespace: str, results: list[dict[str, Any]],
                scope: ReportedObject | None = None) -> dict[str, Any]:
        form = self.form
        metadata: dict[str, Any] = {"name": REPORT_NAME if scope is None else scope.report_name(),
                                    "labels": dict(MANAGED_BY)}
        if namespace:
            metadata["namespace"] = namespace
        if scope is not None and scope.uid:
            # Owned by its object: removed with it, as Kyverno's per-resource reports are.
            metadata["ownerReferences"] = [{"apiVersion": scope.api_version, "kind": scope.kind,
                                            "name": scope.name, "uid": scope.uid}]
        report: dict[str, Any] = {"apiVersion": form.api_version,
                                  "kind": form.namespaced_kind if namespace else form.cluster_kind,
                                  "metadata": metadata}
        if scope is not None:
            report["scope"] = scope.reference()
        if form.report_source:
            report["source"] = SOURCE
        report["results"] = results
        report["summary"] = {result: sum(entry["result"] == result for entry in results) for result in RESULTS}
        return report


def reported_object(request: Any) -> ReportedObject:
    """The object an AdmissionRequest writes (``oldObject`` for a DELETE), as a result names it."""
    kind = request.original_kind
    written = request.object if request.object is not None else request.old_object
    metadata = written.get("metadata") if isinstance(written, Mapping) else None
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    return ReportedObject(f"{kind.group}/{kind.version}" if kind.group else kind.version, kind.kind,
                          request.namespace, request.name, uid if isinstance(uid, str) else "")


def write_reports(documents: list[dict[str, Any]], out: Any) -> None:
    """Multi-document YAML, as ``kubectl apply -f -`` reads it."""
    from staticadm.yamltext import dump_json_data_as_yaml

    for document in documents:
        out.write("---\n" + dump_json_data_as_yaml(document))
