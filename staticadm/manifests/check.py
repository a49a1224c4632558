"""``staticadm check``: load manifest directories and report what kube-apiserver would say, plus
warnings about configurations that load but probably do not do what their author meant."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

import yaml

from staticadm.colour import Palette
from staticadm.manifests.cluster_reads import AUTHORIZER, NAMESPACE_OBJECT, cluster_reads
from staticadm.manifests.errors import ManifestError
from staticadm.manifests.files import REFUSAL_PREFIX, read_directory, read_files, refusals
from staticadm.manifests.loader import DEFAULT_MAX_FILE_BYTES, LoadResult, load_manifest_directory, load_manifest_paths
from staticadm.manifests.typecheck import load_type_warnings
from staticadm.model import LabelSelector, MatchResources, NamedRuleWithOperations

#: The only namespace label the daemon can always evaluate: kube-apiserver sets it on every namespace.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True)
class Finding:
    """What a check beyond loading found about a valid directory (the control-plane replay): a warning,
    an error with ``--strict``, and its details for ``-o json`` under ``key``."""

    problem: ManifestError
    key: str
    details: Mapping[str, object]
    #: ``strict``: a warning, an error with --strict; ``error``: always an error (a policy the installed
    #: registration does not send its requests, with --webhook-config-dir); ``warning``: never one.
    severity: str = "strict"


#: The report's type, as the other machine-readable reports carry theirs.
REPORT_API_VERSION = "staticadm.io/v1alpha1"
REPORT_KIND = "CheckReport"


#: A check run on each directory that loads; what it finds is reported beside the loader's warnings.
ExtraCheck = Callable[[LoadResult], Sequence[Finding]]


def _refused(result: LoadResult, refused: Sequence[ManifestError]) -> LoadResult:
    """``result`` with the daemon's refusals as errors, in place of the loader's warnings about the same paths."""
    if not refused:
        return result
    paths = {error.path for error in refused}
    warnings = tuple(warning for warning in result.warnings
                     if not (warning.path in paths and warning.message.endswith("is world-writable")))
    return dataclasses.replace(result, errors=(*refused, *result.errors), warnings=warnings)


def skipped_file_warnings(directory: str, skipped: Sequence[str]) -> list[ManifestError]:
    """Files of the directory neither kube-apiserver nor the daemon reads, for their extension."""
    return [ManifestError(os.path.join(directory, name), "skipped: only files ending in .yaml, .yml or .json are "
                                                         "read (kube-apiserver skips the others too)")
            for name in skipped]


def _load_as_the_daemon(directory: str, allow_world_writable: bool) -> LoadResult:
    contents = read_directory(directory, max_file_bytes=DEFAULT_MAX_FILE_BYTES)
    result = load_manifest_directory(directory, contents=contents)
    if contents.skipped:
        result = dataclasses.replace(result, warnings=(*result.warnings,
                                                       *skipped_file_warnings(directory, contents.skipped)))
    return result if allow_world_writable else _refused(result, refusals(contents, directory))


def _load_files_as_the_daemon(paths: Sequence[str], allow_world_writable: bool) -> LoadResult:
    result = load_manifest_paths(list(paths))
    if allow_world_writable:
        return result
    refused: list[ManifestError] = []
    for path in paths:
        if os.path.isdir(path):
            refused.extend(refusals(read_directory(path, max_file_bytes=DEFAULT_MAX_FILE_BYTES), path))
        else:
            refused.extend(refusals(read_files([path], max_file_bytes=DEFAULT_MAX_FILE_BYTES), ""))
    return _refused(result, refused)


def run_check(directories: Sequence[str], output: str, stdout: TextIO, stderr: TextIO,
              files: Sequence[str] = (), strict: bool = False, extra_checks: Sequence[ExtraCheck] = (),
              allow_world_writable: bool = False) -> int:
    """Returns 0 when every directory (and the set of ``files``, checked together as if they were one
    directory) would load, 1 otherwise (warnings do not fail the check). What the daemon refuses to load
    (world-writable paths, unless ``allow_world_writable`` as ``--allow-world-writable-manifests``) is an
    error here too. With ``strict``, type-checking warnings and the ``extra_checks``' findings are errors."""
    results = [_load_as_the_daemon(directory, allow_world_writable) for directory in directories]
    if files:
        results.append(_load_files_as_the_daemon(files, allow_world_writable))
    reports = []
    promoted: list[tuple[int, int, int]] = []
    found: list[list[Finding]] = []
    for result in results:
        type_warnings = load_type_warnings(result)
        findings = [finding for check in extra_checks for finding in check(result)] if result.ok else []
        found.append(findings)
        problems = [finding.problem for finding in findings if finding.severity == "strict"]
        always = [finding.problem for finding in findings if finding.severity == "error"]
        advisory = [finding.problem for finding in findings if finding.severity == "warning"]
        promoted.append((len(type_warnings), len(problems), len(always)) if strict else (0, 0, len(always)))
        if always:
            result = dataclasses.replace(result, errors=(*result.errors, *always))
        if strict and (type_warnings or problems):
            result = dataclasses.replace(result, errors=(*result.errors, *type_warnings, *problems))
            type_warnings, problems = [], []
        reports.append((result, (*semantic_warnings(result), *type_warnings, *problems, *advisory)))
    if output in ("json", "yaml"):
        document = {
            "apiVersion": REPORT_API_VERSION,
            "kind": REPORT_KIND,
            "valid": all(result.ok for result, _ in reports),
            "directories": [_json_report(result, warnings, findings)
                            for (result, warnings), findings in zip(reports, found, strict=True)],
        }
        if output == "json":
            stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")
        else:
            stdout.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    else:
        for (result, warnings), (type_errors, found_errors, unregistered) in zip(reports, promoted, strict=True):
            _text_report(result, warnings, stdout, type_errors, found_errors, unregistered)
    return 0 if all(result.ok for result, _ in reports) else 1


def semantic_warnings(result: LoadResult) -> tuple[ManifestError, ...]:
    """Loader warnings plus the advisory checks; computed on whatever decoded, even if invalid."""
    warnings = list(result.warnings)
    if result.ok and not result.policies and not result.bindings:
        # Valid (kube-apiserver loads it) but almost certainly not what was meant: nothing is enforced.
        warnings.append(ManifestError(result.directory, "the directory holds no policies or bindings (manifest "
                                                        "files end in .yaml, .yml or .json), so every request "
                                                        "is allowed"))
    bound = {(type(b).__name__.removesuffix("Binding"), b.spec.policy_name) for b in result.bindings}
    for policy in result.policies:
        if (policy.KIND, policy.name) not in bound:
            warnings.append(_warn(policy, "policy has no binding, so it is never evaluated"))
        constraints = policy.spec.match_constraints
        if constraints is not None:
            warnings.extend(_namespace_label_warnings(policy, constraints.namespace_selector, "spec.matchConstraints"))
    warnings.extend(_cluster_data_warnings(result))
    policies = {(p.KIND, p.name): p for p in result.policies}
    for binding in result.bindings:
        match = binding.spec.match_resources
        if match is None:
            continue
        warnings.extend(_namespace_label_warnings(binding, match.namespace_selector, "spec.matchResources"))
        bound_policy = policies.get((binding.KIND.removesuffix("Binding"), binding.spec.policy_name))
        constraints = bound_policy.spec.match_constraints if bound_policy is not None else None
        if bound_policy is not None and constraints is not None and not _can_intersect(constraints, match):
            warnings.append(
                _warn(
                    binding,
                    f"matchResources cannot intersect the matchConstraints of policy "
                    f'"{bound_policy.name}", so this binding never applies',
                    "spec.matchResources.resourceRules",
                )
            )
    return tuple(warnings)


def _warn(obj: object, message: str, field_path: str = "") -> ManifestError:
    origin = obj.origin  # type: ignore[attr-defined]
    return ManifestError(
        origin.path,
        message,
        document=origin.document,
        items=origin.items,
        kind=obj.KIND,  # type: ignore[attr-defined]
        name=obj.metadata.name,  # type: ignore[attr-defined]
        field=field_path,
    )


def _namespace_label_warnings(obj: object, selector: LabelSelector | None, path: str) -> list[ManifestError]:
    if selector is None:
        return []
    keys = [*selector.match_labels, *(r.key for r in selector.match_expressions)]
    other = sorted({k for k in keys if k != NAMESPACE_NAME_LABEL})
    if not other:
        return []
    return [
        _warn(
            obj,
            f"namespaceSelector uses namespace labels {', '.join(other)}; the daemon reads labels other than "
            f"{NAMESPACE_NAME_LABEL} only from kube-apiserver (serve --kubeconfig) or a --namespaces file; "
            "without either, every request this selector looks at fails under the failurePolicy",
            f"{path}.namespaceSelector",
        )
    ]


def _can_intersect(policy: MatchResources, binding: MatchResources) -> bool:
    """Whether some request could match both. Conservative: when unsure, say yes."""
    if not binding.resource_rules or not policy.resource_rules:
        return True
    # With Equivalent matching a request may be matched through another group/version of the same
    # resource, so only compare groups and versions when both sides match exactly.
    exact = policy.match_policy == "Exact" and binding.match_policy == "Exact"
    return any(_rules_intersect(p, b, exact) for p in policy.resource_rules for b in binding.resource_rules)


def _overlap(a: Sequence[str], b: Sequence[str]) -> bool:
    return "*" in a or "*" in b or bool(set(a) & set(b))


def _resource_overlap(a: str, b: str) -> bool:
    def split(value: str) -> tuple[str, str]:
        resource, _, sub = value.partition("/")
        return resource, sub

    (ra, sa), (rb, sb) = split(a), split(b)
    resource = ra == "*" or rb == "*" or ra == rb
    # "x/*" also matches the main resource "x" (sub "").
    sub = sa == "*" or sb == "*" or sa == sb
    return resource and sub


def _rules_intersect(a: NamedRuleWithOperations, b: NamedRuleWithOperations, exact: bool) -> bool:
    if not _overlap(a.operations, b.operations):
        return False
    if exact and not (_overlap(a.api_groups, b.api_groups) and _overlap(a.api_versions, b.api_versions)):
        return False
    if not any(_resource_overlap(x, y) for x in a.resources for y in b.resources):
        return False
    if {a.scope, b.scope} == {"Cluster", "Namespaced"}:
        return False
    return not (a.resource_names and b.resource_names and not set(a.resource_names) & set(b.resource_names))


def _json_report(result: LoadResult, warnings: Sequence[ManifestError],
                 findings: Sequence[Finding]) -> dict[str, object]:
    extra: dict[str, list[Mapping[str, object]]] = {}
    for finding in findings:
        extra.setdefault(finding.key, []).append(finding.details)
    return {
        "directory": result.directory,
        "valid": result.ok,
        "contentHash": result.content_hash,
        "validatingPolicies": [p.name for p in result.validating_policies],
        "validatingBindings": [b.name for b in result.validating_bindings],
        "mutatingPolicies": [p.name for p in result.mutating_policies],
        "mutatingBindings": [b.name for b in result.mutating_bindings],
        "errors": [e.to_json() for e in result.errors],
        "warnings": [w.to_json() for w in warnings],
        **extra,
    }


def _text_report(result: LoadResult, warnings: Sequence[ManifestError], out: TextIO, type_errors: int = 0,
                 found_errors: int = 0, unregistered: int = 0) -> None:
    """``type_errors``: how many of the errors are type-checking warnings made errors by --strict, which
    kube-apiserver does not refuse (it loads the policy and reports them in its status); ``found_errors``:
    how many are the extra checks' findings (the control-plane replay), made errors by --strict too;
    ``unregistered``: policies the installed webhook registration does not send (all) their requests."""
    strict_errors = type_errors + found_errors + unregistered
    paint = Palette.for_stream(out)
    counts = (
        f"{len(result.validating_policies)} validating and {len(result.mutating_policies)} mutating policies, "
        f"{len(result.validating_bindings)} validating and {len(result.mutating_bindings)} mutating bindings"
    )
    if result.ok:
        out.write(f"{result.directory}: {paint.good('OK')} ({counts}; hash {result.content_hash or 'none'})\n")
    else:
        plural = "error" if len(result.errors) == 1 else "errors"
        refused = len(result.errors) - strict_errors
        if not refused and unregistered:
            verdict = (f"{unregistered} policy(ies) not sent (all) their requests by the installed webhook "
                       "registration; kube-apiserver would load the directory and never ask those policies (fix: "
                       "staticadm webhook-config ... --out-dir, docs/deployment.md)"
                       + (f"; {strict_errors - unregistered} more error(s) made by --strict"
                          if strict_errors > unregistered else ""))
        elif not refused and not found_errors:
            verdict = (f"--strict: {strict_errors} type-checking {plural}; kube-apiserver would load it (it reports "
                       f"type checking in the policy's status, and the expressions fail at run time)")
        elif not refused:
            verdict = (f"--strict: {found_errors} control-plane write(s) refused"
                       + (f" and {type_errors} type-checking warning(s)" if type_errors else "")
                       + "; kube-apiserver would load it, and the policies would block the control plane")
        elif strict_errors:
            verdict = (f"kube-apiserver would refuse it ({refused} of them; {strict_errors} are warnings made "
                       "errors by --strict)")
        elif all(error.message.startswith(REFUSAL_PREFIX) for error in result.errors):
            verdict = "staticadm serve would refuse to load it"
        else:
            verdict = "kube-apiserver would refuse it"
        out.write(f"{result.directory}: {paint.bad('INVALID')}, {len(result.errors)} {plural}; {verdict}\n")
    for error in result.errors:
        out.write(f"  {paint.bad('error')}: {error}\n")
    for warning in warnings:
        out.write(f"  {paint.warn('warning')}: {warning}\n")


_CLUSTER_SOURCES = {
    NAMESPACE_OBJECT: "namespaceObject (from kube-apiserver with serve --kubeconfig, or a --namespaces file)",
    AUTHORIZER: "authorizer checks (SubjectAccessReview, with serve --kubeconfig)",
}


def _cluster_data_warnings(result: LoadResult) -> list[ManifestError]:
    """Policies that read what only kube-apiserver knows: namespaceObject and authorizer checks."""
    policies = {(policy.KIND, policy.name): policy for policy in result.policies}
    warnings = []
    for entry in cluster_reads([*result.policies, *result.bindings]):
        through = f" (bound by {', '.join(entry.bindings)})" if entry.bindings else ""
        needs = " and ".join(_CLUSTER_SOURCES[read] for read in entry.reads)
        warnings.append(_warn(policies[(entry.kind, entry.policy)], f"the policy{through} reads {needs}; without "
                                                                    "them its expressions fail and the failurePolicy "
                                                                    "decides"))
    return warnings
