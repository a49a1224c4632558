"""The conventions kubectl users expect of a command line: ``-o table|wide``, ``-n/--namespace``, a ``version``
command, errors naming the command that refused the line, ``--no-color``."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from staticadm import __version__
from staticadm.build_info import build_info
from staticadm.cli import main
from tests.reports.policies import MANIFESTS, OBJECTS
from tests.server import forked
from tests.server.harness import REPO_ROOT
from tests.test_colour import RED, _on_terminal

EXAMPLES = REPO_ROOT / "manifests" / "examples"
DENY_PRIVILEGED = REPO_ROOT / "tests" / "deploy" / "requests" / "deny-privileged"


def _cli(*args: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _manifests(tmp_path: Path) -> Path:
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS))
    return manifests


def _columns(line: str) -> list[str]:
    """A table line's cells: kubectl separates columns by at least three spaces."""
    return [cell.strip() for cell in line.split("   ") if cell.strip()]


# -- version ----------------------------------------------------------------------------------------


def test_version_says_the_release_commit_and_engine_and_version_flag_stays() -> None:
    code, out, err = _cli("version", "-o", "json")
    assert (code, err) == (0, "")
    info = json.loads(out)
    assert info == build_info()
    assert info["version"] == __version__ and info["celExprPythonVersion"] == "0.1.3"
    assert set(info) >= {"version", "gitCommit", "celExprPythonVersion"}
    code, out, _ = _cli("version")
    assert code == 0 and out.splitlines()[0] == f"staticadm {__version__}"
    assert "CEL engine: cel-expr-python 0.1.3" in out
    assert yaml.safe_load(_cli("version", "-o", "yaml")[1]) == info
    flag = forked.run([sys.executable, "-m", "staticadm", "--version"], timeout=60, cwd=REPO_ROOT)
    assert (flag.returncode, flag.stdout) == (0, f"staticadm {__version__}\n")


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "said"), [
    (["review", str(EXAMPLES), "--foo"], "staticadm review: unrecognized arguments: --foo"),
    (["review", "--foo", "--bar=1", str(EXAMPLES)], "staticadm review: unrecognized arguments: --foo --bar=1"),
    (["cel", "eval", "--zz", "1"], "staticadm cel eval: unrecognized arguments: --zz"),
    (["audit", "-o", "nope"], "staticadm audit: argument -o/--output: invalid choice: 'nope' (choose from 'table', "
                              "'wide', 'text', 'json', 'yaml', 'policyreport', 'openreport')"),
    (["webhook-config"], "staticadm webhook-config: the following arguments are required: --manifests"),
    (["nope"], "staticadm: argument COMMAND: invalid choice: 'nope' (choose from 'cel', 'check', 'review', 'diff', "
               "'test', 'audit', 'certs', 'webhook-config', 'completion', 'version', 'serve')"),
])
def test_a_refused_line_is_named_by_the_command_that_refused_it(line: list[str], said: str) -> None:
    code, out, err = _cli(*line)
    command = said.split(":")[0]
    assert (code, out, err) == (2, "", f"{said}\nSee '{command} --help' for usage.\n")


def test_the_installed_command_says_the_same_on_its_stderr() -> None:
    completed = forked.run([sys.executable, "-m", "staticadm", "test", "--foo", "x"], timeout=60, cwd=REPO_ROOT)
    assert completed.returncode == 2
    assert completed.stderr == "staticadm test: unrecognized arguments: --foo\nSee 'staticadm test --help' for usage.\n"


# -- -n/--namespace ---------------------------------------------------------------------------------


def test_namespace_is_that_of_objects_naming_none_and_a_different_one_is_refused(tmp_path: Path) -> None:
    manifests = _manifests(tmp_path)
    unnamed = {**OBJECTS[0], "metadata": {"name": "ok", "labels": {"team": "a"}}}
    code, out, err = _cli("review", str(manifests), "-", "-n", "web", "-o", "json", stdin=json.dumps(unnamed))
    assert code == 4, err
    assert json.loads(out)["request"]["namespace"] == "web"
    code, out, err = _cli("review", str(manifests), "-", "--namespace", "shop", "-o", "json",
                          stdin=json.dumps(OBJECTS[0]))
    assert json.loads(out)["request"]["namespace"] == "shop"  # the object's own: the same
    code, out, err = _cli("review", str(manifests), "-", "-n", "web", stdin=json.dumps(OBJECTS[0]))
    assert (code, out) == (2, "")
    assert "the object's metadata.namespace 'shop' is not the request's namespace 'web'" in err


# -- tables -----------------------------------------------------------------------------------------


def test_review_table_and_wide(tmp_path: Path) -> None:
    manifests = _manifests(tmp_path)
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(OBJECTS))
    code, out, err = _cli("review", str(manifests), str(tmp_path / "objects.yaml"), "-o", "table")
    assert code == 4, err
    lines = out.splitlines()
    assert _columns(lines[0]) == ["NAMESPACE", "NAME", "RESOURCE", "OPERATION", "DECISION", "WARNINGS", "MESSAGE"]
    rows = [_columns(line) for line in lines[1:]]
    assert rows[0] == ["shop", "ok", "pods", "CREATE", "allowed", "0", "<none>"]
    assert rows[1][:6] == ["shop", "privileged", "pods", "CREATE", "denied", "0"]
    assert rows[1][6].endswith("denied request: privileged pod privileged")
    assert rows[2] == ["web", "no-team", "pods", "CREATE", "allowed", "1", "<none>"]
    assert rows[4] == ["<none>", "shop", "namespaces", "CREATE", "denied", "0",
                       "ValidatingAdmissionPolicy 'namespace-owner.static.k8s.io' with binding "
                       "'namespace-owner-binding.static.k8s.io' denied request: a namespace needs an owner label"]
    # Every column starts where its header does.
    starts = [lines[0].index(header) for header in ("NAME ", "RESOURCE", "OPERATION", "DECISION")]
    assert all(line[start - 3:start - 1] == "  " for line in lines[1:] for start in starts)

    code, out, _ = _cli("review", str(manifests), str(tmp_path / "objects.yaml"), "-o", "wide")
    lines = out.splitlines()
    assert _columns(lines[0])[-4:] == ["PATCH", "ERRORS", "POLICIES", "INPUT"]
    ok = _columns(lines[1])
    assert ok[-4:] == ["1", "1", "add-managed.static.k8s.io,no-privileged.static.k8s.io,node-pinned.static.k8s.io,"
                                 "pinned-images.static.k8s.io,team-label.static.k8s.io",
                       str(tmp_path / "objects.yaml")]


def test_test_and_diff_tables(tmp_path: Path) -> None:
    code, out, err = _cli("test", str(EXAMPLES / "tests"), "-o", "wide")
    assert code == 0, err
    lines = out.splitlines()
    assert _columns(lines[0]) == ["TEST", "CASE", "RESULT", "DETAIL", "FILE"]
    assert all(_columns(line)[2:] == ["PASS", "<none>", str(EXAMPLES / "tests" / "examples.test.yaml")]
               for line in lines[1:])

    live, new = tmp_path / "live", tmp_path / "new"
    live.mkdir()
    new.mkdir()
    (live / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS[:2]))
    (new / "policies.yaml").write_text(yaml.safe_dump_all(MANIFESTS[:2]).replace("privileged pod", "refused pod"))
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(OBJECTS))
    code, out, err = _cli("diff", str(live), str(new), str(tmp_path / "objects.yaml"), "-o", "table")
    assert code == 3, err
    lines = out.splitlines()
    assert _columns(lines[0]) == ["NAMESPACE", "NAME", "RESOURCE", "OPERATION", "ENDPOINT", "DIFFERENCE", "DETAIL",
                                  "POLICIES"]
    assert len(lines) == 2
    row = _columns(lines[1])
    assert row[:6] == ["shop", "privileged", "pods", "CREATE", "validate", "denial_message"]
    assert row[-1] == "no-privileged.static.k8s.io/no-privileged-binding.static.k8s.io"
    code, out, _ = _cli("diff", str(live), str(live), str(tmp_path / "objects.yaml"), "-o", "table")
    assert (code, out) == (0, "No differences in 5 request(s).\n")


# -- on a terminal ----------------------------------------------------------------------------------


def test_on_a_terminal_the_table_is_the_default_and_no_color_takes_the_colour_away() -> None:
    shown = _on_terminal("review", str(EXAMPLES), str(DENY_PRIVILEGED))
    assert shown.splitlines()[0].split()[:5] == ["NAMESPACE", "NAME", "RESOURCE", "OPERATION", "DECISION"]
    assert f"{RED}denied{RESET_}" in shown
    for line in (("review", str(EXAMPLES), str(DENY_PRIVILEGED), "--no-color"),
                 ("--no-color", "review", str(EXAMPLES), str(DENY_PRIVILEGED)),
                 ("test", "--no-color", str(EXAMPLES / "tests"), "-o", "text")):
        plain = _on_terminal(*line)
        assert "\x1b[" not in plain and ("denied" in plain or "PASS" in plain)
    assert _on_terminal("test", str(EXAMPLES / "tests")).splitlines()[0].split() == ["TEST", "CASE", "RESULT"]


RESET_ = "\x1b[0m"
