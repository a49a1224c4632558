"""What build of staticadm is running, as the daemon's ``/version`` answers it (kube-apiserver's ``/version``
says the same of itself): the release, the git commit when it is known, and the Python and CEL engine under it.

The commit is ``STATICADM_GIT_COMMIT`` when set (an image build records it there), else read from the git
checkout the package runs from (``pip install -e``), without running git; an installed wheel knows none.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path

from staticadm import __version__

GIT_COMMIT_ENV = "STATICADM_GIT_COMMIT"
_CHECKOUT = Path(__file__).resolve().parent.parent


def _git_directory(checkout: Path) -> Path | None:
    dot_git = checkout / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = dot_git.read_text(encoding="utf-8").strip()
        if text.startswith("gitdir:"):
            target = Path(text.removeprefix("gitdir:").strip())
            return target if target.is_absolute() else (checkout / target).resolve()
    return None


def _resolve_ref(git_dir: Path, ref: str) -> str | None:
    common = git_dir
    if (git_dir / "commondir").is_file():  # a worktree keeps its branches in the main repository
        common = (git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    for directory in (git_dir, common):
        loose = directory / ref
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip()
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            commit, _, name = line.partition(" ")
            if name == ref:
                return commit
    return None


def git_commit(checkout: Path = _CHECKOUT) -> str | None:
    """The commit this code was checked out at, or None when nothing says."""
    if os.environ.get(GIT_COMMIT_ENV):
        return os.environ[GIT_COMMIT_ENV]
    try:
        git_dir = _git_directory(checkout)
        if git_dir is None:
            return None
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head or None  # a detached HEAD holds the commit itself
        return _resolve_ref(git_dir, head.removeprefix("ref:").strip())
    except (OSError, UnicodeDecodeError):
        return None


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_info() -> dict[str, str | None]:
    return {"version": __version__, "gitCommit": git_commit(), "pythonVersion": platform.python_version(),
            "celExprPythonVersion": _distribution_version("cel-expr-python"),
            "platform": f"{platform.system().lower()}/{platform.machine()}"}
