"""The typed decoding of a JSON Patch's result (patch/decode.py): only what the patch wrote is decoded, in Go's words.

The expected texts are encoding/json's and sigs.k8s.io/json's, as the decoder produced them before it skipped the
strings it finds where the schema says string (the common leaf: labels, annotations, names). ``strings_decode``,
which answers without the walk for patches that only write strings, never says yes where the walk refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from staticadm.patch.decode import decoding_error, strings_decode
from staticadm.patch.jsonpatch import JSONPatchError, apply_patch
from tests.examples import examples

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}, "annotations": {"a": "b"}},
    "spec": {
        "serviceAccountName": "web",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "containers": [{"name": "app", "image": "nginx", "ports": [{"containerPort": 8080}],
                        "resources": {"limits": {"cpu": "500m"}}}],
        "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
    },
}


@pytest.mark.parametrize(("operations", "refused"), [
    ([{"op": "add", "path": "/metadata/annotations/x", "value": "y"}], None),
    ([{"op": "add", "path": "/spec/nodeSelector/a", "value": "x"}], None),
    ([{"op": "add", "path": "/spec/serviceAccountName", "value": "x"}], None),
    ([{"op": "add", "path": "/spec/containers/0/resources/limits/cpu", "value": "1"}], None),
    ([{"op": "add", "path": "/spec/containers/0/resources/limits/cpu", "value": {"a": 1}}], None),
    ([{"op": "add", "path": "/spec/securityContext", "value": "x"}],
     "json: cannot unmarshal string into Go struct field PodSpec.spec.securityContext of type v1.PodSecurityContext"),
    ([{"op": "add", "path": "/spec/nodeSelector", "value": "x"}],
     "json: cannot unmarshal string into Go struct field PodSpec.spec.nodeSelector of type map[string]string"),
    ([{"op": "add", "path": "/spec/nodeSelector/a", "value": 1}],
     "json: cannot unmarshal number into Go struct field PodSpec.spec.nodeSelector of type string"),
    ([{"op": "add", "path": "/spec/priority", "value": "x"}],
     "json: cannot unmarshal string into Go struct field PodSpec.spec.priority of type int32"),
    ([{"op": "add", "path": "/metadata/annotations/a", "value": True}],
     "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.annotations of type string"),
    ([{"op": "add", "path": "/spec/containers/0/ports/0/containerPort", "value": "80"}],
     "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type "
     "int32"),
    ([{"op": "add", "path": "/spec/volumes/0/secret", "value": {"secretName": "s", "bogus": "b", "items": "x"}}],
     "json: cannot unmarshal string into Go struct field SecretVolumeSource.spec.volumes.secret.items of type "
     "[]v1.KeyToPath"),
    ([{"op": "add", "path": "/spec/x", "value": "y"}, {"op": "add", "path": "/metadata/y", "value": "z"}],
     'strict decoding error: unknown field "metadata.y", unknown field "spec.x"'),
    ([{"op": "add", "path": "/metadata/labels", "value": ["a"]}],
     "json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type map[string]string"),
])
def test_what_the_patch_wrote_is_decoded_as_kube_apiserver_decodes_it(operations: list[dict[str, Any]],
                                                                     refused: str | None) -> None:
    before = copy.deepcopy(POD)
    after = apply_patch(before, operations)
    assert decoding_error(after, before, "", "v1", "Pod") == refused
    assert before == POD, "the object before the patch is not changed"


#: Paths a patch may write a string at: string fields and map values, and what is not (numbers, structs, maps,
#: lists, unknown fields, an escaped key, a first segment apply_patch drops unread).
STRING_PATHS = (
    "/metadata/annotations/x", "/metadata/labels/y", "/metadata/name", "/metadata/annotations/a~1b",
    "/metadata/annotations/~0x", "a/metadata/namespace", "/spec/serviceAccountName", "/spec/nodeSelector/k",
    "/kind", "/status/phase", "/spec/priority", "/spec/securityContext", "/spec/containers/0/image",
    "/metadata/unknownField", "/metadata/annotations", "/status/conditions/0/type", "/spec/containers/0/x",
    "/spec/volumes/0/configMap/name", "/spec/containers/0/resources/limits/cpu", "/metadata/annotations/0",
    "/spec/nodeSelector/-",
)
#: What the object holds where patches write: maps, nothing, or what the schema disagrees with.
SHAPES = ({"a": "b"}, None, ["b"], "b")


@settings(max_examples=examples(300), deadline=None)
@given(operations=st.lists(st.fixed_dictionaries({
           "op": st.sampled_from(("add", "replace", "test")), "path": st.sampled_from(STRING_PATHS),
           "value": st.sampled_from(("v", "b"))}), min_size=1, max_size=3),
       annotations=st.sampled_from(SHAPES), selector=st.sampled_from(SHAPES),
       kind=st.sampled_from((("", "v1", "Pod"), ("example.com", "v1", "Widget"))))
def test_strings_written_where_strings_go_decode_as_the_walk_says(
        operations: list[dict[str, Any]], annotations: Any, selector: Any, kind: tuple[str, str, str]) -> None:
    before = copy.deepcopy(POD)
    for field, shape in (("annotations", annotations), ("nodeSelector", selector)):
        holder = before["metadata"] if field == "annotations" else before["spec"]
        if shape is None:
            del holder[field]
        else:
            holder[field] = copy.deepcopy(shape)
    before["status"] = {"phase": "Pending", "conditions": [{"type": "Ready"}]}
    try:
        after = apply_patch(before, operations)
    except JSONPatchError:
        event("not applied")
        return
    certain = strings_decode(after, operations, *kind)
    event(f"decodes for certain: {certain}")
    if certain:
        assert decoding_error(after, before, *kind) is None


@pytest.mark.parametrize(("field", "path"), [("annotations", "/metadata/annotations/0"),
                                             ("nodeSelector", "/spec/nodeSelector/-")])
def test_a_string_written_into_a_list_the_schema_calls_a_map_is_left_to_the_walk(field: str, path: str) -> None:
    before = copy.deepcopy(POD)
    (before["metadata"] if field == "annotations" else before["spec"])[field] = ["b"]
    operations = [{"op": "add", "path": path, "value": "v"}]
    after = apply_patch(before, operations)
    assert not strings_decode(after, operations, "", "v1", "Pod")
    assert decoding_error(after, before, "", "v1", "Pod") is not None
