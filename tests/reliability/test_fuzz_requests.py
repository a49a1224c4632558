"""Fuzzing the request path: parsing and evaluation in-process, then bodies through the real daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from staticadm.admission.endpoints import ENDPOINTS
from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.admission.request import AdmissionRequest, RequestError, parse_admission_review
from staticadm.manifests import load_manifest_directory
from staticadm.snapshot import Snapshot, build_snapshot
from tests.reliability.fuzzing import JSON, REVIEWS, budget, deep, mutated_reviews, valid_review
from tests.server.harness import REQUESTS, DaemonFactory, policy_yaml

MARKER = "fuzz-marker-7f3a"

#: Policies that read the fields the fuzzer damages, so evaluation meets wrong types too.
CURIOUS = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: curious.static.k8s.io
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["*"]
      apiVersions: ["*"]
      operations: ["*"]
      resources: ["*"]
  variables:
  - name: containers
    expression: "has(object.spec) && has(object.spec.containers) ? object.spec.containers : []"
  validations:
  - expression: "variables.containers.all(c, !has(c.image) || !c.image.endsWith(':latest'))"
  - expression: "request.userInfo.groups.all(g, g != 'evil') && request.operation != 'CONNECT'"
  - expression: "oldObject == null || object == null || oldObject.metadata.name == object.metadata.name"
  auditAnnotations:
  - key: who
    valueExpression: "string(request.userInfo.username)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: curious.static.k8s.io
spec:
  policyName: curious.static.k8s.io
  validationActions: [Deny, Audit]
"""


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    directory = tmp_path_factory.mktemp("fuzz-manifests")
    (directory / "deny.yaml").write_text(policy_yaml("denied"))
    (directory / "curious.yaml").write_text(CURIOUS)
    loaded = load_manifest_directory(str(directory))
    assert not loaded.errors, [str(e) for e in loaded.errors]
    return build_snapshot(loaded)


def _check_parse_and_evaluate(snapshot: Snapshot, document: Any) -> None:
    parsed = parse_admission_review(document)
    assert isinstance(parsed, AdmissionRequest | RequestError)
    if isinstance(parsed, RequestError):
        assert parsed.message
        return
    for name, evaluate in ENDPOINTS.items():
        answer = evaluate(snapshot, RequestOnlyNamespaces(), parsed).review
        assert answer["apiVersion"] == parsed.review_api_version, name
        assert answer["response"]["uid"] == parsed.uid
        assert isinstance(answer["response"]["allowed"], bool)
        orjson.dumps(answer)  # what the server writes must serialize


@budget(150)
@given(document=REVIEWS)
def test_parsing_and_evaluation_never_raise(snapshot: Snapshot, document: Any) -> None:
    _check_parse_and_evaluate(snapshot, document)


@budget(40)
@given(depth=st.integers(min_value=1, max_value=900), where=st.sampled_from(["object", "oldObject", "options",
                                                                               "userInfo"]))
def test_deep_nesting_in_any_field(snapshot: Snapshot, depth: int, where: str) -> None:
    document = valid_review()
    document["request"][where] = {"spec": deep(depth)} if where != "userInfo" else deep(depth)
    _check_parse_and_evaluate(snapshot, document)


@budget(20)
@example(size=3_000_000, fill="😀")
@example(size=3_000_000, fill="\\")
@given(size=st.integers(min_value=0, max_value=3_000_000), fill=st.sampled_from(["a", "é", "😀", "\u0000", "\\"]))
def test_huge_strings(snapshot: Snapshot, size: int, fill: str) -> None:
    document = valid_review()
    text = fill * (size // len(fill.encode()))
    document["request"]["object"]["metadata"]["labels"]["deny"] = text
    document["request"]["name"] = text[:100_000]
    document["request"]["userInfo"]["groups"] = [text[:1000]] * 100
    _check_parse_and_evaluate(snapshot, document)


# -- through the daemon ------------------------------------------------------------------------------

JSON_HEADERS = {"Content-Type": "application/json"}

RAW_BODIES: list[bytes] = [
    b"", b"null", b"0", b'"x"', b"[]", b"{}", b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00", b"{" * 5000 + b"}" * 5000,
    b'{"request":' * 1100 + b'1' + b'}' * 1100, b'[' * 1100 + b']' * 1100,
    b'{"apiVersion": NaN}', b'{"apiVersion": "\\ud800"}', b'{"a": 1e99999}',
    b'{"apiVersion": "admission.k8s.io/v1", "apiVersion": "admission.k8s.io/v1beta1"}',
    json.dumps(valid_review()).encode()[:-7], json.dumps(valid_review()).encode() + b"garbage",
    json.dumps(valid_review()).replace('"web"', str(2**80)).encode(),
    json.dumps(valid_review()).replace('"alice"', '"' + "\\u0000" * 1000 + '"').encode(),
]


def test_hostile_bodies_through_the_daemon(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(start=False)
    (daemon.manifests / "curious.yaml").write_text(CURIOUS)
    daemon.start()

    def send(body: bytes, path: str = "/validate") -> None:
        answer = daemon.request("POST", path, body=body, headers=JSON_HEADERS)
        assert answer.status in (200, 400, 413), (answer.status, answer.body[:300])
        assert answer.headers["Content-Type"].startswith("application/json")
        document = answer.json()
        if answer.status != 200:
            assert document["kind"] == "Status" and document["code"] == answer.status
        # Nothing the client sent comes back, except the uid of a well-formed review.
        assert MARKER.encode() not in answer.body

    for body in RAW_BODIES:
        send(body)

    @budget(40)
    @given(document=mutated_reviews() | JSON, path=st.sampled_from(["/validate", "/mutate"]),
           marker_at=st.sampled_from(["name", "namespace", "nowhere"]))
    def through_daemon(document: Any, path: str, marker_at: str) -> None:
        request = document.get("request") if isinstance(document, dict) else None
        if isinstance(request, dict):
            target = {"name": request, "namespace": request}.get(marker_at)
            if target is not None:
                target[marker_at] = MARKER
        send(json.dumps(document).encode(), path)

    through_daemon()
    assert daemon.metric(REQUESTS, {"code": "500"}) == 0
    assert daemon.get("/readyz").status == 200
    rss_kib = int(next(line.split()[1] for line in Path(f"/proc/{daemon.process.pid}/status").read_text()  # type: ignore[union-attr]
                       .splitlines() if line.startswith("VmRSS:")))
    assert rss_kib < 1024 * 1024, f"daemon RSS {rss_kib} KiB after fuzzing"
