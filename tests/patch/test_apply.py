"""Server-side-apply merge of ApplyConfigurations, compared with what kube-apiserver does.

References: kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch/smd.go and
smd_test.go (TestApplyConfiguration), structured-merge-diff v6 typed/{merge,validate,helpers}.go.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from staticadm.patch.apply import (
    ApplyConfigurationError,
    AtomicMutationError,
    GVKMismatchError,
    PatchSchemaError,
    apply_configuration,
    apply_structured_merge_diff,
    schema_for,
    schema_metadata,
)


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}, "annotations": {"a": "1"}},
        "spec": {
            "containers": [{"name": "app", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]
        }
        | spec,
    }


def deployment(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec}


def merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    before_obj, before_patch = copy.deepcopy(obj), copy.deepcopy(patch)
    out = apply_configuration(obj, patch)
    assert obj == before_obj and patch == before_patch, "inputs must not be modified"
    return out


def test_sidecar_injection_merges_containers_by_name() -> None:
    out = merge(
        pod(),
        {
            "spec": {
                "containers": [
                    {"name": "app", "env": [{"name": "PROXY", "value": "on"}]},
                    {"name": "proxy", "image": "envoy:1", "ports": [{"containerPort": 15001}]},
                ]
            }
        },
    )
    assert out["spec"]["containers"] == [
        # existing container updated field by field, ports untouched
        {
            "name": "app",
            "image": "nginx:1",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "env": [{"name": "PROXY", "value": "on"}],
        },
        # new container appended (patch-only items come after live items they do not precede in the patch)
        {"name": "proxy", "image": "envoy:1", "ports": [{"containerPort": 15001}]},
    ]
    assert out["metadata"] == pod()["metadata"]


def test_new_item_listed_before_existing_one_goes_first() -> None:
    # merge.go visitListItems: patch items keep patch order relative to the live items they name.
    obj = pod()
    obj["spec"]["containers"].append({"name": "other", "image": "o"})
    out = merge(obj, {"spec": {"containers": [{"name": "init-proxy", "image": "x"}, {"name": "app", "image": "n2"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["init-proxy", "app", "other"]
    assert out["spec"]["containers"][1]["image"] == "n2"


def test_init_containers_added_when_absent() -> None:
    out = merge(pod(), {"spec": {"initContainers": [{"name": "setup", "image": "busybox"}]}})
    assert out["spec"]["initContainers"] == [{"name": "setup", "image": "busybox"}]
    assert (
        out["spec"]["containers"] is pod()["spec"]["containers"]
        or out["spec"]["containers"] == pod()["spec"]["containers"]
    )


def test_labels_and_annotations_merge_per_key() -> None:
    out = merge(pod(), {"metadata": {"labels": {"team": "x", "app": "api"}, "annotations": {"b": "2"}}})
    assert out["metadata"]["labels"] == {"app": "api", "team": "x"}
    assert out["metadata"]["annotations"] == {"a": "1", "b": "2"}


def test_finalizers_are_a_set() -> None:
    obj = pod()
    obj["metadata"]["finalizers"] = ["a", "b"]
    assert merge(obj, {"metadata": {"finalizers": ["c"]}})["metadata"]["finalizers"] == ["a", "b", "c"]
    assert merge(obj, {"metadata": {"finalizers": ["b", "a"]}})["metadata"]["finalizers"] == ["b", "a"]
    assert merge(obj, {"metadata": {"finalizers": ["c", "b"]}})["metadata"]["finalizers"] == ["a", "c", "b"]


def test_port_key_uses_protocol_default() -> None:
    # Container.ports is a map list keyed by (containerPort, protocol); protocol defaults to "TCP" (+default="TCP"),
    # so a patch item without protocol addresses the live TCP port.
    out = merge(pod(), {"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80, "name": "http"}]}]}})
    assert out["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP", "name": "http"}]


# ---- cases ported from smd_test.go TestApplyConfiguration ----


def test_k8s_add_to_list_type_map() -> None:
    obj = deployment(template={"spec": {"volumes": [{"name": "x"}]}})
    out = merge(obj, {"spec": {"template": {"spec": {"volumes": [{"name": "y"}]}}}})
    assert out["spec"]["template"]["spec"]["volumes"] == [{"name": "x"}, {"name": "y"}]


def test_k8s_update_list_type_map_entry() -> None:
    obj = deployment(template={"spec": {"volumes": [{"name": "x"}, {"name": "y"}]}})
    out = merge(obj, {"spec": {"template": {"spec": {"volumes": [{"name": "y", "hostPath": {"path": "a"}}]}}}})
    assert out["spec"]["template"]["spec"]["volumes"] == [{"name": "x"}, {"name": "y", "hostPath": {"path": "a"}}]


def test_k8s_complex_initialization() -> None:
    patch = {
        "spec": {
            "replicas": 1,
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {
                    "containers": [
                        {
                            "name": "nginx",
                            "image": "nginx:1.14.2",
                            "ports": [{"containerPort": 80}],
                            "resources": {"limits": {"cpu": "128M"}},
                        }
                    ]
                },
            },
        }
    }
    out = merge(deployment(), patch)
    assert out["spec"] == patch["spec"]


def test_k8s_change_to_atomic_struct_is_rejected() -> None:
    with pytest.raises(AtomicMutationError) as ei:
        merge(deployment(replicas=1), {"spec": {"selector": {"matchLabels": {"l": "v"}}}})
    assert str(ei.value) == "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.selector"


def test_k8s_invalid_field_name() -> None:
    with pytest.raises(PatchSchemaError) as ei:
        merge(deployment(replicas=1), {"spec": {"replicasx": 1}})
    assert str(ei.value) == (
        "failed to convert patch object to typed object: .spec.replicasx: field not declared in schema"
    )


def test_k8s_duplicate_env_vars_in_original_are_kept_when_untouched() -> None:
    env = [{"name": "test", "value": "a"}, {"name": "test", "value": "b"}]
    obj = deployment(replicas=1, template={"spec": {"containers": [{"name": "nginx", "env": env}]}})
    out = merge(obj, {"spec": {"replicas": 3}})
    assert out["spec"]["replicas"] == 3
    assert out["spec"]["template"]["spec"]["containers"][0]["env"] == env


def test_k8s_modify_env_var_consolidates_duplicates() -> None:
    env = [{"name": "test", "value": "a"}, {"name": "test", "value": "b"}, {"name": "foo", "value": "bar"}]
    obj = deployment(replicas=1, template={"spec": {"containers": [{"name": "nginx", "env": env}]}})
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "nginx", "env": [{"name": "test", "value": "c"}]}]}}}
    }
    out = merge(obj, patch)
    assert out["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "test", "value": "c"},
        {"name": "foo", "value": "bar"},
    ]


# ---- rejection and validation ----


@pytest.mark.parametrize(
    ("patch", "paths"),
    [
        ({"spec": {"containers": [{"name": "app", "command": ["sh"]}]}}, ".spec.containers[0].command"),
        ({"spec": {"nodeSelector": {"disk": "ssd"}}}, ".spec.nodeSelector"),
        # an empty atomic list is still an atomic list
        ({"spec": {"containers": [{"name": "app", "args": []}]}}, ".spec.containers[0].args"),
        (
            {"spec": {"tolerations": [{"key": "k"}], "containers": [{"name": "a"}, {"name": "b", "command": ["x"]}]}},
            ".spec.tolerations, .spec.containers[1].command",
        ),
        # ImagePullSecrets items are LocalObjectReference, a +structType=atomic struct
        ({"spec": {"imagePullSecrets": [{"name": "reg"}]}}, ".spec.imagePullSecrets[0]"),
    ],
)
def test_atomic_rejection(patch: dict[str, Any], paths: str) -> None:
    with pytest.raises(AtomicMutationError) as ei:
        merge(pod(), patch)
    assert str(ei.value) == f"invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {paths}"


def test_raw_extension_is_untyped_atomic() -> None:
    obj = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "r"}, "revision": 1}
    with pytest.raises(AtomicMutationError, match=r": \.data$"):
        merge(obj, {"data": {"spec": {}}})


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"spec": {"containers": [{"image": "x"}]}},
            ".spec.containers: element 0: associative list with keys has an element that omits key field "
            '"name" (and doesn\'t have default value)',
        ),
        (
            {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}},
            '.spec.containers: duplicate entries for key [name="a"]',
        ),
        (
            {"spec": {"containers": [{"name": "a", "image": 1}]}},
            '.spec.containers[name="a"].image: expected string, got &value.valueUnstructured{Value:1}',
        ),
        ({"spec": {"priority": "high"}}, ".spec.priority: expected numeric (int or float), got string"),
        ({"spec": {"hostNetwork": "yes"}}, ".spec.hostNetwork: expected boolean, got &{yes}"),
        ({"spec": {"containers": {"name": "a"}}}, ".spec.containers: expected list, got &{map[name:a]}"),
        (
            {"metadata": {"finalizers": [None]}},
            ".metadata.finalizers: element 0: associative list without keys has an element that's an explicit null",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {
                            "name": "a",
                            "ports": [{"containerPort": 1, "protocol": "UDP"}, {"containerPort": 1, "protocol": "UDP"}],
                        }
                    ]
                }
            },
            '.spec.containers[name="a"].ports: duplicate entries for key [containerPort=1,protocol="UDP"]',
        ),
    ],
)
def test_patch_validation_errors(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(PatchSchemaError) as ei:
        merge(pod(), patch)
    assert str(ei.value) == f"failed to convert patch object to typed object: {message}"


def test_multiple_validation_errors_format() -> None:
    with pytest.raises(PatchSchemaError) as ei:
        merge(pod(), {"spec": {"priority": "x", "foo": 1}})
    assert str(ei.value) == (
        "failed to convert patch object to typed object: errors:\n"
        "  .spec.priority: expected numeric (int or float), got string\n"
        "  .spec.foo: field not declared in schema"
    )


def test_untyped_scalars_accept_any_scalar() -> None:
    # IntOrString (deduced), Quantity and Time (untyped scalars)
    obj = deployment(strategy={"type": "RollingUpdate"})
    out = merge(obj, {"spec": {"strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}}}})
    assert out["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"},
    }
    out = merge(
        pod(), {"spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}]}}
    )
    assert out["spec"]["containers"][0]["resources"] == {"limits": {"cpu": 1, "memory": "1Gi"}}


# ---- null and empty values (merge.go doLeaf / emptyPromoteToLeaf) ----


def test_null_replaces_scalar_and_atomic_but_not_granular() -> None:
    obj = pod(nodeSelector={"a": "b"}, priority=5)
    obj["spec"]["containers"][0]["command"] = ["sh"]
    out = merge(
        obj,
        {
            "metadata": {"labels": None},
            "spec": {"priority": None, "nodeSelector": None, "containers": [{"name": "app", "command": None}]},
        },
    )
    assert out["metadata"]["labels"] == {"app": "web"}
    assert out["spec"]["priority"] is None
    assert out["spec"]["nodeSelector"] is None
    assert out["spec"]["containers"][0]["command"] is None


def test_empty_containers_do_not_clear() -> None:
    obj = pod()
    obj["metadata"]["finalizers"] = ["f"]
    out = merge(obj, {"metadata": {"labels": {}, "finalizers": []}})
    assert out["metadata"]["labels"] == {"app": "web"} and out["metadata"]["finalizers"] == ["f"]
    out = merge(deployment(), {"metadata": {"labels": {}}})
    assert out["metadata"]["labels"] == {}


# ---- GVK, schemas, fallback ----


def test_gvk_mismatch() -> None:
    with pytest.raises(GVKMismatchError) as ei:
        apply_structured_merge_diff(pod(), {"apiVersion": "apps/v1", "kind": "Pod"})
    assert str(ei.value) == "patch (apps/v1, Kind=Pod) and original object (/v1, Kind=Pod) are not of the same gvk"
    # the MAP patcher stamps the object's GVK on the patch first, so a CEL-set apiVersion does not matter
    assert apply_configuration(pod(), {"apiVersion": "apps/v1", "kind": "Deployment"})["kind"] == "Pod"


def test_custom_resource_uses_deduced_schema() -> None:
    assert schema_for("example.com/v1", "Widget").deduced
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "1"}},
        "spec": {"items": [{"name": "a"}, {"name": "b"}], "size": 1, "nested": {"x": 1}},
    }
    out = merge(
        obj, {"metadata": {"labels": {"b": "2"}}, "spec": {"items": [{"name": "c"}], "nested": {"y": 2}, "new": True}}
    )
    # maps merge key by key; lists are atomic and replaced (findAtomics only looks at declared fields, so no rejection)
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert out["spec"] == {"items": [{"name": "c"}], "size": 1, "nested": {"x": 1, "y": 2}, "new": True}


def test_builtin_schema_coverage() -> None:
    meta = schema_metadata()
    assert meta["kubernetesVersion"].startswith("1.")
    assert meta["source"]
    for av, kind in [
        ("v1", "Pod"),
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "CronJob"),
        ("networking.k8s.io/v1", "Ingress"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("policy/v1", "PodDisruptionBudget"),
        ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("storage.k8s.io/v1", "StorageClass"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("coordination.k8s.io/v1", "Lease"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("certificates.k8s.io/v1", "CertificateSigningRequest"),
        ("node.k8s.io/v1", "RuntimeClass"),
    ]:
        assert not schema_for(av, kind).deduced, (av, kind)


def test_unknown_live_fields_are_kept() -> None:
    # A newer kube-apiserver may send fields our schema does not know; the merge keeps them (deliberate, see module doc)
    obj = pod()
    obj["spec"]["futureField"] = {"x": 1}
    out = merge(obj, {"spec": {"priority": 1}})
    assert out["spec"]["futureField"] == {"x": 1}


def test_structural_sharing() -> None:
    obj = pod()
    out = apply_configuration(obj, {"metadata": {"labels": {"x": "y"}}})
    assert out["spec"] is obj["spec"]
    assert out["metadata"]["annotations"] is obj["metadata"]["annotations"]


def test_error_base_class() -> None:
    with pytest.raises(ApplyConfigurationError):
        merge(pod(), {"spec": {"nodeSelector": {}}})


@pytest.mark.parametrize("gvk", [("v1", "Pod"), (5, None), ("", ""), ("a/b/c", "Thing")])
def test_a_patch_stamped_with_the_objects_gvk_merges_as_apply_structured_merge_diff_merges_it(gvk: Any) -> None:
    # apply_configuration skips the group/version/kind check its stamping always passes.
    api_version, kind = gvk
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "p", "labels": {"app": "web"}}}
    patch = {"metadata": {"labels": {"tier": "web"}}}
    stamped = {**patch, "apiVersion": api_version if isinstance(api_version, str) else "",
               "kind": kind if isinstance(kind, str) else ""}
    assert merge(obj, patch) == apply_structured_merge_diff(obj, stamped)
