"""``check --webhook-config-dir``: the installed static webhook registration compared with the policies (real
files, as ``webhook-config --out-dir`` writes them), the command that makes it follow them, the control-plane
classes the generated registration leaves out, and check's notes on skipped files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import EXAMPLES, run_cli

BASELINE = ("protect-admission-config.static.k8s.io.yaml", "deny-privileged.static.k8s.io.yaml")
REGISTRATION = "validating-webhooks/staticadm.static.k8s.io.yaml"


def _policy(name: str, rule: str, binding_match: str = "") -> str:
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}.static.k8s.io}}
spec:
  matchConstraints:
    resourceRules: [{rule}]
  validations: [{{expression: "true"}}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}.static.k8s.io}}
spec: {{policyName: {name}.static.k8s.io, validationActions: [Deny]{binding_match}}}
"""


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Path, Path]:
    """The docs' baseline and its registration, as `webhook-config --out-dir` installs it."""
    assert run_cli("certs", "--out-dir", str(tmp_path / "tls")).code == 0
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for name in BASELINE:
        shutil.copy(EXAMPLES / name, manifests / name)
    admission = tmp_path / "admission"
    for plugin in ("validating-webhooks", "mutating-webhooks"):
        (admission / plugin).mkdir(parents=True)
    result = run_cli("webhook-config", "--manifests", str(manifests), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tmp_path / "tls" / "ca.crt"), "--failure-policy", "Ignore",
                     "--out-dir", str(admission))
    assert result.code == 0, result.stderr
    return manifests, admission


def test_a_policy_the_registration_does_not_serve_fails_check_until_the_one_command(
        installed: tuple[Path, Path]) -> None:
    manifests, admission = installed
    assert run_cli("check", str(manifests), "--webhook-config-dir", str(admission)).code == 0
    before = (admission / REGISTRATION).read_text()
    (manifests / "deployments.static.k8s.io.yaml").write_text(
        _policy("deployments", "{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: "
                               "[deployments, deployments/scale]}"))
    result = run_cli("check", str(manifests), "--webhook-config-dir", str(admission))
    assert result.code == 1, result.stdout
    assert "no rule sends CREATE apps/v1 deployments; no rule sends CREATE apps/v1 deployments/scale" in result.stdout
    assert f"staticadm webhook-config --manifests {manifests} --out-dir {admission}" in result.stdout
    report = json.loads(run_cli("check", str(manifests), "--webhook-config-dir", str(admission), "-o", "json").stdout)
    assert (report["apiVersion"], report["kind"]) == ("staticadm.io/v1alpha1", "CheckReport")
    [entry] = report["directories"][0]["unregistered"]
    assert entry["policy"] == "deployments.static.k8s.io" and entry["plugin"] == "validating"
    # check only read the registration.
    assert (admission / REGISTRATION).read_text() == before

    # The fix: URL, CA and failurePolicy come from what is installed.
    fixed = run_cli("webhook-config", "--manifests", str(manifests), "--out-dir", str(admission))
    assert fixed.code == 0, fixed.stderr
    [webhook] = yaml.safe_load((admission / REGISTRATION).read_text())["webhooks"]
    [old] = yaml.safe_load(before)["webhooks"]
    assert webhook["clientConfig"] == old["clientConfig"] and webhook["failurePolicy"] == "Ignore"
    assert run_cli("check", str(manifests), "--webhook-config-dir", str(admission)).code == 0


def test_selectors_conditions_and_match_policy_of_the_registration_are_compared(
        installed: tuple[Path, Path]) -> None:
    manifests, admission = installed
    path = admission / REGISTRATION
    configuration = yaml.safe_load(path.read_text())
    [webhook] = configuration["webhooks"]
    webhook["namespaceSelector"] = {"matchLabels": {"env": "prod"}}
    webhook["matchPolicy"] = "Exact"
    webhook["matchConditions"].append({"name": "hand-written", "expression": "true"})
    path.write_text(yaml.safe_dump(configuration))
    result = run_cli("check", str(manifests), "--webhook-config-dir", str(admission))
    assert result.code == 1
    assert "has namespaceSelector env In ['prod'], which the policy does not require" in result.stdout
    assert "matchPolicy Exact while the policy is Equivalent" in result.stdout
    assert "matchCondition 'hand-written', which staticadm does not generate" in result.stdout

    # A policy on kube-system Pods is not sent them while the registration leaves them out.
    configuration = yaml.safe_load(path.read_text())
    configuration["webhooks"][0].pop("namespaceSelector")
    configuration["webhooks"][0]["matchPolicy"] = "Equivalent"
    configuration["webhooks"][0]["matchConditions"].pop()
    path.write_text(yaml.safe_dump(configuration))
    assert run_cli("check", str(manifests), "--webhook-config-dir", str(admission)).code == 0
    (manifests / "system-pods.static.k8s.io.yaml").write_text(
        _policy("system-pods", '{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}'))
    result = run_cli("check", str(manifests), "--webhook-config-dir", str(admission))
    assert result.code == 1
    assert "matchCondition staticadm.io/exclude-kube-system-pods leaves out kube-system pods" in result.stdout


def test_without_the_registration_every_policy_is_unregistered(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(EXAMPLES / BASELINE[1], manifests / BASELINE[1])
    result = run_cli("check", str(manifests), "--webhook-config-dir", str(tmp_path))
    assert result.code == 1
    assert f"nothing is sent to the policy ({tmp_path / 'validating-webhooks'}: No such file or directory)" in \
        result.stdout
    assert run_cli("check", str(manifests), "--webhook-config-dir", str(tmp_path / "absent")).code == 2
    # webhook-config cannot take URL and CA from a registration that is not there.
    result = run_cli("webhook-config", "--manifests", str(manifests), "--out-dir", str(tmp_path))
    assert result.code == 2 and "give --url and --ca-file" in result.stderr


def test_the_generated_registration_leaves_out_only_the_control_plane_classes_no_policy_can_match(
        tmp_path: Path) -> None:
    assert run_cli("certs", "--out-dir", str(tmp_path / "tls")).code == 0
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for name in BASELINE:
        shutil.copy(EXAMPLES / name, manifests / name)
    # Every resource outside kube-system: nodes and events (any namespace) can be matched, kube-system cannot.
    (manifests / "wide.static.k8s.io.yaml").write_text(_policy(
        "wide", '{apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*"]}',
        ", matchResources: {namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, "
        "operator: NotIn, values: [kube-system, kube-node-lease]}]}}"))
    result = run_cli("webhook-config", "--manifests", str(manifests), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tmp_path / "tls" / "ca.crt"))
    [configuration] = [d for d in yaml.safe_load_all(result.stdout) if d]
    [webhook] = configuration["webhooks"]
    assert [condition["name"] for condition in webhook["matchConditions"]] == [
        "staticadm.io/exclude-kube-system-pods", "staticadm.io/exclude-node-leases",
        "staticadm.io/exclude-kube-system-leases"]
    report = json.loads(run_cli("check", str(manifests), "-o", "json").stdout)
    blocked = {entry["object"] for entry in report["directories"][0]["outageBlocks"]}
    # "*" is every resource but no subresource: the kubelet's nodes/status update is not sent.
    assert blocked == {"an event the kubelet records (core/v1)", "an event kube-scheduler records (events.k8s.io/v1)"}


def test_check_notes_files_skipped_for_their_extension(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(EXAMPLES / BASELINE[1], manifests / BASELINE[1])
    (manifests / "deny-latest.static.k8s.io.yaml.disabled").write_text("kind: ValidatingAdmissionPolicy\n")
    (manifests / ".editor.swp").write_text("")
    result = run_cli("check", str(manifests))
    assert result.code == 0
    assert f"warning: {manifests / 'deny-latest.static.k8s.io.yaml.disabled'}: skipped: only files ending in " \
           ".yaml, .yml or .json are read" in result.stdout
    assert ".editor.swp" not in result.stdout


@pytest.mark.parametrize("text", [
    "webhooks: [1, 2]\nkind: ValidatingWebhookConfiguration\n",
    "kind: ValidatingWebhookConfiguration\nwebhooks:\n- name: validate.staticadm.io\n  rules: {a: b}\n"
    "  clientConfig: [x]\n  namespaceSelector: {matchLabels: [1], matchExpressions: {k: v}}\n"
    "  matchConditions: [{name: [1]}, 7]\n",
    "kind: ValidatingWebhookConfiguration\nwebhooks:\n- name: validate.staticadm.io\n  rules:\n"
    "  - {operations: [{}], apiGroups: [[1]], apiVersions: 3, resources: ['*'], scope: {}}\n",
    "kind: List\nitems: {not: a list}\n", "{{{{ not yaml", "\xff\xfe",
])
def test_a_hand_broken_registration_is_reported_never_a_crash(installed: tuple[Path, Path], text: str) -> None:
    manifests, admission = installed
    (admission / REGISTRATION).write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff\xfe"
                                           else b"\xff\xfe")
    result = run_cli("check", str(manifests), "--webhook-config-dir", str(admission))
    assert result.code == 1, result.stdout + result.stderr
    assert "does not send this validating policy all of its requests" in result.stdout
    assert "Traceback" not in result.stderr
    # webhook-config finds no URL or CA to keep in it, and says so.
    fixed = run_cli("webhook-config", "--manifests", str(manifests), "--out-dir", str(admission))
    assert fixed.code == 2 and "give --url and --ca-file" in fixed.stderr
