"""Shadow rollout: a second directory evaluated beside the live one, end to end (real daemon, real files)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticadm.cli import main
from tests.server.harness import DaemonFactory, policy_yaml, review, wait_for, write_atomically

SHADOW_DIFFERENCES = "staticadm_shadow_differences_total"


def _differences(daemon: Any) -> list[dict[str, Any]]:
    found = []
    for line in daemon.log().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("msg") == "shadow difference":
                found.append(record)
    return found


def _workers_shadowing(daemon: Any) -> int:
    """Workers that evaluate the shadow directory (each one's ``staticadm_worker_shadow_config_info``)."""
    text = daemon.get("/metrics").body.decode()
    return sum(1 for line in text.splitlines()
               if line.startswith("staticadm_worker_shadow_config_info{") and line.endswith(" 1.0"))


def _start(make_daemon: DaemonFactory, tmp_path: Path, shadow_policy: str, workers: str = "1") -> Any:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "policy.yaml").write_text(shadow_policy)
    daemon = make_daemon(args=["--shadow-manifests", str(shadow), "--log-format", "json", "--workers", workers])
    daemon.shadow = shadow
    return daemon


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_stricter_shadow_set_reports_new_denials_without_changing_answers(
        make_daemon: DaemonFactory, tmp_path: Path, workers: str) -> None:
    # Live: pods labelled deny=true are denied. Shadow: also pods labelled strict=true.
    # (The live rule with the live message: another message would be a difference of its own, denial_message.)
    stricter = policy_yaml("v1: pods labelled deny=true are not allowed") + "---\n" + policy_yaml(
        "strict pods are denied", name="strict", label="strict")
    daemon = _start(make_daemon, tmp_path, stricter, workers)
    # The supervisor's load (counted once), then with workers each worker's: until then a worker skips
    # shadowing.
    assert wait_for(lambda: daemon.metric("staticadm_shadow_reloads_total", {"status": "success"}) >= 1, timeout=15)
    if workers != "1":
        assert wait_for(lambda: _workers_shadowing(daemon) == int(workers), timeout=15)
    assert daemon.metric("staticadm_shadow_reloads_total", {"status": "success"}) == 1
    answer = daemon.validate(review({"strict": "true"}, uid="shadowed-1")).json()["response"]
    assert answer["allowed"] is True  # the live answer is the live directory's
    assert wait_for(lambda: daemon.metric(SHADOW_DIFFERENCES, {"endpoint": "validate",
                                                               "difference": "allowed_to_denied"}) >= 1, timeout=10)
    [difference] = [d for d in _differences(daemon) if d["uid"] == "shadowed-1"]
    assert difference["shadow_policies"] == ["strict.static.k8s.io/strict.static.k8s.io"]
    assert difference["live_policies"] == [] and "strict pods are denied" in difference["detail"]
    # A request both sets decide alike is evaluated and not reported.
    daemon.validate(review({"deny": "true"}, uid="same-1"))
    assert wait_for(lambda: daemon.metric("staticadm_shadow_evaluations_total", {"endpoint": "validate"}) >= 2)
    assert not [d for d in _differences(daemon) if d["uid"] == "same-1"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_every_request_from_readiness_on_is_shadowed(make_daemon: DaemonFactory, tmp_path: Path,
                                                     workers: str) -> None:
    """The requests sent the moment /readyz says ready are shadowed like every later one (none skipped for want
    of a shadow configuration), even when the shadow directory takes longer to load than the live one (here 200
    policies beside the live one)."""
    stricter = policy_yaml("v1: pods labelled deny=true are not allowed") + "---\n" + policy_yaml(
        "strict pods are denied", name="strict", label="strict") + "".join(
        "---\n" + policy_yaml(f"extra {index}", name=f"extra-{index}", label=f"extra-{index}") for index in range(200))
    daemon = _start(make_daemon, tmp_path, stricter, workers)
    for index in range(4):
        assert daemon.validate(review({"strict": "true"}, uid=f"first-{index}")).json()["response"]["allowed"]
    assert wait_for(lambda: daemon.metric("staticadm_shadow_evaluations_total") == 4, timeout=60), \
        daemon.get("/metrics").body.decode()
    assert daemon.metric("staticadm_shadow_skipped_total") == 0
    assert wait_for(lambda: len(_differences(daemon)) == 4)
    assert {record["uid"] for record in _differences(daemon)} == {f"first-{index}" for index in range(4)}


def test_shadow_reloads_and_an_invalid_shadow_directory_never_touch_the_live_one(
        make_daemon: DaemonFactory, tmp_path: Path) -> None:
    daemon = _start(make_daemon, tmp_path, policy_yaml("live rule"))
    assert wait_for(lambda: daemon.metric("staticadm_shadow_reloads_total", {"status": "success"}) >= 1, timeout=15)
    # The shadow set drops the rule: a denial would be lifted.
    write_atomically(daemon.shadow / "policy.yaml", "")
    (daemon.shadow / "policy.yaml").unlink()
    assert wait_for(lambda: daemon.metric("staticadm_shadow_reloads_total", {"status": "success"}) >= 2, timeout=15)
    assert not daemon.validate(review({"deny": "true"}, uid="lifted")).json()["response"]["allowed"]
    assert wait_for(lambda: any(d["uid"] == "lifted" and d["difference"] == "denied_to_allowed"
                                and d["live_policies"] == ["deny-label.static.k8s.io/deny-label.static.k8s.io"]
                                for d in _differences(daemon)), timeout=10)
    # An invalid shadow directory: logged, counted, and the live directory serves on, ready.
    (daemon.shadow / "broken.yaml").write_text("kind: [")
    assert wait_for(lambda: daemon.metric("staticadm_shadow_reloads_total", {"status": "failure"}) >= 1, timeout=15)
    assert daemon.get("/readyz").status == 200
    assert not daemon.validate(review({"deny": "true"})).json()["response"]["allowed"]
    failures = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")
                and json.loads(line).get("shadow") and "failed" in json.loads(line).get("msg", "")]
    assert failures and failures[-1]["directory"] == str(daemon.shadow)
    # A live reload is compared against the shadow set it has now (the last good one).
    write_atomically(daemon.manifests / "deny.yaml", policy_yaml("warned", label="deny").replace(
        "validationActions: [Deny]", "validationActions: [Warn]"))
    assert wait_for(lambda: daemon.validate(review({"deny": "true"})).json()["response"]["allowed"], timeout=15)
    daemon.validate(review({"deny": "true"}, uid="warned-now"))
    assert wait_for(lambda: any(d["uid"] == "warned-now" and d["difference"] == "warnings"
                                for d in _differences(daemon)), timeout=10)


def test_diff_compares_two_directories_over_recorded_requests(tmp_path: Path) -> None:
    live, new = tmp_path / "live", tmp_path / "new"
    live.mkdir()
    new.mkdir()
    (live / "p.yaml").write_text(policy_yaml("live rule"))
    (new / "p.yaml").write_text(policy_yaml("live rule") + "---\n" + policy_yaml("strict", name="strict",
                                                                                   label="strict"))
    requests = tmp_path / "recorded"
    requests.mkdir()
    (requests / "a.json").write_text(json.dumps(review({"strict": "true"}, uid="a")))
    (requests / "b.json").write_text(json.dumps(review({}, uid="b")))
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": "p", "namespace": "default", "labels": {"strict": "true"}}}))
    out = io.StringIO()
    code = main(["diff", str(live), str(new), str(requests), "-f", str(pod)], stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert code == 3, text
    assert "a.json (CREATE pods default/" in text and "): validate: allowed_to_denied" in text
    assert "strict.static.k8s.io" in text
    assert "b.json" not in text.replace("3 request(s)", "")
    assert "2 of 3 request(s) would be answered differently" in text
    out = io.StringIO()
    assert main(["diff", str(live), str(live), str(requests), "-o", "json"], stdout=out, stderr=io.StringIO()) == 0
    assert json.loads(out.getvalue())["differences"] == []
    out = io.StringIO()
    assert main(["diff", str(live), str(new), str(requests), "-o", "yaml"], stdout=out, stderr=io.StringIO()) == 3
    report = yaml.safe_load(out.getvalue())
    assert report["summary"] == {"requests": 2, "different": 1}
    assert report["differences"][0]["differences"][0]["newPolicies"] == ["strict.static.k8s.io/strict.static.k8s.io"]
    err = io.StringIO()
    (new / "broken.yaml").write_text("kind: [")
    assert main(["diff", str(live), str(new), str(requests)], stdout=io.StringIO(), stderr=err) == 1
    assert "broken.yaml" in err.getvalue()
