"""Security: socket permissions, TLS versions and ciphers, client certificates, world-writable manifests,
and no Secret data in logs or answers."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import stat
from pathlib import Path

import aiohttp
import pytest

from tests.pki import make_ca, make_leaf, write_ca
from tests.server.harness import (
    RELOADS,
    Daemon,
    DaemonFactory,
    denied_message,
    policy_yaml,
    review,
    wait_for,
    write_atomically,
)

SECRET_VALUE = "hunter2-do-not-log-me"


def test_unix_socket_mode_and_owner(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(https=False, args=["--socket-mode", "0600"])
    assert daemon.socket_path is not None
    info = os.stat(daemon.socket_path)
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid())
    # No other files left next to it (the socket is bound under a temporary name, then renamed).
    assert [p.name for p in daemon.socket_path.parent.iterdir()] == [daemon.socket_path.name]


def _open_doors(daemon: Daemon) -> list[dict[str, object]]:
    return [record for record in map(json.loads, filter(lambda line: line.startswith("{"), daemon.log().splitlines()))
            if record.get("msg") == "open to every local user"]


def test_https_without_a_client_ca_is_said_at_start_and_in_readyz(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    [door] = _open_doors(daemon)
    assert door["level"] == "warning" and door["listener"] == f"https://127.0.0.1:{daemon.port}"
    assert "no --client-ca" in str(door["detail"])
    assert (f"note: open-to-local-users: https://127.0.0.1:{daemon.port} asks no client certificate"
            in daemon.get("/readyz?verbose").body.decode())


@pytest.mark.parametrize("mode", ["0666", "0777", "0662"])
def test_a_socket_mode_that_lets_other_users_connect_is_said(make_daemon: DaemonFactory, tmp_path: Path,
                                                             mode: str) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    daemon = make_daemon(args=["--socket-mode", mode, "--client-ca", str(write_ca(make_ca("clients"),
                                                                                  pki / "ca.crt"))])
    assert daemon.socket_path is not None
    [door] = _open_doors(daemon)
    assert door["listener"] == f"unix:{daemon.socket_path}" and str(door["detail"]).startswith(f"mode {mode}")
    assert f"note: open-to-local-users: unix:{daemon.socket_path} mode {mode}" in \
        daemon.get("/readyz?verbose").body.decode()


def test_no_open_door_is_said_of_the_shipped_modes(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    daemon = make_daemon(args=["--workers", "2", "--client-ca", str(write_ca(make_ca("clients"), pki / "ca.crt"))])
    assert _open_doors(daemon) == []
    assert "open-to-local-users" not in daemon.get("/readyz?verbose").body.decode()


def _handshake(daemon: Daemon, context: ssl.SSLContext) -> tuple[str, str] | None:
    """(protocol, cipher) negotiated with the daemon, or None if the handshake is refused."""
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", daemon.port or 0), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            cipher = tls.cipher()
            assert cipher is not None
            return str(tls.version()), cipher[0]
    except (ssl.SSLError, OSError):
        return None


def _client(minimum: ssl.TLSVersion, maximum: ssl.TLSVersion, ciphers: str | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ciphers is not None:
        context.set_ciphers(ciphers)
    context.minimum_version = minimum
    context.maximum_version = maximum
    return context


def test_tls_versions_and_cipher_suites(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(unix=True)
    tls13 = _handshake(daemon, _client(ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3))
    assert tls13 is not None and tls13[0] == "TLSv1.3"
    tls12 = _handshake(daemon, _client(ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2))
    assert tls12 is not None and tls12[0] == "TLSv1.2"
    for old in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
        assert _handshake(daemon, _client(old, old, "ALL:@SECLEVEL=0")) is None, old
    # Every TLS 1.2 suite the client library knows, one at a time: only ECDHE with AEAD is accepted.
    everything = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    everything.set_ciphers("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    accepted = []
    for suite in {c["name"] for c in everything.get_ciphers() if c["protocol"] == "TLSv1.2"}:
        try:
            client = _client(ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2, f"{suite}:@SECLEVEL=0")
        except ssl.SSLError:
            continue
        if _handshake(daemon, client) is not None:
            accepted.append(suite)
    assert accepted, "no TLS 1.2 suite accepted"
    weak = [s for s in accepted if not s.startswith("ECDHE-") or not ("GCM" in s or "CHACHA20" in s)]
    assert not weak, f"weak TLS 1.2 suites accepted: {weak}"


def test_client_certificate_authentication(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    clients, strangers = make_ca("clients"), make_ca("strangers")
    daemon = make_daemon(args=["--client-ca", str(write_ca(clients, pki / "clients-ca.crt"))])
    good = make_leaf(clients, server=False, directory=pki, stem="good")
    bad = make_leaf(strangers, server=False, directory=pki, stem="bad")
    for presented, allowed in ((None, False), (bad, False), (good, True)):
        daemon.client_cert = presented
        if allowed:
            answer = daemon.validate(review({"deny": "true"}), via="https")
            assert answer.json()["response"]["allowed"] is False
        else:
            with pytest.raises((aiohttp.ClientError, OSError, ssl.SSLError)):
                daemon.validate(review({"deny": "true"}), via="https")


# -- world-writable manifests --------------------------------------------------------------------------


def test_world_writable_directory_is_refused_at_start_until_fixed(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    daemon.manifests.chmod(0o777)
    daemon.start(wait=False)
    assert wait_for(lambda: "loading manifest config failed" in daemon.log(), timeout=30)
    assert daemon.status("/readyz") == 503
    log = daemon.log()
    assert f"manifest directory '{daemon.manifests}' is world-writable (mode 0777)" in log
    assert "--allow-world-writable-manifests" in log
    daemon.manifests.chmod(0o755)
    assert wait_for(lambda: daemon.status("/readyz") == 200, timeout=15)


def test_directory_or_file_becoming_world_writable_keeps_the_last_good(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    for target in (daemon.manifests, daemon.manifests / "deny.yaml"):
        before = daemon.metric(RELOADS, {"status": "failure"})
        target.chmod(0o777 if target.is_dir() else 0o666)
        assert daemon.process is not None
        daemon.process.send_signal(1)  # SIGHUP: a chmod of a file in place is not always an event we act on
        assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before)  # noqa: B023
        assert f"'{target}' is world-writable" in daemon.log()
        # A change written while the path is world-writable is not loaded.
        (daemon.manifests / "deny.yaml").write_text(policy_yaml(f"changed while open {target.name}"))
        daemon.process.send_signal(1)
        assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before + 1)  # noqa: B023
        assert "v1: pods labelled" in (denied_message(daemon) or "")
        target.chmod(0o755 if target.is_dir() else 0o644)
        daemon.process.send_signal(1)
        assert wait_for(lambda: f"changed while open {target.name}" in (denied_message(daemon) or ""))  # noqa: B023
        write_atomically(daemon.manifests / "deny.yaml", policy_yaml("v1: pods labelled deny=true are not allowed"))
        assert wait_for(lambda: "v1: pods labelled" in (denied_message(daemon) or ""))


def test_a_world_writable_manifest_emptied_by_another_user_keeps_its_policies(make_daemon: DaemonFactory) -> None:
    """Once a manifest is world-writable, any local user may empty it. Empty files hold nothing to load, but the
    daemon must still refuse the directory, not serve it without the emptied file's policies."""
    daemon = make_daemon()
    manifest = daemon.manifests / "deny.yaml"
    before = daemon.metric(RELOADS, {"status": "failure"})
    manifest.chmod(0o666)
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before)
    os.truncate(manifest, 0)
    assert daemon.process is not None
    daemon.process.send_signal(1)
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before + 1)
    assert "v1: pods labelled" in (denied_message(daemon) or "")
    assert f"manifest file '{manifest}' is world-writable (mode 0666)" in daemon.log()


def test_a_manifest_linked_where_anyone_may_replace_it_keeps_the_last_good(make_daemon: DaemonFactory,
                                                                           tmp_path: Path) -> None:
    """A manifest replaced by a link to a file in a directory that any local user may write in: whatever is put
    there later, the daemon keeps serving its last good set until the directory is closed to others."""
    daemon = make_daemon()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    target = shared / "deny.yaml"
    target.write_text(policy_yaml("v2: linked"))
    before = daemon.metric(RELOADS, {"status": "failure"})
    link = daemon.manifests / ".deny.yaml.new"
    link.symlink_to(target)
    link.rename(daemon.manifests / "deny.yaml")
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before)
    assert f"resolves through '{shared}' (mode 0777: others may write it)" in daemon.log()
    # Another user puts a policy that allows everything in its place.
    planted = shared / ".planted"
    planted.write_text(policy_yaml("planted", label="never-set"))
    planted.rename(target)
    assert daemon.process is not None
    daemon.process.send_signal(1)
    assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before + 1)
    assert "v1: pods labelled" in (denied_message(daemon) or "")
    shared.chmod(0o755)
    write_atomically(target, policy_yaml("v2: linked"))
    daemon.process.send_signal(1)
    assert wait_for(lambda: "v2: linked" in (denied_message(daemon) or ""))


def test_a_chmod_is_seen_without_a_signal_or_the_poll(make_daemon: DaemonFactory) -> None:
    """The harness polls once an hour: a chmod of the directory or of a manifest (inotify IN_ATTRIB) alone must
    refuse the world-writable path, and the chmod back must serve again, within seconds."""
    daemon = make_daemon()
    for target, opened, closed in ((daemon.manifests, 0o777, 0o755), (daemon.manifests / "deny.yaml", 0o666, 0o644)):
        before = daemon.metric(RELOADS, {"status": "failure"})
        target.chmod(opened)
        assert wait_for(lambda: daemon.metric(RELOADS, {"status": "failure"}) > before), target  # noqa: B023
        assert f"'{target}' is world-writable" in daemon.log()
        assert "note: the manifest directory on disk is invalid" in daemon.get("/readyz?verbose").body.decode()
        target.chmod(closed)
        # The same content as served: nothing to swap in, and the directory on disk is fine again.
        assert wait_for(lambda: "note: the manifest directory on disk is invalid"
                        not in daemon.get("/readyz?verbose").body.decode()), target


def test_world_writable_allowed_explicitly(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False, args=["--allow-world-writable-manifests"])
    daemon.manifests.chmod(0o777)
    daemon.start()
    assert "v1: pods labelled" in (denied_message(daemon) or "")
    assert "directory is world-writable" in daemon.log()  # still a warning


# -- no secrets in logs or answers ---------------------------------------------------------------------


def _secret_review(uid: str, operation: str = "CREATE") -> dict[str, object]:
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "db", "namespace": "default", "labels": {"deny": "true"},
                           "annotations": {"kubectl.kubernetes.io/last-applied-configuration": SECRET_VALUE}},
              "data": {"password": encoded}, "stringData": {"password": SECRET_VALUE}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Secret"},
                        "resource": {"group": "", "version": "v1", "resource": "secrets"},
                        "operation": operation, "name": "db", "namespace": "default",
                        "userInfo": {"username": "alice"}, "object": secret,
                        "oldObject": secret if operation == "UPDATE" else None}}


SECRET_POLICY = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: secrets.static.k8s.io
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["secrets"]
  validations:
  - expression: "!has(object.data) || !('password' in object.data)"
    message: "secrets may not carry a password"
  - expression: "object.data.password.size() < 0"
  - expression: "object.stringData.password == 1"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: secrets.static.k8s.io
spec:
  policyName: secrets.static.k8s.io
  validationActions: [Deny, Audit]
"""


@pytest.mark.parametrize("level", ["info", "debug"])
def test_secret_data_never_reaches_logs_or_error_answers(make_daemon: DaemonFactory, level: str) -> None:
    daemon = make_daemon(start=False, args=["--log-level", level])
    (daemon.manifests / "secrets.yaml").write_text(SECRET_POLICY)
    daemon.start()
    encoded = base64.b64encode(SECRET_VALUE.encode())
    for operation in ("CREATE", "UPDATE"):
        answer = daemon.validate(_secret_review(f"s-{operation}", operation))
        assert answer.status == 200 and answer.json()["response"]["allowed"] is False
        assert SECRET_VALUE.encode() not in answer.body and encoded not in answer.body
    # A broken review carrying the Secret: answered 400 without echoing anything of it.
    broken = _secret_review("s-broken")
    broken["request"]["dryRun"] = "yes"  # type: ignore[index]
    answer = daemon.validate(broken)
    assert answer.status == 400 and SECRET_VALUE.encode() not in answer.body
    answer = daemon.request("POST", "/validate", body=b'{"apiVersion": "' + SECRET_VALUE.encode(),
                            headers={"Content-Type": "application/json"})
    assert answer.status == 400 and SECRET_VALUE.encode() not in answer.body
    log = daemon.log()
    assert "secrets.static.k8s.io" in log  # the decisions were logged...
    assert SECRET_VALUE not in log and encoded.decode() not in log  # ...without the Secret


def test_bad_enum_values_are_not_echoed(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    for field in ("apiVersion", "kind", "operation"):
        document = _secret_review(f"s-{field}")
        if field == "operation":
            document["request"]["operation"] = SECRET_VALUE  # type: ignore[index]
        else:
            document[field] = SECRET_VALUE
        answer = daemon.validate(document)
        assert answer.status == 400
        assert SECRET_VALUE.encode() not in answer.body, field
    assert SECRET_VALUE not in daemon.log()
