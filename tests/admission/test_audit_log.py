"""``--audit-log``: kube-apiserver audit events (JSON lines, as its log backend writes them at Request and
RequestResponse level) become the AdmissionReviews kube-apiserver sent; what an event cannot give is
counted, never guessed."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from staticadm.cli import main
from tests.server.harness import REPO_ROOT

EXAMPLES = REPO_ROOT / "manifests" / "examples"
ADMIN = {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"],
         "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=4b1c"]}}


def event(audit_id: str, verb: str, ref: dict[str, Any], *, level: str = "RequestResponse",
          stage: str = "ResponseComplete", code: int = 200, uri: str = "", request_object: Any = None,
          response_object: Any = None, user: dict[str, Any] | None = None,
          received: str = "2026-05-01T10:00:00.000000Z", **extra: Any) -> dict[str, Any]:
    """An audit.k8s.io/v1 Event as kube-apiserver's log backend writes it (fields in its order)."""
    value: dict[str, Any] = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": level, "auditID": audit_id, "stage": stage,
        "requestURI": uri or f"/api/v1/namespaces/{ref.get('namespace', '')}/{ref['resource']}",
        "verb": verb, "user": user or ADMIN, "sourceIPs": ["172.18.0.1"],
        "userAgent": "kubectl/v1.36.0 (linux/amd64) kubernetes/0000000", "objectRef": ref,
    }
    if stage != "RequestReceived":
        value["responseStatus"] = {"metadata": {}, "code": code}
    if level in ("Request", "RequestResponse") and request_object is not None:
        value["requestObject"] = request_object
    if level == "RequestResponse" and response_object is not None and stage != "RequestReceived":
        value["responseObject"] = response_object
    value["requestReceivedTimestamp"] = received
    value["stageTimestamp"] = received.replace("00.000000Z", "00.041200Z")
    value["annotations"] = {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""}
    value.update(extra)
    return value


def pod(name: str, *, privileged: bool = False, namespace: str = "shop") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "nginx:1.27",
                                 "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [container]}}


def pod_ref(name: str, namespace: str = "shop", **extra: str) -> dict[str, Any]:
    return {"resource": "pods", "namespace": namespace, "name": name, "apiVersion": "v1", **extra}


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as kube-apiserver answers with it: uid, resourceVersion and defaults added."""
    out = json.loads(json.dumps(obj))
    out["metadata"].update(uid="0a1b", resourceVersion="4711", creationTimestamp="2026-05-01T10:00:00Z")
    out["spec"]["restartPolicy"] = "Always"
    return out


def recorded_log() -> list[dict[str, Any]]:
    debug = pod("debug", privileged=True)
    web = pod("web")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "shop"},
                  "spec": {"replicas": 2}}
    applied = pod("applied", privileged=True)
    return [
        # A privileged pod created at Request level: recorded at both stages, evaluated once.
        event("a1", "create", pod_ref("debug"), level="Request", stage="RequestReceived", request_object=debug,
              uri="/api/v1/namespaces/shop/pods?fieldManager=kubectl-create&fieldValidation=Strict"),
        event("a1", "create", pod_ref("debug"), level="Request", code=403, request_object=debug,
              uri="/api/v1/namespaces/shop/pods?fieldManager=kubectl-create&fieldValidation=Strict"),
        # Reads are not admitted.
        event("a2", "list", {"resource": "pods", "namespace": "shop", "apiVersion": "v1"}, level="Metadata"),
        # Metadata level: no object.
        event("a3", "create", pod_ref("quiet"), level="Metadata", code=201),
        # An update, by an impersonating user, dry run.
        event("a4", "update", {"resource": "deployments", "namespace": "shop", "name": "api", "apiGroup": "apps",
                               "apiVersion": "v1"},
              request_object=deployment, response_object=deployment,
              uri="/apis/apps/v1/namespaces/shop/deployments/api?dryRun=All&fieldManager=kubectl-edit",
              impersonatedUser={"username": "dev@example.com", "groups": ["developers", "system:authenticated"]},
              received="2026-05-01T11:00:00.000000Z"),
        # A patch at Request level has only the patch.
        event("a5", "patch", pod_ref("web"), level="Request", request_object={"metadata": {"labels": {"a": "b"}}}),
        # Server-side apply creating a pod: 201, the object is the answer.
        event("a6", "patch", pod_ref("applied"), code=201, request_object=applied, response_object=stored(applied),
              uri="/api/v1/namespaces/shop/pods/applied?fieldManager=kubectl&force=false",
              received="2026-05-01T12:00:00.000000Z"),
        # Deletions: one answered with the object, one with a Status.
        event("a7", "delete", pod_ref("web"), request_object={"kind": "DeleteOptions", "apiVersion": "v1",
                                                              "propagationPolicy": "Background"},
              response_object=stored(web), received="2026-05-01T13:00:00.000000Z"),
        event("a8", "delete", pod_ref("gone"), response_object={"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                                "status": "Success"}),
        # CONNECT: nothing recorded to build the options from.
        event("a9", "create", pod_ref("web", subresource="exec"), level="Request"),
    ]


def write_log(path: Path, events: list[dict[str, Any]]) -> Path:
    data = "".join(json.dumps(value, separators=(",", ":")) + "\n" for value in events)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data.encode()))
    else:
        path.write_text(data)
    return path


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def results(out: str) -> dict[str, dict[str, Any]]:
    return {line["request"]["uid"]: line for line in map(json.loads, out.splitlines())}


def test_recorded_writes_become_the_requests_kube_apiserver_sent(tmp_path: Path) -> None:
    log = write_log(tmp_path / "audit.log", recorded_log())
    code, out, err = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(log), "-o", "json")
    assert code == 3
    found = results(out)
    assert list(found) == ["a1", "a4", "a6", "a7"]  # in the order kube-apiserver received them

    created = found["a1"]
    assert created["item"] == "line 2" and created["audit"]["stage"] == "ResponseComplete"
    assert (created["request"]["operation"], created["allowed"]) == ("CREATE", False)
    assert created["audit"]["responseCode"] == 403
    assert created["request"]["userInfo"] == ADMIN
    assert "privileged containers are not allowed" in created["validating"]["status"]["message"]

    updated = found["a4"]
    assert (updated["request"]["operation"], updated["request"]["dryRun"]) == ("UPDATE", True)
    assert updated["request"]["kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert updated["request"]["userInfo"]["username"] == "dev@example.com"
    assert any(note.startswith("oldObject: audit events never record") for note in updated["audit"]["notes"])

    applied = found["a6"]
    assert applied["request"]["operation"] == "CREATE" and applied["allowed"] is False
    assert applied["audit"]["notes"][0].startswith("object: the responseObject")

    deleted = found["a7"]
    assert deleted["request"]["operation"] == "DELETE"

    # Every event is accounted for on stderr.
    assert f"{log}: 10 event(s), 4 request(s) evaluated, 2 not selected" in err
    for reason in ("1 not evaluated: level Metadata (the event has no object)",
                   "1 not evaluated: patch without responseObject",
                   "1 not evaluated: delete without the deleted object",
                   "1 not evaluated: CONNECT pods/exec"):
        assert reason in err, err


def test_the_review_built_from_an_event_is_the_webhook_request(tmp_path: Path) -> None:
    """The AdmissionReview itself, field by field, for the dry-run update and the deletion."""
    from staticadm.offline.audit_log import AuditFilters, read_audit_log

    requests, _ = read_audit_log(str(write_log(tmp_path / "a.log", recorded_log())), AuditFilters())
    by_uid = {entry.review["request"]["uid"]: entry.review["request"] for entry in requests}
    update = by_uid["a4"]
    assert update["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}
    assert update["requestResource"] == update["resource"]
    assert (update["namespace"], update["name"], update["oldObject"]) == ("shop", "api", None)
    assert update["options"] == {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"],
                                 "fieldManager": "kubectl-edit"}
    delete = by_uid["a7"]
    assert delete["object"] is None and delete["oldObject"]["metadata"]["name"] == "web"
    assert delete["options"] == {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1",
                                 "propagationPolicy": "Background"}


def test_filters_select_by_verb_resource_namespace_and_time(tmp_path: Path) -> None:
    log = write_log(tmp_path / "audit.log.gz", recorded_log())

    def uids(*flags: str) -> list[str]:
        code, out, err = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(log), "-o", "json", *flags)
        assert code in (0, 3), err
        return list(results(out))

    assert uids("--audit-verb", "create") == ["a1"]
    assert uids("--audit-resource", "deployments.apps") == ["a4"]
    assert uids("--audit-resource", "deployments.example.com") == []
    assert uids("--audit-resource", "pods", "--audit-verb", "delete") == ["a7"]
    assert uids("--audit-namespace", "kube-system") == []
    assert uids("--audit-since", "2026-05-01T11:00:00Z", "--audit-until", "2026-05-01T13:00:00+00:00") == ["a4", "a6"]


def test_unusable_logs_and_flags_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.log"
    code, out, err = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(missing))
    assert (code, out) == (2, "") and f"{missing}: cannot read: No such file or directory" in err

    other = write_log(tmp_path / "pods.log", [pod("web")])
    code, _, err = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(other))
    assert code == 0 and "1 malformed line(s) skipped (line 1: not an audit.k8s.io/v1 Event (apiVersion 'v1', " \
        "kind 'Pod'))" in err

    code, _, err = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(other), "--audit-since", "yesterday")
    assert code == 2 and "--audit-since: not an RFC 3339 time" in err
    code, _, err = run("review", "--manifests", str(EXAMPLES), "-f", str(other), "--audit-verb", "create")
    assert code == 2 and "--audit-log FILE: give one" in err


def test_diff_compares_recorded_requests(tmp_path: Path) -> None:
    live, new = tmp_path / "live", tmp_path / "new"
    live.mkdir()
    new.mkdir()
    (new / "deny-privileged.static.k8s.io.yaml").write_text(
        (EXAMPLES / "deny-privileged.static.k8s.io.yaml").read_text())
    log = write_log(tmp_path / "audit.log", recorded_log())
    code, out, err = run("diff", str(live), str(new), "--audit-log", str(log), "-o", "json")
    report = json.loads(out)
    jsonschema.validate(report, json.loads((REPO_ROOT / "staticadm" / "schemas" /
                                            "diff-report.v1alpha1.schema.json").read_text()))
    assert code == 3
    assert [(entry["uid"], entry["item"]) for entry in report["differences"]] == [("a1", "line 2"),
                                                                                   ("a6", "line 7")]
    assert report["differences"][0]["audit"]["verb"] == "create"
    assert "4 request(s) evaluated" in err


def test_text_review_shows_the_event(tmp_path: Path) -> None:
    log = write_log(tmp_path / "audit.log", recorded_log())
    code, out, _ = run("review", "--manifests", str(EXAMPLES), "--audit-log", str(log), "--audit-verb", "update")
    assert code == 0
    assert f"{log} line 5: UPDATE deployments.apps shop/api (request a4)" in out
    assert "  audit event: update at 2026-05-01T11:00:00.000000Z (RequestResponse, ResponseComplete), " \
           "kube-apiserver answered 200" in out
    assert "  note: oldObject: audit events never record" in out


def test_policy_tests_take_requests_from_an_audit_log(tmp_path: Path) -> None:
    write_log(tmp_path / "audit.log", recorded_log())
    test = {"apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "recorded"},
            "spec": {"manifests": str(EXAMPLES), "cases": [
                {"name": "recorded pod writes", "auditLog": {"file": "audit.log", "verbs": ["create", "patch"],
                                                             "resources": ["pods"]},
                 "expect": {"allowed": False, "deniedBy": {"policy": "deny-privileged.static.k8s.io"}}},
                {"name": "recorded deployment updates", "auditLog": {"file": "audit.log",
                                                                     "since": "2026-05-01T11:00:00Z",
                                                                     "resources": ["deployments.apps"]},
                 "expect": {"allowed": True}}]}}
    (tmp_path / "recorded.test.yaml").write_text(yaml.safe_dump(test))
    code, out, _ = run("test", str(tmp_path / "recorded.test.yaml"), "-o", "json")
    cases = [(case["case"], case["passed"]) for case in json.loads(out)["files"][0]["cases"]]
    assert code == 0, out
    assert cases == [("recorded pod writes [audit.log line 2]", True), ("recorded pod writes [audit.log line 7]", True),
                     ("recorded deployment updates [audit.log line 5]", True)]


def test_a_policy_test_audit_log_that_selects_nothing_is_unusable(tmp_path: Path) -> None:
    write_log(tmp_path / "audit.log", recorded_log())
    test = {"apiVersion": "staticadm.io/v1alpha1", "kind": "PolicyTest", "metadata": {"name": "recorded"},
            "spec": {"manifests": str(EXAMPLES), "cases": [
                {"name": "nothing", "auditLog": {"file": "audit.log", "namespaces": ["nowhere"]},
                 "expect": {"allowed": True}},
                {"name": "bad filter", "auditLog": {"file": "audit.log", "verbs": ["get"], "since": "noon"},
                 "expect": {"allowed": True}}]}}
    (tmp_path / "recorded.test.yaml").write_text(yaml.safe_dump(test))
    code, out, _ = run("test", str(tmp_path / "recorded.test.yaml"))
    assert code == 2
    assert "spec.cases[0].auditLog: selects no request of" in out
    assert "spec.cases[1].auditLog.verbs[0]: must be one of create, update, patch, delete" in out
    assert "spec.cases[1].auditLog.since: not an RFC 3339 time" in out


def test_a_recorded_request_body_is_typed_and_defaulted_as_kube_apiserver_admitted_it(tmp_path: Path) -> None:
    """requestObject is what the client sent; admission saw it decoded and defaulted."""
    from staticadm.offline.audit_log import AuditFilters, read_audit_log

    requests, _ = read_audit_log(str(write_log(tmp_path / "a.log", recorded_log())), AuditFilters())
    by_uid = {entry.review["request"]["uid"]: entry for entry in requests}
    created = by_uid["a1"].review["request"]["object"]
    assert created["spec"]["restartPolicy"] == "Always" and created["spec"]["schedulerName"] == "default-scheduler"
    assert created["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert created["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "64Mi"}
    assert any(note.startswith("defaulted by Kubernetes: object: spec.containers[0].resources.requests.cpu")
               or "object: spec.dnsPolicy" in note for note in by_uid["a1"].audit["notes"])
    updated = by_uid["a4"].review["request"]["object"]
    assert updated["spec"]["strategy"]["type"] == "RollingUpdate" and updated["spec"]["template"]["spec"]


def test_a_log_of_requests_that_never_reach_their_last_stage_is_read_in_bounded_memory(
        tmp_path: Path, monkeypatch: Any) -> None:
    """An audit policy that omits ResponseComplete: every event waits for a last stage that never comes. They were
    all held until the end of the log (a 300 MB log: 372 MB resident); now at most 64 MiB of them are (here 1 MiB),
    the oldest handed on as it stands, and each request is still evaluated once."""
    import tracemalloc

    from staticadm.offline import audit_log

    monkeypatch.setattr(audit_log, "_WAITING_BYTES", 1024 * 1024, raising=False)
    big = "x" * 50_000
    events = [event(f"r{index}", "create", {"resource": "configmaps", "namespace": "shop", "name": f"c{index}",
                                            "apiVersion": "v1"}, level="Request", stage="RequestReceived",
                    request_object={"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": f"c{index}", "namespace": "shop"}, "data": {"k": big}})
              for index in range(400)]
    events.insert(3, event("r1", "create", {"resource": "configmaps", "namespace": "shop", "name": "c1",
                                            "apiVersion": "v1"}, level="Request", code=201,
                           request_object={"apiVersion": "v1", "kind": "ConfigMap",
                                           "metadata": {"name": "c1", "namespace": "shop"}, "data": {"k": "final"}}))
    log = write_log(tmp_path / "audit.log", events)
    summary = audit_log.AuditReadSummary()
    tracemalloc.start()
    try:
        seen = []
        for recorded in audit_log.stream_audit_log(str(log), audit_log.AuditFilters(), summary):
            seen.append(recorded.review["request"]["uid"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert log.stat().st_size > 16 * 1024 * 1024
    assert peak < 8 * 1024 * 1024, peak
    assert sorted(seen) == sorted(f"r{index}" for index in range(400)) and summary.requests == 400
    assert seen[0] == "r1"  # its last stage came while it waited: that one is evaluated
