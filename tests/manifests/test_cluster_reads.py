"""cluster_reads at every reload: what each policy reads follows its object, never a policy it replaced."""

from __future__ import annotations

from pathlib import Path

from staticadm.manifests import load_manifest_directory
from staticadm.manifests.cluster_reads import AUTHORIZER, NAMESPACE_OBJECT, cluster_reads


def _write(path: Path, expression: str) -> None:
    path.write_text(f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: reads.static.k8s.io}}
spec:
  matchConstraints: {{resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]}}
  validations:
  - expression: {expression!r}
""")


def test_a_reloaded_policy_is_looked_at_again(tmp_path: Path) -> None:
    path = tmp_path / "reads.static.k8s.io.yaml"
    _write(path, "namespaceObject.metadata.name != 'x'")
    first = load_manifest_directory(str(tmp_path))
    assert [entry.reads for entry in cluster_reads(first.policies)] == [(NAMESPACE_OBJECT,)]
    # The same objects again (what a reload of unchanged files hands over): the same answer.
    assert [entry.reads for entry in cluster_reads(first.policies)] == [(NAMESPACE_OBJECT,)]
    _write(path, "authorizer.group('').resource('pods').check('create').allowed()")
    second = load_manifest_directory(str(tmp_path), cache=first.cache)
    assert [entry.reads for entry in cluster_reads(second.policies)] == [(AUTHORIZER,)]
    _write(path, "true")
    third = load_manifest_directory(str(tmp_path), cache=second.cache)
    assert cluster_reads(third.policies) == []
