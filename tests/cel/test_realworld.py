"""Published admission policies (``../shared/conformance/realworld``) through ``staticadm check``.

Each case directory holds one author's policies as static manifests, judged accepted or refused as
kube-apiserver would (``tools/verdicts.json``). The corpus is third-party content of mixed licence, so
it is read where it lies beside the repository and never copied in; without it these tests skip.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file
from tests.server import forked

REALWORLD = corpus_file("realworld", "tools", "verdicts.json").parent.parent


def _case_dirs() -> list[Path]:
    return sorted(path for path in (REALWORLD / "cases").glob("*/static") if path.is_dir())


@pytest.fixture(scope="module")
def reports() -> dict[str, dict[str, Any]]:
    """One ``staticadm check -o json`` process over every case directory, keyed by case name."""
    directories = _case_dirs()
    completed = forked.run([sys.executable, "-m", "staticadm", "check", "-o", "json", *map(str, directories)],
                           timeout=600)
    assert completed.returncode in (0, 1), completed.stderr
    document = json.loads(completed.stdout)
    assert len(document["directories"]) == len(directories)
    return {Path(report["directory"]).parent.name: report for report in document["directories"]}


def _verdicts() -> dict[str, dict[str, str]]:
    if not (REALWORLD / "tools" / "verdicts.json").is_file():
        return {}
    verdicts: dict[str, dict[str, str]] = json.loads((REALWORLD / "tools" / "verdicts.json").read_text())
    return verdicts


VERDICTS = _verdicts()


def test_every_case_has_a_verdict() -> None:
    assert {path.parent.name for path in _case_dirs()} == set(VERDICTS)


@pytest.mark.parametrize("case", sorted(VERDICTS))
def test_check_outcome_matches_kube_apiserver(case: str, reports: dict[str, dict[str, Any]]) -> None:
    report = reports[case]
    outcome = "accepted" if report["valid"] else "rejected"
    errors = [error["message"] for error in report["errors"]]
    assert outcome == VERDICTS[case]["expected"], f"{case}: {VERDICTS[case].get('reason', '')} errors: {errors}"


@pytest.mark.parametrize(
    "case",
    ["116-volcano-vap-pods", "123-pawtograder-preview-namespace-names", "124-devpolaris-require-app-owner-label"],
)
def test_has_misuse_is_reported_in_cel_go_words(case: str, reports: dict[str, dict[str, Any]]) -> None:
    messages = [error["message"] for error in reports[case]["errors"]]
    assert messages, case
    assert all("invalid argument to has() macro" in message for message in messages), messages
