"""``staticadm review -o policyreport|openreport``: the results of many objects as the reports the cluster's
dashboards read, each checked against its published CRD's schema (tests/reports/report_crd_schemas.json)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticadm.cli import main
from tests.reports.policies import MANIFESTS, OBJECTS
from tests.reports.schemas import crd, schema_problems, summary_adds_up

KINDS = {"policyreport": ("wgpolicyk8s.io/v1alpha2", "PolicyReport", "ClusterPolicyReport"),
         "openreport": ("openreports.io/v1alpha1", "Report", "ClusterReport")}


def _review(tmp_path: Path, output: str) -> tuple[int, list[dict[str, Any]], str]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(OBJECTS))
    out, err = io.StringIO(), io.StringIO()
    code = main(["review", str(manifests), "-f", str(tmp_path / "objects.yaml"), "-o", output], stdout=out,
                stderr=err)
    return code, list(yaml.safe_load_all(out.getvalue())), err.getvalue()


def _by_object(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(entry["resources"][0]["name"], entry["policy"].removesuffix(".static.k8s.io")): entry
            for entry in report["results"]}


@pytest.mark.parametrize("output", sorted(KINDS))
def test_every_report_fits_its_published_crd_and_says_what_was_decided(tmp_path: Path, output: str) -> None:
    code, documents, err = _review(tmp_path, output)
    assert code == 4, err  # node-pinned failed to evaluate (failurePolicy Ignore), which review reports as 4
    api_version, namespaced, cluster = KINDS[output]
    assert [(d["apiVersion"], d["kind"], d["metadata"].get("namespace")) for d in documents] == [
        (api_version, cluster, None), (api_version, namespaced, "ops"), (api_version, namespaced, "shop"),
        (api_version, namespaced, "web")]
    for document in documents:
        assert schema_problems(document) == []
        assert summary_adds_up(document)
        assert document["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "staticadm"}
        assert all(entry["source"] == "staticadm" for entry in document["results"])
        if output == "openreport":
            assert document["source"] == "staticadm"
    assert crd(api_version, namespaced)["scope"] == "Namespaced" and crd(api_version, cluster)["scope"] == "Cluster"

    cluster_report, ops, shop, web = documents
    owner = _by_object(cluster_report)[("shop", "namespace-owner")]
    assert (owner["result"], owner["message"], owner["resources"]) == (
        "fail", "a namespace needs an owner label", [{"apiVersion": "v1", "kind": "Namespace", "name": "shop"}])
    assert owner["properties"]["validationActions"] == "Deny"

    shop_results = _by_object(shop)
    denied = shop_results[("privileged", "no-privileged")]
    assert (denied["result"], denied["message"], denied["scored"]) == ("fail", "privileged pod privileged", True)
    assert denied["properties"] == {"policyKind": "ValidatingAdmissionPolicy", "failurePolicy": "Fail",
                                    "binding": "no-privileged-binding.static.k8s.io", "validationActions": "Deny",
                                    "validations": "0"}
    assert denied["resources"] == [{"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "privileged"}]
    assert shop_results[("ok", "no-privileged")]["result"] == "pass"
    errored = shop_results[("ok", "node-pinned")]
    assert errored["result"] == "error" and "no such key" in errored["message"]
    mutated = shop_results[("ok", "add-managed")]
    assert (mutated["result"], mutated["properties"]["mutated"], mutated["properties"]["policyKind"]) == (
        "pass", "true", "MutatingAdmissionPolicy")

    warned = _by_object(web)[("no-team", "team-label")]
    assert (warned["result"], warned["scored"], warned["message"]) == ("warn", False, "no team label")
    assert warned["properties"]["validationActions"] == "Warn,Audit"
    skipped = _by_object(ops)[("latest", "pinned-images")]
    assert (skipped["result"], skipped["message"]) == ("skip", 'matchCondition "not-ops" evaluated to false')
    assert ("latest", "namespace-owner") not in _by_object(ops)  # not selected by its rules: no result at all
    assert shop["summary"] == {"pass": 7, "fail": 1, "warn": 0, "error": 2, "skip": 0}


def test_a_schema_check_that_finds_nothing_would_find_a_field_the_crd_lacks(tmp_path: Path) -> None:
    """The check is as strict as kube-apiserver's pruning: an unknown field, a result outside the enum, a
    namespace on a cluster-scoped report are each named."""
    _, documents, _ = _review(tmp_path, "policyreport")
    cluster_report, shop = documents[0], documents[2]
    broken = {**shop, "results": [{**shop["results"][0], "result": "denied", "binding": "x"}]}
    problems = schema_problems(broken)
    assert any("results/0: Additional properties are not allowed ('binding' was unexpected)" in p for p in problems)
    assert any("'denied' is not one of" in p for p in problems)
    assert schema_problems({**cluster_report, "metadata": {"name": "staticadm", "namespace": "shop"}}) == [
        "wgpolicyk8s.io/v1alpha2/ClusterPolicyReport: metadata.namespace 'shop' for a Cluster kind"]


@pytest.mark.parametrize("output", sorted(KINDS))
def test_a_report_per_object_has_the_object_as_its_scope(tmp_path: Path, output: str) -> None:
    """--reports-per object: Kyverno's layout, a report per object that has results, its scope the object."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(OBJECTS))
    out, err = io.StringIO(), io.StringIO()
    code = main(["review", str(manifests), "-f", str(tmp_path / "objects.yaml"), "-o", output, "--reports-per",
                 "object"], stdout=out, stderr=err)
    assert code == 4, err.getvalue()
    documents = list(yaml.safe_load_all(out.getvalue()))
    _, namespaced, cluster = KINDS[output]
    assert [(d["kind"], d["metadata"].get("namespace"), d["scope"]["name"]) for d in documents] == [
        (namespaced, "shop", "ok"), (namespaced, "shop", "privileged"), (namespaced, "web", "no-team"),
        (namespaced, "ops", "latest"), (cluster, None, "shop")]
    for document in documents:
        assert schema_problems(document) == []
        assert summary_adds_up(document)
        assert all("resources" not in entry for entry in document["results"])  # the scope names the object
    assert documents[1]["scope"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "privileged"}
    assert documents[4]["scope"] == {"apiVersion": "v1", "kind": "Namespace", "name": "shop"}
    # No uid offline: the name is a digest of the reference, the same on every run; no owner to name.
    names = [d["metadata"]["name"] for d in documents]
    assert len(set(names)) == 5 and all(name.startswith("staticadm-") for name in names)
    assert all("ownerReferences" not in d["metadata"] for d in documents)
    again = io.StringIO()
    main(["review", str(manifests), "-f", str(tmp_path / "objects.yaml"), "-o", output, "--reports-per", "object"],
         stdout=again, stderr=io.StringIO())
    assert again.getvalue() == out.getvalue()
