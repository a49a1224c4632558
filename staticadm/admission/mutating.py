"""MutatingAdmissionPolicy evaluation: kube-apiserver's mutating policy dispatcher, answered as a webhook.

``evaluate_mutating`` collects the (policy, binding) invocations in Kubernetes' order, runs each
policy's mutations in order on the object as the previous ones left it, re-runs ``IfNeeded`` policies
once when Kubernetes' reinvocation rules ask for it (``mutating/dispatcher.go`` and
``reinvocationcontext.go``), filters errors through each policy's failurePolicy, and answers with an
RFC 6902 patch from the request's object to the mutated one.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from staticadm.admission.activation import (
    INVALID_ERROR,
    NO_ERROR,
    OUT_OF_BUDGET,
    DecisionRecord,
    NotMatched,
    aggregate_errors,
    authorizer_data,
    evaluate_match_conditions,
    gvk_text,
    namespace_object_for,
    policy_candidates,
    request_data,
    run_program,
)
from staticadm.admission.matching import is_excluded, matches
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
from staticadm.admission.response import review_response
from staticadm.cel import admission_environment
from staticadm.cel.libraries.objects import ConversionError, is_jsonpatch, is_object, to_plain
from staticadm.model import MutatingAdmissionPolicyBinding
from staticadm.patch.apply import ApplyConfigurationError, apply_configuration
from staticadm.patch.diff import create_patch
from staticadm.patch.jsonpatch import JSONPatchError, JSONPatchTestFailed, apply_patch
from staticadm.snapshot import CompiledMutatingPolicy, CompiledMutation, Snapshot

#: The action recorded for a (policy, binding) whose mutations changed the object.
MUTATE, UNCHANGED = "mutate", "allow"


@dataclass(frozen=True, slots=True)
class _Invocation:
    compiled: CompiledMutatingPolicy
    binding: MutatingAdmissionPolicyBinding
    resource: GroupVersionResource
    kind: GroupVersionKind

    @property
    def key(self) -> tuple[str, str]:
        return self.compiled.name, self.binding.metadata.name


@dataclass(frozen=True, slots=True)
class _PolicyError:
    """``generic.PolicyError``: reason Invalid for evaluation errors, none for configuration errors."""

    policy: str
    binding: str | None
    message: str
    reason: str
    failure_policy: str

    def text(self) -> str:
        if self.binding is not None:
            return f"policy '{self.policy}' with binding '{self.binding}' denied request: {self.message}"
        return f'policy "{self.policy}" denied request: {self.message}'


@dataclass(frozen=True, slots=True)
class MutationOutcome:
    response: Mapping[str, Any]
    allowed: bool
    status: Mapping[str, Any] | None
    #: RFC 6902 operations turning the request's object into ``mutated_object`` (empty: unchanged).
    patch: tuple[Mapping[str, Any], ...]
    mutated_object: Any
    decisions: tuple[DecisionRecord, ...]
    #: (policy, binding) pairs whose mutations ran, in order; a reinvocation appears twice.
    invoked: tuple[tuple[str, str], ...]
    reinvoked: tuple[tuple[str, str], ...]
    not_matched: tuple[NotMatched, ...]
    excluded: bool = False


@dataclass(slots=True)
class _Dispatch:
    errors: list[_PolicyError] = field(default_factory=list)
    records: list[DecisionRecord] = field(default_factory=list)
    invoked: list[tuple[str, str]] = field(default_factory=list)
    reinvoked: list[tuple[str, str]] = field(default_factory=list)
    not_matched: list[NotMatched] = field(default_factory=list)

    def config_error(self, compiled: CompiledMutatingPolicy, binding: str | None, message: str,
                     reason: str = "") -> None:
        prefix = "failed to configure policy" if binding is None else "failed to configure binding"
        self.error(compiled, binding, f"{prefix}: {message}", reason, INVALID_ERROR, 0.0)

    def error(self, compiled: CompiledMutatingPolicy, binding: str | None, message: str, reason: str,
              error_type: str, seconds: float) -> None:
        self.errors.append(_PolicyError(compiled.name, binding, message, reason, compiled.failure_policy))
        action = "allow" if compiled.failure_policy == "Ignore" else "deny"
        self.records.append(DecisionRecord(compiled.name, binding, action, error_type, message, reason,
                                           seconds=seconds))


def _collect_invocations(state: _Dispatch, snapshot: Snapshot, request: AdmissionRequest,
                         namespaces: NamespaceSource) -> list[_Invocation]:
    """The generic policy dispatcher's matching phase: policies by name, then their bindings by name."""
    invocations: list[_Invocation] = []
    for position in policy_candidates(snapshot, request, mutating=True):
        compiled = snapshot.mutating[position]
        outcome = matches(compiled.policy.spec.match_constraints, request, namespaces, is_policy=True)
        if outcome.error is not None:
            state.config_error(compiled, None, outcome.error)
            continue
        if not outcome.matched:
            state.not_matched.append(NotMatched(compiled.name, None, outcome.reason))
            continue
        assert outcome.resource is not None and outcome.kind is not None
        for binding in compiled.bindings:
            bound = matches(binding.spec.match_resources, request, namespaces, is_policy=False)
            if bound.error is not None:
                state.config_error(compiled, binding.metadata.name, bound.error)
            elif not bound.matched:
                state.not_matched.append(NotMatched(compiled.name, binding.metadata.name, bound.reason))
            elif outcome.kind != request.kind and request.object is not None:
                # The webhook only has the object in the version kube-apiserver sent.
                state.config_error(compiled, None, (
                    f"failed to convert object version: staticadm received {gvk_text(request.kind)} and cannot "
                    f"convert it to {gvk_text(outcome.kind)}"))
            else:
                invocations.append(_Invocation(compiled, binding, outcome.resource, outcome.kind))
    return invocations


def _patch_operations(value: Any) -> tuple[list[dict[str, Any]] | None, str]:
    """``jsonPatcher.evaluatePatchExpression``: the JSON Patch the expression's value stands for."""
    if not isinstance(value, list):
        return None, "type mismatch: JSONPatchType.expression should evaluate to array"
    operations = []
    for item in value:
        if not is_jsonpatch(item):
            return None, "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch"
        fields = item["fields"]
        operation: dict[str, Any] = {"op": fields.get("op", ""), "path": fields.get("path", "")}
        if fields.get("from"):
            operation["from"] = fields["from"]
        if "value" in fields:
            type_errors: list[str] = []
            try:
                operation["value"] = to_plain(fields["value"], None, type_errors)
            except ConversionError as error:
                return None, f"JSONPath valueExpression evaluated to a type that could not marshal to JSON: {error}"
            if type_errors:
                return None, "type mismatch: " + "\n".join(type_errors)
        operations.append(operation)
    return operations, ""


def _apply_mutation(mutation: CompiledMutation, value: Any, current: Any) -> tuple[Any, str]:
    """(the mutated object, "") or (None, Kubernetes' error text)."""
    if mutation.mutation.patch_type == "JSONPatch":
        operations, problem = _patch_operations(value)
        if operations is None:
            return None, problem
        try:
            return apply_patch(current, operations), ""
        except JSONPatchTestFailed:
            # A failed test operation means the patch must not be applied: a silent no-op.
            return current, ""
        except JSONPatchError as error:
            return None, f"JSONPath: {error}"
    if not is_object(value) or value["name"] != "Object":
        return None, "unsupported return type from ApplyConfiguration expression"
    type_errors: list[str] = []
    try:
        patch = to_plain(value, None, type_errors)
    except ConversionError as error:
        return None, f"error applying patch: {error}"
    if type_errors:
        return None, "type mismatch: " + "\n".join(type_errors)
    try:
        return apply_configuration(current, patch), ""
    except ApplyConfigurationError as error:
        return None, f"error applying patch: {error}"


def _run_invocation(state: _Dispatch, invocation: _Invocation, request: AdmissionRequest, current: Any,
                    namespace_object: Mapping[str, Any] | None, authorizer: Mapping[str, Any],
                    deadline: float | None) -> tuple[Any, bool]:
    """Runs one invocation's mutations in order; (object afterwards, whether any mutation succeeded)."""
    compiled = invocation.compiled
    binding = invocation.binding.metadata.name
    environment = admission_environment(True)
    variables = compiled.compiled_variables
    request_fields = request_data(request, invocation.resource, invocation.kind)
    succeeded = False
    for mutation in compiled.mutations:
        if current is None:
            # Do not call patchers if there is no object to patch (a CONNECT without a body).
            continue
        started = time.perf_counter()
        # Each mutation sees the object as the previous one left it, with its own budget.
        context = environment.new_context({"object": current, "oldObject": request.old_object,
                                           "request": request_fields, "namespaceObject": namespace_object,
                                           **authorizer}, variables=variables, request_deadline=deadline)
        value, error = run_program(mutation.expression, mutation.source, context)
        if error is None:
            mutated, error = _apply_mutation(mutation, value, current)
        seconds = time.perf_counter() - started
        if error:
            kind_of_error = OUT_OF_BUDGET if "cost limit exceeded" in error else INVALID_ERROR
            state.error(compiled, binding, error, "Invalid", kind_of_error, seconds)
            continue
        succeeded = True
        action = UNCHANGED if mutated == current else MUTATE
        state.records.append(DecisionRecord(compiled.name, binding, action, NO_ERROR, seconds=seconds))
        current = mutated
    return current, succeeded


def _dispatch(state: _Dispatch, invocations: list[_Invocation], request: AdmissionRequest,
              namespaces: NamespaceSource, deadline: float | None) -> Any:
    """Both passes of the reinvocation chain over the invocations; returns the final object."""
    current = request.object
    previously_invoked: set[tuple[str, str]] = set()
    reinvoke: set[tuple[str, str]] = set()
    should_reinvoke = False
    base_environment = admission_environment(False)
    # The same for every invocation and pass; only the object changes between mutations.
    authorizer = authorizer_data(request)
    original_request = request_data(request, request.original_resource, request.original_kind)
    for reinvocation in (False, True):
        if reinvocation and (not should_reinvoke or any(e.failure_policy != "Ignore" for e in state.errors)):
            # A failing first pass denies the request before any reinvocation.
            break
        dirty = False
        for invocation in invocations:
            compiled = invocation.compiled
            if compiled.match_conditions:
                data = {"object": current, "oldObject": request.old_object, "namespaceObject": None,
                        "request": original_request, **authorizer}
                false_condition, errors = evaluate_match_conditions(compiled.match_conditions,
                                                                    base_environment.new_context(
                                                                        data, request_deadline=deadline))
                if false_condition is not None:
                    if not reinvocation:
                        state.not_matched.append(NotMatched(
                            compiled.name, invocation.binding.metadata.name,
                            f'matchCondition "{false_condition}" evaluated to false'))
                    continue
                if errors:
                    state.error(compiled, invocation.binding.metadata.name, aggregate_errors(errors), "Invalid",
                                INVALID_ERROR, 0.0)
                    continue
            if reinvocation and invocation.key not in reinvoke:
                continue
            namespace_object, namespace_error = namespace_object_for(request, namespaces,
                                                                     compiled.uses_namespace_object)
            if namespace_error is not None:
                state.config_error(compiled, invocation.binding.metadata.name, namespace_error)
                continue
            (state.reinvoked if reinvocation else state.invoked).append(invocation.key)
            before = current
            current, succeeded = _run_invocation(state, invocation, request, current, namespace_object, authorizer,
                                                 deadline)
            dirty = dirty or succeeded
            if current != before:
                reinvoke |= previously_invoked
                previously_invoked = set()
                should_reinvoke = True
            if compiled.reinvocation_policy == "IfNeeded":
                previously_invoked.add(invocation.key)
        if dirty:
            # ``lastVersionedAttr.Dirty``: any patch applied in this pass, changed or not, asks for the
            # reinvocation of every IfNeeded policy that ran.
            reinvoke |= previously_invoked
            previously_invoked = set()
            should_reinvoke = True
    return current


def _denial_status(request: AdmissionRequest, errors: list[_PolicyError]) -> dict[str, Any]:
    """``admission.NewForbidden`` with the first error's message, and every error as a cause."""
    first = errors[0]
    resource = request.resource
    details: dict[str, Any] = {"kind": resource.resource}
    if request.name:
        details["name"] = request.name
    if resource.group:
        details["group"] = resource.group
    details["causes"] = [{"message": error.text()} for error in errors]
    return {"status": "Failure", "message": first.text(), "reason": first.reason or "Forbidden",
            "details": details, "code": 403}


def evaluate_mutating(snapshot: Snapshot, namespaces: NamespaceSource, request: AdmissionRequest, *,
                      deadline: float | None = None) -> MutationOutcome:
    """The mutation kube-apiserver's MutatingAdmissionPolicy plugin would make to ``request``; all CEL work
    stops at ``deadline`` (``time.perf_counter``)."""
    state = _Dispatch()
    excluded = is_excluded(request)
    final = request.object
    if not excluded and snapshot.mutating:
        invocations = _collect_invocations(state, snapshot, request, namespaces)
        if invocations:
            final = _dispatch(state, invocations, request, namespaces, deadline)
    failing = [error for error in state.errors if error.failure_policy != "Ignore"]
    status = _denial_status(request, failing) if failing else None
    patch: list[dict[str, Any]] = [] if status is not None or final == request.object else create_patch(
        request.object, final)
    response = review_response(request.review_api_version, request.uid, allowed=status is None, status=status)
    if patch:
        response["response"]["patchType"] = "JSONPatch"
        response["response"]["patch"] = base64.b64encode(orjson.dumps(patch)).decode("ascii")
    return MutationOutcome(
        response=response,
        allowed=status is None,
        status=status,
        patch=tuple(patch),
        mutated_object=final if status is None else request.object,
        decisions=tuple(state.records),
        invoked=tuple(state.invoked),
        reinvoked=tuple(state.reinvoked),
        not_matched=tuple(state.not_matched),
        excluded=excluded,
    )
