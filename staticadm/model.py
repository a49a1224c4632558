"""The ``admissionregistration.k8s.io/v1`` types a static manifest directory may hold.

These mirror the Go types of k8s.io/api/admissionregistration/v1 field for field, so that a strict
decoder can reject exactly the fields kube-apiserver rejects. Each field's JSON name lives in its
``metadata["json"]``; :mod:`staticadm.manifests.decode` reads the schema from there and from the type
hints, so a field added here is decoded without touching the decoder.

Go pointers become ``X | None`` (absent and ``null`` are the same thing in Go's JSON decoding), Go
slices become tuples and Go maps read-only mappings. Enumerations stay plain strings: Kubernetes
decodes any string and only validation rejects unsupported values, with a field path and the list of
supported values, and we want the same error at the same stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

API_VERSION = "admissionregistration.k8s.io/v1"

_EMPTY_MAP: Mapping[str, Any] = MappingProxyType({})


def _empty_map() -> Mapping[str, Any]:
    return _EMPTY_MAP


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a top-level object came from, for error messages and the check report."""

    path: str
    #: Index of the document in its file, counting only non-empty documents (as kube-apiserver does).
    document: int
    #: Indexes into ``items`` of enclosing Lists, outermost first; empty for a bare object.
    items: tuple[int, ...] = ()

    @property
    def item(self) -> int | None:
        return self.items[-1] if self.items else None

    def describe(self) -> str:
        where = f"{self.path} (document {self.document}"
        for index in self.items:
            where += f", item {index}"
        return where + ")"


@dataclass(frozen=True, slots=True)
class OwnerReference:
    api_version: str = field(default="", metadata={"json": "apiVersion"})
    kind: str = field(default="", metadata={"json": "kind"})
    name: str = field(default="", metadata={"json": "name"})
    uid: str = field(default="", metadata={"json": "uid"})
    controller: bool | None = field(default=None, metadata={"json": "controller"})
    block_owner_deletion: bool | None = field(default=None, metadata={"json": "blockOwnerDeletion"})


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str = field(default="", metadata={"json": "name"})
    generate_name: str = field(default="", metadata={"json": "generateName"})
    namespace: str = field(default="", metadata={"json": "namespace"})
    self_link: str = field(default="", metadata={"json": "selfLink"})
    uid: str = field(default="", metadata={"json": "uid"})
    resource_version: str = field(default="", metadata={"json": "resourceVersion"})
    generation: int = field(default=0, metadata={"json": "generation"})
    creation_timestamp: str | None = field(default=None, metadata={"json": "creationTimestamp"})
    deletion_timestamp: str | None = field(default=None, metadata={"json": "deletionTimestamp"})
    deletion_grace_period_seconds: int | None = field(default=None, metadata={"json": "deletionGracePeriodSeconds"})
    labels: Mapping[str, str] = field(default_factory=_empty_map, metadata={"json": "labels"})
    annotations: Mapping[str, str] = field(default_factory=_empty_map, metadata={"json": "annotations"})
    owner_references: tuple[OwnerReference, ...] = field(default=(), metadata={"json": "ownerReferences"})
    finalizers: tuple[str, ...] = field(default=(), metadata={"json": "finalizers"})
    #: Server-side-apply bookkeeping; kept opaque because nothing here reads it.
    managed_fields: tuple[Mapping[str, Any], ...] = field(default=(), metadata={"json": "managedFields"})


@dataclass(frozen=True, slots=True)
class ListMeta:
    self_link: str = field(default="", metadata={"json": "selfLink"})
    resource_version: str = field(default="", metadata={"json": "resourceVersion"})
    continue_: str = field(default="", metadata={"json": "continue"})
    remaining_item_count: int | None = field(default=None, metadata={"json": "remainingItemCount"})


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    key: str = field(default="", metadata={"json": "key"})
    operator: str = field(default="", metadata={"json": "operator"})
    values: tuple[str, ...] = field(default=(), metadata={"json": "values"})


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: Mapping[str, str] = field(default_factory=_empty_map, metadata={"json": "matchLabels"})
    match_expressions: tuple[LabelSelectorRequirement, ...] = field(default=(), metadata={"json": "matchExpressions"})

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


@dataclass(frozen=True, slots=True)
class NamedRuleWithOperations:
    resource_names: tuple[str, ...] = field(default=(), metadata={"json": "resourceNames"})
    operations: tuple[str, ...] = field(default=(), metadata={"json": "operations"})
    api_groups: tuple[str, ...] = field(default=(), metadata={"json": "apiGroups"})
    api_versions: tuple[str, ...] = field(default=(), metadata={"json": "apiVersions"})
    resources: tuple[str, ...] = field(default=(), metadata={"json": "resources"})
    scope: str | None = field(default=None, metadata={"json": "scope"})


@dataclass(frozen=True, slots=True)
class MatchResources:
    namespace_selector: LabelSelector | None = field(default=None, metadata={"json": "namespaceSelector"})
    object_selector: LabelSelector | None = field(default=None, metadata={"json": "objectSelector"})
    resource_rules: tuple[NamedRuleWithOperations, ...] = field(default=(), metadata={"json": "resourceRules"})
    exclude_resource_rules: tuple[NamedRuleWithOperations, ...] = field(
        default=(), metadata={"json": "excludeResourceRules"}
    )
    match_policy: str | None = field(default=None, metadata={"json": "matchPolicy"})


@dataclass(frozen=True, slots=True)
class ParamKind:
    """Decoded only so that a static manifest using it gets Kubernetes' "not supported" error."""

    api_version: str = field(default="", metadata={"json": "apiVersion"})
    kind: str = field(default="", metadata={"json": "kind"})


@dataclass(frozen=True, slots=True)
class ParamRef:
    """Decoded only so that a static manifest using it gets Kubernetes' "not supported" error."""

    name: str = field(default="", metadata={"json": "name"})
    namespace: str = field(default="", metadata={"json": "namespace"})
    selector: LabelSelector | None = field(default=None, metadata={"json": "selector"})
    parameter_not_found_action: str | None = field(default=None, metadata={"json": "parameterNotFoundAction"})


@dataclass(frozen=True, slots=True)
class MatchCondition:
    name: str = field(default="", metadata={"json": "name"})
    expression: str = field(default="", metadata={"json": "expression"})


@dataclass(frozen=True, slots=True)
class Variable:
    name: str = field(default="", metadata={"json": "name"})
    expression: str = field(default="", metadata={"json": "expression"})


@dataclass(frozen=True, slots=True)
class Validation:
    expression: str = field(default="", metadata={"json": "expression"})
    message: str = field(default="", metadata={"json": "message"})
    reason: str | None = field(default=None, metadata={"json": "reason"})
    message_expression: str = field(default="", metadata={"json": "messageExpression"})


@dataclass(frozen=True, slots=True)
class AuditAnnotation:
    key: str = field(default="", metadata={"json": "key"})
    value_expression: str = field(default="", metadata={"json": "valueExpression"})


@dataclass(frozen=True, slots=True)
class ApplyConfiguration:
    expression: str = field(default="", metadata={"json": "expression"})


@dataclass(frozen=True, slots=True)
class JSONPatch:
    expression: str = field(default="", metadata={"json": "expression"})


@dataclass(frozen=True, slots=True)
class Mutation:
    patch_type: str = field(default="", metadata={"json": "patchType"})
    apply_configuration: ApplyConfiguration | None = field(default=None, metadata={"json": "applyConfiguration"})
    json_patch: JSONPatch | None = field(default=None, metadata={"json": "jsonPatch"})


@dataclass(frozen=True, slots=True)
class ValidatingAdmissionPolicySpec:
    param_kind: ParamKind | None = field(default=None, metadata={"json": "paramKind"})
    match_constraints: MatchResources | None = field(default=None, metadata={"json": "matchConstraints"})
    validations: tuple[Validation, ...] = field(default=(), metadata={"json": "validations"})
    failure_policy: str | None = field(default=None, metadata={"json": "failurePolicy"})
    audit_annotations: tuple[AuditAnnotation, ...] = field(default=(), metadata={"json": "auditAnnotations"})
    match_conditions: tuple[MatchCondition, ...] = field(default=(), metadata={"json": "matchConditions"})
    variables: tuple[Variable, ...] = field(default=(), metadata={"json": "variables"})


@dataclass(frozen=True, slots=True)
class ValidatingAdmissionPolicyBindingSpec:
    policy_name: str = field(default="", metadata={"json": "policyName"})
    param_ref: ParamRef | None = field(default=None, metadata={"json": "paramRef"})
    match_resources: MatchResources | None = field(default=None, metadata={"json": "matchResources"})
    validation_actions: tuple[str, ...] = field(default=(), metadata={"json": "validationActions"})


@dataclass(frozen=True, slots=True)
class MutatingAdmissionPolicySpec:
    param_kind: ParamKind | None = field(default=None, metadata={"json": "paramKind"})
    match_constraints: MatchResources | None = field(default=None, metadata={"json": "matchConstraints"})
    variables: tuple[Variable, ...] = field(default=(), metadata={"json": "variables"})
    mutations: tuple[Mutation, ...] = field(default=(), metadata={"json": "mutations"})
    failure_policy: str | None = field(default=None, metadata={"json": "failurePolicy"})
    match_conditions: tuple[MatchCondition, ...] = field(default=(), metadata={"json": "matchConditions"})
    #: A plain string in Go (not a pointer) with no default: "" means unset and fails validation.
    reinvocation_policy: str = field(default="", metadata={"json": "reinvocationPolicy"})


@dataclass(frozen=True, slots=True)
class MutatingAdmissionPolicyBindingSpec:
    policy_name: str = field(default="", metadata={"json": "policyName"})
    param_ref: ParamRef | None = field(default=None, metadata={"json": "paramRef"})
    match_resources: MatchResources | None = field(default=None, metadata={"json": "matchResources"})


# The top-level objects. ``origin`` has no JSON name: the loader fills it in, never the manifest.
# ``status`` is accepted because the Go type has it; nothing reads it, so it stays opaque.


@dataclass(frozen=True, slots=True)
class ValidatingAdmissionPolicy:
    KIND: ClassVar[str] = "ValidatingAdmissionPolicy"
    api_version: str = field(default="", metadata={"json": "apiVersion"})
    kind: str = field(default="", metadata={"json": "kind"})
    metadata: ObjectMeta = field(default_factory=ObjectMeta, metadata={"json": "metadata"})
    spec: ValidatingAdmissionPolicySpec = field(
        default_factory=ValidatingAdmissionPolicySpec, metadata={"json": "spec"}
    )
    status: Mapping[str, Any] | None = field(default=None, metadata={"json": "status"})
    origin: Origin = field(default=Origin("", 0))

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True, slots=True)
class ValidatingAdmissionPolicyBinding:
    KIND: ClassVar[str] = "ValidatingAdmissionPolicyBinding"
    api_version: str = field(default="", metadata={"json": "apiVersion"})
    kind: str = field(default="", metadata={"json": "kind"})
    metadata: ObjectMeta = field(default_factory=ObjectMeta, metadata={"json": "metadata"})
    spec: ValidatingAdmissionPolicyBindingSpec = field(
        default_factory=ValidatingAdmissionPolicyBindingSpec, metadata={"json": "spec"}
    )
    origin: Origin = field(default=Origin("", 0))

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True, slots=True)
class MutatingAdmissionPolicy:
    KIND: ClassVar[str] = "MutatingAdmissionPolicy"
    api_version: str = field(default="", metadata={"json": "apiVersion"})
    kind: str = field(default="", metadata={"json": "kind"})
    metadata: ObjectMeta = field(default_factory=ObjectMeta, metadata={"json": "metadata"})
    spec: MutatingAdmissionPolicySpec = field(default_factory=MutatingAdmissionPolicySpec, metadata={"json": "spec"})
    origin: Origin = field(default=Origin("", 0))

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True, slots=True)
class MutatingAdmissionPolicyBinding:
    KIND: ClassVar[str] = "MutatingAdmissionPolicyBinding"
    api_version: str = field(default="", metadata={"json": "apiVersion"})
    kind: str = field(default="", metadata={"json": "kind"})
    metadata: ObjectMeta = field(default_factory=ObjectMeta, metadata={"json": "metadata"})
    spec: MutatingAdmissionPolicyBindingSpec = field(
        default_factory=MutatingAdmissionPolicyBindingSpec, metadata={"json": "spec"}
    )
    origin: Origin = field(default=Origin("", 0))

    @property
    def name(self) -> str:
        return self.metadata.name


Policy = ValidatingAdmissionPolicy | MutatingAdmissionPolicy
Binding = ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding
TopLevel = Policy | Binding

#: The item type of each typed list kind.
LIST_KINDS: Mapping[str, type[TopLevel]] = MappingProxyType(
    {
        "ValidatingAdmissionPolicyList": ValidatingAdmissionPolicy,
        "ValidatingAdmissionPolicyBindingList": ValidatingAdmissionPolicyBinding,
        "MutatingAdmissionPolicyList": MutatingAdmissionPolicy,
        "MutatingAdmissionPolicyBindingList": MutatingAdmissionPolicyBinding,
    }
)

OBJECT_KINDS: Mapping[str, type[TopLevel]] = MappingProxyType({cls.KIND: cls for cls in LIST_KINDS.values()})
