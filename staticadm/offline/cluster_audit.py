"""``staticadm audit --kubeconfig``: what a directory of policies would say about the objects a cluster
already holds, before it goes live (the background audit Gatekeeper and Kyverno offer).

Read-only. The resources the policies' rules select for UPDATE are found by API discovery and listed in
pages; each object is evaluated as kube-apiserver evaluates an UPDATE that changes nothing (``object``
and ``oldObject`` the stored object, UpdateOptions, the user given), mutating policies first and the
validating ones on the object they leave, with namespaces and authorizer checks answered by the
cluster. The report says, per policy, how many objects it matched and which it would deny, warn about,
audit, change or fail on.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from xml.etree import ElementTree

from staticadm.admission.endpoints import review_request
from staticadm.admission.mutating.dispatcher import MutationOutcome
from staticadm.admission.request import RequestError, parse_admission_review
from staticadm.admission.validating.dispatcher import ValidationOutcome
from staticadm.admission.vocabulary import EnforcementAction, ErrorType
from staticadm.atomicfile import write_atomically
from staticadm.cluster.connection import ClusterError
from staticadm.cluster.objects import PAGE_SIZE, ApiResource, discover, list_objects
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.model import NamedRuleWithOperations
from staticadm.offline.decision_report import API_VERSION, decision
from staticadm.offline.policy_reports import FORMS, ReportCollector, ReportedObject, write_reports
from staticadm.offline.request_builder import RequestSettings, user_info
from staticadm.offline.review import (
    EXIT_DENIED,
    EXIT_EVALUATION_ERROR,
    EXIT_INVALID_MANIFESTS,
    EXIT_OK,
    EXIT_UNUSABLE_INPUT,
    load_snapshot,
)
from staticadm.progress import Progress
from staticadm.snapshot import Snapshot
from staticadm.tables import TABLE_OUTPUTS, write_table
from staticadm.yamltext import dump_yaml

#: What each kind of finding is called in the reports, in the order they are shown.
FINDINGS = ("denied", "warned", "audited", "mutated", "errors")
_FINDING_OF = {EnforcementAction.DENY: "denied", EnforcementAction.WARN: "warned", EnforcementAction.AUDIT: "audited",
               EnforcementAction.MUTATE: "mutated"}


def rule_selects(rule: NamedRuleWithOperations, resource: ApiResource) -> bool:
    """Whether an UPDATE of ``resource`` (the resource itself, not a subresource) is in the rule."""
    return (("*" in rule.operations or "UPDATE" in rule.operations)
            and ("*" in rule.api_groups or resource.group in rule.api_groups)
            and ("*" in rule.api_versions or resource.version in rule.api_versions)
            and any(name in ("*", "*/*", resource.resource) for name in rule.resources)
            and (rule.scope in (None, "*") or (rule.scope == "Namespaced") == resource.namespaced))


def audited_resources(snapshot: Snapshot, discovered: Sequence[ApiResource]
                      ) -> tuple[list[ApiResource], dict[str, list[str]], dict[str, str]]:
    """(resources to list, the resources each policy selects, why a policy selects none). Each group and
    resource is listed once, in its preferred version when a rule selects it, else the first one selected."""
    chosen: dict[tuple[str, str], ApiResource] = {}
    selected: dict[str, list[str]] = {}
    not_audited: dict[str, str] = {}
    policies: list[CompiledValidatingPolicy | CompiledMutatingPolicy] = [*snapshot.validating, *snapshot.mutating]
    for compiled in policies:
        constraints = compiled.policy.spec.match_constraints
        rules = constraints.resource_rules if constraints is not None else ()
        mine: set[tuple[str, str]] = set()
        for resource in discovered:
            if not any(rule_selects(rule, resource) for rule in rules):
                continue
            key = (resource.group, resource.resource)
            if key not in chosen or (resource.preferred and not chosen[key].preferred):
                chosen[key] = resource
            mine.add(key)
        selected[compiled.name] = sorted(f"{resource}.{group}" if group else resource for group, resource in mine)
        if not mine:
            not_audited[compiled.name] = ("its resourceRules select no UPDATE of a resource the cluster lists"
                                          if compiled.bindings else "policy has no bindings")
    return sorted(chosen.values(), key=lambda r: (r.group, r.resource)), selected, not_audited


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def noop_update(resource: ApiResource, obj: dict[str, Any], settings: RequestSettings) -> dict[str, Any]:
    """The AdmissionReview kube-apiserver sends for an UPDATE that writes the object back unchanged."""
    metadata = _metadata(obj)
    name, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
    gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    gvr = {"group": resource.group, "version": resource.version, "resource": resource.resource}
    seed = f"{resource.describe()}/{namespace}/{name}/{metadata.get('uid', '')}"
    request: dict[str, Any] = {
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, seed)), "kind": gvk, "resource": gvr, "requestKind": gvk,
        "requestResource": gvr, "name": name, "operation": "UPDATE",
        "userInfo": user_info(settings),
        "object": obj, "oldObject": obj, "dryRun": False,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if namespace and resource.namespaced:
        request["namespace"] = namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@dataclass(slots=True)
class PolicyTally:
    kind: str
    resources: list[str]
    matched: int = 0
    findings: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {name: [] for name in FINDINGS})


@dataclass(slots=True)
class AuditRun:
    tallies: dict[str, PolicyTally]
    not_audited: dict[str, str]
    listed: dict[str, int] = field(default_factory=dict)
    objects: int = 0
    denied_objects: int = 0
    errored_objects: int = 0
    seconds: float = 0.0
    #: Seconds each object's evaluation took, by its reference text (the JUnit testcases' time).
    timings: dict[str, float] = field(default_factory=dict)


def _reference(resource: ApiResource, obj: dict[str, Any]) -> dict[str, str]:
    metadata = _metadata(obj)
    return {"apiVersion": resource.api_version, "kind": resource.kind, "resource": resource.describe(),
            "namespace": str(metadata.get("namespace") or ""), "name": str(metadata.get("name") or "")}


def _shown(reference: dict[str, str]) -> str:
    where = f"{reference['namespace']}/{reference['name']}" if reference["namespace"] else reference["name"]
    return f"{reference['resource']} {where}"


def _tally(run: AuditRun, reference: dict[str, str], mutation: MutationOutcome | None,
           validation: ValidationOutcome | None) -> None:
    """Adds one object's decisions: a denial that comes from an error is both denied and an error."""
    matched: set[str] = set()
    denied = errored = False
    if mutation is not None:
        matched.update(policy for policy, _ in mutation.invoked)
    if validation is not None:
        matched.update(policy for policy, _ in validation.matched)
    for record in (*(mutation.decisions if mutation else ()), *(validation.decisions if validation else ())):
        matched.add(record.policy)
        finding = {"object": reference, "binding": record.binding, "message": record.message}
        tally = run.tallies[record.policy].findings
        if record.error_type is not ErrorType.NO_ERROR:
            tally["errors"].append({**finding, "errorType": str(record.error_type), "enforcement": str(record.action)})
            errored = True
        if record.action in _FINDING_OF:
            tally[_FINDING_OF[record.action]].append(finding)
            denied = denied or record.action is EnforcementAction.DENY
    for policy in matched:
        run.tallies[policy].matched += 1
    run.denied_objects += denied
    run.errored_objects += errored


def run_audit(manifests_dir: str, kubeconfig: str | None, output: str, junit: str | None,
              settings: RequestSettings, stdout: TextIO, stderr: TextIO, *, page_size: int = PAGE_SIZE,
              apply: bool = False, report_layout: str = "namespace") -> int:
    """Exit 0 when no existing object would be denied, 3 when one would, 4 when a policy failed to evaluate
    on one; 1 on invalid manifests; 2 when the cluster cannot be read (or, with ``apply``, refuses a report).
    The kubeconfig is ``kubeconfig``, else found as kubectl finds it ($KUBECONFIG, ~/.kube/config). With
    ``output`` a report form (:data:`policy_reports.FORMS`) the results are PolicyReports or OpenReports,
    printed, or with ``apply`` written to the cluster with server-side apply."""
    from staticadm.cluster.kubeconfig import KubeconfigNotFound, describe, kubeconfig_paths
    from staticadm.cluster.view import BlockingClusterView

    try:
        paths = kubeconfig_paths(kubeconfig)
    except KubeconfigNotFound as error:
        stderr.write(f"staticadm audit: {error}\n")
        return EXIT_UNUSABLE_INPUT
    snapshot = load_snapshot(manifests_dir, stderr, "staticadm audit:")
    if snapshot is None:
        return EXIT_INVALID_MANIFESTS
    started = time.perf_counter()
    collector = ReportCollector(output, timestamp=time.time(), layout=report_layout) if output in FORMS else None
    applied: list[str] = []
    cluster = BlockingClusterView(paths)
    try:
        try:
            cluster.open()
            discovered = cluster.run(discover(cluster.view.connection))
        except ClusterError as error:
            stderr.write(f"staticadm audit: kubeconfig {describe(paths)}: {error.message}\n")
            return EXIT_UNUSABLE_INPUT
        resources, selected, not_audited = audited_resources(snapshot, discovered)
        run = AuditRun({compiled.name: PolicyTally(kind, selected[compiled.name])
                        for kind, policies in (("ValidatingAdmissionPolicy", snapshot.validating),
                                               ("MutatingAdmissionPolicy", snapshot.mutating))
                        for compiled in policies}, not_audited)
        try:
            _audit_resources(cluster, snapshot, resources, settings, run, stderr, page_size, collector)
            if collector is not None and apply:
                from staticadm.cluster.reports import apply_reports

                applied = cluster.run(apply_reports(cluster.view.connection, collector.form, collector.documents()))
        except ClusterError as error:
            stderr.write(f"staticadm audit: {error.message}\n")
            return EXIT_UNUSABLE_INPUT
    finally:
        cluster.close()
    run.seconds = time.perf_counter() - started
    report = _report(run)
    if collector is not None:
        if apply:
            stdout.write("".join(f"{line}\n" for line in applied))
        else:
            write_reports(collector.documents(), stdout)
    elif output == "json":
        stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    elif output == "yaml":
        stdout.write(dump_yaml(report))
    elif output in TABLE_OUTPUTS:
        _table(report, stdout, wide=output == "wide")
    else:
        _text(report, stdout)
    if junit is not None:
        Path(junit).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(Path(junit), junit_xml(run))
    if run.errored_objects:
        return EXIT_EVALUATION_ERROR
    return EXIT_DENIED if run.denied_objects else EXIT_OK


def _audit_resources(cluster: Any, snapshot: Snapshot, resources: Sequence[ApiResource], settings: RequestSettings,
                     run: AuditRun, stderr: TextIO, page_size: int, collector: ReportCollector | None = None) -> None:
    namespaces = cluster.view.namespaces
    with Progress(stderr, "listing") as progress:
        for resource in resources:
            progress.relabel(f"auditing {resource.describe()}")
            pages = list_objects(cluster.view.connection, resource, page_size=page_size)
            count = page_count = 0
            while True:
                try:
                    page = cluster.run(pages.__anext__())
                except StopAsyncIteration:
                    break
                page_count += 1
                for obj in page:
                    reference = _reference(resource, obj)
                    request = parse_admission_review(noop_update(resource, obj, settings))
                    if isinstance(request, RequestError):
                        raise ClusterError(f"{_shown(reference)}: {request.message}")
                    evaluated = time.perf_counter()
                    mutation, validation = cluster.evaluate(
                        request.user_info, functools.partial(review_request, snapshot, namespaces, request, "both",
                                                             collector is not None))
                    run.timings[_shown(reference)] = time.perf_counter() - evaluated
                    _tally(run, reference, mutation, validation)
                    if collector is not None:
                        uid = _metadata(obj).get("uid")
                        collector.add(ReportedObject(resource.api_version, resource.kind, reference["namespace"],
                                                     reference["name"], uid if isinstance(uid, str) else ""),
                                      decision(snapshot, request, mutation, validation))
                    count += 1
                    progress.advance()
            run.listed[resource.describe()] = count
            run.objects += count
            progress.write_line(f"staticadm audit: {resource.describe()}: {count} object(s) in {page_count} "
                                f"page(s)")


def _report(run: AuditRun) -> dict[str, Any]:
    policies = []
    for name, tally in sorted(run.tallies.items()):
        entry: dict[str, Any] = {"policy": name, "kind": tally.kind, "resources": tally.resources,
                                 "matched": tally.matched}
        if name in run.not_audited:
            entry["notAudited"] = run.not_audited[name]
        entry.update({finding: tally.findings[finding] for finding in FINDINGS})
        policies.append(entry)
    return {"apiVersion": API_VERSION, "kind": "AuditReport",
            "summary": {"objects": run.objects, "denied": run.denied_objects, "errored": run.errored_objects,
                        "seconds": round(run.seconds, 3)},
            "resources": [{"resource": resource, "objects": count} for resource, count in run.listed.items()],
            "policies": policies}


def _text(report: dict[str, Any], out: TextIO) -> None:
    for policy in report["policies"]:
        if "notAudited" in policy:
            out.write(f"policy {policy['policy']} ({policy['kind']}): not audited: {policy['notAudited']}\n")
            continue
        counts = ", ".join(f"{len(policy[finding])} {finding}" for finding in FINDINGS if policy[finding])
        out.write(f"policy {policy['policy']} ({policy['kind']}): {policy['matched']} object(s) matched"
                  + (f", {counts}" if counts else "") + "\n")
        for finding in FINDINGS:
            for entry in policy[finding]:
                detail = entry["message"] or ("changed by its mutations" if finding == "mutated" else "")
                out.write(f"  {finding}: {_shown(entry['object'])} (binding {entry['binding']}): {detail}\n")
    summary = report["summary"]
    out.write(f"{summary['objects']} existing object(s) of {len(report['resources'])} resource(s) audited in "
              f"{summary['seconds']:.1f} s: {summary['denied']} would be denied, {summary['errored']} with "
              f"evaluation errors\n")


def _table(report: dict[str, Any], out: TextIO, *, wide: bool) -> None:
    """A row per policy: the objects it matched and its findings on them; ``wide``: the resources it selects
    and why it was not audited."""
    headers = ["POLICY", "KIND", "MATCHED", *(finding.upper() for finding in FINDINGS)]
    rows: list[list[object]] = []
    for policy in report["policies"]:
        row: list[object] = [policy["policy"], policy["kind"], policy["matched"],
                             *(len(policy[finding]) for finding in FINDINGS)]
        if wide:
            row += [",".join(policy["resources"]), policy.get("notAudited", "")]
        rows.append(row)
    write_table(out, [*headers, *(("RESOURCES", "NOT AUDITED") if wide else ())], rows)


def junit_xml(run: AuditRun) -> bytes:
    """One <testsuite> per policy; a failed <testcase> per object it would deny (an <error> per object it
    fails to evaluate on), a passing one per object it warns about or audits (the message as system-out),
    and one passing testcase for the other matched objects."""
    root = ElementTree.Element("testsuites", name="staticadm audit", time=f"{run.seconds:.3f}")
    for name, tally in sorted(run.tallies.items()):
        findings = tally.findings
        cases: list[ElementTree.Element] = []
        flagged: set[str] = set()
        for finding in ("denied", "errors", "warned", "audited", "mutated"):
            for entry in findings[finding]:
                shown = _shown(entry["object"])
                flagged.add(shown)
                case = ElementTree.Element("testcase", name=f"{finding}: {shown}", classname=name,
                                           time=f"{run.timings.get(shown, 0.0):.6f}")
                text = f"binding {entry['binding']}: {entry['message']}"
                if finding == "denied":
                    ElementTree.SubElement(case, "failure", message=entry["message"]).text = text
                elif finding == "errors":
                    ElementTree.SubElement(case, "error", message=entry["message"]).text = text
                else:
                    ElementTree.SubElement(case, "system-out").text = text
                cases.append(case)
        others = tally.matched - len(flagged)
        if others > 0 or not cases:
            summary = (f"{others} other matched object(s) allowed" if name not in run.not_audited
                       else f"not audited: {run.not_audited[name]}")
            case = ElementTree.Element("testcase", name=summary, classname=name, time="0")
            if name in run.not_audited:
                ElementTree.SubElement(case, "skipped", message=run.not_audited[name])
            cases.append(case)
        suite = ElementTree.SubElement(
            root, "testsuite", name=name, tests=str(len(cases)), failures=str(len(findings["denied"])),
            errors=str(len(findings["errors"])), skipped=str(int(name in run.not_audited)),
            time=f"{sum(float(case.get('time', '0')) for case in cases):.6f}")
        suite.extend(cases)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)

