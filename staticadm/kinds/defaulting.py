"""Kubernetes' defaulting of a built-in object, as kube-apiserver runs it after decoding and before admission.

kube-apiserver's defaulter for a kind (``zz_generated.defaults.go``, made by defaulter-gen) walks the typed
object from its root: at each struct it calls the hand-written ``SetDefaults_<Type>`` of
k8s.io/kubernetes ``pkg/apis/<group>/<version>/defaults.go``, applies the ``+default=`` markers of its fields
(to a field still at its zero value) and goes on into the fields that hold structs. :func:`apply_defaults` is
that walk over the round-tripped object (:mod:`staticadm.kinds.typed`), with the ``+default=`` markers read
from k8s.io/api by the generator and these ``SetDefaults_*`` functions ported from their Go source:

- core/v1: Pod (requests from limits, ``enableServiceLinks``, host-network ports), PodSpec (``dnsPolicy``,
  ``restartPolicy``, ``securityContext``, ``terminationGracePeriodSeconds``, ``schedulerName``), Container and
  EphemeralContainer (``imagePullPolicy`` from the image's tag, termination message path and policy), Probe,
  HTTPGetAction, Volume (``emptyDir`` when no source), the Secret/ConfigMap/DownwardAPI/Projected volume
  modes, ServiceAccountTokenProjection, HostPathVolumeSource, ObjectFieldSelector, ResourceList (rounded up
  to milli-units), PersistentVolume(Claim)(Spec), Service, Secret, Namespace(Status), Endpoints,
  LimitRangeItem, ReplicationController, NodeStatus;
- apps/v1: Deployment, DaemonSet, StatefulSet, ReplicaSet; batch/v1: Job, CronJob,
  PodFailurePolicyOnPodConditionsPattern; rbac.authorization.k8s.io/v1: Subject, RoleBinding and
  ClusterRoleBinding role references; networking.k8s.io/v1: NetworkPolicy(Port); storage.k8s.io/v1:
  StorageClass; scheduling.k8s.io/v1: PriorityClass; autoscaling/v2: HorizontalPodAutoscaler (min replicas,
  the CPU metric, behaviour rules).

Feature gates are taken at their Kubernetes 1.36 defaults; the pod-level resources defaults
(``PodLevelResources``: pod ``spec.resources`` from the containers') and the image volume pull policy
(``ImageVolume``) are not ported, nor CSIDriver's (gated fields newer than the sources read). Other groups
and versions get their ``+default=`` markers only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from staticadm.cel.libraries import quantity as quantities
from staticadm.kinds.go_types import NO_DEFAULT, GoField, GoTypes
from staticadm.kinds.typed import canonical_quantity, is_empty
from staticadm.yamljson import copy_json

_CORE = "k8s.io/api/core/v1."
_APPS = "k8s.io/api/apps/v1."
_BATCH = "k8s.io/api/batch/v1."
_RBAC = "k8s.io/api/rbac/v1."
_NETWORKING = "k8s.io/api/networking/v1."
_STORAGE = "k8s.io/api/storage/v1."
_SCHEDULING = "k8s.io/api/scheduling/v1."
_AUTOSCALING = "k8s.io/api/autoscaling/v2."

#: A type's defaulting function: (the walk, the struct's value, its path).
Defaulter = Callable[["_Walk", dict[str, Any], str], None]


def apply_defaults(obj: dict[str, Any], type_id: str, types: GoTypes) -> list[str]:
    """Defaults ``obj`` (the encoding of a ``type_id`` struct) in place; the paths of the fields it set."""
    walk = _Walk(types)
    walk.struct(obj, type_id, "")
    return walk.defaulted


class _Walk:
    def __init__(self, types: GoTypes) -> None:
        self.types = types
        self.defaulted: list[str] = []

    def set(self, value: dict[str, Any], name: str, new: Any, path: str) -> None:
        """Sets a field, recording it (a default that changes nothing is not one)."""
        if value.get(name) != new or name not in value:
            value[name] = new
            self.defaulted.append(_join(path, name))

    def struct(self, value: dict[str, Any], type_id: str, path: str) -> None:
        defaulter = _DEFAULTERS.get(type_id)
        if defaulter is not None:
            defaulter(self, value, path)
        for go_field, has_default, rounds, descends in _plan(self.types, type_id):
            if has_default and _unset(value.get(go_field.name)) and \
                    not (go_field.omitempty and is_empty(go_field.default, go_field.ref)):
                self.set(value, go_field.name, copy_json(go_field.default), path)
            if rounds:
                _round_up_resource_list(value.get(go_field.name))
            if descends:
                child = value.get(go_field.name)
                if child is not None:
                    self.value(child, go_field.ref, _join(path, go_field.name))

    def value(self, value: Any, ref: str, path: str) -> None:
        while ref.startswith("*"):
            ref = ref[1:]
        if ref.startswith("@") and isinstance(value, dict):
            self.struct(value, ref[1:], path)
        elif ref.startswith("[]@") and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    self.struct(item, ref[3:], f"{path}[{index}]")
        elif ref.startswith("map:@") and isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, dict):
                    self.struct(item, ref[5:], _join(path, key))


_CORE_RESOURCE_LIST = "map:quantity"

#: A struct's fields the walk has something to do with: (field, has a +default marker, is a core resource list to
#: round, holds structs that defaulting changes). The rest (scalars without a default, structs nothing defaults
#: anywhere inside) are skipped: the walk costs what defaulting can touch.
_FieldPlan = tuple[GoField, bool, bool, bool]
_PLANS: dict[str, tuple[_FieldPlan, ...]] = {}
_DEFAULTED_INSIDE: dict[str, bool] = {}


def _plan(types: GoTypes, type_id: str) -> tuple[_FieldPlan, ...]:
    found = _PLANS.get(type_id)
    if found is None:
        entries = []
        for go_field in types.structs[type_id]:
            has_default = go_field.default is not NO_DEFAULT
            rounds = go_field.ref.startswith(_CORE_RESOURCE_LIST) and type_id.startswith(_CORE)
            descends = _holds_defaulted(types, go_field.ref)
            if has_default or rounds or descends:
                entries.append((go_field, has_default, rounds, descends))
        found = _PLANS[type_id] = tuple(entries)
    return found


def _holds_defaulted(types: GoTypes, ref: str) -> bool:
    """Whether a value of ``ref`` holds a struct the walk defaults (``_Walk.value``'s references)."""
    ref = ref.lstrip("*")
    for prefix in ("@", "[]@", "map:@"):
        if ref.startswith(prefix):
            return _defaulted_inside(types, ref[len(prefix):])
    return False


def _defaulted_inside(types: GoTypes, type_id: str) -> bool:
    known = _DEFAULTED_INSIDE.get(type_id)
    if known is not None:
        return known
    # A recursive type (JSONSchemaProps) is walked while its answer is being found.
    _DEFAULTED_INSIDE[type_id] = True
    answer = type_id in _DEFAULTERS or any(
        go_field.default is not NO_DEFAULT or (go_field.ref.startswith(_CORE_RESOURCE_LIST) and
                                               type_id.startswith(_CORE)) or _holds_defaulted(types, go_field.ref)
        for go_field in types.structs[type_id])
    _DEFAULTED_INSIDE[type_id] = answer
    return answer


def _unset(value: Any) -> bool:
    """A field at its Go zero value, as defaulter-gen tests it before applying a marker."""
    return value is None or value == "" or (type(value) is int and value == 0)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _round_up_resource_list(resources: Any) -> None:
    """SetDefaults_ResourceList: every quantity rounded up (away from zero) to milli-units, format kept."""
    if not isinstance(resources, dict):
        return
    for key, text in resources.items():
        nanos = quantities.parse_nanos(text)
        rounded = -(-abs(nanos) // 1_000_000) * 1_000_000 * (1 if nanos >= 0 else -1)
        if rounded != nanos:
            resources[key] = canonical_quantity(rounded, quantities.quantity_format(text))


# -- core/v1 ---------------------------------------------------------------------------------------


def _pod(walk: _Walk, pod: dict[str, Any], path: str) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for list_name in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(list_name) or []):
            resources = container.get("resources") or {}
            limits = resources.get("limits")
            if limits:
                requests = resources.setdefault("requests", {})
                for key, value in limits.items():
                    if key not in requests:
                        walk.set(requests, key, value, f"spec.{list_name}[{index}].resources.requests")
    if spec.get("enableServiceLinks") is None:
        walk.set(spec, "enableServiceLinks", True, "spec")
    if spec.get("hostNetwork"):
        for list_name in ("containers", "initContainers"):
            for index, container in enumerate(spec.get(list_name) or []):
                for port_index, port in enumerate(container.get("ports") or []):
                    if not port.get("hostPort"):
                        walk.set(port, "hostPort", port.get("containerPort", 0),
                                 f"spec.{list_name}[{index}].ports[{port_index}]")


def _pod_spec(walk: _Walk, spec: dict[str, Any], path: str) -> None:
    for name, default in (("dnsPolicy", "ClusterFirst"), ("restartPolicy", "Always")):
        if not spec.get(name):
            walk.set(spec, name, default, path)
    if spec.get("securityContext") is None:
        walk.set(spec, "securityContext", {}, path)
    if spec.get("terminationGracePeriodSeconds") is None:
        walk.set(spec, "terminationGracePeriodSeconds", 30, path)
    if not spec.get("schedulerName"):
        walk.set(spec, "schedulerName", "default-scheduler", path)


#: docker/distribution's reference grammar, as parsers.ParseImageName reads an image (ParseNormalizedNamed).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_IMAGE = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
                    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
                    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?")


def image_tag(image: str) -> str:
    """The tag parsers.ParseImageName finds: ``latest`` when the image names neither tag nor digest, ``""``
    when it has only a digest or does not parse."""
    found = _IMAGE.fullmatch(image)
    if found is None or len(image) > 255 + 128 + 80:
        return ""
    if found["tag"]:
        return found["tag"]
    return "" if found["digest"] else "latest"


def _container(walk: _Walk, container: dict[str, Any], path: str) -> None:
    if not container.get("imagePullPolicy"):
        tag = image_tag(container.get("image") or "")
        walk.set(container, "imagePullPolicy", "Always" if tag == "latest" else "IfNotPresent", path)
    if not container.get("terminationMessagePath"):
        walk.set(container, "terminationMessagePath", "/dev/termination-log", path)
    if not container.get("terminationMessagePolicy"):
        walk.set(container, "terminationMessagePolicy", "File", path)


def _probe(walk: _Walk, probe: dict[str, Any], path: str) -> None:
    for name, default in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                          ("failureThreshold", 3)):
        if not probe.get(name):
            walk.set(probe, name, default, path)


def _http_get(walk: _Walk, action: dict[str, Any], path: str) -> None:
    if not action.get("path"):
        walk.set(action, "path", "/", path)
    if not action.get("scheme"):
        walk.set(action, "scheme", "HTTP", path)


def _volume(walk: _Walk, volume: dict[str, Any], path: str) -> None:
    # ptr.AllPtrFieldsNil(&obj.VolumeSource): every source (inlined beside the name) unset.
    if all(value is None for key, value in volume.items() if key != "name"):
        walk.set(volume, "emptyDir", {}, path)


def _default_mode(mode: int) -> Defaulter:
    def default(walk: _Walk, source: dict[str, Any], path: str) -> None:
        if source.get("defaultMode") is None:
            walk.set(source, "defaultMode", mode, path)
    return default


def _token_projection(walk: _Walk, projection: dict[str, Any], path: str) -> None:
    if projection.get("expirationSeconds") is None:
        walk.set(projection, "expirationSeconds", 3600, path)


def _host_path(walk: _Walk, source: dict[str, Any], path: str) -> None:
    if source.get("type") is None:
        walk.set(source, "type", "", path)


def _field_selector(walk: _Walk, selector: dict[str, Any], path: str) -> None:
    if not selector.get("apiVersion"):
        walk.set(selector, "apiVersion", "v1", path)


def _persistent_volume(walk: _Walk, volume: dict[str, Any], path: str) -> None:
    status, spec = volume.setdefault("status", {}), volume.setdefault("spec", {})
    if not status.get("phase"):
        walk.set(status, "phase", "Pending", _join(path, "status"))
    if not spec.get("persistentVolumeReclaimPolicy"):
        walk.set(spec, "persistentVolumeReclaimPolicy", "Retain", _join(path, "spec"))
    if spec.get("volumeMode") is None:
        walk.set(spec, "volumeMode", "Filesystem", _join(path, "spec"))


def _claim(walk: _Walk, claim: dict[str, Any], path: str) -> None:
    status = claim.setdefault("status", {})
    if not status.get("phase"):
        walk.set(status, "phase", "Pending", _join(path, "status"))


def _claim_spec(walk: _Walk, spec: dict[str, Any], path: str) -> None:
    if spec.get("volumeMode") is None:
        walk.set(spec, "volumeMode", "Filesystem", path)


def _service(walk: _Walk, service: dict[str, Any], path: str) -> None:
    spec = service.setdefault("spec", {})
    where = "spec"
    if not spec.get("sessionAffinity"):
        walk.set(spec, "sessionAffinity", "None", where)
    if spec["sessionAffinity"] == "None" and spec.get("sessionAffinityConfig") is not None:
        del spec["sessionAffinityConfig"]
        walk.defaulted.append("spec.sessionAffinityConfig")
    if spec["sessionAffinity"] == "ClientIP":
        client_ip = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
        if client_ip.get("timeoutSeconds") is None:
            walk.set(spec, "sessionAffinityConfig", {"clientIP": {"timeoutSeconds": 10800}}, where)
    if not spec.get("type"):
        walk.set(spec, "type", "ClusterIP", where)
    for index, port in enumerate(spec.get("ports") or []):
        if not port.get("protocol"):
            walk.set(port, "protocol", "TCP", f"spec.ports[{index}]")
        if port.get("targetPort") in (0, "", None):
            walk.set(port, "targetPort", port.get("port", 0), f"spec.ports[{index}]")
    service_type = spec["type"]
    externally_accessible = service_type in ("LoadBalancer", "NodePort") or \
        (service_type == "ClusterIP" and bool(spec.get("externalIPs")))
    if externally_accessible and not spec.get("externalTrafficPolicy"):
        walk.set(spec, "externalTrafficPolicy", "Cluster", where)
    if spec.get("internalTrafficPolicy") is None and service_type in ("NodePort", "LoadBalancer", "ClusterIP"):
        walk.set(spec, "internalTrafficPolicy", "Cluster", where)
    if service_type == "LoadBalancer":
        if spec.get("allocateLoadBalancerNodePorts") is None:
            walk.set(spec, "allocateLoadBalancerNodePorts", True, where)
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        for index, entry in enumerate(ingress):
            if entry.get("ip") and entry.get("ipMode") is None:
                walk.set(entry, "ipMode", "VIP", f"status.loadBalancer.ingress[{index}]")


def _secret(walk: _Walk, secret: dict[str, Any], path: str) -> None:
    if not secret.get("type"):
        walk.set(secret, "type", "Opaque", path)


def _namespace(walk: _Walk, namespace: dict[str, Any], path: str) -> None:
    metadata = namespace.setdefault("metadata", {})
    name = metadata.get("name")
    if name:
        labels = metadata.setdefault("labels", {})
        walk.set(labels, "kubernetes.io/metadata.name", name, "metadata.labels")


def _namespace_status(walk: _Walk, status: dict[str, Any], path: str) -> None:
    if not status.get("phase"):
        walk.set(status, "phase", "Active", path)


def _endpoints(walk: _Walk, endpoints: dict[str, Any], path: str) -> None:
    for subset_index, subset in enumerate(endpoints.get("subsets") or []):
        for index, port in enumerate(subset.get("ports") or []):
            if not port.get("protocol"):
                walk.set(port, "protocol", "TCP", f"subsets[{subset_index}].ports[{index}]")


def _limit_range_item(walk: _Walk, item: dict[str, Any], path: str) -> None:
    if item.get("type") != "Container":
        return
    defaults, requests = item.setdefault("default", {}), item.setdefault("defaultRequest", {})
    for key, value in (item.get("max") or {}).items():
        if key not in defaults:
            walk.set(defaults, key, value, _join(path, "default"))
    for key, value in defaults.items():
        if key not in requests:
            walk.set(requests, key, value, _join(path, "defaultRequest"))
    for key, value in (item.get("min") or {}).items():
        if key not in requests:
            walk.set(requests, key, value, _join(path, "defaultRequest"))
    for name in ("default", "defaultRequest"):
        if not item[name]:
            del item[name]  # an empty map is omitted (omitempty)


def _replication_controller(walk: _Walk, controller: dict[str, Any], path: str) -> None:
    spec = controller.get("spec") or {}
    template = spec.get("template")
    labels = ((template or {}).get("metadata") or {}).get("labels")
    if labels is not None:
        if not spec.get("selector"):
            walk.set(spec, "selector", dict(labels), "spec")
        metadata = controller.setdefault("metadata", {})
        if not metadata.get("labels"):
            walk.set(metadata, "labels", dict(labels), "metadata")


def _node_status(walk: _Walk, status: dict[str, Any], path: str) -> None:
    if status.get("allocatable") is None and status.get("capacity") is not None:
        walk.set(status, "allocatable", dict(status["capacity"]), path)


# -- apps/v1 ---------------------------------------------------------------------------------------


def _rolling_update(walk: _Walk, spec: dict[str, Any], field: str, max_unavailable: Any, max_surge: Any) -> None:
    """A Deployment's or DaemonSet's strategy: RollingUpdate unless given, with its two bounds."""
    strategy = spec.setdefault(field, {})
    if not strategy.get("type"):
        walk.set(strategy, "type", "RollingUpdate", f"spec.{field}")
    if strategy["type"] == "RollingUpdate":
        if strategy.get("rollingUpdate") is None:
            strategy["rollingUpdate"] = {}
        rolling = strategy["rollingUpdate"]
        for name, default in (("maxUnavailable", max_unavailable), ("maxSurge", max_surge)):
            if rolling.get(name) is None:
                walk.set(rolling, name, default, f"spec.{field}.rollingUpdate")


def _deployment(walk: _Walk, deployment: dict[str, Any], path: str) -> None:
    spec = deployment.setdefault("spec", {})
    if spec.get("replicas") is None:
        walk.set(spec, "replicas", 1, "spec")
    _rolling_update(walk, spec, "strategy", "25%", "25%")
    for name, default in (("revisionHistoryLimit", 10), ("progressDeadlineSeconds", 600)):
        if spec.get(name) is None:
            walk.set(spec, name, default, "spec")


def _daemon_set(walk: _Walk, daemon_set: dict[str, Any], path: str) -> None:
    spec = daemon_set.setdefault("spec", {})
    _rolling_update(walk, spec, "updateStrategy", 1, 0)
    if spec.get("revisionHistoryLimit") is None:
        walk.set(spec, "revisionHistoryLimit", 10, "spec")


def _stateful_set(walk: _Walk, stateful_set: dict[str, Any], path: str) -> None:
    spec = stateful_set.setdefault("spec", {})
    if not spec.get("podManagementPolicy"):
        walk.set(spec, "podManagementPolicy", "OrderedReady", "spec")
    strategy = spec.setdefault("updateStrategy", {})
    if not strategy.get("type"):
        walk.set(strategy, "type", "RollingUpdate", "spec.updateStrategy")
        if strategy.get("rollingUpdate") is None:
            strategy["rollingUpdate"] = {}
    rolling = strategy.get("rollingUpdate")
    if strategy["type"] == "RollingUpdate" and rolling is not None and rolling.get("partition") is None:
        walk.set(rolling, "partition", 0, "spec.updateStrategy.rollingUpdate")
    # StatefulSetAutoDeletePVC: GA, always on.
    if spec.get("persistentVolumeClaimRetentionPolicy") is None:
        spec["persistentVolumeClaimRetentionPolicy"] = {}
    retention = spec["persistentVolumeClaimRetentionPolicy"]
    for name in ("whenDeleted", "whenScaled"):
        if not retention.get(name):
            walk.set(retention, name, "Retain", "spec.persistentVolumeClaimRetentionPolicy")
    for name, default in (("replicas", 1), ("revisionHistoryLimit", 10)):
        if spec.get(name) is None:
            walk.set(spec, name, default, "spec")


def _replica_set(walk: _Walk, replica_set: dict[str, Any], path: str) -> None:
    spec = replica_set.setdefault("spec", {})
    if spec.get("replicas") is None:
        walk.set(spec, "replicas", 1, "spec")


# -- batch/v1 --------------------------------------------------------------------------------------


def _job(walk: _Walk, job: dict[str, Any], path: str) -> None:
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        walk.set(spec, "completions", 1, "spec")
        walk.set(spec, "parallelism", 1, "spec")
    if spec.get("parallelism") is None:
        walk.set(spec, "parallelism", 1, "spec")
    if spec.get("backoffLimit") is None:
        walk.set(spec, "backoffLimit", 2**31 - 1 if spec.get("backoffLimitPerIndex") is not None else 6, "spec")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    metadata = job.setdefault("metadata", {})
    if labels is not None and not metadata.get("labels"):
        walk.set(metadata, "labels", dict(labels), "metadata")
    if spec.get("completionMode") is None:
        walk.set(spec, "completionMode", "NonIndexed", "spec")
    if spec.get("suspend") is None:
        walk.set(spec, "suspend", False, "spec")
    # JobPodReplacementPolicy: GA, always on.
    if spec.get("podReplacementPolicy") is None:
        walk.set(spec, "podReplacementPolicy",
                 "Failed" if spec.get("podFailurePolicy") is not None else "TerminatingOrFailed", "spec")
    if spec.get("manualSelector") is None:
        walk.set(spec, "manualSelector", False, "spec")


def _cron_job(walk: _Walk, cron_job: dict[str, Any], path: str) -> None:
    spec = cron_job.setdefault("spec", {})
    if not spec.get("concurrencyPolicy"):
        walk.set(spec, "concurrencyPolicy", "Allow", "spec")
    for name, default in (("suspend", False), ("successfulJobsHistoryLimit", 3), ("failedJobsHistoryLimit", 1)):
        if spec.get(name) is None:
            walk.set(spec, name, default, "spec")


def _pod_conditions_pattern(walk: _Walk, pattern: dict[str, Any], path: str) -> None:
    if not pattern.get("status"):
        walk.set(pattern, "status", "True", path)


# -- rbac.authorization.k8s.io/v1, networking.k8s.io/v1 ---------------------------------------------


def _subject(walk: _Walk, subject: dict[str, Any], path: str) -> None:
    # A ServiceAccount's is "", which it already is.
    if not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
        walk.set(subject, "apiGroup", "rbac.authorization.k8s.io", path)


def _role_binding(walk: _Walk, binding: dict[str, Any], path: str) -> None:
    role_ref = binding.setdefault("roleRef", {})
    if not role_ref.get("apiGroup"):
        walk.set(role_ref, "apiGroup", "rbac.authorization.k8s.io", "roleRef")


def _network_policy(walk: _Walk, policy: dict[str, Any], path: str) -> None:
    spec = policy.setdefault("spec", {})
    if spec.get("policyTypes"):
        return
    types = ["Ingress"]
    if spec.get("egress"):
        types.append("Egress")
    walk.set(spec, "policyTypes", types, "spec")


def _network_policy_port(walk: _Walk, port: dict[str, Any], path: str) -> None:
    if port.get("protocol") is None:
        walk.set(port, "protocol", "TCP", path)


# -- storage.k8s.io/v1, scheduling.k8s.io/v1, autoscaling/v2 -------------------------------------------


def _storage_class(walk: _Walk, storage_class: dict[str, Any], path: str) -> None:
    for name, default in (("reclaimPolicy", "Delete"), ("volumeBindingMode", "Immediate")):
        if storage_class.get(name) is None:
            walk.set(storage_class, name, default, path)


def _priority_class(walk: _Walk, priority_class: dict[str, Any], path: str) -> None:
    if priority_class.get("preemptionPolicy") is None:
        walk.set(priority_class, "preemptionPolicy", "PreemptLowerPriority", path)


#: autoscaling/v2's defaultHPAScaleUpRules and defaultHPAScaleDownRules (the HPA behaviour before v2).
_SCALE_UP_RULES = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                   "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                {"type": "Percent", "value": 100, "periodSeconds": 15}]}
_SCALE_DOWN_RULES = {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def _horizontal_pod_autoscaler(walk: _Walk, autoscaler: dict[str, Any], path: str) -> None:
    spec = autoscaler.setdefault("spec", {})
    if spec.get("minReplicas") is None:
        walk.set(spec, "minReplicas", 1, "spec")
    if not spec.get("metrics"):
        walk.set(spec, "metrics", [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}], "spec")
    behavior = spec.get("behavior")
    if behavior is not None:
        # GenerateHPAScale{Up,Down}Rules: the defaults, with every field the given rules set (not nil) kept.
        for direction, defaults in (("scaleUp", _SCALE_UP_RULES), ("scaleDown", _SCALE_DOWN_RULES)):
            given = behavior.get(direction) or {}
            for name, default in defaults.items():
                if given.get(name) is None:
                    walk.set(given, name, copy_json(default), f"spec.behavior.{direction}")
            behavior[direction] = given


_DEFAULTERS: dict[str, Defaulter] = {
    _CORE + "Pod": _pod,
    _CORE + "PodSpec": _pod_spec,
    _CORE + "Container": _container,
    _CORE + "EphemeralContainer": _container,
    _CORE + "Probe": _probe,
    _CORE + "HTTPGetAction": _http_get,
    _CORE + "Volume": _volume,
    _CORE + "SecretVolumeSource": _default_mode(0o644),
    _CORE + "ConfigMapVolumeSource": _default_mode(0o644),
    _CORE + "DownwardAPIVolumeSource": _default_mode(0o644),
    _CORE + "ProjectedVolumeSource": _default_mode(0o644),
    _CORE + "ServiceAccountTokenProjection": _token_projection,
    _CORE + "HostPathVolumeSource": _host_path,
    _CORE + "ObjectFieldSelector": _field_selector,
    _CORE + "PersistentVolume": _persistent_volume,
    _CORE + "PersistentVolumeClaim": _claim,
    _CORE + "PersistentVolumeClaimSpec": _claim_spec,
    _CORE + "Service": _service,
    _CORE + "Secret": _secret,
    _CORE + "Namespace": _namespace,
    _CORE + "NamespaceStatus": _namespace_status,
    _CORE + "Endpoints": _endpoints,
    _CORE + "LimitRangeItem": _limit_range_item,
    _CORE + "ReplicationController": _replication_controller,
    _CORE + "NodeStatus": _node_status,
    _APPS + "Deployment": _deployment,
    _APPS + "DaemonSet": _daemon_set,
    _APPS + "StatefulSet": _stateful_set,
    _APPS + "ReplicaSet": _replica_set,
    _BATCH + "Job": _job,
    _BATCH + "CronJob": _cron_job,
    _BATCH + "PodFailurePolicyOnPodConditionsPattern": _pod_conditions_pattern,
    _RBAC + "Subject": _subject,
    _RBAC + "RoleBinding": _role_binding,
    _RBAC + "ClusterRoleBinding": _role_binding,
    _NETWORKING + "NetworkPolicy": _network_policy,
    _NETWORKING + "NetworkPolicyPort": _network_policy_port,
    _STORAGE + "StorageClass": _storage_class,
    _SCHEDULING + "PriorityClass": _priority_class,
    _AUTOSCALING + "HorizontalPodAutoscaler": _horizontal_pod_autoscaler,
}
