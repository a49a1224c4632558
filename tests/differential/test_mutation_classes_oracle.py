"""The expectations of ``tests/admission/test_mutation_classes.py`` (issue 44's classes 1 and 2) are kube-apiserver's:
the table replayed through its own admission code (``../shared/oracle``), one process for all of it."""

from __future__ import annotations

from pathlib import Path

from tests.admission.test_mutation_classes import CASES, run_cases
from tests.differential.harness import oracle_answers, oracle_or_skip

oracle_or_skip()


def test_kube_apiserver_answers_the_mutation_classes_as_the_table_says(tmp_path: Path) -> None:
    problems = run_cases(CASES, tmp_path, oracle_answers)
    assert not problems, "\n".join(problems)
