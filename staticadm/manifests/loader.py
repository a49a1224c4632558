"""Loading a static manifest directory the way kube-apiserver's KEP-5793 loader does.

Order of work for each file (name order) and document: parse, decode strictly, default, REST create
validation (compiling every CEL expression), then the static-manifest rules (name present, reserved
suffix, unique per kind, no paramKind/paramRef, binding policyName suffixed); after all files, every
binding must name a policy of its kind in the directory. Policies and bindings are sorted by name.

kube-apiserver stops at the first error; we collect them all so that one ``staticadm check`` shows
everything, but the verdict is the same: any error means kube-apiserver would refuse the directory.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from staticadm import gofmt
from staticadm.compiled import (
    CompiledMutatingPolicy,
    CompiledValidatingPolicy,
    ExpressionCompiler,
    PolicyPrograms,
    compile_mutating_policy,
    compile_validating_policy,
)
from staticadm.json_types import json_type_name
from staticadm.manifests.decode import Decoder
from staticadm.manifests.defaults import apply_defaults
from staticadm.manifests.documents import Document, DocumentError, split_documents
from staticadm.manifests.errors import ManifestError
from staticadm.manifests.files import DirectoryContents, ManifestFile, content_hash, read_directory, read_files
from staticadm.manifests.validation import Validator
from staticadm.model import (
    API_VERSION,
    LIST_KINDS,
    OBJECT_KINDS,
    ListMeta,
    MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding,
    Origin,
    TopLevel,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)
from staticadm.yamljson import ParseError, parse_document

DEFAULT_MAX_FILE_BYTES = 3 * 1024 * 1024
#: Go's %q, which kube-apiserver's loader messages quote names and paths with.
_q = gofmt.quote
STATIC_SUFFIX = ".static.k8s.io"
GROUP = "admissionregistration.k8s.io"

@dataclass(frozen=True, slots=True)
class LoadResult:
    """Everything one load produced. Use the objects only when ``errors`` is empty."""

    validating_policies: tuple[ValidatingAdmissionPolicy, ...] = ()
    validating_bindings: tuple[ValidatingAdmissionPolicyBinding, ...] = ()
    mutating_policies: tuple[MutatingAdmissionPolicy, ...] = ()
    mutating_bindings: tuple[MutatingAdmissionPolicyBinding, ...] = ()
    #: The policies compiled for evaluation, without bindings (the snapshot attaches them).
    compiled_validating: tuple[CompiledValidatingPolicy, ...] = ()
    compiled_mutating: tuple[CompiledMutatingPolicy, ...] = ()
    content_hash: str = ""
    errors: tuple[ManifestError, ...] = ()
    warnings: tuple[ManifestError, ...] = ()
    directory: str = ""
    #: What this load parsed and checked; give it to the next load of the directory once this one is served.
    cache: LoadCache = field(default_factory=lambda: LoadCache())

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def policies(self) -> tuple[ValidatingAdmissionPolicy | MutatingAdmissionPolicy, ...]:
        return self.validating_policies + self.mutating_policies

    @property
    def bindings(self) -> tuple[ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding, ...]:
        return self.validating_bindings + self.mutating_bindings


@dataclass(frozen=True, slots=True)
class _CheckedObject:
    obj: TopLevel
    errors: tuple[ManifestError, ...]
    #: The policy compiled for evaluation; None for bindings and for policies with errors.
    compiled: CompiledValidatingPolicy | CompiledMutatingPolicy | None
    #: What it asked the load's ``ExpressionCompiler`` for: kept while the object is, for its document's next change.
    program_keys: tuple[tuple[Any, ...], ...] = ()


#: A document that could not be parsed, in a file's :attr:`LoadCache.files` steps.
_UNIDENTIFIED = "unidentified"
#: A checked object in a file's steps: with its place and its key in :attr:`LoadCache.checked`.
_ObjectStep = tuple[_CheckedObject, Origin, tuple[type, str, Origin]]
#: What loading one file did, in order, apart from the checks that depend on the other files: its own errors,
#: its checked objects, and the documents that could not be parsed.
FileSteps = tuple[ManifestError | _ObjectStep | str, ...]


class LoadCache:
    """What one load parsed and checked, for the next load of the same directory to reuse.

    A reload re-reads every file but most are unchanged, and parsing and checking an object (decode,
    validate, compile) are the bulk of a load. A file whose path and bytes are unchanged is replayed from
    its steps (only the checks across files run again: a reload of 1,000 files with one changed works on
    one); in a changed file, documents are keyed by file bytes, parsed values by document text, checked
    objects by their kind, document text and place in it. A load fills a new cache with exactly what it
    used; the source keeps the cache of the load it serves, so memory follows the directory being served
    however often it reloads.
    """

    def __init__(self) -> None:
        self.files: dict[tuple[str, bytes], FileSteps] = {}
        self.documents: dict[bytes, list[Document]] = {}
        self.values: dict[str, Any] = {}
        self.checked: dict[tuple[type, str, Origin], _CheckedObject] = {}
        #: The programs the load compiled or took from the one before: a changed document compiles only the
        #: expressions that are new (``ExpressionCompiler``).
        self.compiler: ExpressionCompiler | None = None


def load_manifest_directory(
    path: str,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    contents: DirectoryContents | None = None,
    cache: LoadCache | None = None,
) -> LoadResult:
    """Load, validate and compile a manifest directory. Never raises on bad input.

    ``contents`` is the directory as the caller already read it (``read_directory``), to read it once;
    ``cache`` is the :attr:`LoadResult.cache` of the load being served, whose unchanged documents are
    reused as they are.
    """
    return _Load(path, max_file_bytes, cache or LoadCache()).run(contents)


def load_manifest_paths(paths: list[str], *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> LoadResult:
    """Load directories and single files as one set, as if the files were together in one directory
    (directories' files in their directory order, then in the order given)."""
    if len(paths) == 1 and os.path.isdir(paths[0]):
        return load_manifest_directory(paths[0], max_file_bytes=max_file_bytes)
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            contents = read_directory(path, max_file_bytes=max_file_bytes)
            if contents.errors:
                return _Load(path, max_file_bytes, LoadCache()).run(contents)
            files.extend(manifest.path for manifest in contents.files)
        else:
            files.append(path)
    return _Load(", ".join(paths), max_file_bytes, LoadCache()).run(read_files(files, max_file_bytes=max_file_bytes))


def load_manifest_files(origin: str, files: Sequence[ManifestFile]) -> LoadResult:
    """Load manifests already in memory (each named by the path its errors should name) as one directory's
    files in the order given: what ``staticadm test`` makes of a Kyverno test's policy files."""
    contents = DirectoryContents(tuple(files), content_hash([file.data for file in files]), None, ())
    return _Load(origin, DEFAULT_MAX_FILE_BYTES, LoadCache()).run(contents)


class _Load:
    def __init__(self, directory: str, max_file_bytes: int, previous: LoadCache) -> None:
        self.directory = directory
        self.max_file_bytes = max_file_bytes
        self.previous = previous
        self.used = LoadCache()
        self.compiler = self.used.compiler = ExpressionCompiler(previous.compiler)
        self.errors: list[ManifestError] = []
        self.warnings: list[ManifestError] = []
        self.objects: list[TopLevel] = []
        self.compiled_policies: list[CompiledValidatingPolicy | CompiledMutatingPolicy] = []
        #: The text of the document being loaded: with the origin, it names each object's source.
        self.document_text = ""
        self.seen: dict[str, dict[str, str]] = {kind: {} for kind in OBJECT_KINDS}
        #: Documents that failed before saying what they are: a policy a binding names may be one of them.
        self.unidentified_documents = 0
        self.decoder = Decoder()
        #: The steps of the file being loaded, while they are recorded (None while replaying or checking
        #: across files).
        self._steps: list[ManifestError | _ObjectStep | str] | None = None

    def run(self, contents: DirectoryContents | None = None) -> LoadResult:
        if contents is None:
            contents = read_directory(self.directory, max_file_bytes=self.max_file_bytes)
        self.errors.extend(contents.errors)
        if contents.directory_mode is not None and contents.directory_mode & stat.S_IWOTH:
            self.warnings.append(ManifestError(self.directory, "directory is world-writable"))
        for manifest_file in contents.files:
            self._file(manifest_file)
        # Empty files hold nothing to load, but anyone may fill one that anyone may write.
        self.warnings.extend(ManifestError(empty.path, "file is world-writable")
                             for empty in contents.empty_files if empty.mode & stat.S_IWOTH)
        # Worded as the other world-writable warnings end: check turns them all into its refusals alike.
        self.warnings.extend(ManifestError(opened.path, f"resolves through {opened.through!r} (mode {opened.mode:04o}: "
                                                        f"{opened.why}): a directory on its path is world-writable")
                             for opened in contents.open_paths)
        self._check_references()
        self.compiler.forget_previous()

        def by_name(cls: type, objects: list[Any]) -> tuple[Any, ...]:
            return tuple(sorted((o for o in objects if isinstance(o, cls)), key=_name))

        compiled = self.compiled_policies

        return LoadResult(
            validating_policies=by_name(ValidatingAdmissionPolicy, self.objects),
            validating_bindings=by_name(ValidatingAdmissionPolicyBinding, self.objects),
            mutating_policies=by_name(MutatingAdmissionPolicy, self.objects),
            mutating_bindings=by_name(MutatingAdmissionPolicyBinding, self.objects),
            compiled_validating=by_name(CompiledValidatingPolicy, compiled),
            compiled_mutating=by_name(CompiledMutatingPolicy, compiled),
            content_hash=contents.content_hash,
            errors=tuple(self.errors),
            warnings=tuple(self.warnings),
            directory=self.directory,
            cache=self.used,
        )

    def _file(self, manifest_file: ManifestFile) -> None:
        path = manifest_file.path
        if manifest_file.mode & stat.S_IWOTH:
            self.warnings.append(ManifestError(path, "file is world-writable"))
        key = (path, manifest_file.data)
        steps = self.previous.files.get(key)
        if steps is None:
            self._steps = []
            self._read_documents(manifest_file)
            steps, self._steps = tuple(self._steps), None
        else:
            self._replay(manifest_file.data, steps)
        self.used.files[key] = steps

    def _replay(self, data: bytes, steps: FileSteps) -> None:
        # What a changed version of this file would reuse is kept too: one changed document of a large file
        # is the only one parsed and compiled again.
        documents = self.previous.documents.get(data)
        if documents is not None:
            self.used.documents[data] = documents
            for document in documents:
                value = self.previous.values.get(document.text)
                if value is not None:
                    self.used.values[document.text] = value
        for step in steps:
            if isinstance(step, ManifestError):
                self.errors.append(step)
            elif isinstance(step, tuple):
                checked, origin, cache_key = step
                self.used.checked[cache_key] = checked
                self._use(checked, origin)
            else:
                self.unidentified_documents += 1

    def _read_documents(self, manifest_file: ManifestFile) -> None:
        path = manifest_file.path
        try:
            documents = self.previous.documents.get(manifest_file.data)
            if documents is None:
                documents = split_documents(manifest_file.data)
            self.used.documents[manifest_file.data] = documents
        except DocumentError as err:
            self._file_error(ManifestError(path, f"failed to split YAML documents in file {path!r}: {err}"))
            return
        for document in documents:
            origin = Origin(path, document.index)
            try:
                value = self._parse(document.text)
            except ParseError as err:
                self._file_error(ManifestError(path, f"error loading {path}: {err}", document=document.index))
                self.unidentified_documents += 1
                if self._steps is not None:
                    self._steps.append(_UNIDENTIFIED)
                continue
            self.document_text = document.text
            self._accept(value, origin)

    def _file_error(self, error: ManifestError) -> None:
        self.errors.append(error)
        if self._steps is not None:
            self._steps.append(error)

    def _parse(self, text: str) -> Any:
        value = self.previous.values.get(text)
        if value is None:
            value = parse_document(text)
        self.used.values[text] = value
        return value

    def _error(self, origin: Origin, message: str, *, kind: str = "", name: str = "", field_path: str = "") -> None:
        self._file_error(
            ManifestError(
                origin.path,
                message,
                document=origin.document,
                items=origin.items,
                kind=kind,
                name=name,
                field=field_path,
            )
        )

    def _accept(self, value: Any, origin: Origin) -> None:
        """Dispatch one decoded JSON value by apiVersion/kind, as the universal deserializer does."""
        if not isinstance(value, dict):
            self._error(origin, f"Object 'Kind' is missing in '{_abbreviate(value)}'")
            return
        api_version, kind = value.get("apiVersion"), value.get("kind")
        for name, item in (("apiVersion", api_version), ("kind", kind)):
            if item is not None and not isinstance(item, str):
                self._error(
                    origin,
                    f'cannot unmarshal {json_type_name(item)} into field "{name}" of type string',
                    field_path=name,
                )
                return
        if not kind:
            self._error(origin, f"Object 'Kind' is missing in '{_abbreviate(value)}'")
            return
        if not api_version:
            self._error(origin, f"Object 'apiVersion' is missing in '{_abbreviate(value)}'")
            return
        if api_version == "v1" and kind == "List":
            self._generic_list(value, origin)
        elif api_version == API_VERSION and kind in LIST_KINDS:
            self._typed_list(value, kind, origin)
        elif api_version == API_VERSION and kind in OBJECT_KINDS:
            self._object(OBJECT_KINDS[kind], value, origin)
        else:
            # kube-apiserver's loader (policy/manifest/loader) wraps what its decoder or type switch says so.
            self._error(origin, f"error loading {origin.path}: {_unsupported(api_version, kind)}", kind=kind,
                        name=_name_of(value))

    def _generic_list(self, value: dict[str, Any], origin: Origin) -> None:
        self._list_envelope(value, origin, "List")
        items = value.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            self._error(
                origin, f'cannot unmarshal {json_type_name(items)} into field "items" of type array', field_path="items"
            )
            return
        for i, item in enumerate(items):
            self._accept(item, replace(origin, items=(*origin.items, i)))

    def _typed_list(self, value: dict[str, Any], kind: str, origin: Origin) -> None:
        self._list_envelope(value, origin, kind)
        items = value.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            self._error(
                origin,
                f'cannot unmarshal {json_type_name(items)} into field "items" of type array',
                kind=kind,
                field_path="items",
            )
            return
        for i, item in enumerate(items):
            self._object(LIST_KINDS[kind], item, replace(origin, items=(*origin.items, i)))

    def _list_envelope(self, value: dict[str, Any], origin: Origin, kind: str) -> None:
        for key in value:
            if key not in ("apiVersion", "kind", "metadata", "items"):
                self._error(origin, f'strict decoding error: unknown field "{key}"', kind=kind, field_path=key)
        self.decoder.issues.clear()
        self.decoder.decode(ListMeta, value.get("metadata"), "metadata")
        for issue in self.decoder.issues:
            self._error(origin, issue.message, kind=kind, field_path=issue.field)

    def _object(self, cls: type[TopLevel], value: Any, origin: Origin) -> None:
        key = (cls, self.document_text, origin)
        checked = self.previous.checked.get(key)
        if checked is None:
            checked = self._check_object(cls, value, origin)
        self.used.checked[key] = checked
        if self._steps is not None:
            self._steps.append((checked, origin, key))
        self._use(checked, origin)

    def _use(self, checked: _CheckedObject, origin: Origin) -> None:
        """A checked object joins the load: its errors, its compiled policy, and the checks across files."""
        self.compiler.keep(checked.program_keys)
        self.errors.extend(checked.errors)
        if checked.compiled is not None:
            self.compiled_policies.append(checked.compiled)
        steps, self._steps = self._steps, None  # what _manifest_rules finds depends on the other files
        self._manifest_rules(checked.obj, origin)
        self._steps = steps
        self.objects.append(checked.obj)

    def _check_object(self, cls: type[TopLevel], value: Any, origin: Origin) -> _CheckedObject:
        """Decoding, defaulting, validation and compilation: everything that depends on this object alone."""
        errors: list[ManifestError] = []
        self.decoder.issues.clear()
        decoded = self.decoder.decode(cls, value)
        obj = replace(decoded, origin=origin)
        kind, name = cls.KIND, obj.metadata.name

        def error(message: str, field_path: str) -> None:
            errors.append(ManifestError(origin.path, message, document=origin.document, items=origin.items,
                                        kind=kind, name=name, field=field_path))

        for issue in self.decoder.issues:
            error(issue.message, issue.field)
        obj = apply_defaults(obj)
        is_policy = isinstance(obj, ValidatingAdmissionPolicy | MutatingAdmissionPolicy)
        programs = PolicyPrograms(self.compiler, mutating_policy=isinstance(obj, MutatingAdmissionPolicy))
        self.compiler.track()
        try:
            for field_error in Validator(programs.compile).validate(obj):
                error(str(field_error), field_error.field)
        except Exception as err:  # a compiler bug must be this object's error, not end the load
            error(f"internal error compiling expressions: {type(err).__name__}: {err}", "spec")
        compiled: CompiledValidatingPolicy | CompiledMutatingPolicy | None = None
        if is_policy and not errors:
            try:
                compiled = (compile_validating_policy(obj, programs) if isinstance(obj, ValidatingAdmissionPolicy)
                            else compile_mutating_policy(obj, programs))  # type: ignore[arg-type]
            except Exception as err:  # as above: the directory is refused with this object named
                error(f"internal error compiling policy: {type(err).__name__}: {err}", "spec")
        return _CheckedObject(obj, tuple(errors), compiled, self.compiler.tracked())

    def _manifest_rules(self, obj: TopLevel, origin: Origin) -> None:
        """The static-manifest checks, in Kubernetes' order and wording."""
        kind, name, path = obj.KIND, obj.metadata.name, origin.path
        if not name:
            self._error(origin, f"resource in file {_q(path)} must have a name", kind=kind, field_path="metadata.name")
        else:
            if not name.endswith(STATIC_SUFFIX):
                self._error(
                    origin,
                    f"{_q(name)} in file {_q(path)} must have a name ending with {_q(STATIC_SUFFIX)}",
                    kind=kind,
                    name=name,
                    field_path="metadata.name",
                )
            seen = self.seen[kind]
            if name in seen:
                self._error(
                    origin,
                    f"duplicate name {_q(name)} found in file {_q(path)} (previously seen in {_q(seen[name])})",
                    kind=kind,
                    name=name,
                    field_path="metadata.name",
                )
            else:
                seen[name] = path
        if isinstance(obj, ValidatingAdmissionPolicy | MutatingAdmissionPolicy):
            if obj.spec.param_kind is not None:
                self._error(
                    origin,
                    f"{kind} {_q(name)}: spec.paramKind is not supported for static manifests",
                    kind=kind,
                    name=name,
                    field_path="spec.paramKind",
                )
            return
        policy_name = obj.spec.policy_name
        if not policy_name:
            self._error(
                origin,
                f"binding {_q(name)} must reference a policy (spec.policyName)",
                kind=kind,
                name=name,
                field_path="spec.policyName",
            )
        elif not policy_name.endswith(STATIC_SUFFIX):
            self._error(
                origin,
                f"binding {_q(name)}: spec.policyName {_q(policy_name)} must end with {_q(STATIC_SUFFIX)}",
                kind=kind,
                name=name,
                field_path="spec.policyName",
            )
        if obj.spec.param_ref is not None:
            self._error(
                origin,
                f"binding {_q(name)}: spec.paramRef is not supported for static manifests",
                kind=kind,
                name=name,
                field_path="spec.paramRef",
            )

    def _check_references(self) -> None:
        pairs: tuple[tuple[type, type], ...] = (
            (ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicy),
            (MutatingAdmissionPolicyBinding, MutatingAdmissionPolicy),
        )
        for binding_cls, policy_cls in pairs:
            names = {o.metadata.name for o in self.objects if isinstance(o, policy_cls)}
            bindings = [o for o in self.objects if isinstance(o, binding_cls)]
            for binding in bindings:
                assert isinstance(binding, ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding)
                if not binding.spec.policy_name:
                    continue
                # With an undecodable document the policy may well be in it: its own error says enough.
                if binding.spec.policy_name not in names and not self.unidentified_documents:
                    self._error(
                        binding.origin,
                        f"binding {_q(binding.metadata.name)} references policy {_q(binding.spec.policy_name)} "
                        "which does not exist in the manifest directory",
                        kind=binding.KIND,
                        name=binding.metadata.name,
                        field_path="spec.policyName",
                    )


def _name(item: TopLevel | CompiledValidatingPolicy | CompiledMutatingPolicy) -> str:
    return item.name if isinstance(item, CompiledValidatingPolicy | CompiledMutatingPolicy) else item.metadata.name


def _name_of(value: dict[str, Any]) -> str:
    metadata = value.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
        return metadata["name"]
    return ""


def _abbreviate(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + "..."


def _unsupported(api_version: str, kind: str) -> str:
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    base = kind.removesuffix("List")
    if group == GROUP and base in OBJECT_KINDS:
        return f"unsupported resource type {api_version}, Kind={kind}: static manifests accept only {API_VERSION}"
    accepted = ", ".join([*OBJECT_KINDS, *LIST_KINDS])
    return f"unsupported resource type {api_version}, Kind={kind}: expected {API_VERSION} {accepted}, or v1 List"
