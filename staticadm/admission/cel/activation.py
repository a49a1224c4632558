"""What one admission request looks like to CEL, shared by the validating and mutating dispatchers.

Kubernetes builds the same activation for both plugins (``CreateAdmissionRequest``, the authorizer, the
namespace object); here it is built once per request and per version of what the expressions read of the
object. Running expressions over it is ``filter.py``; what they produced is ``admission/outcomes.py``.

Stage: prepare inputs (kube-apiserver's ``plugin/cel/activation.go``). Receives the request's match view
(``matching/plan.py``'s :class:`RequestMatch`: the parsed request, its labels, namespace and namespace object) once,
in :class:`RequestActivations`; hands that one value on to the evaluate and decide stages, holding the view and the
engine activations (request fields, pruned object and old object and their key, namespace object, authorizer),
each built once per request.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from contextvars import ContextVar
from typing import Any, cast

from staticadm.admission.matching.plan import RequestMatch
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
from staticadm.cel.evaluation import CostBudget, EvaluationContext, RememberedOutcomes, SharedActivation
from staticadm.cel.libraries.authz import make_authorizer, make_request_resource
from staticadm.cel.reads import Reads


class _EveryField:
    """``request_data``'s ``keys`` when every field is wanted."""

    def __contains__(self, key: object) -> bool:
        return True


_EVERY_FIELD = _EveryField()


def request_data(request: AdmissionRequest, resource: GroupVersionResource, kind: GroupVersionKind,
                 keys: Container[str] | None = None) -> dict[str, Any]:
    """``CreateAdmissionRequest`` as CEL sees it: omitempty fields left out, no uid/object/oldObject; with ``keys``
    only the fields named there (what the expressions can read: the rest would be pruned away)."""
    wanted: Container[str] = _EVERY_FIELD if keys is None else keys
    data: dict[str, Any] = {}
    if "kind" in wanted:
        data["kind"] = kind.to_json()
    if "resource" in wanted:
        data["resource"] = resource.to_json()
    if "requestKind" in wanted:
        data["requestKind"] = request.original_kind.to_json()
    if "requestResource" in wanted:
        data["requestResource"] = request.original_resource.to_json()
    if "operation" in wanted:
        data["operation"] = request.operation
    if "userInfo" in wanted:
        data["userInfo"] = request.user_info.to_json()
    if "dryRun" in wanted:
        data["dryRun"] = bool(request.dry_run)
    if "options" in wanted:
        data["options"] = dict(request.options) if request.options is not None else None
    sub = request.original_sub_resource
    if sub:
        if "subResource" in wanted:
            data["subResource"] = sub
        if "requestSubResource" in wanted:
            data["requestSubResource"] = sub
    if request.name and "name" in wanted:
        data["name"] = request.name
    if request.namespace and "namespace" in wanted:
        data["namespace"] = request.namespace
    return data


def authorizer_data(request: AdmissionRequest) -> dict[str, Any]:
    resource = request.original_resource
    return {
        "authorizer": make_authorizer(),
        "authorizer.requestResource": make_request_resource(
            resource.group, resource.resource, request.original_sub_resource, request.namespace, request.name),
    }


#: ``current`` of :meth:`RequestActivations.for_evaluation` when it is the request's own object.
REQUEST_OBJECT = object()


class EvaluationRounds:
    """The engine activations shared by the rounds of one request's evaluation.

    A request whose authorizer checks are answered between evaluations (``cluster/authorizer.py``) is
    evaluated again; the engine orders a map's keys anew each time it converts one, so a round over freshly
    converted objects would iterate maps in another order than the round before, reach other checks, and never
    settle (``exists()`` over a map's keys: each round stops at keys whose checks the last one did not ask).
    kube-apiserver evaluates once, in one order; rounds over the same activations do too.
    """

    def __init__(self) -> None:
        self._activations: dict[str, RequestActivations] = {}

    def carry(self, key: str, activations: RequestActivations) -> RequestActivations | None:
        """The activations the last round kept under ``key``; ``activations`` are kept for the next."""
        earlier = self._activations.get(key)
        self._activations[key] = activations
        return earlier


#: The rounds of the request being evaluated, set around them; None outside (a single evaluation).
EVALUATION_ROUNDS: ContextVar[EvaluationRounds | None] = ContextVar("staticadm_evaluation_rounds", default=None)


class RequestActivations:
    """The engine activations of one request, built once and shared by every policy and binding; the one value
    the later stages receive: it holds the parsed request (``request``) and its match view (``view``: labels,
    namespace and namespace object) it was built from, so nothing after it re-derives them.

    Converting the object to CEL values is by far the largest cost of evaluating a policy, so all
    validations of a request read one activation; only policies matched through another resource version
    than the request's get their own.
    """

    def __init__(self, environment: Any, view: RequestMatch, deadline: float | None = None, *,
                 share: bool = True, reads: Reads | None = None, rounds_key: str | None = None,
                 authorizer: bool = True) -> None:
        self._environment = environment
        #: The request's match view (``matching/plan.py``), built by the match stage before these activations.
        self.view = view
        #: The parsed request (``view.request``).
        self.request = request = view.request
        #: Only what ``reads`` says the expressions can read of an object or of ``request`` (cel/reads.py) is given
        #: to the engine.
        self._reads = reads
        self._old_object = reads.prune("oldObject", request.old_object) if reads is not None else request.old_object
        #: The versions of ``object`` seen so far (the request's, then each mutation's): (the whole object, what
        #: the engine is given of it, its version number). With ``share``, a mutation that changes nothing the
        #: expressions can read gives no new version, so no new activation and no new conversion.
        self._versions: list[tuple[Any, Any, int]] = []
        #: When all CEL work of this request must stop (``time.perf_counter``), or None.
        self.deadline = deadline
        #: ``authorizer`` False (no expression that may run names it): the activations leave it out.
        self._authorizer: dict[str, Any] | None = None if authorizer else {}
        self._request_data: dict[tuple[GroupVersionResource, GroupVersionKind], dict[str, Any]] = {}
        self._cache: dict[tuple[Any, ...], SharedActivation] = {}
        #: The last (resource, kind, namespaceObject, object, activation): nearly every lookup repeats it.
        self._last: tuple[Any, Any, Any, Any, Any] | None = None
        self._context: EvaluationContext | None = None
        #: Whether the request's evaluations take the shortcuts that reach the same outcomes: shared match
        #: condition outcomes and object versions, validations first run together (``CelEnvironment.conjunction``).
        self.share = share
        #: Outcomes of match conditions by (program, activation), shared by the request's policies; None
        #: evaluates each policy's conditions on their own (the straightforward reading, for the tests).
        self.remembered: RememberedOutcomes | None = {} if share else None
        #: Versions of the object carried from an earlier round (``rounds_key`` names which activations of the
        #: request these are): any of them, not only the recent ones, may come back.
        self._carried = 0
        rounds = EVALUATION_ROUNDS.get() if rounds_key is not None else None
        earlier = rounds.carry(rounds_key, self) if rounds is not None and rounds_key is not None else None
        if earlier is not None:
            # What earlier rounds saw is kept, activations first; what they decided is not (answers differ).
            self._versions = earlier._versions
            self._cache = earlier._cache
            self._request_data = earlier._request_data
            self._authorizer = earlier._authorizer
            self._carried = len(self._versions)

    def scope(self, activation: SharedActivation, budget: CostBudget | int | None) -> EvaluationContext:
        """The request's one evaluation context, starting a new cost scope over ``activation``.

        Scopes of one request run one after the other, never nested, so they share one context; the
        context returned is only valid until the next call.
        """
        if self._context is None:
            self._context = self._environment.new_context(activation=activation, request_deadline=self.deadline,
                                                          budget=budget)
            return self._context
        return self._context.rescope(activation, budget)

    def _authorizer_data(self) -> dict[str, Any]:
        if self._authorizer is None:
            self._authorizer = authorizer_data(self.request)
        return self._authorizer

    def for_match_conditions(self, namespace_object: Mapping[str, Any] | None,
                             current: Mapping[str, Any] | object | None = REQUEST_OBJECT) -> SharedActivation:
        """Match conditions see the request's own resource; they never read namespaceObject (compiled as null),
        so they share the evaluation activation of that resource."""
        request = self.request
        return self.for_evaluation(request.original_resource, request.original_kind, namespace_object, current)

    def for_evaluation(self, resource: GroupVersionResource, kind: GroupVersionKind,
                       namespace_object: Mapping[str, Any] | None,
                       current: Mapping[str, Any] | object | None = REQUEST_OBJECT) -> SharedActivation:
        """The activation for a policy matched as ``resource``/``kind``; ``current`` is the object as the
        mutations so far left it (the request's own object unless given)."""
        last = self._last
        if (last is not None and last[0] is resource and last[1] is kind and last[2] is namespace_object
                and last[3] is current):
            return cast(SharedActivation, last[4])
        request = self.request
        version, obj = self._version(request.object if current is REQUEST_OBJECT else current)
        # The cached activation holds ``namespace_object``, so its id stays its own meanwhile.
        key = (resource, kind, id(namespace_object), version)
        activation = self._cache.get(key)
        if activation is None:
            activation = self._cache[key] = self._environment.new_activation({
                "object": obj, "oldObject": self._old_object,
                "namespaceObject": dict(namespace_object) if namespace_object is not None else None,
                "request": self.request_fields(resource, kind), **self._authorizer_data()})
        self._last = (resource, kind, namespace_object, current, activation)
        return activation

    def given(self, resource: GroupVersionResource, kind: GroupVersionKind) -> tuple[Any, Any, dict[str, Any]]:
        """What the engine is given of the request's own ``object``, ``oldObject`` and ``request`` for a policy
        matched as ``resource``/``kind`` (pruned: ``for_evaluation`` gives the engine these very values)."""
        return self._version(self.request.object)[1], self._old_object, self.request_fields(resource, kind)

    def request_fields(self, resource: GroupVersionResource, kind: GroupVersionKind) -> dict[str, Any]:
        """``request`` as the activations for a policy matched as ``resource``/``kind`` hold it (``request_data``),
        made once per request; callers only read it."""
        data = self._request_data.get((resource, kind))
        if data is None:
            reads = self._reads
            if reads is None:
                data = self._request_data[resource, kind] = request_data(self.request, resource, kind)
            else:
                whole = request_data(self.request, resource, kind, reads.keys_read("request"))
                data = self._request_data[resource, kind] = cast(dict[str, Any], reads.prune("request", whole))
        return data

    def _version(self, whole: Any) -> tuple[int, Any]:
        """(version number, what the engine is given) of one version of the object."""
        versions = self._versions
        for seen, given, version in versions:
            if seen is whole:
                return version, given
        given = self._reads.prune("object", whole) if self._reads is not None else whole
        if self.share:
            # Mutations share what they leave unchanged, so comparing with recent versions walks only what changed.
            compared = versions if self._carried else versions[-_COMPARED_VERSIONS:]
            for _, earlier, version in compared:
                if _same_or_too_deep(earlier, given):
                    versions.append((whole, earlier, version))
                    return version, earlier
        version = len(versions)
        versions.append((whole, given, version))
        return version, given


#: How many recent versions of the object a new one is compared with (a mutation that changed nothing the
#: expressions read gives the same as the version before it).
_COMPARED_VERSIONS = 4


def _same_or_too_deep(left: Any, right: Any) -> bool:
    try:
        return same_json(left, right)
    except RecursionError:
        # Nested deeper than Python recurses: not known to be the same, so a version of its own.
        return False


def same_json(left: Any, right: Any) -> bool:
    """Whether two JSON values are the same to CEL in every respect: types (1, 1.0 and True differ), map key
    order (iteration order is visible), and the sign of zero; a NaN only as itself."""
    if left is right:
        return True
    cls = left.__class__
    if cls is not right.__class__:
        return False
    if cls is dict:
        if len(left) != len(right) or list(left) != list(right):
            return False
        return all(same_json(value, right[key]) for key, value in left.items())
    if cls is list:
        return len(left) == len(right) and all(map(same_json, left, right))
    if cls is float:
        return left == right and math.copysign(1.0, left) == math.copysign(1.0, right)
    return bool(left == right)
