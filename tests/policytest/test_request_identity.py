"""``review`` and ``test`` make the same request of the same object and user, with the groups kube-apiserver's
authentication gives; a case allowed where a denial was expected says why."""

from __future__ import annotations

import io
import json
from pathlib import Path

import yaml

from staticadm.cli import main

#: Denies config maps created by anyone outside system:masters (the policy from the issue's report).
POLICY = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: masters-only.static.k8s.io}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - name: not-masters
    expression: "!('system:masters' in request.userInfo.groups)"
  validations:
  - expression: "false"
    message: only system:masters may create config maps
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: masters-only.static.k8s.io}
spec:
  policyName: masters-only.static.k8s.io
  validationActions: [Deny]
"""

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "shop"}}


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _layout(tmp_path: Path, cases: list[dict]) -> tuple[Path, Path, Path]:
    manifests = tmp_path / "policies"
    manifests.mkdir()
    (manifests / "masters-only.yaml").write_text(POLICY)
    obj = tmp_path / "configmap.yaml"
    obj.write_text(yaml.safe_dump(CONFIG_MAP))
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "masters.test.yaml").write_text(yaml.safe_dump({
        "apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "masters"},
        "spec": {"manifests": "../policies", "cases": cases}}))
    return manifests, obj, tests


def _reviewed(manifests: Path, obj: Path, *flags: str) -> tuple[int, dict]:
    code, out, err = _cli("review", str(manifests), str(obj), "-o", "json", *flags)
    assert code in (0, 3), err
    return code, json.loads(out.splitlines()[0])


def _without_uid(request: dict) -> dict:
    # Each command seeds the request's uid with its own label for it (file and document, or case).
    return {key: value for key, value in request.items() if key != "uid"}


def _tested(tests: Path) -> tuple[int, list[dict]]:
    code, out, _ = _cli("test", str(tests), "-o", "json")
    return code, json.loads(out)["files"][0]["cases"]


def test_review_and_test_build_the_same_request_by_default_and_for_the_same_user(tmp_path: Path) -> None:
    manifests, obj, tests = _layout(tmp_path, [
        {"name": "default user", "objectFile": "../configmap.yaml", "expect": {"allowed": False}},
        {"name": "a master", "objectFile": "../configmap.yaml",
         "user": {"username": "root", "groups": ["system:masters"]}, "expect": {"allowed": True}},
    ])
    code, cases = _tested(tests)
    assert code == 0, cases
    by_default, as_master = cases
    review_code, reviewed = _reviewed(manifests, obj)
    assert review_code == 3 and _without_uid(reviewed["request"]) == _without_uid(by_default["request"])
    assert reviewed["request"]["userInfo"] == {"username": "admin", "groups": ["system:authenticated"]}
    review_code, reviewed = _reviewed(manifests, obj, "--user", "root", "--group", "system:masters")
    assert review_code == 0 and _without_uid(reviewed["request"]) == _without_uid(as_master["request"])


def test_group_adds_to_system_authenticated_as_kube_apiservers_authentication_does(tmp_path: Path) -> None:
    manifests, obj, _ = _layout(tmp_path, [])
    groups = {
        ("--group", "developers", "--group", "qa"): ["developers", "qa", "system:authenticated"],
        ("--group", "system:authenticated", "--group", "developers"): ["system:authenticated", "developers"],
        ("--user", "system:anonymous"): ["system:unauthenticated"],
    }
    for flags, expected in groups.items():
        _, reviewed = _reviewed(manifests, obj, *flags)
        assert reviewed["request"]["userInfo"]["groups"] == expected, flags


def test_a_case_allowed_against_its_expectation_names_the_user_and_what_each_policy_made_of_it(
        tmp_path: Path) -> None:
    _, _, tests = _layout(tmp_path, [
        {"name": "a master", "objectFile": "../configmap.yaml",
         "user": {"username": "root", "groups": ["system:masters"]}, "expect": {"allowed": False}},
    ])
    code, out, _ = _cli("test", str(tests))
    assert code == 1
    assert ("expected denied, got allowed (user 'root' in groups ['system:masters', 'system:authenticated']; "
            "masters-only.static.k8s.io binding masters-only.static.k8s.io: not matched: matchCondition "
            '"not-masters" evaluated to false)') in out, out
