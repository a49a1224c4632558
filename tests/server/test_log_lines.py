"""The daemon's JSON log line, made in one step, is what structlog's own processors would make of the event."""

from __future__ import annotations

import datetime
import re
import sys
from typing import Any

import orjson
import pytest
import structlog

from staticadm.server import logging as server_logging


def _by_structlog(method: str, event: dict[str, Any]) -> dict[str, Any]:
    """The chain the one step stands for: add_log_level, an ISO UTC TimeStamper at "ts", format_exc_info, "event"
    renamed "msg", JSONRenderer."""
    for processor in (structlog.processors.add_log_level,
                      structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
                      structlog.processors.format_exc_info):
        event = processor(None, method, event)
    event["msg"] = event.pop("event", "")
    return event


@pytest.mark.parametrize("method", ["debug", "info", "warning", "warn", "error", "exception", "critical"])
def test_a_line_has_the_fields_and_order_of_structlogs_processors(method: str) -> None:
    fields = {"worker": 1, "endpoint": "mutate", "uid": "u-1", "mutations": [{"policy": "p", "binding": "b"}],
              "latency_ms": 0.25, "event": "admission mutated"}
    line = orjson.loads(server_logging._json_line(None, method, dict(fields)))
    expected = _by_structlog(method, dict(fields))
    assert list(line) == list(expected)
    del line["ts"], expected["ts"]
    assert line == expected


def test_the_time_is_rfc3339_utc_with_microseconds() -> None:
    before = datetime.datetime.now(tz=datetime.UTC)
    stamp = orjson.loads(server_logging._json_line(None, "info", {"event": "x"}))["ts"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", stamp), stamp
    assert before <= datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_an_exception_is_formatted_as_structlog_formats_it() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        info = sys.exc_info()
        line = orjson.loads(server_logging._json_line(None, "error", {"event": "failed", "exc_info": info}))
        expected = _by_structlog("error", {"event": "failed", "exc_info": info})
    assert line["exception"] == expected["exception"] and "ValueError: boom" in line["exception"]
    assert "exc_info" not in line and line["msg"] == "failed"


def test_a_value_orjson_refuses_is_written_escaped_not_lost() -> None:
    line = orjson.loads(server_logging._json_line(None, "info", {"event": "read", "file": "bad-\udcff.yaml",
                                                                "size": 1 << 70}))
    assert line["file"] == "bad-\\xff.yaml" and line["size"] == str(1 << 70) and line["msg"] == "read"
