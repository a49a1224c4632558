"""Strict typed decoding of JSON-like values into :mod:`staticadm.model` dataclasses.

kube-apiserver's manifest codec is strict: unknown fields and duplicate fields are errors, and a value
of the wrong JSON type cannot be unmarshalled into the Go field. The schema comes from the dataclass
fields (``metadata["json"]``) and their type hints, so the model is the single source of truth.

Go's JSON semantics are kept where they show: field names are case-sensitive, ``null`` leaves the zero
value, and integers must be integral numbers.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from staticadm.json_types import json_type_name

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DecodeIssue:
    field: str
    message: str


def join_field(parent: str, child: str) -> str:
    return f"{parent}.{child}" if parent else child


#: Each model class's resolved type hints and fields by JSON name, found once per process: the model is code,
#: so they never change, and resolving hints is most of decoding a small object (every reload decodes one).
_SCHEMAS: dict[type, tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]] = {}


def _schema(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    schema = _SCHEMAS.get(cls)
    if schema is None:
        by_json = {f.metadata["json"]: f for f in dataclasses.fields(cls) if f.metadata.get("json")}
        schema = _SCHEMAS[cls] = (typing.get_type_hints(cls), by_json)
    return schema


class Decoder:
    """Decodes into one model, collecting what is wrong in :attr:`issues`."""

    def __init__(self) -> None:
        self.issues: list[DecodeIssue] = []

    def decode(self, cls: type[T], value: Any, path: str = "") -> T:
        result = self._value(cls, value, path)
        return typing.cast(T, result)

    def _fail(self, path: str, message: str) -> None:
        self.issues.append(DecodeIssue(path, message))

    def _wrong_type(self, path: str, value: Any, expected: str) -> None:
        where = f' into field "{path}"' if path else ""
        self._fail(path, f"cannot unmarshal {json_type_name(value)}{where} of type {expected}")

    def _value(self, tp: Any, value: Any, path: str) -> Any:
        origin = typing.get_origin(tp)
        if origin in (types.UnionType, typing.Union):
            inner = [arg for arg in typing.get_args(tp) if arg is not type(None)]
            if value is None:
                return None
            return self._value(inner[0], value, path)
        if tp is Any:
            return value
        if origin is tuple:
            return self._sequence(typing.get_args(tp)[0], value, path)
        if origin is Mapping or tp is Mapping:
            value_type = typing.get_args(tp)[1] if typing.get_args(tp) else Any
            return self._mapping(value_type, value, path)
        if dataclasses.is_dataclass(tp):
            return self._struct(typing.cast(type, tp), value, path)
        if tp is str:
            if value is None:
                return ""
            if not isinstance(value, str):
                self._wrong_type(path, value, "string")
                return ""
            return value
        if tp is bool:
            if value is None:
                return False
            if not isinstance(value, bool):
                self._wrong_type(path, value, "bool")
                return False
            return value
        if tp is int:
            if value is None:
                return 0
            if isinstance(value, bool) or not isinstance(value, int):
                self._wrong_type(path, value, "int")
                return 0
            return value
        raise TypeError(f"model type {tp!r} at {path or '<root>'} is not decodable")

    def _sequence(self, item_type: Any, value: Any, path: str) -> tuple[Any, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self._wrong_type(path, value, "array")
            return ()
        return tuple(self._value(item_type, item, f"{path}[{i}]") for i, item in enumerate(value))

    def _mapping(self, value_type: Any, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return types.MappingProxyType({})
        if not isinstance(value, dict):
            self._wrong_type(path, value, "map")
            return types.MappingProxyType({})
        return types.MappingProxyType(
            {key: self._value(value_type, item, f"{path}[{key}]") for key, item in value.items()}
        )

    def _struct(self, cls: type, value: Any, path: str) -> Any:
        if value is None:
            return cls()
        if not isinstance(value, dict):
            self._wrong_type(path, value, "object")
            return cls()
        hints, by_json = _schema(cls)
        kwargs: dict[str, Any] = {}
        for key, item in value.items():
            found = by_json.get(key)
            child = join_field(path, key)
            if found is None:
                self._fail(child, f'strict decoding error: unknown field "{child}"')
                continue
            kwargs[found.name] = self._value(hints[found.name], item, child)
        return cls(**kwargs)
