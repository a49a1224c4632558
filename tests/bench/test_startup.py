"""bench/startup.py: a row for every command and the daemon's start, each a positive CPU figure; never timings."""

from __future__ import annotations

import pytest

from bench.startup import COMMANDS, measure

# Twelve fresh processes, two of them daemons: with the other bench smoke runs, under --slow.
pytestmark = pytest.mark.slow


def test_every_command_and_the_daemon_start_are_measured() -> None:
    figures = measure(runs=1)
    workers = [f"worker {how} ({what})" for how in ("forked", "fresh") for what in ("CPU", "wall")]
    assert list(figures) == [*(label for label, _ in COMMANDS), "serve (to ready)", *workers]
    assert all(len(seconds) == 1 and seconds[0] > 0 for seconds in figures.values())
