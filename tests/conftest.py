"""Where the public conformance corpora live.

They are third-party data (public Kubernetes and CEL test tables, documentation examples, published
policies of mixed licence) and stay where they lie, in ``../shared/conformance`` beside the repository;
nothing of them is copied into the repository. CI always has that directory. Without it, the tests that
read a corpus are skipped with a reason naming the path; every other test runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
CONFORMANCE = SHARED / "conformance"


def corpus_file(*parts: str) -> Path:
    """A corpus file. Called at import time of a corpus test module: skips that module when the shared
    corpora are not beside the checkout, and fails collection naming the file when they are but it is
    missing (a corpus that vanished from a present ``../shared`` is a broken checkout, not a skip)."""
    if not CONFORMANCE.is_dir():
        pytest.skip(f"public conformance corpora not found at {CONFORMANCE} (clone the repository next to "
                    "'shared/' to run them; CI always does)", allow_module_level=True)
    path = CONFORMANCE.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"conformance corpus file missing: {path}")
    return path
