"""Runtime representation of Kubernetes CEL value types (Quantity, IP, CIDR, URL, Semver, ...).

cel-expr-python can only exchange plain values with Python functions, so a Kubernetes value is a dict
tagged with its type name. The checker sees the abstract type; only our functions look inside.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

TYPE_TAG = "@k8s"


def to_engine(value: Any) -> Any:
    """A Python function's result as the engine can take it back: inside lists and maps the engine refuses
    ``datetime.timedelta``/``datetime.datetime`` but takes the protobuf well-known types, which it turns
    into CEL durations and timestamps."""
    if isinstance(value, datetime.timedelta):
        total = (value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1000
        nanoseconds = getattr(value, "nanoseconds", total)
        seconds, nanos = divmod(abs(nanoseconds), 1_000_000_000)
        sign = -1 if nanoseconds < 0 else 1
        return duration_pb2.Duration(seconds=sign * seconds, nanos=sign * nanos)
    if isinstance(value, datetime.datetime):
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(value.astimezone(datetime.UTC) if value.tzinfo else value)
        return stamp
    if isinstance(value, list):
        return [to_engine(item) for item in value]
    if isinstance(value, dict):
        return {key: to_engine(item) for key, item in value.items()}
    return value


def holds_time_values(value: Any) -> bool:
    if isinstance(value, datetime.timedelta | datetime.datetime):
        return True
    if isinstance(value, list):
        return any(holds_time_values(item) for item in value)
    if isinstance(value, dict):
        return any(holds_time_values(item) for item in value.values())
    return False


def make_opaque(type_name: str, **payload: Any) -> dict[str, Any]:
    return {TYPE_TAG: type_name, **payload}


def opaque_type_name(value: Any) -> str | None:
    if isinstance(value, dict):
        tag = value.get(TYPE_TAG)
        if isinstance(tag, str):
            return tag
    return None


def to_json_value(value: Any, opaque_to_string: Mapping[str, Callable[[dict[str, Any]], str]]) -> Any:
    """The JSON form of a CEL result (``staticadm cel eval``): Kubernetes types as canonical strings,
    bytes as base64, durations as seconds (``"3600s"``), timestamps as RFC 3339."""
    if isinstance(value, bool) or value is None or isinstance(value, int | float | str):
        return value
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.timedelta):
        return format_duration(value)
    if isinstance(value, datetime.datetime):
        return format_timestamp(value)
    if isinstance(value, list):
        return [to_json_value(item, opaque_to_string) for item in value]
    if isinstance(value, dict):
        type_name = opaque_type_name(value)
        if type_name is not None and type_name in opaque_to_string:
            return opaque_to_string[type_name](value)
        return {_json_key(key): to_json_value(item, opaque_to_string) for key, item in value.items()}
    return str(value)


def _json_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def format_duration(value: datetime.timedelta) -> str:
    total_micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if total_micros < 0 else ""
    seconds, micros = divmod(abs(total_micros), 1_000_000)
    if micros:
        return f"{sign}{seconds}.{micros:06d}".rstrip("0") + "s"
    return f"{sign}{seconds}s"


def format_timestamp(value: datetime.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + "Z"
