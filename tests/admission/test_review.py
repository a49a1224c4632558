"""``staticadm review`` end to end: exit codes, JSON lines and the text report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import yaml

from staticadm.offline.request_builder import RequestSettings
from staticadm.offline.review import run_review
from tests.admission.helpers import binding, policy, review


def _setup(tmp_path: Path) -> Path:
    manifests = tmp_path / "m"
    manifests.mkdir()
    (manifests / "p.yaml").write_text(yaml.safe_dump_all([policy(), binding()]))
    return manifests


def _run(*args: str, manifests: Path, namespaces: str | None = None, output: str = "json",
         stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_review(str(manifests), namespaces, output, list(args), io.StringIO(stdin), out, err)
    return code, out.getvalue(), err.getvalue()


def test_json_lines_in_order_and_stdin(tmp_path: Path) -> None:
    manifests = _setup(tmp_path)
    small = review()
    small["request"]["object"]["spec"]["replicas"] = 1
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(review()))
    code, out, err = _run(str(tmp_path / "a.yaml"), "-", manifests=manifests, stdin=json.dumps(small))
    assert (code, err) == (3, "")  # one request denied
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["input"], line["document"]) for line in lines] == [(str(tmp_path / "a.yaml"), 0), ("<stdin>", 0)]
    assert [line["review"]["response"]["allowed"] for line in lines] == [False, True]


def test_yaml_documents_carry_the_same_labels(tmp_path: Path) -> None:
    manifests = _setup(tmp_path)
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([review(), review()]))
    code, out, _ = _run(str(tmp_path / "a.yaml"), manifests=manifests, output="yaml")
    documents = list(yaml.safe_load_all(out))
    assert code == 3 and [(d["input"], d["document"]) for d in documents] == [(str(tmp_path / "a.yaml"), 0),
                                                                              (str(tmp_path / "a.yaml"), 1)]
    assert documents[0]["review"]["kind"] == "AdmissionReview"


def test_a_yaml_error_names_the_place_not_a_unicode_string(tmp_path: Path) -> None:
    manifests = _setup(tmp_path)
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a\n")
    code, _, err = _run(str(tmp_path / "pod.yaml"), manifests=manifests)
    assert code == 2 and "<unicode string>" not in err
    assert f"{tmp_path / 'pod.yaml'}: not JSON or YAML: line 4, column 1:" in err


def test_invalid_manifests_exit_1_with_every_error(tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    (manifests / "p.yaml").write_text(yaml.safe_dump_all([binding(policy_name="a.static.k8s.io"),
                                                          binding("c.static.k8s.io", policy_name="d.static.k8s.io")]))
    (tmp_path / "r.json").write_text(json.dumps(review()))
    code, out, err = _run(str(tmp_path / "r.json"), manifests=manifests)
    assert code == 1 and out == ""  # as check and webhook-config
    assert "a.static.k8s.io" in err and "d.static.k8s.io" in err


def test_malformed_or_missing_request_exit_2_and_no_output(tmp_path: Path) -> None:
    manifests = _setup(tmp_path)
    (tmp_path / "ok.json").write_text(json.dumps(review()))
    (tmp_path / "bad.json").write_text(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                                   "request": {"uid": 1}}))
    code, out, err = _run(str(tmp_path / "ok.json"), str(tmp_path / "bad.json"), str(tmp_path / "none.json"),
                          manifests=manifests)
    assert code == 2 and out == ""
    assert f"{tmp_path / 'bad.json'}: request.uid must be a string" in err
    assert "none.json: cannot read" in err


def test_text_report_explains(tmp_path: Path) -> None:
    manifests = _setup(tmp_path)
    (tmp_path / "r.json").write_text(json.dumps(review(group="", resource="pods", kind="Pod")))
    code, out, _ = _run(str(tmp_path / "r.json"), manifests=manifests, output="text")
    assert code == 0
    assert "decision: allowed" in out
    assert "not matched: policy p.static.k8s.io: no resourceRule matches CREATE core/v1 pods" in out


def test_bad_namespaces_file_exit_2(tmp_path: Path) -> None:
    manifests = _setup(tmp_path)
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    (tmp_path / "r.json").write_text(json.dumps(review()))
    code, _, err = _run(str(tmp_path / "r.json"), manifests=manifests, namespaces=str(tmp_path / "ns.yaml"))
    assert code == 2 and "expected a v1 Namespace" in err


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
       "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}


def _pod_policy_dir(tmp_path: Path, expression: str) -> Path:
    manifests = tmp_path / "pods"
    manifests.mkdir(parents=True)
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": "pods.static.k8s.io"},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["*"], "resources": ["pods"]}]},
                       "validations": [{"expression": expression}]}}
    (manifests / "p.yaml").write_text(yaml.safe_dump_all([policy, binding("pods.static.k8s.io",
                                                                          policy_name="pods.static.k8s.io")]))
    return manifests


def test_a_plain_object_becomes_the_request_kube_apiserver_would_send(tmp_path: Path) -> None:
    expression = ("request.operation == 'CREATE' && request.resource.resource == 'pods' && "
                  "request.namespace == 'default' && object.metadata.namespace == 'default' && "
                  "request.userInfo.username == 'admin' && oldObject == null && "
                  "request.options.kind == 'CreateOptions' && request.name == 'web'")
    manifests = _pod_policy_dir(tmp_path, expression)
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(POD))
    code, out, err = _run(str(tmp_path / "pod.yaml"), manifests=manifests)
    assert (code, err) == (0, ""), out
    (line,) = [json.loads(line) for line in out.splitlines()]
    assert line["review"]["response"]["allowed"] is True


def test_exit_codes_tell_allowed_denied_and_evaluation_errors_apart(tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([POD, {**POD, "metadata": {"name": "other"}}]))
    denied = _pod_policy_dir(tmp_path / "a", "object.metadata.name == 'web'")
    code, out, _ = _run(str(tmp_path / "pods.yaml"), manifests=denied)
    assert code == 3
    assert [json.loads(line)["document"] for line in out.splitlines()] == [0, 1]
    erroring = _pod_policy_dir(tmp_path / "b", "object.metadata.labels['missing'] == 'x'")
    code, _, _ = _run(str(tmp_path / "pods.yaml"), manifests=erroring)
    assert code == 4


def test_every_unusable_document_is_reported_in_one_run(tmp_path: Path) -> None:
    manifests = _pod_policy_dir(tmp_path, "true")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump_all([{"kind": "Pod"}, POD, ["not", "an", "object"]]))
    code, out, err = _run(str(tmp_path / "bad.yaml"), manifests=manifests)
    assert code == 2 and out == ""
    assert f"{tmp_path / 'bad.yaml'} (document 0): the object: apiVersion must be a non-empty string" in err
    assert f"{tmp_path / 'bad.yaml'} (document 2): the object must be a Kubernetes object" in err


def test_update_and_delete_from_plain_objects(tmp_path: Path) -> None:
    manifests = _pod_policy_dir(tmp_path, "request.operation != 'UPDATE' || "
                                          "oldObject.metadata.labels.app != object.metadata.labels.app")
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(POD))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump({**POD, "metadata": {"name": "web", "labels": {"app": "x"}}}))
    out, err = io.StringIO(), io.StringIO()
    settings = RequestSettings(operation="UPDATE")
    code = run_review(str(manifests), None, "json", [str(tmp_path / "new.yaml")], io.StringIO(), out, err,
                      settings=settings, old_path=str(tmp_path / "old.yaml"))
    assert (code, err.getvalue()) == (0, "")
    code = run_review(str(manifests), None, "json", [str(tmp_path / "old.yaml")], io.StringIO(), out, err,
                      settings=settings, old_path=str(tmp_path / "old.yaml"))
    assert code == 3  # the same labels: denied
    code = run_review(str(manifests), None, "json", [str(tmp_path / "new.yaml")], io.StringIO(), out, err,
                      settings=settings)
    assert code == 2 and "an UPDATE needs the object before the change (--old FILE)" in err.getvalue()
