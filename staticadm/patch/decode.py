"""The typed decoding kube-apiserver makes of a JSON Patch mutation's result, for the built-in kinds.

``jsonPatcher.Patch`` (apiserver/pkg/admission/plugin/policy/mutating/patch/json_patch.go) applies the patch to the
object's JSON and decodes the result into a new object of the request's kind with the strict JSON serializer
(``json.SerializerOptions{Strict: true}``, sigs.k8s.io/json ``UnmarshalStrict``). For a built-in kind that is a
typed Go struct, so the result is refused when it has

- a value of the wrong JSON kind for its field (the first one found, in Go's words: ``json: cannot unmarshal string
  into Go struct field DeploymentSpec.spec.replicas of type int32``), or else
- fields the kind does not have (every one: ``strict decoding error: unknown field "spec.x", unknown field ...``).

Either is an ``apierrors.NewInternalError``, which the dispatcher returns as it is, whatever the failurePolicy
(mutating/dispatcher.go: ``errors.As(err, &statusError)``). Custom resources decode into unstructured objects, where
neither check applies. Only what the patch wrote is looked at: a part of the result equal to the same part of the
object before the patch (or, in a list, to any of its items) decoded in kube-apiserver already, and checking it
against schemas of an older release than the cluster's would refuse the fields that release does not know. The
kinds' schemas are the type checker's (``staticadm/cel/schemas/kinds.json.gz``, with each integer's Go width). A
JSON null decodes into any field; values Kubernetes decodes with a type of its own (``Quantity``, ``IntOrString``,
times, raw extensions) are not looked into.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from staticadm import gofmt
from staticadm.cel.schema_types import kind_definition
from staticadm.patch.jsonpatch import path_keys

#: The Go types of the schema's scalars, which the decoding errors name.
_GO_SCALARS = {"string": "string", "int": "int", "int32": "int32", "int64": "int64", "double": "float64",
               "bool": "bool", "bytes": "[]uint8"}
_INT_RANGES = {"int32": (-(2 ** 31), 2 ** 31 - 1), "int64": (-(2 ** 63), 2 ** 63 - 1), "int": (-(2 ** 63), 2 ** 63 - 1)}
#: The JSON type each of the other scalars decodes from.
_JSON_TYPES = {"string": "string", "bytes": "string", "double": "number", "bool": "bool"}
#: Definitions Kubernetes decodes with an UnmarshalJSON of its own.
_OWN_DECODERS = frozenset({"io.k8s.apimachinery.pkg.api.resource.Quantity",
                           "io.k8s.apimachinery.pkg.util.intstr.IntOrString"})


def decoding_error(obj: Any, before: Any, group: str, version: str, kind: str) -> str | None:
    """Why kube-apiserver cannot decode ``obj`` (a patch's result; ``before`` the object it was applied to) into
    ``group/version, Kind=kind`` (Go's text), or None."""
    found = kind_definition(group, version, kind)
    if found is None:
        return None
    name, definitions = found
    decoder = _Decoder(definitions)
    decoder.value(obj, (before,), {"ref": name}, [], [], "")
    if decoder.type_error is not None:
        return decoder.type_error
    if decoder.unknown:
        return "strict decoding error: " + ", ".join(f'unknown field "{path}"' for path in decoder.unknown)
    return None


#: (definitions, what each reference there resolves to): the definitions are the kinds' (``kind_definition``), one
#: mapping for the process, whose references resolve the same for every object decoded.
_RESOLVED: list[tuple[Mapping[str, Any], dict[str, tuple[Any, str | None]]]] = []


def _resolved_references(definitions: Mapping[str, Any]) -> dict[str, tuple[Any, str | None]]:
    for known, resolved in _RESOLVED:
        if known is definitions:
            return resolved
    resolved = {}
    # Held with the definitions, so that the identity check above names them; any other set of definitions (a
    # test's) replaces them.
    _RESOLVED[:] = [(definitions, resolved)]
    return resolved


#: The operations that write their value at their path (``replace`` of a missing key adds it, as ``add`` does).
_WRITES = frozenset({"add", "replace"})


def strings_decode(obj: Any, operations: Sequence[Mapping[str, Any]], group: str, version: str, kind: str) -> bool:
    """Whether ``obj``, what ``operations`` (a JSON Patch, applied without an error) left of an object, decodes for
    certain without being walked: every operation tests, or writes a string through maps of ``obj`` where the
    kind's schema says string (``string_paths_decode``), so only those strings changed, each where it decodes.
    False says nothing: ``decoding_error`` decides then."""
    paths = []
    for operation in operations:
        op = operation.get("op")
        if op == "test":
            continue
        path = operation.get("path")
        if op.__class__ is not str or op not in _WRITES or not isinstance(path, str) \
                or operation.get("value").__class__ is not str:
            return False
        segments = path_keys(path)
        if not segments:
            return False
        paths.append(segments)
    if not string_paths_decode(tuple(paths), group, version, kind):
        return False
    for segments in paths:
        # A list on the way (an object the schema disagrees with) would not decode as a map: the walk decides.
        node = obj
        for segment in segments[:-1]:
            if node.__class__ is not dict:
                return False
            node = node.get(segment)
        if node.__class__ is not dict:
            return False
    return True


def string_paths_decode(paths: tuple[tuple[str, ...], ...], group: str, version: str, kind: str) -> bool:
    """Whether each of ``paths`` leads, through fields of structs and keys of maps of the kind's schema, to a string
    (any path, for a kind that is not built in: nothing is decoded then)."""
    if sum(len(segment) for segments in paths for segment in segments) > _LONGEST_KEPT_PATHS:
        return _paths_to_strings(paths, group, version, kind)
    return _kept_paths_to_strings(paths, group, version, kind)


#: How long the paths whose answer is kept (``_kept_paths_to_strings``) may be, in all: what a policy writes is
#: short, and what is kept stays small whatever a request names.
_LONGEST_KEPT_PATHS = 1024


def _paths_to_strings(paths: tuple[tuple[str, ...], ...], group: str, version: str, kind: str) -> bool:
    found = kind_definition(group, version, kind)
    if found is None:
        return True
    name, definitions = found
    decoder = _Decoder(definitions)
    for segments in paths:
        schema: Any = {"ref": name}
        for segment in segments:
            resolved, _ = decoder._resolve(schema)
            if resolved.__class__ is str or "list" in resolved:
                return False
            if "map" in resolved:
                schema = resolved["map"]
                continue
            properties = resolved.get("object", {})
            if segment not in properties:
                return False
            schema = properties[segment]
        resolved, _ = decoder._resolve(schema)
        if resolved != "string" and resolved != "bytes":
            return False
    return True


#: ``_paths_to_strings`` of the paths policies write, kept: a fact of the schemas, by the paths themselves.
_kept_paths_to_strings = functools.lru_cache(maxsize=1024)(_paths_to_strings)


class _Decoder:
    """One walk of the object as the Go decoder makes it (object keys in Go's marshalled order: sorted)."""

    def __init__(self, definitions: Mapping[str, Any]) -> None:
        self._definitions = definitions
        self._resolved = _resolved_references(definitions)
        self.type_error: str | None = None
        self.unknown: list[str] = []

    def _resolve(self, schema: Any) -> tuple[Any, str | None]:
        """(the schema a reference stands for, the definition name of a struct)."""
        if schema.__class__ is str or "ref" not in schema:
            return schema, None
        resolved = self._resolved.get(schema["ref"])
        if resolved is None:
            resolved = self._resolved[schema["ref"]] = self._follow(schema)
        return resolved

    def _follow(self, schema: Any) -> tuple[Any, str | None]:
        name = None
        seen = set()
        while isinstance(schema, dict) and "ref" in schema and schema["ref"] not in seen:
            name = schema["ref"]
            seen.add(name)
            if name in _OWN_DECODERS:
                return "dyn", None
            schema = self._definitions.get(name, "dyn")
        return schema, name

    def _go_type(self, schema: Any) -> str:
        schema, name = self._resolve(schema)
        if isinstance(schema, str):
            return _GO_SCALARS.get(schema, "interface {}")
        if "list" in schema:
            return "[]" + self._go_type(schema["list"])
        if "map" in schema:
            return "map[string]" + self._go_type(schema["map"])
        if name is None:
            return "struct"
        package, _, type_name = name.rpartition(".")
        return f"{package.rpartition('.')[2]}.{type_name}"

    def _mismatch(self, value_text: str, schema: Any, struct: str, fields: list[str]) -> None:
        if self.type_error is not None:
            return
        where = f"Go struct field {struct}.{'.'.join(fields)}" if struct or fields else "Go value"
        self.type_error = f"json: cannot unmarshal {value_text} into {where} of type {self._go_type(schema)}"

    def value(self, value: Any, before: tuple[Any, ...], schema: Any, fields: list[str], strict_path: list[str],
              struct: str) -> None:
        """Decodes ``value`` into ``schema`` unless it is one of ``before`` (what it was before the patch);
        ``fields`` is Go's error context (field names from the root), ``strict_path`` the strict errors' (with list
        indexes), ``struct`` the Go struct holding the field."""
        if value is None:
            return
        for old in before:
            # apply_patch copies only the path it writes, so most of the result *is* the object before it: the
            # identity check skips the deep comparison of every untouched subtree (spec, status, ...).
            if value is old or (type(value) is type(old) and value == old):
                return
        resolved, name = self._resolve(schema)
        if resolved.__class__ is str:
            self._scalar(value, resolved, schema, struct, fields)
            return
        if "list" in resolved:
            if not isinstance(value, list):
                self._mismatch(gofmt.json_type(value), schema, struct, fields)
                return
            items = tuple(item for old in before if isinstance(old, list) for item in old)
            for index, item in enumerate(value):
                self.value(item, items, resolved["list"], fields, [*strict_path, f"[{index}]"], struct)
            return
        if value.__class__ is not dict and not isinstance(value, dict):
            self._mismatch(gofmt.json_type(value), schema, struct, fields)
            return
        # The one map before it (the common case: a patched map and the map it was) is read without a tuple.
        only = before[0] if len(before) == 1 and before[0].__class__ is dict else None
        if only is not None:
            keys = sorted([key for key, item in value.items() if only.get(key, _kept) is not item])
        else:
            keys = _changed_keys(before, value)
        if not keys:
            return
        if "map" in resolved:
            element = resolved["map"]
            for key in keys:
                item = value[key]
                if item.__class__ is str and (element == "string" or element == "bytes"):
                    # A string where the schema says string (annotations, labels): it decodes.
                    continue
                below = ((only[key],) if key in only else ()) if only is not None else _below(before, key)
                self.value(item, below, element, fields, _joined(strict_path, key), struct)
            return
        properties = resolved.get("object", {})
        own_struct = name.rpartition(".")[2] if name is not None else struct
        for key in keys:
            if key not in properties:
                if not any(isinstance(old, dict) and key in old for old in before):
                    self.unknown.append("".join(_joined(strict_path, key)))
                continue
            item, field = value[key], properties[key]
            if item.__class__ is str and (field == "string" or field == "bytes"):
                continue
            below = ((only[key],) if key in only else ()) if only is not None else _below(before, key)
            self.value(item, below, field, [*fields, key], _joined(strict_path, key), own_struct)

    def _scalar(self, value: Any, scalar: str, schema: Any, struct: str, fields: list[str]) -> None:
        if value.__class__ is str and (scalar == "string" or scalar == "bytes"):
            return
        if scalar in _INT_RANGES:
            if isinstance(value, bool) or not isinstance(value, int | float):
                self._mismatch(gofmt.json_type(value), schema, struct, fields)
                return
            low, high = _INT_RANGES[scalar]
            integral = isinstance(value, int) or (math.isfinite(value) and value == int(value))
            if not integral or not low <= int(value) <= high:
                self._mismatch(f"number {gofmt.marshal_json(value)}", schema, struct, fields)
            return
        expected = _JSON_TYPES.get(scalar)
        if expected is None:
            return  # dyn, times and durations: decoded by types of their own
        if gofmt.json_type(value) != expected:
            self._mismatch(gofmt.json_type(value), schema, struct, fields)


def _changed_keys(before: tuple[Any, ...], value: dict[str, Any]) -> list[str]:
    """The keys of ``value`` whose items are not ``_kept``, sorted: most of a patched map is the map before it, so
    only what changed is sorted and walked."""
    if not before:
        return sorted(value)
    return [key for key in sorted(value) if not _kept(before, key, value[key])]


def _kept(before: tuple[Any, ...], key: str, item: Any) -> bool:
    """Whether ``item`` is the very value one of ``before`` holds at ``key``: a part the patch did not touch
    (apply_patch shares them), decoded already and a known field, so neither walked nor paid a lookup list for."""
    # A loop rather than any(): a generator per key of every decoded map would cost more than the check saves.
    for old in before:  # noqa: SIM110
        if old.__class__ is dict and old.get(key, _kept) is item:
            return True
    return False


def _below(before: tuple[Any, ...], key: str) -> tuple[Any, ...]:
    return tuple(old[key] for old in before if isinstance(old, dict) and key in old)


def _joined(path: list[str], key: str) -> list[str]:
    return [*path, f".{key}"] if path else [key]
