"""Runs every documentation scenario through the command line's ``staticadm review -o json``.

Each scenario loads only its own policy files (several define overlapping policies), gets its
Namespace as the namespaces file, and must reach the documented decision. The command runs in the test's
process through the console script's entry point (``staticadm.cli.main``): as 22 subprocesses the groups took
15 s, nearly all of it each process's start-up, where running them here takes under a second; the command as a
process of its own (``python -m staticadm review``) is run by tests/test_colour.py and
tests/admission/test_audit_replay.py. Scenarios that cannot pass
are listed with their reason in ``known_gaps.json``; a listed scenario that starts passing fails too.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from staticadm.cli import main
from tests.conftest import corpus_file

SCENARIOS_DIR = corpus_file("scenarios", "docs_scenarios.json").parent
KNOWN_GAPS: dict[str, str] = json.loads((Path(__file__).parent / "known_gaps.json").read_text())["scenarios"]


def _scenarios() -> list[dict[str, Any]]:
    return json.loads((SCENARIOS_DIR / "docs_scenarios.json").read_text())


ALL_SCENARIOS = _scenarios()


def _group_key(scenario: dict[str, Any]) -> str:
    return json.dumps([scenario["policy_files"], scenario["namespace_object"]], sort_keys=True)


@pytest.fixture(scope="module")
def responses(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """One ``review`` command per (policy files, namespace) group; every request of a group in one call."""
    if not ALL_SCENARIOS:
        pytest.fail(f"the scenario corpus is expected at {SCENARIOS_DIR}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for scenario in ALL_SCENARIOS:
        groups.setdefault(_group_key(scenario), []).append(scenario)
    results: dict[str, dict[str, Any]] = {}
    for number, members in enumerate(groups.values()):
        work = tmp_path_factory.mktemp(f"group{number}")
        manifests = work / "manifests"
        manifests.mkdir()
        for relative in members[0]["policy_files"]:
            shutil.copy(SCENARIOS_DIR / relative, manifests / Path(relative).name)
        command = ["review", "--manifests", str(manifests), "-o", "json"]
        if members[0]["namespace_object"] is not None:
            namespaces = work / "namespaces.json"
            namespaces.write_text(json.dumps(members[0]["namespace_object"]))
            command += ["--namespaces", str(namespaces)]
        for scenario in members:
            request = work / f"{scenario['id']}.json"
            request.write_text(json.dumps(scenario["request"]))
            command.append(str(request))
        stdout, stderr = io.StringIO(), io.StringIO()
        code = main(command, stdin=io.StringIO(), stdout=stdout, stderr=stderr)
        lines = stdout.getvalue().splitlines()
        for index, scenario in enumerate(members):
            # 0 allowed, 3 denied, 4 an evaluation error: each is a decision to compare.
            if code not in (0, 3, 4) or index >= len(lines):
                results[scenario["id"]] = {"error": f"exit {code}: {stderr.getvalue()}"}
            else:
                results[scenario["id"]] = json.loads(lines[index])["review"]
    yield results


def _problems(scenario: dict[str, Any], review: dict[str, Any]) -> list[str]:
    if "error" in review:
        return [review["error"]]
    problems = []
    response = review.get("response", {})
    if review.get("apiVersion") != scenario["request"]["apiVersion"] or review.get("kind") != "AdmissionReview":
        problems.append(f"not an AdmissionReview in the request's apiVersion: {review}")
    if response.get("uid") != scenario["request"]["request"]["uid"]:
        problems.append(f"uid not echoed: {response.get('uid')!r}")
    if response.get("allowed") is not scenario["expect_allowed"]:
        problems.append(f"allowed={response.get('allowed')!r}, expected {scenario['expect_allowed']!r}: {response}")
    expected_message = scenario["expect_message_contains"]
    if expected_message is not None:
        message = response.get("status", {}).get("message", "")
        if expected_message not in message:
            problems.append(f"message {message!r} does not contain {expected_message!r}")
    if not scenario["expect_allowed"]:
        status = response.get("status", {})
        if status.get("code") not in (403, 413, 422) or not status.get("reason"):
            problems.append(f"a denial needs a 403/413/422 code and a reason: {status}")
        if not status.get("message", "").startswith("ValidatingAdmissionPolicy '"):
            problems.append(f"message is not in Kubernetes' format: {status.get('message')!r}")
    for expected_warning in scenario["expect_warnings_contains"] or ():
        if not any(expected_warning in warning for warning in response.get("warnings", ())):
            problems.append(f"no warning contains {expected_warning!r}: {response.get('warnings')}")
    if scenario["expect_warnings_contains"] is None and scenario["expect_allowed"] and response.get("warnings"):
        problems.append(f"unexpected warnings: {response['warnings']}")
    return problems


@pytest.mark.parametrize("scenario", ALL_SCENARIOS, ids=[s["id"] for s in ALL_SCENARIOS])
def test_scenario(scenario: dict[str, Any], responses: dict[str, dict[str, Any]]) -> None:
    problems = _problems(scenario, responses[scenario["id"]])
    gap = KNOWN_GAPS.get(scenario["id"])
    if gap is None:
        assert not problems, "\n".join(problems)
    else:
        assert problems, f"listed as a known gap ({gap}) but passes now: remove it from known_gaps.json"


def test_known_gaps_name_real_scenarios() -> None:
    ids = {scenario["id"] for scenario in ALL_SCENARIOS}
    assert set(KNOWN_GAPS) <= ids
