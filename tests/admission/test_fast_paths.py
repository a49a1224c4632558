"""The request path's shortcuts decide exactly what the straightforward evaluation decides.

- A policy's validator decided once per request and shared by its bindings, and match conditions
  evaluated once for the policies that share them (``evaluate_validating(share_evaluations=True)``),
  against everything evaluated for each binding, as kube-apiserver's loop reads: generated policies
  (validations that pass, deny, fail; messageExpressions, variables, audit annotations, match conditions;
  both failure policies) with several bindings each (validationActions, objectSelectors), and generated
  requests.
- A policy's validations run first as one program (``CelEnvironment.conjunction``), one by one only when
  that is not simply true, against each one by one (``share_evaluations=False``), at the cost limits too.
- Mutating policies with each object version's activation shared while what the expressions read is
  unchanged, and the objects pruned to what they read, against a new activation per version of the
  whole object (``evaluate_mutating(share_evaluations=False, prune_objects=False)``).
- One evaluation context rescoped for each cost scope of a request against a new context per scope, and
  the bool fast path of ``EvaluationContext.run`` against its general path: values, errors and what each
  scope's budget has left.
"""

from __future__ import annotations

import base64
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from staticadm.admission.cel.activation import RequestActivations, request_data, same_json
from staticadm.admission.matching.plan import RequestMatch
from staticadm.admission.mutating.dispatcher import MutationOutcome, evaluate_mutating
from staticadm.admission.namespaces import RequestOnlyNamespaces
from staticadm.admission.request import GroupVersionKind
from staticadm.admission.validating.dispatcher import ValidationOutcome, evaluate_validating
from staticadm.cel import CompiledExpression, ExpressionKind, admission_environment
from staticadm.cel.evaluation import EvalError
from staticadm.cel.reads import Reads
from tests.admission.helpers import (
    DEPLOYMENT,
    DRAWN_SELECTORS,
    MATCHING_NAMESPACES,
    MATCHING_SHAPES,
    binding,
    parsed,
    policy,
    review,
    shaped_request,
    snapshot,
)
from tests.examples import examples

VALIDATIONS = (
    {"expression": "object.spec.replicas <= 5"},
    {"expression": "object.spec.replicas < 100", "messageExpression": "'replicas: ' + string(object.spec.replicas)"},
    {"expression": "object.spec.missing == 1", "message": "reads a field the object does not have"},
    {"expression": "1 / (object.spec.replicas - object.spec.replicas) == 0"},
    {"expression": "object.metadata.labels.all(k, k != 'deny')", "reason": "Forbidden"},
    {"expression": "variables.many == false", "messageExpression": "'variable: ' + string(variables.many)"},
    {"expression": "true", "messageExpression": "string(object.spec.nope)"},
)
MATCH_CONDITIONS = (
    {"name": "not-seven", "expression": "object.spec.replicas != 7"},
    {"name": "broken", "expression": "object.spec.nope == 1"},
    {"name": "always", "expression": "true"},
)
AUDIT_ANNOTATIONS = (
    {"key": "replicas", "valueExpression": "string(object.spec.replicas)"},
    {"key": "broken", "valueExpression": "string(object.spec.nope)"},
    {"key": "absent", "valueExpression": "null"},
)


@st.composite
def policy_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 2))):
        name = f"p{index}.static.k8s.io"
        spec: dict[str, Any] = {
            "failurePolicy": draw(st.sampled_from(("Fail", "Ignore"))),
            "variables": [{"name": "many", "expression": "object.spec.replicas > 50"}],
            "validations": draw(st.lists(st.sampled_from(VALIDATIONS), min_size=1, max_size=4)),
        }
        conditions = draw(st.lists(st.sampled_from(MATCH_CONDITIONS), max_size=2, unique_by=lambda c: c["name"]))
        if conditions:
            spec["matchConditions"] = conditions
        annotations = draw(st.lists(st.sampled_from(AUDIT_ANNOTATIONS), max_size=2, unique_by=lambda a: a["key"]))
        if annotations:
            spec["auditAnnotations"] = annotations
        objects.append(policy(name, **spec))
        for number in range(draw(st.integers(1, 3))):
            actions = draw(st.sampled_from((("Deny",), ("Warn",), ("Audit",), ("Warn", "Audit"), ("Deny", "Audit"))))
            extra: dict[str, Any] = {}
            label = draw(st.sampled_from((None, "web", "db")))
            if label is not None:
                extra["matchResources"] = {"objectSelector": {"matchLabels": {"app": label}}}
            objects.append(binding(f"p{index}-b{number}.static.k8s.io", name, actions, **extra))
    return objects


def _request(replicas: int, labels: dict[str, str]) -> Any:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["replicas"] = replicas
    obj["metadata"]["labels"] = labels
    return parsed(review(obj=obj))


def _comparable(outcome: ValidationOutcome) -> Any:
    return (outcome.response, [(r.policy, r.binding, r.action, r.error_type, r.message, r.reason, r.expression_index)
                               for r in outcome.decisions],
            outcome.matched, [(n.policy, n.binding, n.reason) for n in outcome.not_matched], outcome.warnings,
            dict(outcome.annotations))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=policy_sets(), replicas=st.sampled_from((1, 6, 7, 60, 200)),
       labels=st.sampled_from(({"app": "web"}, {"app": "db", "deny": "x"}, {})))
def test_validator_shared_by_bindings_decides_as_one_run_per_binding(objects: list[dict[str, Any]], replicas: int,
                                                                     labels: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    request = _request(replicas, labels)
    namespaces = RequestOnlyNamespaces()
    shared = evaluate_validating(snap, namespaces, request)
    per_binding = evaluate_validating(snap, namespaces, request, share_evaluations=False)
    event("denied" if not shared.allowed else "warned" if shared.warnings else "allowed")
    event(f"{len(shared.matched)} bindings evaluated")
    assert _comparable(shared) == _comparable(per_binding)


EXPRESSIONS = (
    "object.spec.replicas <= 5",
    "object.spec.missing == 1",
    "1 / (object.spec.replicas - object.spec.replicas) == 0",
    "object.metadata.labels.all(k, k != 'deny')",
    "[1, 2, 3].map(x, x * object.spec.replicas).exists(y, y > 10)",
    "string(object.spec.replicas)",
    "object.metadata.labels[?'app']",
    "object.spec",
    "size(object.metadata.labels) > 1",
)
#: Expressions of any result type (the rest are validations: bool).
ANY_TYPE = frozenset({"string(object.spec.replicas)", "object.metadata.labels[?'app']", "object.spec"})


def _compiled(source: str) -> CompiledExpression:
    kind = ExpressionKind.STANDALONE if source in ANY_TYPE else ExpressionKind.VALIDATION
    compiled = admission_environment(False).compile(source, kind)
    assert isinstance(compiled, CompiledExpression), (source, compiled)
    return compiled


@settings(max_examples=examples(60), deadline=None)
@given(scopes=st.lists(st.lists(st.sampled_from(EXPRESSIONS), min_size=1, max_size=4), min_size=1, max_size=4),
       budgets=st.sampled_from((10, 200, 10_000_000)), replicas=st.sampled_from((1, 7, 200)),
       labels=st.sampled_from(({"app": "web"}, {"app": "db", "deny": "x"})))
def test_rescoped_context_and_bool_fast_path_evaluate_as_fresh_contexts(scopes: list[list[str]], budgets: int,
                                                                        replicas: int,
                                                                        labels: dict[str, str]) -> None:
    environment = admission_environment(False)
    request = _request(replicas, labels)
    shared = RequestActivations(environment, RequestMatch(request, RequestOnlyNamespaces()))
    fresh = RequestActivations(environment, RequestMatch(request, RequestOnlyNamespaces()))
    for sources in scopes:
        programs = [_compiled(source) for source in sources]
        rescoped = shared.scope(shared.for_evaluation(request.original_resource, request.original_kind, None),
                                budgets)
        separate = environment.new_context(
            activation=fresh.for_evaluation(request.original_resource, request.original_kind, None), budget=budgets)
        for program in programs:
            fast = rescoped.run(program)
            general = separate.run(program)
            event("budget ran out" if isinstance(fast, EvalError) and fast.budget_exhausted
                  else "error" if isinstance(fast, EvalError) else "value")
            assert _value(fast) == _value(general), program.source
            assert rescoped.budget is not None and separate.budget is not None
            assert rescoped.budget.remaining == separate.budget.remaining, program.source
        # The general path of one evaluation (what errors, steps and variables take) agrees with the fast one
        # when the budget does not end the scope.
        reference = environment.new_context(
            activation=fresh.for_evaluation(request.original_resource, request.original_kind, None), budget=None)
        for program in programs:
            outcome, _ = reference._evaluate(program)
            assert _value(reference.run(program)) == _value(outcome), program.source


def _value(outcome: Any) -> Any:
    return ("error", outcome.message) if isinstance(outcome, EvalError) else ("value", outcome)


PRUNING_VALIDATIONS = (
    {"expression": "object.spec.replicas <= 5", "messageExpression": "'name: ' + object.metadata.name"},
    {"expression": "!has(object.spec.extra) || object.spec.extra == 'ok'"},
    {"expression": "size(object.metadata.labels) > 1"},
    {"expression": "object.metadata.labels.all(k, k != 'deny')"},
    {"expression": "object.?status.?phase.orValue('none') != 'Failed'"},
    {"expression": "object.metadata.annotations['a'] == 'b'"},
    {"expression": "string(object.spec).size() < 200"},
    {"expression": "size(object) < 5"},
    {"expression": "oldObject == null || oldObject.spec.replicas == object.spec.replicas"},
    {"expression": "null == oldObject || object.spec.extra != null || object.?status.orValue(null) == null"},
    {"expression": "object.metadata.labels != null && object.spec.containers != null"},
    # What is read of request: fields, a list walked, presence, a map used whole.
    {"expression": "request.userInfo.groups.exists(g, g == 'system:masters') || request.namespace != 'x'",
     "messageExpression": "request.operation + ' by ' + request.userInfo.username"},
    {"expression": "has(request.name) && size(request.userInfo.groups) < 9 && !has(request.subResource)"},
    {"expression": "request.kind == request.requestKind && request.?options.?kind.orValue('') != 'x'"},
    {"expression": "object.spec.containers.exists(c, c.name == 'web')"},
    {"expression": "variables.spec.replicas > 1"},
    {"expression": "object['metadata'][?'labels'].hasValue()"},
    # Comprehensions: what is read of each element, its size, shadowed and bound names.
    {"expression": "object.spec.containers.all(c, c.image != 'bad')",
     "messageExpression": "'images: ' + object.spec.containers.map(c, c.image).join(', ')"},
    {"expression": "object.spec.containers.map(c, c.name).all(n, n != 'db')"},
    {"expression": "size(object.spec.containers) < 2"},
    {"expression": "object.spec.containers.all(c, !has(c.ports) || c.ports.all(p, p.containerPort > 0))"},
    {"expression": "object.spec.containers.exists(object, object.name == 'web')"},
    {"expression": "object.spec.containers.all(i, c, c.image != 'bad')"},
    {"expression": "object.spec.containers.all(c, c == c)"},
    {"expression": "object.spec.containers.filter(c, has(c.extra)).size() == 0"},
    {"expression": "[1].all(c, object.spec.containers.all(c, c.name != ''))"},
    {"expression": "variables.images.all(image, image != 'bad')"},
)


@st.composite
def pruning_policies(draw: st.DrawFn) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {
        "variables": [{"name": "spec", "expression": "object.spec"},
                      {"name": "images", "expression": "object.spec.containers.map(c, c.image)"}],
        "validations": draw(st.lists(st.sampled_from(PRUNING_VALIDATIONS), min_size=1, max_size=3)),
    }
    if draw(st.booleans()):
        spec["auditAnnotations"] = [{"key": "meta", "valueExpression": "string(size(object.metadata))"}]
    return [policy("p.static.k8s.io", **spec), binding("b.static.k8s.io", "p.static.k8s.io", ("Deny", "Audit"))]


pruned_objects = st.fixed_dictionaries({
    "replicas": st.sampled_from((1, 7)),
    "labels": st.sampled_from(({"app": "web"}, {"app": "web", "deny": "x"}, {})),
    "annotations": st.sampled_from(({}, {"a": "b"}, {"a": "c"})),
    "managed": st.booleans(),
    "status": st.sampled_from((None, {"phase": "Failed"}, {"phase": "Running"})),
    "extra": st.sampled_from((None, "ok", "no")),
    "old": st.booleans(),
    # Lists of containers read element by element, and values that are not such a list.
    "containers": st.sampled_from((
        [{"name": "web", "image": "nginx"}],
        [{"name": "web", "image": "nginx", "ports": [{"containerPort": 80, "name": "http"}], "env": []},
         {"name": "db", "image": "bad", "extra": {"a": 1}}],
        [{"name": "web", "image": "nginx", "ports": [{"containerPort": 0}]}, {"image": "nginx"}],
        [],
        ["not-a-container"],
        {"web": {"name": "web", "image": "nginx"}},
    )),
})


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=pruning_policies(), shape=pruned_objects)
def test_pruned_objects_decide_as_whole_objects(objects: list[dict[str, Any]], shape: dict[str, Any]) -> None:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["replicas"] = shape["replicas"]
    obj["spec"]["containers"] = copy.deepcopy(shape["containers"])
    obj["metadata"]["labels"] = shape["labels"]
    obj["metadata"]["annotations"] = shape["annotations"]
    if shape["managed"]:
        obj["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
    if shape["status"] is not None:
        obj["status"] = shape["status"]
    if shape["extra"] is not None:
        obj["spec"]["extra"] = shape["extra"]
    old = copy.deepcopy(obj) if shape["old"] else None
    request = parsed(review(obj=obj, old=old, operation="UPDATE" if old else "CREATE"))
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    namespaces = RequestOnlyNamespaces()
    pruned = evaluate_validating(snap, namespaces, request)
    whole = evaluate_validating(snap, namespaces, request, prune_objects=False)
    event("denied" if not pruned.allowed else "allowed")
    assert _comparable(pruned) == _comparable(whole)


#: Mutations that change what later expressions read (labels, replicas), change only what nothing reads
#: (an annotation), change nothing, fail, or read the object whole; with IfNeeded policies reinvoked.
MUTATIONS = (
    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{metadata: Object.metadata{labels: {'seen': string(size(object.metadata.labels))}}}"}},
    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{metadata: Object.metadata{annotations: {'touched': 'yes'}}}"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "object.spec.replicas > 5 ? [JSONPatch{op: 'replace', path: '/spec/replicas', value: 5}] : []"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'test', path: '/spec/replicas', value: 1.0}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'add', path: '/metadata/annotations/size', value: string(size(object))}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/nope/x', value: 1}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'replace', path: '/spec/replicas', value: double(object.spec.replicas)}]"}},
)
MUTATING_CONDITIONS = (
    {"name": "small", "expression": "object.spec.replicas < 100"},
    {"name": "unlabelled", "expression": "!('seen' in object.metadata.labels)"},
    {"name": "namespace", "expression": "request.namespace != 'kube-system'"},
)


@st.composite
def mutating_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    rules = {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                "resources": ["deployments"]}]}
    for index in range(draw(st.integers(1, 4))):
        name = f"m{index}.static.k8s.io"
        spec: dict[str, Any] = {
            "matchConstraints": rules,
            "failurePolicy": draw(st.sampled_from(("Fail", "Ignore"))),
            "reinvocationPolicy": draw(st.sampled_from(("Never", "IfNeeded"))),
            "mutations": draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=2)),
        }
        conditions = draw(st.lists(st.sampled_from(MUTATING_CONDITIONS), max_size=2, unique_by=lambda c: c["name"]))
        if conditions:
            spec["matchConditions"] = conditions
        objects.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
                        "metadata": {"name": name}, "spec": spec})
        objects.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
                        "metadata": {"name": f"m{index}-b.static.k8s.io"}, "spec": {"policyName": name}})
    return objects


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=mutating_sets(), replicas=st.sampled_from((1, 7, 200)),
       labels=st.sampled_from(({"app": "web"}, {"app": "db", "seen": "1"}, {})))
def test_shared_and_pruned_mutations_decide_as_the_straightforward_reading(objects: list[dict[str, Any]],
                                                                            replicas: int,
                                                                            labels: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["replicas"] = replicas
    obj["metadata"]["labels"] = labels
    obj["status"] = {"replicas": 0}
    request = parsed(review(obj=obj))
    namespaces = RequestOnlyNamespaces()
    fast = evaluate_mutating(snap, namespaces, request)
    plain = evaluate_mutating(snap, namespaces, request, share_evaluations=False, prune_objects=False)
    event("denied" if not fast.allowed else "mutated" if fast.patch else "unchanged")
    event(f"reinvoked {len(fast.reinvoked)}")

    def comparable(outcome: MutationOutcome) -> Any:
        return (outcome.response, outcome.patch, outcome.mutated_object,
                [(r.policy, r.binding, r.action, r.error_type, r.message) for r in outcome.decisions],
                outcome.invoked, outcome.reinvoked, [(n.policy, n.binding, n.reason) for n in outcome.not_matched])

    assert comparable(fast) == comparable(plain)


def test_a_version_is_shared_only_when_it_is_the_same_json_to_cel() -> None:
    assert same_json({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]})
    # Python's equality says yes to each of these; CEL sees a different type, key order or sign.
    assert not same_json({"a": 1}, {"a": 1.0})
    assert not same_json({"a": 1}, {"a": True})
    assert not same_json({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not same_json(0.0, -0.0)
    assert not same_json(float("nan"), float("nan"))
    assert not same_json([float("nan")], [float("nan")])


# Twelve validations run to the scope's 10,000,000 twice: several seconds of CPU, with --slow (CI).
@pytest.mark.parametrize("count", [2, pytest.param(12, marks=pytest.mark.slow)])
def test_validations_run_together_decide_as_one_by_one_at_cost_limits(count: int) -> None:
    # Each validation costs ~902,000 alone, under the 1,000,000 per expression: run together they pass that
    # limit, and twelve of them pass the scope's 10,000,000. Either way the one-by-one run must decide.
    loop = {"expression": "object.spec.items.all(i, object.spec.items.all(j, i + j >= 0))"}
    objects = [policy("p.static.k8s.io", validations=[loop] * count + [{"expression": "object.spec.replicas > 0"}]),
               binding("b.static.k8s.io", "p.static.k8s.io", ("Deny",))]
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    assert snap.validating[0].validations_together().program is not None, "the validations are run together first"
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["items"] = list(range(300))
    request = parsed(review(obj=obj))
    namespaces = RequestOnlyNamespaces()
    together = evaluate_validating(snap, namespaces, request)
    one_by_one = evaluate_validating(snap, namespaces, request, share_evaluations=False)
    assert _comparable(together) == _comparable(one_by_one)
    assert together.allowed is (count == 2)


#: Match conditions that read nothing of the object: decided once per request for every policy that has them, in
#: both passes, each policy charged its own budget (three heavy ones run out of it; a false one wins over errors).
OBJECT_FREE_CONDITIONS = (
    {"name": "namespace", "expression": "request.namespace != 'kube-system'"},
    {"name": "never", "expression": "request.operation == 'DELETE'"},
    {"name": "not-ever", "expression": "request.operation == 'DELETE'"},
    {"name": "alice", "expression": "request.userInfo.username == 'alice' && !request.dryRun"},
    {"name": "main", "expression": "request.?subResource.orValue('') == ''"},
    {"name": "broken", "expression": "request.userInfo.extra['missing'][0] == 'x'"},
    *({"name": f"heavy{index}", "expression": "!request.userInfo.extra['text'][0].contains("
       "request.userInfo.extra['needle'][0])"} for index in range(3)),
)
#: Mutations that read nothing of the object (see ``MUTATIONS`` for ones that do), changing it or not; most read
#: nothing of the request either (constants: evaluated once per process), some of those fail.
OBJECT_FREE_MUTATIONS = (
    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{metadata: Object.metadata{labels: {'team': request.namespace}}}"}},
    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{metadata: Object.metadata{labels: {'tier': 'web'}, annotations: {'a': 'c'}}}"}},
    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{spec: Object.spec{replicas: 'three'}}"}},
    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {'app': 'web'}}}}"}},
    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: "
        "[Object.spec.template.spec.containers{name: 'sidecar', image: 'envoy'}]}}}}"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: ['a', 'b'][2]}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'team': 'a'}}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: duration('1s')}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[1, 2, 3].map(n, n * 2).exists(n, n > 5) ? [JSONPatch{op: 'add', path: '/metadata/labels/six', "
        "value: 'yes'}] : []"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'add', path: '/metadata/annotations/user', value: request.userInfo.username}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression":
        "[JSONPatch{op: 'test', path: '/spec/replicas', value: 2}]"}},
    {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/nope', value: 'x'}]"}},
    MUTATIONS[0],
)


@st.composite
def object_free_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    rules = {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                "resources": ["deployments"]}]}
    # Policies draw their conditions from a few lists, so that several have the very same ones.
    heavy = [condition for condition in OBJECT_FREE_CONDITIONS if condition["name"].startswith("heavy")]
    some = st.lists(st.sampled_from(OBJECT_FREE_CONDITIONS), max_size=4, unique_by=lambda c: c["name"])
    shared = draw(st.lists(st.one_of(
        some, some,
        st.permutations([*heavy, draw(st.sampled_from(OBJECT_FREE_CONDITIONS[:6]))])), min_size=1, max_size=2))
    for index in range(draw(st.integers(1, 4))):
        name = f"m{index}.static.k8s.io"
        spec: dict[str, Any] = {
            "matchConstraints": rules,
            "failurePolicy": draw(st.sampled_from(("Fail", "Ignore"))),
            "reinvocationPolicy": draw(st.sampled_from(("Never", "IfNeeded"))),
            "mutations": draw(st.lists(st.sampled_from(OBJECT_FREE_MUTATIONS), min_size=1, max_size=2)),
        }
        conditions = draw(st.sampled_from(shared))
        if conditions:
            spec["matchConditions"] = conditions
        objects.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
                        "metadata": {"name": name}, "spec": spec})
        objects.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
                        "metadata": {"name": f"m{index}-b.static.k8s.io"}, "spec": {"policyName": name}})
    return objects


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=object_free_sets(), requests=st.lists(st.tuples(st.sampled_from(("default", "kube-system")),
                                                               st.sampled_from(("alice", "bob", "b" * 600)),
                                                               st.booleans(),
                                                               st.sampled_from((1, 2)), st.booleans()),
                                                     min_size=1, max_size=4))
def test_object_free_conditions_and_mutations_decide_as_the_straightforward_reading(
        objects: list[dict[str, Any]], requests: list[tuple[str, str, bool, int, bool]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    namespaces = RequestOnlyNamespaces()

    def comparable(outcome: MutationOutcome) -> Any:
        # The engine orders a new map's keys anew in each evaluation (cel-cpp's hash maps): a constant evaluated
        # once keeps one order, so the patch is compared as JSON operations in any order, not as bytes.
        answer = outcome.response["response"]
        patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else None
        return ({**answer, "patch": patch and sorted(json.dumps(operation, sort_keys=True) for operation in patch)},
                _operations(outcome), outcome.mutated_object,
                [(r.policy, r.binding, r.action, r.error_type, r.message) for r in outcome.decisions],
                outcome.invoked, outcome.reinvoked, [(n.policy, n.binding, n.reason) for n in outcome.not_matched])

    # Requests one after the other, as the daemon answers them: what conditions decided for the fields of one
    # request, and the values of constant mutations, are kept for the next.
    # Constant patches are applied to objects that differ (what the patch merges into, what a sidecar joins).
    for namespace, username, dry_run, replicas, bare in requests:
        obj = copy.deepcopy(DEPLOYMENT)
        obj["spec"]["replicas"] = replicas
        obj["metadata"]["annotations"] = {"a": "b"}
        if bare:
            del obj["metadata"]["labels"]
            obj["spec"]["template"] = {"spec": {"containers": [{"name": "sidecar", "image": "old"}]}}
        # About 900,000 each to compare (60,000 x 1,500 / 100): three heavy conditions pass a policy's 2.5M budget.
        user = {"username": username, "groups": ["system:authenticated"],
                "extra": {"text": ["a" * 60_000], "needle": ["b" * 1_500]}}
        request = parsed(review(obj=obj, namespace=namespace, userInfo=user, dryRun=dry_run))
        fast = evaluate_mutating(snap, namespaces, request)
        plain = evaluate_mutating(snap, namespaces, request, share_evaluations=False, prune_objects=False)
        event("denied" if not fast.allowed else "mutated" if fast.patch else "unchanged")
        event(f"reinvoked {len(fast.reinvoked)}")
        event(f"not matched {len(fast.not_matched)}")
        event("out of budget" if any("cost budget" in r.message for r in fast.decisions) else "within budget")
        assert comparable(fast) == comparable(plain)
        # Whatever is kept across requests is not part of an answer: a caller may change what it got.
        _scribble(fast.mutated_object)
        _scribble([dict(operation) for operation in fast.patch])


@pytest.mark.parametrize("mutation", OBJECT_FREE_MUTATIONS, ids=lambda mutation: str(mutation)[-60:])
def test_what_constant_mutations_keep_across_requests_is_never_part_of_an_answer(mutation: dict[str, Any]) -> None:
    # One policy, always invoked: each answer is changed by its caller before the next request.
    name = "m.static.k8s.io"
    objects = [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {"matchConstraints": {"resourceRules": [{
                    "apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["deployments"]}]},
                    "failurePolicy": "Ignore", "reinvocationPolicy": "Never", "mutations": [mutation]}},
               {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": "b.static.k8s.io"}, "spec": {"policyName": name}}]
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    namespaces = RequestOnlyNamespaces()
    for bare in (False, True, False, False, True):
        obj = copy.deepcopy(DEPLOYMENT)
        if bare:
            del obj["metadata"]["labels"]
            obj["spec"]["template"] = {"spec": {"containers": [{"name": "sidecar", "image": "old"}]}}
        request = parsed(review(obj=obj))
        fast = evaluate_mutating(snap, namespaces, request)
        plain = evaluate_mutating(snap, namespaces, request, share_evaluations=False, prune_objects=False)
        # Operations in any order: the engine orders a new map's keys anew in each evaluation (see above).
        assert (fast.mutated_object, _operations(fast), [r.message for r in fast.decisions]) == (
            plain.mutated_object, _operations(plain), [r.message for r in plain.decisions])
        _scribble(fast.mutated_object)
        _scribble([dict(operation) for operation in fast.patch])


def _constant_mutation(label: str, condition: str) -> list[dict[str, Any]]:
    name = "m.static.k8s.io"
    return [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
             "metadata": {"name": name},
             "spec": {"matchConstraints": {"resourceRules": [{
                 "apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                 "resources": ["deployments"]}]},
                 "matchConditions": [{"name": "where", "expression": condition}],
                 "failurePolicy": "Fail", "reinvocationPolicy": "Never", "mutations": [{
                     "patchType": "ApplyConfiguration", "applyConfiguration": {
                         "expression": f"Object{{metadata: Object.metadata{{labels: {{'set-by': '{label}'}}}}}}"}}]}},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
             "metadata": {"name": "b.static.k8s.io"}, "spec": {"policyName": name}}]


def test_what_is_kept_across_requests_belongs_to_its_snapshot() -> None:
    """A reload replaces the policy (same names, another constant value and condition): requests against either
    snapshot, in any order, get that snapshot's answer; each snapshot keeps its own, and lets it go with itself."""
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        old = snapshot(Path(first), *_constant_mutation("old", "request.namespace != 'skip-old'"))
        new = snapshot(Path(second), *_constant_mutation("new", "request.namespace != 'default'"))
    namespaces = RequestOnlyNamespaces()
    for which in (old, new, old, old, new, new, old):
        outcome = evaluate_mutating(which, namespaces, parsed(review(obj=copy.deepcopy(DEPLOYMENT))))
        labels = outcome.mutated_object["metadata"]["labels"]
        # The new policy's condition is false in namespace default: nothing set.
        assert labels.get("set-by") == ("old" if which is old else None), (which is old, labels)
    assert old.kept["mutating"] is not new.kept["mutating"]


def _operations(outcome: MutationOutcome) -> list[str]:
    return sorted(json.dumps(operation, sort_keys=True) for operation in outcome.patch)


def _scribble(value: Any) -> None:
    """Changes every map and list in ``value``, deepest first."""
    if isinstance(value, dict):
        for item in value.values():
            _scribble(item)
        value["scribbled"] = True
    elif isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("scribbled")


@pytest.mark.parametrize("source", [
    "request.namespace != 'kube-system'",
    "request.userInfo.username != 'x' && has(request.subResource)",
    "request.kind.kind == 'Deployment' && request.dryRun == false && request.options == null",
    "request.userInfo.groups.exists(g, g == 'system:authenticated')",
    "[request].size() == 1",
    "object.metadata.name != ''",
])
def test_request_fields_are_made_only_as_read(source: str) -> None:
    # What the engine is given of ``request`` is the same whether the fields no expression reads are made and
    # pruned away or never made (request_data with the keys the reads keep).
    program = admission_environment(False).compile(source, ExpressionKind.VALIDATION)
    assert isinstance(program, CompiledExpression), program
    reads = Reads.of([program.object_reads()])
    for request in (parsed(review()), parsed(review(sub="scale", name="", dryRun=True,
                                                    options={"kind": "CreateOptions"}))):
        for resource, kind in ((request.original_resource, request.original_kind),
                               (request.resource, GroupVersionKind("apps", "v1beta1", "Deployment"))):
            made = reads.prune("request", request_data(request, resource, kind, reads.keys_read("request")))
            pruned = reads.prune("request", request_data(request, resource, kind))
            assert list(made.items()) == list(pruned.items())
            assert RequestActivations(admission_environment(False), RequestMatch(request, RequestOnlyNamespaces()),
                                      reads=reads).request_fields(
                resource, kind) == pruned


@st.composite
def mutating_matching_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    """MutatingAdmissionPolicies whose matching reads every part of a request plans can: operations, resource
    names, object and namespace selectors (on the policy and on each binding), and another version than the
    request's (matchPolicy Equivalent: an invocation whose object would need converting is the policy's error)."""
    objects: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 4))):
        name = f"m{index}.static.k8s.io"
        rule: dict[str, Any] = {"apiGroups": ["apps"], "apiVersions": [draw(st.sampled_from(("v1", "v1", "v1beta2")))],
                                "operations": draw(st.sampled_from((["CREATE"], ["CREATE", "UPDATE"], ["*"]))),
                                "resources": ["deployments"]}
        if draw(st.booleans()):
            rule["resourceNames"] = ["web"]
        constraints: dict[str, Any] = {"resourceRules": [rule], "matchPolicy": "Equivalent"}
        constraints.update(draw(DRAWN_SELECTORS))
        spec = {"matchConstraints": constraints, "failurePolicy": draw(st.sampled_from(("Fail", "Ignore"))),
                "reinvocationPolicy": "Never", "mutations": [MUTATIONS[0]]}
        objects.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
                        "metadata": {"name": name}, "spec": spec})
        for number in range(draw(st.integers(1, 2))):
            binding_spec: dict[str, Any] = {"policyName": name}
            match_resources = draw(DRAWN_SELECTORS)
            if match_resources:
                binding_spec["matchResources"] = match_resources
            objects.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
                            "metadata": {"name": f"m{index}-b{number}.static.k8s.io"}, "spec": binding_spec})
    return objects


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=mutating_matching_sets(), shapes=st.lists(MATCHING_SHAPES, min_size=2, max_size=10))
def test_remembered_mutating_matching_decides_as_matching_each_request(objects: list[dict[str, Any]],
                                                                       shapes: list[dict[str, Any]]) -> None:
    # One snapshot answers every request in turn, so each is matched through what the earlier ones left remembered
    # (``generic.dispatcher.match_mutating``); the straightforward reading matches each request from scratch.
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    for shape in shapes:
        request = shaped_request(shape)
        remembered = evaluate_mutating(snap, MATCHING_NAMESPACES, request)
        plain = evaluate_mutating(snap, MATCHING_NAMESPACES, request, share_evaluations=False,
                                  prune_objects=False)
        event("denied" if not remembered.allowed else "mutated" if remembered.patch else "unchanged")
        event("configuration error" if any(r.message.startswith("failed to configure")
                                           for r in remembered.decisions) else "no configuration error")
        assert (remembered.response, remembered.patch, remembered.invoked,
                [(r.policy, r.binding, r.action, r.error_type, r.message) for r in remembered.decisions],
                [(n.policy, n.binding, n.reason) for n in remembered.not_matched]) == \
            (plain.response, plain.patch, plain.invoked,
             [(r.policy, r.binding, r.action, r.error_type, r.message) for r in plain.decisions],
             [(n.policy, n.binding, n.reason) for n in plain.not_matched])
