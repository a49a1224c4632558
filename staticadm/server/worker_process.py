"""The entry point of one worker process of ``serve --workers N`` (``python -m staticadm.server.worker_process``).

The supervisor (``workers.py``) starts it with the worker's spec in the environment and the listeners and the
control socket as inherited descriptors where its zygote (``zygote.py``) cannot fork one; it runs the daemon
(``main.py``) on them. Kept apart from both so that neither imports the other: the daemon uses the supervisor's
side, the worker's process uses both.
"""

from __future__ import annotations

import gc
import os


def main() -> int:
    gc.disable()  # until staticadm.server.heap.imports_done
    from staticadm.server.main import serve_worker
    from staticadm.server.workers import WORKER_ENVIRONMENT, WorkerSpec

    return serve_worker(WorkerSpec.decode(os.environ.pop(WORKER_ENVIRONMENT)))


if __name__ == "__main__":
    # Run as a module, this file is __main__; the messages unpickled are classes of the importable
    # staticadm.server.workers, imported by main().
    raise SystemExit(main())
