"""Hypothesis strategies for the differential suite: small policy sets and the requests to run through them.

A set holds one to three validating policies, sometimes a mutating one, each with its binding(s): match
constraints (operations, object and namespace selectors), match conditions, variables, validations with
messages, messageExpressions and reasons, audit annotations, every validation action and failure policy,
mutations (JSON Patch and apply configurations, reinvocation). Expressions are drawn from atoms that exercise
the Kubernetes CEL libraries, optional values, nulls, empty and missing fields, runtime errors and costs near
the limits, combined with ``!``, ``&&``, ``||`` and ``?:``. Requests are CREATE or UPDATE of a custom kind
(``widgets.example.com``: neither side decodes it into a type) whose fields are present, missing, null, empty
or of the wrong type, and of three built-in kinds (ConfigMap, Deployment, Pod) in the form kube-apiserver sends
them: typed and defaulted (``staticadm.kinds.as_admitted``), which the oracle's typed round trip leaves as they
are. Requests are CREATE, UPDATE or DELETE, or a CONNECT (``pods/exec``, a PodExecOptions object); mutations
chain up to three, including the shapes the typed object changes between mutations (empty maps and lists a
mutation adds, values the typed object cannot hold, canonical quantities and times).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from staticadm.kinds import as_admitted

API = "admissionregistration.k8s.io/v1"

#: The namespaces both sides know (the oracle's ``--namespaces``, staticadm's namespaces file).
NAMESPACES = {
    "default": {"env": "dev"},
    "prod": {"env": "prod", "team": "a"},
    "kube-system": {},
}


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    resource: str


WIDGET = Kind("example.com", "v1", "Widget", "widgets")
CONFIGMAP = Kind("", "v1", "ConfigMap", "configmaps")
DEPLOYMENT = Kind("apps", "v1", "Deployment", "deployments")
POD = Kind("", "v1", "Pod", "pods")
#: A CONNECT's: ``pods/exec`` carries a PodExecOptions.
EXEC = Kind("", "v1", "PodExecOptions", "pods/exec")
KINDS = (WIDGET, CONFIGMAP, DEPLOYMENT, POD, EXEC)

# -- expressions --------------------------------------------------------------------------------------------

#: Boolean atoms over a widget (and, through ``dyn``, over any object): libraries, optionals, nulls, missing and
#: empty fields, runtime errors.
WIDGET_ATOMS = (
    "has(object.spec.name)",
    "has(object.spec.nul)",
    "object.spec.nul == null",
    "object.spec.count > 2",
    "object.spec.count == 3",
    "object.?spec.?count.orValue(0) < 5",
    "object.?spec.?name.orValue('') == 'a'",
    "string(object.?spec.?name.orValue('')) != 'bad'",
    "object.spec.name.startsWith('a')",
    "object.spec.name.matches('^[a-z]+[0-9]*$')",
    "object.spec.name.find('[0-9]+') != ''",
    "size(object.spec.name) < 4",
    "object.spec.name.lowerAscii() == 'abc'",
    "object.spec.name.split('b').size() == 2",
    "object.spec.tags.exists(t, t.startsWith('a'))",
    "object.spec.tags.all(t, size(t) > 0)",
    "'a' in object.spec.tags",
    "object.spec.tags.join(',') == 'a,b'",
    "object.spec.tags.isSorted()",
    "size(object.spec.tags) == 0",
    "object.spec.items.sum() > 3",
    "object.spec.items.isSorted()",
    "object.spec.items.max() < 10",
    "object.spec.items.indexOf(3) >= 0",
    "object.spec.items.map(i, i * 2).filter(i, i > 2).size() > 1",
    "object.spec.items.exists_one(i, i == 1)",
    "object.spec.items.all(i, object.spec.items.exists(j, j >= i))",
    "sets.contains(object.spec.items, [1])",
    "object.metadata.?labels.orValue({}).all(k, k != 'deny')",
    "'team' in object.metadata.?labels.orValue({})",
    "object.metadata.?labels.?app.orValue('') == 'web'",
    "object.spec.emptymap.size() == 0",
    "quantity(object.spec.q).isLessThan(quantity('2Gi'))",
    "quantity(object.?spec.?q.orValue('0')).compareTo(quantity('1Gi')) >= 0",
    "isQuantity(object.spec.q)",
    "isURL(object.spec.url)",
    "url(object.spec.url).getHost() == 'h.example'",
    "url(object.?spec.?url.orValue('https://d.example')).getScheme() == 'https'",
    "isIP(object.spec.ip)",
    "ip(object.spec.ip).family() == 4",
    "ip(object.spec.ip).isLoopback()",
    "cidr(object.spec.cidr).containsIP(object.spec.ip)",
    "isCIDR(object.spec.cidr) && cidr(object.spec.cidr).prefixLength() > 8",
    "'%s-%d'.format([object.spec.name, object.spec.count]) == 'a-3'",
    "strings.quote(object.spec.name).size() > 2",
    "format.dns1123Label().validate(object.spec.name).hasValue()",
    "object.spec.count / object.spec.zero > 0",
    "object.spec.missing == 1",
    "int(object.spec.name) > 0",
    "object.spec.text.contains(object.spec.needle)",
    "object.spec.items.map(i, object.spec.items.map(j, i * j)).size() > 0",
    "request.operation == 'CREATE'",
    "request.userInfo.username == 'alice'",
    "'admins' in request.userInfo.groups",
    "request.namespace == 'prod'",
    "oldObject == null",
    "oldObject != null && oldObject.?spec.?count.orValue(0) != object.?spec.?count.orValue(0)",
    "namespaceObject.metadata.?labels.?env.orValue('') == 'prod'",
    "object.metadata.name.size() > 1",
    "dyn(object.spec.count) == 3.0",
    "object.spec.count + 1 > object.spec.items.size()",
    "[1, 2].exists(x, x == object.spec.count)",
    "type(object.spec.count) == int",
    "duration(object.?spec.?wait.orValue('1s')) < duration('1m')",
    "timestamp(object.?spec.?at.orValue('2020-01-01T00:00:00Z')).getFullYear() == 2020",
    "object.spec.items.slice(0, 1).size() == 1",
    "lists.range(3).all(i, i < object.spec.count)",
    "semver(object.?spec.?version.orValue('1.0.0')).isGreaterThan(semver('1.2.0'))",
    "object.spec.name.findAll('[a-z]').size() > 1",
    # Quantities as resource.Quantity holds them (fractions of binary suffixes, "1000m": inf.Dec or a negative
    # scale), issue 44.
    "quantity(object.spec.q).isInteger()",
    "quantity(object.spec.q).asInteger() > 0",
    "quantity(object.spec.q).add(1).isInteger()",
    "quantity(object.spec.q).sub(quantity('0.5Ki')).asApproximateFloat() > 0.0",
    "quantity(object.spec.q) == quantity('1536')",
    # dyn and type-parameter results fed to conversions and library calls (cel-go's checker narrows them).
    "object.spec.nested.flatten().exists(x, string(x).startsWith('a'))",
    "object.spec.nested.flatten().map(x, int(x)).size() > 0",
    "object.spec.tags.sort().exists(x, string(x) == 'a')",
    "object.spec.items.distinct().exists(x, int(x) == 1)",
    "object.spec.items.reverse().exists(x, double(x) > 1.0)",
    "string(object.spec.tags.first().orValue('')) == 'a'",
    "object.spec.nested.flatten().all(x, size(x) >= 0)",
    "ip(dyn(object.spec.ip)).family() == 4",
    "cidr(object.spec.cidr).containsIP(dyn(object.spec.count))",
    "quantity('1').isLessThan(dyn(object.spec.count))",
    "object.spec.nested.flatten() == [1, 2]",
    "([1] + object.spec.items).exists(x, string(x) == '1')",
    # sort() of a list of a concrete element type and distinct() of anything, on an operand that may fail: cel-go
    # panics, which ends the whole evaluation, || and && included (issue 44).
    "object.spec.items.map(x, string(x)).sort().size() > 0",
    "['b', 'a'].slice(0, object.spec.count).sort() == ['a', 'b']",
    "object.spec.tags.distinct().size() <= object.spec.tags.size()",
)

#: What a variable may hold, and a boolean atom reading it (``{name}``: the variable's name).
VARIABLES = (
    ("object.spec.count * 2", "variables.{name} > 4"),
    ("object.?spec.?name.orValue('none')", "variables.{name} != 'none'"),
    ("object.spec.items.filter(i, i > 1)", "size(variables.{name}) > 0"),
    ("1 / object.spec.zero", "variables.{name} > 0"),
    ("object.spec.tags", "'a' in variables.{name}"),
    ("object.?spec.?q", "variables.{name}.hasValue()"),
    ("has(object.spec.name) && object.spec.name != ''", "variables.{name}"),
    ("null", "variables.{name} == null"),
    ("object.metadata.?labels.orValue({})", "variables.{name}.all(k, k.size() < 5)"),
    ("object.spec.items.map(x, string(x)).sort()", "variables.{name}.size() > 0"),
)

MESSAGE_EXPRESSIONS = (
    "'count is ' + string(object.spec.count)",
    "string(object.spec.name)",
    "''",
    "'   '",
    "'name ' + object.?spec.?name.orValue('?') + ' items ' + string(object.?spec.?items.orValue([]).size())",
    "string(1 / object.spec.zero)",
    "'multi\\nline'",
    "string(object.spec.text)",
)
AUDIT_VALUES = (
    "string(object.spec.count)",
    "null",
    "'  padded  '",
    "string(object.spec.name)",
    "''",
    "string(object.?spec.?name.orValue('none'))",
    "string(object.spec.missing)",
)
REASONS = (None, "Forbidden", "Invalid", "RequestEntityTooLarge")
ACTIONS = (("Deny",), ("Warn",), ("Audit",), ("Deny", "Audit"), ("Warn", "Audit"))
FAILURE_POLICIES = (None, "Fail", "Ignore")

JSON_PATCHES = (
    "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'mutated': 'yes'}}]",
    "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'a/b': string(object.?spec.?count.orValue(0))}}]",
    "has(object.metadata.labels) ? [JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('x/y'), "
    "value: 'z'}] : []",
    "[JSONPatch{op: 'replace', path: '/spec/count', value: 7}]",
    "[JSONPatch{op: 'remove', path: '/spec/name'}]",
    "[JSONPatch{op: 'test', path: '/spec/count', value: 3}, JSONPatch{op: 'add', path: '/spec/tested', value: true}]",
    "object.?spec.?items.orValue([]).map(i, JSONPatch{op: 'add', path: '/spec/seen/-', value: i})",
    "[JSONPatch{op: 'add', path: '/spec/list', value: object.?spec.?items.orValue([])}]",
    "[JSONPatch{op: 'add', path: '/spec/ratio', value: 1 / object.spec.zero}]",
)
APPLY_CONFIGURATIONS = (
    "Object{metadata: Object.metadata{labels: {'applied': 'yes'}}}",
    "Object{spec: Object.spec{count: object.?spec.?count.orValue(0) + 1}}",
    "Object{metadata: Object.metadata{annotations: {'name': object.metadata.name}}}",
    "Object{spec: Object.spec{?name: object.?spec.?alias}}",
    "Object{spec: Object.spec{count: 2, count: 4}}",
    "Object{spec: Object.spec{tags: ['x']}}",
)


#: Mutations of the built-in kinds' typed objects, by kind: what the typed object changes between mutations
#: (empty maps and lists dropped, quantities and times held canonically, values it cannot hold, defaults of what a
#: mutation adds) and what a later mutation of the chain then sees.
_METADATA_MUTATIONS = (
    ("JSONPatch", "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {}}]"),
    ("JSONPatch", "[JSONPatch{op: 'add', path: '/metadata/labels', value: {}}]"),
    ("JSONPatch", "[JSONPatch{op: 'add', path: '/metadata/annotations/direct', value: 'x'}]"),
    ("JSONPatch", "has(object.metadata.annotations) ? "
                  "[JSONPatch{op: 'add', path: '/metadata/labels/annotated', value: 'y'}] : []"),
    ("JSONPatch", "[JSONPatch{op: 'remove', path: '/metadata/labels/app'}]"),
    ("JSONPatch", "[JSONPatch{op: 'add', path: '/metadata/creationTimestamp', value: 'yesterday'}]"),
    ("JSONPatch", "[JSONPatch{op: 'add', path: '/metadata/creationTimestamp', value: '2021-02-03T04:05:06.5+01:00'}]"),
    ("ApplyConfiguration", "Object{metadata: Object.metadata{annotations: {}}}"),
    ("ApplyConfiguration", "Object{metadata: Object.metadata{labels: {'empty': ''}}}"),
    ("ApplyConfiguration", "Object{metadata: Object.metadata{labels: {'applied': 'yes'}}}"),
)
BUILTIN_MUTATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "Pod": (
        *_METADATA_MUTATIONS,
        ("JSONPatch", "[JSONPatch{op: 'add', path: '/spec/containers/0/resources/limits', "
                      "value: {'cpu': '0.5', 'memory': '1024Mi'}}]"),
        ("JSONPatch", "[JSONPatch{op: 'add', path: '/spec/containers/-', value: {'name': 'side', 'image': 'side:1'}}]"),
        ("JSONPatch", "[JSONPatch{op: 'add', path: '/spec/initContainers', value: []}]"),
        ("JSONPatch", "has(object.spec.initContainers) ? "
                      "[JSONPatch{op: 'add', path: '/metadata/labels/init', value: 'y'}] : []"),
        ("JSONPatch", "[JSONPatch{op: 'add', path: '/spec/containers/0/resources/limits', value: {'cpu': 'bad'}}]"),
        ("ApplyConfiguration", "Object{spec: Object.spec{initContainers: []}}"),
        ("ApplyConfiguration", "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'c', resources: "
                               "Object.spec.containers.resources{requests: {'cpu': '0.5'}}}]}}"),
        ("ApplyConfiguration", "Object{spec: Object.spec{terminationGracePeriodSeconds: dyn(2.5)}}"),
    ),
    "Deployment": (
        *_METADATA_MUTATIONS,
        ("JSONPatch", "[JSONPatch{op: 'replace', path: '/spec/replicas', value: 5}]"),
        ("JSONPatch", "[JSONPatch{op: 'add', path: '/spec/template/spec/containers/0/resources', "
                      "value: {'limits': {'cpu': 'bad'}}}]"),
        ("ApplyConfiguration", "Object{spec: Object.spec{replicas: dyn(2.5)}}"),
        ("ApplyConfiguration", "Object{spec: Object.spec{replicas: 4294967297}}"),
        ("ApplyConfiguration", "Object{spec: Object.spec{strategy: Object.spec.strategy{rollingUpdate: "
                               "Object.spec.strategy.rollingUpdate{maxSurge: 2.5}}}}"),
        ("ApplyConfiguration", "Object{spec: Object.spec{template: Object.spec.template{spec: "
                               "Object.spec.template.spec{containers: [Object.spec.template.spec.containers{"
                               "name: 'c', resources: Object.spec.template.spec.containers.resources{"
                               "limits: {'cpu': 'bad'}}}]}}}}"),
    ),
    "ConfigMap": (
        *_METADATA_MUTATIONS,
        ("JSONPatch", "[JSONPatch{op: 'add', path: '/data', value: {}}]"),
        ("JSONPatch", "has(object.data) ? [JSONPatch{op: 'add', path: '/metadata/labels/data', value: 'y'}] : []"),
    ),
    "PodExecOptions": (("JSONPatch", "[JSONPatch{op: 'add', path: '/command/-', value: 'x'}]"),),
}


@st.composite
def boolean_expressions(draw: st.DrawFn, variable_atoms: tuple[str, ...] = (), depth: int = 2) -> str:
    """A boolean expression: an atom, or two joined."""
    atoms = WIDGET_ATOMS + variable_atoms
    if depth <= 0 or draw(st.integers(0, 2)) > 0:
        return draw(st.sampled_from(atoms))
    left = draw(boolean_expressions(variable_atoms, depth - 1))
    right = draw(boolean_expressions(variable_atoms, depth - 1))
    form = draw(st.sampled_from(("!({l})", "{l} && {r}", "{l} || {r}", "({l}) ? ({r}) : false", "({l}) == ({r})")))
    return form.format(l=left, r=right)


# -- policies -----------------------------------------------------------------------------------------------


def _rules(kinds: tuple[Kind, ...], operations: list[str]) -> list[dict[str, Any]]:
    return [{"apiGroups": [kind.group], "apiVersions": [kind.version], "operations": operations,
             "resources": [kind.resource]} for kind in kinds]


SELECTORS = (
    None,
    {"matchLabels": {"app": "web"}},
    {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]},
)
NAMESPACE_SELECTORS = (
    None,
    {"matchLabels": {"env": "prod"}},
    {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]},
)


@st.composite
def match_constraints(draw: st.DrawFn) -> dict[str, Any]:
    kinds = tuple(draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3, unique=True)))
    operations = draw(st.sampled_from((["CREATE"], ["CREATE", "UPDATE"], ["*"], ["UPDATE"], ["*"], ["CONNECT"])))
    constraints: dict[str, Any] = {"resourceRules": _rules(kinds, operations)}
    object_selector = draw(st.sampled_from(SELECTORS))
    if object_selector is not None:
        constraints["objectSelector"] = object_selector
    namespace_selector = draw(st.sampled_from(NAMESPACE_SELECTORS))
    if namespace_selector is not None:
        constraints["namespaceSelector"] = namespace_selector
    return constraints


@st.composite
def match_conditions(draw: st.DrawFn) -> list[dict[str, str]]:
    count = draw(st.integers(0, 3))
    return [{"name": f"c{index}", "expression": draw(boolean_expressions(depth=1))} for index in range(count)]


@st.composite
def variables(draw: st.DrawFn) -> tuple[list[dict[str, str]], tuple[str, ...]]:
    """Declared variables and the atoms that read them."""
    chosen = draw(st.lists(st.sampled_from(VARIABLES), max_size=3))
    declared = [{"name": f"v{index}", "expression": expression} for index, (expression, _) in enumerate(chosen)]
    return declared, tuple(atom.format(name=f"v{index}") for index, (_, atom) in enumerate(chosen))


@st.composite
def validations(draw: st.DrawFn, variable_atoms: tuple[str, ...]) -> list[dict[str, Any]]:
    found = []
    for _ in range(draw(st.integers(1, 3))):
        validation: dict[str, Any] = {"expression": draw(boolean_expressions(variable_atoms))}
        if draw(st.booleans()):
            validation["message"] = draw(st.sampled_from(("must be fine", "bad: thing", " spaced ")))
        if draw(st.booleans()):
            validation["messageExpression"] = draw(st.sampled_from(MESSAGE_EXPRESSIONS))
        reason = draw(st.sampled_from(REASONS))
        if reason is not None:
            validation["reason"] = reason
        found.append(validation)
    return found


@st.composite
def policy_spec(draw: st.DrawFn) -> dict[str, Any]:
    """What both kinds of policy have: match constraints, failure policy, match conditions."""
    spec: dict[str, Any] = {"matchConstraints": draw(match_constraints())}
    failure_policy = draw(st.sampled_from(FAILURE_POLICIES))
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    conditions = draw(match_conditions())
    if conditions:
        spec["matchConditions"] = conditions
    return spec


@st.composite
def validating_policy(draw: st.DrawFn, index: int) -> list[dict[str, Any]]:
    name = f"v{index}.static.k8s.io"
    declared, variable_atoms = draw(variables())
    spec = draw(policy_spec())
    if declared:
        spec["variables"] = declared
    spec["validations"] = draw(validations(variable_atoms))
    annotations = draw(st.lists(st.sampled_from(AUDIT_VALUES), max_size=2))
    if annotations:
        spec["auditAnnotations"] = [{"key": f"k{position}", "valueExpression": value}
                                    for position, value in enumerate(annotations)]
    objects: list[dict[str, Any]] = [{"apiVersion": API, "kind": "ValidatingAdmissionPolicy",
                                      "metadata": {"name": name}, "spec": spec}]
    for binding_index in range(draw(st.integers(1, 2))):
        binding_spec: dict[str, Any] = {"policyName": name, "validationActions": list(draw(st.sampled_from(ACTIONS)))}
        selector = draw(st.sampled_from(SELECTORS))
        if selector is not None:
            binding_spec["matchResources"] = {"objectSelector": selector}
        objects.append({"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
                        "metadata": {"name": f"v{index}b{binding_index}.static.k8s.io"}, "spec": binding_spec})
    return objects


@st.composite
def mutating_policy(draw: st.DrawFn, index: int) -> list[dict[str, Any]]:
    name = f"m{index}.static.k8s.io"
    if draw(st.booleans()):
        spec = draw(policy_spec())
    else:
        # One that applies to every request of its kinds (the built-in ones, half the time), so that its chained
        # mutations run: on the typed objects, on DELETE (which it must not reach) and on CONNECT.
        kind = draw(st.sampled_from((DEPLOYMENT, POD, POD, CONFIGMAP, EXEC)))
        spec = {"matchConstraints": {"resourceRules": _rules((kind,), ["*"])},
                "failurePolicy": draw(st.sampled_from(("Fail", "Ignore"))),
                "reinvocationPolicy": draw(st.sampled_from(("Never", "IfNeeded"))),
                "mutations": [{"patchType": patch_type, ("jsonPatch" if patch_type == "JSONPatch" else
                                                         "applyConfiguration"): {"expression": expression}}
                              for patch_type, expression in draw(st.lists(
                                  st.sampled_from(BUILTIN_MUTATIONS[kind.kind]), min_size=1, max_size=3))]}
        return _with_binding(name, index, spec, draw(st.sampled_from(SELECTORS[:1] * 3 + SELECTORS)))
    spec["reinvocationPolicy"] = draw(st.sampled_from(("Never", "IfNeeded")))
    mutations = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            mutations.append({"patchType": "JSONPatch",
                              "jsonPatch": {"expression": draw(st.sampled_from(JSON_PATCHES))}})
        else:
            mutations.append({"patchType": "ApplyConfiguration",
                              "applyConfiguration": {"expression": draw(st.sampled_from(APPLY_CONFIGURATIONS))}})
    spec["mutations"] = mutations
    return _with_binding(name, index, spec, draw(st.sampled_from(SELECTORS)))


def _with_binding(name: str, index: int, spec: dict[str, Any], selector: Any) -> list[dict[str, Any]]:
    binding_spec: dict[str, Any] = {"policyName": name}
    if selector is not None:
        binding_spec["matchResources"] = {"objectSelector": selector}
    return [{"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec},
            {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding",
             "metadata": {"name": f"m{index}b.static.k8s.io"}, "spec": binding_spec}]


# -- requests -----------------------------------------------------------------------------------------------

_SPEC_FIELDS: dict[str, tuple[Any, ...]] = {
    "name": ("a", "abc", "b12", "", None, 7, "A-b"),
    "count": (3, 0, -1, 9223372036854775807, "3", 2.5, None),
    "items": ([1, 2, 3], [3, 1], [], [1], [{"a": 1}], ["a", 1], [2.5, 1]),
    "tags": (["a", "b"], ["b", "a"], [], ["a"], [""], [1, "a"]),
    "q": ("1Gi", "3Gi", "500m", "bad", "1.5", "0.5Ki", "1.5Gi", "1000m", "2.0Ki", "0.0", "1536"),
    "nested": ([[1], [2]], [["a"], [1]], [[1.5]], [], [{"a": 1}], 3, [[]]),
    "url": ("https://h.example/x", "https://h.example:8443/p?q=1", "not a url", "/relative"),
    "ip": ("10.1.2.3", "127.0.0.1", "::1", "300.1.1.1"),
    "cidr": ("10.0.0.0/8", "192.168.0.0/16", "::/0", "bad"),
    "alias": ("aka", None),
    "zero": (0,),
    "nul": (None,),
    "emptymap": ({}, {"k": "v"}),
    "wait": ("5s", "2m", "forever"),
    "at": ("2021-02-03T04:05:06Z", "yesterday"),
    "version": ("1.3.0", "0.1.0", "v1"),
}


@st.composite
def widget(draw: st.DrawFn, name: str, namespace: str, large: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for key, values in _SPEC_FIELDS.items():
        if draw(st.integers(0, 4)) > 0:
            spec[key] = copy.deepcopy(draw(st.sampled_from(values)))
    if large:
        spec["text"], spec["needle"] = "a" * 50_000, "b" * 1_500
    elif draw(st.booleans()):
        spec["text"], spec["needle"] = "abc", "b"
    obj: dict[str, Any] = {"apiVersion": "example.com/v1", "kind": "Widget",
                           "metadata": {"name": name, "namespace": namespace}}
    labels = draw(labels_strategy())
    if labels is not None:
        obj["metadata"]["labels"] = labels
    if draw(st.integers(0, 5)) > 0:
        obj["spec"] = spec
    return obj


def labels_strategy() -> st.SearchStrategy[dict[str, str] | None]:
    return st.sampled_from((None, {}, {"app": "web"}, {"app": "db", "team": "a"}, {"app": "web", "deny": "x"}))


@st.composite
def configmap(draw: st.DrawFn, name: str, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
    labels = draw(labels_strategy())
    if labels:
        obj["metadata"]["labels"] = labels
    data = draw(st.sampled_from((None, {"name": "a"}, {"count": "3", "name": "abc"})))
    if data is not None:
        obj["data"] = data
    return obj


@st.composite
def deployment(draw: st.DrawFn, name: str, namespace: str) -> dict[str, Any]:
    # The typed form client-go's encoder writes: empty structs present, empty optional fields left out.
    labels = draw(labels_strategy())
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": draw(st.sampled_from((1, 3, 7))), "selector": {"matchLabels": {"app": "d"}},
                     "strategy": {}, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [
                         {"name": "c", "image": draw(st.sampled_from(("nginx", "nginx:latest"))), "resources": {}}]}}},
            "status": {}}


@st.composite
def pod(draw: st.DrawFn, name: str, namespace: str) -> dict[str, Any]:
    labels = draw(labels_strategy())
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    annotations = draw(st.sampled_from((None, {"note": "a"})))
    if annotations:
        metadata["annotations"] = annotations
    container: dict[str, Any] = {"name": "c", "image": draw(st.sampled_from(("nginx", "nginx:1.27")))}
    resources = draw(st.sampled_from((None, {"limits": {"cpu": "1", "memory": "1Gi"}}, {"requests": {"cpu": "0.5"}})))
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container]}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": "busybox:1"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def exec_options() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodExecOptions", "stdout": True, "container": "c", "command": ["ls"]}


def admitted(obj: dict[str, Any]) -> dict[str, Any]:
    """A built-in object as kube-apiserver sends it: typed and defaulted (the oracle does neither)."""
    typed = as_admitted(obj)
    return obj if typed is None else typed.value


@st.composite
def objects_of(draw: st.DrawFn, kind: Kind, name: str, namespace: str) -> dict[str, Any]:
    if kind is WIDGET:
        return draw(widget(name, namespace, large=draw(st.integers(0, 9)) == 0))
    if kind is CONFIGMAP:
        return admitted(draw(configmap(name, namespace)))
    if kind is POD:
        return admitted(draw(pod(name, namespace)))
    if kind is EXEC:
        return exec_options()
    return admitted(draw(deployment(name, namespace)))


@st.composite
def requests(draw: st.DrawFn, count: int) -> list[dict[str, Any]]:
    found = []
    for index in range(count):
        kind = draw(st.sampled_from((WIDGET, WIDGET, WIDGET, WIDGET, CONFIGMAP, DEPLOYMENT, POD, POD, EXEC)))
        namespace = draw(st.sampled_from(tuple(NAMESPACES)))
        name = draw(st.sampled_from(("w", "web-1", "x")))
        operation = "CONNECT" if kind is EXEC else draw(st.sampled_from(("CREATE", "CREATE", "UPDATE", "DELETE")))
        obj = None if operation == "DELETE" else draw(objects_of(kind, name, namespace))
        old = draw(objects_of(kind, name, namespace)) if operation in ("UPDATE", "DELETE") else None
        resource, _, subresource = kind.resource.partition("/")
        request: dict[str, Any] = {
            "uid": f"req-{index}",
            "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
            "resource": {"group": kind.group, "version": kind.version, "resource": resource},
            "name": name, "namespace": namespace, "operation": operation,
            "userInfo": {"username": draw(st.sampled_from(("alice", "bob"))),
                         "groups": draw(st.sampled_from((["system:authenticated"], ["admins", "dev"], [])))},
            "object": obj, "oldObject": old,
        }
        if subresource:
            request["subResource"] = subresource
        found.append({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    return found


@dataclass
class PolicySet:
    objects: list[dict[str, Any]]
    reviews: list[dict[str, Any]] = field(default_factory=list)


#: Requests per set: one oracle process answers all of a set's requests.
REQUESTS_PER_SET = 6


@st.composite
def policy_sets(draw: st.DrawFn) -> PolicySet:
    objects: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 3))):
        objects += draw(validating_policy(index))
    for index in range(draw(st.sampled_from((0, 0, 1, 1, 2)))):
        objects += draw(mutating_policy(index))
    return PolicySet(objects, draw(requests(REQUESTS_PER_SET)))
