"""``/version``: what build the daemon runs (release, git commit when known, Python, the CEL engine), on every
listener, as kube-apiserver's ``/version`` says what it runs."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess

from staticadm import __version__
from tests.server.harness import REPO_ROOT, DaemonFactory


def test_version_names_the_release_commit_python_and_cel_engine(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(env={"STATICADM_GIT_COMMIT": "0123456789abcdef0123456789abcdef01234567"})
    for via in ("unix", "https"):
        response = daemon.get("/version", via=via)
        assert response.status == 200
        assert response.json() == {"version": __version__, "gitCommit": "0123456789abcdef0123456789abcdef01234567",
                                   "pythonVersion": platform.python_version(),
                                   "celExprPythonVersion": importlib.metadata.version("cel-expr-python"),
                                   "platform": f"{platform.system().lower()}/{platform.machine()}"}
    assert daemon.request("POST", "/version", body=b"{}").status == 405


def test_without_the_variable_the_commit_is_the_checkouts(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    described = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    expected = described.stdout.strip() if described.returncode == 0 else None
    assert daemon.get("/version").json()["gitCommit"] == expected
