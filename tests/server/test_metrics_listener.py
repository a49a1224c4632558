"""--metrics-listen: Prometheus' door, apart from kube-apiserver's client CA (real daemon, real TLS)."""

from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.pki import make_ca, write_ca
from tests.server.harness import DaemonFactory, free_port, wait_for


def _get(port: int, path: str, ca: Path, token: str | None, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", method=method,
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(ca)), timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_metrics_are_served_to_the_token_only(make_daemon: DaemonFactory, tmp_path: Path, workers: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first-token-0123456789\n")
    pki = tmp_path / "pki"
    pki.mkdir()
    port = free_port()
    # kube-apiserver's client CA on the admission listener; the scraper has no certificate from it.
    daemon = make_daemon(args=["--workers", workers, "--client-ca", str(write_ca(make_ca("front-proxy"),
                                                                                 pki / "ca.crt")),
                               "--metrics-listen", f"127.0.0.1:{port}", "--metrics-token-file", str(token_file)])
    ca = daemon.state_dir / "tls" / "ca.crt"
    status, body = _get(port, "/metrics", ca, "first-token-0123456789")
    assert status == 200 and "staticadm_admission_requests_total" in body
    if workers == "2":
        assert body.count("staticadm_worker_config_info{") == 2  # every worker's series, summed
    for token in (None, "wrong", "first-token-012345678"):
        assert _get(port, "/metrics", ca, token)[0] == 401, token
    for path in ("/validate", "/readyz", "/"):
        assert _get(port, path, ca, "first-token-0123456789")[0] == 404, path
    assert _get(port, "/metrics", ca, "first-token-0123456789", method="POST")[0] == 405
    # A rotation: the new token from the next scrape on; an empty file keeps it.
    replacement = tmp_path / ".token.new"
    replacement.write_text("second-token-abcdefghij\n")
    os.replace(replacement, token_file)
    assert wait_for(lambda: _get(port, "/metrics", ca, "second-token-abcdefghij")[0] == 200)
    assert _get(port, "/metrics", ca, "first-token-0123456789")[0] == 401
    token_file.write_text("")
    assert _get(port, "/metrics", ca, "second-token-abcdefghij")[0] == 200
    assert "the new metrics token file is not usable" in daemon.log()
    assert "open to every local user" not in daemon.log()


def test_an_empty_token_file_is_refused_at_start(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    daemon = make_daemon(start=False, args=["--metrics-listen", f"127.0.0.1:{free_port()}",
                                            "--metrics-token-file", str(tmp_path / "token")])
    daemon.start(wait=False)
    assert daemon.process is not None and daemon.process.wait(timeout=60) == 1
    assert f"staticadm serve: --metrics-token-file {tmp_path / 'token'}: is empty" in daemon.log()
    assert daemon.socket_path is not None and not daemon.socket_path.exists()
