"""What ``staticadm test`` counts when test files are unusable, and YAML errors that name the tab at fault."""

from __future__ import annotations

import io
import json
from pathlib import Path

from staticadm.cli import main

#: Seven problems, each a field of its own.
SEVEN_ERRORS = """apiVersion: staticadm.io/v1alpha1
kind: PolicyTest
metadata: {name: seven}
spec:
  manifests: [missing-a, missing-b]
  cases:
    - {name: a, expect: {alowed: true}}
    - {name: b, object: {apiVersion: v1, kind: Pod}, operation: PATCH, expect: {allowed: 3}}
"""
#: Line 4 is indented with a tab.
TABBED = "apiVersion: staticadm.io/v1alpha1\nkind: PolicyTest\nmetadata:\n\tname: tabbed\nspec: {}\n"


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_test_file_with_seven_errors_is_one_unusable_file_with_seven_errors(tmp_path: Path) -> None:
    (tmp_path / "seven.test.yaml").write_text(SEVEN_ERRORS)
    code, out, _ = _cli("test", str(tmp_path))
    assert code == 2
    assert out.count("error: ") == 7, out
    assert out.endswith("0 passed, 0 failed, in 0 case(s) of 1 test file(s); 1 unusable (7 errors in test files)\n")
    code, out, _ = _cli("test", str(tmp_path), "-o", "json")
    assert json.loads(out)["summary"] == {"files": 1, "cases": 0, "passed": 0, "failed": 0, "unusableFiles": 1,
                                          "errors": 7}


def test_a_tab_in_yaml_is_named_as_such_by_test_check_and_review(tmp_path: Path) -> None:
    tab_hint = "line 4, column 1: found character that cannot start any token (a tab: YAML indents with spaces only)"
    (tmp_path / "tabbed.test.yaml").write_text(TABBED)
    code, out, _ = _cli("test", str(tmp_path / "tabbed.test.yaml"))
    assert code == 2 and tab_hint in out
    assert "of 1 test file(s); 1 unusable (1 error in test files)" in out
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "policy.yaml").write_text(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n\tname: p\n")
    code, out, _ = _cli("check", str(manifests))
    assert code == 1 and tab_hint in out
    (manifests / "policy.yaml").unlink()
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n\tname: p\n")
    code, _, err = _cli("review", str(manifests), str(pod))
    assert code == 2 and tab_hint in err
