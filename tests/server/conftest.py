"""The daemon fixture, shared with tests/reliability."""

from tests.server.harness import make_daemon

__all__ = ["make_daemon"]
