"""The request path's match plans decide exactly what the straightforward matcher decides.

``MatchPlan.evaluate`` (remembered rule outcomes per request shape, selectors read once per request, rules
before selectors) against ``matching.matches`` (kube-apiserver's matcher, transcribed): generated
MatchResources and requests, errors included, each plan asked about many requests so that remembered
outcomes are exercised as well as fresh ones.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from staticadm.admission.matching.matcher import matches
from staticadm.admission.matching.plan import MATCHED_EQUIVALENT, MATCHED_ORIGINAL, NOT_MATCHED, MatchPlan, RequestMatch
from staticadm.admission.namespaces import NamespaceSource, RequestOnlyNamespaces, parse_namespaces
from staticadm.admission.request import AdmissionRequest
from staticadm.model import LabelSelector, LabelSelectorRequirement, MatchResources, NamedRuleWithOperations
from tests.admission.helpers import parsed, review
from tests.examples import examples

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
RESOURCES = (("", "v1", "pods", "Pod"), ("", "v1", "namespaces", "Namespace"), ("apps", "v1", "deployments",
             "Deployment"), ("apps", "v1beta1", "deployments", "Deployment"), ("", "v1", "nodes", "Node"))
LABEL_KEYS = ("team", "app", "kubernetes.io/metadata.name")
LABEL_VALUES = ("a", "b", "team-a")

NAMESPACES = parse_namespaces("""
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: team-a, labels: {team: a}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: default}}
""")


def _subset(values: tuple[str, ...]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=3, unique=True).map(tuple)


rules = st.builds(
    NamedRuleWithOperations,
    resource_names=st.sampled_from(((), ("web",), ("web", "other"))),
    operations=_subset((*OPERATIONS, "*")),
    api_groups=_subset(("", "apps", "*")),
    api_versions=_subset(("v1", "v1beta1", "*")),
    resources=_subset(("pods", "pods/*", "pods/exec", "pods/status", "deployments", "deployments/scale",
                       "namespaces", "nodes", "*", "*/*", "*/status")),
    scope=st.sampled_from((None, "*", "Namespaced", "Cluster")),
)

requirements = st.builds(
    LabelSelectorRequirement,
    key=st.sampled_from(LABEL_KEYS),
    operator=st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist")),
    values=st.lists(st.sampled_from(LABEL_VALUES), max_size=2, unique=True).map(tuple),
)

selectors = st.builds(
    LabelSelector,
    match_labels=st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
    match_expressions=st.lists(requirements, max_size=2).map(tuple),
)

_present_match = st.builds(
    MatchResources,
    # Mostly present (validation defaults them); absent ones are the matcher's configuration errors.
    namespace_selector=st.one_of(*[selectors] * 6, st.none()),
    object_selector=st.one_of(*[selectors] * 6, st.none()),
    resource_rules=st.lists(rules, max_size=3).map(tuple),
    exclude_resource_rules=st.lists(rules, max_size=2).map(tuple),
    match_policy=st.sampled_from((None, "Exact", "Equivalent")),
)
match_resources = st.one_of(st.none(), _present_match, _present_match, _present_match, _present_match)

objects = st.one_of(
    st.none(),
    st.just({"spec": {}}),  # no ObjectMeta, as a CONNECT options object
    st.builds(lambda labels: {"metadata": {"name": "web", "labels": labels}},
              st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2)),
)


@st.composite
def requests(draw: st.DrawFn) -> AdmissionRequest:
    group, version, resource, kind = draw(st.sampled_from(RESOURCES))
    received = draw(st.sampled_from(RESOURCES))
    converted = draw(st.booleans())
    sub = draw(st.sampled_from(("", "", "status", "exec", "scale")))
    raw = review(operation=draw(st.sampled_from(OPERATIONS)), obj=draw(objects), old=draw(objects),
                 namespace=draw(st.sampled_from(("", "default", "team-a", "unlisted"))),
                 name=draw(st.sampled_from(("", "web", "db"))), group=group, version=version, resource=resource,
                 kind=kind, sub=sub)
    if converted:
        # kube-apiserver sent the object in another version than the request's (what Equivalent matches).
        raw["request"]["kind"] = {"group": received[0], "version": received[1], "kind": received[3]}
        raw["request"]["resource"] = {"group": received[0], "version": received[1], "resource": received[2]}
    return parsed(raw)


def _straightforward(match: MatchResources | None, request: AdmissionRequest, namespaces: NamespaceSource,
                     is_policy: bool) -> Any:
    outcome = matches(match, request, namespaces, is_policy=is_policy)
    if outcome.error is not None:
        return outcome.error
    if not outcome.matched:
        return NOT_MATCHED
    return outcome.resource, outcome.kind


def _planned(plan: MatchPlan, request: AdmissionRequest, namespaces: NamespaceSource) -> Any:
    outcome = plan.evaluate(RequestMatch(request, namespaces))
    if isinstance(outcome, str) or outcome == NOT_MATCHED:
        return outcome
    assert outcome in (MATCHED_ORIGINAL, MATCHED_EQUIVALENT)
    if outcome == MATCHED_EQUIVALENT:
        return request.resource, request.kind
    return request.original_resource, request.original_kind


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(match=match_resources, batch=st.lists(requests(), min_size=1, max_size=8), is_policy=st.booleans(),
       known=st.booleans())
def test_plan_decides_as_the_matcher(match: MatchResources | None, batch: list[AdmissionRequest], is_policy: bool,
                                     known: bool) -> None:
    namespaces: NamespaceSource = NAMESPACES if known else RequestOnlyNamespaces()
    plan = MatchPlan(match, is_policy=is_policy)
    # Twice over: the second pass answers every request from the plan's remembered rule outcomes.
    for request in [*batch, *batch]:
        expected = _straightforward(match, request, namespaces, is_policy)
        event("error" if isinstance(expected, str) else "not matched" if expected == NOT_MATCHED else "matched")
        assert _planned(plan, request, namespaces) == expected, (
            match, request)


def test_remembered_outcomes_are_bounded() -> None:
    from staticadm.admission.matching import plan as match_plan

    plan = MatchPlan(MatchResources(namespace_selector=LabelSelector(), object_selector=LabelSelector(),
                                    resource_rules=(NamedRuleWithOperations(operations=("*",), api_groups=("*",),
                                                                            api_versions=("*",), resources=("*",)),)),
                     is_policy=True)
    namespaces = RequestOnlyNamespaces()
    for index in range(match_plan.MAX_REMEMBERED_SHAPES + 10):
        request = parsed(review(name=f"n{index}", group="", resource=f"r{index}", kind="K"))
        assert plan.evaluate(RequestMatch(request, namespaces)) == MATCHED_ORIGINAL
    assert len(plan._by_shape) <= match_plan.MAX_REMEMBERED_SHAPES
