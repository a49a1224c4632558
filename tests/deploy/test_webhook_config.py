"""``staticadm webhook-config``: valid configurations, narrowed without ever under-matching, trusted by TLS."""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from tests.deploy.conftest import EXAMPLES, REQUESTS, run_cli
from tests.server.harness import free_port

HEADER = "apiVersion: admissionregistration.k8s.io/v1\n"


def _policy(name: str, *, rules: str, binding: str = "", constraints: str = "") -> str:
    full = f"{name}.static.k8s.io"
    return f"""{HEADER}kind: ValidatingAdmissionPolicy
metadata:
  name: {full}
spec:
  matchConstraints:
    resourceRules:
{rules}{constraints}
  validations:
    - expression: "true"
---
{HEADER}kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {full}
spec:
  policyName: {full}
  validationActions: [Deny]
{binding}"""


PODS = """      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
"""
DEPLOYMENTS = """      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        operations: ["UPDATE"]
        resources: ["deployments", "deployments/scale"]
        resourceNames: ["web"]
        scope: Namespaced
"""
PROD_NAMESPACES = """    namespaceSelector:
      matchLabels:
        env: prod
"""


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    assert run_cli("certs", "--out-dir", str(directory)).code == 0
    return directory


def _generate(manifests: Path, tls_dir: Path, *extra: str) -> tuple[list[dict[str, Any]], str]:
    result = run_cli("webhook-config", "--manifests", str(manifests), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tls_dir / "ca.crt"), *extra)
    assert result.code == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None], result.stderr


def _write(directory: Path, **files: str) -> Path:
    for name, text in files.items():
        (directory / f"{name}.static.k8s.io.yaml").write_text(text)
    return directory


def _only_webhook(documents: list[dict[str, Any]]) -> dict[str, Any]:
    [document] = documents
    [webhook] = document["webhooks"]
    return webhook


def test_examples_give_a_valid_validating_configuration(tls_dir: Path) -> None:
    documents, stderr = _generate(EXAMPLES, tls_dir)
    validating = [d for d in documents if d["kind"] == "ValidatingWebhookConfiguration"]
    [config] = validating
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["metadata"]["name"].endswith(".static.k8s.io")
    [webhook] = config["webhooks"]
    assert len(webhook["name"].split(".")) >= 3  # a webhook name must be fully qualified
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:8443/validate"
    assert "service" not in webhook["clientConfig"]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["matchPolicy"] == "Equivalent"
    assert 1 <= webhook["timeoutSeconds"] <= 30
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == (tls_dir / "ca.crt").read_bytes()
    operations = {op for rule in webhook["rules"] for op in rule["operations"]}
    assert operations == {"CREATE", "UPDATE", "DELETE"}
    for rule in webhook["rules"]:
        assert set(rule) == {"operations", "apiGroups", "apiVersions", "resources", "scope"}
    if not any(d["kind"] == "MutatingWebhookConfiguration" for d in documents):
        assert "MutatingWebhookConfiguration omitted" in stderr


def test_ca_bundle_verifies_the_serving_certificate(tls_dir: Path) -> None:
    documents, _ = _generate(EXAMPLES, tls_dir)
    bundle = base64.b64decode(documents[0]["webhooks"][0]["clientConfig"]["caBundle"])
    store = Store(x509.load_pem_x509_certificates(bundle))
    serving = x509.load_pem_x509_certificate((tls_dir / "serving.crt").read_bytes())
    verifier = PolicyBuilder().store(store).build_server_verifier(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    chain = verifier.verify(serving, [])
    assert chain[-1].subject == store_subject(bundle)


def store_subject(bundle: bytes) -> x509.Name:
    return x509.load_pem_x509_certificates(bundle)[0].subject


def test_no_policies_of_a_kind_omits_its_configuration(tmp_path: Path, tls_dir: Path) -> None:
    documents, stderr = _generate(_write(tmp_path, pods=_policy("pods", rules=PODS)), tls_dir)
    assert [d["kind"] for d in documents] == ["ValidatingWebhookConfiguration"]
    assert "no mutating policy can fire: MutatingWebhookConfiguration omitted" in stderr


def test_empty_directory_prints_nothing_and_says_why(tmp_path: Path, tls_dir: Path) -> None:
    documents, stderr = _generate(tmp_path, tls_dir)
    assert documents == []
    assert "ValidatingWebhookConfiguration omitted" in stderr and "MutatingWebhookConfiguration omitted" in stderr


def test_rules_are_the_union_without_resource_names(tmp_path: Path, tls_dir: Path) -> None:
    _write(tmp_path, pods=_policy("pods", rules=PODS), deploys=_policy("deploys", rules=DEPLOYMENTS))
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert webhook["rules"] == [
        # resourceNames cannot be expressed in a webhook rule: the rule covers every name (over-match).
        {"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"],
         "resources": ["deployments", "deployments/scale"], "scope": "Namespaced"},
        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"},
    ]


def test_rules_differing_only_in_operations_are_merged(tmp_path: Path, tls_dir: Path) -> None:
    updates = PODS.replace('["CREATE"]', '["UPDATE", "CONNECT"]')
    _write(tmp_path, a=_policy("a", rules=PODS), b=_policy("b", rules=updates))
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert webhook["rules"] == [{"operations": ["CONNECT", "CREATE", "UPDATE"], "apiGroups": [""],
                                 "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}]


def test_exclude_resource_rules_do_not_narrow(tmp_path: Path, tls_dir: Path) -> None:
    everything = """      - apiGroups: ["*"]
        apiVersions: ["*"]
        operations: ["*"]
        resources: ["*"]
"""
    exclude = """    excludeResourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["*"]
        resources: ["pods"]
"""
    _write(tmp_path, all=_policy("all", rules=everything, constraints=exclude))
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert webhook["rules"] == [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"],
                                 "scope": "*"}]


def test_selector_shared_by_every_policy_narrows(tmp_path: Path, tls_dir: Path) -> None:
    # One policy selects prod in its matchConstraints; the other through its only binding. Every pair
    # that can fire requires env=prod, so the webhook may require it too.
    _write(tmp_path, a=_policy("a", rules=PODS, constraints=PROD_NAMESPACES),
           b=_policy("b", rules=DEPLOYMENTS, binding="  matchResources:\n" + PROD_NAMESPACES))
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert webhook["namespaceSelector"] == {"matchLabels": {"env": "prod"}}
    assert "objectSelector" not in webhook


def test_selector_not_shared_by_every_policy_is_left_out(tmp_path: Path, tls_dir: Path) -> None:
    _write(tmp_path, a=_policy("a", rules=PODS, constraints=PROD_NAMESPACES), b=_policy("b", rules=DEPLOYMENTS))
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert "namespaceSelector" not in webhook


def test_selector_of_only_some_bindings_is_left_out(tmp_path: Path, tls_dir: Path) -> None:
    text = _policy("a", rules=PODS, binding="  matchResources:\n" + PROD_NAMESPACES)
    text += f"""---
{HEADER}kind: ValidatingAdmissionPolicyBinding
metadata:
  name: a-everywhere.static.k8s.io
spec:
  policyName: a.static.k8s.io
  validationActions: [Warn]
"""
    _write(tmp_path, a=text)
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert "namespaceSelector" not in webhook


def test_object_selector_written_two_ways_is_recognised_as_one(tmp_path: Path, tls_dir: Path) -> None:
    labels = "    objectSelector:\n      matchLabels:\n        team: a\n"
    expression = ("    objectSelector:\n      matchExpressions:\n        - key: team\n          operator: In\n"
                  "          values: [a]\n        - key: tier\n          operator: Exists\n")
    _write(tmp_path, a=_policy("a", rules=PODS, constraints=labels),
           b=_policy("b", rules=DEPLOYMENTS, constraints=expression))
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert webhook["objectSelector"] == {"matchLabels": {"team": "a"}}


def test_match_policy_is_exact_only_when_every_policy_is(tmp_path: Path, tls_dir: Path) -> None:
    exact = "    matchPolicy: Exact\n"
    _write(tmp_path, a=_policy("a", rules=PODS, constraints=exact))
    assert _only_webhook(_generate(tmp_path, tls_dir)[0])["matchPolicy"] == "Exact"
    _write(tmp_path, b=_policy("b", rules=DEPLOYMENTS))
    assert _only_webhook(_generate(tmp_path, tls_dir)[0])["matchPolicy"] == "Equivalent"


def test_policy_without_binding_adds_nothing(tmp_path: Path, tls_dir: Path) -> None:
    unbound = _policy("unbound", rules=DEPLOYMENTS).split("---")[0]
    _write(tmp_path, a=_policy("a", rules=PODS), unbound=unbound)
    webhook = _only_webhook(_generate(tmp_path, tls_dir)[0])
    assert [rule["resources"] for rule in webhook["rules"]] == [["pods"]]


def test_api_registration_names_and_warns_about_exempt_kinds(tls_dir: Path) -> None:
    documents, stderr = _generate(EXAMPLES, tls_dir, "--registration", "api", "--failure-policy", "Ignore",
                                  "--timeout", "5")
    config = documents[0]
    assert not config["metadata"]["name"].endswith(".static.k8s.io")  # reserved for static manifests
    assert config["webhooks"][0]["failurePolicy"] == "Ignore"
    assert config["webhooks"][0]["timeoutSeconds"] == 5
    assert "protect-admission-config.static.k8s.io" in stderr
    assert "only static webhook registration" in stderr


@pytest.mark.parametrize(("url", "message"), [
    ("http://127.0.0.1:8443", "https only"),
    ("https://user@127.0.0.1:8443", "user info"),
    ("https://127.0.0.1:8443/?x=1", "query or fragment"),
    ("https://127.0.0.1:8443/validate", "base URL"),
])
def test_bad_urls_are_refused(url: str, message: str, tls_dir: Path) -> None:
    result = run_cli("webhook-config", "--manifests", str(EXAMPLES), "--url", url, "--ca-file",
                     str(tls_dir / "ca.crt"))
    assert result.code == 2 and message in result.stderr and result.stdout == ""


def test_serving_certificate_is_refused_as_ca_file(tls_dir: Path) -> None:
    result = run_cli("webhook-config", "--manifests", str(EXAMPLES), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tls_dir / "serving.crt"))
    assert result.code == 2 and "non-CA certificate" in result.stderr


def test_invalid_manifests_are_refused(tmp_path: Path, tls_dir: Path) -> None:
    (tmp_path / "bad.static.k8s.io.yaml").write_text(_policy("bad", rules=PODS).replace("a.static", "x"))
    (tmp_path / "worse.yaml").write_text(f"{HEADER}kind: ValidatingAdmissionPolicy\nmetadata:\n  name: nope\n")
    result = run_cli("webhook-config", "--manifests", str(tmp_path), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tls_dir / "ca.crt"))
    assert result.code == 1 and result.stdout == "" and "nope" in result.stderr


# -- a real TLS handshake: kube-apiserver's view ---------------------------------------------------


def _post(context: ssl.SSLContext, port: int, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST" if body is not None else "GET", path, body=body,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_ca_bundle_is_the_only_trust_root_a_real_handshake_needs(tmp_path: Path, tls_dir: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(EXAMPLES / "deny-privileged.static.k8s.io.yaml", manifests)
    documents, _ = _generate(manifests, tls_dir)
    webhook = documents[0]["webhooks"][0]
    bundle = base64.b64decode(webhook["clientConfig"]["caBundle"]).decode("ascii")

    port = free_port()
    command = [sys.executable, "-m", "staticadm", "serve", "--manifests", str(manifests), "--listen",
               f"127.0.0.1:{port}", "--socket", "", "--tls-cert", str(tls_dir / "serving.crt"), "--tls-key",
               str(tls_dir / "serving.key"), "--state-dir", str(tmp_path / "state"), "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Trust exactly the caBundle (no system roots), and check the host name as kube-apiserver does.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=bundle)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _ = _post(context, port, "/readyz")
                if status == 200:
                    break
            except (ConnectionRefusedError, ConnectionResetError, TimeoutError):
                pass
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "daemon not ready"
            time.sleep(0.2)
        path = webhook["clientConfig"]["url"].removeprefix("https://127.0.0.1:8443")
        denied = (REQUESTS / "deny-privileged" / "denied-privileged-init.json").read_bytes()
        status, body = _post(context, port, path, denied)
        assert status == 200
        assert json.loads(body)["response"]["allowed"] is False
        allowed = (REQUESTS / "deny-privileged" / "allowed-unprivileged.json").read_bytes()
        assert json.loads(_post(context, port, path, allowed)[1])["response"]["allowed"] is True

        # A client trusting something else must fail the handshake: the trust above came from caBundle.
        other = tmp_path / "other"
        assert run_cli("certs", "--out-dir", str(other)).code == 0
        stranger = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        stranger.load_verify_locations(cafile=str(other / "ca.crt"))
        with pytest.raises(ssl.SSLCertVerificationError):
            _post(stranger, port, "/livez")
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_out_dir_writes_one_file_per_configuration_and_removes_what_is_no_longer_needed(
        tls_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "admission"
    printed, _ = _generate(EXAMPLES, tls_dir)
    result = run_cli("webhook-config", "--manifests", str(EXAMPLES), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tls_dir / "ca.crt"), "--out-dir", str(out))
    assert result.code == 0, result.stderr
    validating = out / "validating-webhooks" / "staticadm.static.k8s.io.yaml"
    mutating = out / "mutating-webhooks" / "staticadm.static.k8s.io.yaml"
    assert [yaml.safe_load(validating.read_text()), yaml.safe_load(mutating.read_text())] == printed
    assert f"wrote {validating}" in result.stdout
    # No temporary file is left beside them (each was renamed into place).
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["staticadm.static.k8s.io.yaml"] * 2
    (tmp_path / "validating-only").mkdir()
    only_validating = _write(tmp_path / "validating-only", a=_policy("a", rules=PODS))
    result = run_cli("webhook-config", "--manifests", str(only_validating), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tls_dir / "ca.crt"), "--out-dir", str(out))
    assert result.code == 0 and not mutating.exists() and f"removed {mutating}" in result.stdout
    assert validating.exists()
    result = run_cli("webhook-config", "--registration", "api", "--manifests", str(EXAMPLES), "--url",
                     "https://127.0.0.1:8443", "--ca-file", str(tls_dir / "ca.crt"), "--out-dir", str(tmp_path / "api"))
    assert result.code == 0
    assert sorted(p.name for p in (tmp_path / "api").iterdir()) == ["mutating-staticadm.yaml",
                                                                     "validating-staticadm.yaml"]



def test_a_rule_another_rule_covers_is_left_out(tmp_path: Path) -> None:
    """Rules are OR-ed: pods CREATE adds nothing to pods and pods/* CREATE and UPDATE in every version."""
    def vap(name: str, *rules: dict[str, Any]) -> str:
        return yaml.safe_dump_all([
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
             "metadata": {"name": name}, "spec": {"matchConstraints": {"resourceRules": list(rules)},
                                                  "validations": [{"expression": "true"}]}},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}])

    def rule(operations: list[str], resources: list[str], versions: list[str] | None = None,
             scope: str = "*") -> dict[str, Any]:
        return {"operations": operations, "apiGroups": [""], "apiVersions": versions or ["v1"],
                "resources": resources, "scope": scope}

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    wide = rule(["CREATE", "UPDATE"], ["pods", "pods/*"], ["*"])
    (manifests / "a.yaml").write_text(vap("a.static.k8s.io", rule(["CREATE"], ["pods"]),
                                          rule(["UPDATE"], ["pods/status"], scope="Namespaced")))
    (manifests / "b.yaml").write_text(vap("b.static.k8s.io", wide, rule(["CREATE"], ["services"])))
    (manifests / "c.yaml").write_text(vap("c.static.k8s.io", rule(["UPDATE", "CREATE"], ["pods", "pods/*"], ["*"])))
    assert run_cli("certs", "--out-dir", str(tmp_path / "tls")).code == 0
    result = run_cli("webhook-config", "--manifests", str(manifests), "--url", "https://127.0.0.1:8443",
                     "--ca-file", str(tmp_path / "tls" / "ca.crt"))
    assert result.code == 0, result.stderr
    rules = next(yaml.safe_load_all(result.stdout))["webhooks"][0]["rules"]
    # c's rule is b's first one with its operations in another order: the same rule, kept once.
    assert rules == [wide, rule(["CREATE"], ["services"])]
