"""The ``staticadm`` console entry point.

``staticadm serve`` takes about half a second to import what it needs (the CEL engine, aiohttp) before
it installs its SIGHUP handler (reload). A SIGHUP in that window, which systemd sends for ``systemctl
reload``, would end the process with the default action; so it is ignored first thing, before any
heavy import, and the daemon replaces the disposition with its handler once it runs.
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from staticadm.cli import main as run

    return run()
