"""Kyverno's test files (``cli.kyverno.io/v1alpha1`` ``Test``, ``kyverno-test.yaml``) whose policies are
ValidatingAdmissionPolicies, run unchanged with staticadm's engine.

Read as Kyverno's CLI reads them (``kubectl kyverno test``, cmd/cli/kubectl-kyverno): ``policies`` and
``resources`` are files relative to the test file; ``variables`` a ``Values`` file (or ``values`` inline,
which wins) whose ``namespaceSelector`` entries (and ``namespaces`` objects, which win) give the labels of
the resources' namespaces; ``userinfo`` a ``UserInfo`` file naming the requesting user (without one,
Kyverno's sentinel user ``system:kyverno:background-scan``); each entry of ``results`` expects ``result``
(pass, fail, skip, error) of ``policy`` for each resource named in ``resources`` (``name`` or
``namespace/name``; none named: every resource). A policy the files bind to nothing is evaluated as Kyverno
evaluates it, as if one binding (``validationActions: [Deny]``, no ``matchResources``) bound it.

Each resource is one admission request (CREATE, or the entry's ``operation``), evaluated as kube-apiserver
evaluates it; a policy's result is its report result (``decision_report``): skip when it or none of its
bindings matched, fail when a validation failed, error when an expression failed, else pass. Where Kyverno's
CLI evaluates differently (it checks a bound policy's matchConstraints only through the resource loader,
counts an unmatched resource as a pass whatever was expected, and takes the last binding's result), the
answer here is kube-apiserver's. Whatever a file holds that cannot be honoured (other policy kinds,
exceptions, params, payloads, patched or generated resources, global values) is an error naming the field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from staticadm.admission.endpoints import combined_response, review_request
from staticadm.admission.namespaces import NamespaceFileError, NamespaceSource, parse_namespaces
from staticadm.admission.request import RequestError, parse_admission_review
from staticadm.manifests.files import ManifestFile
from staticadm.manifests.loader import STATIC_SUFFIX, load_manifest_files
from staticadm.offline.decision_report import decision, request_summary
from staticadm.offline.object_lists import ListedObject, ObjectListError, expand_lists
from staticadm.offline.request_builder import ObjectInputError, RequestSettings, review_for_object
from staticadm.policytest.runner import CaseResult, FileResult
from staticadm.policytest.selection import CaseSelector
from staticadm.policytest.spec import FieldErrors, TestFileError, User
from staticadm.snapshot import Snapshot, build_snapshot
from staticadm.yamljson import ParseError, parse_yaml_stream

API_VERSION = "cli.kyverno.io/v1alpha1"
#: Kyverno's CLI decodes any ``kind: Test`` document of a kyverno-test.yaml into its v1alpha1 Test; its own
#: tests also carry the older ``kyverno.io/v1``.
API_VERSIONS = (API_VERSION, "kyverno.io/v1")
KIND = "Test"
#: The user Kyverno's CLI evaluates a ValidatingAdmissionPolicy as when the test names none
#: (pkg/admissionpolicy.ResolveUser fills username, uid and groups with it).
KYVERNO_SENTINEL_USER = "system:kyverno:background-scan"
RESULTS = ("pass", "fail", "skip", "error")
OPERATIONS = ("CREATE", "UPDATE", "DELETE")
_POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
_ADMISSION_V1 = "admissionregistration.k8s.io/v1"

#: Fields of a Kyverno Test that staticadm cannot honour, and why: an error naming the field, never ignored.
_UNSUPPORTED_FIELDS = {
    "jsonPayload": "JSON payloads are evaluated by Kyverno's ValidatingPolicies, not by admission",
    "jsonPayloads": "JSON payloads are evaluated by Kyverno's ValidatingPolicies, not by admission",
    "httpPayloads": "HTTP payloads are evaluated by Kyverno's authorization policies, not by admission",
    "envoyPayloads": "Envoy payloads are evaluated by Kyverno's authorization policies, not by admission",
    "targetResources": "target resources are for Kyverno's mutate-existing rules",
    "context": "a context file feeds Kyverno's CEL libraries, which kube-apiserver has not",
    "clusterResources": "cluster resources feed Kyverno's API calls, which kube-apiserver's policies cannot make",
    "apiCallResponses": "API call mocks feed Kyverno's http and context libraries, which kube-apiserver has not",
    "globalContextEntries": "global context entries are Kyverno's, kube-apiserver has none",
    "checks": "checks assert on Kyverno's own engine responses",
}
_RESULT_UNSUPPORTED = {
    "rule": "a ValidatingAdmissionPolicy has no rules",
    "patchedResources": "a ValidatingAdmissionPolicy patches nothing",
    "generatedResource": "a ValidatingAdmissionPolicy generates nothing",
    "generatedResources": "a ValidatingAdmissionPolicy generates nothing",
    "cloneSourceResource": "a ValidatingAdmissionPolicy generates nothing",
    "isMutatingAdmissionPolicy": "staticadm runs Kyverno tests of ValidatingAdmissionPolicies only",
    "isValidatingPolicy": "staticadm runs Kyverno tests of ValidatingAdmissionPolicies only",
    "isDeletingPolicy": "staticadm runs Kyverno tests of ValidatingAdmissionPolicies only",
    "isImageValidatingPolicy": "staticadm runs Kyverno tests of ValidatingAdmissionPolicies only",
    "isGeneratingPolicy": "staticadm runs Kyverno tests of ValidatingAdmissionPolicies only",
    "isMutatingPolicy": "staticadm runs Kyverno tests of ValidatingAdmissionPolicies only",
}
_RESULT_FIELDS = ("policy", "kind", "resources", "resourceSpecs", "result", "isValidatingAdmissionPolicy", "operation",
                  "failOnMissingResources", *_RESULT_UNSUPPORTED)
_TOP_FIELDS = ("apiVersion", "kind", "metadata", "name", "policies", "resources", "variables", "values", "userinfo",
               "results", "exceptions", "paramResources", *_UNSUPPORTED_FIELDS)
_VALUES_FIELDS = ("namespaceSelector", "namespaces", "globalValues", "policies", "subresources")


@dataclass(frozen=True, slots=True)
class PolicyDocument:
    """One ValidatingAdmissionPolicy or binding of the test's policy files, where it came from."""

    file: str
    document: int
    value: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resource:
    file: str
    listed: ListedObject

    @property
    def kind(self) -> str:
        return str(self.listed.value.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.listed.value.get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str((self.listed.value.get("metadata") or {}).get("namespace") or "")


@dataclass(frozen=True, slots=True)
class Expected:
    """One entry of ``results``: ``result`` of ``policy`` for each resource it names."""

    index: int
    policy: str
    kind: str
    resources: tuple[str, ...]
    result: str
    operation: str
    #: ``resourceSpecs``: (apiVersion, kind, namespace, name) of each, "" where the spec leaves it out.
    resource_specs: tuple[tuple[str, str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class KyvernoTest:
    path: str
    document: int
    name: str
    policies: tuple[PolicyDocument, ...]
    resources: tuple[Resource, ...]
    #: Labels per namespace name (``namespaceSelector``, overridden by ``namespaces``).
    namespace_labels: Mapping[str, Mapping[str, str]]
    user: User
    results: tuple[Expected, ...]


def is_kyverno_test(document: Any) -> bool:
    return isinstance(document, dict) and document.get("apiVersion") in API_VERSIONS and document.get("kind") == KIND


def _strings(value: Any, errors: FieldErrors, path: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        errors.add(path, "must be a list of strings")
        return []
    return list(value)


def _documents(base: Path, reference: str, errors: FieldErrors, path: str) -> list[tuple[str, int, Any]]:
    """(file, document index, value) of every non-empty document of a file, or of the YAML files directly in a
    directory (in name order), as Kyverno's loader reads a path."""
    target = base / reference
    if target.is_dir():
        files = sorted(child for child in target.iterdir()
                       if child.is_file() and child.suffix.lower() in (".yaml", ".yml", ".json"))
    else:
        files = [target]
    found: list[tuple[str, int, Any]] = []
    for file in files:
        try:
            documents = parse_yaml_stream(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            errors.add(path, f"cannot read {file}: {error}")
            continue
        except ParseError as error:
            errors.add(path, f"{file}: not YAML: {error.problem}")
            continue
        found.extend((str(file), index, document) for index, document in enumerate(documents)
                     if document is not None)
    return found


def _policies(spec: dict[str, Any], base: Path, errors: FieldErrors) -> tuple[PolicyDocument, ...]:
    found: list[PolicyDocument] = []
    references = _strings(spec.get("policies"), errors, "policies")
    if not references and "policies" not in spec:
        errors.add("policies", "required: the files of the ValidatingAdmissionPolicies under test")
    for position, reference in enumerate(references):
        for file, index, document in _documents(base, reference, errors, f"policies[{position}]"):
            kind = document.get("kind") if isinstance(document, dict) else None
            version = document.get("apiVersion") if isinstance(document, dict) else None
            if kind not in _POLICY_KINDS:
                errors.add(f"policies[{position}]", f"{file} document {index}: {version} {kind} is not a "
                           "ValidatingAdmissionPolicy or binding: staticadm runs Kyverno tests of "
                           "ValidatingAdmissionPolicies only")
            elif version != _ADMISSION_V1:
                errors.add(f"policies[{position}]", f"{file} document {index}: {kind} {version}: staticadm "
                           f"loads {_ADMISSION_V1} only, as kube-apiserver's static manifests")
            else:
                found.append(PolicyDocument(file, index, document))
    if references and not any(document.value["kind"] == _POLICY_KINDS[0] for document in found):
        errors.add("policies", "holds no ValidatingAdmissionPolicy")
    return tuple(found)


def _resources(spec: dict[str, Any], base: Path, errors: FieldErrors) -> tuple[Resource, ...]:
    found: list[Resource] = []
    references = _strings(spec.get("resources"), errors, "resources")
    if not references:
        errors.add("resources", "required: the files of the resources the policies are applied to")
    for position, reference in enumerate(references):
        for file, index, document in _documents(base, reference, errors, f"resources[{position}]"):
            try:
                listed = expand_lists(document)
            except ObjectListError as error:
                errors.add(f"resources[{position}]", f"{file} document {index}: {error}")
                continue
            found.extend(Resource(file, entry) for entry in listed)
    return tuple(found)


def _values(spec: dict[str, Any], base: Path, errors: FieldErrors) -> dict[str, dict[str, str]]:
    """Namespace labels from ``values`` (inline) or else the ``variables`` file, as Kyverno's
    variables.New prefers them; whatever else they hold cannot be honoured."""
    if "values" in spec and "variables" in spec:
        errors.add("variables", "give variables or values, not both (Kyverno's CLI would ignore the variables file)")
        return {}
    if "values" in spec:
        values, where = spec["values"], "values"
    elif "variables" in spec:
        reference = errors.string(spec["variables"], "variables")
        documents = _documents(base, reference, errors, "variables") if reference else []
        if len(documents) != 1:
            if documents:
                errors.add("variables", f"{base / reference} must hold one Values document, holds {len(documents)}")
            return {}
        values, where = documents[0][2], f"variables ({base / reference})"
        if isinstance(values, dict):
            values = {key: value for key, value in values.items() if key not in ("apiVersion", "kind", "metadata")}
    else:
        return {}
    values = errors.mapping(values, where, _VALUES_FIELDS)
    for field, why in (("globalValues", "global values (request.operation, ...) feed Kyverno's own engine; give an "
                                        "entry's operation instead"),
                       ("policies", "per-policy values feed Kyverno rules' variables; a ValidatingAdmissionPolicy "
                                    "has none"),
                       ("subresources", "staticadm maps subresources from kube-apiserver's own tables")):
        if values.get(field):
            errors.add(f"{where}.{field}", f"cannot be honoured: {why}")
    labels: dict[str, dict[str, str]] = {}
    for position, entry in enumerate(values.get("namespaceSelector") or []):
        selector = errors.mapping(entry, f"{where}.namespaceSelector[{position}]", ("name", "labels"), ("name",))
        name = errors.string(selector.get("name", ""), f"{where}.namespaceSelector[{position}].name")
        given = selector.get("labels") or {}
        if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
            errors.add(f"{where}.namespaceSelector[{position}].labels", "must map label keys to strings")
            continue
        labels[name] = dict(given)
    for position, entry in enumerate(values.get("namespaces") or []):
        metadata = entry.get("metadata") if isinstance(entry, dict) else None
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            errors.add(f"{where}.namespaces[{position}]", "must be a Namespace object with metadata.name")
            continue
        labels[metadata["name"]] = dict(metadata.get("labels") or {})
    return labels


def _user(spec: dict[str, Any], base: Path, errors: FieldErrors) -> User:
    if "userinfo" not in spec:
        return User(KYVERNO_SENTINEL_USER, KYVERNO_SENTINEL_USER, (KYVERNO_SENTINEL_USER,))
    reference = errors.string(spec["userinfo"], "userinfo")
    documents = _documents(base, reference, errors, "userinfo") if reference else []
    if len(documents) != 1:
        if documents:
            errors.add("userinfo", f"{base / reference} must hold one UserInfo document, holds {len(documents)}")
        return User()
    where = f"userinfo ({base / reference})"
    info = errors.mapping(documents[0][2], where, ("apiVersion", "kind", "metadata", "userInfo", "roles",
                                                   "clusterRoles"))
    for field in ("roles", "clusterRoles"):
        if info.get(field):
            errors.add(f"{where}.{field}", "cannot be honoured: RBAC roles feed Kyverno's own match; kube-apiserver "
                                           "gives a ValidatingAdmissionPolicy the user's name, uid and groups only")
    user = errors.mapping(info.get("userInfo") or {}, f"{where}.userInfo", ("username", "uid", "groups", "extra"))
    if user.get("extra"):
        errors.add(f"{where}.userInfo.extra", "cannot be honoured: staticadm's requests carry no user extra")
    groups = _strings(user.get("groups"), errors, f"{where}.userInfo.groups")
    # Kyverno's ResolveUser fills what the file leaves empty with its sentinel.
    return User(errors.string(user.get("username") or KYVERNO_SENTINEL_USER, f"{where}.userInfo.username"),
                errors.string(user.get("uid") or KYVERNO_SENTINEL_USER, f"{where}.userInfo.uid"),
                tuple(groups) or (KYVERNO_SENTINEL_USER,))


def _results(spec: dict[str, Any], errors: FieldErrors) -> tuple[Expected, ...]:
    entries = spec.get("results")
    if not isinstance(entries, list) or not entries:
        errors.add("results", "required: a non-empty list of expected results")
        return ()
    found = []
    for index, value in enumerate(entries):
        path = f"results[{index}]"
        entry = errors.mapping(value, path, _RESULT_FIELDS, ("policy", "result"))
        for field, why in _RESULT_UNSUPPORTED.items():
            if entry.get(field):
                errors.add(f"{path}.{field}", f"cannot be honoured: {why}")
        result = entry.get("result")
        if "result" in entry and result not in RESULTS:
            errors.add(f"{path}.result", f"must be one of {', '.join(RESULTS)} (a ValidatingAdmissionPolicy's "
                                         f"report result), got {result!r}")
        operation = entry.get("operation") or "CREATE"
        if operation not in OPERATIONS:
            errors.add(f"{path}.operation", f"must be one of {', '.join(OPERATIONS)}, got {operation!r}")
        found.append(Expected(index, errors.string(entry.get("policy", ""), f"{path}.policy"),
                              str(entry.get("kind") or ""), tuple(_strings(entry.get("resources"), errors,
                                                                           f"{path}.resources")),
                              str(result), str(operation), _resource_specs(entry.get("resourceSpecs"), errors,
                                                                           f"{path}.resourceSpecs")))
    return tuple(found)


def _resource_specs(value: Any, errors: FieldErrors, path: str) -> tuple[tuple[str, str, str, str], ...]:
    """``resourceSpecs``: each {group, version, kind, namespace, name} as (apiVersion, kind, namespace, name)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        errors.add(path, "must be a list of {group, version, kind, namespace, name}")
        return ()
    specs = []
    for position, entry in enumerate(value):
        spec = errors.mapping(entry, f"{path}[{position}]", ("group", "version", "kind", "namespace", "subresource",
                                                             "name"), ("version", "name"))
        if spec.get("subresource"):
            errors.add(f"{path}[{position}].subresource", "cannot be honoured: a test's resources are objects, "
                                                          "sent as requests for the object itself")
        fields = {key: errors.string(spec.get(key, ""), f"{path}[{position}].{key}")
                  for key in ("group", "version", "kind", "namespace", "name")}
        api_version = f"{fields['group']}/{fields['version']}" if fields["group"] else fields["version"]
        specs.append((api_version, fields["kind"], fields["namespace"], fields["name"]))
    return tuple(specs)


def parse_kyverno_test(document: Any, path: str, index: int) -> KyvernoTest | list[TestFileError]:
    errors = FieldErrors(path, index)
    spec = errors.mapping(document, "", _TOP_FIELDS)
    base = Path(path).parent
    for field, why in _UNSUPPORTED_FIELDS.items():
        if spec.get(field):
            errors.add(field, f"cannot be honoured: {why}")
    if spec.get("exceptions"):
        errors.add("exceptions", "cannot be honoured: kube-apiserver has no policy exceptions, and Kyverno's CLI "
                                 "itself refuses them with ValidatingAdmissionPolicies (\"use of exceptions with "
                                 "ValidatingAdmissionPolicies is not supported\"); exclude the objects in the "
                                 "binding's matchResources instead")
    if spec.get("paramResources"):
        errors.add("paramResources", "cannot be honoured: kube-apiserver's static manifests (KEP-5793) have no "
                                     "params, so staticadm loads no policy with paramKind or binding with paramRef")
    if "name" in spec:
        errors.add("name", "deprecated: Kyverno's CLI refuses a test with a top-level name (\"uses a deprecated "
                           "schema\"): give metadata.name")
    metadata = spec.get("metadata") or {}
    name = (metadata.get("name") if isinstance(metadata, dict) else None) or Path(path).name
    policies = _policies(spec, base, errors)
    resources = _resources(spec, base, errors)
    labels = _values(spec, base, errors)
    user = _user(spec, base, errors)
    results = _results(spec, errors)
    policy_names = {str((document.value.get("metadata") or {}).get("name", "")) for document in policies
                    if document.value["kind"] == _POLICY_KINDS[0]}
    for expected in results:
        if policies and expected.policy and expected.policy not in policy_names:
            errors.add(f"results[{expected.index}].policy",
                       f"no ValidatingAdmissionPolicy named {expected.policy!r} in policies "
                       f"(there are: {', '.join(sorted(policy_names))})")
    if errors.found:
        return errors.found
    return KyvernoTest(path, index, str(name), policies, resources, labels, user, results)


# -- running --------------------------------------------------------------------------------------


def _static_name(name: str) -> str:
    return name if name.endswith(STATIC_SUFFIX) else name + STATIC_SUFFIX


def _kyverno_name(name: str) -> str:
    return name.removesuffix(STATIC_SUFFIX)


def static_manifests(test: KyvernoTest) -> list[ManifestFile]:
    """The policy files as static manifests: each name (and each binding's policyName) given the
    ``.static.k8s.io`` suffix kube-apiserver's loader requires, and a binding added for each policy the files
    bind to nothing, as Kyverno evaluates such a policy. Each file keeps its path, so errors name it."""
    by_file: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    bound = set()
    for document in test.policies:
        value = json.loads(json.dumps(document.value))
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            metadata["name"] = _static_name(metadata["name"])
        spec = value.get("spec")
        if value["kind"] == _POLICY_KINDS[1] and isinstance(spec, dict) and isinstance(spec.get("policyName"), str):
            bound.add(spec["policyName"])
            spec["policyName"] = _static_name(spec["policyName"])
        by_file.setdefault(document.file, []).append((document.document, value))
    files = []
    for file, documents in by_file.items():
        text = "\n---\n".join(json.dumps(value) for _, value in sorted(documents, key=lambda entry: entry[0]))
        files.append(ManifestFile(file, text.encode(), 0o644))
    implied = [{"apiVersion": _ADMISSION_V1, "kind": _POLICY_KINDS[1],
                "metadata": {"name": _static_name(name)},
                "spec": {"policyName": _static_name(name), "validationActions": ["Deny"]}}
               for name in sorted({str((document.value.get("metadata") or {}).get("name", ""))
                                   for document in test.policies if document.value["kind"] == _POLICY_KINDS[0]})
               if name not in bound]
    if implied:
        text = "\n---\n".join(json.dumps(value) for value in implied)
        files.append(ManifestFile(f"{test.path} (the binding Kyverno's CLI implies for each unbound policy)",
                                  text.encode(), 0o644))
    return files


def case_name(expected: Expected, resource: Resource) -> str:
    """``policy/Kind/namespace/name`` (``policy/Kind/name`` for an object without a namespace)."""
    where = f"{resource.namespace}/{resource.name}" if resource.namespace else resource.name
    return f"{expected.policy}/{resource.kind}/{where}"


def _named(expected: Expected, resources: tuple[Resource, ...]) -> list[tuple[str, Resource | None]]:
    """(the name as the entry gives it, the resource) for each resource the entry names, as Kyverno's
    printTestResult finds them (``name``, or ``namespace/name``; each of ``resourceSpecs`` by apiVersion,
    namespace and name, and kind when given); every resource when it names none. (Kyverno reads
    ``resourceSpecs`` only beside ``resources``, and checks every resource when an entry has only specs:
    here the specs always select.)"""
    if not expected.resources and not expected.resource_specs:
        return [(resource.name, resource) for resource in resources]
    found: list[tuple[str, Resource | None]] = []
    for wanted in expected.resources:
        namespace, _, name = wanted.rpartition("/")
        matches = [resource for resource in resources
                   if resource.name == name and (not namespace or resource.namespace == namespace)]
        found.extend((wanted, resource) for resource in matches) if matches else found.append((wanted, None))
    for api_version, kind, namespace, name in expected.resource_specs:
        wanted = f"{api_version} {kind} {namespace}/{name}".replace("  ", " ") if namespace else \
            f"{api_version} {kind} {name}".replace("  ", " ")
        matches = [resource for resource in resources
                   if resource.listed.value.get("apiVersion") == api_version and resource.namespace == namespace
                   and resource.name == name and (not kind or resource.kind == kind)]
        found.extend((wanted, resource) for resource in matches) if matches else found.append((wanted, None))
    return found


@dataclass(frozen=True, slots=True)
class PlannedCase:
    """One case: an entry of ``results`` and one resource it names (None: no resource has that name)."""

    expected: Expected
    name: str
    resource: Resource | None
    #: The resource as the entry names it.
    wanted: str


def plan(test: KyvernoTest, selector: CaseSelector | None = None) -> list[PlannedCase]:
    """The cases of the test that ``selector`` selects, in the order of ``results``."""
    planned: list[PlannedCase] = []
    seen: set[str] = set()
    for expected in test.results:
        for wanted, resource in _named(expected, test.resources):
            name = case_name(expected, resource) if resource is not None else \
                f"{expected.policy}/{expected.kind}/{wanted}"
            if name in seen:
                name = f"{name} [results[{expected.index}]]"
            seen.add(name)
            if selector is None or selector.selects(test.name, name):
                planned.append(PlannedCase(expected, name, resource, wanted))
    return planned


def namespace_objects(test: KyvernoTest) -> list[dict[str, Any]]:
    """A Namespace for each namespace the resources name (and ``default``, kubectl's namespace for an object
    that names none), labelled as ``namespaceSelector``/``namespaces`` say."""
    names = {resource.namespace for resource in test.resources if resource.namespace} | {"default"}
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": name, "labels": dict(test.namespace_labels.get(name, {}))}}
            for name in sorted(names | set(test.namespace_labels))]


def build_review(test: KyvernoTest, case: PlannedCase) -> dict[str, Any] | str:
    """The AdmissionReview of the case's resource, as kube-apiserver would send it (CREATE, or the entry's
    operation: an UPDATE's old object is the resource itself, as Kyverno documents), or why there is none."""
    expected, resource = case.expected, case.resource
    if resource is None:
        return f"no resource named {case.wanted!r} in resources (Kyverno's CLI: Not found)"
    where = f"{resource.file}{f' {resource.listed.item}' if resource.listed.item else ''}"
    if expected.kind and expected.kind != resource.kind:
        return (f"results[{expected.index}].kind is {expected.kind!r}, but {case.wanted!r} ({where}) is a "
                f"{resource.kind}")
    settings = RequestSettings(operation=expected.operation, username=test.user.username, uid=test.user.uid,
                               groups=test.user.groups)
    try:
        return review_for_object(resource.listed.value, resource.listed.value if expected.operation == "UPDATE"
                                 else None, settings, uid_seed=f"{test.name}/{case.name}")
    except ObjectInputError as error:
        return f"the request for {case.wanted!r} ({where}) cannot be built: {error}"


def run_kyverno_test(test: KyvernoTest, on_request: Callable[[], None] | None = None,
                     selector: CaseSelector | None = None) -> FileResult | None:
    planned = plan(test, selector)
    if selector is not None and not planned:
        return None
    loaded = load_manifest_files(test.path, static_manifests(test))
    if loaded.errors:
        return FileResult(test.path, test.name, tuple(f"policies: {error}" for error in loaded.errors), ())
    snapshot = build_snapshot(loaded)
    try:
        namespaces = parse_namespaces(json.dumps(namespace_objects(test)))
    except NamespaceFileError as error:
        return FileResult(test.path, test.name, (f"variables: {error}",), ())
    cases = []
    for case in planned:
        if on_request is not None:
            on_request()
        cases.append(_run_case(test, snapshot, namespaces, case))
    return FileResult(test.path, test.name, (), tuple(cases))


def _run_case(test: KyvernoTest, snapshot: Snapshot, namespaces: NamespaceSource, case: PlannedCase) -> CaseResult:
    def failed(message: str) -> CaseResult:
        return CaseResult(test.path, test.name, case.name, False, (message,), (), {})

    review = build_review(test, case)
    if isinstance(review, str):
        return failed(review)
    request = parse_admission_review(review)
    if isinstance(request, RequestError):
        return failed(f"the request for {case.wanted!r} is not valid: {request.message}")
    started = time.perf_counter()
    mutation, validation = review_request(snapshot, namespaces, request, "validate", explain=True)
    seconds = time.perf_counter() - started
    answer = combined_response(request, mutation, validation)
    report = decision(snapshot, request, mutation, validation)
    policy = next(entry for entry in report["validating"]["policies"]
                  if entry["policy"] == _static_name(case.expected.policy))
    got = kyverno_result(policy)
    failures: list[str] = []
    if got != case.expected.result:
        failures.append(f"expected {case.expected.result}, got {got}{_why(policy, answer)}")
    return CaseResult(test.path, test.name, case.name, not failures, tuple(failures), (), answer,
                      request_summary(request), report, seconds)


_WORST = ("skip", "pass", "fail", "error")


def kyverno_result(policy: dict[str, Any]) -> str:
    """The report result of one policy (its entry in ``decision_report``), as Kyverno's CLI computes it from
    kube-apiserver's validator: per binding, the first validation (in order) that did not pass decides (fail,
    or error when it could not be evaluated); an error before the validations (a match condition, the
    configuration) is error; then the worst binding (Kyverno keeps its last binding's; with one binding, as in
    every Kyverno test we found, the same). Skip when neither the policy nor any binding matched."""
    if policy["result"] == "skip":
        return "skip"
    if policy.get("errors"):
        return "error"
    results = []
    for binding in policy.get("bindings", []):
        if binding["result"] == "skip":
            continue
        decided = next((validation["result"] for validation in binding.get("validations", [])
                        if validation["result"] != "pass"), None)
        results.append(decided or ("error" if binding.get("errors") else "pass"))
    return max(results, key=_WORST.index, default="skip")


def _why(policy: dict[str, Any], answer: dict[str, Any]) -> str:
    """What made the policy's result: why it did not match, the failed validations' messages, the errors."""
    if policy["result"] == "skip":
        return f": {policy.get('reason') or 'no binding matched'}"
    details = []
    for binding in policy.get("bindings", []):
        if binding["result"] == "skip":
            continue
        for validation in binding.get("validations", []):
            if validation["result"] != "pass":
                details.append(f"binding {_kyverno_name(binding['binding'])}: {validation['result']}: "
                               f"{validation.get('message', '')}")
        details.extend(f"binding {_kyverno_name(binding['binding'])}: error: {error['message']}"
                       for error in binding.get("errors", []))
    details.extend(f"error: {error['message']}" for error in policy.get("errors", []))
    allowed = (answer.get("response") or {}).get("allowed")
    verdict = "kube-apiserver would allow the request" if allowed else "kube-apiserver would deny the request"
    return f" ({verdict}{'; ' if details else ''}{'; '.join(details)})"
