"""The daemon fixture and a stand-in kube-apiserver per test."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.apiserver import FakeApiServer
from tests.server.harness import free_port, make_daemon


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[FakeApiServer]:
    """A stand-in kube-apiserver, not started: a test may start the daemon first."""
    server = FakeApiServer(tmp_path / "apiserver", free_port())
    yield server
    server.stop()


__all__ = ["apiserver", "make_daemon"]
