"""Where the public conformance corpora live.

They are third-party data (public Kubernetes and CEL test tables, documentation examples, published
policies of mixed licence) and stay where they lie, in ``../shared/conformance`` beside the repository;
nothing of them is copied into the repository. CI always has that directory. Without it, the tests that
read a corpus are skipped with a reason naming the path; every other test runs.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
CONFORMANCE = SHARED / "conformance"


@pytest.fixture
def short_tmp_path() -> Iterator[Path]:
    """A temporary directory for a test that lays out a node's tree with its unix socket deep inside: an AF_UNIX
    path is at most 107 bytes, and tmp_path is long (its test's name, and pytest-xdist's ``popen-gwN/`` level)."""
    directory = Path(tempfile.mkdtemp(prefix="staticadm-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


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


# -- running the suite in parallel (pytest-xdist) and the slow tests ------------------------------------------------
#
# The README's command runs the suite on every core (pyproject's addopts: ``-n auto --dist loadgroup``) without the
# tests marked ``slow``; CI adds ``--slow``. Every test makes its own temporary directories, sockets and free ports,
# so any two can run at once. The tests of a module that share a module-scoped fixture of ours are put in one
# xdist group, so that fixture is still built once per run (a podman build, the benchmark's smoke run, a corpus
# evaluated by one CLI process) instead of once on each worker; a test may name its own group with
# ``@pytest.mark.xdist_group(name)`` to keep tests that cannot overlap on one worker.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (end-to-end runs of a minute or more: the container "
                          "image, the node install, the benchmark's smoke run); CI runs them")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: an end-to-end test of a minute or more; runs only with --slow (CI)")


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    # pytest's item.fixturenames is public but does not say a fixture's scope; its fixture info does.
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(definition.scope == "module" for definitions in info.name2fixturedefs.values()
                                    for definition in definitions)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
