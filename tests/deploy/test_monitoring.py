"""The Prometheus rules and the Grafana dashboard under monitoring/: promtool checks the rules and runs their unit
tests, every metric the rules and the dashboard read is one the daemon exports, and a real Prometheus server
scraping a running daemon evaluates the rules and every dashboard panel's query."""

from __future__ import annotations

import copy
import datetime
import json
import re
import secrets
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from staticadm.deploy.certs import create_certificates
from tests.deploy.conftest import REPO_ROOT
from tests.server.harness import DaemonFactory, free_port, review, stop_process, wait_for

MONITORING = REPO_ROOT / "monitoring"
RULES = MONITORING / "staticadm-rules.yaml"
DASHBOARD = MONITORING / "staticadm-dashboard.json"
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
@pytest.mark.slow  # promtool's rule tests: several seconds of CPU
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


def _https_job(port_of_daemon: int, ca_file: Path) -> dict[str, Any]:
    """A scrape job reading the daemon's /metrics on its admission listener (no client CA there)."""
    return {"job_name": "staticadm", "scheme": "https", "tls_config": {"ca_file": str(ca_file)},
            "static_configs": [{"targets": [f"127.0.0.1:{port_of_daemon}"]}]}


@contextmanager
def prometheus_scraping(tmp_path: Path, scrape_configs: list[dict[str, Any]], rule_files: list[Path]) -> Iterator[int]:
    """A real Prometheus server (scraping every second) with ``scrape_configs``, once it has scraped the job
    ``staticadm`` successfully: its HTTP API port. Stopped after."""
    assert PROMETHEUS is not None
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "rule_files": [str(path) for path in rule_files],
                                      "scrape_configs": scrape_configs}))
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
        yield port
    finally:
        stop_process(server)


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian package prometheus)")
def test_a_prometheus_server_scrapes_the_daemon_and_evaluates_the_rules(make_daemon: DaemonFactory,
                                                                         tmp_path: Path) -> None:
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
    with prometheus_scraping(tmp_path, [*scrape_configs, wrong], [RULES]) as port:
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


# -- the Grafana dashboard --------------------------------------------------------------------------------------

#: What Grafana puts in place of the dashboard's variables and macros when every node is shown; the rate window is
#: a few scrapes (every second here), as $__rate_interval is four scrape intervals.
GRAFANA_VALUES = {"$__rate_interval": "20s", "$job": "staticadm", "$instance": ".+"}


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _panels() -> list[dict[str, Any]]:
    return [panel for panel in _dashboard()["panels"] if panel["type"] != "row"]


def _queries() -> list[tuple[str, str]]:
    """(where, PromQL as Grafana sends it) of every panel target and every query variable."""
    found = [(f"panel {panel['title']!r} target {target['refId']}", target["expr"])
             for panel in _panels() for target in panel["targets"]]
    for variable in _dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"variable {variable['name']}", variable["query"]["query"]))
    return found


def _as_sent(expr: str) -> str:
    """The query with the variables replaced; a variable's ``label_values(METRIC, LABEL)`` (Grafana asks for the
    label's values of METRIC's series) as the PromQL that finds the same values."""
    for name, value in GRAFANA_VALUES.items():
        expr = expr.replace(name, value)
    expr = re.sub(r"^label_values\((.+), (\w+)\)$", r"count by (\2) (\1)", expr)
    assert "$" not in expr, expr
    return expr


def test_the_dashboard_is_a_grafana_dashboard_of_the_operators_questions() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "staticadm" and dashboard["schemaVersion"] >= 36
    panels = _panels()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    titles = {panel["title"] for panel in panels}
    assert {"Request rate by endpoint and decision", "Request latency by endpoint and decision", "Denials by policy",
            "Configuration hash by node", "Reload state by node", "Distinct configurations served",
            "Certificate expiry (days left)", "Worker restarts and recycles"} <= titles
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        area = {(grid["x"] + column, grid["y"] + line) for column in range(grid["w"]) for line in range(grid["h"])}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"] and 'instance=~"$instance"' in target["expr"], target["expr"]


def test_every_metric_the_dashboard_reads_is_one_the_daemon_exports_and_documents(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    exported = _families(daemon.get("/metrics").body.decode())
    read = {name for _, expr in _queries() for name in re.findall(r"\bstaticadm_[a-z_]+\b", expr)}
    unknown = {name for name in read
               if name not in exported and re.sub(r"_(bucket|sum|count|total)$", "", name) not in exported}
    assert read and not unknown, sorted(unknown)
    documented = (REPO_ROOT / "docs" / "operations.md").read_text()
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in read}
    # The page abbreviates a long family it has named once: `..._last_config_info`.
    abbreviated = set(re.findall(r"`\.\.\.(_[a-z_]+)", documented))
    undocumented = sorted(family for family in families
                          if family not in documented and not any(family.endswith(tail) for tail in abbreviated))
    assert undocumented == [], undocumented


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian package prometheus)")
def test_every_dashboard_query_returns_series_from_a_daemon_carrying_traffic(make_daemon: DaemonFactory,
                                                                             tmp_path: Path) -> None:
    given = tmp_path / "given"
    create_certificates(given, validity=datetime.timedelta(days=30))
    daemon = make_daemon(args=["--workers", "2", "--tls-cert", str(given / "serving.crt"),
                               "--tls-key", str(given / "serving.key")], ca_file=given / "ca.crt")
    queries = _queries()
    with prometheus_scraping(tmp_path, [_https_job(daemon.port, given / "ca.crt")], []) as port:
        def empty() -> list[str]:
            # Traffic between scrapes: allowed and denied requests on both endpoints.
            for number in range(3):
                assert daemon.validate(review({"deny": "true"}, uid=f"d{number}"), via="https").status == 200
                assert daemon.validate(review(uid=f"a{number}"), via="https").status == 200
                assert daemon.validate(review(uid=f"m{number}"), via="https", path="/mutate").status == 200
            return [f"{where}: {expr}" for where, expr in queries
                    if not _api(port, "/api/v1/query", query=_as_sent(expr))["result"]]

        deadline = time.monotonic() + 60
        missing = empty()
        while missing and time.monotonic() < deadline:
            time.sleep(1)
            missing = empty()
        assert missing == [], missing
        # The values are the daemon's: one configuration, in step, its reload state good, 30 days on the
        # serving certificate, no worker restarted.
        def value(expr: str) -> list[tuple[dict[str, str], float]]:
            return [(sample["metric"], float(sample["value"][1]))
                    for sample in _api(port, "/api/v1/query", query=_as_sent(expr))["result"]]

        by_title = {panel["title"]: panel for panel in _panels()}
        assert [number for _, number in value(by_title["Distinct configurations served"]["targets"][0]["expr"])] == [1]
        assert [number for _, number in value(by_title["Reload state by node"]["targets"][0]["expr"])] == [0]
        expiry = {labels["certificate"]: days for labels, days in
                  value(by_title["Certificate expiry (days left)"]["targets"][0]["expr"])}
        assert 29 < expiry["serving"] <= 30
        denials = value(by_title["Denials by policy"]["targets"][0]["expr"])
        assert [labels["policy"] for labels, _ in denials] == ["deny-label.static.k8s.io"]
        assert all(number == 0 for _, number in value(by_title["Worker restarts and recycles"]["targets"][0]["expr"]))
