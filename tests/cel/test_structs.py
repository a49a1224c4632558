"""Object{...} and JSONPatch{...} in mutation expressions: the rewrite, the types and the values."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest

from staticadm.cel import (
    CompiledExpression,
    CompileError,
    EvalError,
    ExpressionKind,
    admission_environment,
    compile_expression,
)
from staticadm.cel.libraries.objects import ConversionError, to_plain
from staticadm.cel.structs import StructSyntaxError, rewrite_struct_creation

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "web"}},
       "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


def evaluate(source: str, kind: ExpressionKind, obj: Any = POD) -> Any:
    compiled = compile_expression(source, kind, mutating=True)
    assert isinstance(compiled, CompiledExpression), compiled
    context = admission_environment(True).new_context(
        {"object": obj, "oldObject": None, "request": {}, "namespaceObject": None})
    return compiled.evaluate(context)


def test_rewrite_leaves_strings_comments_and_selections_alone() -> None:
    source = '"Object{a: 1}" + r\'JSONPatch{\' // Object{x: 1}\n + object.Object'
    assert rewrite_struct_creation(source) == source


def test_rewrite_quotes_field_names_at_struct_level_only() -> None:
    rewritten = rewrite_struct_creation('Object{spec: Object.spec{?x: y, m: {"k": a ? b : c}}}')
    assert rewritten == ('__staticadm_object__("Object", {"spec": __staticadm_object_part__("Object.spec", '
                         '{?"x": y, "m": {"k": a ? b : c}})})')


def test_reserved_names_and_unknown_jsonpatch_fields_are_rejected() -> None:
    with pytest.raises(StructSyntaxError, match="undeclared reference"):
        rewrite_struct_creation('__staticadm_object__("Object", {})')
    with pytest.raises(StructSyntaxError, match="undefined field 'bad'"):
        rewrite_struct_creation('JSONPatch{op: "add", bad: 1}')


def test_apply_configuration_builds_nested_objects() -> None:
    value = evaluate('Object{metadata: Object.metadata{labels: {"team": "a"}}, spec: Object.spec{containers: '
                     '[Object.spec.containers{name: "sidecar", image: "proxy:1", ports: [1, 2]}]}}',
                     ExpressionKind.APPLY_CONFIGURATION)
    assert to_plain(value) == {"metadata": {"labels": {"team": "a"}},
                               "spec": {"containers": [{"name": "sidecar", "image": "proxy:1", "ports": [1, 2]}]}}


def test_result_types_follow_kubernetes() -> None:
    wrong_root = compile_expression("Object.spec{replicas: 1}", ExpressionKind.APPLY_CONFIGURATION, mutating=True)
    assert isinstance(wrong_root, CompileError) and "must evaluate to Object" in wrong_root.message
    not_a_list = compile_expression('JSONPatch{op: "remove", path: "/a"}', ExpressionKind.JSON_PATCH, mutating=True)
    assert isinstance(not_a_list, CompileError) and "list(JSONPatch)" in not_a_list.message
    validating = compile_expression("Object{}", ExpressionKind.VALIDATION)
    assert isinstance(validating, CompileError)


def test_object_fields_may_mix_types_but_list_literals_may_not() -> None:
    mixed_fields = compile_expression('Object{spec: Object.spec{replicas: 1, paused: true, name: "x"}}',
                                      ExpressionKind.APPLY_CONFIGURATION, mutating=True)
    assert isinstance(mixed_fields, CompiledExpression)
    mixed_list = compile_expression('Object{spec: Object.spec{args: [1, "x"]}}', ExpressionKind.APPLY_CONFIGURATION,
                                    mutating=True)
    assert isinstance(mixed_list, CompileError)


def test_jsonpatch_values_and_escape_key() -> None:
    value = evaluate('[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("a/b~c"), value: "v"},'
                     ' JSONPatch{op: "test", path: "/spec", value: null}]', ExpressionKind.JSON_PATCH)
    assert [item["fields"] for item in value] == [
        {"op": "add", "path": "/metadata/labels/a~1b~0c", "value": "v"},
        {"op": "test", "path": "/spec", "value": None}]


def test_optional_fields_are_left_out_when_absent() -> None:
    value = evaluate('Object{metadata: Object.metadata{?labels: optional.none(), ?name: optional.of("n")}}',
                     ExpressionKind.APPLY_CONFIGURATION)
    assert to_plain(value) == {"metadata": {"name": "n"}}


def test_a_field_set_twice_keeps_its_last_value_and_evaluates_both() -> None:
    # cel-go builds a struct from every field in order, the last setting winning (kube-apiserver's admission code,
    # ../shared/oracle, patches newField: 2); a map literal would refuse the duplicate key.
    value = evaluate('Object{spec: Object.spec{newField: 1, newField: 2}}', ExpressionKind.APPLY_CONFIGURATION)
    assert to_plain(value) == {"spec": {"newField": 2}}
    value = evaluate('[JSONPatch{op: "add", op: "replace", path: "/a", value: 5, value: object.metadata.name}]',
                     ExpressionKind.JSON_PATCH)
    assert [item["fields"] for item in value] == [{"op": "replace", "path": "/a", "value": "p"}]
    failed = evaluate('Object{spec: Object.spec{newField: 1 / 0, newField: 2}}', ExpressionKind.APPLY_CONFIGURATION)
    assert isinstance(failed, EvalError) and failed.message == "division by zero"


def test_type_names_must_match_the_field_path() -> None:
    value = evaluate('Object{spec: Object.spec{selector: Object.spec.wrong{}}}', ExpressionKind.APPLY_CONFIGURATION)
    errors: list[str] = []
    to_plain(value, None, errors)
    assert errors == ['unexpected type name "Object.spec.wrong", expected "Object.spec.selector", which matches '
                      "field name path from root Object type"]


def test_values_without_a_json_form_are_refused() -> None:
    value = evaluate('Object{metadata: Object.metadata{labels: {"a": string(duration("1s"))}}, '
                     'spec: Object.spec{x: duration("1s")}}', ExpressionKind.APPLY_CONFIGURATION)
    with pytest.raises(ConversionError):
        to_plain(value)


class _Labels(dict[Any, Any]):
    """A map of a class of its own: converted as any map (the engine's results are plain dicts, other callers'
    may not be)."""


@pytest.mark.parametrize(("value", "refused"), [
    ({"a": [1, 2.5, True, None, "s"]}, None),
    (_Labels({"a": _Labels({"b": "c"})}), None),
    ({"a": {"@k8s": 1, "b": "c"}}, None),
    ({"a": [{"b": b"x"}]}, "bytes values cannot be written into an object"),
    ({"a": {1: "x"}}, "map key 1 is of type int64, not string"),
    (_Labels({2.5: "x"}), "map key 2.5 is of type float64, not string"),
    ({"a": {"@k8s": "Quantity", "value": "1"}}, "a Quantity value cannot be written into an object"),
    ([{"@k8s": "JSONPatch", "fields": {}}], "a JSONPatch value cannot be written into an object"),
    ({"a": datetime.timedelta(seconds=1)}, "a timedelta value cannot be written into an object"),
])
def test_plain_values_are_copied_and_values_without_a_json_form_refused(value: Any, refused: str | None) -> None:
    if refused is not None:
        with pytest.raises(ConversionError, match=f"^{re.escape(refused)}$"):
            to_plain(value)
        return
    plain = to_plain(value)
    assert plain == value
    assert all(type(inner) in (dict, list) for inner in (plain, *plain.values())), "maps come back as dicts"
    assert plain is not value and plain["a"] is not value["a"], "containers are new: the value may be kept"


def test_objects_nested_in_plain_values_check_their_names_against_the_path() -> None:
    value = {"@k8s": "Object", "name": "Object", "fields": {
        "spec": {"@k8s": "Object", "name": "Object.spec", "fields": {"list": [
            {"@k8s": "Object", "name": "Object.spec.wrong", "fields": {"a": {"plain": 1}}}]}}}}
    errors: list[str] = []
    assert to_plain(value, None, errors) == {"spec": {"list": [{"a": {"plain": 1}}]}}
    assert errors == ['unexpected type name "Object.spec.wrong", expected "Object.spec.list", which matches '
                      "field name path from root Object type"]


def test_jsonpatch_string_fields_are_checked_when_built() -> None:
    outcome = evaluate('[JSONPatch{op: "add", path: dyn(1)}]', ExpressionKind.JSON_PATCH)
    assert isinstance(outcome, EvalError)
    assert "unexpected type int64 for JSONPatchType 'path' field" in outcome.message


# Fields of a creation, as Kubernetes reads them (apiserver/pkg/cel/mutation: JSONPatchType.Field types op, path
# and from string, value dyn; JSONPatchVal.Get/IsSet; dynamic.ObjectType.Field: any name, dyn, GetFrom/IsSet on
# the object's map form). Upstream: json_patch_test.go "has field access"/"has field testing", compilation_test.go
# "object type has field access"/"object type has field testing".
@pytest.mark.parametrize(("source", "expected"), [
    ('JSONPatch{op: "opValue"}.op', "opValue"),
    ('JSONPatch{path: "/a"}.path + "/b"', "/a/b"),
    ('JSONPatch{from: "f"}.from', "f"),
    ('string(JSONPatch{value: "valueValue"}.value)', "valueValue"),
    ("JSONPatch{}.op", ""),
    ('has(JSONPatch{op: "opValue"}.op)', True),
    ("has(JSONPatch{}.op)", False),
    ('has(JSONPatch{op: ""}.op)', False),
    ("has(JSONPatch{value: null}.value)", True),
    ("has(JSONPatch{}.value)", False),
    ('Object{field: "fieldValue"}.field', "fieldValue"),
    ("Object{}.field", None),
    ('has(Object{field: "fieldValue"}.field)', True),
    ("has(Object{}.field)", False),
    ("Object{spec: Object.spec{replicas: 3}}.spec.replicas", 3),
    ("Object{spec: Object.spec{replicas: 3}}.spec", {"replicas": 3}),
    ("Object.spec{replicas: 3}.replicas", 3),
])
def test_fields_of_creations(source: str, expected: Any) -> None:
    assert evaluate(source, ExpressionKind.STANDALONE) == expected


def test_fields_of_creations_keep_kubernetes_types() -> None:
    environment = admission_environment(True)
    assert isinstance(environment.compile('JSONPatch{op: "x"}.op + 1', ExpressionKind.STANDALONE), CompileError)
    compiled = environment.compile('JSONPatch{value: 1}.value + 1', ExpressionKind.STANDALONE)
    assert isinstance(compiled, CompiledExpression)  # value is dyn
    with pytest.raises(StructSyntaxError, match="undefined field 'foo'"):
        rewrite_struct_creation("JSONPatch{}.foo")
    # A method call on a creation stays a method call (and fails to compile as in Kubernetes).
    assert rewrite_struct_creation("JSONPatch{}.op()") == "__staticadm_jsonpatch__({}).op()"
