"""A constant mutation's string writes (``admission/mutating/string_writes.py``) give what the general patchers give.

For every shape of object (metadata or a written map missing, null, a list, empty, holding the key already; keys
in any order) and every patch of the kind the writes take (``add`` of strings at escaped keys of labels and
annotations; an ApplyConfiguration of both maps), the writes either step aside (None: the general patcher decides)
or return exactly what the general patcher returns, as JSON bytes (key order included), leaving the object as it
was. Patches of any other kind, and kinds whose metadata defaulting reads or whose merge schema is deduced, get no
writes at all.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from staticadm.admission.mutating.string_writes import (
    apply_configuration_string_writes,
    json_patch_string_writes,
)
from staticadm.kinds.mutated import inert_json_patch
from staticadm.patch.apply import ApplyConfigurationError, apply_configuration
from staticadm.patch.decode import strings_decode
from staticadm.patch.jsonpatch import JSONPatchError, apply_patch
from tests.examples import examples

#: Keys as a policy writes them (JSON Pointer tokens) and as they land: escapes, an empty key.
KEYS = {"team": "team", "a~1b": "a/b", "x~0y": "x~y", "": "", "app.kubernetes.io~1name": "app.kubernetes.io/name"}
ABSENT: Any = object()


def _string_map() -> st.SearchStrategy[Any]:
    entries = st.dictionaries(st.sampled_from([*KEYS.values(), "other"]), st.sampled_from(["v", "w", "set"]),
                              max_size=4)
    return st.one_of(entries, entries, entries, st.sampled_from([ABSENT, None, [], "text"]))


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    fields: list[tuple[str, Any]] = [("name", "p"), ("namespace", "default")]
    for name in ("labels", "annotations"):
        value = draw(_string_map())
        if value is not ABSENT:
            fields.append((name, value))
    metadata: Any = dict(draw(st.permutations(fields)))
    metadata = draw(st.sampled_from([metadata] * 5 + [ABSENT, None, [], {}]))
    top: list[tuple[str, Any]] = [("apiVersion", draw(st.sampled_from(["v1"] * 6 + [ABSENT, 1]))),
                                  ("kind", draw(st.sampled_from(["Pod"] * 6 + [ABSENT]))),
                                  ("metadata", metadata), ("spec", {"containers": [{"name": "c", "image": "i"}]})]
    return {key: value for key, value in draw(st.permutations(top)) if value is not ABSENT}


@st.composite
def json_patches(draw: st.DrawFn) -> list[dict[str, Any]]:
    operations = []
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["labels", "annotations"]))
        operations.append({"op": "add", "path": f"/metadata/{where}/{draw(st.sampled_from(list(KEYS)))}",
                           "value": draw(st.sampled_from(["v", "set", ""]))})
    return operations


@st.composite
def apply_configurations(draw: st.DrawFn) -> dict[str, Any]:
    maps = draw(st.lists(st.sampled_from(["labels", "annotations"]), min_size=1, max_size=2, unique=True))
    return {"metadata": {name: draw(st.dictionaries(st.sampled_from(list(KEYS.values())),
                                                    st.sampled_from(["v", "set"]), min_size=1, max_size=3))
                         for name in maps}}


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


@settings(max_examples=examples(400), deadline=None)
@given(obj=objects(), operations=json_patches())
def test_json_patch_writes_give_what_the_patcher_gives(obj: dict[str, Any], operations: list[dict[str, Any]]) -> None:
    writes = json_patch_string_writes(operations, "", "v1", "Pod")
    assert writes is not None
    before = copy.deepcopy(obj)
    written = writes.apply(obj)
    assert obj == before
    try:
        patched = apply_patch(obj, operations)
    except JSONPatchError:
        event("the patcher refuses")
        assert written is None
        return
    assert obj == before
    if written is None:
        event("left to the patcher")
        return
    event("written")
    # What the dispatcher does after the patcher: no walk, no retyping, for these operations on such an object.
    assert strings_decode(patched, operations, "", "v1", "Pod")
    assert inert_json_patch(operations, "", "Pod")
    assert _json(written) == _json(patched)


@settings(max_examples=examples(400), deadline=None)
@given(obj=objects(), patch=apply_configurations())
def test_apply_configuration_writes_give_what_the_merge_gives(obj: dict[str, Any], patch: dict[str, Any]) -> None:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        event("no writes without a string apiVersion and kind")  # the dispatcher asks for none then
        return
    writes = apply_configuration_string_writes(patch, "", "Pod", api_version, kind)
    assert writes is not None
    before = copy.deepcopy(obj)
    written = writes.apply(obj)
    assert obj == before
    try:
        merged = apply_configuration(obj, copy.deepcopy(patch))
    except ApplyConfigurationError:
        event("the merge refuses")
        assert written is None
        return
    assert obj == before
    if written is None:
        event("left to the merge")
        return
    event("written")
    assert _json(written) == _json(merged)


@pytest.mark.parametrize("operations", [
    [{"op": "replace", "path": "/metadata/labels/team", "value": "a"}],
    [{"op": "test", "path": "/metadata/labels/team", "value": "a"}, {"op": "add", "path": "/metadata/labels/t",
                                                                      "value": "a"}],
    [{"op": "add", "path": "/metadata/labels/team", "value": 1}],
    [{"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}],
    [{"op": "add", "path": "/metadata/labels/team/x", "value": "a"}],
    [{"op": "add", "path": "/metadata/name", "value": "a"}],
    [{"op": "add", "path": "/spec/nodeName", "value": "a"}],
    [{"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/team"}],
    [],
])
def test_other_json_patches_are_left_to_the_patcher(operations: list[dict[str, Any]]) -> None:
    assert json_patch_string_writes(operations, "", "v1", "Pod") is None


@pytest.mark.parametrize("patch", [
    {"metadata": {"labels": {"team": 1}}},
    {"metadata": {"labels": {}}},
    {"metadata": {"name": "x"}},
    {"metadata": {"labels": {"team": "a"}}, "spec": {"nodeName": "n"}},
    {"metadata": {}},
])
def test_other_apply_configurations_are_left_to_the_merge(patch: dict[str, Any]) -> None:
    assert apply_configuration_string_writes(patch, "", "Pod", "v1", "Pod") is None


def test_kinds_whose_metadata_counts_are_left_to_the_general_patchers() -> None:
    labels = [{"op": "add", "path": "/metadata/labels/team", "value": "a"}]
    # Namespace defaulting reads its own metadata (the name label): retyped, not written as such.
    assert json_patch_string_writes(labels, "", "v1", "Namespace") is None
    assert apply_configuration_string_writes({"metadata": {"labels": {"team": "a"}}}, "", "Namespace", "v1",
                                             "Namespace") is None
    # A kind without a built-in merge schema merges by the deduced one: left to the merge.
    assert apply_configuration_string_writes({"metadata": {"labels": {"team": "a"}}}, "example.com", "Widget",
                                             "example.com/v1", "Widget") is None
    # A JSON Patch of a custom resource's labels is decoded by nothing: written as such.
    assert json_patch_string_writes(labels, "example.com", "v1", "Widget") is not None
