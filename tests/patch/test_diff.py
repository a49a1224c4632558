"""create_patch: the patch must turn original into mutated under RFC 6902 (the webhook client's view) and v4."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from staticadm.patch.diff import create_patch, strict_equal
from staticadm.patch.jsonpatch import apply_patch
from tests.examples import examples

keys = st.sampled_from(["a", "b", "c", "name", "x/y", "t~e", "", "0"])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["", "a", "b"]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(keys, children, max_size=5)),
    max_leaves=25,
)
documents = st.dictionaries(keys, json_values, max_size=5)


def check(original: Any, mutated: Any) -> list[dict[str, Any]]:
    before = copy.deepcopy(original)
    patch = create_patch(original, mutated)
    assert strict_equal(original, before)
    got = jsonpatch.apply_patch(original, patch)
    assert strict_equal(got, mutated), (patch, got)
    # kube-apiserver applies the webhook patch with evanphx v4: same result there
    assert strict_equal(apply_patch(original, patch), mutated)
    return patch


@settings(max_examples=examples(300), deadline=None)
@given(documents, documents)
def test_property_any_pair(original: dict[str, Any], mutated: dict[str, Any]) -> None:
    check(original, mutated)


@settings(max_examples=examples(200), deadline=None)
@given(documents, st.data())
def test_property_small_edits(original: dict[str, Any], data: st.DataObject) -> None:
    # Mutate a copy a little, which exercises the prefix/suffix and recursion paths more than random pairs.
    mutated = copy.deepcopy(original)
    for _ in range(data.draw(st.integers(0, 3))):
        containers = [mutated]
        stack: list[Any] = [mutated]
        while stack:
            c = stack.pop()
            for v in c.values() if isinstance(c, dict) else c:
                if isinstance(v, (dict, list)):
                    containers.append(v)
                    stack.append(v)
        target = data.draw(st.sampled_from(containers))
        value = data.draw(json_values)
        if isinstance(target, dict):
            target[data.draw(keys)] = value
        elif target and data.draw(st.booleans()):
            del target[data.draw(st.integers(0, len(target) - 1))]
        else:
            target.insert(data.draw(st.integers(0, len(target))), value)
    check(original, mutated)


def test_no_change_is_empty() -> None:
    doc = {"a": [1, {"b": 2}], "c": None}
    assert create_patch(doc, copy.deepcopy(doc)) == []


def test_type_strict() -> None:
    assert create_patch({"a": 1}, {"a": 1.0}) == [{"op": "replace", "path": "/a", "value": 1.0}]
    assert create_patch({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]


def test_sidecar_append_is_minimal() -> None:
    pod = {"spec": {"containers": [{"name": "app", "image": "a"}]}, "metadata": {"labels": {"x": "1"}}}
    mutated = copy.deepcopy(pod)
    mutated["spec"]["containers"].append({"name": "sidecar", "image": "s"})
    mutated["metadata"]["labels"]["y/z"] = "2"
    assert check(pod, mutated) == [
        {"op": "add", "path": "/spec/containers/1", "value": {"name": "sidecar", "image": "s"}},
        {"op": "add", "path": "/metadata/labels/y~1z", "value": "2"},
    ]


def test_insert_in_middle_and_edit_in_place() -> None:
    a = {"l": [{"name": "a", "v": 1}, {"name": "b", "v": 1}, {"name": "c", "v": 1}]}
    b = {"l": [{"name": "a", "v": 1}, {"name": "x"}, {"name": "b", "v": 2}, {"name": "c", "v": 1}]}
    patch = check(a, b)
    assert len(patch) <= 3
    c = {"l": [{"name": "a", "v": 1}, {"name": "b", "v": 5}, {"name": "c", "v": 1}]}
    assert check(a, c) == [{"op": "replace", "path": "/l/1/v", "value": 5}]


def test_root_type_change() -> None:
    assert check({"a": 1}, {"b": 2}) == [{"op": "remove", "path": "/a"}, {"op": "add", "path": "/b", "value": 2}]
    assert create_patch([1], {"a": 1}) == [{"op": "replace", "path": "", "value": {"a": 1}}]
