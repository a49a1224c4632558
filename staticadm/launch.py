"""The ``staticadm`` console entry point.

``staticadm serve`` takes about half a second to import what it needs (the CEL engine, aiohttp) before
it installs its SIGHUP handler (reload). A SIGHUP in that window, which systemd sends for ``systemctl
reload``, would end the process with the default action; so it is ignored first thing, before any
heavy import, and the daemon replaces the disposition with its handler once it runs. For the same half second the
cyclic garbage collector is off (``staticadm.server.heap``: it would walk what the imports make over and over).

Ctrl-C in an offline command (a long ``review``, ``test`` or ``audit``) ends it with exit code 130, as a
shell reports a process ended by SIGINT, and one line instead of a traceback; a reader that goes away
(``staticadm check | head``) ends it quietly with 141, as SIGPIPE would. The daemon handles both signals
itself.
"""

from __future__ import annotations

import gc
import os
import signal
import sys

#: 128 + the signal number, as shells report a process the signal ended.
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        gc.disable()  # until staticadm.server.heap.imports_done
    try:
        from staticadm.cli import main as run

        return run()
    except KeyboardInterrupt:
        sys.stderr.write("\nstaticadm: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python would report the same error again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
