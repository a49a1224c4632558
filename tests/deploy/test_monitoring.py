"""The Prometheus rules under monitoring/: promtool checks them and runs their unit tests, every metric they
read is one the daemon exports, and a real Prometheus server scraping a running daemon evaluates them."""

from __future__ import annotations

import copy
import datetime
import json
import re
import secrets
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticadm.deploy.certs import create_certificates
from tests.deploy.conftest import REPO_ROOT
from tests.server.harness import DaemonFactory, free_port, review, stop_process, wait_for

MONITORING = REPO_ROOT / "monitoring"
RULES = MONITORING / "staticadm-rules.yaml"
SCRAPE = MONITORING / "prometheus-scrape.yaml"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    assert PROMTOOL is not None
    completed = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "SUCCESS" in completed.stdout


@needs_promtool
def test_the_rules_unit_tests_pass() -> None:
    assert PROMTOOL is not None
    tests = sorted(str(path.relative_to(MONITORING)) for path in (MONITORING / "tests").glob("*.test.yaml"))
    assert tests
    completed = subprocess.run([PROMTOOL, "test", "rules", *tests], cwd=MONITORING, capture_output=True, text=True,
                               check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def _families(exposition: str) -> set[str]:
    return {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}


def test_every_metric_the_rules_read_is_one_the_daemon_exports(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(args=["--workers", "2"])
    exported = _families(daemon.get("/metrics").body.decode())
    read = set(re.findall(r"\bstaticadm_[a-z_]+\b", RULES.read_text()))
    # A histogram's buckets and a counter's samples carry suffixes the family name does not.
    unknown = {name for name in read
               if name not in exported and re.sub(r"_(bucket|sum|count|total)$", "", name) not in exported}
    assert read and not unknown, sorted(unknown)
    alerts = set(re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.MULTILINE))
    documented = (REPO_ROOT / "docs" / "operations.md").read_text()
    assert all(f"`{alert}`" in documented for alert in alerts), sorted(a for a in alerts if f"`{a}`" not in documented)


def _api(port: int, path: str, **query: str) -> Any:
    url = f"http://127.0.0.1:{port}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=5) as response:
        document = json.loads(response.read())
    assert document["status"] == "success", document
    return document["data"]


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian package prometheus)")
def test_a_prometheus_server_scrapes_the_daemon_and_evaluates_the_rules(make_daemon: DaemonFactory,
                                                                         tmp_path: Path) -> None:
    assert PROMETHEUS is not None
    given = tmp_path / "given"
    create_certificates(given, validity=datetime.timedelta(days=10))  # an operator's certificate left to lapse
    # The daemon's metrics listener, with a token; Prometheus with the shipped scrape configuration, its files where
    # that configuration names them (moved under the test's directory) and the listener's port.
    prometheus_files = tmp_path / "etc-prometheus-staticadm"
    prometheus_files.mkdir()
    token = secrets.token_urlsafe(32)
    (prometheus_files / "metrics-token").write_text(token + "\n")
    shutil.copy(given / "ca.crt", prometheus_files / "ca.crt")
    daemon_token = tmp_path / "daemon-metrics-token"
    daemon_token.write_text(token + "\n")
    metrics_port = free_port()
    daemon = make_daemon(args=["--tls-cert", str(given / "serving.crt"), "--tls-key", str(given / "serving.key"),
                               "--metrics-listen", f"127.0.0.1:{metrics_port}", "--metrics-token-file",
                               str(daemon_token), "--workers", "2"],
                         ca_file=given / "ca.crt")
    shipped = SCRAPE.read_text().replace("/etc/prometheus/staticadm/", f"{prometheus_files}/").replace(
        "127.0.0.1:9443", f"127.0.0.1:{metrics_port}")
    scrape_configs = yaml.safe_load(shipped)["scrape_configs"]
    assert [job["job_name"] for job in scrape_configs] == ["staticadm"]
    # The same job with another token: refused, so the token is what lets Prometheus in.
    (tmp_path / "wrong-token").write_text(secrets.token_urlsafe(32))
    wrong = {**copy.deepcopy(scrape_configs[0]), "job_name": "staticadm-wrong-token"}
    wrong["authorization"]["credentials_file"] = str(tmp_path / "wrong-token")
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "rule_files": [str(RULES)], "scrape_configs": [*scrape_configs, wrong]}))
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        server = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    try:
        def scraped() -> bool:
            try:
                result = _api(port, "/api/v1/query", query='up{job="staticadm"}')["result"]
            except OSError:
                return False
            return bool(result) and result[0]["value"][1] == "1"

        assert wait_for(scraped, timeout=30), (tmp_path / "prometheus.log").read_text()[-3000:]
        targets = {target["labels"]["job"]: target for target in _api(port, "/api/v1/targets")["activeTargets"]}
        assert targets["staticadm"]["health"] == "up"
        assert wait_for(lambda: _api(port, "/api/v1/targets")["activeTargets"] and all(
            target["health"] == "down" and "401" in target["lastError"]
            for target in _api(port, "/api/v1/targets")["activeTargets"]
            if target["labels"]["job"] == "staticadm-wrong-token"), timeout=20), _api(port, "/api/v1/targets")
        # Every worker's series, summed by the supervisor that serves the listener.
        up_workers = _api(port, "/api/v1/query", query='count(staticadm_worker_config_info{job="staticadm"} == 1)')
        assert [sample["value"][1] for sample in up_workers["result"]] == ["2"]
        for _ in range(5):
            assert daemon.validate(review({"deny": "true"}), via="https").status == 200

        def alerting() -> set[tuple[str, str]]:
            return {(alert["labels"]["alertname"], alert["state"]) for alert in _api(port, "/api/v1/alerts")["alerts"]}

        # The certificate has 10 days left: the 21-day alert is pending (its `for:` is an hour), the 7-day one
        # is not.
        assert wait_for(lambda: ("StaticadmCertificateExpiringSoon", "pending") in alerting(), timeout=20), \
            alerting()
        assert not any(name == "StaticadmCertificateExpiring" for name, _ in alerting())
        assert not any(name in ("StaticadmDown", "StaticadmNotReady") for name, _ in alerting())

        def denial_rate() -> list[Any]:
            result: list[Any] = _api(port, "/api/v1/query", query="staticadm:admission_denials:rate5m")["result"]
            return result

        assert wait_for(lambda: bool(denial_rate()) and float(denial_rate()[0]["value"][1]) > 0, timeout=20)
        # Every rule evaluated without an error against the real series.
        groups = _api(port, "/api/v1/rules")["groups"]
        assert {group["name"] for group in groups} == {"staticadm.recording", "staticadm.alerts"}
        unhealthy = [(rule["name"], rule.get("lastError")) for group in groups for rule in group["rules"]
                     if rule["health"] != "ok"]
        assert unhealthy == [], unhealthy
        hashes = _api(port, "/api/v1/query", query="staticadm:config_hashes:count")["result"]
        assert [sample["value"][1] for sample in hashes] == ["1"]
    finally:
        stop_process(server)
