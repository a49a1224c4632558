"""What an operator is told: what a reload changed, that a restored directory is current again, that the
files on disk are invalid while the last good configuration serves, what `check` says of an empty
directory, which policies need a cluster view the daemon lacks, and why a TLS handshake was refused."""

from __future__ import annotations

import http.client
import io
import json
import ssl
import time
from pathlib import Path

import pytest

import staticadm
from staticadm.manifests.check import run_check
from tests.pki import make_ca, make_leaf, write_ca
from tests.policy_text import validating_policy_yaml
from tests.server.harness import Daemon, DaemonFactory, policy_yaml, review, wait_for, write_atomically
from tests.server.test_workers import _all_serving


def _reload_lines(log: str) -> list[dict[str, object]]:
    lines = []
    for line in log.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("msg") == "reloaded manifest config":
                lines.append(record)
    return lines


def test_a_reload_logs_what_it_added_changed_and_removed(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--log-format", "json"])
    first = _reload_lines(daemon.log())[-1]
    assert first["added"] == ["ValidatingAdmissionPolicy/deny-label.static.k8s.io",
                              "ValidatingAdmissionPolicyBinding/deny-label.static.k8s.io"]
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("changed message"))
    write_atomically(daemon.manifests / "other.yaml", policy_yaml("other", name="other", label="other"))
    assert wait_for(lambda: len(_reload_lines(daemon.log())) >= 2, timeout=15)
    time.sleep(0.5)
    merged = _reload_lines(daemon.log())[1:]
    added = [name for record in merged for name in record["added"]]  # type: ignore[union-attr]
    changed = [name for record in merged for name in record["changed"]]  # type: ignore[union-attr]
    assert "ValidatingAdmissionPolicy/other.static.k8s.io" in added
    assert changed == ["ValidatingAdmissionPolicy/deny-label.static.k8s.io"]
    (daemon.manifests / "other.yaml").unlink()
    assert wait_for(lambda: any(record["removed"] for record in _reload_lines(daemon.log())), timeout=15)
    removed = next(record["removed"] for record in _reload_lines(daemon.log()) if record["removed"])
    assert removed == ["ValidatingAdmissionPolicy/other.static.k8s.io",
                       "ValidatingAdmissionPolicyBinding/other.static.k8s.io"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_invalid_files_on_disk_show_in_readyz_until_restored(make_daemon: DaemonFactory, workers: str) -> None:
    daemon = make_daemon(args=["--workers", workers])
    good = (daemon.manifests / "deny.yaml").read_text()
    (daemon.manifests / "deny.yaml").write_text("kind: [")

    def noted() -> bool:
        body = daemon.get("/readyz?verbose").body.decode()
        return "note: the manifest directory on disk is invalid (1 error(s)" in body

    # Every worker is told, whichever one answers.
    assert wait_for(lambda: all(noted() for _ in range(6)), timeout=15), daemon.log()
    assert daemon.get("/readyz").status == 200  # still ready: the last good configuration serves
    write_atomically(daemon.manifests / "deny.yaml", good)
    assert wait_for(lambda: not any(noted() for _ in range(6)), timeout=15), daemon.log()
    assert wait_for(lambda: "the served configuration is current" in daemon.log(), timeout=5)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_readyz_gives_the_reason_the_same_way_before_and_after_a_good_load(make_daemon: DaemonFactory,
                                                                           tmp_path: Path, workers: str) -> None:
    """Invalid at start (not ready, nothing served) and invalid after a good load (ready, the last good served):
    the same note says why, only what is served differs."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "deny.yaml").write_text("kind: [")
    daemon = make_daemon(policy=None, manifests=manifests, start=False, args=["--workers", workers])
    daemon.start(wait=False)
    reason = "note: the manifest directory on disk is invalid (1 error(s) since "

    def verbose() -> str:
        return daemon.get("/readyz?verbose").body.decode() if daemon.status("/readyz") is not None else ""

    assert wait_for(lambda: all(reason in verbose() for _ in range(4)), timeout=30), (verbose(), daemon.log())
    at_start = verbose()
    assert daemon.status("/readyz") == 503
    assert "[-]manifests-loaded failed" in at_start and "nothing is served yet (admission requests get 503)" in at_start
    write_atomically(manifests / "deny.yaml", policy_yaml("v1"))
    assert wait_for(lambda: daemon.status("/readyz") == 200 and all(reason not in verbose() for _ in range(4)),
                    timeout=30), daemon.log()
    (manifests / "deny.yaml").write_text("kind: [")
    assert wait_for(lambda: all(reason in verbose() for _ in range(4)), timeout=15), daemon.log()
    assert "serving the last good configuration sha256:" in verbose() and daemon.status("/readyz") == 200


def test_check_warns_about_a_directory_with_no_manifests(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("policies go here")
    out = io.StringIO()
    assert run_check([str(tmp_path)], "text", out, io.StringIO()) == 0
    assert "holds no policies or bindings" in out.getvalue() and "every request is allowed" in out.getvalue()


def test_the_start_up_line_names_the_version_and_the_effective_configuration(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--log-format", "json", "--idle-timeout", "33"])
    first = json.loads(daemon.log().splitlines()[0])
    assert first["msg"] == "starting staticadm" and first["version"] == staticadm.__version__
    config = first["config"]
    assert config["manifests"] == str(daemon.manifests) and config["idle-timeout"] == 33.0
    assert config["workers"] == 1 and config["body-timeout"] == 10.0 and config["kubeconfig"] is None


def test_a_rejected_request_is_logged_with_its_uid(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    manifests = tmp_path / "broken"
    manifests.mkdir()
    (manifests / "bad.yaml").write_text("kind: [")
    daemon = make_daemon(policy=None, manifests=manifests, start=False, args=["--log-format", "json"])
    daemon.start(wait=False)
    assert wait_for(lambda: "loading manifest config failed" in daemon.log(), timeout=15)
    response = daemon.validate(review(uid="7f0c-rejected"))
    assert response.status == 503
    rejected = [json.loads(line) for line in daemon.log().splitlines()
                if line.startswith("{") and json.loads(line).get("msg") == "rejected admission request"]
    assert rejected and rejected[-1]["uid"] == "7f0c-rejected" and rejected[-1]["code"] == 503


# -- what only the cluster view can answer, on a daemon without one -----------------------------------

_NAMESPACE_OBJECT_POLICY = validating_policy_yaml("needs-namespace", operations='["CREATE"]', validations="""\
  - expression: "namespaceObject.metadata.name != 'forbidden'"
    message: "not in that namespace"
""")
_AUTHORIZER_POLICY = validating_policy_yaml("needs-authorizer", operations='["CREATE"]', validations="""\
  - expression: "authorizer.group('').resource('pods').check('create').allowed()"
    message: "not allowed"
""")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_policies_needing_the_cluster_view_are_reported_at_load_and_reload(make_daemon: DaemonFactory,
                                                                          workers: str) -> None:
    daemon = make_daemon(args=["--log-format", "json", "--workers", workers])
    # Ready means one worker has loaded; another may still be loading (its /readyz answers 503 until then),
    # and the reload below is served within milliseconds now, so wait for all before asking /readyz.
    assert wait_for(lambda: workers == "1" or _all_serving(daemon, int(workers)) is not None, timeout=30)
    assert daemon.metric("staticadm_policies_missing_cluster_view", {"reads": "namespaceObject"}) == 0
    # Dropped into the live directory: the reload is good, /readyz passes, and every matching request
    # would be decided by the failurePolicy. The operator is told, naming the policy and its binding.
    write_atomically(daemon.manifests / "ns.yaml", _NAMESPACE_OBJECT_POLICY)
    write_atomically(daemon.manifests / "authz.yaml", _AUTHORIZER_POLICY)

    def warnings() -> list[dict[str, object]]:
        return [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")
                and json.loads(line).get("msg", "").startswith("policy reads the cluster view")]

    assert wait_for(lambda: {w["policy"] for w in warnings()} == {"needs-namespace.static.k8s.io",
                                                                  "needs-authorizer.static.k8s.io"}, timeout=15), \
        daemon.log()
    namespace_warning = next(w for w in warnings() if w["policy"] == "needs-namespace.static.k8s.io")
    assert namespace_warning["bindings"] == ["needs-namespace.static.k8s.io"]
    assert namespace_warning["reads"] == ["namespaceObject"]
    assert daemon.get("/readyz").status == 200

    def noted() -> bool:
        body = daemon.get("/readyz?verbose").body.decode()
        return ("note: missing-cluster-view: ValidatingAdmissionPolicy " in body
                and "ValidatingAdmissionPolicy needs-namespace.static.k8s.io (bound by needs-namespace.static.k8s.io) "
                    "reads namespaceObject" in body
                and "needs-authorizer.static.k8s.io) reads authorizer" in body)

    assert wait_for(lambda: all(noted() for _ in range(6)), timeout=15), daemon.get("/readyz?verbose").body
    assert daemon.metric("staticadm_policies_missing_cluster_view", {"reads": "namespaceObject"}) == 1
    assert daemon.metric("staticadm_policies_missing_cluster_view", {"reads": "authorizer"}) == 1
    # Removed again: the note and the gauge clear.
    (daemon.manifests / "ns.yaml").unlink()
    (daemon.manifests / "authz.yaml").unlink()
    assert wait_for(lambda: "missing-cluster-view" not in daemon.get("/readyz?verbose").body.decode(), timeout=15)
    assert wait_for(lambda: daemon.metric("staticadm_policies_missing_cluster_view",
                                          {"reads": "namespaceObject"}) == 0, timeout=15)


def test_a_namespaces_file_answers_namespace_object_but_not_authorizer(make_daemon: DaemonFactory,
                                                                      tmp_path: Path) -> None:
    namespaces = tmp_path / "namespaces.yaml"
    namespaces.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n")
    manifests = tmp_path / "cluster-reads"
    manifests.mkdir()
    (manifests / "ns.yaml").write_text(_NAMESPACE_OBJECT_POLICY)
    (manifests / "authz.yaml").write_text(_AUTHORIZER_POLICY)
    daemon = make_daemon(policy=None, manifests=manifests, args=["--log-format", "json", "--namespaces",
                                                                  str(namespaces)])
    body = daemon.get("/readyz?verbose").body.decode()
    assert "needs-authorizer.static.k8s.io) reads authorizer" in body
    assert "needs-namespace" not in body


# -- refused TLS handshakes -------------------------------------------------------------------------------


@pytest.mark.slow
def test_refused_tls_handshakes_are_logged_with_the_reason_and_rate_limited(make_daemon: DaemonFactory,
                                                                          tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    clients = make_ca("clients")
    daemon = make_daemon(args=["--log-format", "json", "--client-ca", str(write_ca(clients, pki / "ca.crt"))])
    # No client certificate, three times: the client is told why (the TLS alert), the log says it once.
    for _ in range(3):
        assert "CERTIFICATE_REQUIRED" in _refused_handshake(daemon, None)
    # A certificate from another CA.
    stranger = make_leaf(make_ca("stranger"), server=False, directory=pki, stem="stranger")
    assert _refused_handshake(daemon, stranger)

    def refusals() -> list[dict[str, object]]:
        return [json.loads(line) for line in daemon.log().splitlines()
                if line.startswith("{") and json.loads(line).get("msg") == "refused a TLS handshake"]

    assert wait_for(lambda: len(refusals()) == 2, timeout=5), daemon.log()
    no_certificate, wrong_ca = refusals()
    assert no_certificate["reason"] == "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    assert "client-ca requires one" in str(no_certificate["hint"])
    assert wrong_ca["reason"] == "CERTIFICATE_VERIFY_FAILED"
    assert daemon.metric("staticadm_tls_handshake_failures_total",
                         {"reason": "PEER_DID_NOT_RETURN_A_CERTIFICATE"}) == 3
    # The next one after the interval says how many were not logged.
    time.sleep(10.5)
    assert _refused_handshake(daemon, None)
    assert wait_for(lambda: len(refusals()) == 3, timeout=5), daemon.log()
    assert refusals()[-1]["not_logged_since_last"] == 2


def _refused_handshake(daemon: Daemon, client_cert: tuple[Path, Path] | None) -> str:
    """The reason a GET /readyz over HTTPS fails with this client certificate (the TLS alert's name)."""
    context = ssl.create_default_context(cafile=str(daemon.state_dir / "tls" / "ca.crt"))
    if client_cert is not None:
        context.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
    assert daemon.port is not None
    connection = http.client.HTTPSConnection("127.0.0.1", daemon.port, context=context, timeout=10)
    try:
        connection.request("GET", "/readyz")
        connection.getresponse().read()
    except ssl.SSLError as error:
        return str(error.reason)
    finally:
        connection.close()
    raise AssertionError("the handshake was not refused")
