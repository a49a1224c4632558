"""Matching compiled for the request path: one plan per MatchResources, one view per request.

:func:`staticadm.admission.matching.matcher.matches` is the transcription of kube-apiserver's matcher; it is what
``review`` explains with and what this module must agree with (``tests/admission/test_match_plan.py``
compares the two on generated policies and requests). On the request path the same decision is reached
with less work:

- A MatchResources' rules (resourceRules, excludeResourceRules, matchPolicy) depend only on the request's
  operation, resources, subresource, whether it is namespaced and, when a rule lists resourceNames, its
  name. Their outcome is computed once per such *shape* by the same ``rules_match`` and remembered in the
  plan (bounded), so a request repeats a dictionary look-up per policy and binding instead of the rule walk.
- What every selector reads of the request (the object's and old object's labels, the namespace's labels)
  is read once per request by :class:`RequestMatch`, not once per selector: it also means every policy
  of one request sees the same namespace, even when the cluster view changes while it is evaluated.
- Rules are looked at first: they need no I/O, and a request they do not select never looks its
  namespace up. Kubernetes checks the selectors first, but every part must match and a selector's error
  only counts once everything else matched, so the order does not change any outcome.

A plan answers with a small int (:data:`NOT_MATCHED`, :data:`MATCHED_ORIGINAL`, :data:`MATCHED_EQUIVALENT`)
or the configuration error's text; why something did not match is left to ``matches`` and built only
when someone reads it.

Stage: match, precompiled. Receives the parsed request once (:class:`RequestMatch`, the request's match view: its
shape, labels, namespace and namespace object, each read at most once) and hands that view on to every plan and
to the prepare-inputs stage, whose :class:`~staticadm.admission.cel.activation.RequestActivations` holds it for
the later stages (the namespace object is read from it there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from staticadm.admission.matching.matcher import (
    NIL_CONSTRAINTS,
    NIL_NAMESPACE_SELECTOR,
    NIL_OBJECT_SELECTOR,
    labels_select_object,
    namespace_labels_outcome,
    object_labels,
    rules_match,
)
from staticadm.admission.namespaces import NamespaceInfo, NamespaceSource
from staticadm.admission.request import AdmissionRequest, GroupVersionKind, GroupVersionResource
from staticadm.bounded import keep_bounded
from staticadm.model import LabelSelector, MatchResources

NOT_MATCHED = 0
#: Matched as the request's original resource and kind.
MATCHED_ORIGINAL = 1
#: Matched as the resource and kind the webhook received (matchPolicy Equivalent).
MATCHED_EQUIVALENT = 2


@dataclass(frozen=True, slots=True)
class MatchedVersion:
    """Matched (matchPolicy Equivalent) as another version of a built-in kind than either the request has."""

    resource: GroupVersionResource
    kind: GroupVersionKind


#: A plan's outcome: one of the three ints above, another version matched, or the text of a configuration error.
PlanOutcome = int | MatchedVersion | str

#: Shapes remembered per plan; a cluster sends a few hundred (operation x resource x subresource), and a
#: full memo is dropped rather than evicted piecemeal (it refills from the same deterministic function).
MAX_REMEMBERED_SHAPES = 2048


@dataclass(frozen=True, slots=True)
class MatchInputs:
    """What the plans of a set of policies and bindings read of a request besides its shape and kinds: its name
    (rules that list resourceNames), its objects' labels (objectSelectors) and its namespace (namespaceSelectors,
    whose Namespace requests read the object's labels too)."""

    name: bool
    object_labels: bool
    namespace: bool

    @classmethod
    def of(cls, plans: Iterable[MatchPlan]) -> MatchInputs:
        plans = list(plans)
        return cls(any(plan.reads_name for plan in plans), any(plan.reads_object_labels for plan in plans),
                   any(plan.reads_namespace for plan in plans))


class RequestMatch:
    """What matching reads of one request, each part read at most once."""

    __slots__ = ("_namespace_info", "_namespaces", "_object_labels", "named_shape", "request", "shape")

    def __init__(self, request: AdmissionRequest, namespaces: NamespaceSource) -> None:
        self.request = request
        self._namespaces = namespaces
        original, received = request.original_resource, request.resource
        #: Everything rules read of the request, but its name.
        self.shape: tuple[str, ...] = (
            request.operation, original.group, original.version, original.resource, received.group,
            received.version, received.resource, request.original_sub_resource, "ns" if request.namespace else "")
        #: The same with the name, for rules that list resourceNames.
        self.named_shape: tuple[str, ...] = (*self.shape, request.name)
        self._object_labels: tuple[Mapping[str, str] | None, Mapping[str, str] | None] | None = None
        self._namespace_info: NamespaceInfo | None = None

    def object_labels(self) -> tuple[Mapping[str, str] | None, Mapping[str, str] | None]:
        if self._object_labels is None:
            request = self.request
            self._object_labels = (object_labels(request.object), object_labels(request.old_object))
        return self._object_labels

    def namespaces(self) -> NamespaceSource:
        return self._namespaces

    def key(self, inputs: MatchInputs) -> tuple[Any, ...]:
        """Everything plans that read ``inputs`` read of this request: two requests with the same key are matched
        alike by them (the same outcomes, errors included, in the same words)."""
        request = self.request
        key: list[Any] = [self.named_shape if inputs.name else self.shape, request.kind, request.original_kind,
                          request.object is not None, request.old_object is not None]
        if inputs.object_labels or inputs.namespace:
            for labels in self.object_labels():
                key.append(None if labels is None else tuple(labels.items()))
        if inputs.namespace and request.namespace:
            info = self.lookup(request.namespace)
            key.append((info.name, None if info.labels is None else tuple(info.labels.items()), info.unavailable))
        return tuple(key)

    def namespace_object(self, uses_namespace_object: bool) -> tuple[Mapping[str, Any] | None, str | None]:
        """(namespaceObject, None), or (None, the configuration error) when a policy reads namespaceObject of a
        namespace the source does not know: a silent null would make the policy decide on missing data."""
        request = self.request
        kind = request.original_kind
        # A Namespace request carries its own name as namespace; Kubernetes unsets it (no namespaceObject).
        if not request.namespace or (kind.group == "" and kind.version == "v1" and kind.kind == "Namespace"):
            return None, None
        namespace = request.namespace
        info = self.lookup(namespace)
        if info.object is None and uses_namespace_object and info.unavailable is not None:
            return None, f"namespaceObject is unavailable: {info.unavailable}"
        if info.object is None and uses_namespace_object:
            return None, (f'namespace "{namespace}" is not known to staticadm, so namespaceObject is unavailable '
                          "(give its Namespace object to the namespace source)")
        return info.object, None

    def lookup(self, name: str) -> NamespaceInfo:
        """The request's NamespaceSource, asked once per request (so every policy sees one namespace)."""
        info = self._namespace_info
        if info is None or info.name != name:
            info = self._namespace_info = self._namespaces.lookup(name)
        return info


class MatchPlan:
    """One MatchResources (a policy's matchConstraints or a binding's matchResources), ready to match."""

    __slots__ = ("_by_shape", "_match", "_named", "_namespace_selector", "_object_selector", "_static")

    def __init__(self, match: MatchResources | None, *, is_policy: bool) -> None:
        self._match = match
        self._by_shape: dict[tuple[str, ...], int | MatchedVersion] = {}
        #: The outcome that does not depend on the request, if there is one.
        self._static: PlanOutcome | None = None
        self._namespace_selector: LabelSelector | None = None
        self._object_selector: LabelSelector | None = None
        self._named = False
        if match is None:
            # A binding without matchResources matches everything; a policy must have matchConstraints.
            self._static = NIL_CONSTRAINTS if is_policy else MATCHED_ORIGINAL
        elif match.namespace_selector is None:
            self._static = NIL_NAMESPACE_SELECTOR
        elif match.object_selector is None:
            self._static = NIL_OBJECT_SELECTOR
        else:
            if not match.namespace_selector.is_empty:
                self._namespace_selector = match.namespace_selector
            if not match.object_selector.is_empty:
                self._object_selector = match.object_selector
            self._named = any(rule.resource_names for rule in (*match.resource_rules, *match.exclude_resource_rules))

    @property
    def reads_name(self) -> bool:
        return self._static is None and self._named

    @property
    def reads_object_labels(self) -> bool:
        return self._static is None and self._object_selector is not None

    @property
    def reads_namespace(self) -> bool:
        return self._static is None and self._namespace_selector is not None

    def evaluate(self, view: RequestMatch) -> PlanOutcome:
        """What ``matches(match, view.request, ...)`` decides, without why it did not match."""
        if self._static is not None:
            return self._static
        shape = view.named_shape if self._named else view.shape
        rules = self._by_shape.get(shape)
        if rules is None:
            rules = self._rules(view.request)
            keep_bounded(self._by_shape, shape, rules, MAX_REMEMBERED_SHAPES)
        if rules == NOT_MATCHED:
            return NOT_MATCHED
        if self._object_selector is not None and not labels_select_object(self._object_selector,
                                                                          view.object_labels()):
            return NOT_MATCHED
        if self._namespace_selector is not None:
            matched, error = namespace_labels_outcome(self._namespace_selector, view.request, view.lookup)
            if error is not None:
                return error
            if not matched:
                return NOT_MATCHED
        return rules

    def _rules(self, request: AdmissionRequest) -> int | MatchedVersion:
        match = self._match
        assert match is not None
        if match.exclude_resource_rules and rules_match(match.exclude_resource_rules, match.match_policy,
                                                        request).matched:
            return NOT_MATCHED
        if not match.resource_rules:
            return MATCHED_ORIGINAL
        found = rules_match(match.resource_rules, match.match_policy, request)
        if not found.matched:
            return NOT_MATCHED
        if found.resource is request.original_resource:
            return MATCHED_ORIGINAL
        if found.resource is request.resource:
            return MATCHED_EQUIVALENT
        assert found.resource is not None and found.kind is not None
        return MatchedVersion(found.resource, found.kind)


def matched_as(outcome: int | MatchedVersion,
               request: AdmissionRequest) -> tuple[GroupVersionResource, GroupVersionKind]:
    """The (resource, kind) a matched outcome stands for."""
    if outcome.__class__ is MatchedVersion:
        matched = cast(MatchedVersion, outcome)
        return matched.resource, matched.kind
    if outcome == MATCHED_EQUIVALENT:
        return request.resource, request.kind
    return request.original_resource, request.original_kind
