"""The daemon fixture from tests/server."""

from tests.server.harness import make_daemon

__all__ = ["make_daemon"]
