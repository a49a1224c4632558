"""Lists of objects, as kubectl writes them, expanded into the objects they hold.

``kubectl get pods -o yaml`` writes a ``v1 List`` whose items carry their own apiVersion and kind;
kube-apiserver's own list answers (``kubectl get --raw``, client libraries) are typed lists such as
``v1 PodList`` or ``apps/v1 DeploymentList`` whose items carry neither. Nothing is ever admitted as a
List: kube-apiserver only admits the objects, one request each, so every command that reads objects
expands a list into its items, in order, labelled by their place (``items[3]``; a list inside a list
``items[1].items[0]``), and a request built for "a List" would be a silent wrong answer.

A kind counts as a typed list when it is ``<Kind>List`` and its ``items`` is an array: every built-in
kind has one, and so does every custom resource (kube-apiserver serves ``<Kind>List`` for each CRD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from staticadm.json_types import json_type_name

#: The generic list kubectl writes; its items say what they are.
GENERIC_LIST = ("v1", "List")


class ObjectListError(ValueError):
    """A list that cannot be expanded; the message starts with the place of the problem."""


@dataclass(frozen=True, slots=True)
class ListedObject:
    #: Where in the document the object was: "" for the document itself, else ``items[i]`` (nested:
    #: ``items[i].items[j]``).
    item: str
    value: Any


def is_list(document: Any) -> bool:
    """Whether ``document`` is a List of objects rather than an object."""
    if not isinstance(document, dict):
        return False
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if (api_version, kind) == GENERIC_LIST:
        return True
    return isinstance(kind, str) and len(kind) > 4 and kind.endswith("List") and isinstance(api_version, str) \
        and isinstance(document.get("items"), list)


def expand_lists(document: Any) -> list[ListedObject]:
    """The objects ``document`` stands for: itself, or each item of a list (lists in lists flattened, as
    kubectl flattens them). A typed list's items get the list's apiVersion and its kind without ``List``
    when they lack them, as kube-apiserver leaves them out of its list answers."""
    if not is_list(document):
        return [ListedObject("", document)]
    found: list[ListedObject] = []
    _expand(document, "", found)
    return found


def _expand(document: dict[str, Any], prefix: str, found: list[ListedObject]) -> None:
    api_version, kind = document.get("apiVersion"), document.get("kind")
    items = document.get("items")
    where = prefix or kind
    if items is None:
        return
    if not isinstance(items, list):
        raise ObjectListError(f"{where}: items must be an array, got {json_type_name(items)}")
    typed = (api_version, kind) != GENERIC_LIST
    item_kind = str(kind)[:-len("List")] if typed else ""
    for index, item in enumerate(items):
        label = f"{prefix}.items[{index}]" if prefix else f"items[{index}]"
        if typed:
            if not isinstance(item, dict):
                raise ObjectListError(f"{label}: a {kind} item must be a {item_kind} object, got "
                                      f"{json_type_name(item)}")
            declared = (item.get("apiVersion", api_version), item.get("kind", item_kind))
            if declared != (api_version, item_kind):
                raise ObjectListError(f"{label}: a {api_version} {kind} holds {item_kind} objects, this item is "
                                      f"{declared[0]} {declared[1]}")
            item = {"apiVersion": api_version, "kind": item_kind, **item}
        if is_list(item):
            _expand(item, label, found)
        else:
            found.append(ListedObject(label, item))
