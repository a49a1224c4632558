"""The entry point of one worker process of ``serve --workers N`` (``python -m staticadm.server.worker_process``).

The supervisor (``workers.py``) starts it with the worker's spec in the environment and the listeners and the
control socket as inherited descriptors; it runs the daemon (``main.py``) on them. Kept apart from both so that
neither imports the other: the daemon uses the supervisor's side, the worker's process uses both.
"""

from __future__ import annotations

import gc
import os

#: libuv (uvloop) accepts until a listener's queue is empty; with this set it yields between two accepts (libuv's
#: "give other processes a chance to accept connections"), so connections opened together spread over the workers
#: sharing the listener, as asyncio's loop does them with a backlog of 1 (main.py).
LIBUV_SINGLE_ACCEPT = "UV_TCP_SINGLE_ACCEPT"


def main() -> int:
    gc.disable()  # until staticadm.server.heap.imports_done
    from staticadm.server.main import serve_worker
    from staticadm.server.workers import WORKER_ENVIRONMENT, WorkerSpec

    spec = WorkerSpec.decode(os.environ.pop(WORKER_ENVIRONMENT))
    # Read by libuv when a listener starts: before the event loop exists.
    os.environ.setdefault(LIBUV_SINGLE_ACCEPT, "1")
    return serve_worker(spec)


if __name__ == "__main__":
    # Run as a module, this file is __main__; the messages unpickled are classes of the importable
    # staticadm.server.workers, imported by main().
    raise SystemExit(main())
