"""Generated policy sets and requests through staticadm and through kube-apiserver's own admission code.

Each hypothesis example is a policy set (``generators.py``) and six requests; ``comparison.py`` runs the set
through the oracle (one process for all six) and through staticadm in process, and compares allowed, code,
message, warnings, audit annotations and the patched object. A difference must be one of the documented
limits of ``known_gaps.json``; any other fails the test, which prints the set and the request to reproduce it.

The CI profile is fixed (derandomized, 100 sets: 600 requests). ``STATICADM_DIFFERENTIAL=long`` runs 4,000
random sets (24,000 requests); ``STATICADM_DIFFERENTIAL_SETS=N`` any number. With
``STATICADM_DIFFERENTIAL_REPORT=path`` the run's figures (requests, agreement, differences by class, refusals by
kind) are written there as JSON.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.differential.comparison import GAP_TESTS, KNOWN_GAPS, describe, run_set
from tests.differential.generators import REQUESTS_PER_SET, PolicySet, policy_sets
from tests.differential.harness import oracle_or_skip

oracle_or_skip()

PROFILE = os.environ.get("STATICADM_DIFFERENTIAL", "ci")
SETS = int(os.environ.get("STATICADM_DIFFERENTIAL_SETS", 4000 if PROFILE == "long" else 100))
#: Figures of this run, reported at the end of the module (and written with STATICADM_DIFFERENTIAL_REPORT).
FIGURES: dict[str, Any] = {"sets": 0, "requests": 0, "agree": 0, "by_kind": collections.Counter(),
                           "gaps": collections.Counter(), "refused": collections.Counter(),
                           "unexplained": 0, "denied_by_oracle": 0, "patched_by_oracle": 0,
                           "refusals": collections.Counter(), "refusals_not_confirmed": []}


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    figures = {key: dict(value) if isinstance(value, collections.Counter) else value
               for key, value in FIGURES.items()}
    path = os.environ.get("STATICADM_DIFFERENTIAL_REPORT")
    if path:
        Path(path).write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")


def _record(policy_set: PolicySet, result: Any) -> None:
    FIGURES["sets"] += 1
    for item in result.refused:
        FIGURES["refused"][f"{item[1]}: {item[2][:90]}"] += 1
    for verdict, items in result.refusals.items():
        FIGURES["refusals"][verdict] += len(items)
        if verdict != "confirmed":
            FIGURES["refusals_not_confirmed"] += [f"{verdict}: {item}" for item in items]
    for request in result.requests:
        FIGURES["requests"] += 1
        FIGURES["by_kind"][request.kind] += 1
        FIGURES["agree"] += request.agrees
        FIGURES["denied_by_oracle"] += not request.oracle.allowed
        FIGURES["patched_by_oracle"] += request.oracle.patched is not None
        if request.gap is not None:
            FIGURES["gaps"][request.gap] += 1
        elif request.differences:
            FIGURES["unexplained"] += 1


@settings(max_examples=SETS, deadline=None, derandomize=PROFILE == "ci", database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@pytest.mark.slow
@given(policy_set=policy_sets())
def test_staticadm_decides_as_kube_apiserver(policy_set: PolicySet) -> None:
    assert len(policy_set.reviews) == REQUESTS_PER_SET
    with tempfile.TemporaryDirectory(prefix="staticadm-differential-") as scratch:
        result = run_set(policy_set, Path(scratch))
    _record(policy_set, result)
    assert not result.unexplained, describe(policy_set, result)
    assert not result.refusals.get("contradicted"), result.refusals["contradicted"]


def test_every_known_gap_has_its_test() -> None:
    assert set(KNOWN_GAPS) == set(GAP_TESTS)
