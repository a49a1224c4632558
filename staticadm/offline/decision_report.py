"""The whole decision on one request as data: every policy's and binding's result, for machines.

An AdmissionReview answer carries the first denial only. The offline commands (``review -o json|yaml``,
``test -o json|yaml``, ``audit``) report everything kube-apiserver decided on the way to it: for each
policy and binding whether it matched (and why not), each validation's outcome with its message and the
validationActions it went through, errors (match conditions, configuration, cost budget) with what the
failurePolicy made of them, audit annotations, and each mutation's own patch. The shape is versioned by
``apiVersion``/``kind`` (docs/policy-tests.md, "Machine-readable output"); a change that removes or retypes a field is
a new version.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from staticadm.admission.mutating.dispatcher import MutationOutcome, MutationStep
from staticadm.admission.outcomes import DecisionRecord, NotMatched
from staticadm.admission.request import AdmissionRequest
from staticadm.admission.validating.dispatcher import ValidationOutcome, never_looked_at
from staticadm.admission.vocabulary import DecisionSite, ErrorType
from staticadm.compiled import CompiledMutatingPolicy, CompiledValidatingPolicy
from staticadm.snapshot import Snapshot

#: The version of every document the offline commands print.
API_VERSION = "staticadm.io/v1alpha1"

#: Results, from the least to the most telling: a policy's is its bindings' most telling one.
SKIP, PASS, FAIL, ERROR = "skip", "pass", "fail", "error"
_RANK = {SKIP: 0, PASS: 1, FAIL: 2, ERROR: 3}
#: Where a binding-level error leaves the validations or mutations unknown (none or not all of them ran).
_ENDS_EVALUATION = (DecisionSite.MATCH_CONDITIONS, DecisionSite.CONFIGURATION, DecisionSite.BUDGET)
_NOT_MATCHING_POLICY = "the policy does not match the request"


def request_summary(request: AdmissionRequest) -> dict[str, Any]:
    """What the request was, without its objects (they are the input)."""
    summary: dict[str, Any] = {
        "uid": request.uid, "operation": request.operation,
        "kind": request.original_kind.to_json(), "resource": request.original_resource.to_json(),
        "subResource": request.original_sub_resource, "namespace": request.namespace, "name": request.name,
        "userInfo": request.user_info.to_json(), "dryRun": bool(request.dry_run),
    }
    return summary


def _status(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return {"code": status.get("code"), "reason": status.get("reason", ""), "message": status.get("message", "")}


def _by_pair(records: Iterable[DecisionRecord]) -> dict[tuple[str, str | None], list[DecisionRecord]]:
    grouped: dict[tuple[str, str | None], list[DecisionRecord]] = defaultdict(list)
    for record in records:
        grouped[(record.policy, record.binding)].append(record)
    return grouped


def _error(record: DecisionRecord) -> dict[str, Any]:
    """A binding- or policy-level error and what became of it (``allow``: failurePolicy Ignore)."""
    return {"site": str(record.site), "message": record.message, "errorType": str(record.error_type),
            "enforcement": str(record.action)}


def _worst(results: Iterable[str]) -> str:
    return max(results, key=_RANK.__getitem__, default=SKIP)


def _skipped(name: str, reason: str) -> dict[str, Any]:
    return {"binding": name, "result": SKIP, "reason": reason}


# -- validating -------------------------------------------------------------------------------------


def _validations(compiled: CompiledValidatingPolicy, records: Sequence[DecisionRecord]) -> list[dict[str, Any]]:
    """Each validation's outcome: ``pass`` unless a decision names it (a validation that passed is no
    decision, in kube-apiserver as here)."""
    outcomes: list[dict[str, Any]] = [
        {"index": index, "expression": validation.validation.expression, "result": PASS}
        for index, validation in enumerate(compiled.validations)]
    for record in records:
        if record.site is not DecisionSite.VALIDATION or record.expression_index is None:
            continue
        outcome = outcomes[record.expression_index]
        if record.error_type is ErrorType.NO_ERROR:
            outcome.update(result=FAIL, message=record.message, reason=record.reason or "Invalid")
        else:
            outcome.update(result=ERROR, message=record.message, errorType=str(record.error_type))
        outcome.setdefault("enforcement", []).append(str(record.action))
    return outcomes


def _validating_binding(compiled: CompiledValidatingPolicy, binding_name: str, actions: Sequence[str],
                        matched: bool, not_matched: Mapping[tuple[str, str | None], str],
                        records: Sequence[DecisionRecord]) -> dict[str, Any]:
    key = (compiled.name, binding_name)
    if key in not_matched:
        return {**_skipped(binding_name, not_matched[key]), "validationActions": list(actions)}
    if not matched and not records:
        return {**_skipped(binding_name, _NOT_MATCHING_POLICY), "validationActions": list(actions)}
    errors = [_error(record) for record in records
              if record.site is not DecisionSite.VALIDATION or record.expression_index is None]
    entry: dict[str, Any] = {"binding": binding_name, "validationActions": list(actions)}
    if any(record.site in _ENDS_EVALUATION for record in records):
        validations: list[dict[str, Any]] = []
    else:
        validations = _validations(compiled, records)
    results = [outcome["result"] for outcome in validations]
    entry["result"] = ERROR if errors else _worst([PASS, *results])
    entry["validations"] = validations
    entry["errors"] = errors
    return entry


def validating_report(snapshot: Snapshot, request: AdmissionRequest, outcome: ValidationOutcome) -> dict[str, Any]:
    """The validating decision: the answer, then every ValidatingAdmissionPolicy in name order."""
    records = _by_pair(outcome.decisions)
    matched = set(outcome.matched)
    not_matched = {(entry.policy, entry.binding): entry.reason for entry in outcome.not_matched}
    seen = {policy for policy, _ in not_matched} | {policy for policy, _ in matched} | {r.policy for r in
                                                                                         outcome.decisions}
    for entry in never_looked_at(snapshot.validating, request, seen, outcome.excluded):
        not_matched[(entry.policy, None)] = entry.reason
    policies = []
    for compiled in snapshot.validating:
        name = compiled.name
        policy: dict[str, Any] = {"policy": name, "failurePolicy": compiled.failure_policy}
        policy_errors = [_error(record) for record in records.get((name, None), ())]
        if (name, None) in not_matched:
            policy.update(result=SKIP, reason=not_matched[(name, None)])
        bindings = [] if (name, None) in not_matched else [
            _validating_binding(compiled, binding.metadata.name, binding.spec.validation_actions,
                                (name, binding.metadata.name) in matched, not_matched,
                                records.get((name, binding.metadata.name), ()))
            for binding in compiled.bindings]
        if "result" not in policy:
            policy["result"] = ERROR if policy_errors else _worst(binding["result"] for binding in bindings)
        prefix = f"{name}/"
        policy.update(errors=policy_errors, bindings=bindings,
                      auditAnnotations={key: value for key, value in outcome.annotations.items()
                                        if key.startswith(prefix)})
        policies.append(policy)
    return {"allowed": outcome.allowed, "status": _status(outcome.status), "warnings": list(outcome.warnings),
            "auditAnnotations": dict(outcome.annotations), "excluded": outcome.excluded, "policies": policies}


# -- mutating ---------------------------------------------------------------------------------------


def _mutations(compiled: CompiledMutatingPolicy, steps: Sequence[MutationStep]) -> list[dict[str, Any]]:
    """Each mutation that ran, in order (a reinvocation runs them again): its patch, or its error."""
    ran = []
    for step in steps:
        mutation = compiled.mutations[step.index].mutation
        entry: dict[str, Any] = {"index": step.index, "patchType": mutation.patch_type,
                                 "reinvocation": step.reinvocation}
        if step.error:
            entry.update(result=ERROR, message=step.error)
        else:
            entry.update(result="applied" if step.patch else "unchanged", patch=[dict(op) for op in step.patch])
        ran.append(entry)
    return ran


def mutating_report(snapshot: Snapshot, request: AdmissionRequest, outcome: MutationOutcome) -> dict[str, Any]:
    """The mutating decision: the answer and its patch, then every MutatingAdmissionPolicy in name order.
    ``outcome`` must come from ``evaluate_mutating(..., explain=True)`` for the mutations' own patches."""
    records = _by_pair(outcome.decisions)
    invoked = set(outcome.invoked)
    reinvoked = set(outcome.reinvoked)
    not_matched: dict[tuple[str, str | None], str] = {
        (entry.policy, entry.binding): entry.reason for entry in outcome.not_matched}
    seen = {policy for policy, _ in not_matched} | {policy for policy, _ in invoked} | {
        record.policy for record in outcome.decisions}
    unseen: Sequence[NotMatched] = never_looked_at(snapshot.mutating, request, seen, outcome.excluded)
    for entry in unseen:
        not_matched[(entry.policy, None)] = entry.reason
    steps: dict[tuple[str, str], list[MutationStep]] = defaultdict(list)
    for step in outcome.steps:
        steps[(step.policy, step.binding)].append(step)
    policies = []
    for compiled in snapshot.mutating:
        name = compiled.name
        policy: dict[str, Any] = {"policy": name, "failurePolicy": compiled.failure_policy,
                                  "reinvocationPolicy": compiled.reinvocation_policy}
        policy_errors = [_error(record) for record in records.get((name, None), ())]
        bindings = []
        if (name, None) in not_matched:
            policy.update(result=SKIP, reason=not_matched[(name, None)])
        else:
            for binding in compiled.bindings:
                key = (name, binding.metadata.name)
                if key in not_matched:
                    bindings.append(_skipped(binding.metadata.name, not_matched[key]))
                    continue
                binding_records = records.get(key, ())
                if key not in invoked and not binding_records:
                    bindings.append(_skipped(binding.metadata.name, _NOT_MATCHING_POLICY))
                    continue
                mutations = _mutations(compiled, steps.get(key, ()))
                errors = [_error(record) for record in binding_records if record.site is not DecisionSite.MUTATION]
                failed = errors or any(mutation["result"] == ERROR for mutation in mutations)
                bindings.append({"binding": binding.metadata.name,
                                 "result": ERROR if failed else PASS,
                                 "mutated": any(mutation["result"] == "applied" for mutation in mutations),
                                 "reinvoked": key in reinvoked, "mutations": mutations, "errors": errors})
            policy["result"] = ERROR if policy_errors else _worst(binding["result"] for binding in bindings)
        policy.update(errors=policy_errors, bindings=bindings)
        policies.append(policy)
    return {"allowed": outcome.allowed, "status": _status(outcome.status), "patch": [dict(op) for op in outcome.patch],
            "excluded": outcome.excluded, "policies": policies}


def decision(snapshot: Snapshot, request: AdmissionRequest, mutation: MutationOutcome | None,
             validation: ValidationOutcome | None) -> dict[str, Any]:
    """Both phases; a phase that did not run (not asked for, or the mutations denied) is null."""
    return {"mutating": mutating_report(snapshot, request, mutation) if mutation is not None else None,
            "validating": validating_report(snapshot, request, validation) if validation is not None else None}

