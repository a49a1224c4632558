"""Reloads keep only what the directory being served needs: no cache grows with every expression seen.

At 205dae0 compiled expressions were remembered process-wide (an LRU of 2048, whatever their size): a
directory whose large expressions changed on every reload grew the daemon by tens of MiB per reload.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from staticadm.cel import CompiledExpression
from staticadm.manifests import load_manifest_directory
from staticadm.manifests.loader import LoadCache
from staticadm.snapshot import build_snapshot


def _write(directory: Path, generation: int, policies: int = 10) -> None:
    for index in range(policies):
        literal = "'" + f"g{generation}-" * 2000 + "'"
        (directory / f"p{index}.static.k8s.io.yaml").write_text(f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: p{index}.static.k8s.io}}
spec:
  matchConstraints: {{resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]}}
  validations:
  - expression: "object.metadata.name != {literal}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: p{index}.static.k8s.io}}
spec: {{policyName: p{index}.static.k8s.io, validationActions: [Deny]}}
""")


def _compiled_alive() -> int:
    gc.collect()
    return sum(1 for item in gc.get_objects() if isinstance(item, CompiledExpression))


# Thirty loads of large expressions, each followed by a full collection: most of a minute. CI runs it.
@pytest.mark.slow
def test_compiled_expressions_of_replaced_documents_are_released(tmp_path: Path) -> None:
    baseline = _compiled_alive()
    served = None
    counts = []
    cache = LoadCache()
    for generation in range(30):
        _write(tmp_path, generation)
        # As the source reloads: each load reuses what the served one checked.
        result = load_manifest_directory(str(tmp_path), cache=cache)
        assert result.errors == ()
        served, cache = build_snapshot(result), result.cache
        counts.append(_compiled_alive() - baseline)
    assert served is not None
    # What is alive is what the last loads compiled (the served snapshot, the loader's memo of the last
    # load), not one more set per reload.
    assert counts[-1] - counts[2] <= 5, counts


def test_a_reload_reuses_the_compiled_policies_of_unchanged_documents(tmp_path: Path) -> None:
    _write(tmp_path, 0, policies=3)
    first = load_manifest_directory(str(tmp_path))
    changed = tmp_path / "p0.static.k8s.io.yaml"
    changed.write_text(changed.read_text().replace("g0-", "g1-"))
    second = load_manifest_directory(str(tmp_path), cache=first.cache)
    assert second.errors == ()
    assert second.compiled_validating[0] is not first.compiled_validating[0]
    assert second.compiled_validating[1:] == first.compiled_validating[1:]
    assert all(a is b for a, b in zip(second.compiled_validating[1:], first.compiled_validating[1:], strict=True))
    # Without the served load's cache everything is checked and compiled afresh.
    third = load_manifest_directory(str(tmp_path))
    assert all(a is not b for a, b in zip(third.compiled_validating, second.compiled_validating, strict=True))
