"""The names error messages give JSON value types (shared by manifest decoding and request parsing)."""

from __future__ import annotations

from typing import Any


def json_type_name(value: Any, *, boolean: str = "bool") -> str:
    """``null``, ``number``, ``string``, ``array``, ``object`` and ``boolean`` (Go's json says ``bool``, the
    default; JSON Schema says ``boolean``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return boolean
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
