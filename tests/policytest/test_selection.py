"""``staticadm test --run REGEX`` (cases by name, as ``go test -run``), ``--fail-only`` and ``-o markdown``."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from staticadm.policytest.selection import CaseSelector, SelectionError, split_pattern
from tests.policytest.test_policytest import DEPLOYMENT, run, write_suite

UNLABELLED = {**DEPLOYMENT, "metadata": {"name": "bare", "namespace": "shop"}}
CASES = [
    {"name": "labelled/allowed", "object": DEPLOYMENT, "expect": {"allowed": True}},
    {"name": "unlabelled/denied", "object": UNLABELLED, "expect": {"allowed": False}},
    # Fails: the unlabelled deployment is denied.
    {"name": "unlabelled/wrongly expected allowed", "object": UNLABELLED, "expect": {"allowed": True}},
]


def test_patterns_split_as_go_splits_them() -> None:
    assert split_pattern("a/b") == ["a", "b"]
    assert split_pattern("a[/]b/c") == ["a[/]b", "c"]
    assert split_pattern("(x/y)|z/w") == ["(x/y)|z", "w"]
    assert split_pattern(r"a\/b/c") == [r"a\/b", "c"]
    assert split_pattern("") == [""]


def test_each_element_searches_its_level_and_deeper_levels_are_free() -> None:
    selector = CaseSelector.parse("team/^unlabelled$/den")
    assert selector.selects("team", "unlabelled/denied")
    assert not selector.selects("team", "unlabelled/wrongly expected allowed")
    assert not selector.selects("other", "unlabelled/denied")
    assert CaseSelector.parse("eam").selects("team", "anything/at all")
    # More elements than the name has levels: the levels there are decide (go test runs such a test).
    assert CaseSelector.parse("team/x/y/z").selects("team", "x")


def test_a_bad_pattern_names_its_element() -> None:
    with pytest.raises(SelectionError, match=r"element 2 \('\(unclosed'\)"):
        CaseSelector.parse("team/(unclosed")


def test_run_selects_cases_and_everything_reports_only_them(tmp_path: Path) -> None:
    path = write_suite(tmp_path, CASES)
    code, out, _ = run("--run", "team/unlabelled/denied", "-o", "json", "--junit", str(tmp_path / "j.xml"), str(path))
    assert code == 0, out
    report = json.loads(out)
    assert [case["case"] for case in report["files"][0]["cases"]] == ["unlabelled/denied"]
    assert report["summary"]["cases"] == 1
    suite = ElementTree.parse(tmp_path / "j.xml").getroot()
    assert [case.get("name") for case in suite.iter("testcase")] == ["unlabelled/denied"]
    code, out, _ = run("--run", "/unlabelled", str(path))
    assert code == 1 and "1 passed, 1 failed, in 2 case(s)" in out


def test_a_pattern_that_selects_nothing_is_an_error_not_a_pass(tmp_path: Path) -> None:
    path = write_suite(tmp_path, CASES)
    code, _, err = run("--run", "team/nothing like this", str(path))
    assert code == 2 and "selects no case" in err
    code, _, err = run("--run", "team/(", str(path))
    assert code == 2 and "is not a regular expression" in err


def test_fail_only_prints_failures_and_counts_everything(tmp_path: Path) -> None:
    path = write_suite(tmp_path, CASES)
    code, out, _ = run("--fail-only", str(path))
    assert code == 1
    assert "unlabelled/wrongly expected allowed" in out and "labelled/allowed" not in out
    assert "unlabelled/denied" not in out
    assert "1 failed, in 3 case(s)" in out
    code, out, _ = run("--fail-only", "-o", "json", str(path))
    report = json.loads(out)
    assert [case["case"] for file in report["files"] for case in file["cases"]] == \
        ["unlabelled/wrongly expected allowed"]
    assert report["summary"] == {"files": 1, "cases": 3, "passed": 2, "failed": 1, "unusableFiles": 0, "errors": 0}
    passing = write_suite(tmp_path / "passing", CASES[:2])
    code, out, _ = run("--fail-only", str(passing))
    assert code == 0 and out.strip() == "2 passed, 0 failed, in 2 case(s) of 1 test file(s)"


def _table_rows(markdown: str) -> list[list[str]]:
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_markdown_is_a_pull_request_comment(tmp_path: Path) -> None:
    path = write_suite(tmp_path, CASES)
    code, out, _ = run("-o", "markdown", str(path))
    assert code == 1
    assert out.startswith("### ❌ staticadm test: failed\n\n2 passed, 1 failed, in 3 case(s) of 1 test file(s)\n")
    rows = _table_rows(out)
    assert rows[0] == ["Result", "File", "Test", "Case", "Details"]
    assert [row[0] for row in rows[2:]] == ["✅ pass", "✅ pass", "❌ FAIL"]
    assert rows[4][3] == "unlabelled/wrongly expected allowed"
    assert rows[4][4].startswith("expected allowed, got denied: ")
    assert "\n" not in rows[4][4] and all(len(row) == 5 for row in rows)
    code, out, _ = run("-o", "markdown", "--fail-only", str(path))
    assert "(failures only)" in out and [row[0] for row in _table_rows(out)[2:]] == ["❌ FAIL"]


def test_markdown_escapes_what_would_break_the_table(tmp_path: Path) -> None:
    path = write_suite(tmp_path, [{"name": "a | b", "object": UNLABELLED, "expect": {"allowed": True}}])
    _, out, _ = run("-o", "markdown", str(path))
    row = _table_rows(out)[2]
    assert len(row) == 5 and row[3] == "a \\| b"


def test_markdown_shows_unusable_files(tmp_path: Path) -> None:
    path = write_suite(tmp_path, CASES)
    (tmp_path / "policies" / "team.yaml").write_text("kind: Nonsense\n")
    code, out, _ = run("-o", "markdown", str(path))
    assert code == 2 and out.startswith("### ⚠️ staticadm test: unusable") and "**unusable**" in out
