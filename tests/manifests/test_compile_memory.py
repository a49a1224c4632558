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


def _policy_file(validations: list[str], variable: str = "object.spec.containers.map(c, c.image)") -> str:
    items = "\n".join(f"  - expression: {expression!r}" for expression in validations)
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: edited.static.k8s.io}}
spec:
  matchConstraints: {{resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]}}
  variables:
  - name: images
    expression: {variable!r}
  validations:
{items}
"""


def _programs(result: object) -> list[object]:
    compiled = result.compiled_validating[0]  # type: ignore[attr-defined]
    return [validation.expression for validation in compiled.validations]


def test_an_edited_document_compiles_only_its_new_expressions(tmp_path: Path) -> None:
    path = tmp_path / "edited.static.k8s.io.yaml"
    kept = "variables.images.all(i, i.startsWith('registry.example.com/'))"
    path.write_text(_policy_file([kept, "object.metadata.name != 'a'"]))
    first = load_manifest_directory(str(tmp_path))
    path.write_text(_policy_file([kept, "object.metadata.name != 'b'"]))
    second = load_manifest_directory(str(tmp_path), cache=first.cache)
    assert first.errors == second.errors == ()
    before, after = _programs(first), _programs(second)
    # The unchanged validation (and the variable it reads, linked in) is the program the served load built.
    assert after[0] is before[0]
    assert after[1] is not before[1] and after[1].source == "object.metadata.name != 'b'"  # type: ignore[attr-defined]
    # A third load after an edit of another document still finds it: the kept programs follow what is served.
    (tmp_path / "other.static.k8s.io.yaml").write_text(_policy_file(["true"]).replace("edited.", "other."))
    third = load_manifest_directory(str(tmp_path), cache=second.cache)
    path.write_text(_policy_file([kept, "object.metadata.name != 'c'"]))
    fourth = load_manifest_directory(str(tmp_path), cache=third.cache)
    assert third.errors == fourth.errors == ()
    assert _programs(fourth)[0] is before[0]


def test_a_program_is_compiled_again_when_what_it_depends_on_changes(tmp_path: Path) -> None:
    path = tmp_path / "edited.static.k8s.io.yaml"
    reads_variable = "variables.images.all(i, i.startsWith('registry.example.com/'))"
    path.write_text(_policy_file([reads_variable]))
    first = load_manifest_directory(str(tmp_path))
    assert first.errors == ()
    # The same validation text, but the variable it reads is now an int: type checking must see the change.
    path.write_text(_policy_file([reads_variable], variable="size(object.spec.containers)"))
    second = load_manifest_directory(str(tmp_path), cache=first.cache)
    assert [error.field for error in second.errors] == ["spec.validations[0].expression"], second.errors
    # And the same variable text with a changed earlier declaration is linked again, not reused.
    path.write_text(_policy_file([reads_variable], variable="object.spec.initContainers.map(c, c.image)"))
    third = load_manifest_directory(str(tmp_path), cache=first.cache)
    assert third.errors == ()
    assert _programs(third)[0] is not _programs(first)[0]
