"""Reloads keep only what the directory being served needs: no cache grows with every expression seen.

At 205dae0 compiled expressions were remembered process-wide (an LRU of 2048, whatever their size): a
directory whose large expressions changed on every reload grew the daemon by tens of MiB per reload.
"""

from __future__ import annotations

import gc
from pathlib import Path

from staticadm.cel import CompiledExpression
from staticadm.manifests import load_manifest_directory
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


def test_compiled_expressions_of_replaced_documents_are_released(tmp_path: Path) -> None:
    baseline = _compiled_alive()
    served = None
    counts = []
    for generation in range(30):
        _write(tmp_path, generation)
        result = load_manifest_directory(str(tmp_path))
        assert result.errors == ()
        served = build_snapshot(result)
        counts.append(_compiled_alive() - baseline)
    assert served is not None
    # What is alive is what the last loads compiled (the served snapshot, the loader's memo of the last
    # load), not one more set per reload.
    assert counts[-1] - counts[2] <= 5, counts
