"""structlog configuration: JSON lines by default, a readable console format on request.

Field names follow Kubernetes' JSON log format where it has one (``ts`` as a unix float, ``msg``,
``err``) so that the sidecar's lines sort and filter like kube-apiserver's beside it.
"""

from __future__ import annotations

import datetime
import logging as stdlib_logging
import os
import queue
import select
import sys
import threading
from typing import Any, TextIO

import orjson
import structlog

from staticadm.admission.request import AdmissionRequest

LEVELS = ("debug", "info", "warning", "error")


_UTC = datetime.UTC
_METHOD_LEVELS = {"warn": "warning", "exception": "error"}


def _json_line(_logger: Any, method: str, event: dict[str, Any]) -> str:
    """An event as one JSON line, in one step (structlog calls each processor in turn, and a request's log
    line is made on the event loop): what ``add_log_level``, ``TimeStamper(fmt="iso", utc=True, key="ts")``,
    ``format_exc_info``, the renaming of ``event`` to ``msg`` and ``JSONRenderer`` would make, keys in that
    order. The time is RFC 3339 in UTC with microseconds: what journald, Loki and jq read without a conversion."""
    event["level"] = _METHOD_LEVELS.get(method, method)
    event["ts"] = datetime.datetime.now(tz=_UTC).isoformat().replace("+00:00", "Z")
    if "exc_info" in event:
        event = dict(structlog.processors.format_exc_info(_logger, method, event))
    event["msg"] = event.pop("event", "")
    return _orjson_dumps(event)


def _orjson_dumps(event: dict[str, Any], **_kwargs: Any) -> str:
    # default=str: a stray exception or Path in a log call must not lose the whole line.
    try:
        return orjson.dumps(event, default=str).decode()
    except TypeError:
        # A lone surrogate, which orjson refuses: a file name that is not UTF-8 (os.fsdecode keeps its bytes
        # as surrogates); or an integer past 64 bits. The line is written with them escaped, not lost.
        return orjson.dumps(_printable(event), default=str).decode()


def _printable(value: Any) -> Any:
    """``value`` with every string made valid UTF-8: undecodable file-name bytes as ``\\xff``, any other lone
    surrogate as ``\\udXXX``."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_printable(key): _printable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(item) for item in value]
    if isinstance(value, int) and not -(1 << 63) <= value < 1 << 64:
        return str(value)  # orjson's other refusal
    return value


#: Lines waiting for the writer thread before new ones are dropped (a few MB at most).
QUEUE_LINES = 10_000


class NonBlockingWriter:
    """A stream whose writes never block.

    stderr is a pipe to journald or a container runtime; when nobody reads it, a synchronous write
    blocks after ~64 KiB, and with it admission, probes and the watchdog. A line is written at once when
    nothing is pending, it fits one atomic pipe write and the descriptor can take it now; otherwise it
    goes to a bounded queue that a thread writes out, in order. A full queue drops the line and counts
    it (``staticadm_log_lines_dropped``).
    """

    def __init__(self, stream: TextIO, capacity: int = QUEUE_LINES) -> None:
        self._stream = stream
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None
        #: Asks whether the descriptor takes a write now; made once, used under ``_lock``.
        self._poller: select.poll | None = None
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=capacity)
        self._lock = threading.Lock()
        #: Lines queued or being written by the thread: while any, new lines queue behind them.
        self._pending = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._drain, name="log-writer", daemon=True)
        self._thread.start()

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        with self._lock:
            if self._pending == 0 and self._write_now(data):
                return len(text)
            try:
                self._queue.put_nowait(data)
            except queue.Full:
                self.dropped += 1
                return len(text)
            self._pending += 1
        return len(text)

    def flush(self) -> None:
        """Lines are written as they come, or by the writer thread."""

    def close(self, timeout: float = 2.0) -> None:
        """Writes out what is queued, for at most ``timeout`` seconds (a stalled reader is not waited for)."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _write_now(self, data: bytes) -> bool:
        if self._fd is None or len(data) > select.PIPE_BUF:
            return False
        try:
            if self._poller is None:
                self._poller = select.poll()
                self._poller.register(self._fd, select.POLLOUT)
            if not self._poller.poll(0):
                return False
            written = os.write(self._fd, data)
        except OSError:
            return False
        if written < len(data):  # not a pipe (a short write to a file): the thread writes the rest
            self._queue.put_nowait(data[written:])
            self._pending += 1
        return True

    def _drain(self) -> None:
        while True:
            data = self._queue.get()
            if data is None:
                return
            try:
                if self._fd is not None:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(self._fd, view):]
                else:
                    self._stream.write(data.decode("utf-8", "replace"))
                    self._stream.flush()
            except (OSError, ValueError):
                self.dropped += 1
            with self._lock:
                self._pending -= 1


def configure(log_format: str = "json", level: str = "info", stream: TextIO | None = None,
              *, non_blocking: bool = False) -> NonBlockingWriter | None:
    """Configures structlog and the standard library logging; with ``non_blocking`` (the daemon) lines
    go through a :class:`NonBlockingWriter`, which is returned."""
    target: Any = stream or sys.stderr
    writer = NonBlockingWriter(target) if non_blocking else None
    if writer is not None:
        target = writer
    numeric = getattr(stdlib_logging, level.upper())
    # No context variables are bound anywhere (loggers carry their fields with ``bind``), so structlog's
    # merge_contextvars would only copy an empty context into every line.
    processors: list[Any] = [_json_line]
    if log_format == "console":
        processors = [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                      structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(target),
        cache_logger_on_first_use=False,
    )
    # aiohttp and watchdog log through the standard library; route their warnings to the same stream
    # without their access log, which would duplicate our one line per decision.
    stdlib_logging.basicConfig(stream=target, level=max(numeric, stdlib_logging.WARNING),
                               format="%(name)s: %(message)s", force=True)
    stdlib_logging.getLogger("aiohttp.access").setLevel(stdlib_logging.WARNING)
    return writer


def get_logger(name: str = "staticadm") -> Any:
    """A logger assembled from the configuration now (call after :func:`configure`): structlog's lazy
    proxy would assemble it again on every call, ~4 µs of each request's log line or filtered debug call."""
    return structlog.get_logger(name).bind()


def request_fields(endpoint: str, request: AdmissionRequest) -> dict[str, Any]:
    """The fields that identify an admission request in a log line: never the object itself (whole
    objects at info would copy Secrets into logs)."""
    return {
        "endpoint": endpoint,
        "uid": request.uid,
        "kind": f"{request.kind.group}/{request.kind.version}/{request.kind.kind}".lstrip("/"),
        "object": f"{request.namespace}/{request.name}" if request.namespace else request.name,
        "operation": request.operation,
        "user": request.user_info.username,
    }
