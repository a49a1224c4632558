"""The Go struct facts of the built-in kinds (``go_types.json.gz``, made by ``tools/generate_go_types.py``).

For each kind of k8s.io/api: its struct's fields in Go's order, each with its JSON name, ``omitempty``, its
type as encoding/json sees it and its ``+default=`` marker. Read once, on first use (about 20 KB compressed).
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

#: A field's default when it has no ``+default=`` marker.
NO_DEFAULT: Any = object()


@dataclass(frozen=True, slots=True)
class GoField:
    """One JSON field of a Go struct. ``ref`` is the data file's type reference (see the generator)."""

    name: str
    #: encoding/json's options: omitempty drops false, 0, "", nil and empty lists and maps; omitzero
    #: (Go 1.24) drops a Go zero value, e.g. a zero metav1.Time, which would otherwise be written null.
    omitempty: bool
    omitzero: bool
    ref: str
    #: The ``+default=`` marker's value (JSON), or :data:`NO_DEFAULT`.
    default: Any


@dataclass(frozen=True, slots=True)
class GoTypes:
    #: (apiVersion, kind) -> the kind's struct id, e.g. ("apps/v1", "Deployment").
    kinds: Mapping[tuple[str, str], str]
    structs: Mapping[str, tuple[GoField, ...]]
    #: Where the facts come from (the generator's commits of k8s.io/api and k8s.io/apimachinery).
    source: Mapping[str, str]

    def kind_type(self, api_version: str, kind: str) -> str | None:
        return self.kinds.get((api_version, kind))


@functools.cache
def go_types() -> GoTypes:
    data = json.loads(gzip.decompress(resources.files("staticadm.kinds").joinpath("go_types.json.gz").read_bytes()))
    kinds = {(group_version, kind): type_id
             for group_version, by_kind in data["kinds"].items() for kind, type_id in by_kind.items()}
    structs = {
        type_id: tuple(GoField(name, bool(omit & 1), bool(omit & 2), ref,
                               NO_DEFAULT if default is None else json.loads(default))
                       for name, omit, ref, default in fields)
        for type_id, fields in data["types"].items()
    }
    return GoTypes(kinds, structs, data["meta"])
