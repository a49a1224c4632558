"""Kyverno's test files (``cli.kyverno.io/v1alpha1`` ``Test``) of ValidatingAdmissionPolicies run unchanged by
``staticadm test``: our own files in that format (``kyverno_tests/``, every feature, for CI), and Kyverno's own
VAP test directories read from a Kyverno checkout outside the repository (skipped when there is none), each
answer held to kube-apiserver's (the oracle) where it is beside the checkout."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from staticadm.policytest.kyverno import (
    KyvernoTest,
    build_review,
    is_kyverno_test,
    namespace_objects,
    parse_kyverno_test,
    plan,
    run_kyverno_test,
    static_manifests,
)
from staticadm.policytest.spec import discover
from tests.differential.harness import ORACLE, oracle_answers
from tests.policytest.test_policytest import run

HERE = Path(__file__).parent / "kyverno_tests"
#: A Kyverno checkout or bare clone (the `fetch` tool's mirror, or `git clone https://github.com/kyverno/kyverno`).
KYVERNO = Path(os.environ.get("STATICADM_KYVERNO_REPO", "/work/.mirror/kyverno+kyverno/repo"))
#: Kyverno's directories of ValidatingAdmissionPolicy tests (`make test-cli-local-vaps` and `test-cli-local-validate`
#: run them in Kyverno's CI, which requires every result to hold).
KYVERNO_DIRECTORIES = ("test/cli/test-validating-admission-policy", "test/cli/test/validating-admission-policies")


def _kyverno_tests(paths: list[Path]) -> list[KyvernoTest]:
    tests, _ = discover([str(path) for path in paths], [(is_kyverno_test, parse_kyverno_test, "")])
    return [test for test in tests if isinstance(test, KyvernoTest)]


# -- our own files, in Kyverno's format ---------------------------------------------------------------


def test_bindings_namespace_labels_users_and_unbound_policies(tmp_path: Path) -> None:
    code, out, err = run("-o", "json", str(HERE / "bindings"))
    assert code == 0, out + err
    report = json.loads(out)
    cases = {case["case"]: case for file in report["files"] for case in file["cases"]}
    assert list(cases) == [
        "limit-replicas/Deployment/shop-prod/web", "limit-replicas/Deployment/shop-prod/api",
        "limit-replicas/Deployment/shop-dev/web", "limit-replicas/Deployment/shop-dev/bare",
        "limit-replicas/Deployment/payments/batch", "limit-replicas/Deployment/shop-dev/exempt",
        "owner-label/Deployment/shop-prod/web", "owner-label/Deployment/shop-dev/web",
        "owner-label/Deployment/shop-prod/api", "owner-label/Deployment/shop-dev/exempt",
        "owner-label/Deployment/payments/batch", "owner-label/Deployment/shop-dev/bare"]
    # The values file's namespace labels reached namespaceObject (the limit label, 4) and the binding's selector.
    api = cases["limit-replicas/Deployment/shop-prod/api"]
    assert api["response"]["response"]["status"]["message"].endswith("at most 4 replicas in shop-prod")
    # The UserInfo file's user made the request.
    assert api["request"]["userInfo"]["username"] == "alice@example.com"
    assert "developers" in api["request"]["userInfo"]["groups"]
    # The unbound policy ran through the binding Kyverno's CLI implies.
    bare = cases["owner-label/Deployment/shop-dev/bare"]
    assert [binding["binding"] for policy in bare["decision"]["validating"]["policies"]
            if policy["policy"] == "owner-label.static.k8s.io" for binding in policy["bindings"]] == \
        ["owner-label.static.k8s.io"]


def test_operations_warn_bindings_errors_and_inline_values() -> None:
    code, out, err = run("-o", "json", str(HERE / "operations"))
    assert code == 0, out + err
    cases = {case["case"]: case for file in json.loads(out)["files"] for case in file["cases"]}
    update = cases["immutable-config/ConfigMap/team-a/settings"]
    assert update["request"]["operation"] == "UPDATE"
    # fail under Warn: allowed, warned.
    pinned = cases["immutable-config/ConfigMap/team-a/pinned [results[2]]"]
    assert pinned["request"]["operation"] == "DELETE"
    assert pinned["response"]["response"]["allowed"] is True
    assert pinned["response"]["response"]["warnings"] == [
        "Validation failed for ValidatingAdmissionPolicy 'immutable-config.static.k8s.io' with binding "
        "'immutable-config.static.k8s.io': only configmaps labelled deletable=true may be deleted"]
    # error under failurePolicy Ignore: allowed.
    assert cases["size-limit/ConfigMap/team-a/empty"]["response"]["response"]["allowed"] is True
    assert cases["namespace-prefix/Namespace/team-a"]["request"]["userInfo"]["username"] == \
        "system:kyverno:background-scan"
    by_spec = cases["size-limit/ConfigMap/team-a/pinned [results[9]]"]
    assert by_spec["passed"] and by_spec["request"]["name"] == "pinned"


def test_a_wrong_expectation_fails_and_says_why(tmp_path: Path) -> None:
    test = (HERE / "bindings" / "kyverno-test.yaml").read_text().replace(
        "  resources: [api]\n  result: fail", "  resources: [api]\n  result: pass")
    for name in ("policy.yaml", "resources.yaml", "values.yaml", "userinfo.yaml"):
        (tmp_path / name).write_text((HERE / "bindings" / name).read_text())
    (tmp_path / "kyverno-test.yaml").write_text(test + "- {policy: owner-label, kind: Deployment, "
                                                       "resources: [missing], result: pass}\n")
    code, out, _ = run("--fail-only", str(tmp_path))
    assert code == 1
    assert ("FAIL  limit-replicas/Deployment/shop-prod/api\n        expected pass, got fail (kube-apiserver would "
            "deny the request; binding limit-replicas-prod: fail: at most 4 replicas in shop-prod)") in out
    assert "FAIL  owner-label/Deployment/missing\n        no resource named 'missing' in resources" in out
    assert "2 failed, in 13 case(s)" in out


def test_run_selects_kyverno_cases_by_test_policy_kind_and_object(tmp_path: Path) -> None:
    code, out, _ = run("--run", "bindings/owner-label/Deployment/shop-dev/", str(HERE / "bindings"))
    assert code == 0
    assert out.splitlines()[1:] == [
        "  PASS  owner-label/Deployment/shop-dev/web", "  PASS  owner-label/Deployment/shop-dev/exempt",
        "  PASS  owner-label/Deployment/shop-dev/bare", "3 passed, 0 failed, in 3 case(s) of 1 test file(s)"]


def test_what_cannot_be_honoured_is_an_error_naming_the_field() -> None:
    code, out, _ = run(str(HERE / "refused"))
    assert code == 2
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    where = str(HERE / "refused" / "kyverno-test.yaml")
    expected_fields = ["exceptions", "paramResources", "jsonPayloads", "results[0].rule", "policies[1]",
                       "clusterRoles", "values.globalValues", "variables", "resourceFilters", "results[0].result",
                       "results[0].policy", "results[0].operation", "results[0].resourceSpecs[0].subresource", "name"]
    assert len(errors) == len(expected_fields), errors
    for index, (error, field) in enumerate(zip(errors, expected_fields, strict=True)):
        document = f" (document {index})" if index else ""
        assert error.startswith(f"error: {where}{document}: "), error
        assert field in error.split(": ")[2], (field, error)
    assert "0 case(s)" in out


def test_a_policy_kube_apiserver_would_refuse_makes_the_test_unusable(tmp_path: Path) -> None:
    for name in ("resources.yaml", "values.yaml", "userinfo.yaml", "kyverno-test.yaml"):
        (tmp_path / name).write_text((HERE / "bindings" / name).read_text())
    (tmp_path / "policy.yaml").write_text((HERE / "bindings" / "policy.yaml").read_text().replace(
        '      operations: ["CREATE"]\n', "", 1))
    code, out, _ = run(str(tmp_path))
    assert code == 2
    assert (f"UNUSABLE  policies: {tmp_path / 'policy.yaml'} (document 3): ValidatingAdmissionPolicy "
            '"owner-label.static.k8s.io": spec.matchConstraints.resourceRules[0].operations: Required value') in out


needs_oracle = pytest.mark.skipif(not ORACLE.is_file(), reason=f"kube-apiserver's admission oracle not found at "
                                                                f"{ORACLE} (it is beside the checkout in CI)")


def _against_the_oracle(test: KyvernoTest, directory: Path) -> list[tuple[str, str, bool, bool]]:
    """(case, expected result, staticadm allowed, kube-apiserver allowed) for each case of the test."""
    directory.mkdir(parents=True)
    for position, manifest in enumerate(static_manifests(test)):
        (directory / f"{position:02d}.yaml").write_bytes(manifest.data)
    namespaces = directory.parent / f"{directory.name}-namespaces.json"
    namespaces.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": namespace_objects(test)}))
    planned = plan(test)
    reviews = [build_review(test, case) for case in planned]
    assert all(isinstance(review, dict) for review in reviews), reviews
    answers = oracle_answers(directory, [review for review in reviews if isinstance(review, dict)], namespaces)
    result = run_kyverno_test(test)
    assert result is not None and not result.problems, result
    return [(case.name, case.expected.result, ours.response["response"]["allowed"], answer.allowed)
            for case, ours, answer in zip(planned, result.cases, answers, strict=True)]


@needs_oracle
def test_our_files_answer_as_kube_apiserver(tmp_path: Path) -> None:
    for test in _kyverno_tests([HERE / "bindings", HERE / "operations"]):
        for case, _, ours, oracle in _against_the_oracle(test, tmp_path / test.name):
            assert ours == oracle, (test.name, case)


# -- Kyverno's own files --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kyverno_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kyverno's VAP test directories, read from the checkout (or copied out of a bare clone into a
    temporary directory: never into the repository)."""
    if (KYVERNO / KYVERNO_DIRECTORIES[0]).is_dir():
        return KYVERNO
    if not (KYVERNO / "HEAD").is_file():
        pytest.skip(f"no Kyverno checkout at {KYVERNO} (set STATICADM_KYVERNO_REPO to a checkout or bare clone of "
                    "github.com/kyverno/kyverno to run Kyverno's own ValidatingAdmissionPolicy tests)")
    target = tmp_path_factory.mktemp("kyverno")
    listing = subprocess.run(["git", "--git-dir", str(KYVERNO), "ls-tree", "-r", "--name-only", "HEAD", "--",
                              *KYVERNO_DIRECTORIES], capture_output=True, text=True, check=True).stdout.split()
    for name in listing:
        data = subprocess.run(["git", "--git-dir", str(KYVERNO), "show", f"HEAD:{name}"], capture_output=True,
                              check=True).stdout
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(data)
    return target


#: What Kyverno's CLI documents for each of its VAP tests (its CI runs them and requires every result to hold,
#: so every expectation is Kyverno's outcome), and staticadm's outcome: (status, a part of the detail). Where
#: they differ, kube-apiserver is right: see the reasons.
KYVERNO_OUTCOMES = {
    "test-validating-admission-policy/check-user-info": ("passed", ""),
    # resourceRules without operations: kube-apiserver's API validation refuses the policy (validateRuleWithOperations,
    # Required value), so no kube-apiserver would run it; Kyverno's CLI does not validate it.
    "test-validating-admission-policy/match-namespaces":
        ("unusable", "spec.matchConstraints.resourceRules[0].operations: Required value"),
    "test-validating-admission-policy/with-bindings-1": ("passed", ""),
    "test-validating-admission-policy/with-bindings-2": ("passed", ""),
    "test-validating-admission-policy/with-bindings-3": ("passed", ""),
    "test-validating-admission-policy/with-bindings-4": ("passed", ""),
    "test-validating-admission-policy/with-match-conditions": ("passed", ""),
    "test-validating-admission-policy/with-namespaceObject-1": ("passed", ""),
    "test-validating-admission-policy/with-namespaceObject-2": ("passed", ""),
    # paramKind and paramRef: static manifests (KEP-5793) have no params.
    "test-validating-admission-policy/with-params": ("error", "paramResources: cannot be honoured"),
    "test/validating-admission-policies/disallow-host-path": ("passed", ""),
}


def _key(path: str) -> str:
    """A test's directory below Kyverno's test/cli."""
    return str(Path(path).parent).rpartition("/test/cli/")[2]


def test_kyverno_vap_tests_run_unchanged(kyverno_checkout: Path) -> None:
    code, out, err = run("-o", "json", *(str(kyverno_checkout / directory) for directory in KYVERNO_DIRECTORIES))
    assert code == 2, err  # with-params and match-namespaces cannot run
    report = json.loads(out)
    outcomes: dict[str, tuple[str, str]] = {}
    for error in report["errors"]:
        path, _, message = error.partition(": ")
        outcomes[_key(path)] = ("error", message)
    for file in report["files"]:
        if file["problems"]:
            outcomes[_key(file["file"])] = ("unusable", "; ".join(file["problems"]))
        else:
            assert file["cases"]
            failures = "; ".join(failure for case in file["cases"] for failure in case["failures"])
            outcomes[_key(file["file"])] = ("failed", failures) if failures else ("passed", "")
    assert set(outcomes) == set(KYVERNO_OUTCOMES)
    for key, (status, detail) in KYVERNO_OUTCOMES.items():
        assert outcomes[key][0] == status and detail in outcomes[key][1], (key, outcomes[key])
    assert report["summary"]["cases"] == 26 and report["summary"]["passed"] == 26


@needs_oracle
def test_kyverno_expectations_agree_with_kube_apiserver(kyverno_checkout: Path, tmp_path: Path) -> None:
    """Every binding in Kyverno's VAP tests denies (Deny, or the binding Kyverno implies), so kube-apiserver
    denies exactly the requests whose expected result is fail; staticadm answers as kube-apiserver does."""
    tests = [test for test in _kyverno_tests([kyverno_checkout / directory for directory in KYVERNO_DIRECTORIES])
             if KYVERNO_OUTCOMES[_key(test.path)][0] == "passed"]
    assert len(tests) == 9
    disagreements = []
    for position, test in enumerate(tests):
        for case, expected, ours, oracle in _against_the_oracle(test, tmp_path / str(position)):
            assert ours == oracle, (test.path, case)
            if (expected == "fail") == oracle:
                disagreements.append((_key(test.path), case, expected, "allowed" if oracle else "denied"))
    assert disagreements == []


@needs_oracle
def test_the_policy_kube_apiserver_refuses_matches_nothing_where_the_oracle_loads_it(kyverno_checkout: Path,
                                                                                    tmp_path: Path) -> None:
    """The oracle runs no API validation (its documented limit), so it loads match-namespaces' policy; a rule
    without operations then matches no request: kube-apiserver's admission code would not deny the namespace
    Kyverno expects to fail either. staticadm refuses the policy as kube-apiserver's validation does."""
    directory = kyverno_checkout / KYVERNO_DIRECTORIES[0] / "match-namespaces"
    test = parse_kyverno_test(yaml.safe_load((directory / "kyverno-test.yaml").read_text()),
                              str(directory / "kyverno-test.yaml"), 0)
    assert isinstance(test, KyvernoTest)
    result = run_kyverno_test(test)
    assert result is not None and "operations: Required value" in result.problems[0]
    target = tmp_path / "manifests"
    target.mkdir()
    for position, manifest in enumerate(static_manifests(test)):
        (target / f"{position:02d}.yaml").write_bytes(manifest.data)
    planned = plan(test)
    assert [case.expected.result for case in planned] == ["fail", "pass"]
    answers = oracle_answers(target, [review for case in planned if isinstance(review := build_review(test, case),
                                                                              dict)])
    assert [answer.allowed for answer in answers] == [True, True]
