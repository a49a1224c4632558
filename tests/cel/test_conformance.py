"""Runs every case of the shared CEL conformance corpora through ``staticadm cel eval --jsonl``.

Each case passes, or is listed with its reason in ``known_gaps.json`` beside this file. A listed case
that starts passing fails the run too, so the list never goes stale.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file
from tests.server import forked

CORPORA = ("cel_library_cases.json", "cel_spec_cases.json")
KNOWN_GAPS: dict[str, str] = json.loads((Path(__file__).parent / "known_gaps.json").read_text())["cases"]


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for corpus in CORPORA:
        cases.extend(json.loads(corpus_file("cel", corpus).read_text()))
    return cases


ALL_CASES = _cases()


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    """One CLI process evaluates the whole corpus, exactly as a policy author's tooling would."""
    lines = "".join(json.dumps({"expr": case["expr"]}) + "\n" for case in ALL_CASES)
    completed = forked.run([sys.executable, "-m", "staticadm", "cel", "eval", "--jsonl"], input=lines, timeout=600)
    assert completed.returncode == 0, completed.stderr
    outputs = [json.loads(line, parse_float=Decimal) for line in completed.stdout.splitlines()]
    assert len(outputs) == len(ALL_CASES)
    return {case["id"]: output for case, output in zip(ALL_CASES, outputs, strict=True)}


def _normalize(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, list):
        return [_normalize(item) for item in value]
    if isinstance(value, dict):
        return {key: _normalize(item) for key, item in value.items()}
    return value


def _numbers_equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, (int, Decimal)) and isinstance(actual, (int, Decimal)):
        if isinstance(expected, Decimal) != isinstance(actual, Decimal):
            return False  # a double must not come back as an int, nor the reverse
        return Decimal(expected) == Decimal(actual) or (expected != expected and actual != actual)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(_numbers_equal(e, a) for e, a in zip(expected, actual,
                                                                                         strict=True))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(_numbers_equal(v, actual[k]) for k, v in expected.items())
    return expected == actual


def case_outcome(case: dict[str, Any], output: dict[str, Any]) -> str | None:
    """None when the case passes, otherwise why not."""
    if case["expect_error"] is None:
        if "value" not in output:
            return f"expected {case['expect']!r}, got {output.get('phase')} error {output.get('error')!r}"
        if not _numbers_equal(_normalize(case["expect"]), output["value"]):
            return f"expected {case['expect']!r}, got {output['value']!r}"
        return None
    if "value" in output:
        return f"expected an error containing {case['expect_error']!r}, got value {output['value']!r}"
    if case["error_kind"] is not None and output["phase"] != case["error_kind"]:
        return f"expected a {case['error_kind']} error, got {output['phase']} error {output['error']!r}"
    if case["expect_error"] not in output["error"]:
        return f"expected error containing {case['expect_error']!r}, got {output['error']!r}"
    return None


@pytest.mark.parametrize("case", ALL_CASES, ids=[case["id"] for case in ALL_CASES])
def test_conformance_case(case: dict[str, Any], results: dict[str, dict[str, Any]]) -> None:
    failure = case_outcome(case, results[case["id"]])
    if case["id"] in KNOWN_GAPS:
        assert failure is not None, f"known gap {case['id']} now passes: remove it from known_gaps.json"
        pytest.xfail(KNOWN_GAPS[case["id"]])
    assert failure is None, f"{case['expr']}: {failure}"


def test_known_gaps_name_real_cases() -> None:
    ids = {case["id"] for case in ALL_CASES}
    assert set(KNOWN_GAPS) <= ids
