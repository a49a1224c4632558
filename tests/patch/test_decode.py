"""The typed decoding of a JSON Patch's result (patch/decode.py): only what the patch wrote is decoded, in Go's words.

The expected texts are encoding/json's and sigs.k8s.io/json's, as the decoder produced them before it skipped the
strings it finds where the schema says string (the common leaf: labels, annotations, names)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from staticadm.patch.decode import decoding_error
from staticadm.patch.jsonpatch import apply_patch

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
