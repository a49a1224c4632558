"""``staticadm check`` refuses what the daemon refuses to load: a world-writable manifest directory or file is an
error there, with the daemon's own words, unless checked as a daemon started with
``--allow-world-writable-manifests``."""

from __future__ import annotations

import io
import json
from pathlib import Path

from staticadm.cli import main
from staticadm.source import ManifestSource

POLICY = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: names.static.k8s.io}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  validations:
  - expression: "object.metadata.name != 'forbidden'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: names.static.k8s.io}
spec: {policyName: names.static.k8s.io, validationActions: [Deny]}
"""


def _check(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["check", *args], stdout=out, stderr=io.StringIO())
    return code, out.getvalue()


def _directory(tmp_path: Path) -> tuple[Path, Path]:
    directory = tmp_path / "manifests"
    directory.mkdir(mode=0o755)
    manifest = directory / "names.yaml"
    manifest.write_text(POLICY)
    manifest.chmod(0o644)
    return directory, manifest


def test_a_world_writable_file_or_directory_fails_the_check_with_the_daemons_refusal(tmp_path: Path) -> None:
    directory, manifest = _directory(tmp_path)
    assert _check(str(directory))[0] == 0
    for target, mode in ((manifest, 0o666), (directory, 0o777)):
        target.chmod(mode)
        refused = ManifestSource(directory).reload("startup")
        assert refused.served is None and refused.errors
        code, out = _check(str(directory))
        assert code == 1, out
        assert "INVALID" in out and "staticadm serve would refuse to load it" in out
        for error in refused.errors:
            assert f"error: {error}" in out
        code, out = _check(str(directory), "-o", "json")
        assert code == 1 and json.loads(out)["valid"] is False
        target.chmod(0o755 if target.is_dir() else 0o644)


def test_a_world_writable_file_given_with_f_fails_too(tmp_path: Path) -> None:
    _, manifest = _directory(tmp_path)
    manifest.chmod(0o666)
    code, out = _check("-f", str(manifest))
    assert code == 1 and f"manifest file '{manifest}' is world-writable (mode 0666)" in out


def test_an_empty_world_writable_file_fails_as_the_daemon_refuses_it(tmp_path: Path) -> None:
    directory, _ = _directory(tmp_path)
    empty = directory / "later.yaml"
    empty.touch()
    empty.chmod(0o666)
    code, out = _check(str(directory))
    assert code == 1 and f"manifest file '{empty}' is world-writable (mode 0666)" in out, out
    code, out = _check(str(directory), "--allow-world-writable-manifests")
    assert code == 0 and f"warning: {empty}: file is world-writable" in out, out


def test_allowed_as_the_daemon_allows_it_the_check_passes_with_a_warning(tmp_path: Path) -> None:
    directory, manifest = _directory(tmp_path)
    manifest.chmod(0o666)
    assert ManifestSource(directory, allow_world_writable=True).reload("startup").served is not None
    code, out = _check(str(directory), "--allow-world-writable-manifests")
    assert code == 0, out
    assert f"warning: {manifest}: file is world-writable" in out
