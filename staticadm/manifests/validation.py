"""REST create validation of the admissionregistration v1 types.

A port of ``pkg/apis/admissionregistration/validation/validation.go`` (``ValidateValidatingAdmission
Policy`` and friends) for the create path, with the same field paths, the same order and the same
messages, because static manifests must be accepted or rejected exactly as kube-apiserver does.

CEL expressions are compiled through the ``compile`` callback given to :class:`Validator` (the loader
passes :meth:`staticadm.compiled.PolicyPrograms.compile`); it returns the Kubernetes error detail when an
expression does not compile, and keeps the compiled program otherwise so that nothing is compiled twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from staticadm import gofmt
from staticadm.cel import ExpressionKind
from staticadm.compiled import ExpressionSite
from staticadm.manifests.errors import FieldError
from staticadm.manifests.names import (
    is_cel_identifier,
    is_dns1035_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
    name_is_dns_subdomain,
    validate_path_segment_name,
)
from staticadm.model import (
    AuditAnnotation,
    LabelSelector,
    LabelSelectorRequirement,
    MatchCondition,
    MatchResources,
    MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding,
    Mutation,
    NamedRuleWithOperations,
    ObjectMeta,
    ParamKind,
    ParamRef,
    TopLevel,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    Validation,
    Variable,
)

#: compile(expression site) -> None, or the error detail.
CompileFn = Callable[[ExpressionSite], "str | None"]

SUPPORTED_FAILURE_POLICIES = ("Fail", "Ignore")
SUPPORTED_MATCH_POLICIES = ("Equivalent", "Exact")
SUPPORTED_OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
#: A mutation cannot apply to a DELETE.
SUPPORTED_MUTATING_OPERATIONS = ("*", "CONNECT", "CREATE", "UPDATE")
VALID_SCOPES = ("*", "Cluster", "Namespaced")
SUPPORTED_REASONS = ("Forbidden", "Invalid", "RequestEntityTooLarge")
VALID_VALIDATION_ACTIONS = ("Audit", "Deny", "Warn")
SUPPORTED_REINVOCATION_POLICIES = ("IfNeeded", "Never")
SUPPORTED_PATCH_TYPES = ("ApplyConfiguration", "JSONPatch")
PARAMETER_NOT_FOUND_ACTIONS = ("Deny", "Allow")

MAX_AUDIT_ANNOTATIONS = 20
MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH = 5 * 1024
MAX_MATCH_CONDITIONS = 64
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
_NEWLINES = re.compile(r"[\n\r]+")
_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_slice(values: Iterable[str], type_name: str = "string") -> str:
    """Go's ``%#v`` of a string slice, the bad value of list-level Invalid errors."""
    return f"[]{type_name}{{" + ", ".join(gofmt.quote(v) for v in values) + "}"


def supported(values: Sequence[str]) -> str:
    return "supported values: " + ", ".join(gofmt.quote(v) for v in values)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "Required value", detail)


def invalid(path: str, value: str, detail: str) -> FieldError:
    return FieldError(path, "Invalid value", detail, value)


def not_supported(path: str, value: str, values: Sequence[str]) -> FieldError:
    return FieldError(path, "Unsupported value", supported(values), gofmt.quote(value))


def duplicate(path: str, value: str) -> FieldError:
    return FieldError(path, "Duplicate value", "", gofmt.quote(value))


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, "Forbidden", detail)


def idx(path: str, i: int) -> str:
    return f"{path}[{i}]"


# --- metadata and selectors (apimachinery) --------------------------------------------------------


def validate_object_meta(meta: ObjectMeta, path: str = "metadata") -> list[FieldError]:
    """``ValidateObjectMeta(meta, requiresNamespace=false, NameIsDNSSubdomain, path)``."""
    errs: list[FieldError] = []
    if meta.generate_name:
        for msg in name_is_dns_subdomain(meta.generate_name, True):
            errs.append(invalid(f"{path}.generateName", gofmt.quote(meta.generate_name), msg))
    if not meta.name:
        errs.append(required(f"{path}.name", "name or generateName is required"))
    else:
        for msg in name_is_dns_subdomain(meta.name, False):
            errs.append(invalid(f"{path}.name", gofmt.quote(meta.name), msg))
    if meta.namespace:
        errs.append(forbidden(f"{path}.namespace", "not allowed on this type"))
    if meta.generation < 0:
        errs.append(invalid(f"{path}.generation", str(meta.generation), "must be greater than or equal to 0"))
    errs.extend(validate_labels(meta.labels, f"{path}.labels"))
    errs.extend(validate_annotations(meta.annotations, f"{path}.annotations"))
    for finalizer in meta.finalizers:
        for msg in is_qualified_name(finalizer):
            errs.append(invalid(f"{path}.finalizers", gofmt.quote(finalizer), msg))
    return errs


def validate_labels(labels: Mapping[str, str], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    # Go iterates the map in random order; sorted keys make our output stable.
    for key in sorted(labels):
        for msg in is_qualified_name(key):
            errs.append(invalid(path, gofmt.quote(key), msg))
        for msg in is_valid_label_value(labels[key]):
            errs.append(invalid(path, gofmt.quote(labels[key]), msg))
    return errs


def validate_annotations(annotations: Mapping[str, str], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    total = 0
    for key in sorted(annotations):
        for msg in is_qualified_name(key.lower()):
            errs.append(invalid(path, gofmt.quote(key), msg))
        total += len(key.encode()) + len(annotations[key].encode())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(FieldError(path, "Too long", f"may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"))
    return errs


def validate_label_selector(selector: LabelSelector, path: str) -> list[FieldError]:
    """``ValidateLabelSelector`` with strict label values (these types postdate issue #99139)."""
    errs = validate_labels(selector.match_labels, f"{path}.matchLabels")
    for i, requirement in enumerate(selector.match_expressions):
        errs.extend(_validate_requirement(requirement, idx(f"{path}.matchExpressions", i)))
    return errs


def _validate_requirement(req: LabelSelectorRequirement, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if req.operator in ("In", "NotIn"):
        if not req.values:
            errs.append(required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif req.operator in ("Exists", "DoesNotExist"):
        if req.values:
            errs.append(
                forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
            )
    else:
        errs.append(invalid(f"{path}.operator", gofmt.quote(req.operator), "not a valid selector operator"))
    for msg in is_qualified_name(req.key):
        errs.append(invalid(f"{path}.key", gofmt.quote(req.key), msg))
    for i, value in enumerate(req.values):
        for msg in is_valid_label_value(value):
            errs.append(invalid(idx(f"{path}.values", i), gofmt.quote(value), msg))
    return errs


def validate_qualified_name(value: str, path: str) -> list[FieldError]:
    return [invalid(path, gofmt.quote(value), msg) for msg in is_qualified_name(value)]


# --- rules and match resources -------------------------------------------------------------------


def validate_resources(resources: Sequence[str], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if not resources:
        errs.append(required(path))
    with_wildcard_subresource: set[str] = set()  # x/*
    with_wildcard_resource: set[str] = set()  # */x
    has_double_wildcard = False
    has_single_wildcard = False
    has_resource_without_subresource = False
    for i, res_sub in enumerate(resources):
        if res_sub == "":
            errs.append(required(idx(path, i)))
            continue
        if res_sub == "*/*":
            has_double_wildcard = True
        if res_sub == "*":
            has_single_wildcard = True
        if "/" not in res_sub:
            # Kubernetes overwrites rather than accumulates here; we keep its behaviour.
            has_resource_without_subresource = res_sub != "*"
            continue
        res, sub = res_sub.split("/", 1)
        if res in with_wildcard_subresource:
            errs.append(
                invalid(idx(path, i), gofmt.quote(res_sub), f"if '{res}/*' is present, must not specify {res_sub}")
            )
        if sub in with_wildcard_resource:
            errs.append(
                invalid(idx(path, i), gofmt.quote(res_sub), f"if '*/{sub}' is present, must not specify {res_sub}")
            )
        if sub == "*":
            with_wildcard_subresource.add(res)
        if res == "*":
            with_wildcard_resource.add(sub)
    if len(resources) > 1 and has_double_wildcard:
        errs.append(invalid(path, go_slice(resources), "if '*/*' is present, must not specify other resources"))
    if has_single_wildcard and has_resource_without_subresource:
        errs.append(
            invalid(
                path, go_slice(resources), "if '*' is present, must not specify other resources without subresources"
            )
        )
    return errs


def validate_rule_with_operations(rule: NamedRuleWithOperations, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    ops_path = f"{path}.operations"
    if not rule.operations:
        errs.append(required(ops_path))
    if len(rule.operations) > 1 and "*" in rule.operations:
        errs.append(
            invalid(
                ops_path,
                go_slice(rule.operations, "admissionregistration.OperationType"),
                "if '*' is present, must not specify other operations",
            )
        )
    for i, op in enumerate(rule.operations):
        if op not in SUPPORTED_OPERATIONS:
            errs.append(not_supported(idx(ops_path, i), op, SUPPORTED_OPERATIONS))
    if not rule.api_groups:
        errs.append(required(f"{path}.apiGroups"))
    if len(rule.api_groups) > 1 and "*" in rule.api_groups:
        errs.append(
            invalid(
                f"{path}.apiGroups", go_slice(rule.api_groups), "if '*' is present, must not specify other API groups"
            )
        )
    if not rule.api_versions:
        errs.append(required(f"{path}.apiVersions"))
    if len(rule.api_versions) > 1 and "*" in rule.api_versions:
        errs.append(
            invalid(
                f"{path}.apiVersions",
                go_slice(rule.api_versions),
                "if '*' is present, must not specify other API versions",
            )
        )
    for i, version in enumerate(rule.api_versions):
        if version == "":
            errs.append(required(idx(f"{path}.apiVersions", i)))
    errs.extend(validate_resources(rule.resources, f"{path}.resources"))
    if rule.scope is not None and rule.scope not in VALID_SCOPES:
        errs.append(not_supported(f"{path}.scope", rule.scope, VALID_SCOPES))
    return errs


def validate_named_rule(rule: NamedRuleWithOperations, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, name in enumerate(rule.resource_names):
        for msg in validate_path_segment_name(name):
            errs.append(invalid(idx(f"{path}.resourceNames", i), gofmt.quote(name), msg))
        if name in seen:
            errs.append(duplicate(idx(f"{path}.resourceNames", i), name))
        else:
            seen.add(name)
    errs.extend(validate_rule_with_operations(rule, path))
    return errs


def validate_match_resources(match: MatchResources | None, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if match is None:
        return errs
    if match.match_policy is None:
        errs.append(required(f"{path}.matchPolicy"))
    elif match.match_policy not in SUPPORTED_MATCH_POLICIES:
        errs.append(not_supported(f"{path}.matchPolicy", match.match_policy, SUPPORTED_MATCH_POLICIES))
    for name, selector in (("namespaceSelector", match.namespace_selector), ("objectSelector", match.object_selector)):
        if selector is None:
            errs.append(required(f"{path}.{name}"))
        else:
            errs.extend(validate_label_selector(selector, f"{path}.{name}"))
    for i, rule in enumerate(match.resource_rules):
        errs.extend(validate_named_rule(rule, idx(f"{path}.resourceRules", i)))
    for i, rule in enumerate(match.exclude_resource_rules):
        errs.extend(validate_named_rule(rule, idx(f"{path}.excludeResourceRules", i)))
    return errs


def validate_mutating_operations(match: MatchResources, path: str) -> list[FieldError]:
    # Kubernetes reports these without rule or operation index.
    return [
        not_supported(path, op, SUPPORTED_MUTATING_OPERATIONS)
        for rule in match.resource_rules
        for op in rule.operations
        if op not in SUPPORTED_MUTATING_OPERATIONS
    ]


def validate_failure_policy(value: str | None, path: str) -> list[FieldError]:
    if value is None:
        return [required(path)]
    if value not in SUPPORTED_FAILURE_POLICIES:
        return [not_supported(path, value, SUPPORTED_FAILURE_POLICIES)]
    return []


def validate_param_kind(kind: ParamKind, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    api_version_path = f"{path}.apiVersion"
    if not kind.api_version:
        errs.append(required(api_version_path))
    elif kind.api_version.count("/") > 1:
        errs.append(
            invalid(api_version_path, gofmt.quote(kind.api_version),
                    f"unexpected GroupVersion string: {kind.api_version}")
        )
    else:
        if kind.api_version == "/":
            group, version = "", ""
        elif "/" in kind.api_version:
            group, version = kind.api_version.split("/", 1)
        else:
            group, version = "", kind.api_version
        if group:
            msgs = is_dns1123_subdomain(group)
            if msgs:
                errs.append(invalid(api_version_path, gofmt.quote(group), ",".join(msgs)))
        if not version:
            errs.append(invalid(api_version_path, gofmt.quote(kind.api_version), "version must be specified"))
        else:
            msgs = is_dns1035_label(version)
            if msgs:
                errs.append(invalid(api_version_path, gofmt.quote(version), ",".join(msgs)))
    if not kind.kind:
        errs.append(required(f"{path}.kind"))
    else:
        msgs = is_dns1035_label(kind.kind.lower())
        if msgs:
            errs.append(
                invalid(
                    f"{path}.kind",
                    gofmt.quote(kind.kind),
                    "may have mixed case, but should otherwise match: " + ",".join(msgs),
                )
            )
    return errs


def validate_param_ref(ref: ParamRef | None, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if ref is None:
        return errs
    if ref.name:
        for msg in validate_path_segment_name(ref.name):
            errs.append(invalid(f"{path}.name", gofmt.quote(ref.name), msg))
        if ref.selector is not None:
            errs.append(forbidden(f"{path}.name", "name and selector are mutually exclusive"))
    if ref.selector is not None:
        errs.extend(validate_label_selector(ref.selector, f"{path}.selector"))
        if ref.name:
            errs.append(forbidden(f"{path}.selector", "name and selector are mutually exclusive"))
    if not ref.name and ref.selector is None:
        errs.append(required(path, "one of name or selector must be specified"))
    action = ref.parameter_not_found_action
    if not action:
        errs.append(required(f"{path}.parameterNotFoundAction"))
    elif action not in PARAMETER_NOT_FOUND_ACTIONS:
        errs.append(not_supported(f"{path}.parameterNotFoundAction", action, PARAMETER_NOT_FOUND_ACTIONS))
    return errs


def validate_policy_name(name: str, path: str) -> list[FieldError]:
    if not name:
        return [required(path)]
    return [invalid(path, gofmt.quote(name), msg) for msg in name_is_dns_subdomain(name, False)]


def validate_validation_actions(actions: Sequence[str], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, action in enumerate(actions):
        if action not in VALID_VALIDATION_ACTIONS:
            errs.append(not_supported(idx(path, i), action, VALID_VALIDATION_ACTIONS))
        if action in seen:
            errs.append(duplicate(idx(path, i), action))
        seen.add(action)
    if "Deny" in seen and "Warn" in seen:
        errs.append(
            invalid(
                path,
                go_slice(actions, "admissionregistration.ValidationAction"),
                "must not contain both Deny and Warn (repeating the same validation failure information in the "
                "API response and headers serves no purpose)",
            )
        )
    if not seen:
        errs.append(required(path, "at least one validation action is required"))
    return errs


# --- policies, with CEL ---------------------------------------------------------------------------


class Validator:
    """Validates one object; CEL goes through ``compile`` so the caller keeps the compiled programs."""

    def __init__(self, compile_fn: CompileFn) -> None:
        self._compile = compile_fn

    def validate(self, obj: TopLevel) -> list[FieldError]:
        errs = validate_object_meta(obj.metadata)
        if isinstance(obj, ValidatingAdmissionPolicy):
            errs.extend(self._vap_spec(obj))
        elif isinstance(obj, MutatingAdmissionPolicy):
            errs.extend(self._map_spec(obj))
        elif isinstance(obj, ValidatingAdmissionPolicyBinding):
            spec = obj.spec
            errs.extend(validate_policy_name(spec.policy_name, "spec.policyName"))
            errs.extend(validate_param_ref(spec.param_ref, "spec.paramRef"))
            errs.extend(validate_match_resources(spec.match_resources, "spec.matchResources"))
            errs.extend(validate_validation_actions(spec.validation_actions, "spec.validationActions"))
        elif isinstance(obj, MutatingAdmissionPolicyBinding):
            mutating_spec = obj.spec
            errs.extend(validate_policy_name(mutating_spec.policy_name, "spec.policyName"))
            errs.extend(validate_param_ref(mutating_spec.param_ref, "spec.paramRef"))
            errs.extend(validate_match_resources(mutating_spec.match_resources, "spec.matchResources"))
            if mutating_spec.match_resources is not None:
                errs.extend(
                    validate_mutating_operations(mutating_spec.match_resources,
                                                 "spec.matchResources.resourceRules.operations")
                )
        return errs

    def _cel(self, site: ExpressionSite, shown: str) -> list[FieldError]:
        detail = self._compile(site)
        return [] if detail is None else [invalid(site.field_path, gofmt.quote(shown), detail)]

    def _match_constraints(self, match: MatchResources | None, mutating: bool) -> list[FieldError]:
        path = "spec.matchConstraints"
        if match is None:
            return [required(path)]
        errs = validate_match_resources(match, path)
        # At least one resourceRule is needed to provide type information.
        if not match.resource_rules:
            errs.append(required(f"{path}.resourceRules"))
        if mutating:
            errs.extend(validate_mutating_operations(match, f"{path}.resourceRules.operations"))
        return errs

    def _match_conditions(self, conditions: Sequence[MatchCondition]) -> list[FieldError]:
        path = "spec.matchConditions"
        errs: list[FieldError] = []
        if len(conditions) > MAX_MATCH_CONDITIONS:
            errs.append(
                FieldError(path, "Too many", f"must have at most {MAX_MATCH_CONDITIONS} items", str(len(conditions)))
            )
        names: set[str] = set()
        for i, condition in enumerate(conditions):
            item = idx(path, i)
            trimmed = gofmt.trim_space(condition.expression)
            if not trimmed:
                errs.append(required(f"{item}.expression"))
            else:
                # Match conditions use Kubernetes' stateless compiler: no variables are visible.
                errs.extend(self._cel(ExpressionSite(ExpressionKind.MATCH_CONDITION, i, f"{item}.expression",
                                                     trimmed), trimmed))
            if not condition.name:
                errs.append(required(f"{item}.name"))
            else:
                errs.extend(validate_qualified_name(condition.name, f"{item}.name"))
            if condition.name:
                if condition.name in names:
                    errs.append(duplicate(f"{item}.name", condition.name))
                else:
                    names.add(condition.name)
        return errs

    def _variables(self, variables: Sequence[Variable]) -> list[FieldError]:
        errs: list[FieldError] = []
        for i, variable in enumerate(variables):
            item = idx("spec.variables", i)
            if not gofmt.trim_space(variable.name):
                errs.append(required(f"{item}.name", "name is not specified"))
            elif not is_cel_identifier(variable.name):
                errs.append(invalid(f"{item}.name", gofmt.quote(variable.name), "name is not a valid CEL identifier"))
            if not gofmt.trim_space(variable.expression):
                errs.append(required(f"{item}.expression", "expression is not specified"))
            else:
                # Each variable sees only the ones declared before it.
                earlier = tuple(v.name for v in variables[:i])
                errs.extend(self._cel(ExpressionSite(ExpressionKind.VARIABLE, i, f"{item}.expression",
                                                     variable.expression, earlier), variable.expression))
        return errs

    def _vap_spec(self, policy: ValidatingAdmissionPolicy) -> list[FieldError]:
        spec = policy.spec
        names = tuple(v.name for v in spec.variables)
        errs = validate_failure_policy(spec.failure_policy, "spec.failurePolicy")
        if spec.param_kind is not None:
            errs.extend(validate_param_kind(spec.param_kind, "spec.paramKind"))
        errs.extend(self._match_constraints(spec.match_constraints, mutating=False))
        errs.extend(self._match_conditions(spec.match_conditions))
        errs.extend(self._variables(spec.variables))
        if not spec.validations and not spec.audit_annotations:
            detail = "validations or auditAnnotations must contain at least one item"
            errs.append(required("spec.validations", detail))
            errs.append(required("spec.auditAnnotations", detail))
            return errs
        for i, validation in enumerate(spec.validations):
            errs.extend(self._validation(validation, names, i))
        if spec.audit_annotations:
            if len(spec.audit_annotations) > MAX_AUDIT_ANNOTATIONS:
                errs.append(
                    invalid(
                        "spec.auditAnnotations",
                        f"[]admissionregistration.AuditAnnotation{{...{len(spec.audit_annotations)} items...}}",
                        f"must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations",
                    )
                )
            keys: set[str] = set()
            for i, annotation in enumerate(spec.audit_annotations):
                item = idx("spec.auditAnnotations", i)
                errs.extend(self._audit_annotation(policy.metadata.name, annotation, names, i))
                if annotation.key in keys:
                    errs.append(duplicate(f"{item}.key", annotation.key))
                keys.add(annotation.key)
        return errs

    def _validation(self, validation: Validation, names: tuple[str, ...], index: int) -> list[FieldError]:
        errs: list[FieldError] = []
        path = idx("spec.validations", index)
        expression = validation.expression
        if not gofmt.trim_space(expression):
            errs.append(required(f"{path}.expression", "expression is not specified"))
        else:
            errs.extend(self._cel(ExpressionSite(ExpressionKind.VALIDATION, index, f"{path}.expression", expression,
                                                 names), expression))
        message_expression = validation.message_expression
        if message_expression and not gofmt.trim_space(message_expression):
            errs.append(
                invalid(f"{path}.messageExpression", gofmt.quote(message_expression), "must be non-empty if specified")
            )
        elif gofmt.trim_space(message_expression):
            # The untrimmed text keeps the compiler's column numbers right, as in Kubernetes.
            errs.extend(self._cel(ExpressionSite(ExpressionKind.MESSAGE_EXPRESSION, index, f"{path}.messageExpression",
                                                 message_expression, names), message_expression))
        message = validation.message
        trimmed_message = gofmt.trim_space(message)
        if message and not trimmed_message:
            errs.append(invalid(f"{path}.message", gofmt.quote(message), "message must be non-empty if specified"))
        elif _NEWLINES.search(trimmed_message):
            errs.append(invalid(f"{path}.message", gofmt.quote(message), "message must not contain line breaks"))
        if validation.reason is not None and validation.reason not in SUPPORTED_REASONS:
            errs.append(not_supported(f"{path}.reason", validation.reason, SUPPORTED_REASONS))
        return errs

    def _audit_annotation(
        self, policy_name: str, annotation: AuditAnnotation, names: tuple[str, ...], index: int
    ) -> list[FieldError]:
        errs: list[FieldError] = []
        path = idx("spec.auditAnnotations", index)
        if policy_name:
            errs.extend(validate_qualified_name(f"{policy_name}/{annotation.key}", f"{path}.key"))
        else:
            errs.append(invalid(f"{path}.key", gofmt.quote(annotation.key), "requires metadata.name be non-empty"))
        trimmed = gofmt.trim_space(annotation.value_expression)
        value_path = f"{path}.valueExpression"
        if not trimmed:
            errs.append(required(value_path, "valueExpression is not specified"))
        elif len(trimmed.encode()) > MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH:
            errs.append(
                required(value_path, f"must not exceed {MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH} bytes in length")
            )
        else:
            errs.extend(self._cel(ExpressionSite(ExpressionKind.AUDIT_ANNOTATION, index, value_path, trimmed, names),
                                  annotation.value_expression))
        return errs

    def _map_spec(self, policy: MutatingAdmissionPolicy) -> list[FieldError]:
        spec = policy.spec
        names = tuple(v.name for v in spec.variables)
        errs = validate_failure_policy(spec.failure_policy, "spec.failurePolicy")
        if spec.param_kind is not None:
            errs.extend(validate_param_kind(spec.param_kind, "spec.paramKind"))
        errs.extend(self._match_constraints(spec.match_constraints, mutating=True))
        errs.extend(self._match_conditions(spec.match_conditions))
        errs.extend(self._variables(spec.variables))
        if not spec.mutations:
            errs.append(required("spec.mutations", "mutations must contain at least one item"))
        for i, mutation in enumerate(spec.mutations):
            errs.extend(self._mutation(mutation, names, i))
        if spec.reinvocation_policy == "":
            errs.append(required("spec.reinvocationPolicy"))
        elif spec.reinvocation_policy not in SUPPORTED_REINVOCATION_POLICIES:
            errs.append(
                not_supported("spec.reinvocationPolicy", spec.reinvocation_policy, SUPPORTED_REINVOCATION_POLICIES)
            )
        return errs

    def _mutation(self, mutation: Mutation, names: tuple[str, ...], index: int) -> list[FieldError]:
        path = idx("spec.mutations", index)
        if mutation.patch_type == "":
            return [required(f"{path}.patchType")]
        errs: list[FieldError] = []
        if mutation.patch_type == "JSONPatch":
            if mutation.json_patch is None:
                errs.append(required(f"{path}.jsonPatch", "must be specified when patchType is JSONPatch"))
            else:
                errs.extend(self._patch(ExpressionKind.JSON_PATCH, index, f"{path}.jsonPatch.expression",
                                        mutation.json_patch.expression, names))
            if mutation.apply_configuration is not None:
                errs.append(
                    invalid(
                        f"{path}.applyConfiguration",
                        '"{applyConfiguration}"',
                        "must not be specified when patchType is JSONPatch",
                    )
                )
        elif mutation.patch_type == "ApplyConfiguration":
            if mutation.apply_configuration is None:
                errs.append(
                    required(f"{path}.applyConfiguration", "must be specified when patchType is ApplyConfiguration")
                )
            else:
                errs.extend(self._patch(ExpressionKind.APPLY_CONFIGURATION, index,
                                        f"{path}.applyConfiguration.expression",
                                        mutation.apply_configuration.expression, names))
            if mutation.json_patch is not None:
                errs.append(
                    invalid(
                        f"{path}.jsonPatch",
                        '"{jsonPatch}"',
                        "must not be specified when patchType is ApplyConfiguration",
                    )
                )
        else:
            errs.append(not_supported(f"{path}.patchType", mutation.patch_type, SUPPORTED_PATCH_TYPES))
        return errs

    def _patch(self, kind: ExpressionKind, index: int, path: str, expression: str,
               names: tuple[str, ...]) -> list[FieldError]:
        trimmed = gofmt.trim_space(expression)
        if not trimmed:
            return [required(path)]
        return self._cel(ExpressionSite(kind, index, path, trimmed, names), trimmed)
