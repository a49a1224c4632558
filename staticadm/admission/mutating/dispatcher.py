"""MutatingAdmissionPolicy evaluation: kube-apiserver's mutating policy dispatcher, answered as a webhook.

``evaluate_mutating`` collects the (policy, binding) invocations in Kubernetes' order (for CREATE, UPDATE and
CONNECT requests: the plugin handles no other), runs each policy's mutations in order on the object as the
previous ones left it (typed again and defaulted, for a built-in kind), re-runs ``IfNeeded`` policies
once when Kubernetes' reinvocation rules ask for it (``mutating/dispatcher.go`` and
``reinvocationcontext.go``), filters errors through each policy's failurePolicy, and answers with an
RFC 6902 patch from the request's object to the mutated one.

Some answers are kept across requests, each a function of what keys it and nothing else: the values of constant
mutations (no identifier read, ``admission.cel.filter.is_constant``) and their plain JSON forms, whether a constant
ApplyConfiguration's patch passed a kind's schema, the strings a constant mutation that only writes labels or
annotations writes (``string_writes.py``), and what match conditions that read only fields of ``request`` decided
for those fields' values. Each is held with the compiled programs it came from (so that their ids name
them) by the snapshot they belong to (``KeptForSnapshot``), only outcomes without an error are kept, and a bounded
number of each.

Stage: evaluate and decide (``mutating/dispatcher.go``). Receives the snapshot, the namespace source and the parsed
request; builds the request's match view once (for the match stage) and from it the request's activations (one
for match conditions, one for mutations: two CEL environments), each the one value (:class:`RequestActivations`:
request, match view, CEL inputs) the evaluation receives; hands on a :class:`MutationOutcome`.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from staticadm.admission.cel.activation import REQUEST_OBJECT, RequestActivations
from staticadm.admission.cel.filter import (
    UNKNOWN,
    ConstantValues,
    IdentityFacts,
    evaluate_match_conditions,
    reads_object,
    request_paths,
    run_program,
)
from staticadm.admission.generic.dispatcher import (
    CONFIG_ERROR,
    INVOKED,
    SKIPPED,
    Invocation,
    Matched,
    match_mutating,
    not_matched_why,
    policy_candidate_set,
)
from staticadm.admission.matching.matcher import is_excluded
from staticadm.admission.matching.plan import RequestMatch, matched_as
from staticadm.admission.mutating.string_writes import (
    StringWrites,
    apply_configuration_string_writes,
    json_patch_string_writes,
)
from staticadm.admission.namespaces import NamespaceSource
from staticadm.admission.outcomes import DecisionRecord, ExpressionFailure, NotMatched, aggregate_failures
from staticadm.admission.request import AdmissionRequest, GroupVersionKind
from staticadm.admission.response import review_response
from staticadm.admission.vocabulary import DecisionSite, EnforcementAction, ErrorType
from staticadm.bounded import keep_bounded
from staticadm.cel import admission_environment
from staticadm.cel.cost import RUNTIME_CEL_COST_BUDGET, RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS
from staticadm.cel.libraries.objects import ConversionError, is_jsonpatch, is_object, to_plain
from staticadm.cel.reads import Reads
from staticadm.compiled import CompiledMutatingPolicy, CompiledMutation, Program
from staticadm.kinds.mutated import TypedDecodingError, inert_apply_configuration, inert_json_patch, retyped
from staticadm.model import MatchCondition
from staticadm.patch.apply import ApplyConfigurationError, apply_configuration
from staticadm.patch.decode import decoding_error, strings_decode
from staticadm.patch.diff import create_patch
from staticadm.patch.jsonpatch import JSONPatchError, JSONPatchTestFailed, apply_patch
from staticadm.snapshot import Snapshot
from staticadm.yamljson import copy_json

_Invocation = Invocation[CompiledMutatingPolicy]

#: The operations kube-apiserver's MutatingAdmissionPolicy plugin handles (``mutating/plugin.go``:
#: ``admission.NewHandler(admission.Create, admission.Update, admission.Connect)``): the admission chain never
#: calls it for a DELETE, so no policy is looked at then, whatever its rules say (``operations: ["*"]``). The
#: ValidatingAdmissionPolicy plugin handles all four.
HANDLED_OPERATIONS = frozenset({"CREATE", "UPDATE", "CONNECT"})


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


class _InternalError(Exception):
    """``apierrors.NewInternalError`` from a patcher: the dispatcher returns it as the request's answer at once,
    whatever the failurePolicy (mutating/dispatcher.go: ``errors.As(err, &statusError)``)."""

    def status(self) -> dict[str, Any]:
        cause = str(self)
        return {"status": "Failure", "message": f"Internal error occurred: {cause}", "reason": "InternalError",
                "details": {"causes": [{"message": cause}]}, "code": 500}


@dataclass(frozen=True, slots=True)
class MutationStep:
    """What one mutation of one invocation did, for the whole-decision reports (``explain``)."""

    policy: str
    binding: str
    #: The mutation's index in the policy's ``spec.mutations``.
    index: int
    reinvocation: bool
    #: RFC 6902 operations from the object the mutation saw to the one it left (empty: unchanged).
    patch: tuple[Mapping[str, Any], ...] = ()
    #: Why it failed ("" when it applied).
    error: str = ""


@dataclass(slots=True)  # not frozen: one per request (a frozen dataclass builds through object.__setattr__)
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
    #: Every mutation that ran, in order, with its own patch; only with ``explain``.
    steps: tuple[MutationStep, ...] = ()


@dataclass(slots=True)
class _Dispatch:
    #: What this snapshot's requests keep across them.
    kept: KeptForSnapshot
    #: Each mutation's step, or None when nobody asked (the daemon: computing patches costs).
    steps: list[MutationStep] | None = None
    reinvocation: bool = False
    errors: list[_PolicyError] = field(default_factory=list)
    records: list[DecisionRecord] = field(default_factory=list)
    invoked: list[tuple[str, str]] = field(default_factory=list)
    reinvoked: list[tuple[str, str]] = field(default_factory=list)
    not_matched: list[NotMatched] = field(default_factory=list)

    def skipped(self, policy: str, binding: str | None, why: str | Callable[[], str]) -> None:
        self.not_matched.append(NotMatched(policy, binding, why))

    def config_error(self, compiled: CompiledMutatingPolicy, binding: str | None, message: str) -> None:
        prefix = "failed to configure policy" if binding is None else "failed to configure binding"
        self.error(compiled, binding, ExpressionFailure(f"{prefix}: {message}", ErrorType.INVALID_ERROR), "", 0.0,
                   DecisionSite.CONFIGURATION)

    def error(self, compiled: CompiledMutatingPolicy, binding: str | None, failure: ExpressionFailure, reason: str,
              seconds: float, site: DecisionSite, index: int | None = None) -> None:
        self.errors.append(_PolicyError(compiled.name, binding, failure.message, reason, compiled.failure_policy))
        action = EnforcementAction.ALLOW if compiled.failure_policy == "Ignore" else EnforcementAction.DENY
        self.records.append(DecisionRecord(compiled.name, binding, action, failure.error_type, failure.message, reason,
                                           index, seconds, site))


class PolicyReinvokeContext:
    """``policyReinvokeContext`` (``mutating/reinvocationcontext.go``): which ``IfNeeded`` policies ran since
    the object last changed, and which must run again in the reinvocation pass."""

    def __init__(self) -> None:
        self._previously_invoked: set[tuple[str, str]] = set()
        self._reinvoke: set[tuple[str, str]] = set()
        #: ``SetShouldReinvoke``: the request asks for a second pass.
        self.reinvocation_requested = False

    def should_reinvoke(self, key: tuple[str, str]) -> bool:
        return key in self._reinvoke

    def add_reinvocable_policy_to_previously_invoked(self, key: tuple[str, str]) -> None:
        self._previously_invoked.add(key)

    def require_reinvoking_previously_invoked(self) -> None:
        """An object changed after those policies saw it: they run again, and the request is reinvoked."""
        self._reinvoke |= self._previously_invoked
        self._previously_invoked = set()
        self.reinvocation_requested = True


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


def _apply_configuration_patch(value: Any) -> tuple[Any, str]:
    """``applyConfigPatcher``: the plain patch an ApplyConfiguration expression's ``Object{...}`` value stands for,
    or (None, Kubernetes' error text)."""
    type_errors: list[str] = []
    try:
        patch = to_plain(value, None, type_errors)
    except ConversionError as error:
        return None, f"error applying patch: {error}"
    if type_errors:
        return None, "type mismatch: " + "\n".join(type_errors)
    return patch, ""


class _AcceptedPatches:
    """Constant ApplyConfigurations (by their value, which ``ConstantValues`` keeps) whose patch the schema of an
    apiVersion and kind accepted: the same patch, stamped with the same apiVersion and kind, is valid there and holds
    no atomic container whatever object it is applied to, so it is not checked again."""

    __slots__ = ("_entries",)

    LIMIT = 4096

    def __init__(self) -> None:
        #: (id of the value, apiVersion, kind) -> the value (held so that its id stays its own).
        self._entries: dict[tuple[int, str, str], Any] = {}

    def key(self, value: Any, current: Any) -> tuple[int, str, str] | None:
        stamped = _stamped_type(current)
        return None if stamped is None else (id(value), *stamped)

    def accepted(self, key: tuple[int, str, str], value: Any) -> bool:
        return self._entries.get(key) is value

    def accept(self, key: tuple[int, str, str], value: Any) -> None:
        keep_bounded(self._entries, key, value, self.LIMIT)


def _stamped_type(current: Any) -> tuple[str, str] | None:
    """The apiVersion and kind an ApplyConfiguration's patch is stamped with for ``current`` (its own), when both are
    strings: what the merge schema, and so a constant patch's checks, depend on besides the patch."""
    if current.__class__ is not dict:
        return None
    api_version, kind = current.get("apiVersion"), current.get("kind")
    if api_version.__class__ is not str or kind.__class__ is not str:
        return None
    return api_version, kind


class _PlainForms:
    """The plain JSON form of constant mutations' values (a JSON Patch's operations, an ApplyConfiguration's patch),
    made once per value (which ``ConstantValues`` keeps). The mutated object shares what a patch adds, so each use
    gets a copy of its own, unless nothing of the form can be shared: JSON Patch operations whose values are all
    scalars (the operations themselves are only read)."""

    __slots__ = ("_entries",)

    LIMIT = 4096

    def __init__(self) -> None:
        #: (id of the value, patch type) -> (the value, held so that its id stays its own; its plain form; whether
        #: the form itself may be handed out).
        self._entries: dict[tuple[int, str], tuple[Any, Any, bool]] = {}

    def copy(self, value: Any, patch_type: str) -> Any:
        """A copy of ``value``'s plain form as a ``patch_type`` mutation's, or None when it has none kept."""
        entry = self._entries.get((id(value), patch_type))
        if entry is None or entry[0] is not value:
            return None
        return entry[1] if entry[2] else copy_json(entry[1])

    def keep(self, value: Any, patch_type: str, form: Any) -> None:
        shareable = patch_type == "JSONPatch" and all(
            operation.get("value").__class__ not in _CONTAINERS for operation in form)
        keep_bounded(self._entries, (id(value), patch_type), (value, copy_json(form), shareable), self.LIMIT)


_CONTAINERS = (dict, list)


class _KeptStringWrites:
    """Constant mutations' string writes (``string_writes.py``) by value and by what they depend on besides it: the
    kind the policy matched as, and for an ApplyConfiguration the apiVersion and kind the object says it is (the
    merge schema's). None: the general patcher applies that value there."""

    __slots__ = ("_entries",)

    LIMIT = 4096

    def __init__(self) -> None:
        #: key -> (the value, held so that its id stays its own; its writes there, or None).
        self._entries: dict[tuple[Any, ...], tuple[Any, StringWrites | None]] = {}

    def get(self, value: Any, patch_type: str, kind: GroupVersionKind, current: Any) -> StringWrites | None:
        if patch_type == "JSONPatch":
            key: tuple[Any, ...] = (id(value), patch_type, kind)
        else:
            stamped = _stamped_type(current)
            if stamped is None:
                return None
            key = (id(value), patch_type, kind, *stamped)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is value:
            return entry[1]
        writes = _string_writes(value, patch_type, kind, key[3:])
        keep_bounded(self._entries, key, (value, writes), self.LIMIT)
        return writes


def _string_writes(value: Any, patch_type: str, kind: GroupVersionKind, object_type: tuple[Any, ...]
                   ) -> StringWrites | None:
    """The writes of a constant mutation's ``value`` for a policy matched as ``kind``; ``object_type``: the object's
    (apiVersion, kind) for an ApplyConfiguration, nothing for a JSON Patch."""
    if patch_type == "JSONPatch":
        operations, _ = _patch_operations(value)
        return None if operations is None else json_patch_string_writes(operations, kind.group, kind.version,
                                                                        kind.kind)
    if not is_object(value) or value["name"] != "Object":
        return None
    patch, _ = _apply_configuration_patch(value)
    if patch.__class__ is not dict:
        return None
    return apply_configuration_string_writes(patch, kind.group, kind.kind, *object_type)


def _apply_mutation(mutation: CompiledMutation, value: Any, current: Any, kind: GroupVersionKind,
                    constant: bool, kept: KeptForSnapshot) -> tuple[Any, str]:
    """(the mutated object, "") or (None, Kubernetes' error text); raises ``_InternalError`` for a JSON Patch result
    that does not decode into the typed object of a built-in ``kind`` (``patch/decode.py``, ``kinds/mutated.py``).
    The mutated object of a built-in kind is the one kube-apiserver holds next: typed again and defaulted
    (``retyped``; a mutation that only writes strings to the object's own labels or annotations leaves it so
    already). ``constant``: ``value`` is a constant mutation's, kept across requests."""
    patch_type = mutation.mutation.patch_type
    if constant:
        writes = kept.string_writes.get(value, patch_type, kind, current)
        if writes is not None:
            written = writes.apply(current)
            if written is not None:
                return written, ""
    if patch_type == "JSONPatch":
        operations = kept.plain_forms.copy(value, patch_type) if constant else None
        if operations is None:
            operations, problem = _patch_operations(value)
            if operations is None:
                return None, problem
            if constant:
                kept.plain_forms.keep(value, patch_type, operations)
        try:
            patched = apply_patch(current, operations)
        except JSONPatchTestFailed:
            # A failed test operation means the patch must not be applied: a silent no-op.
            return current, ""
        except JSONPatchError as error:
            return None, f"JSON Patch: {error}"
        if not strings_decode(patched, operations, kind.group, kind.version, kind.kind):
            refused = decoding_error(patched, current, kind.group, kind.version, kind.kind)
            if refused is not None:
                raise _InternalError(refused)
        if inert_json_patch(operations, kind.group, kind.kind):
            return patched, ""
        try:
            return retyped(patched, current, kind.group, kind.version, kind.kind, "json"), ""
        except TypedDecodingError as error:
            raise _InternalError(str(error)) from None
    if not is_object(value) or value["name"] != "Object":
        return None, "unsupported return type from ApplyConfiguration expression"
    patch = kept.plain_forms.copy(value, patch_type) if constant else None
    if patch is None:
        patch, problem = _apply_configuration_patch(value)
        if patch is None:
            return None, problem
        if constant:
            kept.plain_forms.keep(value, patch_type, patch)
    key = kept.accepted_patches.key(value, current) if constant else None
    validated = key is not None and kept.accepted_patches.accepted(key, value)
    try:
        merged = apply_configuration(current, patch, validated=validated)
    except ApplyConfigurationError as error:
        return None, f"error applying patch: {error}"
    if key is not None and not validated:
        kept.accepted_patches.accept(key, value)
    if inert_apply_configuration(patch, kind.group, kind.kind):
        return merged, ""
    try:
        return retyped(merged, current, kind.group, kind.version, kind.kind, "unstructured"), ""
    except TypedDecodingError as error:
        return None, str(error)


def _run_invocation(state: _Dispatch, invocation: _Invocation, current: Any,
                    namespace_object: Mapping[str, Any] | None,
                    activations: RequestActivations) -> tuple[Any, bool]:
    """Runs one invocation's mutations in order; (object afterwards, whether any mutation succeeded)."""
    compiled = invocation.compiled
    binding = invocation.binding.metadata.name
    succeeded = False
    for index, mutation in enumerate(compiled.mutations):
        if current is None:
            # Do not call patchers if there is no object to patch (a CONNECT without a body).
            continue
        started = time.perf_counter()
        program = mutation.expression
        kept = state.kept
        value = kept.constants.get(program) if activations.share else UNKNOWN
        failure = None
        constant = value is not UNKNOWN
        if not constant:
            # Each mutation sees the object as the previous one left it, with its own budget; one that cannot read
            # the object sees the same through the request's own, whose activation is at hand.
            seen = current if not activations.share or kept.reads_object(program) else REQUEST_OBJECT
            context = activations.scope(activations.for_evaluation(invocation.resource, invocation.kind,
                                                                   namespace_object, seen), RUNTIME_CEL_COST_BUDGET)
            value, failure = run_program(program, mutation.source, context)
            if failure is None and activations.share:
                constant = kept.constants.remember(program, value)
        problem = ""
        if failure is None:
            try:
                mutated, problem = _apply_mutation(mutation, value, current, invocation.kind, constant, kept)
            except _InternalError as error:
                state.records.append(DecisionRecord(compiled.name, binding, EnforcementAction.DENY,
                                                    ErrorType.INVALID_ERROR, str(error),
                                                    seconds=time.perf_counter() - started))
                raise
        seconds = time.perf_counter() - started
        if failure is None and problem:
            failure = ExpressionFailure(problem, ErrorType.INVALID_ERROR)
        if failure is not None:
            state.error(compiled, binding, failure, "Invalid", seconds, DecisionSite.MUTATION, index)
            if state.steps is not None:
                state.steps.append(MutationStep(compiled.name, binding, index, state.reinvocation,
                                                error=failure.message))
            continue
        succeeded = True
        action = EnforcementAction.ALLOW if mutated == current else EnforcementAction.MUTATE
        state.records.append(DecisionRecord(compiled.name, binding, action, ErrorType.NO_ERROR, expression_index=index,
                                            seconds=seconds, site=DecisionSite.MUTATION))
        if state.steps is not None:
            patch = () if mutated == current else tuple(create_patch(current, mutated))
            state.steps.append(MutationStep(compiled.name, binding, index, state.reinvocation, patch))
        current = mutated
    return current, succeeded


#: A policy's match conditions as what they decide depends on: their names and programs.
_ConditionsKey = tuple[tuple[str, int], ...]
_UNDECIDED: Any = object()
#: A field of ``request`` that a path reads is not there.
_ABSENT: Any = object()


@dataclass(frozen=True, slots=True)
class _ConditionsPlan:
    """How a policy's match conditions that cannot read the object are decided once: what they decide is the same
    for every version of the object, in both passes and for every policy with the same ones, each in a fresh budget
    of its own."""

    key: _ConditionsKey
    #: The conditions' programs, which ``key`` names by id.
    programs: tuple[Program, ...]
    #: The paths of ``request`` the conditions read, when that is all they read (``request_paths``), else None.
    request_paths: tuple[tuple[str, ...], ...] | None


def _plan(conditions: tuple[tuple[MatchCondition, Program], ...],
          reads_object: Callable[[Program], bool],
          request_paths: Callable[[Program], tuple[tuple[str, ...], ...] | None]) -> _ConditionsPlan | None:
    if any(reads_object(program) for _, program in conditions):
        return None
    paths: set[tuple[str, ...]] | None = set()
    for _, program in conditions:
        read = request_paths(program)
        if read is None or paths is None:
            paths = None
        else:
            paths.update(read)
    return _ConditionsPlan(tuple((condition.name, id(program)) for condition, program in conditions),
                           tuple(program for _, program in conditions),
                           tuple(sorted(paths)) if paths is not None else None)


#: The longest string of a request that keys what conditions decided: a request's fields are short (names, users),
#: and what is kept across requests must stay small whatever a request holds (an object's name is only validated
#: after admission).
_LONGEST_KEPT_FIELD = 512


def _request_values(data: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> tuple[Any, ...] | None:
    """What ``request`` (``data``) holds at ``paths``: strings, booleans, nulls or ``_ABSENT`` at the last step;
    None when anything else is (a list or map is read whole, so nothing less than all of it keys it), or a string
    longer than ``_LONGEST_KEPT_FIELD``."""
    values = []
    for path in paths:
        value: Any = data
        for key in path:
            if value.__class__ is not dict:
                return None
            value = value.get(key, _ABSENT)
        if value.__class__ is str:
            if len(value) > _LONGEST_KEPT_FIELD:
                return None
        elif value.__class__ is not bool and value is not None and value is not _ABSENT:
            return None
        values.append(value)
    return tuple(values)


class _DecidedByRequestFields:
    """What match conditions that read nothing but fields of ``request`` (``request.namespace != 'kube-system'``)
    decided without a failure, by the values of those fields: any request with the same values gets the same
    answer at the same cost. Kept across requests, a bounded number of them."""

    __slots__ = ("_entries",)

    LIMIT = 4096

    def __init__(self) -> None:
        #: (conditions key, field values) -> (the programs the key names, the first false condition or None).
        self._entries: dict[tuple[_ConditionsKey, tuple[Any, ...]], tuple[tuple[Program, ...], str | None]] = {}

    def decided(self, plan: _ConditionsPlan, values: tuple[Any, ...]) -> Any:
        entry = self._entries.get((plan.key, values))
        if entry is None or any(kept is not program for kept, program in zip(entry[0], plan.programs, strict=True)):
            return _UNDECIDED
        return entry[1]

    def remember(self, plan: _ConditionsPlan, values: tuple[Any, ...], false_condition: str | None) -> None:
        keep_bounded(self._entries, (plan.key, values), (plan.programs, false_condition), self.LIMIT)


class KeptForSnapshot:
    """What /mutate keeps across the requests evaluated against one snapshot (``Snapshot.kept``): facts about its
    programs, the values of its constant mutations (``Object{metadata: Object.metadata{labels: {'team': 'a'}}}``),
    their plain forms and string writes, the patches a kind's schema accepted, and what object-free match conditions
    decided by the values of ``request`` fields. The snapshot holds it, so a reload that replaces policies lets it
    all go with the old snapshot instead of keeping their programs alive."""

    __slots__ = ("accepted_patches", "constants", "decided_by_fields", "plain_forms", "plans", "reads_object",
                 "request_paths", "string_writes")

    def __init__(self) -> None:
        self.reads_object = IdentityFacts(reads_object)
        self.request_paths = IdentityFacts(request_paths)
        self.plans: IdentityFacts[tuple[tuple[MatchCondition, Program], ...], _ConditionsPlan | None] = \
            IdentityFacts(lambda conditions: _plan(conditions, self.reads_object, self.request_paths))
        self.constants = ConstantValues()
        self.plain_forms = _PlainForms()
        self.accepted_patches = _AcceptedPatches()
        self.string_writes = _KeptStringWrites()
        self.decided_by_fields = _DecidedByRequestFields()

    @staticmethod
    def of(snapshot: Snapshot) -> KeptForSnapshot:
        return snapshot.kept_for(_KEPT_KEY, KeptForSnapshot)


_KEPT_KEY = "mutating"


def _match_conditions(compiled: CompiledMutatingPolicy, current: Any,
                      activations: RequestActivations, decided: dict[Any, str | None] | None, kept: KeptForSnapshot,
                      ) -> tuple[str | None, list[ExpressionFailure]]:
    """``evaluate_match_conditions`` of ``compiled`` over the object as ``current``; with ``decided`` (what the
    request's conditions that cannot read the object decided, by ``_ConditionsPlan.key`` and by the id of a policy's
    conditions, which the snapshot holds throughout), those are evaluated once per request (over the request's own
    object), and once for all requests with the same values of the fields of ``request`` when they read nothing
    else."""
    conditions = compiled.match_conditions
    if decided is None:
        plan = None
    else:
        known = decided.get(id(conditions), _UNDECIDED)
        if known is not _UNDECIDED:
            return known, []
        plan = kept.plans(conditions)
    values = None
    if plan is not None:
        assert decided is not None
        known = decided.get(plan.key, _UNDECIDED)
        if known is _UNDECIDED and plan.request_paths is not None:
            request = activations.request
            values = _request_values(activations.request_fields(request.original_resource, request.original_kind),
                                     plan.request_paths)
            if values is not None:
                known = kept.decided_by_fields.decided(plan, values)
        if known is not _UNDECIDED:
            decided[plan.key] = decided[id(conditions)] = known
            return cast(str | None, known), []
        current = REQUEST_OBJECT
    false_condition, failures = evaluate_match_conditions(
        conditions, activations.scope(activations.for_match_conditions(None, current),
                                      RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS), activations.remembered)
    if plan is not None and not failures:
        assert decided is not None
        decided[plan.key] = decided[id(conditions)] = false_condition
        if values is not None:
            kept.decided_by_fields.remember(plan, values, false_condition)
    return false_condition, failures


def _dispatch(state: _Dispatch, invocations: list[_Invocation], view: RequestMatch, deadline: float | None,
              reads: Reads | None, share: bool) -> Any:
    """Both passes of the reinvocation chain over the invocations; returns the final object."""
    current = view.request.object
    context = PolicyReinvokeContext()
    # Match conditions and mutations are compiled in different environments, so each has its own
    # activations; both keep one per version of what the expressions can read of the object.
    condition_activations = RequestActivations(admission_environment(False), view, deadline, share=share,
                                               reads=reads, rounds_key="mutating-conditions")
    mutation_activations = RequestActivations(admission_environment(True), view, deadline, share=share,
                                              reads=reads, rounds_key="mutating")
    decided: dict[Any, str | None] | None = {} if share else None
    namespace_objects: dict[bool, tuple[Mapping[str, Any] | None, str | None]] = {}
    for reinvocation in (False, True):
        if reinvocation and (not context.reinvocation_requested
                             or (state.errors and any(e.failure_policy != "Ignore" for e in state.errors))):
            # A failing first pass denies the request before any reinvocation.
            break
        dirty = False
        state.reinvocation = reinvocation
        for invocation in invocations:
            compiled = invocation.compiled
            if (reinvocation and (not compiled.match_conditions
                                  or (decided is not None and id(compiled.match_conditions) in decided))
                    and not context.should_reinvoke(invocation.key)):
                # Not reinvoked, and its conditions already decided without a failure: they would record nothing.
                continue
            if compiled.match_conditions:
                false_condition, failures = _match_conditions(compiled, current, condition_activations,
                                                              decided, state.kept)
                if false_condition is not None:
                    if not reinvocation:
                        state.not_matched.append(NotMatched(
                            compiled.name, invocation.binding.metadata.name,
                            f'matchCondition "{false_condition}" evaluated to false'))
                    continue
                if failures:
                    state.error(compiled, invocation.binding.metadata.name, aggregate_failures(failures), "Invalid",
                                0.0, DecisionSite.MATCH_CONDITIONS)
                    continue
            if reinvocation and not context.should_reinvoke(invocation.key):
                continue
            found = namespace_objects.get(compiled.uses_namespace_object)
            if found is None:
                # The request's namespace is looked up once (``RequestMatch.lookup``): the answer only differs by
                # whether the policy reads namespaceObject.
                found = namespace_objects[compiled.uses_namespace_object] = mutation_activations.view.namespace_object(
                    compiled.uses_namespace_object)
            namespace_object, namespace_error = found
            if namespace_error is not None:
                state.config_error(compiled, invocation.binding.metadata.name, namespace_error)
                continue
            (state.reinvoked if reinvocation else state.invoked).append(invocation.key)
            before = current
            current, succeeded = _run_invocation(state, invocation, current, namespace_object, mutation_activations)
            dirty = dirty or succeeded
            if current != before:
                context.require_reinvoking_previously_invoked()
            if compiled.reinvocation_policy == "IfNeeded":
                context.add_reinvocable_policy_to_previously_invoked(invocation.key)
        if dirty:
            # ``lastVersionedAttr.Dirty``: any patch applied in this pass, changed or not, asks for the
            # reinvocation of every IfNeeded policy that ran.
            context.require_reinvoking_previously_invoked()
    return current


def _invocations(state: _Dispatch, matched: Matched, view: RequestMatch) -> list[_Invocation]:
    """The matching phase's steps for this request: its invocations, in order, with what did not match and the
    configuration errors recorded on the way."""
    request = view.request
    invocations = []
    for step in matched.steps:
        what = step[0]
        if what == INVOKED:
            resource, kind = matched_as(step[3], request)
            invocations.append(Invocation(step[1], step[2], resource, kind))
        elif what == SKIPPED:
            state.skipped(step[1], step[2], not_matched_why(step[3], view, step[4]))
        elif what == CONFIG_ERROR:
            state.config_error(step[1], step[2], step[3])
    return invocations


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
                      deadline: float | None = None, share_evaluations: bool = True,
                      prune_objects: bool = True, explain: bool = False) -> MutationOutcome:
    """The mutation kube-apiserver's MutatingAdmissionPolicy plugin would make to ``request``; all CEL work
    stops at ``deadline`` (``time.perf_counter``).

    With ``share_evaluations`` the matching phase is remembered per candidate set by what the plans read of a
    request (``generic.dispatcher.match_mutating``), a match condition is evaluated once per version of what it
    reads (once per request when it reads nothing of the object, and not again for requests with the same values
    of the fields of ``request`` it reads), a constant mutation once per process, and a mutation that changes
    nothing the expressions can read makes no new activation; with ``prune_objects`` the engine is given only what
    the expressions of the policies that could match can read of the objects.
    Both only make evaluation cheaper (the tests compare them with the straightforward reading, False and
    False). With ``explain`` the outcome carries each mutation's own patch (``steps``), for the reports of
    the offline commands."""
    state = _Dispatch(KeptForSnapshot.of(snapshot), steps=[] if explain else None)
    excluded = is_excluded(request)
    final = request.object
    internal: dict[str, Any] | None = None
    handled = request.operation in HANDLED_OPERATIONS
    if not handled and explain:
        for compiled in snapshot.mutating:
            state.skipped(compiled.name, None, f"MutatingAdmissionPolicies do not run on {request.operation} "
                                               "requests (kube-apiserver's plugin handles CREATE, UPDATE and CONNECT)")
    if not excluded and handled and snapshot.mutating:
        candidates = policy_candidate_set(snapshot, request, mutating=True)
        view = RequestMatch(request, namespaces)
        invocations = _invocations(state, match_mutating(snapshot.mutating, candidates, view,
                                                         remember=share_evaluations), view)
        if invocations:
            reads = snapshot.candidate_reads(candidates.positions, mutating=True) if prune_objects else None
            try:
                final = _dispatch(state, invocations, view, deadline, reads, share_evaluations)
            except _InternalError as error:
                internal = error.status()
    failing = [error for error in state.errors if error.failure_policy != "Ignore"]
    status = internal if internal is not None else _denial_status(request, failing) if failing else None
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
        steps=tuple(state.steps or ()),
    )
