"""Third-party data stays in ``../shared``: no tracked file of the repository is a copy of one there."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, SHARED


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_no_repository_file_is_a_copy_of_shared_data() -> None:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not beside the checkout: nothing to compare with")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    ours: dict[str, str] = {}
    for name in filter(None, tracked.decode().split("\0")):
        path = REPO_ROOT / name
        # Tiny files (an empty __init__.py, a one-line marker) match by accident, not by copying.
        if path.is_file() and path.stat().st_size >= 64:
            ours.setdefault(_digest(path), name)
    copies = sorted(f"{ours[digest]} == {shared.relative_to(SHARED)}"
                    for shared in SHARED.rglob("*") if shared.is_file() and shared.stat().st_size >= 64
                    and (digest := _digest(shared)) in ours)
    assert not copies, f"repository files copied from {SHARED} (reference them instead): {copies}"
