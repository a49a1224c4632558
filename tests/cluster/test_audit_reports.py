"""``staticadm audit -o policyreport|openreport [--apply]``: the audit of the stand-in kube-apiserver's objects as
PolicyReports or OpenReports, checked against the published CRDs' schemas, and written back with server-side apply
to the stand-in, which serves the report CRDs and refuses what their schemas refuse."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.apiserver import FakeApiServer
from tests.reports.policies import MANIFESTS, OBJECTS
from tests.reports.schemas import _published, schema_problems, summary_adds_up

FORMS = {"policyreport": ("wgpolicyk8s.io", "v1alpha2", ("policyreports", "PolicyReport"),
                          ("clusterpolicyreports", "ClusterPolicyReport")),
         "openreport": ("openreports.io", "v1alpha1", ("reports", "Report"), ("clusterreports", "ClusterReport"))}


def _cluster(apiserver: FakeApiServer, *, crds: str | None = None) -> FakeApiServer:
    for name in ("shop", "web", "ops"):
        apiserver.set_namespace(name)
    apiserver.add_resource("", "v1", "pods", "Pod")
    apiserver.set_objects("", "v1", "pods", [obj for obj in OBJECTS if obj["kind"] == "Pod"])
    if crds is not None:
        group, version, (resource, kind), (cluster_resource, cluster_kind) = FORMS[crds]
        schemas = _published()["schemas"]
        apiserver.add_resource(group, version, resource, kind, schema=schemas[f"{group}/{version}/{kind}"])
        apiserver.add_resource(group, version, cluster_resource, cluster_kind, namespaced=False,
                               schema=schemas[f"{group}/{version}/{cluster_kind}"])
    return apiserver.start()


def _audit(tmp_path: Path, apiserver: FakeApiServer, *args: str) -> tuple[int, str, str]:
    from staticadm.cli import main

    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    out, err = io.StringIO(), io.StringIO()
    code = main(["audit", str(manifests), "--kubeconfig", str(apiserver.kubeconfig(tmp_path / "kubeconfig")),
                 *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _by_object(report: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(entry["resources"][0]["name"], entry["policy"].removesuffix(".static.k8s.io")): entry["result"]
            for entry in report["results"]}


@pytest.mark.parametrize("output", sorted(FORMS))
def test_the_audit_as_reports_that_fit_the_published_crds(tmp_path: Path, apiserver: FakeApiServer,
                                                          output: str) -> None:
    _cluster(apiserver)
    code, out, err = _audit(tmp_path, apiserver, "-o", output)
    assert code == 4, err  # node-pinned fails to evaluate on every pod
    documents = list(yaml.safe_load_all(out))
    group, version, (_, kind), (_, cluster_kind) = FORMS[output]
    assert [(d["kind"], d["metadata"].get("namespace")) for d in documents] == [
        (cluster_kind, None), (kind, "ops"), (kind, "shop"), (kind, "web")]
    for document in documents:
        assert document["apiVersion"] == f"{group}/{version}"
        assert schema_problems(document) == []
        assert summary_adds_up(document)
        assert all(set(entry["timestamp"]) == {"seconds", "nanos"} for entry in document["results"])
    cluster_report, ops, shop, web = documents
    # Namespaces are cluster-scoped: their results are the cluster report's, with their uid from the cluster.
    assert {entry["resources"][0]["name"]: entry["result"] for entry in cluster_report["results"]} == {
        "ops": "fail", "shop": "fail", "web": "fail"}
    assert all(entry["resources"][0]["uid"] for entry in cluster_report["results"])
    assert _by_object(shop)[("privileged", "no-privileged")] == "fail"
    assert _by_object(web)[("no-team", "team-label")] == "warn"
    assert _by_object(ops)[("latest", "pinned-images")] == "skip"
    assert _by_object(shop)[("ok", "add-managed")] == "pass"
    assert cluster_report["summary"]["fail"] == 3 and shop["summary"]["error"] == 2


@pytest.mark.parametrize("output", sorted(FORMS))
def test_apply_writes_each_report_with_server_side_apply(tmp_path: Path, apiserver: FakeApiServer,
                                                         output: str) -> None:
    _cluster(apiserver, crds=output)
    code, printed, err = _audit(tmp_path, apiserver, "-o", output)
    code, out, err = _audit(tmp_path, apiserver, "-o", output, "--apply")
    assert code == 4, err
    group, version, (resource, kind), (cluster_resource, cluster_kind) = FORMS[output]
    lowered = f"{kind.lower()}.{group}/staticadm"
    assert out.splitlines() == [f"{cluster_kind.lower()}.{group}/staticadm serverside-applied",
                                *(f"{lowered} -n {ns} serverside-applied" for ns in ("ops", "shop", "web"))]
    assert [(path, query, content_type) for path, query, content_type in apiserver.applies] == [
        (f"/apis/{group}/{version}/{cluster_resource}/staticadm", {"fieldManager": "staticadm", "force": "true"},
         "application/apply-patch+yaml"),
        *((f"/apis/{group}/{version}/namespaces/{ns}/{resource}/staticadm",
           {"fieldManager": "staticadm", "force": "true"}, "application/apply-patch+yaml")
          for ns in ("ops", "shop", "web"))]
    stored = apiserver.stored(group, version, resource)
    assert sorted(stored) == [("ops", "staticadm"), ("shop", "staticadm"), ("web", "staticadm")]
    expected = {doc["metadata"].get("namespace"): doc for doc in yaml.safe_load_all(printed)}
    for (namespace, _), report in stored.items():
        assert report["metadata"]["managedFields"][0]["manager"] == "staticadm"
        assert [_strip(entry) for entry in report["results"]] == [_strip(entry)
                                                                  for entry in expected[namespace]["results"]]
        assert report["summary"] == expected[namespace]["summary"]
    assert list(apiserver.stored(group, version, cluster_resource)) == [("", "staticadm")]

    # Again: the same reports replaced in place, not a second copy.
    applied = len(apiserver.applies)
    assert _audit(tmp_path, apiserver, "-o", output, "--apply")[0] == 4
    assert len(apiserver.applies) == 2 * applied and len(apiserver.stored(group, version, resource)) == 3


@pytest.mark.parametrize("output", sorted(FORMS))
def test_apply_deletes_the_reports_it_left_in_namespaces_now_without_results(tmp_path: Path,
                                                                            apiserver: FakeApiServer,
                                                                            output: str) -> None:
    _cluster(apiserver, crds=output)
    group, version, (resource, kind), _ = FORMS[output]
    left = {"apiVersion": f"{group}/{version}", "kind": kind, "results": [], "summary": {}}
    apiserver.set_objects(group, version, resource, [
        {**left, "metadata": {"name": "staticadm", "namespace": "gone", "labels": {
            "app.kubernetes.io/managed-by": "staticadm"}}},
        {**left, "metadata": {"name": "staticadm", "namespace": "kyverno-owned", "labels": {
            "app.kubernetes.io/managed-by": "kyverno"}}},
        {**left, "metadata": {"name": "other", "namespace": "shop", "labels": {
            "app.kubernetes.io/managed-by": "staticadm"}}}])
    code, out, err = _audit(tmp_path, apiserver, "-o", output, "--apply")
    assert code == 4, err
    assert out.splitlines()[-2:] == [f"{kind.lower()}.{group}/staticadm -n gone deleted (no result this time)",
                                     f"{kind.lower()}.{group}/other -n shop deleted (no result this time)"]
    # Another manager's report stays; every report labelled as staticadm's and not written now goes.
    assert sorted(apiserver.stored(group, version, resource)) == [
        ("kyverno-owned", "staticadm"), ("ops", "staticadm"), ("shop", "staticadm"), ("web", "staticadm")]
    assert ("DELETE", f"/apis/{group}/{version}/namespaces/gone/{resource}/staticadm") in apiserver.requests


def _strip(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "timestamp"}


def test_apply_names_the_report_a_cluster_without_the_crd_refuses(tmp_path: Path, apiserver: FakeApiServer) -> None:
    _cluster(apiserver)  # no report CRDs installed
    code, out, err = _audit(tmp_path, apiserver, "-o", "openreport", "--apply")
    assert (code, out) == (2, "")
    assert "staticadm audit: applying clusterreport.openreports.io/staticadm: PATCH " \
           "/apis/openreports.io/v1alpha1/clusterreports/staticadm" in err
    assert "could not find the requested resource" in err


def test_apply_needs_a_report_output(tmp_path: Path, apiserver: FakeApiServer) -> None:
    code, out, err = _audit(tmp_path, apiserver, "--apply")
    assert (code, out) == (2, "")
    assert err == "staticadm audit: --apply writes reports: give -o policyreport or -o openreport\n"


def test_the_reports_rbac_example_grants_what_apply_does(tmp_path: Path, apiserver: FakeApiServer) -> None:
    """Every call --apply made on a report resource (a leftover report deleted included) is a verb the example
    ClusterRole grants on it; an apply that may create is a create too, as kube-apiserver checks it."""
    from tests.server.harness import REPO_ROOT

    _cluster(apiserver, crds="policyreport")
    apiserver.set_objects("wgpolicyk8s.io", "v1alpha2", "policyreports", [
        {"metadata": {"name": "staticadm", "namespace": "gone",
                      "labels": {"app.kubernetes.io/managed-by": "staticadm"}}, "results": []}])
    assert _audit(tmp_path, apiserver, "-o", "policyreport", "--apply")[0] == 4
    verbs = {"PATCH": ("patch", "create"), "DELETE": ("delete",), "GET": ("list",)}
    used = set()
    for method, path in apiserver.requests:
        parts = path.split("?")[0].split("/")  # "", apis, group, version, [namespaces, ns,] resource[, name]
        if len(parts) < 5 or parts[2] != "wgpolicyk8s.io":
            continue  # discovery (/apis/GROUP/VERSION) is everyone's, by system:discovery
        resource = parts[-1] if method == "GET" else parts[-2]
        used |= {(parts[2], resource, verb) for verb in verbs[method]}
    assert {verb for _, _, verb in used} == {"patch", "create", "delete", "list"}
    rbac = [doc for doc in yaml.safe_load_all((REPO_ROOT / "manifests/kube-apiserver/"
                                               "staticadm-audit-reports-rbac.yaml").read_text()) if doc]
    [role] = [doc for doc in rbac if doc["kind"] == "ClusterRole"]
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert used <= granted, sorted(used - granted)


def test_apply_per_object_owns_each_report_by_its_object_and_replaces_the_namespace_layout(
        tmp_path: Path, apiserver: FakeApiServer) -> None:
    _cluster(apiserver, crds="policyreport")
    assert _audit(tmp_path, apiserver, "-o", "policyreport", "--apply")[0] == 4  # the namespace layout first
    code, out, err = _audit(tmp_path, apiserver, "-o", "policyreport", "--apply", "--reports-per", "object")
    assert code == 4, err
    pods = {name: obj for (_, name), obj in apiserver.stored("", "v1", "pods").items()}
    stored = apiserver.stored("wgpolicyk8s.io", "v1alpha2", "policyreports")
    # One report per pod, named by its uid and owned by it; the per-namespace ones are gone.
    assert sorted(stored) == sorted((pod["metadata"]["namespace"], pod["metadata"]["uid"]) for pod in pods.values())
    for (namespace, name), report in stored.items():
        [owner] = report["metadata"]["ownerReferences"]
        assert (owner["uid"], report["scope"]["uid"]) == (name, name)
        assert report["scope"] == {"apiVersion": "v1", "kind": "Pod", "namespace": namespace,
                                   "name": owner["name"], "uid": name}
        assert schema_problems({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport", **report}) == []
    cluster_reports = apiserver.stored("wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports")
    assert {report["scope"]["name"] for report in cluster_reports.values()} == {"ops", "shop", "web"}
    assert "clusterpolicyreport.wgpolicyk8s.io/staticadm deleted (no result this time)" in out
    assert sum(line.endswith("deleted (no result this time)") for line in out.splitlines()) == 4
