"""evanphx/json-patch v4 semantics (kubernetes/kubernetes vendor/gopkg.in/evanphx/json-patch.v4/patch.go)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from staticadm.patch.jsonpatch import JSONPatchError, JSONPatchTestFailed, apply_patch, json_equal, path_keys

DOC: dict[str, Any] = {"a": {"b": [1, 2, 3], "c": None, "s": "x"}, "k/e~y": 1, "n": 1}


def run(*ops: dict[str, Any], doc: Any = None) -> Any:
    d = DOC if doc is None else doc
    before = copy.deepcopy(d)
    out = apply_patch(d, list(ops))
    assert d == before, "input must not be modified"
    return out


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ({"op": "add", "path": "/x", "value": {"y": 1}}, {**DOC, "x": {"y": 1}}),
        ({"op": "add", "path": "/a/b/1", "value": 9}, {**DOC, "a": {**DOC["a"], "b": [1, 9, 2, 3]}}),
        ({"op": "add", "path": "/a/b/-", "value": 9}, {**DOC, "a": {**DOC["a"], "b": [1, 2, 3, 9]}}),
        ({"op": "add", "path": "/a/b/3", "value": 9}, {**DOC, "a": {**DOC["a"], "b": [1, 2, 3, 9]}}),
        # negative indices count from one past the end for add (SupportNegativeIndices)
        ({"op": "add", "path": "/a/b/-1", "value": 9}, {**DOC, "a": {**DOC["a"], "b": [1, 2, 3, 9]}}),
        ({"op": "add", "path": "/a/b/-4", "value": 9}, {**DOC, "a": {**DOC["a"], "b": [9, 1, 2, 3]}}),
        # Atoi accepts a sign and leading zeros
        ({"op": "add", "path": "/a/b/+01", "value": 9}, {**DOC, "a": {**DOC["a"], "b": [1, 9, 2, 3]}}),
        # add of an existing key replaces it; an absent value adds null
        ({"op": "add", "path": "/n"}, {**DOC, "n": None}),
        ({"op": "add", "path": "/k~1e~0y", "value": 2}, {**DOC, "k/e~y": 2}),
        ({"op": "remove", "path": "/a/b/-1"}, {**DOC, "a": {**DOC["a"], "b": [1, 2]}}),
        ({"op": "remove", "path": "/a/c"}, {**DOC, "a": {"b": [1, 2, 3], "s": "x"}}),
        # v4 replace of a missing object key adds it
        ({"op": "replace", "path": "/missing", "value": 5}, {**DOC, "missing": 5}),
        ({"op": "replace", "path": "/a/b/-1", "value": 0}, {**DOC, "a": {**DOC["a"], "b": [1, 2, 0]}}),
        ({"op": "replace", "path": "", "value": {"z": 1}}, {"z": 1}),
        ({"op": "move", "from": "/a/s", "path": "/s"}, {**DOC, "a": {"b": [1, 2, 3], "c": None}, "s": "x"}),
        ({"op": "move", "from": "/a/b/0", "path": "/a/b/-"}, {**DOC, "a": {**DOC["a"], "b": [2, 3, 1]}}),
        ({"op": "copy", "from": "/a/b", "path": "/b2"}, {**DOC, "b2": [1, 2, 3]}),
        # copy from a missing key copies null
        ({"op": "copy", "from": "/nope", "path": "/b2"}, {**DOC, "b2": None}),
        # the first path segment is never looked at
        ({"op": "add", "path": "ignored/x", "value": 1}, {**DOC, "x": 1}),
    ],
)
def test_ops(op: dict[str, Any], expected: Any) -> None:
    assert run(op) == expected


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (
            {"op": "add", "path": "/nope/x", "value": 1},
            'add operation does not apply: doc is missing path: "/nope/x": missing value',
        ),
        # a null or scalar intermediate is "missing" too
        (
            {"op": "add", "path": "/a/c/x", "value": 1},
            'add operation does not apply: doc is missing path: "/a/c/x": missing value',
        ),
        (
            {"op": "add", "path": "/a/s/x", "value": 1},
            'add operation does not apply: doc is missing path: "/a/s/x": missing value',
        ),
        ({"op": "add", "path": "", "value": 1}, 'add operation does not apply: doc is missing path: "": missing value'),
        (
            {"op": "add", "path": "/a/b/5", "value": 1},
            "error in add for path: '/a/b/5': Unable to access invalid index: 5: invalid index referenced",
        ),
        (
            {"op": "add", "path": "/a/b/x", "value": 1},
            "error in add for path: '/a/b/x': value was not a proper array index: 'x': "
            'strconv.Atoi: parsing "x": invalid syntax',
        ),
        ({"op": "add", "value": 1}, "add operation failed to decode path: missing value"),
        (
            {"op": "remove", "path": "/nope"},
            "error in remove for path: '/nope': Unable to remove nonexistent key: nope: missing value",
        ),
        (
            {"op": "remove", "path": "/x/y"},
            'remove operation does not apply: doc is missing path: "/x/y": missing value',
        ),
        (
            {"op": "remove", "path": "/a/b/3"},
            "error in remove for path: '/a/b/3': Unable to access invalid index: 3: invalid index referenced",
        ),
        (
            {"op": "remove", "path": "/a/b/-"},
            "error in remove for path: '/a/b/-': strconv.Atoi: parsing \"-\": invalid syntax",
        ),
        (
            {"op": "replace", "path": "/a/b/3", "value": 1},
            "replace operation does not apply: doc is missing key: /a/b/3: missing value",
        ),
        (
            {"op": "replace", "path": "/x/y", "value": 1},
            "replace operation does not apply: doc is missing path: /x/y: missing value",
        ),
        ({"op": "replace", "path": "", "value": 1}, "replace operation value must be object or array: %!w(<nil>)"),
        (
            {"op": "move", "from": "/nope", "path": "/x"},
            "error in move for path: 'nope': Unable to remove nonexistent key: nope: missing value",
        ),
        (
            {"op": "move", "from": "/a", "path": "/a/x"},
            "move operation does not apply: doc is missing destination path: /a/x: missing value",
        ),
        (
            {"op": "move", "path": "/x"},
            "move operation failed to decode from: operation, missing from field: missing value",
        ),
        (
            {"op": "copy", "from": "/a/b/7", "path": "/x"},
            "error in copy for from: '/a/b/7': Unable to access invalid index: 7: invalid index referenced",
        ),
        (
            {"op": "copy", "from": "/a", "path": "/q/x"},
            "copy operation does not apply: doc is missing destination path: /q/x: missing value",
        ),
        (
            {"op": "test", "path": "/q/x", "value": 1},
            "test operation does not apply: is missing path: /q/x: missing value",
        ),
        (
            {"op": "test", "path": "/a/b/9", "value": 1},
            "error in test for path: '/a/b/9': Unable to access invalid index: 9: invalid index referenced",
        ),
        ({"op": "frobnicate", "path": "/a"}, "Unexpected kind: frobnicate"),
        ({"path": "/a"}, "Unexpected kind: unknown"),
    ],
)
def test_errors(op: dict[str, Any], message: str) -> None:
    with pytest.raises(JSONPatchError) as ei:
        run(op)
    assert not isinstance(ei.value, JSONPatchTestFailed)
    assert str(ei.value) == message


@pytest.mark.parametrize(
    ("path", "value", "passes"),
    [
        ("/n", 1, True),
        ("/n", 1.0, True),  # JSON equality: the Go side re-encodes both as 1
        ("/n", "1", False),  # a numeric string is not a number
        ("/n", True, False),
        ("/a/s", "x", True),
        ("/a/b", [1, 2, 3], True),
        ("/a/b", [1, 2], False),
        ("/a", {"b": [1, 2, 3], "c": None, "s": "x"}, True),
        ("/a", {"b": [1, 2, 3], "s": "x"}, False),  # null member is not the same as a missing one
        ("/a/c", None, True),
        ("/missing", None, True),  # a missing key tests equal to null
        ("/missing", 0, False),
        ("", DOC, True),
    ],
)
def test_test_op(path: str, value: Any, passes: bool) -> None:
    op = {"op": "test", "path": path, "value": value}
    if passes:
        assert run(op) == DOC
    else:
        with pytest.raises(JSONPatchTestFailed, match=rf"^testing value {path} failed: test failed$"):
            run(op)


def test_test_without_value_fails_on_present_key() -> None:
    with pytest.raises(JSONPatchTestFailed):
        run({"op": "test", "path": "/n"})
    assert run({"op": "test", "path": "/missing"}) == DOC


def test_failed_test_aborts_whole_patch() -> None:
    with pytest.raises(JSONPatchTestFailed):
        run({"op": "add", "path": "/x", "value": 1}, {"op": "test", "path": "/n", "value": 2})


def test_structural_sharing_and_isolation() -> None:
    doc = {"big": {"untouched": [1, 2]}, "edit": {"a": 1}}
    out = run({"op": "add", "path": "/edit/b", "value": 2}, {"op": "add", "path": "/edit/c", "value": 3}, doc=doc)
    assert out["big"] is doc["big"]
    assert out["edit"] == {"a": 1, "b": 2, "c": 3}
    # a value copied into two places and then edited in one must not change the other (nor the patch)
    value = {"v": 1}
    patch = [
        {"op": "add", "path": "/p", "value": value},
        {"op": "copy", "from": "/p", "path": "/q"},
        {"op": "replace", "path": "/q/v", "value": 2},
    ]
    out = apply_patch(doc, patch)
    assert out["p"] == {"v": 1} and out["q"] == {"v": 2} and value == {"v": 1}


def test_sequence_of_ops() -> None:
    doc = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "app"}]}}
    out = run(
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/x~1y", "value": "z"},
        {"op": "add", "path": "/spec/containers/-", "value": {"name": "sidecar"}},
        {"op": "remove", "path": "/metadata/labels/a"},
        doc=doc,
    )
    assert out == {
        "metadata": {"labels": {}, "annotations": {"x/y": "z"}},
        "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]},
    }


def test_json_equal() -> None:
    assert json_equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not json_equal(0, False)
    assert not json_equal(None, {})
    assert not json_equal([1], {"0": 1})


@pytest.mark.parametrize(("path", "keys"), [
    ("/a~01/b~1c/~0~1", ("a~1", "b/c", "~/")),
    ("/~~11/~10", ("~/1", "/0")),
    ("x/y", ("y",)),
    ("", ()),
])
def test_path_keys_are_unescaped_in_one_pass_after_the_first_segment(path: str, keys: tuple[str, ...]) -> None:
    # strings.NewReplacer("~1", "/", "~0", "~"): left to right, nothing replaced is read again.
    assert path_keys(path) == keys
    if not keys:
        return
    document: dict[str, Any] = {}
    node = document
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    patched = apply_patch(document, [{"op": "add", "path": path, "value": 1}])
    for key in keys:
        patched = patched[key]
    assert patched == 1, "apply_patch writes where path_keys says"
