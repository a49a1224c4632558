"""``staticadm serve`` end to end: a real process, real sockets, real TLS, real file-system events."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import sys
import textwrap
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from staticadm.admission.response import webhook_audit_key
from staticadm.deploy.webhooks import VALIDATING_WEBHOOK
from tests.kube_audit import recorded_key_problems
from tests.pki import make_ca, make_leaf, write_ca
from tests.server import forked
from tests.server.harness import (
    RELOADS,
    Daemon,
    DaemonFactory,
    body_of,
    denied_message,
    free_port,
    policy_yaml,
    raw_http,
    read_to_close,
    review,
    status_of,
    wait_for,
    write_atomically,
)

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs unix sockets")

# -- serving -----------------------------------------------------------------------------------------


def test_both_listeners_answer_reviews_in_the_request_version(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    for via in ("unix", "https"):
        denied = daemon.validate(review({"deny": "true"}, uid="a"), via=via).json()
        assert denied["apiVersion"] == "admission.k8s.io/v1"
        assert denied["response"]["uid"] == "a"
        assert denied["response"]["allowed"] is False
        assert "v1: pods labelled deny=true" in denied["response"]["status"]["message"]
        allowed = daemon.validate(review({"deny": "false"}, uid="b"), via=via).json()
        assert allowed["response"] == {"uid": "b", "allowed": True}
        beta = daemon.validate(review({"deny": "true"}, api_version="admission.k8s.io/v1beta1"), via=via).json()
        assert beta["apiVersion"] == "admission.k8s.io/v1beta1"
        assert beta["response"]["allowed"] is False
        # No mutating policy is loaded: /mutate allows unchanged, never with a patch.
        mutated = daemon.validate(review({"deny": "true"}, uid="m"), via=via, path="/mutate").json()
        assert mutated["response"] == {"uid": "m", "allowed": True}
    assert daemon.request("POST", "/validate?timeout=10s", json=review()).status == 200
    assert oct(os.stat(daemon.socket_path).st_mode & 0o777) == oct(0o660)  # type: ignore[arg-type]


def test_health_endpoints_and_verbose_checks(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    for path in ("/livez", "/readyz", "/healthz"):
        assert daemon.get(path).status == 200
        assert daemon.get(path, via="https").body == b"ok"
    verbose = daemon.get("/readyz?verbose").body.decode()
    assert "[+]manifests-loaded ok" in verbose
    assert "readyz check passed" in verbose


def test_invalid_directory_at_startup_is_not_ready_until_fixed(make_daemon: DaemonFactory) -> None:
    # kube-apiserver refuses to start on an invalid directory; a sidecar that exited would just be
    # restarted in a loop, so it stays up, says why, answers 503 and picks up the fix by itself.
    daemon = make_daemon(policy=None, start=False)
    (daemon.manifests / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    (daemon.manifests / "b.yaml").write_text(policy_yaml("x").replace(".static.k8s.io", ""))
    daemon.start(wait=False)
    assert wait_for(lambda: "loading manifest config failed" in daemon.log(), timeout=30)
    assert daemon.get("/readyz").status == 503
    assert "[-]manifests-loaded failed" in daemon.get("/readyz?verbose").body.decode()
    assert daemon.get("/livez").status == 200
    answer = daemon.validate(review({"deny": "true"}))
    assert answer.status == 503 and answer.json()["reason"] == "ServiceUnavailable"
    log = daemon.log()
    assert "a.yaml" in log and "b.yaml" in log and "not ready" in log
    assert daemon.metric(RELOADS, {"status": "failure"}) >= 1
    os.unlink(daemon.manifests / "a.yaml")
    write_atomically(daemon.manifests / "b.yaml", policy_yaml("fixed"))
    assert wait_for(lambda: daemon.get("/readyz").status == 200)
    assert "fixed" in (denied_message(daemon) or "")


def test_empty_directory_is_valid_with_a_warning(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(policy=None)
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is True
    assert "no manifests" in daemon.log()


_AUDITED_POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: audited.static.k8s.io}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  validations: [{expression: "false", message: "recorded only"}]
  auditAnnotations:
  - {key: pod-name, valueExpression: "string(object.metadata.name)"}
  - {key: %s, valueExpression: "'long'"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: audited.static.k8s.io}
spec: {policyName: audited.static.k8s.io, validationActions: [Audit]}
""" % ("K" * 63)


def test_audit_annotations_are_answered_under_keys_kube_apiserver_keeps(make_daemon: DaemonFactory) -> None:
    # kube-apiserver records each key as "<webhook name>/<key>" and drops every one that then fails
    # checkKeyFormat: the daemon's keys must pass it (the in-process keys have a "/" of their own).
    daemon = make_daemon(policy=None)
    write_atomically(daemon.manifests / "audited.yaml", _AUDITED_POLICY)
    assert wait_for(lambda: "auditAnnotations" in daemon.validate(review()).json()["response"])
    for via in ("unix", "https"):
        annotations = daemon.validate(review(name="db"), via=via).json()["response"]["auditAnnotations"]
        long_key = webhook_audit_key(f"audited.static.k8s.io/{'K' * 63}")
        assert {key: recorded_key_problems(VALIDATING_WEBHOOK, key) for key in annotations} == {
            "audited_pod-name": [], "validation-failure": [], long_key: []}
        assert annotations["audited_pod-name"] == "db"
        assert orjson.loads(annotations["validation-failure"])[0]["message"] == "recorded only"


# -- reload ------------------------------------------------------------------------------------------


def test_rename_into_directory_is_served_through_both_listeners(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("v2: reloaded"))
    assert wait_for(lambda: "v2: reloaded" in (denied_message(daemon) or ""))
    assert "v2: reloaded" in (denied_message(daemon, "https") or "")
    assert daemon.metric(RELOADS, {"status": "success"}) == 2  # startup and the rename


def test_invalid_reload_keeps_the_last_good_snapshot_and_recovers(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    write_atomically(daemon.manifests / "broken.yaml", "apiVersion: admissionregistration.k8s.io/v1\nkind: Nope\n")
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) >= 1)
    assert "v1: pods labelled" in (denied_message(daemon) or "")
    assert "broken.yaml" in daemon.log()
    assert daemon.get("/readyz").status == 200
    os.unlink(daemon.manifests / "broken.yaml")
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("v3: recovered"))
    assert wait_for(lambda: "v3: recovered" in (denied_message(daemon) or ""))


def test_directory_removed_and_recreated(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = make_daemon()
    # Moved away whole, then deleted: rmtree in place first empties the directory, and a reload that lands
    # between its unlink and its rmdir rightly serves the empty directory (no policies) before the removal fails.
    removed = tmp_path / "removed"
    os.rename(daemon.manifests, removed)
    shutil.rmtree(removed)
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) >= 1)
    assert "v1: pods labelled" in (denied_message(daemon) or "")
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "deny.yaml").write_text(policy_yaml("v4: new directory"))
    os.rename(staging, daemon.manifests)
    assert wait_for(lambda: "v4: new directory" in (denied_message(daemon) or ""))
    # The new directory is watched too.
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("v5: watched again"))
    assert wait_for(lambda: "v5: watched again" in (denied_message(daemon) or ""))


def test_configmap_style_data_symlink_swap(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(policy=None, start=False)
    first = daemon.manifests / "..2024_01"
    first.mkdir()
    (first / "deny.yaml").write_text(policy_yaml("cm: first"))
    os.symlink("..2024_01", daemon.manifests / "..data")
    os.symlink("..data/deny.yaml", daemon.manifests / "deny.yaml")
    daemon.start()
    assert "cm: first" in (denied_message(daemon) or "")
    second = daemon.manifests / "..2024_02"
    second.mkdir()
    (second / "deny.yaml").write_text(policy_yaml("cm: second"))
    os.symlink("..2024_02", daemon.manifests / "..data_tmp")
    os.replace(daemon.manifests / "..data_tmp", daemon.manifests / "..data")
    assert wait_for(lambda: "cm: second" in (denied_message(daemon) or ""))


def test_file_written_in_two_steps_never_yields_a_mixed_snapshot(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    text = policy_yaml("v6: complete")
    seen: set[str | None] = set()
    with (daemon.manifests / "deny.yaml").open("w") as handle:
        handle.write(text[: len(text) // 2])
        handle.flush()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            seen.add(denied_message(daemon))
        handle.write(text[len(text) // 2:])
    assert wait_for(lambda: "v6: complete" in (denied_message(daemon) or ""))
    seen.add(denied_message(daemon))
    # Only ever the old complete policy or the new complete one: the half-written file was refused.
    assert seen <= {denied_message_for("v1: pods labelled deny=true are not allowed"),
                    denied_message_for("v6: complete")}, seen


def denied_message_for(message: str) -> str:
    name = "deny-label.static.k8s.io"
    return f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: {message}"


def test_sighup_reloads(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=[])
    # Bypass the watcher: write in place, then ask explicitly.
    (daemon.manifests / "deny.yaml").write_text(policy_yaml("v7: sighup"))
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "v7: sighup" in (denied_message(daemon) or ""))


# -- bad requests ------------------------------------------------------------------------------------

SECRET = "s3cr3t-value-that-must-not-be-echoed"


def test_bad_requests_get_4xx_json_without_echo(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("body-timeout: 1\n")
    daemon = make_daemon(args=["--config", str(config)])
    json_headers = {"Content-Type": "application/json"}
    good = review({"secret": SECRET})
    cases: list[tuple[str, int, dict[str, object]]] = [
        ("GET", 405, {}),
        ("POST", 415, {"body": orjson.dumps(good), "headers": {"Content-Type": "text/plain"}}),
        ("POST", 400, {"body": b'{"apiVersion": "' + SECRET.encode() + b'", ', "headers": json_headers}),
        ("POST", 400, {"json": {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}}),
        ("POST", 400, {"json": {**good, "request": {**good["request"], "uid": None}}}),
        ("POST", 400, {"json": {**good, "request": {**good["request"], "operation": 7}}}),
        ("POST", 400, {"json": {**good, "request": SECRET}}),
        ("POST", 400, {"json": [SECRET]}),
        ("POST", 400, {"json": {**good, "apiVersion": "admission.k8s.io/v2"}}),
        ("POST", 413, {"body": b"{" + b" " * (4 * 1024 * 1024) + b"}", "headers": json_headers}),
        ("POST", 400, {"json": good, "path": "/validate?timeout=soon"}),
    ]
    for method, code, options in cases:
        path = str(options.pop("path", "/validate"))
        answer = daemon.request(method, path, **options)  # type: ignore[arg-type]
        assert answer.status == code, (method, code, options, answer.body)
        assert answer.headers["Content-Type"].startswith("application/json")
        status = answer.json()
        assert status["kind"] == "Status" and status["code"] == code and status["message"]
        assert SECRET.encode() not in answer.body
    assert daemon.get("/nope").status == 404
    # A slow body: headers now, the body never finishes within the body timeout.
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    slow = raw_http(daemon.socket_path, [head, b'{"a":'], pause=0.1)  # type: ignore[arg-type]
    assert status_of(slow) == 408, slow
    # A truncated body: the client gives up (half-closes) before the declared length.
    truncated = raw_http(daemon.socket_path, [head, b'{"a": "' + SECRET.encode()], shutdown_write=True)  # type: ignore[arg-type]
    assert truncated == b"" or 400 <= status_of(truncated) < 500, truncated
    assert SECRET.encode() not in truncated
    assert daemon.metric("staticadm_admission_requests_total", {"code": "500"}) == 0
    assert daemon.get("/livez").status == 200


def _answer_then_end(socket_path: Path, payload: bytes) -> tuple[bytes, bool]:
    """The bytes the daemon answers ``payload`` with, and whether it then closed the connection (within 5 s)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        sock.connect(str(socket_path))
        return read_to_close(sock, payload)


def _one_answer(sock: socket.socket) -> bytes:
    """One whole answer (its head and Content-Length bytes of body) read from ``sock``; fails if it closes first."""
    received = b""
    while True:
        head, separator, body = received.partition(b"\r\n\r\n")
        if separator:
            lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")]
            if lengths and len(body) >= int(lengths[0]):
                return received
        chunk = sock.recv(65536)
        assert chunk, f"the connection was closed after {received!r}"
        received += chunk


def test_a_connection_whose_body_was_not_read_whole_is_closed_after_the_answer(make_daemon: DaemonFactory,
                                                                               tmp_path: Path) -> None:
    """As Go's server does: what follows an unread body on the connection is no request, and a connection left
    waiting for the rest of one held the daemon's shutdown for its whole grace period."""
    config = tmp_path / "config.yaml"
    config.write_text("body-timeout: 1\n")
    daemon = make_daemon(args=["--config", str(config)])
    head = "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n"
    for payload, code in ((head.format(100).encode() + b'{"a":', 408),
                          (head.format(64 * 1024 * 1024).encode() + b"{", 413)):
        answer, closed = _answer_then_end(daemon.socket_path, payload)  # type: ignore[arg-type]
        assert status_of(answer) == code, answer
        assert closed, f"the connection stayed open after the {code}"
    # A request the daemon read whole keeps its connection: the next request on it is answered too (where waiting
    # for the connection to stay open through a socket timeout spent 5 s on each run).
    body = orjson.dumps(review({"metadata": {"name": "kept"}}))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        sock.connect(str(daemon.socket_path))
        for _ in range(2):
            sock.sendall(head.format(len(body)).encode() + body)
            answer = _one_answer(sock)
            assert status_of(answer) == 200, answer
            assert b"connection: close" not in answer.partition(b"\r\n\r\n")[0].lower(), answer
    assert daemon.stop() == 0
    assert "requests still running" not in daemon.log()


# -- TLS ---------------------------------------------------------------------------------------------


def test_generated_ca_is_reused_across_restarts(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    ca = (daemon.state_dir / "tls" / "ca.crt").read_bytes()
    assert "caBundle" in daemon.log() and str(daemon.state_dir / "tls" / "ca.crt") in daemon.log()
    assert daemon.stop() == 0
    daemon.start()
    assert (daemon.state_dir / "tls" / "ca.crt").read_bytes() == ca
    assert daemon.get("/readyz", via="https").status == 200
    assert oct((daemon.state_dir / "tls" / "serving.key").stat().st_mode & 0o777) == oct(0o600)


def test_tls_rotation_is_picked_up_without_restart(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    first_ca, second_ca = make_ca("first"), make_ca("second")
    cert, key = make_leaf(first_ca, server=True, directory=pki, stem="serving")
    daemon = make_daemon(args=["--tls-cert", str(cert), "--tls-key", str(key)], start=False)
    daemon.ca_file = write_ca(first_ca, pki / "first-ca.crt")
    daemon.start()
    assert daemon.get("/readyz", via="https").status == 200
    # Rotate: new pair from another CA, each file replaced atomically (as a Secret volume would).
    new_cert, new_key = make_leaf(second_ca, server=True, directory=pki, stem="next")
    os.replace(new_key, key)
    os.replace(new_cert, cert)
    second = ssl.create_default_context(cafile=str(write_ca(second_ca, pki / "second-ca.crt")))

    def serves_new_certificate() -> bool:
        try:
            return daemon.request("GET", "/readyz", via="https", ssl_context=second).status == 200
        except (aiohttp.ClientError, OSError):
            return False

    assert wait_for(serves_new_certificate, timeout=15)
    assert "reloaded TLS serving certificate" in daemon.log()


def test_client_certificates_required_with_client_ca(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    clients = make_ca("clients")
    client_ca = write_ca(clients, pki / "clients-ca.crt")
    daemon = make_daemon(args=["--client-ca", str(client_ca)], start=False)
    daemon.start()  # readiness is checked over the unix socket, which has no TLS
    with pytest.raises((aiohttp.ClientError, OSError)):
        daemon.get("/readyz", via="https")
    daemon.client_cert = make_leaf(clients, server=False, directory=pki, stem="client")
    assert daemon.get("/readyz", via="https").status == 200
    answer = daemon.validate(review({"deny": "true"}), via="https")
    assert answer.json()["response"]["allowed"] is False
    # TLS 1.1 is refused.
    old = daemon.ssl_context()
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((aiohttp.ClientError, OSError, ssl.SSLError)):
        daemon.request("GET", "/readyz", via="https", ssl_context=old)


# -- lifecycle ---------------------------------------------------------------------------------------


def test_sigterm_finishes_the_request_in_flight(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    body = orjson.dumps(review({"deny": "true"}, uid="in-flight"))
    head = (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    assert daemon.socket_path is not None and daemon.process is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(15)
        sock.connect(str(daemon.socket_path))
        sock.sendall(head + body[:10])
        time.sleep(0.3)  # let the daemon start handling it
        daemon.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        # New connections are refused while the in-flight request completes.
        with pytest.raises(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
            other.connect(str(daemon.socket_path))
        sock.sendall(body[10:])
        answer = b""
        while b"in-flight" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert status_of(answer) == 200, answer
    assert orjson.loads(body_of(answer))["response"]["uid"] == "in-flight"
    assert daemon.process.wait(timeout=20) == 0
    assert not daemon.socket_path.exists()


def test_readiness_and_systemd_notifications(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(30)
    try:
        daemon = make_daemon(start=False, env={"NOTIFY_SOCKET": str(notify_path)})
        daemon.start(wait=False)
        ready = notify.recv(4096).decode()
        # READY=1 is sent only once the first snapshot is being served, and says which.
        assert "READY=1" in ready and "STATUS=serving hash=sha256:" in ready and "policies=1" in ready
        daemon.wait_ready()
        assert daemon.get("/readyz").status == 200
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGHUP)
        assert "RELOADING=1" in notify.recv(4096).decode()
        assert "READY=1" in notify.recv(4096).decode()
        daemon.process.send_signal(signal.SIGTERM)
        assert "STOPPING=1" in notify.recv(4096).decode()
        assert daemon.process.wait(timeout=20) == 0
    finally:
        notify.close()


def test_metrics_after_known_traffic(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    builds = "staticadm_deferred_program_builds_total"
    assert daemon.metric(builds, {"result": "built"}) == 0
    # The first request finds its policies' programs missing: decided without them, they are built on the builder
    # thread (admission/generic/deferred.py); the requests after that build use them.
    daemon.validate(review({"deny": "true"}))
    assert wait_for(lambda: daemon.metric("staticadm_deferred_program_builds_pending") == 0
                    and daemon.metric(builds, {"result": "built"}) >= 1)
    assert daemon.metric(builds, {"result": "failed"}) == 0
    for _ in range(2):
        daemon.validate(review({"deny": "true"}))
    for _ in range(2):
        daemon.validate(review({"deny": "no"}), via="https")
    daemon.request("GET", "/validate")
    requests = "staticadm_admission_requests_total"
    assert daemon.metric(requests, {"endpoint": "validate", "code": "200", "decision": "deny"}) == 3
    assert daemon.metric(requests, {"endpoint": "validate", "code": "200", "decision": "allow"}) == 2
    assert daemon.metric(requests, {"endpoint": "validate", "code": "405", "decision": "error"}) == 1
    assert daemon.metric("staticadm_admission_request_duration_seconds_count", {"endpoint": "validate"}) == 6
    checks = {"policy": "deny-label.static.k8s.io", "policy_binding": "deny-label.static.k8s.io"}
    assert daemon.metric("staticadm_validating_admission_policy_check_total",
                         {**checks, "enforcement_action": "deny"}) == 3
    # As kube-apiserver: a validation that passed is no check of its own (an admit is counted only when
    # its evaluation errored under failurePolicy Ignore).
    assert daemon.metric("staticadm_validating_admission_policy_check_total",
                         {**checks, "enforcement_action": "allow"}) == 0
    assert daemon.metric(RELOADS, {"status": "success"}) == 1
    assert daemon.metric(RELOADS, {"status": "failure"}) == 0
    # The second allowed request has the first one's input: answered from its kept answer. Denials are never kept.
    # The first request, decided while the programs were missing, looked nothing up.
    assert daemon.metric("staticadm_validating_kept_answers_total", {"result": "found"}) == 1
    assert daemon.metric("staticadm_validating_kept_answers_total", {"result": "not_found"}) == 3
    text = daemon.get("/metrics").body.decode()
    assert 'staticadm_manifest_admission_config_controller_last_config_info{hash="sha256:' in text
    assert 'le="0.0001"' in text  # sub-millisecond buckets


LAUNCHER = textwrap.dedent("""
    import os, socket, sys
    unix_path, port = sys.argv[1], int(sys.argv[2])
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(unix_path)
    unix.listen(16)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", port))
    tcp.listen(16)
    for target, sock in ((3, unix), (4, tcp)):
        os.dup2(sock.fileno(), target)
        os.set_inheritable(target, True)
    os.environ["LISTEN_FDS"] = "2"
    os.environ["LISTEN_PID"] = str(os.getpid())  # exec keeps the pid
    os.execv(sys.executable, [sys.executable, *sys.argv[3:]])
""")


def test_socket_activation(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    activated = tmp_path / "activated.sock"
    port = free_port()
    daemon = make_daemon(start=False)
    # The configured socket and port must stay unused: the activated ones replace them.
    daemon.launcher = [sys.executable, str(launcher), str(activated), str(port)]
    configured_socket = daemon.socket_path
    daemon.socket_path = activated
    configured_port, daemon.port = daemon.port, port
    original_command = daemon.command

    def command() -> list[str]:
        parts = original_command()
        parts[parts.index("--socket") + 1] = str(configured_socket)
        parts[parts.index("--listen") + 1] = f"127.0.0.1:{configured_port}"
        return parts[:len(daemon.launcher or [])] + parts[len(daemon.launcher or []) + 1:]

    daemon.command = command  # type: ignore[method-assign]
    daemon.start()
    assert daemon.validate(review({"deny": "true"})).json()["response"]["allowed"] is False
    assert daemon.validate(review({"deny": "true"}), via="https").json()["response"]["allowed"] is False
    assert configured_socket is not None and not configured_socket.exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", configured_port), timeout=2):
        pass


def test_stale_socket_is_replaced_and_live_one_is_not(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = make_daemon(start=False)
    assert daemon.socket_path is not None
    daemon.socket_path.parent.mkdir(parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(daemon.socket_path))
    stale.close()  # leaves the file behind with nobody listening
    daemon.start()
    assert daemon.get("/livez").status == 200
    second = Daemon(workdir=tmp_path, manifests=daemon.manifests, socket_path=daemon.socket_path, port=None,
                    state_dir=tmp_path / "state2")
    second.start(wait=False)
    assert second.process is not None
    assert second.process.wait(timeout=30) == 1
    assert "another process is listening" in second.log()
    assert daemon.get("/livez").status == 200


def test_serve_help_lists_every_option_with_its_default() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    completed = forked.run([sys.executable, "-m", "staticadm", "serve", "--help"], env=env)
    assert completed.returncode == 0, completed.stderr
    output = completed.stdout
    for option in ("--manifests", "--socket", "--socket-mode", "--listen", "--tls-cert", "--tls-key", "--client-ca",
                   "--namespaces", "--config", "--state-dir", "--poll-interval", "--log-format", "--log-level"):
        assert option in output
    assert output.count("default") >= 13
