"""One generated policy set through both sides, every request's answers compared and each difference either
explained by a documented limit (``known_gaps.json``) or left unexplained (a failure of the suite).

A policy staticadm refuses at load (what kube-apiserver's API validation of the manifest refuses: compile
errors, wrong result types) is taken out of the set with its bindings before both sides run: the oracle runs no
API validation (its README), so it would load it and report the compile error at request time. Each refused
expression is probed in the oracle alone (``confirm_refusals``): kube-apiserver's plugin compiles it with the
CompileCELExpression its API validation runs, so a ``compilation error`` there confirms the refusal, and an
expression it compiles is a refusal kube-apiserver would not make (a failure of the suite). The refusals are
counted by kind; the compile errors' texts and refusals are compared with the oracle's own in
``tests/cel/test_generated_differences.py``, replayed through the oracle in ``test_known_classes.py``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staticadm.kinds import as_admitted
from staticadm.manifests.loader import load_manifest_directory
from tests.differential.generators import API, NAMESPACES, WIDGET, PolicySet
from tests.differential.harness import (
    Answer,
    differences,
    namespace_list,
    oracle_answers,
    staticadm_answers,
    write_manifests,
)

#: Kinds without a built-in schema: the oracle deduces one for their apply configurations.
CUSTOM_KINDS = frozenset({WIDGET.kind})
KNOWN_GAPS: dict[str, str] = json.loads((Path(__file__).parent / "known_gaps.json").read_text())["gaps"]

_REFUSED = re.compile(r'(ValidatingAdmissionPolicy|MutatingAdmissionPolicy|ValidatingAdmissionPolicyBinding|'
                      r'MutatingAdmissionPolicyBinding) "([^"]+)": (\S+?): (?:Invalid value: "(?:[^"\\]|\\.)*": )?(.*)',
                      re.S)


def _deduced_schema(kind: str, oracle: Answer, ours: Answer, found: list[str]) -> bool:
    # The oracle deduces a schema for a custom kind's apply configuration from the object: it sets an empty list
    # or map to null, and refuses to merge a null it deduced as a map ("expected map, got &{NULL_VALUE}").
    if kind not in CUSTOM_KINDS:
        return False
    if "failed to convert patch object to typed object: " in oracle.message and "NULL_VALUE" in oracle.message:
        return True
    if found != [item for item in found if item.startswith("patched:")] or oracle.patched is None:
        return False
    return _nulls_for_empties(oracle.patched, ours.patched)


def _nulls_for_empties(theirs: Any, ours: Any) -> bool:
    if theirs is None and ours in ([], {}):
        return True
    if isinstance(theirs, dict) and isinstance(ours, dict) and theirs.keys() == ours.keys():
        return all(theirs[key] == ours[key] or _nulls_for_empties(theirs[key], ours[key]) for key in theirs)
    if isinstance(theirs, list) and isinstance(ours, list) and len(theirs) == len(ours):
        return all(a == b or _nulls_for_empties(a, b) for a, b in zip(theirs, ours, strict=True))
    return False


def _request_list_to_json(kind: str, oracle: Answer, ours: Answer, found: list[str]) -> bool:
    # A list of the request itself (request.userInfo.groups) as a JSONPatch value: cel-go cannot convert the
    # reflected Go slice to a protobuf Value; every list an expression builds (even of the same strings) can.
    return "type conversion error from 'list(dyn)' to '*structpb.Value'" in oracle.message


def _defaulting_after_mutation(kind: str, oracle: Answer, ours: Answer, found: list[str]) -> bool:
    # kube-apiserver defaults a built-in kind's object after each mutation (dispatcher.go dispatchOne); the oracle
    # registers no defaulting functions (its README), so a mutation that adds a container leaves it undefaulted
    # there. Only the patched object differs, by what defaulting the oracle's adds.
    if kind in CUSTOM_KINDS or found != [item for item in found if item.startswith("patched:")]:
        return False
    if oracle.patched is None or ours.patched is None:
        return False
    typed = as_admitted(copy.deepcopy(oracle.patched))
    return typed is not None and typed.value == ours.patched


#: Each documented limit's test on one request's answers and their differences.
GAP_TESTS: dict[str, Callable[[str, Answer, Answer, list[str]], bool]] = {
    "deduced-schema-of-custom-kinds": _deduced_schema,
    "request-lists-as-jsonpatch-values": _request_list_to_json,
    "defaulting-after-mutation": _defaulting_after_mutation,
}


@dataclass
class RequestResult:
    uid: str
    kind: str
    oracle: Answer
    staticadm: Answer
    differences: list[str]
    gap: str | None

    @property
    def agrees(self) -> bool:
        return not self.differences


@dataclass
class SetResult:
    #: (policy or binding, field, first line of the error) for each manifest staticadm refused.
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    requests: list[RequestResult] = field(default_factory=list)
    #: The refusals probed in kube-apiserver's plugin, by verdict (``confirm_refusals``).
    refusals: dict[str, list[str]] = field(default_factory=dict)

    @property
    def unexplained(self) -> list[RequestResult]:
        return [result for result in self.requests if result.differences and result.gap is None]


def _without(objects: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    kept = []
    for item in objects:
        if item["metadata"]["name"] in names or item["spec"].get("policyName") in names:
            continue
        kept.append(item)
    return kept


def loadable(objects: list[dict[str, Any]], directory: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """The objects less those staticadm refuses (a policy's refusal takes its bindings along), and the refusals."""
    refused: list[tuple[str, str, str]] = []
    for _ in range(len(objects) + 1):
        write_manifests(directory, objects)
        errors = load_manifest_directory(str(directory)).errors
        if not errors:
            return objects, refused
        names = set()
        for error in errors:
            match = _REFUSED.search(str(error))
            assert match is not None, f"a refusal naming no policy or binding: {error}"
            names.add(match.group(2))
            refused.append((match.group(2), match.group(3), match.group(4).splitlines()[0]))
        objects = _without(objects, names)
    raise AssertionError("refusals do not converge")


_PROBED_FIELD = re.compile(r"spec\.(validations|matchConditions|auditAnnotations|variables)\[(\d+)\]\."
                           r"(expression|messageExpression|valueExpression)")
_PROBE_REQUEST = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "probe", "kind": {"group": WIDGET.group, "version": WIDGET.version, "kind": WIDGET.kind},
    "resource": {"group": WIDGET.group, "version": WIDGET.version, "resource": WIDGET.resource},
    "name": "w", "namespace": "default", "operation": "CREATE", "userInfo": {"username": "alice"},
    "object": {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
               "spec": {}}}}


def _probe(policy: Mapping[str, Any], field_name: str) -> dict[str, Any] | None:
    """A validating policy that evaluates only the refused expression of ``policy`` (at ``field_name``) on any
    widget, with the policy's variables: kube-apiserver's plugin answers ``compilation error`` there when its
    CompileCELExpression (which API validation runs) fails. None for a field this does not probe."""
    match = _PROBED_FIELD.fullmatch(field_name)
    if match is None or policy["kind"] != "ValidatingAdmissionPolicy":
        return None
    section, index, attribute = match.group(1), int(match.group(2)), match.group(3)
    source = policy["spec"][section][index][attribute]
    spec: dict[str, Any] = {"matchConstraints": {"resourceRules": [{
        "apiGroups": [WIDGET.group], "apiVersions": [WIDGET.version], "operations": ["*"],
        "resources": [WIDGET.resource]}]}, "failurePolicy": "Fail"}
    variables = list(policy["spec"].get("variables") or [])
    if section == "variables":
        # Read it first; the variables after it are left out (it may not read them).
        spec["validations"] = [{"expression": f"variables.{variables[index]['name']} == null || true"}]
        variables = variables[:index + 1]
    elif section == "validations" and attribute == "messageExpression":
        spec["validations"] = [{"expression": "false", "messageExpression": source}]
    elif section == "validations":
        spec["validations"] = [{"expression": source}]
    elif section == "matchConditions":
        spec["matchConditions"] = [{"name": "probe", "expression": source}]
        spec["validations"] = [{"expression": "true"}]
    else:
        spec["auditAnnotations"] = [{"key": "probe", "valueExpression": source}]
    if variables:
        spec["variables"] = variables
    name = "probe.static.k8s.io"
    return {"apiVersion": policy["apiVersion"], "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
            "spec": spec}


#: Refusals that are the CEL engine's documented nesting limits (docs/cel.md "The CEL environment", its nesting limits),
#: not kube-apiserver's.
_ENGINE_LIMITS = ("levels staticadm's CEL parser (cel-cpp) accepts", "nests too deeply for staticadm to load")


def confirm_refusals(objects: list[dict[str, Any]], refused: list[tuple[str, str, str]],
                     directory: Path) -> dict[str, list[str]]:
    """Each refusal of a CEL expression, probed in kube-apiserver's plugin (``_probe``): ``confirmed`` when it
    answers ``compilation error``, ``contradicted`` when it compiles the expression (kube-apiserver would load
    the policy), ``not probed`` for other refusals (structure, names, mutations: k8s.io/kubernetes validation),
    ``engine limit`` for the engine's documented nesting limits."""
    found: dict[str, list[str]] = {"confirmed": [], "contradicted": [], "not probed": [], "engine limit": []}
    by_name = {item["metadata"]["name"]: item for item in objects}
    for name, field_name, error in refused:
        policy = by_name.get(name)
        probe = _probe(policy, field_name) if policy is not None else None
        described = f"{name} {field_name}: {error[:200]}"
        if any(limit in error for limit in _ENGINE_LIMITS):
            found["engine limit"].append(described)
            continue
        if probe is None:
            found["not probed"].append(described)
            continue
        probe_directory = directory / f"probe-{len(found['confirmed']) + len(found['contradicted'])}"
        binding = {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
                   "metadata": {"name": "probeb.static.k8s.io"},
                   "spec": {"policyName": probe["metadata"]["name"], "validationActions": ["Deny"]}}
        write_manifests(probe_directory, [probe, binding])
        answer = oracle_answers(probe_directory, [_PROBE_REQUEST])[0]
        text = json.dumps(answer.as_dict())
        verdict = "confirmed" if "compilation error" in text else "contradicted"
        found[verdict].append(described + ("" if verdict == "confirmed" else f" / kube-apiserver: {text[:300]}"))
    return found


def run_set(policy_set: PolicySet, directory: Path) -> SetResult:
    """Both sides' answers to every request of ``policy_set``, compared; ``directory`` is scratch space."""
    manifests = directory / "manifests"
    objects, refused = loadable(policy_set.objects, manifests)
    refusals = confirm_refusals(policy_set.objects, refused, directory) if refused else {}
    write_manifests(manifests, objects)
    namespaces = directory / "namespaces.json"
    namespaces.write_text(namespace_list(NAMESPACES))
    theirs = oracle_answers(manifests, policy_set.reviews, namespaces)
    ours = staticadm_answers(manifests, policy_set.reviews, namespaces)
    result = SetResult(refused, refusals=refusals)
    for review, oracle, mine in zip(policy_set.reviews, theirs, ours, strict=True):
        found = differences(oracle, mine)
        kind = review["request"]["kind"]["kind"]
        gap = next((name for name, test in GAP_TESTS.items() if found and test(kind, oracle, mine, found)), None)
        result.requests.append(RequestResult(review["request"]["uid"], kind, oracle, mine, found, gap))
    return result


def describe(policy_set: PolicySet, result: SetResult) -> str:
    """A failing set as text to reproduce it: manifests, each unexplained request and its differences."""
    lines = ["manifests:", json.dumps(policy_set.objects, indent=1)]
    by_uid: Mapping[str, Any] = {review["request"]["uid"]: review for review in policy_set.reviews}
    for request in result.unexplained:
        lines.append(f"request {request.uid}: {json.dumps(by_uid[request.uid])[:3000]}")
        lines.extend(f"  {difference[:1500]}" for difference in request.differences)
    return "\n".join(lines)
