"""The reload contract, in process: what one ``ManifestSource.reload`` serves, keeps and reports."""

from __future__ import annotations

import os
from pathlib import Path

from staticadm.source import ManifestSource, ReloadStatus


def _policy(name: str, expression: str = "object.metadata.name != 'forbidden'") -> str:
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}.static.k8s.io}}
spec:
  matchConstraints: {{resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]}}
  validations:
  - expression: "{expression}"
"""


def _binding(name: str) -> str:
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}.static.k8s.io}}
spec: {{policyName: {name}.static.k8s.io, validationActions: [Deny]}}
"""


def _source(directory: Path, **options: bool) -> ManifestSource:
    directory.chmod(0o755)
    return ManifestSource(directory, **options)


def test_a_valid_directory_is_served_and_an_identical_one_is_not_reloaded(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a") + "---\n" + _binding("a"))
    source = _source(tmp_path)
    first = source.reload("startup")
    assert first.status is ReloadStatus.SUCCESS and first.previous is None
    assert source.current is first.served and first.served is not None
    assert (first.served.policies, first.served.bindings) == (1, 1)
    assert [p.name for p in first.served.snapshot.validating] == ["a.static.k8s.io"]
    again = source.reload("signal")
    assert again.status is ReloadStatus.UNCHANGED and again.served is first.served
    assert source.current is first.served


def test_an_invalid_change_keeps_the_last_good_snapshot_and_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a") + "---\n" + _binding("a"))
    source = _source(tmp_path)
    good = source.reload("startup").served
    (tmp_path / "b.yaml").write_text(_policy("b", "object.spec.replicas ==") + "---\n" + _binding("b"))
    failed = source.reload("watch")
    assert failed.status is ReloadStatus.FAILURE and failed.served is good and source.current is good
    (error,) = failed.errors
    assert error.path == str(tmp_path / "b.yaml") and error.field == "spec.validations[0].expression"
    (tmp_path / "b.yaml").write_text(_policy("b") + "---\n" + _binding("b"))
    fixed = source.reload("watch")
    assert fixed.status is ReloadStatus.SUCCESS and fixed.previous is good
    assert [p.name for p in source.current.snapshot.validating] == ["a.static.k8s.io", "b.static.k8s.io"]  # type: ignore[union-attr]


def test_unchanged_policies_keep_their_compiled_programs_across_reloads(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a") + "---\n" + _binding("a"))
    (tmp_path / "b.yaml").write_text(_policy("b") + "---\n" + _binding("b"))
    source = _source(tmp_path)
    before = source.reload("startup").served
    (tmp_path / "b.yaml").write_text(_policy("b", "object.metadata.name != 'other'") + "---\n" + _binding("b"))
    after = source.reload("watch").served
    assert before is not None and after is not None and after is not before
    (a_before, b_before), (a_after, b_after) = before.snapshot.validating, after.snapshot.validating
    assert a_after.validations[0].expression is a_before.validations[0].expression
    assert b_after.validations[0].expression is not b_before.validations[0].expression


def test_a_reload_keeps_what_did_not_change_and_binds_again_what_did(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a") + "---\n" + _binding("a"))
    (tmp_path / "b.yaml").write_text(_policy("b"))
    (tmp_path / "b-binding.yaml").write_text(_binding("b"))
    source = _source(tmp_path)
    before = source.reload("startup").served
    (tmp_path / "b-binding.yaml").write_text(_binding("b").replace("[Deny]", "[Warn]"))
    after = source.reload("watch").served
    assert before is not None and after is not None
    (a_before, b_before), (a_after, b_after) = before.snapshot.validating, after.snapshot.validating
    assert a_after is a_before  # the same policy, the same binding: not bound again
    assert b_after is not b_before and b_after.bindings[0].spec.validation_actions == ("Warn",)


def test_an_unchanged_file_is_checked_against_the_others_again(tmp_path: Path) -> None:
    # Its own errors come back as they were; what depends on the other files (duplicate names, bindings
    # without their policy) is worked out again.
    (tmp_path / "a.yaml").write_text(_policy("a").replace("spec:", "bogus: 1\nspec:"))
    (tmp_path / "b.yaml").write_text(_policy("b") + "---\n" + _binding("b"))
    source = _source(tmp_path)
    first = source.reload("startup")
    assert [e.field for e in first.errors] == ["bogus"]
    (tmp_path / "c.yaml").write_text(_policy("b"))
    second = source.reload("watch")
    assert [e.field for e in second.errors] == ["bogus", "metadata.name"]
    assert "duplicate name" in second.errors[1].message and second.errors[1].path == str(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").unlink()
    (tmp_path / "b.yaml").write_text(_binding("b"))
    third = source.reload("watch")
    assert [e.field for e in third.errors] == ["bogus", "spec.policyName"]


def test_a_world_writable_file_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(_policy("a") + "---\n" + _binding("a"))
    os.chmod(path, 0o666)
    refused = _source(tmp_path).reload("startup")
    assert refused.status is ReloadStatus.FAILURE and refused.served is None
    assert "is world-writable (mode 0666)" in str(refused.errors[0]) and refused.errors[0].path == str(path)
    allowed = _source(tmp_path, allow_world_writable=True).reload("startup")
    assert allowed.status is ReloadStatus.SUCCESS


def test_a_world_writable_file_emptied_is_refused_and_the_last_good_kept(tmp_path: Path) -> None:
    # An empty file is skipped, as kube-apiserver skips it, but who may write it still counts: a world-writable
    # manifest that any local user empties must not load the directory without its policies.
    path = tmp_path / "a.yaml"
    path.write_text(_policy("a") + "---\n" + _binding("a"))
    source = _source(tmp_path)
    good = source.reload("startup")
    assert good.status is ReloadStatus.SUCCESS
    os.chmod(path, 0o666)
    os.truncate(path, 0)
    emptied = source.reload("watch")
    assert emptied.status is ReloadStatus.FAILURE, emptied
    assert [error.path for error in emptied.errors] == [str(path)]
    assert "is world-writable (mode 0666)" in str(emptied.errors[0])
    assert emptied.served is good.served
    assert [p.name for p in emptied.served.snapshot.validating] == ["a.static.k8s.io"]  # type: ignore[union-attr]


def test_a_binding_dropped_while_its_policy_stays_is_part_of_the_result(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy("a"))
    (tmp_path / "a-binding.yaml").write_text(_binding("a"))
    source = _source(tmp_path)
    source.reload("startup")
    (tmp_path / "a-binding.yaml").unlink()
    result = source.reload("watch")
    assert result.status is ReloadStatus.SUCCESS
    assert result.dropped_bindings == [("a.static.k8s.io", "a.static.k8s.io")]
