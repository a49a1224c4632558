"""Generated policy sets for the benchmark: N ValidatingAdmissionPolicies with bindings, and a few MAPs.

The mix is deterministic (seeded by the policy index) so two runs measure the same work. About 10% of
the policies match the Pod CREATE of bench/fixtures.py and about 10% the Deployment UPDATE; another
~10% target pods but are filtered out by an objectSelector, an operation or a matchCondition (they
still cost a candidate lookup and sometimes a CEL evaluation, as in a real cluster); the rest target
other resources. Every validation of a matching policy passes for the fixtures, so both servers
answer ``allowed: true`` and the comparison with the null server is like for like.

No generated policy matches CREATE of ``NO_MATCH_GROUP``/``NO_MATCH_RESOURCE`` (nor uses a resource
wildcard for CREATE), which is what the no-match measurement relies on.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from bench.fixtures import pod_create_request

API_VERSION = "admissionregistration.k8s.io/v1"
SUFFIX = ".static.k8s.io"
#: Namespace of the fixtures; its labels come from the namespaces file the daemon is given.
NAMESPACE = "team-a"
NAMESPACE_LABELS = {"env": "prod", "team": "a", "kubernetes.io/metadata.name": NAMESPACE}
NO_MATCH_GROUP = "nomatch.bench.example.com"
#: The rename probe's own resource (see ``probe_policy``).
PROBE_GROUP, PROBE_RESOURCE, PROBE_KIND = "probe.bench.example.com", "probes", "Probe"
NO_MATCH_RESOURCE = "gadgets"

# (apiGroups, resources) that neither fixture request is for: the bulk of a realistic policy set.
_OTHER_RESOURCES: tuple[tuple[list[str], list[str]], ...] = (
    ([""], ["services"]),
    ([""], ["configmaps"]),
    ([""], ["secrets"]),
    ([""], ["persistentvolumeclaims"]),
    ([""], ["namespaces"]),
    ([""], ["serviceaccounts"]),
    (["apps"], ["statefulsets"]),
    (["apps"], ["daemonsets"]),
    (["batch"], ["jobs", "cronjobs"]),
    (["networking.k8s.io"], ["ingresses"]),
    (["networking.k8s.io"], ["networkpolicies"]),
    (["rbac.authorization.k8s.io"], ["roles", "rolebindings"]),
    (["rbac.authorization.k8s.io"], ["clusterroles", "clusterrolebindings"]),
    (["policy"], ["poddisruptionbudgets"]),
    (["autoscaling"], ["horizontalpodautoscalers"]),
    (["example.com"], ["widgets"]),
    (["cert-manager.io"], ["certificates", "issuers"]),
    (["gateway.networking.k8s.io"], ["httproutes", "gateways"]),
)

# Validations that pass for the fixture Pod (every one reads the object, several walk the containers).
_POD_VALIDATIONS: tuple[tuple[str, str], ...] = (
    ("object.spec.containers.all(c, !c.image.endsWith(':latest-{i}'))", ""),
    ("object.spec.containers.all(c, has(c.resources.limits) && 'memory' in c.resources.limits)", ""),
    ("!has(object.spec.hostNetwork) || object.spec.hostNetwork == false", ""),
    ("object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) "
     "|| c.securityContext.privileged == false)", "'privileged container in ' + request.namespace"),
    ("size(object.spec.containers) <= {limit}", ""),
    ("variables.images.all(img, img.startsWith('registry.example.com/'))",
     "'images must come from registry.example.com: ' + variables.images.join(', ')"),
    ("!has(object.metadata.labels) || object.metadata.labels[?'app'].orValue('') != 'forbidden-{i}'", ""),
    ("object.spec.containers.all(c, quantity(c.resources.limits.memory).isLessThan(quantity('{gi}Gi')))", ""),
    ("request.userInfo.username != 'system:anonymous-{i}'", ""),
    ("object.spec.containers.all(c, c.env.all(e, !e.name.startsWith('SECRET_{i}')))", ""),
)

# Validations that pass for the fixture Deployment UPDATE (with oldObject).
_DEPLOYMENT_VALIDATIONS: tuple[tuple[str, str], ...] = (
    ("object.spec.replicas <= {limit}", "'too many replicas: ' + string(object.spec.replicas)"),
    ("oldObject == null || object.spec.selector == oldObject.spec.selector", ""),
    ("object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))", ""),
    ("variables.images.all(img, img.startsWith('registry.example.com/'))", ""),
    ("!has(object.metadata.labels) || object.metadata.labels[?'app'].orValue('') != 'forbidden-{i}'", ""),
)

_GENERIC_VALIDATIONS: tuple[tuple[str, str], ...] = (
    ("!has(object.metadata.labels) || !('bench-deny-{i}' in object.metadata.labels)", ""),
    ("!has(object.metadata.annotations) || object.metadata.annotations[?'bench/deny-{i}'].orValue('') != 'true'",
     "'denied by bench policy {i}'"),
    ("request.userInfo.username != 'system:anonymous-{i}'", ""),
)

_MATCH_CONDITIONS_TRUE: tuple[str, ...] = (
    "request.namespace != 'kube-system'",
    "!(request.userInfo.username in ['system:admin-{i}', 'system:bench-{i}'])",
    "has(object.metadata.labels)",
)
#: False for the fixture Pod (tier=frontend): the policy is a candidate but is skipped.
_MATCH_CONDITION_FALSE = "has(object.metadata.labels) && object.metadata.labels[?'tier'].orValue('') == 'backend-{i}'"


def _name(kind: str, index: int) -> str:
    return f"bench-{kind}-{index:04d}{SUFFIX}"


def _rule(groups: list[str], resources: list[str], operations: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "apiVersions": ["*" if groups == ["*"] else "v1"], "operations": operations,
            "resources": resources}


def _role(index: int) -> str:
    """Which slice of the mix policy ``index`` falls in; the pattern repeats every 20 policies."""
    slot = index % 20
    if slot in (0, 10):
        return "pod-match"
    if slot in (5, 15):
        return "deployment-match"
    if slot in (3, 13):
        return "pod-filtered"
    return "other"


def _validations(templates: tuple[tuple[str, str], ...], index: int, count: int) -> list[dict[str, Any]]:
    out = []
    for k in range(count):
        expression, message_expression = templates[(index + 3 * k) % len(templates)]
        fmt = {"i": index, "limit": 10 + index % 50, "gi": 1 + index % 4}
        item: dict[str, Any] = {"expression": expression.format(**fmt)}
        if message_expression:
            item["messageExpression"] = message_expression.format(**fmt)
        else:
            item["message"] = f"bench policy {index} validation {k} failed"
        if k == 1:
            item["reason"] = "Forbidden"
        out.append(item)
    return out


def validating_policy(index: int) -> list[dict[str, Any]]:
    """The policy and its binding, as two documents of one file."""
    role = _role(index)
    name = _name("vap", index)
    validation_count = 1 + index % 3
    spec: dict[str, Any] = {"failurePolicy": "Fail" if index % 4 else "Ignore"}
    binding_match: dict[str, Any] | None = None
    variables: list[dict[str, str]] = []
    match_conditions: list[dict[str, str]] = []
    if role == "pod-match":
        operations = [["CREATE"], ["CREATE", "UPDATE"], ["*"]][index % 3]
        spec["matchConstraints"] = {"resourceRules": [_rule([""], ["pods"], operations)]}
        if index % 40 == 0:
            spec["matchConstraints"]["namespaceSelector"] = {
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "staging"]}]}
        variables = [{"name": "images", "expression": "object.spec.containers.map(c, c.image)"}]
        templates = _POD_VALIDATIONS
        if index % 20 == 10:
            binding_match = {"objectSelector": {"matchLabels": {"app": "web"}}}
    elif role == "deployment-match":
        spec["matchConstraints"] = {"resourceRules": [_rule(["apps"], ["deployments"], ["CREATE", "UPDATE"])]}
        variables = [{"name": "images", "expression": "object.spec.template.spec.containers.map(c, c.image)"}]
        templates = _DEPLOYMENT_VALIDATIONS
        if index % 40 == 5:
            binding_match = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
    elif role == "pod-filtered":
        # Pods, but this request never gets past matching: a realistic near miss.
        spec["matchConstraints"] = {"resourceRules": [_rule([""], ["pods"], ["CREATE", "UPDATE"])]}
        if index % 40 == 3:
            spec["matchConstraints"]["objectSelector"] = {"matchLabels": {"app": f"db-{index}"}}
        else:
            match_conditions.append({"name": "backend-only", "expression": _MATCH_CONDITION_FALSE.format(i=index)})
        templates = _POD_VALIDATIONS
        variables = [{"name": "images", "expression": "object.spec.containers.map(c, c.image)"}]
    else:
        groups, resources = _OTHER_RESOURCES[index % len(_OTHER_RESOURCES)]
        operations = [["CREATE", "UPDATE"], ["UPDATE"], ["CREATE"], ["DELETE"]][index % 4]
        spec["matchConstraints"] = {"resourceRules": [_rule(groups, resources, operations)]}
        if index % 7 == 0:
            spec["matchConstraints"]["namespaceSelector"] = {
                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": ["kube-system", "kube-public"]}]}
        templates = _GENERIC_VALIDATIONS
    if role != "other" and index % 3 != 2:
        for k in range(1 + index % 2):
            expression = _MATCH_CONDITIONS_TRUE[(index + k) % len(_MATCH_CONDITIONS_TRUE)].format(i=index)
            match_conditions.append({"name": f"condition-{k}", "expression": expression})
    if match_conditions:
        spec["matchConditions"] = match_conditions
    if variables:
        spec["variables"] = variables
    spec["validations"] = _validations(templates, index, validation_count)
    if index % 9 == 0:
        spec["auditAnnotations"] = [{"key": "bench-policy", "valueExpression": f"'policy-{index}'"}]
    policy = {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
              "spec": spec}
    actions = [["Deny"], ["Deny"], ["Warn", "Audit"], ["Deny", "Audit"]][index % 4]
    binding_spec: dict[str, Any] = {"policyName": name, "validationActions": actions}
    if binding_match is not None:
        binding_spec["matchResources"] = binding_match
    binding = {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
               "spec": binding_spec}
    return [policy, binding]


def expected_matches(count: int) -> dict[str, int]:
    """How many of the first ``count`` policies match each fixture (by construction)."""
    roles = [_role(i) for i in range(count)]
    return {"pod": roles.count("pod-match"), "deployment": roles.count("deployment-match")}


def mutating_policy(index: int) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy (JSONPatch or ApplyConfiguration) on Pod CREATE, with its binding."""
    name = _name("map", index)
    if index % 2 == 0:
        mutation = {"patchType": "JSONPatch", "jsonPatch": {"expression": (
            "[JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('bench.example.com/m"
            f"{index}'), value: 'set-by-{index}'}}]")}}
    else:
        mutation = {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
            f"Object{{metadata: Object.metadata{{labels: {{'bench-m{index}': 'yes'}}}}}}")}}
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
        "matchConstraints": {"resourceRules": [_rule([""], ["pods"], ["CREATE"])]},
        "matchConditions": [{"name": "not-system", "expression": "request.namespace != 'kube-system'"}],
        "mutations": [mutation],
    }
    policy = {"apiVersion": API_VERSION, "kind": "MutatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec}
    binding = {"apiVersion": API_VERSION, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
               "spec": {"policyName": name}}
    return [policy, binding]


#: What the heavy rename probe checks besides its denial: a policy of the weight operators write (variables,
#: ``quantity()``, ``matches()``, match conditions), every check passing for the probe object.
_HEAVY_PROBE_VALIDATIONS = (
    "object.spec.containers.all(c, !has(c.resources.limits) || !('memory' in c.resources.limits) || "
    "quantity(c.resources.limits.memory).isLessThan(quantity('{gi}Gi')))",
    "variables.images.all(img, img.matches('^[a-z0-9./:-]+$'))",
    "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || "
    "c.securityContext.privileged == false)",
    "variables.names.all(n, n.matches('^[a-z][a-z0-9-]*$') && size(n) <= {limit})",
    "!has(object.metadata.labels) || object.metadata.labels[?'app'].orValue('') != 'forbidden-{generation}'",
)


def probe_policy(generation: int, heavy: bool = False) -> list[dict[str, Any]]:
    """Denies probes labelled ``bench-probe`` with a message naming ``generation``: the rename probe.

    It is for a resource of its own, so polling for it costs one policy, not the set's evaluation: the
    figure is the reload pipeline's latency (event, read, load, swap), not the evaluation load. ``heavy``: with
    variables, match conditions and checks using ``quantity()`` and ``matches()`` that pass, so the changed file
    costs what a realistic policy costs to check and compile.
    """
    name = f"bench-probe{SUFFIX}"
    deny = {"expression": "!has(object.metadata.labels) || !('bench-probe' in object.metadata.labels)",
            "message": f"probe generation {generation}"}
    spec: dict[str, Any] = {"matchConstraints": {"resourceRules": [_rule([PROBE_GROUP], [PROBE_RESOURCE], ["CREATE"])]},
                            "validations": [deny]}
    if heavy:
        # One expression changes with the generation, as an edit changes one rule of a file.
        fmt = {"gi": 4, "limit": 40, "generation": generation}
        spec["matchConditions"] = [
            {"name": "not-system", "expression": "request.namespace != 'kube-system'"},
            {"name": "labelled", "expression": "has(object.metadata.labels)"}]
        spec["variables"] = [{"name": "images", "expression": "object.spec.containers.map(c, c.image)"},
                             {"name": "names", "expression": "object.spec.containers.map(c, c.name)"}]
        spec["validations"] = [{"expression": expression.format(**fmt), "message": f"probe check {k}"}
                               for k, expression in enumerate(_HEAVY_PROBE_VALIDATIONS)] + [deny]
    policy = {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
              "spec": spec}
    binding = {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return [policy, binding]


def dump(documents: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False, width=1000)


def _files(documents: Iterator[tuple[str, list[dict[str, Any]]]], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, docs in documents:
        (directory / f"{name.removesuffix(SUFFIX)}{SUFFIX}.yaml").write_text(dump(docs))
    return directory


def write_validating_set(directory: Path, count: int) -> Path:
    """``count`` policy files (policy + binding each) in ``directory``."""
    return _files(((_name("vap", i), validating_policy(i)) for i in range(count)), directory)


def write_mutating_set(directory: Path, count: int = 6) -> Path:
    return _files(((_name("map", i), mutating_policy(i)) for i in range(count)), directory)


def write_namespaces(path: Path) -> Path:
    """The Namespace the fixtures live in, so namespaceSelectors on its labels can be evaluated."""
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": NAMESPACE, "labels": NAMESPACE_LABELS}}))
    return path


def no_match_request() -> dict[str, Any]:
    """A CREATE of a resource no generated policy is for, with the same Pod-sized body."""
    review = pod_create_request(uid="d0d0d0d0-0000-4000-8000-00000000000n")
    request = review["request"]
    obj = copy.deepcopy(request["object"])
    obj["apiVersion"], obj["kind"] = f"{NO_MATCH_GROUP}/v1", "Gadget"
    for key in ("kind", "requestKind"):
        request[key] = {"group": NO_MATCH_GROUP, "version": "v1", "kind": "Gadget"}
    for key in ("resource", "requestResource"):
        request[key] = {"group": NO_MATCH_GROUP, "version": "v1", "resource": NO_MATCH_RESOURCE}
    request["object"] = obj
    return review


def probe_request(uid: str = "e0e0e0e0-0000-4000-8000-000000000001") -> dict[str, Any]:
    review = pod_create_request(uid=uid)
    request = review["request"]
    obj = copy.deepcopy(request["object"])
    obj["apiVersion"], obj["kind"] = f"{PROBE_GROUP}/v1", PROBE_KIND
    obj["metadata"]["labels"]["bench-probe"] = "true"
    for key in ("kind", "requestKind"):
        request[key] = {"group": PROBE_GROUP, "version": "v1", "kind": PROBE_KIND}
    for key in ("resource", "requestResource"):
        request[key] = {"group": PROBE_GROUP, "version": "v1", "resource": PROBE_RESOURCE}
    request["object"] = obj
    return review
