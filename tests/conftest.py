"""Where the public conformance corpora live.

They are third-party data (public Kubernetes and CEL test tables, documentation examples, published
policies of mixed licence) and stay where they lie, in ``../shared/conformance`` beside the repository;
nothing of them is copied into the repository. CI always has that directory. Without it, the tests that
read a corpus are skipped with a reason naming the path; every other test runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

import tests.examples

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
# The README's command runs the suite on every core, two workers a core (pyproject's addopts: ``-n auto --dist
# loadgroup``; ``pytest_xdist_auto_num_workers``) without the tests marked ``slow``; CI adds ``--slow``. Every test
# makes its own temporary directories, sockets and free ports, so any two can run at once. The tests of a module that
# share a module-scoped fixture of ours are put in one xdist group, so that fixture is still built once per run (a
# podman build, the benchmark's smoke run, a corpus evaluated by one CLI process) instead of once on each worker; a test
# may name its own group with ``@pytest.mark.xdist_group(name)`` to keep tests that cannot overlap on one worker. A test
# marked ``alone`` bounds a wall-clock time by what the CPU allows (a request answered within half its timeout while
# hostile ones burn their CPU budgets): it runs while no other test of the run does, its worker waiting for the others'
# running tests to end and theirs for it (``_turn``), so the bound it asserts holds as it did without xdist.


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core. Most of the suite's time is spent waiting on the processes it starts (a
    daemon importing and loading, a signal, a file event, a deadline); with one worker per core the cores sat idle
    for about a fifth of the run (on 2 cores: 294 s at 161% CPU; with 4 workers 250-277 s at 190%)."""
    del config
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 2 * cores


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (runs of several seconds or more: the container image, the "
                          "node install, the benchmark's smoke run, CEL run to its largest budgets); CI runs them")


@pytest.hookimpl(trylast=True)  # after pytest's own tmp_path plugin has set up the temporary root
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a test of several seconds or more; runs only with --slow "
                                       "(CI)")
    config.addinivalue_line("markers", "alone: asserts a wall-clock bound set by the CPU it has; no other test of the "
                                       "run runs meanwhile")
    _compiled_code_outside_the_checkout(config)
    # Before the test modules are imported: their property tests' budgets are read as they are defined.
    tests.examples.FULL_BUDGET = bool(config.getoption("--slow"))


#: PYTHONPYCACHEPREFIX's directory in pytest's per-user temporary root (mode 0700, checked by pytest to be the
#: user's own), beside the runs' ``pytest-N`` directories, which pytest's clean-up of old runs does not touch.
PYCACHE_DIRECTORY = "staticadm-pycache"


def _compiled_code_outside_the_checkout(config: pytest.Config) -> None:
    """With PYTHONDONTWRITEBYTECODE set nothing is compiled once: every daemon and command the suite starts (several
    hundred) compiles each module it imports that has no up-to-date ``__pycache__`` entry, and every xdist worker
    rewrites and compiles each test module's asserts on each run (about 4 s of CPU a worker). The setting asks that
    nothing be written into the checkout, so the suite's processes write their compiled code to a cache of their
    own outside it instead (PYTHONPYCACHEPREFIX), kept from one run to the next; the processes that start later
    (xdist's workers and everything they start) inherit it. Without the setting nothing changes."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTEST_XDIST_WORKER") is not None:
        return
    prefix = config._tmp_path_factory.getbasetemp().parent / PYCACHE_DIRECTORY  # type: ignore[attr-defined]
    prefix.mkdir(mode=0o700, exist_ok=True)
    status = prefix.stat()
    if status.st_uid != os.getuid() or status.st_mode & 0o022:
        return  # a --basetemp in a shared directory: no code another user could have written is ever run
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(prefix)


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
    # The tests marked alone last: xdist hands out work in this order, so the other workers' running tests, which an
    # alone test waits for with the rest of the run held back, end there anyway (the run's tail).
    items.sort(key=lambda item: item.get_closest_marker("alone") is not None)
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


@contextlib.contextmanager
def _turn(run_directory: Path, *, alone: bool) -> Iterator[None]:
    """Holds the run's lock shared (any test) or exclusive (a test marked ``alone``) while a test runs. The gate,
    taken exclusively by an ``alone`` test before it waits, stops new tests from starting meanwhile, so it is not
    starved by the other workers' tests following each other."""
    with (run_directory / "alone.gate").open("a") as gate, (run_directory / "alone.lock").open("a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    # Around setup, call and teardown, so the module-scoped fixtures a test builds or ends are inside its turn too.
    basetemp = item.config.option.basetemp
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not basetemp:
        yield  # one process: every test runs alone
        return
    # xdist gives each worker a base temporary directory in the run's own (pytest-N/popen-gwN).
    with _turn(Path(basetemp).parent, alone=item.get_closest_marker("alone") is not None):
        yield
