"""CEL object types of built-in Kubernetes kinds, for type-checking expressions as kube-apiserver does.

kube-apiserver's ``TypeChecker`` declares ``object`` and ``oldObject`` with the kind's schema converted
by ``common.SchemaDeclType``. The engine takes object types as protobuf messages, so each kind's schema
(``schemas/kinds.json.gz``, see ``tools/generate_cel_types.py``) becomes a set of messages in a descriptor
pool: properties are fields, named as ``cel.Escape`` names them (``foo-bar`` is ``foo__dash__bar``; a
reserved word such as ``namespace`` gets ``__namespace__`` and, since Kubernetes recognizes keywords as
field names, its plain name too); lists of scalars or objects are repeated fields, maps of them map
fields, and what protobuf cannot nest (lists of lists, maps of lists) or the schema leaves open is
``google.protobuf.Value``, which the checker treats as ``dyn``. These types are used for checking only;
evaluation is unchanged.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, struct_pb2, timestamp_pb2

_RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
                       "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"})
_ESCAPES = re.compile(r"(__|[-./]|[^a-zA-Z0-9\-./_])")
_FIELD = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _FIELD.TYPE_STRING, "int": _FIELD.TYPE_INT64, "int32": _FIELD.TYPE_INT64,
            "int64": _FIELD.TYPE_INT64, "double": _FIELD.TYPE_DOUBLE, "bool": _FIELD.TYPE_BOOL,
            "bytes": _FIELD.TYPE_BYTES}
_WELL_KNOWN = {"timestamp": ".google.protobuf.Timestamp", "duration": ".google.protobuf.Duration",
               "dyn": ".google.protobuf.Value"}


def escape(name: str) -> str | None:
    """``cel.Escape``: the CEL identifier of a property name, or None when it has none."""
    if not name or name[0].isdigit():
        return None
    if name in _RESERVED:
        return f"__{name}__"
    failed = False

    def replace(match: re.Match[str]) -> str:
        nonlocal failed
        text = match.group(0)
        escaped = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}.get(text)
        if escaped is None:
            failed = True
            return ""
        return escaped

    escaped_name = _ESCAPES.sub(replace, name)
    return None if failed else escaped_name


@functools.cache
def _catalog() -> dict[str, Any]:
    data = resources.files("staticadm.cel").joinpath("schemas", "kinds.json.gz").read_bytes()
    return json.loads(gzip.decompress(data))


def has_kind(group: str, version: str, kind: str) -> bool:
    return f"{group}/{version}/{kind}" in _catalog()["kinds"]


@functools.cache
def _kind_versions() -> dict[tuple[str, str], tuple[str, ...]]:
    versions: dict[tuple[str, str], list[str]] = {}
    for key in _catalog()["kinds"]:
        group, version, kind = key.split("/")
        versions.setdefault((group, kind), []).append(version)
    return {key: tuple(found) for key, found in versions.items()}


def kind_versions(group: str, kind: str) -> tuple[str, ...]:
    """The versions of ``group`` that serve a built-in ``kind`` (empty for any other kind)."""
    return _kind_versions().get((group, kind), ())


def kind_definition(group: str, version: str, kind: str) -> tuple[str, Mapping[str, Any]] | None:
    """The definition name of a built-in kind and every definition (the ``kinds.json.gz`` format), or None."""
    catalog = _catalog()
    name = catalog["kinds"].get(f"{group}/{version}/{kind}")
    return (name, catalog["definitions"]) if name is not None else None


@dataclass(frozen=True, slots=True)
class KindType:
    """One kind's root message (``type_name``) and the pool that defines it."""

    type_name: str
    pool: descriptor_pool.DescriptorPool


class _FileBuilder:
    """All messages reachable from one kind, in one file (definitions may reference each other in cycles,
    which separate files could not). Every object is a top-level message; map entries nest in theirs."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.file = _new_file(f"{package}.proto", package)
        self.messages: dict[str, str] = {}
        self.definitions = _catalog()["definitions"]

    def _new_message(self, name: str) -> tuple[descriptor_pb2.DescriptorProto, str]:
        message = self.file.message_type.add(name=f"{name}_{len(self.file.message_type)}")
        return message, f".{self.package}.{message.name}"

    def message_for_definition(self, name: str) -> str | None:
        """The message of a named object definition (None when the definition is not an object)."""
        if name in self.messages:
            return self.messages[name]
        definition = self.definitions.get(name)
        if not isinstance(definition, dict) or "object" not in definition:
            return None
        message, full = self._new_message(re.sub(r"[^A-Za-z0-9]", "_", name.rsplit(".", 1)[-1]))
        self.messages[name] = full
        self._fill(message, full, definition["object"])
        return full

    def _resolve(self, value: Any) -> Any:
        """A reference to a non-object definition is replaced by what it stands for (aliases of scalars)."""
        seen = set()
        while isinstance(value, dict) and "ref" in value and value["ref"] not in seen:
            seen.add(value["ref"])
            target = self.definitions.get(value["ref"], "dyn")
            if isinstance(target, dict) and "object" in target:
                return value
            value = target
        return value

    def _fill(self, message: descriptor_pb2.DescriptorProto, full: str, properties: dict[str, Any]) -> None:
        number = 0
        for name, raw in properties.items():
            escaped = escape(name)
            if escaped is None:
                continue
            # Kubernetes recognizes a keyword as a field name (object.metadata.namespace) besides its escape.
            for field_name in [escaped] + ([name] if name in _RESERVED else []):
                number += 1
                self._field(message, full, field_name, number, self._resolve(raw))

    def _element(self, value: Any, hint: str) -> tuple[int, str]:
        """(protobuf type, type name) of a singular value; containers inside containers are dyn."""
        value = self._resolve(value)
        if isinstance(value, str):
            return (_SCALARS[value], "") if value in _SCALARS else \
                (_FIELD.TYPE_MESSAGE, _WELL_KNOWN.get(value, _WELL_KNOWN["dyn"]))
        if "ref" in value:
            full = self.message_for_definition(value["ref"])
            return (_FIELD.TYPE_MESSAGE, full or _WELL_KNOWN["dyn"])
        if "object" in value:
            message, full = self._new_message(_camel(hint))
            self._fill(message, full, value["object"])
            return _FIELD.TYPE_MESSAGE, full
        return _FIELD.TYPE_MESSAGE, _WELL_KNOWN["dyn"]

    def _field(self, message: descriptor_pb2.DescriptorProto, full: str, name: str, number: int, value: Any) -> None:
        container = _container(value)
        if container is None:
            _add_field(message, full, name, number, None, self._element(value, name))
            return
        inner = self._resolve(value[container])
        element = (_FIELD.TYPE_MESSAGE, _WELL_KNOWN["dyn"]) if _container(inner) else self._element(inner, name)
        _add_field(message, full, name, number, container, element)


def _new_file(name: str, package: str) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto2", dependency=[
        "google/protobuf/timestamp.proto", "google/protobuf/duration.proto", "google/protobuf/struct.proto"])


def _add_field(message: descriptor_pb2.DescriptorProto, full: str, name: str, number: int, container: str | None,
               element: tuple[int, str]) -> None:
    """A field of ``element`` type, alone, in a list (repeated) or as a map's values (a map entry nested in
    the message ``full``, named as protobuf requires: ``<Field>Entry``)."""
    field = message.field.add(name=name, number=number, json_name=name)
    if container is None:
        field.label = _FIELD.LABEL_OPTIONAL
        _set_type(field, element)
        return
    field.label = _FIELD.LABEL_REPEATED
    if container == "list":
        _set_type(field, element)
        return
    entry = message.nested_type.add(name=f"{_camel(name)}Entry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_FIELD.TYPE_STRING, label=_FIELD.LABEL_OPTIONAL)
    _set_type(entry.field.add(name="value", number=2, label=_FIELD.LABEL_OPTIONAL), element)
    _set_type(field, (_FIELD.TYPE_MESSAGE, f"{full}.{entry.name}"))


def _set_type(field: descriptor_pb2.FieldDescriptorProto, element: tuple[int, str]) -> None:
    field.type = element[0]
    if element[1]:
        field.type_name = element[1]


def _container(value: Any) -> str | None:
    """"list" or "map" for a container type, else None."""
    if isinstance(value, dict):
        return "list" if "list" in value else "map" if "map" in value else None
    return None


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]", name) if part) or "Field"


# kube-apiserver's hand-built types of the admission variables (plugin/cel/compile.go BuildRequestType and
# BuildNamespaceType), with its type names, which its error texts show. Namespace's metadata has "UID",
# not "uid", exactly as Kubernetes declares it.
ADMISSION_REQUEST_TYPE = "kubernetes.AdmissionRequest"
NAMESPACE_TYPE = "kubernetes.Namespace"
_STRINGS = {"list": "string"}
_ADMISSION_MESSAGES: dict[str, dict[str, Any]] = {
    "GroupVersionKind": {"group": "string", "version": "string", "kind": "string"},
    "GroupVersionResource": {"group": "string", "version": "string", "resource": "string"},
    "UserInfo": {"username": "string", "uid": "string", "groups": _STRINGS, "extra": {"map": _STRINGS}},
    "AdmissionRequest": {"kind": "GroupVersionKind", "resource": "GroupVersionResource", "subResource": "string",
                         "requestKind": "GroupVersionKind", "requestResource": "GroupVersionResource",
                         "requestSubResource": "string", "name": "string", "namespace": "string",
                         "operation": "string", "userInfo": "UserInfo", "dryRun": "bool", "options": "dyn"},
    "NamespaceSpec": {"finalizers": _STRINGS},
    "NamespaceCondition": {"status": "string", "type": "string", "lastTransitionTime": "timestamp",
                           "message": "string", "reason": "string"},
    "NamespaceStatus": {"conditions": {"list": "NamespaceCondition"}, "phase": "string"},
    "NamespaceMetadata": {"name": "string", "generateName": "string", "namespace": "string",
                          "labels": {"map": "string"}, "annotations": {"map": "string"}, "UID": "string",
                          "creationTimestamp": "timestamp", "deletionGracePeriodSeconds": "int",
                          "deletionTimestamp": "timestamp", "generation": "int", "resourceVersion": "string",
                          "finalizers": _STRINGS},
    "Namespace": {"metadata": "NamespaceMetadata", "spec": "NamespaceSpec", "status": "NamespaceStatus"},
}


def _admission_file() -> descriptor_pb2.FileDescriptorProto:
    file = _new_file("staticadm/admission.proto", "kubernetes")

    def element(value: str) -> tuple[int, str]:
        if value in _SCALARS:
            return _SCALARS[value], ""
        if value in _WELL_KNOWN:
            return _FIELD.TYPE_MESSAGE, _WELL_KNOWN[value]
        return _FIELD.TYPE_MESSAGE, f".kubernetes.{value}"

    for name, fields in _ADMISSION_MESSAGES.items():
        message = file.message_type.add(name=name)
        for number, (field_name, value) in enumerate(fields.items(), start=1):
            container = _container(value)
            inner = value[container] if container else value
            # A map of lists cannot be a protobuf map: its values are ListValue (list(dyn)).
            field_type = (_FIELD.TYPE_MESSAGE, ".google.protobuf.ListValue") if _container(inner) else element(inner)
            _add_field(message, f".kubernetes.{name}", field_name, number, container, field_type)
    return file


def _new_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, duration_pb2, struct_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(_admission_file())
    return pool


@functools.cache
def admission_pool() -> descriptor_pool.DescriptorPool:
    """The descriptor pool every checker uses: the admission variables' types."""
    return _new_pool()


@functools.lru_cache(maxsize=64)
def kind_type(group: str, version: str, kind: str) -> KindType | None:
    """The object type of a built-in kind, or None when the kind has no schema here (checked as dyn)."""
    definition = _catalog()["kinds"].get(f"{group}/{version}/{kind}")
    if definition is None:
        return None
    package = "staticadm.k8s." + re.sub(r"[^A-Za-z0-9]", "_", f"{group or 'core'}_{version}_{kind}")
    builder = _FileBuilder(package)
    root = builder.message_for_definition(definition)
    if root is None:
        return None
    pool = _new_pool()
    pool.Add(builder.file)
    return KindType(root.lstrip("."), pool)
