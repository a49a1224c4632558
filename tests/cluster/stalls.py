"""How long the daemon's event loop is held, seen from a process of its own.

The stand-in kube-apiserver runs in the test's (or benchmark's) process: while it builds a 40 MB list it holds
that process's interpreter, so a probe made from there would time the stand-in, not the daemon.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_PROBE = """
import socket, sys, threading, time
path, longest, done = sys.argv[1], 0.0, threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
while not done.is_set():
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(120)
        sock.connect(path)
        sock.sendall(b"GET /livez HTTP/1.1\\r\\nHost: staticadm\\r\\nConnection: close\\r\\n\\r\\n")
        while sock.recv(65536):
            pass
    longest = max(longest, time.monotonic() - started)
    time.sleep(0.005)
print(longest)
"""


class LivezProbe:
    """``GET /livez`` over the daemon's unix socket every 5 ms until :meth:`longest` is asked."""

    def __init__(self, socket_path: Path) -> None:
        self._process = subprocess.Popen([sys.executable, "-c", _PROBE, str(socket_path)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)

    def longest(self) -> float:
        """The longest round trip seen, in seconds (the probe stops)."""
        output, _ = self._process.communicate("", timeout=150)
        return float(output)
