"""The ``Object`` and ``JSONPatch`` types of MutatingAdmissionPolicy mutation expressions.

``structs.py`` rewrites ``Object.<path>{...}`` and ``JSONPatch{...}`` into the calls declared here. At
runtime both are tagged maps (see ``values.py``): ``{"@k8s": "Object", "name": "Object.spec", "fields":
{...}}`` and ``{"@k8s": "JSONPatch", "fields": {...}}``. ``to_plain`` turns a result into JSON values
with Kubernetes' checks (``ObjectVal.CheckTypeNamesMatchFieldPathNames``, ``JSONPatchType.Val``).
"""

from __future__ import annotations

from typing import Any

import orjson

from staticadm.cel import structs
from staticadm.cel.libraries.spec import CelFunctionError, Function, OpaqueType, Overload
from staticadm.cel.values import TYPE_TAG, make_opaque, opaque_type_name

#: Lets the environment know it must rewrite struct creation syntax for these types.
STRUCT_SYNTAX = True

_GO_TYPE_NAMES = {bool: "bool", int: "int64", float: "float64", str: "string", bytes: "[]uint8",
                  list: "[]ref.Val", dict: "map[ref.Val]ref.Val", type(None): "structpb.NullValue"}


class ConversionError(Exception):
    """A mutation result Kubernetes would refuse to turn into a patch; the text is Kubernetes'."""


def _set_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields as set: a field set twice in one creation keeps its last value (``structs.SHADOWED_FIELD_PREFIX``)."""
    if not any(key.startswith(structs.SHADOWED_FIELD_PREFIX) for key in fields):
        return fields
    return {key: value for key, value in fields.items() if not key.startswith(structs.SHADOWED_FIELD_PREFIX)}


def make_object(type_name: str, fields: dict[str, Any]) -> dict[str, Any]:
    return make_opaque(structs.OBJECT_TYPE, name=type_name, fields=_set_fields(fields))


def make_jsonpatch(fields: dict[str, Any]) -> dict[str, Any]:
    fields = _set_fields(fields)
    for name in ("op", "path", "from"):
        if name in fields and not isinstance(fields[name], str):
            go_type = _GO_TYPE_NAMES.get(type(fields[name]), type(fields[name]).__name__)
            raise CelFunctionError(f"unexpected type {go_type} for JSONPatchType '{name}' field")
    return make_opaque(structs.JSONPATCH_TYPE, fields=fields)


def struct_field(value: dict[str, Any], field_name: str) -> Any:
    """A field of an Object or of a JSONPatch (its ``value``). An Object's is read from its map form
    (``dynamic.ObjectType.Field``: ``GetFrom`` of ``ObjectVal.Value()``, nested Objects as maps), null when unset;
    a JSONPatch's ``value`` as it was set (``JSONPatchVal.Get``)."""
    fields = value["fields"]
    if is_jsonpatch(value):
        return fields.get(field_name)
    return _read(fields.get(field_name))


def _read(value: Any) -> Any:
    if is_object(value):
        return {key: _read(item) for key, item in value["fields"].items()}
    if isinstance(value, list):
        return [_read(item) for item in value]
    if isinstance(value, dict) and opaque_type_name(value) is None:
        return {key: _read(item) for key, item in value.items()}
    return value


def jsonpatch_text(value: dict[str, Any], field_name: str) -> str:
    """``op``, ``path`` or ``from`` of a JSONPatch, empty when unset (``JSONPatchVal.Get``)."""
    text = value["fields"].get(field_name, "")
    return text if isinstance(text, str) else ""


def struct_has(value: dict[str, Any], field_name: str) -> bool:
    """``has()`` of a field: an Object's when its map has the key (``ObjectType.Field``'s ``IsSet``), a JSONPatch's
    ``op``, ``path`` or ``from`` when not empty and its ``value`` when set (``JSONPatchVal.IsSet``)."""
    fields = value["fields"]
    if is_jsonpatch(value) and field_name != "value":
        return bool(fields.get(field_name))
    return field_name in fields


def is_object(value: Any) -> bool:
    return opaque_type_name(value) == structs.OBJECT_TYPE


def is_jsonpatch(value: Any) -> bool:
    return opaque_type_name(value) == structs.JSONPATCH_TYPE


def to_plain(value: Any, path: str | None = None, errors: list[str] | None = None) -> Any:
    """The JSON value of a CEL result: Objects become maps, checking nested type names against ``path``.

    ``path`` is the type name the value must have when it is an Object (None: its own name, as at
    the root); mismatches are appended to ``errors`` in Kubernetes' wording.
    """
    if errors is None:
        errors = []
    # The engine's results are of these very classes: each is told by its class alone, anything else (a subclass,
    # bytes, a duration) goes the general way.
    cls = value.__class__
    if cls is str or cls is bool or cls is int or cls is float or value is None:
        return value
    if cls is dict:
        tag = value.get(TYPE_TAG)
        if isinstance(tag, str):
            if tag == structs.OBJECT_TYPE:
                return _object_fields(value, path, errors)
            raise ConversionError(f"a {tag} value cannot be written into an object")
        return _plain_map(value, path, errors)
    if cls is list:
        return [to_plain(item, path, errors) for item in value]
    return _to_plain(value, path, errors)


def _object_fields(value: dict[str, Any], path: str | None, errors: list[str]) -> dict[str, Any]:
    name = value["name"]
    expected = name if path is None else path
    if name != expected:
        errors.append(f'unexpected type name "{name}", expected "{expected}", which matches field name path '
                      "from root Object type")
    return {key: to_plain(field, f"{expected}.{key}", errors) for key, field in value["fields"].items()}


def _plain_map(value: dict[Any, Any], path: str | None, errors: list[str]) -> dict[str, Any]:
    plain: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ConversionError(f"map key {key!r} is of type {_GO_TYPE_NAMES.get(type(key), 'unknown')}, "
                                  "not string")
        plain[key] = to_plain(item, path, errors)
    return plain


def _to_plain(value: Any, path: str | None, errors: list[str]) -> Any:
    if is_object(value):
        return _object_fields(value, path, errors)
    if isinstance(value, list):
        return [to_plain(item, path, errors) for item in value]
    if isinstance(value, dict):
        if opaque_type_name(value) is not None:
            raise ConversionError(f"a {opaque_type_name(value)} value cannot be written into an object")
        return _plain_map(value, path, errors)
    if isinstance(value, bytes):
        raise ConversionError("bytes values cannot be written into an object")
    if not isinstance(value, bool | int | float | str | type(None)):
        # Durations and timestamps have no JSON form in Kubernetes' conversion (structpb.Value).
        raise ConversionError(f"a {type(value).__name__} value cannot be written into an object")
    return value


def _object_string(value: dict[str, Any]) -> str:
    return orjson.dumps(to_plain(value)).decode()


def _jsonpatch_string(value: dict[str, Any]) -> str:
    return orjson.dumps({k: to_plain(v) for k, v in value["fields"].items()}).decode()


TYPES = (OpaqueType(structs.OBJECT_TYPE, _object_string), OpaqueType(structs.JSONPATCH_TYPE, _jsonpatch_string))

FUNCTIONS = (
    Function(structs.OBJECT_FUNCTION, (
        Overload("staticadm_object_root", ("string", "map(string, dyn)"), structs.OBJECT_TYPE, make_object),)),
    Function(structs.OBJECT_PART_FUNCTION, (
        Overload("staticadm_object_part", ("string", "map(string, dyn)"), "dyn", make_object),)),
    Function(structs.JSONPATCH_FUNCTION, (
        Overload("staticadm_jsonpatch", ("map(string, dyn)",), structs.JSONPATCH_TYPE, make_jsonpatch),)),
    Function(structs.STRUCT_FIELD_FUNCTION, (
        Overload("staticadm_struct_field", ("dyn", "string"), "dyn", struct_field),)),
    Function(structs.JSONPATCH_TEXT_FUNCTION, (
        Overload("staticadm_jsonpatch_text", (structs.JSONPATCH_TYPE, "string"), "string", jsonpatch_text),)),
    Function(structs.STRUCT_HAS_FUNCTION, (
        Overload("staticadm_struct_has", ("dyn", "string"), "bool", struct_has),)),
)
