"""``staticadm review`` end to end: exit codes, JSON lines and the text report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import yaml

from staticadm.admission.review import run_review
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
    assert (code, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["response"]["allowed"] for line in lines] == [False, True]


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
