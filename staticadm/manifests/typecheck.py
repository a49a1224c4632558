"""Type checking of ValidatingAdmissionPolicy expressions against the kinds they can see, as kube-apiserver
does (``policy/validating/typechecking.go``) and reports as the policy's ``status.typeChecking`` warnings.

The kinds are those the policy's ``matchConstraints.resourceRules`` select, resolved like its
RESTMapper's ``KindsFor``: no wildcard groups or versions (such a rule is skipped), wildcard resources and
subresources left out, at most 10 kinds. A kind without a built-in schema is not checked (kube-apiserver
skips what its schema resolver cannot find). Each ``spec.validations[i].expression`` and
``messageExpression`` is compiled with ``object`` and ``oldObject`` of each kind's type, after the
policy's variables (typed by the same compilation); what fails becomes one warning per field, each line
naming the kind as ``group/version, Kind=Kind``. Advisory, as in Kubernetes: warnings never change what
is loaded or how it evaluates.
"""

from __future__ import annotations

from collections.abc import Iterable

from staticadm import gofmt
from staticadm.cel import admission_environment
from staticadm.cel.schema_types import has_kind, kind_type
from staticadm.kinds.resources import BUILTIN_RESOURCES
from staticadm.manifests.errors import ManifestError
from staticadm.manifests.loader import LoadResult
from staticadm.model import ValidatingAdmissionPolicy

MAX_TYPES_TO_CHECK = 10

_KINDS_BY_RESOURCE: dict[tuple[str, str], list[str]] = {}
for (_group, _kind), (_resource, _namespaced) in BUILTIN_RESOURCES.items():
    _KINDS_BY_RESOURCE.setdefault((_group, _resource), []).append(_kind)


def kinds_for(group: str, version: str, resource: str) -> list[str]:
    """``RESTMapper.KindsFor`` over the built-in kinds (of Kubernetes 1.36)."""
    return sorted(kind for kind in _KINDS_BY_RESOURCE.get((group, resource), []) if has_kind(group, version, kind))


def types_to_check(policy: ValidatingAdmissionPolicy) -> list[tuple[str, str, str]]:
    """``typesToCheck``: (group, version, kind) sorted, at most MAX_TYPES_TO_CHECK."""
    constraints = policy.spec.match_constraints
    if constraints is None or not constraints.resource_rules:
        return []
    found: set[tuple[str, str, str]] = set()
    count = 0
    for rule in constraints.resource_rules:
        groups, versions = list(rule.api_groups), list(rule.api_versions)
        if any("*" in group for group in groups) or any("*" in version for version in versions):
            continue
        resources = [resource for resource in rule.resources if "*" not in resource and "/" not in resource]
        if not groups or not versions or not resources:
            continue
        for group in sorted(groups):
            for version in sorted(versions):
                for resource in sorted(resources):
                    for kind in kinds_for(group, version, resource):
                        found.add((group, version, kind))
                        count += 1
                        if count == MAX_TYPES_TO_CHECK:
                            return sorted(found)
    return sorted(found)


def _gvk_text(group: str, version: str, kind: str) -> str:
    # schema.GroupVersionKind's String(): the core group is empty before the slash.
    return f"{group}/{version}, Kind={kind}"


def type_warnings(policy: ValidatingAdmissionPolicy) -> list[ManifestError]:
    """One warning per expression that fails to check against some kind, in kube-apiserver's wording."""
    environment = admission_environment(False)
    checked = []
    for group, version, kind in types_to_check(policy):
        object_type = kind_type(group, version, kind)
        if object_type is None:
            continue
        variable_types: dict[str, str] = {}
        for variable in policy.spec.variables:
            result = environment.type_check(variable.expression, object_type, variable_types)
            variable_types[variable.name] = result.result_type if not result.errors else "dyn"
        checked.append((_gvk_text(group, version, kind), object_type, variable_types))
    if not checked:
        return []
    warnings = []
    for index, validation in enumerate(policy.spec.validations):
        for field_name, source in (("expression", validation.expression),
                                   ("messageExpression", validation.message_expression)):
            if not gofmt.trim_space(source):
                continue
            lines = []
            for gvk, object_type, variable_types in checked:
                result = environment.type_check(source, object_type, variable_types)
                if result.errors:
                    lines.append(f"{gvk}: {result.errors}\n")
            if lines:
                warnings.append(_warning(policy, f"spec.validations[{index}].{field_name}", "\n".join(lines)))
    return warnings


def _warning(policy: ValidatingAdmissionPolicy, field_path: str, text: str) -> ManifestError:
    origin = policy.origin
    text = text.rstrip()
    return ManifestError(origin.path, f"{field_path}: type checking: {text}", document=origin.document,
                         items=origin.items, kind=policy.KIND, name=policy.metadata.name, field=field_path)


def policies_type_warnings(policies: Iterable[object]) -> list[ManifestError]:
    return [warning for policy in policies if isinstance(policy, ValidatingAdmissionPolicy)
            for warning in type_warnings(policy)]


def load_type_warnings(result: LoadResult) -> list[ManifestError]:
    """The warnings of every policy of a load that compiled (one that did not has its errors already)."""
    return policies_type_warnings(compiled.policy for compiled in result.compiled_validating)


def changed_policies_type_warnings(objects: Iterable[object], changed: Iterable[str]) -> list[ManifestError]:
    """For the daemon after a reload: warnings of the policies it added or changed ("Kind/name")."""
    wanted = set(changed)
    return policies_type_warnings(policy for policy in objects
                                  if isinstance(policy, ValidatingAdmissionPolicy)
                                  and f"{policy.KIND}/{policy.metadata.name}" in wanted)
