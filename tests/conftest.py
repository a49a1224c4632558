"""Where the public conformance corpora live.

The authoritative copy is ``../shared/conformance`` beside the repository (CI has it); a fresh clone with
nothing beside it uses the snapshot in ``tests/corpora/conformance`` (same files, see its README). Either
way a missing corpus fails the run; it is never skipped.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
_BESIDE = SHARED / "conformance"
_VENDORED = REPO_ROOT / "tests" / "corpora" / "conformance"
CONFORMANCE = _BESIDE if _BESIDE.is_dir() else _VENDORED


def corpus_file(*parts: str) -> Path:
    """A corpus file; raises (failing collection with its path) when it is absent."""
    path = CONFORMANCE.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"conformance corpus file missing: {path} (expected in {_BESIDE} or {_VENDORED})")
    return path
