"""Constant mutations that only write strings to an object's own labels or annotations, applied as such.

The commonest MutatingAdmissionPolicy sets a label or an annotation: a JSON Patch of ``add`` operations at
``/metadata/labels/KEY`` or ``/metadata/annotations/KEY``, or an ApplyConfiguration
``Object{metadata: Object.metadata{labels: {...}}}``. Through the general patchers (``patch/jsonpatch.py``,
``patch/apply.py``) each request pays for what depends only on the mutation and the kind: parsing the paths,
checking that they decode as strings of the kind, checking the ApplyConfiguration against the kind's merge schema,
walking the merge's generic machinery. For a constant mutation (``admission.cel.filter.is_constant``: its value is
the same for every request) all of that is decided once per value and kind here (:func:`json_patch_string_writes`,
:func:`apply_configuration_string_writes`), and a
request's object only gets its maps copied and the strings set (:meth:`StringWrites.apply`).

What :meth:`StringWrites.apply` returns is what the general patcher returns for the same object, key order
included: the object, its metadata and each written map copied once, an existing key replaced where it is, a new
one added last (``_Doc`` of ``jsonpatch.py`` for a JSON Patch; ``_do_map`` of ``apply.py`` for an
ApplyConfiguration, which keeps the live map's keys in place and adds the patch's after them). The strings need no
retyping (``kinds/mutated.py``'s ``inert_*``). For an object whose shape differs from the one these steps assume
(metadata or a written map that is missing where the patcher requires it, or not a map; an apiVersion or kind that
is not a string) it returns None and the general patcher decides, errors included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from staticadm.kinds.mutated import inert_apply_configuration, inert_json_patch
from staticadm.patch.apply import TypeSchema, find_atomics, schema_for, validate_patch_schema
from staticadm.patch.decode import string_paths_decode
from staticadm.patch.jsonpatch import path_keys

#: The maps of ``metadata`` that hold strings and that no defaulting reads.
_STRING_MAPS = ("labels", "annotations")


class StringWrites:
    """A constant mutation's writes, in order: (map of ``metadata``, key, string)."""

    __slots__ = ("_create_missing_maps", "_writes")

    def __init__(self, writes: tuple[tuple[str, str, str], ...], *, create_missing_maps: bool) -> None:
        self._writes = writes
        #: An ApplyConfiguration's merge creates ``metadata`` and a map the object lacks; a JSON Patch ``add`` refuses
        #: a path whose parent is missing (left to the general patcher, for its error).
        self._create_missing_maps = create_missing_maps

    def apply(self, current: Any) -> dict[str, Any] | None:
        """``current`` with the strings written (sharing everything else with it), or None: the general patcher
        decides for this object."""
        if current.__class__ is not dict:
            return None
        create = self._create_missing_maps
        metadata = current.get("metadata", _ABSENT)
        if metadata is _ABSENT and create:
            metadata = {}
        elif metadata.__class__ is not dict:
            return None
        written: dict[str, dict[str, Any]] = {}
        for name, key, value in self._writes:
            entries = written.get(name)
            if entries is None:
                existing = metadata.get(name, _ABSENT)
                if existing is _ABSENT and create:
                    existing = {}
                elif existing.__class__ is not dict:
                    return None
                entries = written[name] = dict(existing)
            entries[key] = value
        mutated = dict(current)
        mutated_metadata = dict(metadata)
        mutated_metadata.update(written)
        mutated["metadata"] = mutated_metadata
        return mutated


_ABSENT: Any = object()


def json_patch_string_writes(operations: Sequence[Mapping[str, Any]], group: str, version: str,
                             kind: str) -> StringWrites | None:
    """The writes of a JSON Patch (plain operations) made only of ``add`` operations of strings at
    ``/metadata/labels/KEY`` or ``/metadata/annotations/KEY`` where ``kind``'s schema says string; None for any other
    patch."""
    if not operations or not inert_json_patch(operations, group, kind):
        return None
    writes: list[tuple[str, str, str]] = []
    for operation in operations:
        value = operation.get("value")
        if operation.get("op") != "add" or "from" in operation or not isinstance(value, str):
            return None
        segments = path_keys(operation["path"])
        if len(segments) != 3 or segments[0] != "metadata" or segments[1] not in _STRING_MAPS:
            return None
        writes.append((segments[1], segments[2], value))
    if not string_paths_decode(tuple(("metadata", name, key) for name, key, _ in writes), group, version, kind):
        return None
    return StringWrites(tuple(writes), create_missing_maps=False)


def apply_configuration_string_writes(patch: Mapping[str, Any], group: str, kind: str, object_api_version: str,
                                      object_kind: str) -> StringWrites | None:
    """The writes of an ApplyConfiguration's patch (plain), for a policy matched as ``group``/``kind``, that only
    merges strings into ``metadata.labels`` or ``metadata.annotations`` of objects that say they are
    ``object_api_version``/``object_kind``, whose built-in merge schema makes both granular maps of strings and
    accepts the patch stamped so; None for any other patch or kind."""
    if not inert_apply_configuration(patch, group, kind):
        return None
    schema = schema_for(object_api_version, object_kind)
    if schema.deduced or not _granular_string_maps(schema):
        return None
    stamped = {**patch, "apiVersion": object_api_version, "kind": object_kind}
    if validate_patch_schema(stamped, schema) or find_atomics(stamped, schema):
        return None
    writes = tuple((name, key, value) for name, entries in patch["metadata"].items() for key, value in entries.items())
    return StringWrites(writes, create_missing_maps=True)


def _granular_string_maps(schema: TypeSchema) -> bool:
    """Whether the merge walks the object, its metadata and both string maps as maps, key by key."""
    root = schema.atom.map
    if root is None or root.atomic:
        return False
    for name in ("apiVersion", "kind"):
        field = root.fields.get(name)
        if field is None or field.scalar != "string":
            return False
    metadata = root.fields.get("metadata")
    if metadata is None or metadata.map is None or metadata.map.atomic:
        return False
    for name in _STRING_MAPS:
        strings = metadata.map.fields.get(name)
        if strings is None or strings.map is None or strings.map.atomic or strings.map.fields \
                or strings.map.elem is None or strings.map.elem.scalar != "string":
            return False
    return True
