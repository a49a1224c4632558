"""Realistic admission requests for benchmarks: a Pod CREATE of a few KB and a Deployment UPDATE."""

from __future__ import annotations

import copy
from typing import Any


def _container(index: int) -> dict[str, Any]:
    return {
        "name": f"app-{index}",
        "image": f"registry.example.com/team/app-{index}:v1.{index}.3",
        "ports": [{"containerPort": 8080 + index, "protocol": "TCP", "name": f"http-{index}"}],
        "env": [{"name": f"VAR_{n}", "value": f"value-{n}-" + "x" * 24} for n in range(12)],
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
        "securityContext": {"privileged": False, "runAsNonRoot": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}, {"name": "data", "mountPath": "/var/lib/app"}],
        "livenessProbe": {"httpGet": {"path": "/livez", "port": 8080 + index}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080 + index}, "periodSeconds": 5},
    }


def pod(containers: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7f9c6d8b5-x2x9q",
            "namespace": "team-a",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7f9c6d8b5", "env": "prod"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                            "kubectl.kubernetes.io/default-container": "app-0"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7f9c6d8b5",
                                 "uid": "0d3f4a59-1d9e-4c42-9a43-3c7b8f0d1e2f", "controller": True}],
        },
        "spec": {
            "serviceAccountName": "web",
            "containers": [_container(i) for i in range(containers)],
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}},
                        {"name": "data", "emptyDir": {}}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
        },
    }


def pod_create_request(uid: str = "b7c5a1de-2f36-4c1d-9d7a-5c1f0a9e8b11") -> dict[str, Any]:
    obj = pod()
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": obj["metadata"]["name"],
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "uid": "5a1f0e1e-1c1e-4a8e-9a0b-0c2d9e7f6a11",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                    "system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def distinct_pod_create_requests(count: int) -> list[dict[str, Any]]:
    """``count`` Pod CREATEs that differ in uid, name and every container's image: what the benchmark's policies
    read of each is its own, so no answer an earlier request got can be reused (the worst case for what the daemon
    keeps across requests)."""
    requests = []
    for number in range(count):
        review = pod_create_request(uid=f"b7c5a1de-2f36-4c1d-9d7a-{number:012x}")
        obj = review["request"]["object"]
        obj["metadata"]["name"] = review["request"]["name"] = f"web-7f9c6d8b5-{number:05x}"
        for container in obj["spec"]["containers"]:
            container["image"] = container["image"].replace(":v1.", f":v{number}.")
        requests.append(review)
    return requests


def deployment_update_request(uid: str = "c1d2e3f4-0000-4000-8000-000000000001") -> dict[str, Any]:
    template = pod()
    template["metadata"].pop("ownerReferences")
    template["metadata"].pop("name")
    old = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}, "generation": 7},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/team/app-0:v1.0.4"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "web",
            "namespace": "team-a",
            "operation": "UPDATE",
            "userInfo": {"username": "alice@example.com", "groups": ["developers", "system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
        },
    }
