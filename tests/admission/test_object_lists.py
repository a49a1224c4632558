"""Lists of objects (``kubectl get -o yaml``, kube-apiserver's typed lists) are reviewed item by item in
every command that reads objects, never as one object of kind List."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import yaml

from staticadm.cli import main
from tests.server.harness import REPO_ROOT

EXAMPLES = REPO_ROOT / "manifests" / "examples"


def pod(name: str, *, privileged: bool = False, typed: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "nginx:1.27",
                                 "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "shop"}, "spec": {"containers": [container]}}
    return {"apiVersion": "v1", "kind": "Pod", **body} if typed else body


def kubectl_list(*items: Any) -> dict[str, Any]:
    """What ``kubectl get pods -o yaml`` writes."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_review_of_a_kubectl_list_denies_the_privileged_pod_in_it(tmp_path: Path) -> None:
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump(kubectl_list(pod("web"), pod("debug", privileged=True))))
    code, out, err = run("review", "--manifests", str(EXAMPLES), "-f", str(pods))
    assert (code, err) == (3, ""), out
    assert f"{pods} items[0]: CREATE pods shop/web (request" in out and f"{pods} items[1]: CREATE pods" in out
    assert "lists" not in out  # never a request for the List itself
    second = out.split(f"{pods} items[1]")[1]
    assert "decision: denied" in second and "privileged containers are not allowed in namespace shop: app" in second

    code, out, _ = run("review", "--manifests", str(EXAMPLES), "-f", str(pods), "-o", "json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 3
    assert [(line["document"], line["item"], line["review"]["response"]["allowed"]) for line in lines] == [
        (0, "items[0]", True), (0, "items[1]", False)]


def test_a_typed_list_from_kube_apiserver_gets_its_items_kind_and_nested_lists_are_flattened(tmp_path: Path) -> None:
    # kube-apiserver's list answers leave apiVersion and kind out of the items.
    pod_list = {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"},
                "items": [pod("web", typed=False), pod("debug", privileged=True, typed=False)]}
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(kubectl_list(pod("first"), pod_list)))
    code, out, err = run("review", "--manifests", str(EXAMPLES), path.as_posix(), "-o", "json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert (code, err) == (3, "")
    assert [line["item"] for line in lines] == ["items[0]", "items[1].items[0]", "items[1].items[1]"]
    assert [line["review"]["response"]["allowed"] for line in lines] == [True, True, False]


def test_a_bad_item_is_named_by_its_place_and_nothing_is_answered(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    broken = pod("broken")
    del broken["kind"]
    deployment_in_pod_list = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    path.write_text(yaml.safe_dump_all([
        kubectl_list(pod("web"), broken),
        {"apiVersion": "v1", "kind": "PodList", "items": [deployment_in_pod_list]},
        {"apiVersion": "v1", "kind": "List", "items": {"not": "an array"}},
    ]))
    code, out, err = run("review", "--manifests", str(EXAMPLES), "-f", str(path))
    assert code == 2 and out == ""
    assert f"{path} (document 0) items[1]: the object: kind must be a non-empty string" in err
    assert f"{path} (document 1): items[0]: a v1 PodList holds Pod objects, this item is apps/v1 Deployment" in err
    assert f"{path} (document 2): List: items must be an array, got object" in err


def test_update_pairs_each_item_with_its_old_version_from_a_list(tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    (manifests / "no-privilege-escalation.static.k8s.io.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "keep-image.static.k8s.io"},
         "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["UPDATE"], "resources": ["pods"]}]},
                  "validations": [{"expression": "object.spec.containers[0].image == "
                                                 "oldObject.spec.containers[0].image",
                                   "messageExpression": "'image changed on ' + object.metadata.name"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "keep-image.static.k8s.io"},
         "spec": {"policyName": "keep-image.static.k8s.io", "validationActions": ["Deny"]}}]))
    new_web, new_api = pod("web"), pod("api")
    new_api["spec"]["containers"][0]["image"] = "nginx:1.28"
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(kubectl_list(pod("api"), pod("web"))))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(kubectl_list(new_web, new_api)))
    code, out, err = run("review", "--manifests", str(manifests), "--operation", "UPDATE",
                         "--old", str(tmp_path / "old.yaml"), "-f", str(tmp_path / "new.yaml"), "-o", "json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert (code, err) == (3, "")
    assert [line["review"]["response"]["allowed"] for line in lines] == [True, False]
    assert "image changed on api" in lines[1]["review"]["response"]["status"]["message"]


def test_diff_reads_lists_item_by_item(tmp_path: Path) -> None:
    live, new = tmp_path / "live", tmp_path / "new"
    live.mkdir()
    new.mkdir()
    (new / "deny-privileged.static.k8s.io.yaml").write_text(
        (EXAMPLES / "deny-privileged.static.k8s.io.yaml").read_text())
    requests = tmp_path / "requests"
    requests.mkdir()
    (requests / "pods.yaml").write_text(yaml.safe_dump(kubectl_list(pod("web"), pod("debug", privileged=True))))
    code, out, err = run("diff", str(live), str(new), str(requests))
    assert (code, err) == (3, "")
    assert f"{requests / 'pods.yaml'} items[1] (CREATE pods shop/debug): validate: allowed_to_denied" in out
    assert "1 of 2 request(s) would be answered differently" in out


def test_policy_test_object_files_holding_lists_run_each_item(tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([kubectl_list(pod("web"), pod("debug", privileged=True)),
                                                            pod("api")]))
    test = {"apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "lists"},
            "spec": {"manifests": str(EXAMPLES), "cases": [
                {"name": "every pod is allowed", "objectFile": "pods.yaml", "expect": {"allowed": True}},
                {"name": "inline list", "object": kubectl_list(pod("a"), pod("b")), "expect": {"allowed": True}}]}}
    (tmp_path / "lists.test.yaml").write_text(yaml.safe_dump(test))
    code, out, _ = run("test", str(tmp_path), "-o", "json")
    cases = [(case["case"], case["passed"]) for case in json.loads(out)["files"][0]["cases"]]
    assert code == 1
    assert cases == [("every pod is allowed [document 0 items[0]]", True),
                     ("every pod is allowed [document 0 items[1]]", False),
                     ("every pod is allowed [document 1]", True),
                     ("inline list [items[0]]", True), ("inline list [items[1]]", True)]


def test_a_policy_test_list_with_a_bad_item_is_an_unusable_test_file(tmp_path: Path) -> None:
    test = {"apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "lists"},
            "spec": {"manifests": str(EXAMPLES), "cases": [
                {"name": "bad", "object": {"apiVersion": "v1", "kind": "PodList", "items": [42]},
                 "expect": {"allowed": True}}]}}
    (tmp_path / "lists.test.yaml").write_text(yaml.safe_dump(test))
    code, out, _ = run("test", str(tmp_path))
    assert code == 2
    assert "spec.cases[0].object: items[0]: a PodList item must be a Pod object, got number" in out
