"""Kubernetes' own admission tests (``../shared/conformance/k8s-admission``), run in process.

Each case is what kube-apiserver's ValidatingAdmissionPolicy / MutatingAdmissionPolicy unit and integration tests
and the static-manifest loader's validation assert (the case names its upstream file and test). A case runs
through the functions ``staticadm review -o json`` and ``staticadm check -o json`` run, and is compared by the
corpus's own ``run.py`` (imported from where it lies, not copied). A case kube-apiserver itself cannot pass for
an out-of-process webhook is listed with that evidence in ``known_gaps.json`` (``k8s-admission``); a listed case
that starts passing fails the run.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from staticadm.kinds import as_admitted
from staticadm.manifests.check import run_check
from staticadm.offline.review import run_review
from tests.conftest import corpus_file

CORPUS_RUNNER = corpus_file("k8s-admission", "run.py")
CASES_DIR = CORPUS_RUNNER.parent / "corpus"
KNOWN_GAPS: dict[str, str] = json.loads((Path(__file__).parent / "known_gaps.json").read_text())["k8s-admission"]
CASES = sorted(path.name for path in CASES_DIR.iterdir() if (path / "expected.json").is_file())
#: Cases that run CEL to the 10,000,000 a policy binding may spend, several seconds of CPU each: run with ``--slow``
#: (as CI runs the suite). cost04 (the budget exceeded under Fail) and cost06 (just under it) stay in every run.
AT_THE_BINDING_BUDGET = frozenset({
    "cost05-policy-budget-exceeded-ignore", "cost07-message-expressions-charged-even-when-valid",
    "cost08-message-budget-ignore"})


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_admission_run", CORPUS_RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNNER = _runner()


def _differences(case: str, empty: Path) -> list[Any]:
    """What ``run.py``'s comparison finds between the case's expectation and staticadm's answer."""
    directory = CASES_DIR / case
    meta = json.loads((directory / "expected.json").read_text())
    manifests = directory / "manifests"
    # Git keeps no empty directory: a case without manifests/ in the checkout is an empty directory (l02).
    # kube-apiserver refuses an absent one ("failed to read manifest directory"), and so does staticadm.
    manifests_dir = str(manifests if manifests.is_dir() else empty)
    out, err = io.StringIO(), io.StringIO()
    if meta["endpoint"] == "check":
        run_check([manifests_dir], "json", out, err)
        return list(RUNNER.compare_check(meta["expect"], json.loads(out.getvalue())))
    request_path = directory / "request.json"
    namespaces = directory / "namespaces.json"
    code = run_review(manifests_dir, str(namespaces) if namespaces.exists() else None, "json", [str(request_path)],
                      io.StringIO(), out, err, endpoint=meta["endpoint"])
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    if code in (1, 2) or not lines:
        return [("staticadm_failed", "rc 0/3/4", f"rc={code} {err.getvalue().strip()}")]
    review = json.loads(lines[0])["review"]
    found = RUNNER.compare_review(meta["expect"], review["response"], json.loads(request_path.read_text()))
    return [difference for difference in found if not _same_when_admitted(difference)]


def _same_when_admitted(difference: Any) -> bool:
    """An ``object`` difference between two objects kube-apiserver holds alike: typed and defaulted.

    The upstream tests compare typed Go objects (``Deployment{Spec: {Replicas: 3}}``, written here in its shortest
    JSON), made by a scheme without defaulting functions, from objects nobody defaulted. kube-apiserver holds a
    built-in object typed and defaulted, and its mutating dispatcher types and defaults it again after every
    mutation (dispatcher.go ``dispatchOne``: ``ConvertToVersion``, then ``GetObjectDefaulter().Default``), which
    staticadm does: a container a mutation adds gets its ``imagePullPolicy`` and ``resources: {}``. So the two are
    compared as kube-apiserver would hold them."""
    if difference[0] != "object":
        return False
    expected, result = (as_admitted(copy.deepcopy(value)) if isinstance(value, dict) else None
                        for value in difference[1:3])
    return expected is not None and result is not None and expected.value == result.value


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case in AT_THE_BINDING_BUDGET else case
                                  for case in CASES])
def test_case(case: str, tmp_path: Path) -> None:
    differences = _differences(case, tmp_path)
    gap = KNOWN_GAPS.get(case)
    if gap is None:
        assert not differences, "\n".join(repr(difference) for difference in differences)
    else:
        assert differences, f"listed as a known gap ({gap}) but passes now: remove it from known_gaps.json"


def test_known_gaps_name_real_cases() -> None:
    assert set(KNOWN_GAPS) <= set(CASES)
    assert AT_THE_BINDING_BUDGET.issubset(CASES)
