"""``staticadm audit --kubeconfig``: the existing objects of the stand-in kube-apiserver, found by
discovery, listed in pages and evaluated as a no-op UPDATE, reported per policy in text, JSON and JUnit."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import yaml

from tests.cluster.apiserver import FakeApiServer
from tests.server import forked
from tests.server.harness import REPO_ROOT

API = "admissionregistration.k8s.io/v1"


def vap(name: str, rule: dict[str, Any], validations: list[dict[str, Any]], actions: list[str],
        **spec: Any) -> list[dict[str, Any]]:
    full = f"{name}.static.k8s.io"
    return [{"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": full},
             "spec": {"matchConstraints": {"resourceRules": [rule]}, "validations": validations, **spec}},
            {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": full},
             "spec": {"policyName": full, "validationActions": actions}}]


PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
MANIFESTS = [
    *vap("no-privileged", PODS, [{"expression": "object.spec.containers.all(c, !has(c.securityContext) || "
                                                "!has(c.securityContext.privileged) || !c.securityContext.privileged)",
                                  "messageExpression": "'privileged pod ' + object.metadata.name"}], ["Deny"]),
    *vap("team-label", {**PODS, "resources": ["*"], "apiGroups": ["*"], "apiVersions": ["*"]},
         [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
           "message": "no team label"}], ["Warn"],
         matchConditions=[{"name": "not-namespaces", "expression": "request.resource.resource != 'namespaces'"}]),
    *vap("old-only", {**PODS, "operations": ["CREATE"]}, [{"expression": "false"}], ["Deny"]),
    *vap("replicas", {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                      "resources": ["deployments"]},
         [{"expression": "object.spec.replicas <= 3", "message": "too many replicas"}], ["Deny"]),
]


def pods(count: int, *, privileged: set[int] = frozenset(), unlabelled: set[int] = frozenset()) -> list[dict[str, Any]]:
    out = []
    for index in range(count):
        container: dict[str, Any] = {"name": "app", "image": "nginx:1.27"}
        if index in privileged:
            container["securityContext"] = {"privileged": True}
        labels = {} if index in unlabelled else {"team": "a"}
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"pod-{index:04d}", "namespace": "shop" if index % 2 else "web",
                                 "labels": labels},
                    "spec": {"containers": [container]}})
    return out


def cluster(apiserver: FakeApiServer, pod_count: int = 23) -> FakeApiServer:
    for name in ("shop", "web"):
        apiserver.set_namespace(name)
    apiserver.add_resource("", "v1", "pods", "Pod")
    apiserver.add_resource("", "v1", "configmaps", "ConfigMap")
    apiserver.add_resource("apps", "v1", "deployments", "Deployment")
    apiserver.set_objects("", "v1", "pods", pods(pod_count, privileged={3, 17}, unlabelled={5}))
    apiserver.set_objects("apps", "v1", "deployments", [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": "shop",
                                                                     "labels": {"team": "a"}},
         "spec": {"replicas": 10}}])
    return apiserver.start()


def run_audit(tmp_path: Path, apiserver: FakeApiServer, *args: str) -> tuple[int, str, str]:
    from staticadm.cli import main

    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig")
    out, err = io.StringIO(), io.StringIO()
    code = main(["audit", str(manifests), "--kubeconfig", str(kubeconfig), *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_existing_objects_are_listed_in_pages_and_reported_per_policy(tmp_path: Path,
                                                                     apiserver: FakeApiServer) -> None:
    cluster(apiserver)
    code, out, err = run_audit(tmp_path, apiserver, "--page-size", "5", "-o", "json")
    assert code == 3, err
    report = json.loads(out)
    assert (report["apiVersion"], report["kind"]) == ("staticadm.io/v1alpha1", "AuditReport")
    assert report["summary"]["objects"] == 23 + 1 + 2  # pods, the deployment, namespaces (team-label: "*")
    policies = {policy["policy"]: policy for policy in report["policies"]}

    privileged = policies["no-privileged.static.k8s.io"]
    assert (privileged["matched"], privileged["resources"]) == (23, ["pods"])
    assert [(entry["object"]["namespace"], entry["object"]["name"], entry["message"])
            for entry in privileged["denied"]] == [("shop", "pod-0003", "privileged pod pod-0003"),
                                                  ("shop", "pod-0017", "privileged pod pod-0017")]
    team = policies["team-label.static.k8s.io"]
    assert [entry["object"]["name"] for entry in team["warned"]] == ["pod-0005"]
    assert team["denied"] == [] and team["matched"] == 23 + 1  # the match condition skips namespaces
    assert policies["replicas.static.k8s.io"]["denied"][0]["object"]["resource"] == "deployments.apps/v1"
    assert "notAudited" in policies["old-only.static.k8s.io"]

    # Paged as kube-apiserver pages: 23 pods in pages of 5, each list request read-only.
    pod_lists = [path for method, path in apiserver.requests if path.startswith("/api/v1/pods")]
    assert len(pod_lists) == 5 and all("limit=5" in path for path in pod_lists)
    assert all(method == "GET" for method, _ in apiserver.requests)
    assert "pods/v1: 23 object(s) in 5 page(s)" in err


def test_an_expired_continue_token_relists_without_reading_an_object_twice(tmp_path: Path,
                                                                         apiserver: FakeApiServer) -> None:
    cluster(apiserver)
    compacted = []

    def compact_after_first_page(query: dict[str, str]) -> None:
        if "continue" in query and not compacted:
            compacted.append(query)
            apiserver.set_namespace("written-meanwhile")
            apiserver.expire_watches()

    apiserver.before_list = compact_after_first_page
    code, out, err = run_audit(tmp_path, apiserver, "--page-size", "10", "-o", "json")
    report = json.loads(out)
    assert code == 3, err
    assert report["summary"]["objects"] == 26  # every pod once (namespaces were listed before)
    denied = {policy["policy"]: policy for policy in report["policies"]}["no-privileged.static.k8s.io"]["denied"]
    assert [entry["object"]["name"] for entry in denied] == ["pod-0003", "pod-0017"]
    pod_lists = [path for _, path in apiserver.requests if path.startswith("/api/v1/pods")]
    assert pod_lists[-1] == "/api/v1/pods"  # the fallback: one full list


def test_text_and_junit_reports(tmp_path: Path, apiserver: FakeApiServer) -> None:
    cluster(apiserver)
    junit = tmp_path / "reports" / "audit.xml"
    code, out, _ = run_audit(tmp_path, apiserver, "--junit", str(junit))
    assert code == 3
    assert "policy no-privileged.static.k8s.io (ValidatingAdmissionPolicy): 23 object(s) matched, 2 denied" in out
    assert "  denied: pods/v1 shop/pod-0003 (binding no-privileged.static.k8s.io): privileged pod pod-0003" in out
    assert "policy old-only.static.k8s.io (ValidatingAdmissionPolicy): not audited: its resourceRules select no " \
           "UPDATE" in out
    assert "26 existing object(s) of 4 resource(s) audited in" in out
    suites = {suite.get("name"): suite for suite in ElementTree.parse(junit).getroot()}
    privileged = suites["no-privileged.static.k8s.io"]
    assert (privileged.get("failures"), privileged.get("tests")) == ("2", "3")
    names = [case.get("name") for case in privileged]
    assert names == ["denied: pods/v1 shop/pod-0003", "denied: pods/v1 shop/pod-0017",
                     "21 other matched object(s) allowed"]
    assert all(case.get("time") is not None for case in privileged)
    assert suites["old-only.static.k8s.io"].get("skipped") == "1"


def test_an_unreachable_cluster_exits_2(tmp_path: Path, apiserver: FakeApiServer) -> None:
    code, out, err = run_audit(tmp_path, apiserver)  # never started
    assert (code, out) == (2, "")
    assert "staticadm audit: kubeconfig " in err and "unreachable" in err


def test_audit_runs_as_a_command(tmp_path: Path, apiserver: FakeApiServer) -> None:
    """The installed entry point, as an operator runs it (no traceback, exit code kept)."""
    cluster(apiserver, pod_count=4)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    completed = forked.run(
        [sys.executable, "-m", "staticadm", "audit", "--manifests", str(manifests), "--kubeconfig",
         str(apiserver.kubeconfig(tmp_path / "kubeconfig"))], timeout=120, cwd=REPO_ROOT)
    assert completed.returncode == 3, completed.stderr
    assert "2 would be denied" in completed.stdout  # pod-0003 and the deployment


def test_table_and_wide(tmp_path: Path, apiserver: FakeApiServer) -> None:
    cluster(apiserver)
    code, out, err = run_audit(tmp_path, apiserver, "-o", "table")
    assert code == 3, err
    rows = [[cell.strip() for cell in line.split("   ") if cell.strip()] for line in out.splitlines()]
    assert rows[0] == ["POLICY", "KIND", "MATCHED", "DENIED", "WARNED", "AUDITED", "MUTATED", "ERRORS"]
    assert ["no-privileged.static.k8s.io", "ValidatingAdmissionPolicy", "23", "2", "0", "0", "0", "0"] in rows
    assert ["team-label.static.k8s.io", "ValidatingAdmissionPolicy", "24", "0", "1", "0", "0", "0"] in rows
    code, out, _ = run_audit(tmp_path, apiserver, "-o", "wide")
    rows = [[cell.strip() for cell in line.split("   ") if cell.strip()] for line in out.splitlines()]
    assert rows[0][-2:] == ["RESOURCES", "NOT AUDITED"]
    old_only = next(row for row in rows if row[0] == "old-only.static.k8s.io")
    assert old_only[-2:] == ["<none>", "its resourceRules select no UPDATE of a resource the cluster lists"]
    assert next(row for row in rows if row[0] == "replicas.static.k8s.io")[-2:] == ["deployments.apps", "<none>"]
