"""Policy test files (``staticadm.io/v1alpha1`` ``PolicyTest``): decoded and checked into typed values.

A test file names the manifests under test (directories or files, relative to the test file), optional
Namespace objects and users, and cases: a request (a plain object, with an old object for UPDATE, or a
whole AdmissionReview) and what the answer must be. Every problem of a file is reported in one pass,
each naming the file, the document and the field.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from staticadm.defaults import DEFAULT_USERNAME
from staticadm.manifests.files import document_files_under
from staticadm.offline.audit_log import WRITE_VERBS, AuditFilters, AuditLogError, parse_timestamp, read_audit_log
from staticadm.offline.object_lists import ListedObject, ObjectListError, expand_lists
from staticadm.yamljson import ParseError, parse_yaml_stream

API_VERSION = "staticadm.io/v1alpha1"
KIND = "PolicyTest"
ENDPOINTS = ("both", "validate", "mutate")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


@dataclass(frozen=True, slots=True)
class User:
    """A case's user as it authenticated; the request adds ``system:authenticated`` to its groups as
    kube-apiserver does (``request_builder.user_groups``)."""

    username: str = DEFAULT_USERNAME
    uid: str = ""
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Expectation:
    allowed: bool
    #: The (policy, binding) whose decision denied the request; binding "" means any.
    denied_by: tuple[str, str] | None = None
    message_contains: str | None = None
    reason: str | None = None
    code: int | None = None
    #: Each must be a substring of some warning; an empty tuple (``warnings: []``) means none at all.
    warnings: tuple[str, ...] | None = None
    audit_annotations: Mapping[str, str] | None = None
    #: The object after the mutations, exactly.
    object: Any = None
    #: The JSON patch, exactly.
    patch: list[Any] | None = None


@dataclass(frozen=True, slots=True)
class TestCase:
    name: str
    expect: Expectation
    #: Plain objects (with ``old_objects`` for UPDATE; Lists and multi-document files expanded, each object
    #: one request that must meet the expectation) or a whole AdmissionReview.
    objects: tuple[ListedObject, ...] = ()
    old_objects: tuple[ListedObject, ...] = ()
    review: Any = None
    #: AdmissionReviews built from audit log events (``auditLog``), each labelled ``file line N``.
    recorded: tuple[tuple[str, dict[str, Any]], ...] = ()
    operation: str = "CREATE"
    user: User = User()
    namespace: str | None = None
    subresource: str = ""
    dry_run: bool = False
    endpoint: str = "both"


@dataclass(frozen=True, slots=True)
class TestFile:
    path: str
    document: int
    name: str
    manifests: tuple[str, ...]
    namespaces: tuple[Any, ...]
    cases: tuple[TestCase, ...]


@dataclass(frozen=True, slots=True)
class TestFileError:
    path: str
    document: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path} (document {self.document})" if self.document else self.path
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class FieldErrors:
    """Every problem of one test document, each naming the file, the document and the field."""

    def __init__(self, path: str, document: int) -> None:
        self.path = path
        self.document = document
        self.found: list[TestFileError] = []

    def add(self, field_path: str, message: str) -> None:
        self.found.append(TestFileError(self.path, self.document, field_path, message))

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...],
                required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.add(path, f"must be a mapping, got {type(value).__name__}")
            return {}
        for key in value:
            if key not in allowed:
                self.add(f"{path}.{key}" if path else str(key), f"unknown field (known: {', '.join(allowed)})")
        for key in required:
            if key not in value:
                self.add(f"{path}.{key}" if path else key, "required")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            self.add(path, f"must be a string, got {type(value).__name__}")
            return ""
        return value


def is_test_document(document: Any) -> bool:
    return isinstance(document, dict) and document.get("apiVersion") == API_VERSION and document.get("kind") == KIND


def _read_yaml_documents(path: Path) -> list[Any]:
    return [document for document in parse_yaml_stream(path.read_text(encoding="utf-8")) if document is not None]


def _read_referenced(base: Path, reference: str, errors: FieldErrors, field_path: str) -> list[Any] | None:
    target = base / reference
    try:
        return _read_yaml_documents(target)
    except (OSError, UnicodeDecodeError) as error:
        errors.add(field_path, f"cannot read {target}: {error}")
    except ParseError as error:
        errors.add(field_path, f"{target}: not YAML: {error.problem}")
    return None


def _load_referenced(base: Path, reference: str, errors: FieldErrors, field_path: str) -> Any:
    documents = _read_referenced(base, reference, errors, field_path)
    if documents is None:
        return None
    if len(documents) != 1:
        errors.add(field_path, f"{base / reference} must hold exactly one document, holds {len(documents)}")
        return None
    return documents[0]


def _objects(documents: list[Any], errors: FieldErrors, field_path: str) -> tuple[ListedObject, ...]:
    """Every object of the documents, Lists expanded; labelled by document (when several) and item."""
    found: list[ListedObject] = []
    for index, document in enumerate(documents):
        document_label = f"document {index}" if len(documents) > 1 else ""
        try:
            listed = expand_lists(document)
        except ObjectListError as error:
            errors.add(field_path + (f" ({document_label})" if document_label else ""), str(error))
            continue
        found.extend(ListedObject(" ".join(part for part in (document_label, entry.item) if part), entry.value)
                     for entry in listed)
    if not found:
        errors.add(field_path, "holds no object")
    return tuple(found)


def _recorded(value: Any, base: Path, errors: FieldErrors, path: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The requests of ``auditLog: {file, verbs, resources, namespaces, since, until}``."""
    spec = errors.mapping(value, path, ("file", "verbs", "resources", "namespaces", "since", "until"), ("file",))
    if not spec:
        return ()
    before = len(errors.found)
    selections = {}
    for key in ("verbs", "resources", "namespaces"):
        entries = spec.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
            errors.add(f"{path}.{key}", "must be a list of strings")
            entries = []
        if key == "verbs":
            for index, verb in enumerate(entries):
                if verb not in WRITE_VERBS:
                    errors.add(f"{path}.verbs[{index}]", f"must be one of {', '.join(WRITE_VERBS)}")
        selections[key] = frozenset(entries)
    bounds = []
    for key in ("since", "until"):
        text = spec.get(key)
        try:
            bounds.append(parse_timestamp(errors.string(text, f"{path}.{key}")) if text is not None else None)
        except ValueError as error:
            errors.add(f"{path}.{key}", f"not an RFC 3339 time (2024-05-01T10:00:00Z): {error}")
            bounds.append(None)
    file = errors.string(spec.get("file", ""), f"{path}.file")
    if len(errors.found) > before:
        return ()
    filters = AuditFilters(selections["verbs"], selections["resources"], selections["namespaces"], *bounds)
    try:
        requests, summary = read_audit_log(str(base / file), filters)
    except AuditLogError as error:
        errors.add(f"{path}.file", str(error))
        return ()
    # A test's log is a fixture: a line in it that is no audit event is a mistake to fix, not to skip.
    for number, why in summary.malformed_lines:
        errors.add(f"{path}.file", f"{base / file} line {number}: {why}")
    if not requests:
        errors.add(path, f"selects no request of {base / file} that can be evaluated")
        return ()
    return tuple((f"{file} line {entry.line}", entry.review) for entry in requests)


def _user(value: Any, users: Mapping[str, User], errors: FieldErrors, path: str) -> User:
    if isinstance(value, str):
        return users.get(value, User(value))
    spec = errors.mapping(value, path, ("username", "uid", "groups"), ("username",))
    groups = spec.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
        errors.add(f"{path}.groups", "must be a list of strings")
        groups = []
    return User(errors.string(spec.get("username", ""), f"{path}.username"),
                errors.string(spec.get("uid", ""), f"{path}.uid"), tuple(groups))


def _expectation(value: Any, errors: FieldErrors, path: str) -> Expectation:
    spec = errors.mapping(value, path, ("allowed", "deniedBy", "messageContains", "reason", "code", "warnings",
                                        "auditAnnotations", "object", "patch"), ("allowed",))
    allowed = spec.get("allowed")
    if "allowed" in spec and not isinstance(allowed, bool):  # a missing one is reported as required
        errors.add(f"{path}.allowed", "must be true or false")
    denied_by = None
    if "deniedBy" in spec:
        by = errors.mapping(spec["deniedBy"], f"{path}.deniedBy", ("policy", "binding"), ("policy",))
        denied_by = (errors.string(by.get("policy", ""), f"{path}.deniedBy.policy"),
                     errors.string(by.get("binding", ""), f"{path}.deniedBy.binding"))
    warnings = spec.get("warnings")
    if warnings is not None and (not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings)):
        errors.add(f"{path}.warnings", "must be a list of strings")
        warnings = None
    annotations = spec.get("auditAnnotations")
    if annotations is not None and (not isinstance(annotations, dict)
                                    or not all(isinstance(v, str) for v in annotations.values())):
        errors.add(f"{path}.auditAnnotations", "must map keys to strings")
        annotations = None
    code = spec.get("code")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        errors.add(f"{path}.code", "must be an integer")
        code = None
    patch = spec.get("patch")
    if patch is not None and not isinstance(patch, list):
        errors.add(f"{path}.patch", "must be a list of JSON Patch operations")
        patch = None
    for key in ("messageContains", "reason"):
        if key in spec:
            errors.string(spec[key], f"{path}.{key}")
    return Expectation(bool(allowed), denied_by, spec.get("messageContains"), spec.get("reason"), code,
                       tuple(warnings) if warnings is not None else None, annotations, spec.get("object"), patch)


def _case(value: Any, index: int, base: Path, users: Mapping[str, User], errors: FieldErrors) -> TestCase | None:
    path = f"spec.cases[{index}]"
    spec = errors.mapping(value, path, ("name", "object", "objectFile", "oldObject", "oldObjectFile", "review",
                                        "reviewFile", "auditLog", "operation", "user", "namespace", "subresource",
                                        "dryRun", "endpoint", "expect"), ("name", "expect"))
    if not spec:
        return None
    before = len(errors.found)
    name = errors.string(spec.get("name", ""), f"{path}.name")
    sources: dict[str, Any] = {}
    for key, file_key in (("object", "objectFile"), ("oldObject", "oldObjectFile"), ("review", "reviewFile")):
        if key in spec and file_key in spec:
            errors.add(f"{path}.{file_key}", f"give {key} or {file_key}, not both")
        elif file_key in spec and key == "review":
            sources[key] = _load_referenced(base, errors.string(spec[file_key], f"{path}.{file_key}"), errors,
                                            f"{path}.{file_key}")
        elif file_key in spec:
            documents = _read_referenced(base, errors.string(spec[file_key], f"{path}.{file_key}"), errors,
                                         f"{path}.{file_key}")
            sources[key] = _objects(documents, errors, f"{path}.{file_key}") if documents is not None else ()
        elif key == "review" and key in spec:
            sources[key] = spec[key]
        elif key in spec:
            sources[key] = _objects([spec[key]], errors, f"{path}.{key}")
    recorded: tuple[tuple[str, dict[str, Any]], ...] = ()
    if "auditLog" in spec:
        recorded = _recorded(spec["auditLog"], base, errors, f"{path}.auditLog")
    if ("object" in sources) + ("review" in sources) + ("auditLog" in spec) != 1:
        errors.add(path, "give exactly one of object/objectFile (a plain object), review/reviewFile "
                         "(an AdmissionReview) or auditLog (the requests of a kube-apiserver audit log)")
    operation = spec.get("operation", "CREATE")
    if operation not in OPERATIONS:
        errors.add(f"{path}.operation", f"must be one of {', '.join(OPERATIONS)}")
    if operation == "UPDATE" and "object" in sources and "oldObject" not in sources:
        errors.add(f"{path}.oldObject", "an UPDATE of a plain object needs the object before the change")
    endpoint = spec.get("endpoint", "both")
    if endpoint not in ENDPOINTS:
        errors.add(f"{path}.endpoint", f"must be one of {', '.join(ENDPOINTS)}")
    dry_run = spec.get("dryRun", False)
    if not isinstance(dry_run, bool):
        errors.add(f"{path}.dryRun", "must be true or false")
    namespace = spec.get("namespace")
    if namespace is not None:
        errors.string(namespace, f"{path}.namespace")
    expect = _expectation(spec.get("expect", {}), errors, f"{path}.expect")
    user = _user(spec["user"], users, errors, f"{path}.user") if "user" in spec else User()
    if len(errors.found) > before:
        return None
    return TestCase(name, expect, sources.get("object", ()), sources.get("oldObject", ()), sources.get("review"),
                    recorded, operation,
                    user, namespace, errors.string(spec.get("subresource", ""), f"{path}.subresource"), dry_run,
                    endpoint)


def parse_test_document(document: Any, path: str, index: int) -> TestFile | list[TestFileError]:
    errors = FieldErrors(path, index)
    top = errors.mapping(document, "", ("apiVersion", "kind", "metadata", "spec"), ("metadata", "spec"))
    metadata = errors.mapping(top.get("metadata", {}), "metadata", ("name",), ("name",))
    spec = errors.mapping(top.get("spec", {}), "spec", ("manifests", "namespaces", "users", "cases"),
                          ("manifests", "cases"))
    base = Path(path).parent
    manifests = spec.get("manifests", [])
    if isinstance(manifests, str):
        manifests = [manifests]
    if not isinstance(manifests, list) or not manifests or not all(isinstance(m, str) for m in manifests):
        errors.add("spec.manifests", "must be a directory or file, or a list of them (relative to the test file)")
        manifests = []
    resolved = []
    for position, manifest in enumerate(manifests):
        target = base / manifest
        if not target.exists():
            errors.add(f"spec.manifests[{position}]", f"{target} does not exist")
        resolved.append(os.path.normpath(target))
    namespaces: list[Any] = []
    for position, entry in enumerate(spec.get("namespaces") or []):
        if isinstance(entry, str):
            loaded = _load_referenced(base, entry, errors, f"spec.namespaces[{position}]")
            if loaded is not None:
                namespaces.append(loaded)
        else:
            namespaces.append(entry)
    users: dict[str, User] = {}
    raw_users = spec.get("users") or {}
    if not isinstance(raw_users, dict):
        errors.add("spec.users", "must map names to users")
        raw_users = {}
    for user_name, user in raw_users.items():
        users[str(user_name)] = _user(user, {}, errors, f"spec.users.{user_name}")
    raw_cases = spec.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        if "cases" in spec:
            errors.add("spec.cases", "must be a non-empty list")
        raw_cases = []
    cases = [_case(case, index, base, users, errors) for index, case in enumerate(raw_cases)]
    names = [case.name for case in cases if case is not None]
    for duplicate in sorted({name for name in names if names.count(name) > 1}):
        errors.add("spec.cases", f"case name {duplicate!r} is used twice")
    if errors.found:
        return errors.found
    return TestFile(path, index, str(metadata.get("name", "")), tuple(resolved), tuple(namespaces),
                    tuple(case for case in cases if case is not None))


#: Another kind of test document ``discover`` also collects: (is it one, parse it).
OtherTestKind = tuple[Callable[[Any], bool], Callable[[Any, str, int], "object | list[TestFileError]"], str]


def discover(paths: list[str], also: Sequence[OtherTestKind] = ()) -> tuple[list[object], list[TestFileError]]:
    """Every PolicyTest document (a TestFile), and every document of the ``also`` kinds (as their parser
    makes it), in the given files and under the given directories (recursively, files ending .yaml, .yml or
    .json, in name order); other documents are not tests and are skipped."""
    files: list[Path] = []
    errors: list[TestFileError] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files.extend(document_files_under(path))
        elif path.is_file():
            files.append(path)
        else:
            errors.append(TestFileError(given, 0, "", "no such file or directory"))
    kinds: list[OtherTestKind] = [(is_test_document, parse_test_document, API_VERSION), *also]
    tests: list[object] = []
    for file in files:
        try:
            documents = parse_yaml_stream(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            errors.append(TestFileError(str(file), 0, "", f"cannot read: {error}"))
            continue
        except ParseError as error:
            if _mentions_test_kind(file, [api_version for _, _, api_version in kinds]):
                errors.append(TestFileError(str(file), 0, "", f"not YAML: {error.problem}"))
            continue
        for index, document in enumerate(documents):
            for is_kind, parse, _ in kinds:
                if is_kind(document):
                    parsed = parse(document, str(file), index)
                    if isinstance(parsed, list):
                        errors.extend(parsed)
                    else:
                        tests.append(parsed)
                    break
    return tests, errors


def _mentions_test_kind(file: Path, api_versions: list[str]) -> bool:
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(api_version in text for api_version in api_versions)
