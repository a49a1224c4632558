"""Where namespace labels and Namespace objects come from.

kube-apiserver reads them from its informer (with a live GET on a miss); a webhook has no such cache.
A :class:`NamespaceSource` says what it knows about one namespace. What is always known is the
``kubernetes.io/metadata.name`` label, which kube-apiserver sets on every namespace to its name. A
selector or ``namespaceObject`` that needs more than the source knows is an error (handled by the
policy's failurePolicy), never a guess.

This module parses already-read text; reading files is the caller's business (the package is pure).

Stage: under match and prepare inputs. Receives a namespace's name; hands on what is known of it
(:class:`NamespaceInfo`), asked once per request through the request's match view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from staticadm.yamljson import ParseError, parse_stream

NAME_LABEL = "kubernetes.io/metadata.name"

#: The fields ``CreateNamespaceObject`` copies into the ``namespaceObject`` CEL variable.
_NAMESPACE_OBJECT_METADATA = ("name", "generateName", "namespace", "uid", "resourceVersion", "generation",
                              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
                              "annotations", "finalizers")


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    name: str
    #: Every label of the namespace, or None when only the name label is known.
    labels: Mapping[str, str] | None = None
    #: The Namespace as the ``namespaceObject`` variable shows it, or None when unknown.
    object: Mapping[str, Any] | None = None
    #: Why the source could not say more (a cluster view not synced, kube-apiserver unreachable, no such
    #: namespace), when it could have: decisions that need more fail with this, never guess.
    unavailable: str | None = None

    def known_labels(self) -> Mapping[str, str]:
        return self.labels if self.labels is not None else {NAME_LABEL: self.name}


class NamespaceSource(Protocol):
    def lookup(self, name: str) -> NamespaceInfo:
        """What is known about namespace ``name`` (at least its name label)."""
        ...


@dataclass(frozen=True, slots=True)
class WithNamespace:
    """``source`` with one namespace's answer fixed: a request's own namespace, read once before it is
    evaluated, so that every round of its evaluation (and its shadow evaluation) sees the same one."""

    info: NamespaceInfo
    source: NamespaceSource

    def lookup(self, name: str) -> NamespaceInfo:
        return self.info if name == self.info.name else self.source.lookup(name)


class RequestOnlyNamespaces:
    """Knows nothing beyond what every request tells: the namespace's name (and so its name label)."""

    def lookup(self, name: str) -> NamespaceInfo:
        return NamespaceInfo(name)


@dataclass(frozen=True, slots=True)
class StaticNamespaces:
    """Namespaces from a file; namespaces it does not list fall back to the request-only knowledge."""

    namespaces: Mapping[str, NamespaceInfo]

    def lookup(self, name: str) -> NamespaceInfo:
        found = self.namespaces.get(name)
        return found if found is not None else NamespaceInfo(name)


class NamespaceFileError(ValueError):
    pass


def namespace_info_from_object(obj: Mapping[str, Any]) -> NamespaceInfo:
    """A Namespace object (v1) -> what matching and CEL see; raises NamespaceFileError if malformed."""
    if obj.get("kind") != "Namespace" or obj.get("apiVersion") != "v1":
        raise NamespaceFileError(f"expected a v1 Namespace, got apiVersion={obj.get('apiVersion')!r} "
                                 f"kind={obj.get('kind')!r}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise NamespaceFileError("a Namespace must have metadata.name")
    name = metadata["name"]
    raw_labels = metadata.get("labels") or {}
    if not isinstance(raw_labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in raw_labels.items()):
        raise NamespaceFileError(f"namespace {name!r}: metadata.labels must map strings to strings")
    # kube-apiserver defaults this label on every namespace, so a real one always has it.
    labels = {**raw_labels, NAME_LABEL: name}
    shown_metadata = {key: metadata[key] for key in _NAMESPACE_OBJECT_METADATA if key in metadata}
    shown_metadata["labels"] = labels
    shown: dict[str, Any] = {"metadata": shown_metadata}
    for key in ("spec", "status"):
        if isinstance(obj.get(key), dict):
            shown[key] = obj[key]
    return NamespaceInfo(name, MappingProxyType(labels), MappingProxyType(shown))


def parse_namespaces(text: str) -> StaticNamespaces:
    """YAML or JSON: Namespace objects, ``v1`` Lists of them, in one or more documents."""
    try:
        documents = parse_stream(text, json_starts=("{", "["))
    except ParseError as error:
        raise NamespaceFileError(f"cannot parse namespaces: {error.problem}") from error
    found: dict[str, NamespaceInfo] = {}

    def add(value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise NamespaceFileError(f"expected a Namespace or List object, got {type(value).__name__}")
        if (value.get("kind") == "List" and value.get("apiVersion") == "v1") or value.get("kind") == "NamespaceList":
            items = value.get("items") or []
            if not isinstance(items, list):
                raise NamespaceFileError("List items must be an array")
            for item in items:
                add(item)
            return
        info = namespace_info_from_object(value)
        if info.name in found:
            raise NamespaceFileError(f"namespace {info.name!r} is listed twice")
        found[info.name] = info

    for document in documents:
        if isinstance(document, list):
            for item in document:
                add(item)
        else:
            add(document)
    return StaticNamespaces(MappingProxyType(found))
