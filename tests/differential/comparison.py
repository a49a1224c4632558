"""One generated policy set through both sides, every request's answers compared and each difference either
explained by a documented limit (``known_gaps.json``) or left unexplained (a failure of the suite).

A policy staticadm refuses at load (what kube-apiserver's API validation of the manifest refuses: compile
errors, wrong result types) is taken out of the set with its bindings before both sides run: the oracle runs no
API validation (its README), so it would load it and report the compile error at request time. The refusals are
counted by kind; the compile errors' texts and refusals are compared with the oracle's own in
``tests/cel/test_generated_differences.py``, replayed through the oracle in ``test_known_classes.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staticadm.manifests.loader import load_manifest_directory
from tests.differential.generators import NAMESPACES, WIDGET, PolicySet
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


def _sort_on_error(kind: str, oracle: Answer, ours: Answer, found: list[str]) -> bool:
    # cel-go's sort()/distinct() on an operand typed as a list that evaluated to an error panics, and
    # kube-apiserver reports the recovered panic instead of the error: only the text differs.
    return ("internal error: interface conversion: *types.Err is not traits.Lister" in oracle.message
            and oracle.allowed == ours.allowed and all(item.startswith(("message:", "warnings:")) for item in found))


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


#: Each documented limit's test on one request's answers and their differences.
GAP_TESTS: dict[str, Callable[[str, Answer, Answer, list[str]], bool]] = {
    "sort-of-an-error": _sort_on_error,
    "deduced-schema-of-custom-kinds": _deduced_schema,
    "request-lists-as-jsonpatch-values": _request_list_to_json,
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


def run_set(policy_set: PolicySet, directory: Path) -> SetResult:
    """Both sides' answers to every request of ``policy_set``, compared; ``directory`` is scratch space."""
    manifests = directory / "manifests"
    objects, refused = loadable(policy_set.objects, manifests)
    write_manifests(manifests, objects)
    namespaces = directory / "namespaces.json"
    namespaces.write_text(namespace_list(NAMESPACES))
    theirs = oracle_answers(manifests, policy_set.reviews, namespaces)
    ours = staticadm_answers(manifests, policy_set.reviews, namespaces)
    result = SetResult(refused)
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
