"""structlog configuration: JSON lines by default, a readable console format on request.

Field names follow Kubernetes' JSON log format where it has one (``ts`` as a unix float, ``msg``,
``err``) so that the sidecar's lines sort and filter like kube-apiserver's beside it.
"""

from __future__ import annotations

import logging as stdlib_logging
import sys
from typing import Any, TextIO

import orjson
import structlog

LEVELS = ("debug", "info", "warning", "error")


def _rename_event(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    event["msg"] = event.pop("event", "")
    return event


def _orjson_dumps(event: dict[str, Any], **_kwargs: Any) -> str:
    # default=str: a stray exception or Path in a log call must not lose the whole line.
    return orjson.dumps(event, default=str).decode()


def configure(log_format: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    numeric = getattr(stdlib_logging, level.upper())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    renderer: Any
    if log_format == "console":
        shared.append(structlog.processors.TimeStamper(fmt="iso", utc=True))
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        shared.append(structlog.processors.TimeStamper(fmt=None, key="ts"))
        shared.append(structlog.processors.format_exc_info)
        shared.append(_rename_event)
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    # aiohttp and watchdog log through the standard library; route their warnings to the same stream
    # without their access log, which would duplicate our one line per decision.
    stdlib_logging.basicConfig(stream=stream or sys.stderr, level=max(numeric, stdlib_logging.WARNING),
                               format="%(name)s: %(message)s", force=True)
    stdlib_logging.getLogger("aiohttp.access").setLevel(stdlib_logging.WARNING)


def get_logger(name: str = "staticadm") -> Any:
    return structlog.get_logger(name)
