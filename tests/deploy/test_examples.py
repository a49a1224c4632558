"""The example policies: each passes ``staticadm check`` and its review fixtures (one allowed, one denied at least)."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import jsonpatch
import pytest

from tests.deploy.conftest import EXAMPLES, REQUESTS, run_cli, run_subprocess

VALIDATING_EXAMPLES = ("deny-privileged", "disallow-latest-tag", "protect-admission-config", "require-resource-limits")
MUTATING_EXAMPLES = ("default-seccomp-profile",)


def _example(name: str) -> Path:
    return EXAMPLES / f"{name}.static.k8s.io.yaml"


def test_the_examples_directory_passes_check_as_a_whole() -> None:
    result = run_subprocess("check", str(EXAMPLES))
    assert result.code == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


def test_every_example_has_request_fixtures() -> None:
    assert sorted(p.name for p in REQUESTS.iterdir() if p.is_dir()) == sorted(VALIDATING_EXAMPLES + MUTATING_EXAMPLES)
    assert sorted(p.name.removesuffix(".static.k8s.io.yaml") for p in EXAMPLES.glob("*.yaml")) == sorted(
        VALIDATING_EXAMPLES + MUTATING_EXAMPLES)


@pytest.mark.parametrize("name", VALIDATING_EXAMPLES)
def test_example_passes_check_on_its_own(name: str, tmp_path: Path) -> None:
    # Alone in a directory, as an operator drops it: it needs nothing from the other examples.
    shutil.copy(_example(name), tmp_path)
    result = run_cli("check", "-o", "json", str(tmp_path))
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["valid"] is True
    [directory] = report["directories"]
    assert directory["validatingPolicies"] == [f"{name}.static.k8s.io"]
    assert directory["validatingBindings"] == [f"{name}.static.k8s.io"]


@pytest.mark.parametrize("name", VALIDATING_EXAMPLES)
def test_example_review_fixtures(name: str, tmp_path: Path) -> None:
    shutil.copy(_example(name), tmp_path)
    requests = sorted((REQUESTS / name).glob("*.json"))
    expected = [path.name.startswith("allowed-") for path in requests]
    assert True in expected and False in expected, f"{name} needs an allowed- and a denied- request"
    assert all(path.name.startswith(("allowed-", "denied-")) for path in requests)

    result = run_subprocess("review", "--manifests", str(tmp_path), "-o", "json", *map(str, requests))
    assert result.code == 3, result.stderr  # some denied
    responses = [json.loads(line)["review"] for line in result.stdout.splitlines()]
    assert len(responses) == len(requests)
    for path, allowed, review in zip(requests, expected, responses, strict=True):
        response = review["response"]
        assert response["uid"] == json.loads(path.read_text())["request"]["uid"]
        assert response["allowed"] is allowed, f"{path.name}: {response}"
        if not allowed:
            message = response["status"]["message"]
            assert f"ValidatingAdmissionPolicy '{name}.static.k8s.io'" in message, message


def test_protected_admission_config_reads_old_object_on_delete() -> None:
    # On DELETE there is no object: a policy reading `object` would error (and, failing closed, deny
    # every deletion) or read nothing. The denial must name the deleted object, taken from oldObject.
    request = REQUESTS / "protect-admission-config" / "denied-delete-protected.json"
    assert json.loads(request.read_text())["request"]["object"] is None
    result = run_cli("review", "--manifests", str(EXAMPLES), str(request))
    assert result.code == 3, result.stderr
    assert "validatingadmissionpolicies baseline-security is protected" in result.stdout
    assert "only system:masters may delete it" in result.stdout


def test_the_examples_together_deny_only_what_one_of_them_denies() -> None:
    # The whole directory, as the daemon would serve it: the other examples must not deny a request
    # meant to be allowed (the fixtures are valid pods apart from the one thing each example checks).
    allowed = sorted(REQUESTS.glob("*/allowed-*.json"))
    result = run_cli("review", "--manifests", str(EXAMPLES), "-o", "json", *map(str, allowed))
    assert result.code == 0, result.stderr
    verdicts = [json.loads(line)["review"]["response"]["allowed"] for line in result.stdout.splitlines()]
    assert verdicts == [True] * len(allowed)


@pytest.mark.parametrize("name", MUTATING_EXAMPLES)
def test_mutating_example_review_fixtures(name: str, tmp_path: Path) -> None:
    # mutated-*: the answer's patch, applied by an independent JSON Patch library, sets the default;
    # unchanged-*: no patch at all.
    shutil.copy(_example(name), tmp_path)
    requests = sorted((REQUESTS / name).glob("*.json"))
    assert {p.name.split("-")[0] for p in requests} == {"mutated", "unchanged"}
    result = run_subprocess("review", "--manifests", str(tmp_path), "--endpoint", "mutate", "-o", "json",
                            *map(str, requests))
    assert result.code == 0, result.stderr
    for path, line in zip(requests, result.stdout.splitlines(), strict=True):
        original = json.loads(path.read_text())["request"]["object"]
        response = json.loads(line)["review"]["response"]
        assert response["allowed"] is True, response
        if path.name.startswith("unchanged-"):
            assert "patch" not in response, path.name
            continue
        patched = jsonpatch.apply_patch(original, json.loads(base64.b64decode(response["patch"])))
        context = patched["spec"]["securityContext"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        # Server-side-apply merge: the rest of the securityContext is kept.
        assert {k: v for k, v in context.items() if k != "seccompProfile"} == original["spec"]["securityContext"]


def test_review_text_shows_the_patch_then_the_validation_of_the_mutated_object() -> None:
    request = REQUESTS / "default-seccomp-profile" / "mutated-no-profile.json"
    result = run_cli("review", "--manifests", str(EXAMPLES), str(request))
    assert result.code == 0, result.stderr
    assert "patch: add /spec/securityContext/seccompProfile = {\"type\":\"RuntimeDefault\"}" in result.stdout
    assert "mutated by: policy default-seccomp-profile.static.k8s.io" in result.stdout
    assert "decision: allowed" in result.stdout
