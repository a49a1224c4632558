"""A manifest is only as safe as the directories on its resolved path: the daemon refuses a manifest directory, or a
manifest reached through a symbolic link, whose resolved path passes through a directory in which any local user
could replace what the path leads to (world-writable without the sticky bit; with it, an entry on the path that
belongs to another user). Links inside the directory (ConfigMap volumes' ``..data``) stay as they were."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from staticadm.cli import main
from staticadm.source import ManifestSource, ReloadStatus
from tests.manifests.test_check_refusals import POLICY


def _layout(tmp_path: Path, open_mode: int) -> tuple[Path, Path, Path]:
    """manifests/names.yaml -> shared/names.yaml, with shared/ of ``open_mode``."""
    manifests, shared = tmp_path / "manifests", tmp_path / "shared"
    manifests.mkdir(mode=0o755)
    shared.mkdir()
    shared.chmod(open_mode)
    target = shared / "names.yaml"
    target.write_text(POLICY)
    target.chmod(0o644)
    (manifests / "names.yaml").symlink_to(target)
    return manifests, shared, target


def test_a_link_into_a_directory_anyone_may_write_is_refused(tmp_path: Path) -> None:
    manifests, shared, _ = _layout(tmp_path, 0o777)
    refused = ManifestSource(manifests).reload("startup")
    assert refused.status is ReloadStatus.FAILURE and refused.served is None
    [error] = refused.errors
    assert error.path == str(manifests / "names.yaml")
    assert f"resolves through '{shared}' (mode 0777: others may write it)" in error.message
    allowed = ManifestSource(manifests, allow_world_writable=True).reload("startup")
    assert allowed.status is ReloadStatus.SUCCESS
    assert any("a directory on its path is world-writable" in warning.message for warning in allowed.warnings)
    # Closed to others, the same link loads.
    shared.chmod(0o755)
    assert ManifestSource(manifests).reload("startup").status is ReloadStatus.SUCCESS


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_in_a_sticky_directory_the_owner_of_the_entry_decides(tmp_path: Path) -> None:
    # /tmp's mode: anyone may create entries there, but only an entry's owner may replace it.
    manifests, _, target = _layout(tmp_path, 0o1777)
    assert ManifestSource(manifests).reload("startup").status is ReloadStatus.SUCCESS
    os.chown(target, 65534, 65534)
    refused = ManifestSource(manifests).reload("startup")
    assert refused.status is ReloadStatus.FAILURE
    assert f"'{target}' in it belongs to uid 65534" in refused.errors[0].message


def test_a_manifest_directory_inside_one_anyone_may_write_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    manifests = parent / "manifests"
    manifests.mkdir(mode=0o755)
    (manifests / "names.yaml").write_text(POLICY)
    refused = ManifestSource(manifests).reload("startup")
    assert refused.status is ReloadStatus.FAILURE
    assert [error.path for error in refused.errors] == [str(manifests)]
    assert f"manifest directory '{manifests}' resolves through '{parent}'" in refused.errors[0].message


def test_a_configmap_layout_of_links_inside_the_directory_loads(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir(mode=0o755)
    published = manifests / "..2026_12_02_08_00_00.1"
    published.mkdir(mode=0o755)
    (published / "names.yaml").write_text(POLICY)
    (manifests / "..data").symlink_to(published.name)
    (manifests / "names.yaml").symlink_to("..data/names.yaml")
    result = ManifestSource(manifests).reload("startup")
    assert result.status is ReloadStatus.SUCCESS and not result.warnings, result


def test_check_refuses_it_as_the_daemon_does(tmp_path: Path) -> None:
    manifests, shared, _ = _layout(tmp_path, 0o777)
    out = io.StringIO()
    assert main(["check", str(manifests)], stdout=out, stderr=io.StringIO()) == 1
    assert f"resolves through '{shared}'" in out.getvalue() and "refusing to load" in out.getvalue()
    out = io.StringIO()
    assert main(["check", str(manifests), "--allow-world-writable-manifests"], stdout=out, stderr=io.StringIO()) == 0
    assert "a directory on its path is world-writable" in out.getvalue()


def test_links_resolve_as_realpath_does(tmp_path: Path) -> None:
    # What a read walks is where each link really leads, whatever the shape of the link: relative, absolute, a
    # chain, through a linked directory, ending in a dot name.
    from staticadm.manifests.files import PathWalk

    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "f.yaml").write_text("a: 1\n")
    (tmp_path / "dir-link").symlink_to(real)
    links = {
        "relative.yaml": "real/sub/f.yaml",
        "absolute.yaml": str(real / "sub" / "f.yaml"),
        "through-dir.yaml": "dir-link/sub/f.yaml",
        "chain.yaml": "relative.yaml",
        "dot.yaml": "real/sub/.",
        "dotdot.yaml": "real/sub/..",
        "dangling.yaml": "real/missing.yaml",
    }
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    walk = PathWalk()
    for name in [*links, "real/sub/f.yaml"]:
        path = str(tmp_path / name)
        assert walk.resolved(path) == os.path.realpath(path), name
