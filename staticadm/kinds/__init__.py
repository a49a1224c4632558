"""Built-in objects as kube-apiserver holds them when admission runs: typed round trip, then defaulting.

kube-apiserver decodes a request's object into the Go struct of its kind, defaults it, and admission sees
that struct as encoding/json writes it. A plain object given to the offline commands (``review -f``, ``diff``,
``test``, audit-log replay) is brought to the same form here: :mod:`staticadm.kinds.typed` (the round trip,
from the Go struct facts of ``go_types.json.gz``) then :mod:`staticadm.kinds.defaulting`. Kinds that are not
built in (custom resources) stay as given: kube-apiserver keeps them unstructured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from staticadm.kinds.defaulting import apply_defaults
from staticadm.kinds.go_types import go_types
from staticadm.kinds.typed import TypedObjectError, round_trip

__all__ = ["TypedObject", "TypedObjectError", "as_admitted"]


@dataclass(frozen=True, slots=True)
class TypedObject:
    """A built-in object as admission sees it, and what getting there changed."""

    value: dict[str, Any]
    #: Fields Kubernetes' defaulting set (``spec.containers[0].imagePullPolicy``).
    defaulted: tuple[str, ...]
    #: Fields the kind's struct does not have, which kube-apiserver drops on decoding.
    dropped: tuple[str, ...]


def as_admitted(obj: dict[str, Any]) -> TypedObject | None:
    """``obj`` typed and defaulted as kube-apiserver would before admission, or None when its apiVersion and
    kind are not a built-in kind. Raises :class:`TypedObjectError` naming the field a value does not fit."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    types = go_types()
    type_id = types.kind_type(api_version, kind)
    if type_id is None:
        return None
    value, notes = round_trip(obj, type_id, types)
    defaulted = apply_defaults(value, type_id, types)
    return TypedObject(value, tuple(defaulted), tuple(notes.dropped))
