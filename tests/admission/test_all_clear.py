"""One engine call for an all-clear request decides exactly what the straightforward evaluation decides.

``evaluate_validating`` first runs the policies a request invokes as one program (``admission/all_clear.py``)
and evaluates each binding on its own only when that program does not find the request all clear. Here it is
compared with the straightforward reading of kube-apiserver's loop (``share_evaluations=False``: every
expression of every binding on its own) on generated policy sets and requests: match conditions that hold, are
false or fail; validations that pass, deny or fail; variables, failing ones too; messageExpressions whose cost
has a bound and ones whose cost has none; audit annotations that publish, are empty, null or fail; policies
that read namespaceObject of a namespace that is known or not, or ask the authorizer; several bindings with
object selectors; and expressions at the per-expression limit, the scope budgets and the match conditions'
budget, alone or only together with the others.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from staticadm.admission.generic.dispatcher import policy_candidate_set
from staticadm.admission.namespaces import parse_namespaces
from staticadm.admission.validating import all_clear
from staticadm.admission.validating.all_clear import (
    INPUT_MISS_STREAK,
    INPUT_RETRY_EVERY,
    LONGEST_KEPT_INPUT,
    MISS_STREAK,
    RETRY_EVERY,
    AnswersByInput,
    input_key,
    set_program,
)
from staticadm.admission.validating.dispatcher import ValidationOutcome, evaluate_validating
from staticadm.cel import ast
from staticadm.cel.fusion import FusedPolicy, all_loop, fuse
from staticadm.manifests.loader import load_manifest_directory
from staticadm.snapshot import build_snapshot
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

#: About 750,000 each with the large text (50,000 x 1,500 / 100): under the per-expression limit alone, over it
#: in pairs.
HEAVY = "!object.spec.text.contains(object.spec.needle)"
#: About 10,000 loop iterations with 99 items (the engine's own limit in one evaluation: several of them in one
#: program pass it), and with 300 more than one evaluation may run (evaluated in steps).
MEDIUM = "object.spec.items.all(i, object.spec.items.exists(j, j >= 0))"

PASSING = (
    {"expression": "object.spec.replicas < 1000"},
    {"expression": "has(object.metadata.name)", "messageExpression": "'name: ' + object.metadata.name"},
    {"expression": "variables.small", "messageExpression": "'replicas: ' + string(object.spec.replicas)"},
    {"expression": "object.metadata.labels.all(k, k != 'forbidden')"},
    {"expression": "variables.names.all(n, n.startsWith('item'))"},
    {"expression": "request.operation == 'CREATE' || oldObject != null"},
    {"expression": "true", "messageExpression": "'contains: ' + string(object.metadata.name.contains('w'))"},
    {"expression": MEDIUM},
    # Loops over the range MEDIUM iterates, with the same iteration variable: one loop in the program.
    {"expression": "object.spec.items.all(i, i < 1000)"},
    {"expression": "object.spec.items.all(i, i >= 0 && string(i) != 'x')"},
)
TROUBLE = (
    {"expression": "object.spec.replicas <= 5"},
    {"expression": "object.spec.missing == 1", "message": "reads a field the object does not have"},
    {"expression": "variables.broken > 0"},
    {"expression": "!('deny' in object.metadata.labels)", "reason": "Forbidden"},
    {"expression": HEAVY},
    {"expression": "namespaceObject.metadata.labels.env == 'prod'"},
    {"expression": "authorizer.group('apps').resource('deployments').check('create').allowed()"},
    {"expression": "object.spec.items.all(i, i < 50)"},
    {"expression": "object.spec.items.all(i, object.spec.nope > i)"},
)
CONDITIONS = (
    {"name": "small", "expression": "object.spec.replicas < 100"},
    {"name": "unlabelled", "expression": "!('skip' in object.metadata.labels)"},
    {"name": "broken", "expression": "object.spec.nope == 1"},
    {"name": "heavy", "expression": HEAVY},
    {"name": "always", "expression": "true"},
)
ANNOTATIONS = (
    {"key": "replicas", "valueExpression": "string(object.spec.replicas)"},
    {"key": "padded", "valueExpression": "'  ' + object.metadata.name + ' '"},
    {"key": "blank", "valueExpression": "'   '"},
    {"key": "absent", "valueExpression": "null"},
    {"key": "maybe", "valueExpression": "object.spec.replicas > 50 ? 'many' : ''"},
    {"key": "broken", "valueExpression": "string(object.spec.nope)"},
    {"key": "heavy", "valueExpression": f"{HEAVY} ? 'heavy' : ''"},
)
VARIABLES = [{"name": "small", "expression": "object.spec.replicas < 500"},
             {"name": "names", "expression": "object.spec.items.map(i, 'item' + string(i))"},
             {"name": "broken", "expression": "object.spec.nope"}]


@st.composite
def policy_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 4))):
        name = f"p{index}.static.k8s.io"
        validations = draw(st.lists(st.sampled_from(PASSING), min_size=1, max_size=3))
        if draw(st.integers(0, 3)) == 0:
            validations.append(draw(st.sampled_from(TROUBLE)))
        spec: dict[str, Any] = {"failurePolicy": draw(st.sampled_from(("Fail", "Ignore"))),
                                "variables": VARIABLES, "validations": validations}
        conditions = draw(st.lists(st.sampled_from(CONDITIONS), max_size=2, unique_by=lambda c: c["name"]))
        if conditions:
            spec["matchConditions"] = conditions
        annotations = draw(st.lists(st.sampled_from(ANNOTATIONS), max_size=2, unique_by=lambda a: a["key"]))
        if annotations:
            spec["auditAnnotations"] = annotations
        objects.append(policy(name, **spec))
        for number in range(draw(st.integers(1, 2))):
            actions = draw(st.sampled_from((("Deny",), ("Warn",), ("Audit",), ("Warn", "Audit"))))
            extra: dict[str, Any] = {}
            label = draw(st.sampled_from((None, None, "web", "db")))
            if label is not None:
                extra["matchResources"] = {"objectSelector": {"matchLabels": {"app": label}}}
            objects.append(binding(f"p{index}-b{number}.static.k8s.io", name, actions, **extra))
    return objects


NAMESPACES = parse_namespaces("""
apiVersion: v1
kind: Namespace
metadata: {name: default, labels: {env: prod}}
""")


def _request(replicas: int, labels: dict[str, str], items: int, namespace: str, large: bool = False) -> Any:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["replicas"] = replicas
    obj["spec"]["items"] = list(range(items))
    obj["spec"]["text"] = "a" * (50_000 if large else 50)
    obj["spec"]["needle"] = "b" * (1_500 if large else 15)
    obj["metadata"]["labels"] = labels
    return parsed(review(obj=obj, namespace=namespace))


def _comparable(outcome: ValidationOutcome) -> Any:
    return (outcome.response, outcome.allowed, outcome.status, outcome.warnings, dict(outcome.annotations),
            [(r.policy, r.binding, r.action, r.error_type, r.message, r.reason, r.expression_index, r.site)
             for r in outcome.decisions],
            outcome.matched, [(n.policy, n.binding, n.reason) for n in outcome.not_matched], outcome.excluded)


def _decided(outcome: ValidationOutcome) -> Any:
    return _comparable(outcome)[:6]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=policy_sets(), replicas=st.sampled_from((1, 7, 60, 200)),
       labels=st.sampled_from(({"app": "web"}, {"app": "db", "deny": "x"}, {"app": "web", "skip": "1"}, {})),
       items=st.sampled_from((3, 99, 300)), large=st.booleans(), namespace=st.sampled_from(("default", "unknown")))
def test_one_call_decides_as_the_straightforward_evaluation(objects: list[dict[str, Any]], replicas: int,
                                                            labels: dict[str, str], items: int, large: bool,
                                                            namespace: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    request = _request(replicas, labels, items, namespace, large)
    one_call = evaluate_validating(snap, NAMESPACES, request)
    answered = sum(entry.answered for compiled in snap.validating for entry in compiled.sets.built.values())
    event("one call" if answered else "exact")
    exact = evaluate_validating(snap, NAMESPACES, request, one_call=False)
    straightforward = evaluate_validating(snap, NAMESPACES, request, share_evaluations=False)
    event("denied" if not one_call.allowed else "warned" if one_call.warnings else
          "audited" if one_call.annotations else "allowed")
    event("errors" if any(r.error_type.value != "no_error" for r in one_call.decisions) else "no errors")
    assert _comparable(one_call) == _comparable(straightforward)
    assert _comparable(exact) == _comparable(straightforward)
    # The daemon's evaluation (nobody reads which bindings applied) decides the same.
    quiet = evaluate_validating(snap, NAMESPACES, request, explain=False)
    assert _decided(quiet) == _decided(straightforward)


def _set_program(snap: Any) -> Any:
    return set_program([compiled for compiled in snap.validating if compiled.joins_sets])


def test_an_all_clear_request_is_answered_by_the_program(tmp_path: Path) -> None:
    objects = [policy("a.static.k8s.io", variables=VARIABLES,
                      matchConditions=[CONDITIONS[0]], validations=[PASSING[2], PASSING[4]],
                      auditAnnotations=[ANNOTATIONS[0], ANNOTATIONS[1], ANNOTATIONS[3]]),
               binding("a.static.k8s.io", "a.static.k8s.io", ("Deny",)),
               policy("b.static.k8s.io", matchConditions=[CONDITIONS[1]], validations=[PASSING[0]]),
               binding("b.static.k8s.io", "b.static.k8s.io", ("Warn",))]
    (tmp_path / "policies.yaml").write_text(yaml.safe_dump_all(objects))
    loaded = load_manifest_directory(str(tmp_path))
    snap = build_snapshot(loaded)
    outcome = evaluate_validating(snap, NAMESPACES, _request(3, {"app": "web", "skip": "1"}, 3, "default"))
    entry = _set_program(snap)
    assert entry.program is not None and entry.misses == 0
    assert outcome.allowed and outcome.matched == (("a.static.k8s.io", "a.static.k8s.io"),)
    assert [(n.policy, n.reason) for n in outcome.not_matched] == [
        ("b.static.k8s.io", 'matchCondition "unlabelled" evaluated to false')]
    assert dict(outcome.annotations) == {"a.static.k8s.io/replicas": "3", "a.static.k8s.io/padded": "web"}
    # A reload that keeps the policies (another binding added) keeps their program.
    (tmp_path / "binding.yaml").write_text(yaml.safe_dump(binding("c.static.k8s.io", "b.static.k8s.io")))
    reloaded = build_snapshot(load_manifest_directory(str(tmp_path), cache=loaded.cache))
    assert len(reloaded.validating[1].bindings) == 2
    assert _set_program(reloaded) is entry


@pytest.mark.parametrize("count", [1, 2])
def test_expressions_within_their_limits_alone_are_decided_exactly_together(tmp_path: Path, count: int) -> None:
    # Each policy's validation costs ~750,000, under the 1,000,000 per expression; in one program they add up
    # past it, so the program says nothing and each binding is evaluated on its own: all allowed. (The expressions
    # differ: one that several policies make alike is evaluated once, see below.)
    objects = []
    for index in range(count):
        objects += [policy(f"p{index}.static.k8s.io", validations=[{"expression": f"{HEAVY} && {index} >= 0"}]),
                    binding(f"p{index}.static.k8s.io", f"p{index}.static.k8s.io")]
    snap = snapshot(tmp_path, *objects)
    request = _request(1, {}, 3, "default", large=True)
    outcome = evaluate_validating(snap, NAMESPACES, request)
    assert outcome.allowed and len(outcome.matched) == count
    assert _comparable(outcome) == _comparable(evaluate_validating(snap, NAMESPACES, request,
                                                                   share_evaluations=False))
    assert _set_program(snap).misses == (count - 1)


@pytest.mark.parametrize("shared", ["validation", "variable", "match condition"])
def test_what_several_policies_evaluate_alike_is_evaluated_once(tmp_path: Path, shared: str) -> None:
    # The same ~750,000 expression in two policies: under the per-expression limit once, over it twice. The program
    # evaluates it once (a validation, a variable each declares, a match condition) and so finds the request all
    # clear, as evaluating each binding on its own does; nothing is run again by the exact evaluation.
    objects = []
    for index in range(2):
        spec: dict[str, Any] = {"validations": [{"expression": HEAVY}]}
        if shared == "variable":
            spec = {"variables": [{"name": f"v{index}" if index else "heavy", "expression": HEAVY}],
                    "validations": [{"expression": f"variables.{'v1' if index else 'heavy'}"}]}
        elif shared == "match condition":
            spec = {"matchConditions": [{"name": f"c{index}", "expression": HEAVY}],
                    "validations": [{"expression": f"{index} >= 0"}]}
        objects += [policy(f"p{index}.static.k8s.io", **spec),
                    binding(f"p{index}.static.k8s.io", f"p{index}.static.k8s.io")]
    snap = snapshot(tmp_path, *objects)
    request = _request(1, {}, 3, "default", large=True)
    outcome = evaluate_validating(snap, NAMESPACES, request)
    assert outcome.allowed and len(outcome.matched) == 2
    assert _comparable(outcome) == _comparable(evaluate_validating(snap, NAMESPACES, request,
                                                                   share_evaluations=False))
    entry = _set_program(snap)
    assert (entry.answered, entry.misses) == (1, 0)


def test_one_policy_never_shares_an_evaluation_with_itself(tmp_path: Path) -> None:
    # Two ~750,000 validations alike in one policy are two evaluations in its scope, as kube-apiserver charges them:
    # the program charges both (past the per-expression limit together), says nothing, and the exact evaluation
    # decides.
    spec: dict[str, Any] = {"validations": [{"expression": HEAVY}, {"expression": HEAVY}]}
    snap = snapshot(tmp_path, policy("p.static.k8s.io", **spec), binding("p.static.k8s.io", "p.static.k8s.io"))
    request = _request(1, {}, 3, "default", large=True)
    outcome = evaluate_validating(snap, NAMESPACES, request)
    assert outcome.allowed
    assert _comparable(outcome) == _comparable(evaluate_validating(snap, NAMESPACES, request,
                                                                   share_evaluations=False))
    entry = _set_program(snap)
    assert (entry.answered, entry.misses) == (0, 1)

def test_loops_over_one_range_are_one_loop_under_each_policys_conditions(tmp_path: Path) -> None:
    # Three policies iterate object.spec.items; the third's conditions are false for this request, and its loop
    # would not pass: in the one loop its body is not evaluated, so the request is all clear, as evaluating each
    # binding on its own finds.
    objects = [policy("a.static.k8s.io", validations=[{"expression": "object.spec.items.all(i, i < 1000)"}]),
               binding("a.static.k8s.io", "a.static.k8s.io"),
               policy("b.static.k8s.io", matchConditions=[CONDITIONS[0]],
                      validations=[{"expression": "object.spec.items.all(i, i >= 0)"}, PASSING[0]]),
               binding("b.static.k8s.io", "b.static.k8s.io"),
               policy("c.static.k8s.io", matchConditions=[{"name": "never", "expression": "object.spec.replicas < 0"}],
                      validations=[{"expression": "object.spec.items.all(i, i < 50)"}]),
               binding("c.static.k8s.io", "c.static.k8s.io")]
    snap = snapshot(tmp_path, *objects)
    entry = None
    for items, allowed in ((99, True), (1200, False)):
        request = _request(1, {}, items, "default")
        outcome = evaluate_validating(snap, NAMESPACES, request)
        assert outcome.allowed is allowed
        assert _comparable(outcome) == _comparable(evaluate_validating(snap, NAMESPACES, request,
                                                                       share_evaluations=False))
        entry = _set_program(snap)
    assert entry is not None and (entry.answered, entry.misses) == (1, 1)
    # One loop in the program over object.spec.items, where the policies wrote three.
    parts = [FusedPolicy([], [program.prepared for _, program in compiled.match_conditions],
                         [validation.expression.prepared for validation in compiled.validations], [])
             for compiled in snap.validating]
    assert all(all_loop(part.validations[0]) is not None for part in parts)
    fused, _ = fuse(parts)
    loops = [node for node in ast.walk(fused.expr) if node.WhichOneof("expr_kind") == "comprehension_expr"
             and node.comprehension_expr.iter_var == "i"]
    assert len(loops) == 1

def test_a_set_that_is_never_all_clear_is_tried_only_now_and_then(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(validations=[{"expression": "object.spec.replicas <= 5"}]),
                    binding(actions=("Warn",)))
    request = _request(7, {}, 3, "default")
    for _ in range(MISS_STREAK + 2 * RETRY_EVERY):
        assert evaluate_validating(snap, NAMESPACES, request).warnings
    entry = _set_program(snap)
    assert entry.misses == MISS_STREAK + 2 and entry.passed_over == 2 * RETRY_EVERY


@st.composite
def matching_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 4))):
        name = f"m{index}.static.k8s.io"
        rule: dict[str, Any] = {"apiGroups": ["apps"], "apiVersions": ["v1"],
                                "operations": draw(st.sampled_from((["CREATE"], ["CREATE", "UPDATE"], ["*"]))),
                                "resources": ["deployments"]}
        if draw(st.booleans()):
            rule["resourceNames"] = ["web"]
        constraints: dict[str, Any] = {"resourceRules": [rule]}
        constraints.update(draw(DRAWN_SELECTORS))
        validations = [draw(st.sampled_from(PASSING[:3])), *([TROUBLE[0]] if draw(st.booleans()) else [])]
        objects.append(policy(name, matchConstraints=constraints, variables=VARIABLES, validations=validations))
        for number in range(draw(st.integers(1, 2))):
            extra: dict[str, Any] = {}
            match_resources = draw(DRAWN_SELECTORS)
            if match_resources:
                extra["matchResources"] = match_resources
            objects.append(binding(f"m{index}-b{number}.static.k8s.io", name, ("Deny",), **extra))
    return objects


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=matching_sets(), shapes=st.lists(MATCHING_SHAPES, min_size=2, max_size=12))
def test_remembered_matching_decides_as_matching_each_request(objects: list[dict[str, Any]],
                                                              shapes: list[dict[str, Any]]) -> None:
    # One snapshot answers every request in turn, so each is matched through what the earlier ones left
    # remembered; the straightforward evaluation matches each request from scratch.
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    for shape in shapes:
        request = shaped_request(shape)
        remembered = evaluate_validating(snap, MATCHING_NAMESPACES, request)
        straightforward = evaluate_validating(snap, MATCHING_NAMESPACES, request, share_evaluations=False)
        event("denied" if not remembered.allowed else "allowed")
        assert _comparable(remembered) == _comparable(straightforward)
        assert _decided(evaluate_validating(snap, MATCHING_NAMESPACES, request, explain=False)) == \
            _decided(straightforward)


# -- answers kept across requests (AnswersByInput) --------------------------------------------------------------------

kept_shapes = st.fixed_dictionaries({
    "replicas": st.sampled_from((1, 60, 200)),
    "labels": st.sampled_from(({"app": "web"}, {"app": "db", "deny": "x"}, {"app": "web", "skip": "1"}, {})),
    "items": st.sampled_from((3, 99)),
    "namespace": st.sampled_from(("default", "unknown")),
    # Read by no expression: requests that differ only here get the same input.
    "unread": st.sampled_from(("a", "b")),
    "operation": st.sampled_from(("CREATE", "UPDATE")),
})


def _kept_request(shape: dict[str, Any]) -> Any:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["metadata"].update(namespace=shape["namespace"], labels=shape["labels"])
    obj["spec"].update(replicas=shape["replicas"], items=list(range(shape["items"])), text="a" * 50,
                       needle="b" * 15, unread=shape["unread"])
    old = copy.deepcopy(obj) if shape["operation"] == "UPDATE" else None
    return parsed(review(obj=obj, old=old, operation=shape["operation"], namespace=shape["namespace"]))


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=policy_sets(), shapes=st.lists(kept_shapes, min_size=2, max_size=10))
def test_kept_answers_decide_as_evaluating_each_request(objects: list[dict[str, Any]],
                                                        shapes: list[dict[str, Any]]) -> None:
    # One snapshot answers the requests in turn (the same shapes recur), so later ones are answered from what the
    # earlier ones left kept; the straightforward evaluation evaluates every expression of every request.
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot(Path(directory), *objects)
    for shape in shapes:
        request = _kept_request(shape)
        straightforward = evaluate_validating(snap, NAMESPACES, request, share_evaluations=False)
        assert _comparable(evaluate_validating(snap, NAMESPACES, request)) == _comparable(straightforward)
        assert _decided(evaluate_validating(snap, NAMESPACES, request, explain=False)) == _decided(straightforward)
    event("answers kept" if snap.kept.get("all-clear") else "nothing kept")


KEPT_POLICIES = (
    policy("a.static.k8s.io", variables=VARIABLES, validations=[PASSING[0], PASSING[4]],
           auditAnnotations=[ANNOTATIONS[0]]),
    binding("a.static.k8s.io", "a.static.k8s.io", ("Deny",)),
    policy("b.static.k8s.io", matchConditions=[CONDITIONS[1]], validations=[PASSING[0]]),
    binding("b.static.k8s.io", "b.static.k8s.io", ("Warn",)),
)


def _shape(**changes: Any) -> dict[str, Any]:
    return {"replicas": 3, "labels": {"app": "web"}, "items": 3, "namespace": "default", "unread": "a",
            "operation": "CREATE", **changes}


def test_a_request_with_the_same_input_is_answered_without_the_engine(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, *KEPT_POLICIES)
    first = evaluate_validating(snap, NAMESPACES, _kept_request(_shape()))
    entry = _set_program(snap)
    assert entry.answered == 1 and first.allowed
    assert dict(first.annotations) == {"a.static.k8s.io/replicas": "3"}
    # Only a field no expression reads differs (and the uid, which CEL never sees): the engine is not called.
    again = evaluate_validating(snap, NAMESPACES, _kept_request(_shape(unread="b")))
    assert entry.answered == 1 and _comparable(again) == _comparable(first)
    # A field the policies read differs: evaluated, and its own answer published.
    other = evaluate_validating(snap, NAMESPACES, _kept_request(_shape(replicas=4)))
    assert entry.answered == 2 and dict(other.annotations) == {"a.static.k8s.io/replicas": "4"}
    # Skipped by a match condition: kept as such.
    for _ in range(2):
        skipped = evaluate_validating(snap, NAMESPACES, _kept_request(_shape(labels={"app": "web", "skip": "1"})))
        assert [(n.policy, n.reason) for n in skipped.not_matched] == [
            ("b.static.k8s.io", 'matchCondition "unlabelled" evaluated to false')]
    assert entry.answered == 3
    # Not all clear (denied): never kept, so evaluated each time.
    for _ in range(2):
        assert not evaluate_validating(snap, NAMESPACES, _kept_request(_shape(replicas=2000))).allowed
    assert entry.answered == 3 and entry.misses == 2


def test_kept_answers_are_bounded_and_belong_to_their_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    # Every input here is new: looked up and kept each time all the same.
    monkeypatch.setattr(all_clear, "INPUT_MISS_STREAK", 10 * AnswersByInput.LIMIT)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    snap = snapshot(tmp_path / "one", *KEPT_POLICIES)
    def numbered(number: int) -> Any:
        # The labels are read (b's match condition reads the whole map): each number is an input of its own.
        return _kept_request(_shape(labels={"app": "web", "n": str(number)}))

    for number in range(AnswersByInput.LIMIT):
        assert evaluate_validating(snap, NAMESPACES, numbered(number)).allowed
    kept = AnswersByInput.of(snap)
    assert len(kept._answers) == AnswersByInput.LIMIT
    entry = _set_program(snap)
    answered = entry.answered
    evaluate_validating(snap, NAMESPACES, numbered(0))
    assert entry.answered == answered
    # One more: the full memo is emptied for it, so the first is evaluated again, the newest is kept.
    evaluate_validating(snap, NAMESPACES, numbered(AnswersByInput.LIMIT))
    assert len(kept._answers) == 1 and entry.answered == answered + 1
    evaluate_validating(snap, NAMESPACES, numbered(AnswersByInput.LIMIT))
    assert entry.answered == answered + 1
    evaluate_validating(snap, NAMESPACES, numbered(0))
    assert entry.answered == answered + 2
    other = snapshot(tmp_path / "two", *KEPT_POLICIES)
    assert AnswersByInput.of(other) is not kept and not AnswersByInput.of(other)._answers


def test_inputs_that_never_recur_are_looked_up_only_now_and_then(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, *KEPT_POLICIES)

    def numbered(number: int) -> Any:
        return _kept_request(_shape(labels={"app": "web", "n": str(number)}))

    for number in range(INPUT_MISS_STREAK + 4 * INPUT_RETRY_EVERY):
        assert evaluate_validating(snap, NAMESPACES, numbered(number)).allowed
    entry = _set_program(snap)
    assert entry.inputs_passed_over == 4 * INPUT_RETRY_EVERY
    # Keyed: the first INPUT_MISS_STREAK, then one in INPUT_RETRY_EVERY.
    assert len(AnswersByInput.of(snap)._answers) == INPUT_MISS_STREAK + 4
    # An input that recurs is found again at the next look-up, and every request is looked up again after it.
    repeated = numbered(INPUT_MISS_STREAK + 4 * INPUT_RETRY_EVERY - 1)
    for _ in range(INPUT_RETRY_EVERY):
        assert evaluate_validating(snap, NAMESPACES, repeated).allowed
    assert entry.inputs_missed == 0
    answered = entry.answered
    assert evaluate_validating(snap, NAMESPACES, repeated).allowed
    assert entry.answered == answered


def test_a_large_input_is_evaluated_every_time(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, policy(validations=[{"expression": "object.spec.text.size() > 0"}]), binding())
    request = _kept_request(_shape())
    request.object["spec"]["text"] = "a" * LONGEST_KEPT_INPUT
    for count in (1, 2):
        assert evaluate_validating(snap, NAMESPACES, request).allowed
        assert _set_program(snap).answered == count
    assert not AnswersByInput.of(snap)._answers


def test_the_input_key_tells_apart_what_cel_tells_apart() -> None:
    keys = [input_key((value,)) for value in (1, 1.0, True, "1", None, 0.0, -0.0, [1], {"1": 1})]
    assert None not in keys and len(set(keys)) == len(keys)
    # Map key order is visible to iteration.
    assert input_key(({"a": 1, "b": 2},)) != input_key(({"b": 2, "a": 1},))
    # Not JSON orjson writes (an integer past 64 bits): no key, so evaluated.
    assert input_key((2**70,)) is None


def test_a_listed_answer_is_read_once_for_the_requests_that_give_it(tmp_path: Path) -> None:
    # The annotation's value is empty (nothing published) for few replicas, and the object's own value past five.
    annotation = {"key": "value", "valueExpression": "object.spec.replicas > 5 ? string(object.spec.value) : ''"}
    snap = snapshot(tmp_path, policy("a.static.k8s.io", matchConditions=[CONDITIONS[0]], validations=[PASSING[0]],
                                     auditAnnotations=[annotation]),
                    binding("a.static.k8s.io", "a.static.k8s.io", ("Deny",)))

    def decided(replicas: int, value: Any) -> ValidationOutcome:
        obj = copy.deepcopy(DEPLOYMENT)
        obj["spec"].update(replicas=replicas, value=value)
        straightforward = evaluate_validating(snap, NAMESPACES, parsed(review(obj=obj)), share_evaluations=False)
        quiet = evaluate_validating(snap, NAMESPACES, parsed(review(obj=obj)), explain=False)
        assert _decided(quiet) == _decided(straightforward)
        return quiet

    assert decided(1, "x").allowed
    entry = _set_program(snap)
    reading = entry.last_reading
    assert reading is not None and reading[2] == {}
    # Another input (not kept: replicas differ) with the same answer: the same reading, not read again.
    assert decided(2, "y").allowed and entry.last_reading is reading
    assert dict(decided(7, "seven").annotations) == {"a.static.k8s.io/value": "seven"}
    assert entry.last_reading is not reading
    # Another value is another answer, read anew; one the engine fails on is decided exactly.
    assert dict(decided(8, "eight").annotations) == {"a.static.k8s.io/value": "eight"}
    assert not decided(9, ["not", "a", "string"]).allowed
    assert dict(decided(10, "eight").annotations) == {"a.static.k8s.io/value": "eight"}


def test_the_engine_is_given_the_authorizer_only_when_a_candidate_names_it(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "named").mkdir()
    request = _request(3, {"app": "web"}, 3, "default")
    plain = (policy("a.static.k8s.io", validations=[PASSING[0]]), binding("a.static.k8s.io", "a.static.k8s.io"))
    assert not policy_candidate_set(snapshot(tmp_path / "plain", *plain), request, mutating=False).asks_authorizer
    # Named by a candidate (here in a variable), it is given, and the policy that asks it is decided as the
    # straightforward evaluation decides it.
    check = "authorizer.group('apps').resource('deployments').check('create').allowed()"
    named = (*plain, policy("b.static.k8s.io", variables=[{"name": "allowed", "expression": check}],
                            validations=[{"expression": "!variables.allowed"}]),
             binding("b.static.k8s.io", "b.static.k8s.io"))
    snap = snapshot(tmp_path / "named", *named)
    assert policy_candidate_set(snap, request, mutating=False).asks_authorizer
    outcome = evaluate_validating(snap, NAMESPACES, request)
    assert _comparable(outcome) == _comparable(evaluate_validating(snap, NAMESPACES, request,
                                                                   share_evaluations=False))
    # The authorizer itself answered (offline, there is none to ask), not a missing variable.
    assert [record.message for record in outcome.decisions] == [
        "expression '!variables.allowed' resulted in error: composited variable \"allowed\" fails to evaluate: "
        "authorization check not possible: no authorizer is configured in staticadm"]
