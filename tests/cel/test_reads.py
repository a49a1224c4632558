"""What expressions read of ``object`` and ``oldObject``, and the objects pruned to it (cel/reads.py).

The property test in tests/admission/test_fast_paths.py compares decisions on pruned and whole objects;
these pin down the paths themselves, so a change that quietly stops narrowing (or narrows too far) shows.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from staticadm.cel import CompiledExpression, ExpressionKind, admission_environment
from staticadm.cel.reads import EACH, NOTHING, ReadPath, Reads, _prune
from tests.examples import examples

POD: dict[str, Any] = {
    "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}, "managedFields": [{"manager": "x"}]},
    "spec": {
        "containers": [
            {"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "envoy", "env": [], "resources": {"limits": {"memory": "1Gi"}}},
        ],
        "volumes": [{"name": "data"}],
    },
    "status": {"phase": "Running"},
}


def _object_reads(source: str, kind: ExpressionKind = ExpressionKind.VALIDATION) -> set[ReadPath]:
    compiled = admission_environment(False).compile(source, kind, variable_names=None)
    assert isinstance(compiled, CompiledExpression), compiled
    return compiled.object_reads()["object"]


@pytest.mark.parametrize(("source", "paths"), [
    ("object.metadata.name == 'web'", {("metadata", "name")}),
    ("object.spec.containers.all(c, c.image != 'bad')", {("spec", "containers", EACH, "image")}),
    # The iteration variable shadows the root it is named after.
    ("object.spec.containers.exists(object, object.name == 'a')", {("spec", "containers", EACH, "name")}),
    ("[1].all(c, object.spec.containers.all(c, c.name != ''))", {("spec", "containers", EACH, "name")}),
    ("object.spec.containers.all(c, c.env.all(e, e.name != 'X'))",
     {("spec", "containers", EACH, "env", EACH, "name")}),
    # A size needs the elements, none of their content.
    ("size(object.spec.containers) < 3", {("spec", "containers", EACH, NOTHING)}),
    ("object.spec.containers.size() < 3", {("spec", "containers", EACH, NOTHING)}),
    # Compared with null: whether it is there and null, none of its content.
    ("oldObject == null || object.spec.replicas > 1", {("spec", "replicas")}),
    ("null != object.status && object.spec.extra == null", {("status", NOTHING), ("spec", "extra", NOTHING)}),
    # An element used whole; nothing of an element read; two-variable loops: the range is read whole.
    ("object.spec.containers.all(c, c == c)", {("spec", "containers", EACH)}),
    ("object.spec.containers.all(c, true)", {("spec", "containers")}),
    ("object.spec.containers.all(i, c, c.image != '')", {("spec", "containers")}),
    # A map iterated: its keys are read, so it stays whole (see the pruning below).
    ("object.metadata.labels.all(k, k != 'a')", {("metadata", "labels", EACH)}),
    # A range that is not a static path: read where the chain stops.
    ("object.spec.containers.map(c, c.ports).all(p, size(p) > 0)",
     {("spec", "containers", EACH, "ports"), ("spec", "containers", EACH, NOTHING)}),
])
def test_paths_read_through_comprehensions(source: str, paths: set[ReadPath]) -> None:
    assert _object_reads(source) == paths


@pytest.mark.parametrize(("source", "paths"), [
    ("request.namespace != 'kube-system'", {("namespace",)}),
    # has() on a variable first asks its type (the rewrite of has() on maps and lists): no content of it.
    ("request.userInfo.groups.exists(g, g == 'admins') && has(request.name)",
     {("userInfo", "groups", EACH), ("name", NOTHING), (NOTHING,)}),
    ("request.kind == request.requestKind || object.metadata.name == ''", {("kind",), ("requestKind",)}),
    ("object.metadata.name == ''", set()),
])
def test_what_is_read_of_the_request(source: str, paths: set[ReadPath]) -> None:
    compiled = admission_environment(False).compile(source, ExpressionKind.VALIDATION, variable_names=None)
    assert isinstance(compiled, CompiledExpression), compiled
    assert compiled.object_reads()["request"] == paths


def test_a_collection_built_by_a_loop_reads_each_element_through_the_rewrites_binding() -> None:
    # ``map`` is rewritten into a binding of its range (evaluated in steps when long): reads through the bound
    # name are reads of the range's elements.
    assert _object_reads("object.spec.containers.map(c, c.image)", ExpressionKind.VARIABLE) == {
        ("spec", "containers", EACH, "image"), ("spec", "containers", EACH, NOTHING)}


def _pruned(*sources: str) -> Any:
    environment = admission_environment(False)
    compiled = [environment.compile(source, ExpressionKind.VALIDATION, variable_names=None) for source in sources]
    assert all(isinstance(program, CompiledExpression) for program in compiled)
    reads = Reads.of(program.object_reads() for program in compiled if isinstance(program, CompiledExpression))
    return reads.prune("object", POD)


def test_lists_are_pruned_element_by_element() -> None:
    assert _pruned("object.spec.containers.all(c, c.image != 'bad')") == {
        "spec": {"containers": [{"image": "nginx"}, {"image": "envoy"}]}}
    assert _pruned("size(object.spec.containers) < 3", "object.metadata.name != ''") == {
        "metadata": {"name": "web"}, "spec": {"containers": [{}, {}]}}
    assert _pruned("object.spec.containers.all(c, c.env.all(e, e.name != 'X'))") == {
        "spec": {"containers": [{"env": [{"name": "A"}]}, {"env": []}]}}


def test_iterated_maps_and_whole_reads_are_kept_whole() -> None:
    assert _pruned("object.metadata.labels.all(k, k != 'a')") == {"metadata": {"labels": POD["metadata"]["labels"]}}
    assert _pruned("object.spec.containers.all(c, c.image != '')", "object.spec.containers[0].name != ''") == {
        "spec": {"containers": POD["spec"]["containers"]}}
    # A path read whole beside element paths below it keeps the whole value.
    assert _pruned("object.spec.containers.all(c, c == c)", "object.spec.containers.all(c, c.image != '')") == {
        "spec": {"containers": POD["spec"]["containers"]}}


def test_values_that_are_not_lists_of_maps_are_kept_as_they_are() -> None:
    reads = Reads.of([{"object": {("spec", "containers", EACH, "image")}}])
    for containers in (["plain"], {"app": {"image": "x"}}, "text", None):
        assert reads.prune("object", {"spec": {"containers": containers}}) == {"spec": {"containers": containers}}


def test_the_markers_survive_pickling_as_themselves() -> None:
    assert pickle.loads(pickle.dumps(EACH)) is EACH
    assert pickle.loads(pickle.dumps(NOTHING)) is NOTHING


_KEYS = st.sampled_from(["a", "b", "spec", "items", "x y", "'", "\\", "0"])
_PATHS = st.lists(st.lists(st.one_of(_KEYS, st.just(EACH)), max_size=4).map(tuple)
                  .flatmap(lambda path: st.sampled_from((path, (*path, NOTHING)) if path else (path,))),
                  max_size=6)
_VALUES = st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=3)),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=20)


@settings(max_examples=examples(300), deadline=None)
@given(paths=_PATHS, value=_VALUES)
def test_the_written_pruner_prunes_as_the_trie_walk(paths: list[ReadPath], value: Any) -> None:
    reads = Reads.of([{"object": set(paths)}])
    tries = reads._tries  # the walk is the reference the written code must agree with
    assert reads.prune("object", value) == _prune(value, tries["object"])
    assert reads.prune("oldObject", value) == _prune(value, tries["oldObject"])


def test_a_deep_path_through_lists_prunes_as_the_trie_walk() -> None:
    # Deeper than the written pruner nests inline: past that depth it calls functions of its own.
    path: tuple[Any, ...] = tuple(item for level in range(30) for item in (f"k{level}", EACH))
    value: Any = "leaf"
    for level in reversed(range(30)):
        value = {f"k{level}": [value, {"other": 1}], "unread": level}
    reads = Reads.of([{"object": {(*path, "end")}}])
    pruned = reads.prune("object", value)
    assert pruned == _prune(value, reads._tries["object"])
    assert "unread" not in pruned and pruned["k0"][1] == {}
