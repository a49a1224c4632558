"""``staticadm test``: discover, select (``--run``), run, report (text, JSON, YAML, Markdown, JUnit XML; all cases
or ``--fail-only``) and the exit code."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO
from xml.etree import ElementTree

from staticadm.atomicfile import write_atomically
from staticadm.colour import Palette
from staticadm.offline.decision_report import API_VERSION
from staticadm.policytest.kyverno import API_VERSION as KYVERNO_API_VERSION
from staticadm.policytest.kyverno import KyvernoTest, is_kyverno_test, parse_kyverno_test, run_kyverno_test
from staticadm.policytest.runner import FileResult, case_to_json, run_file
from staticadm.policytest.selection import CaseSelector, SelectionError
from staticadm.policytest.spec import TestFile, TestFileError, discover
from staticadm.progress import Progress
from staticadm.tables import TABLE_OUTPUTS, write_table
from staticadm.yamltext import dump_yaml

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2


def _summary(results: Sequence[FileResult], errors: Sequence[TestFileError]) -> dict[str, int]:
    """Counts of test files (each file once, however many PolicyTest documents or errors it holds), cases,
    and test files that could not run: with errors in the file itself or unusable manifests."""
    cases = [case for result in results for case in result.cases]
    unusable = {error.path for error in errors} | {result.file for result in results if result.problems}
    return {"files": len({result.file for result in results} | unusable), "cases": len(cases),
            "passed": sum(case.passed for case in cases), "failed": sum(not case.passed for case in cases),
            "unusableFiles": len(unusable), "errors": len(errors)}


def _document(results: Sequence[FileResult], errors: Sequence[TestFileError],
              summary: dict[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TestReport",
        "summary": summary,
        "errors": [str(error) for error in errors],
        "files": [{"file": result.file, "test": result.test, "problems": list(result.problems),
                   "cases": [case_to_json(case) for case in result.cases]} for result in results],
    }


def _text(results: Sequence[FileResult], errors: Sequence[TestFileError], summary: dict[str, int],
          out: TextIO) -> None:
    paint = Palette.for_stream(out)
    for error in errors:
        out.write(f"{paint.bad('error')}: {error}\n")
    for result in results:
        out.write(f"{result.file}: {result.test}\n")
        for problem in result.problems:
            out.write(f"  {paint.bad('UNUSABLE')}  {problem}\n")
        for case in result.cases:
            out.write(f"  {paint.good('PASS') if case.passed else paint.bad('FAIL')}  {case.case}\n")
            for failure in case.failures:
                out.write(f"        {failure}\n")
            for diff in case.diffs:
                out.write("".join(f"        {line}\n" for line in diff.splitlines()))
    unusable = ""
    if summary["unusableFiles"]:
        unusable = f"; {summary['unusableFiles']} unusable"
        if errors:
            unusable += f" ({summary['errors']} error{'s' if summary['errors'] != 1 else ''} in test files)"
    out.write(f"{summary['passed']} passed, {summary['failed']} failed, in {summary['cases']} case(s) of "
              f"{summary['files']} test file(s){unusable}\n")


def failures_only(results: Sequence[FileResult]) -> list[FileResult]:
    """What ``--fail-only`` shows: each file's failed cases, and the files that could not run; the summary
    still counts every case that ran."""
    shown = []
    for result in results:
        failed = tuple(case for case in result.cases if not case.passed)
        if failed or result.problems:
            shown.append(FileResult(result.file, result.test, result.problems, failed))
    return shown


def _cell(text: str) -> str:
    """Text made safe for one GitHub-flavoured Markdown table cell: pipes escaped, lines joined with <br>."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>")


def markdown(results: Sequence[FileResult], errors: Sequence[TestFileError], summary: dict[str, int],
             fail_only: bool) -> str:
    """A pull-request comment: a heading with the verdict and counts, test-file errors, then one table row per
    case (result, test file, test, case, what differed), the diffs in a collapsed block under the table."""
    verdict = ("failed" if summary["failed"] else "unusable" if summary["unusableFiles"]
               else "passed" if summary["cases"] else "no case ran")
    icon = {"passed": "✅", "failed": "❌", "unusable": "⚠️", "no case ran": "⚠️"}[verdict]
    lines = [f"### {icon} staticadm test: {verdict}", "",
             f"{summary['passed']} passed, {summary['failed']} failed, in {summary['cases']} case(s) of "
             f"{summary['files']} test file(s)"
             + (f"; {summary['unusableFiles']} unusable" if summary["unusableFiles"] else "")
             + (" (failures only)" if fail_only else ""), ""]
    for error in errors:
        lines.append(f"- ⚠️ **error**: {_cell(str(error))}")
    for result in results:
        for problem in result.problems:
            lines.append(f"- ⚠️ **unusable** `{_cell(result.file)}` ({_cell(result.test)}): {_cell(problem)}")
    if errors or any(result.problems for result in results):
        lines.append("")
    rows = [(result, case) for result in results for case in result.cases]
    if rows:
        lines += ["| Result | File | Test | Case | Details |", "| --- | --- | --- | --- | --- |"]
        for result, case in rows:
            lines.append(f"| {'✅ pass' if case.passed else '❌ FAIL'} | `{_cell(result.file)}` | {_cell(result.test)} "
                         f"| {_cell(case.case)} | {_cell(chr(10).join(case.failures))} |")
        diffs = [(case, diff) for _, case in rows for diff in case.diffs]
        if diffs:
            lines += ["", "<details><summary>Differences</summary>", ""]
            for case, diff in diffs:
                lines += [f"**{_cell(case.case)}**", "", "```diff", diff, "```", ""]
            lines.append("</details>")
    elif not fail_only:
        lines.append("No case ran.")
    return "\n".join(lines) + "\n"


def _table(results: Sequence[FileResult], errors: Sequence[TestFileError], out: TextIO, *, wide: bool) -> None:
    """A row per case (PASS, FAIL), per unusable test file (UNUSABLE) and per error in a test file (ERROR);
    ``wide``: why, and the file."""
    paint = Palette.for_stream(out)
    rows: list[list[object]] = []
    for error in errors:
        rows.append(["", "", "ERROR", *((str(error), error.path) if wide else ())])
    for result in results:
        if result.problems:
            rows.append([result.test, "", "UNUSABLE", *(("; ".join(result.problems), result.file) if wide else ())])
        for case in result.cases:
            rows.append([result.test, case.case, "PASS" if case.passed else "FAIL",
                         *(("; ".join(case.failures), result.file) if wide else ())])
    write_table(out, ["TEST", "CASE", "RESULT", *(("DETAIL", "FILE") if wide else ())], rows,
                {2: lambda text: paint.good(text) if text == "PASS" else paint.bad(text)},
                empty="No policy tests found.")


def junit_xml(results: Sequence[FileResult], errors: Sequence[TestFileError]) -> bytes:
    """One <testsuite> per test file, one <testcase> per case; unusable files and test-file errors as
    <error> cases, so CI systems show them."""
    root = ElementTree.Element("testsuites", name="staticadm test")
    for result in results:
        suite = ElementTree.SubElement(root, "testsuite", name=f"{result.file}: {result.test}",
                                       tests=str(len(result.cases) or 1),
                                       failures=str(sum(not case.passed for case in result.cases)),
                                       errors=str(int(bool(result.problems))),
                                       time=f"{sum(case.seconds for case in result.cases):.6f}")
        if result.problems:
            case_element = ElementTree.SubElement(suite, "testcase", name="(setup)", classname=result.test,
                                                  time="0")
            error_element = ElementTree.SubElement(case_element, "error", message="unusable test file")
            error_element.text = "\n".join(result.problems)
        for case in result.cases:
            case_element = ElementTree.SubElement(suite, "testcase", name=case.case, classname=result.test,
                                                  file=result.file, time=f"{case.seconds:.6f}")
            if not case.passed:
                failure = ElementTree.SubElement(case_element, "failure", message=case.failures[0])
                failure.text = "\n".join([*case.failures, *case.diffs])
    if errors:
        suite = ElementTree.SubElement(root, "testsuite", name="test files", tests=str(len(errors)), failures="0",
                                       errors=str(len(errors)))
        for error in errors:
            case_element = ElementTree.SubElement(suite, "testcase", name=str(error.path), classname="test files",
                                                  time="0")
            ElementTree.SubElement(case_element, "error", message=str(error))
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)


def _run(test: object, on_request: Callable[[], None], selector: CaseSelector | None) -> FileResult | None:
    if isinstance(test, KyvernoTest):
        return run_kyverno_test(test, on_request, selector)
    assert isinstance(test, TestFile)
    return run_file(test, on_request, selector)


def run_tests(paths: Sequence[str], output: str, junit: str | None, stdout: TextIO, stderr: TextIO,
              run: str | None = None, fail_only: bool = False) -> int:
    """Exit 0 when every selected case passed, 1 when one failed, 2 when a test file or its manifests are
    unusable, no test file was found, or ``run`` selects no case. The JUnit file always holds every case
    that ran; ``fail_only`` narrows what is printed."""
    selector = None
    if run is not None:
        try:
            selector = CaseSelector.parse(run)
        except SelectionError as error:
            stderr.write(f"staticadm test: {error}\n")
            return EXIT_UNUSABLE
    tests, errors = discover(list(paths), [(is_kyverno_test, parse_kyverno_test, KYVERNO_API_VERSION)])
    with Progress(stderr, "running policy tests") as progress:
        results = [result for test in tests if (result := _run(test, progress.advance, selector)) is not None]
    summary = _summary(results, errors)
    shown = failures_only(results) if fail_only else results
    if output == "json":
        stdout.write(json.dumps(_document(shown, errors, summary), indent=2, ensure_ascii=False) + "\n")
    elif output == "yaml":
        stdout.write(dump_yaml(_document(shown, errors, summary)))
    elif output == "markdown":
        stdout.write(markdown(shown, errors, summary, fail_only))
    elif output in TABLE_OUTPUTS:
        _table(shown, errors, stdout, wide=output == "wide")
    else:
        _text(shown, errors, summary, stdout)
    if junit is not None:
        Path(junit).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(Path(junit), junit_xml(results, errors))
    if not tests and not errors:
        stderr.write(f"staticadm test: no PolicyTest documents found in {', '.join(paths)}\n")
        return EXIT_UNUSABLE
    if selector is not None and not results and not errors:
        stderr.write(f"staticadm test: --run {run!r} selects no case (a case's name is TEST/CASE: the test's "
                     "metadata.name, then the case's name)\n")
        return EXIT_UNUSABLE
    if errors or any(result.problems for result in results):
        return EXIT_UNUSABLE
    return EXIT_FAILED if any(not case.passed for result in results for case in result.cases) else EXIT_PASSED
