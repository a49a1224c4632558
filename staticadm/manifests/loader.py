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
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from staticadm.json_types import json_type_name
from staticadm.manifests.decode import Decoder
from staticadm.manifests.defaults import apply_defaults
from staticadm.manifests.documents import Document, DocumentError, parse_document, split_documents
from staticadm.manifests.errors import ManifestError
from staticadm.manifests.files import DirectoryContents, ManifestFile, read_directory
from staticadm.manifests.validation import Expr, Validator
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

DEFAULT_MAX_FILE_BYTES = 3 * 1024 * 1024
STATIC_SUFFIX = ".static.k8s.io"
GROUP = "admissionregistration.k8s.io"

#: compile(source, kind name, variable names, mutating) -> compiled program, or an error message.
#: compile(source, kind, visible variable names, their compiled types, mutating) -> (program, error).
CelCompiler = Callable[[str, str, Sequence[str], Mapping[str, str], bool], "tuple[Any, str | None]"]


@dataclass(frozen=True, slots=True)
class LoadResult:
    """Everything one load produced. Use the objects only when ``errors`` is empty."""

    validating_policies: tuple[ValidatingAdmissionPolicy, ...] = ()
    validating_bindings: tuple[ValidatingAdmissionPolicyBinding, ...] = ()
    mutating_policies: tuple[MutatingAdmissionPolicy, ...] = ()
    mutating_bindings: tuple[MutatingAdmissionPolicyBinding, ...] = ()
    #: Compiled CEL programs keyed ``"<Kind>/<name>/<field path>"``, so the snapshot never recompiles.
    compiled: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    content_hash: str = ""
    errors: tuple[ManifestError, ...] = ()
    warnings: tuple[ManifestError, ...] = ()
    directory: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def policies(self) -> tuple[ValidatingAdmissionPolicy | MutatingAdmissionPolicy, ...]:
        return self.validating_policies + self.mutating_policies

    @property
    def bindings(self) -> tuple[ValidatingAdmissionPolicyBinding | MutatingAdmissionPolicyBinding, ...]:
        return self.validating_bindings + self.mutating_bindings


def compiled_key(kind: str, name: str, field_path: str) -> str:
    return f"{kind}/{name}/{field_path}"


@dataclass(frozen=True, slots=True)
class _CheckedObject:
    #: The parsed document value it was checked from (parses of unchanged text return the same object).
    value: Any
    obj: Any
    errors: tuple[ManifestError, ...]
    compiled: Mapping[str, Any]


class _Memo:
    """What the latest load parsed and checked, for the next load to reuse.

    A reload re-reads every file but most are unchanged, and parsing and checking an object (decode,
    validate, compile) are the bulk of a load. Parsed values are keyed by document text; checked objects
    by the identity of the parsed value they came from (kept alive here) and their origin. Only what the
    latest load used is kept, so memory stays bounded by one directory's worth however often it reloads.
    """

    def __init__(self) -> None:
        self.split: dict[bytes, list[Document]] = {}
        self.parsed: dict[str, Any] = {}
        self.checked: dict[tuple[Any, ...], _CheckedObject] = {}


_MEMO = _Memo()


def default_cel_compiler() -> CelCompiler | str:
    """The lead's CEL API, or why it cannot be used (then every load fails closed)."""
    try:
        from staticadm.cel import CompileError, ExpressionKind, compile_expression
    except ImportError as err:
        return f"the CEL compiler (staticadm.cel) is unavailable: {err}"

    # Policies often repeat expressions (one template, many policies): each distinct one is compiled once
    # per load. The cache lives as long as this load; programs of unchanged documents carry over to the
    # next load through the memo below, and nothing else does.
    compiled: dict[tuple[Any, ...], Any] = {}

    def compile_fn(source: str, kind: str, names: Sequence[str], types: Mapping[str, str],
                   mutating: bool) -> tuple[Any, str | None]:
        key = (source, kind, tuple(names), tuple(sorted(types.items())), mutating)
        result = compiled.get(key)
        if result is None:
            result = compiled[key] = compile_expression(source, ExpressionKind[kind], variable_names=tuple(names),
                                                        variable_types=types, mutating=mutating)
        if isinstance(result, CompileError):
            return None, result.message
        return result, None

    # A pure function of its arguments: objects checked with it may be reused by later loads.
    compile_fn.memoizable = True  # type: ignore[attr-defined]
    return compile_fn


def load_manifest_directory(
    path: str,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    cel_compiler: CelCompiler | None = None,
    contents: DirectoryContents | None = None,
) -> LoadResult:
    """Load, validate and compile a manifest directory. Never raises on bad input.

    ``contents`` is the directory as the caller already read it (``read_directory``), to read it once.
    """
    return _Load(path, max_file_bytes, cel_compiler).run(contents)


class _Load:
    def __init__(self, directory: str, max_file_bytes: int, cel_compiler: CelCompiler | None) -> None:
        self.directory = directory
        self.max_file_bytes = max_file_bytes
        compiler = cel_compiler if cel_compiler is not None else default_cel_compiler()
        self.cel_unavailable = compiler if isinstance(compiler, str) else ""
        self.cel: CelCompiler | None = None if isinstance(compiler, str) else compiler
        self.errors: list[ManifestError] = []
        self.warnings: list[ManifestError] = []
        self.objects: list[TopLevel] = []
        self.compiled: dict[str, Any] = {}
        #: Programs compiled for the object being checked, for the memo of checked objects.
        self.recorded: dict[str, Any] = {}
        self.memoizable = bool(getattr(self.cel, "memoizable", False))
        self.split_now: dict[bytes, list[Document]] = {}
        self.parsed_now: dict[str, Any] = {}
        self.checked_now: dict[tuple[Any, ...], _CheckedObject] = {}
        self.seen: dict[str, dict[str, str]] = {kind: {} for kind in OBJECT_KINDS}
        self.decoder = Decoder()

    def run(self, contents: DirectoryContents | None = None) -> LoadResult:
        if contents is None:
            contents = read_directory(self.directory, max_file_bytes=self.max_file_bytes)
        self.errors.extend(contents.errors)
        if contents.directory_mode is not None and contents.directory_mode & stat.S_IWOTH:
            self.warnings.append(ManifestError(self.directory, "directory is world-writable"))
        for manifest_file in contents.files:
            self._file(manifest_file)
        self._check_references()
        if self.memoizable:
            _MEMO.split, _MEMO.parsed, _MEMO.checked = self.split_now, self.parsed_now, self.checked_now
        if self.cel_unavailable and self.compiled_count_wanted:
            self.errors.append(ManifestError(self.directory, self.cel_unavailable))

        def by_name(cls: type) -> tuple[Any, ...]:
            return tuple(sorted((o for o in self.objects if isinstance(o, cls)), key=lambda o: o.metadata.name))

        return LoadResult(
            validating_policies=by_name(ValidatingAdmissionPolicy),
            validating_bindings=by_name(ValidatingAdmissionPolicyBinding),
            mutating_policies=by_name(MutatingAdmissionPolicy),
            mutating_bindings=by_name(MutatingAdmissionPolicyBinding),
            compiled=MappingProxyType(dict(self.compiled)),
            content_hash=contents.content_hash,
            errors=tuple(self.errors),
            warnings=tuple(self.warnings),
            directory=self.directory,
        )

    compiled_count_wanted = 0

    def _file(self, manifest_file: ManifestFile) -> None:
        path = manifest_file.path
        if manifest_file.mode & stat.S_IWOTH:
            self.warnings.append(ManifestError(path, "file is world-writable"))
        try:
            documents = _MEMO.split.get(manifest_file.data) if self.memoizable else None
            if documents is None:
                documents = split_documents(manifest_file.data)
            self.split_now[manifest_file.data] = documents
        except DocumentError as err:
            self.errors.append(ManifestError(path, f"failed to split YAML documents in file {path!r}: {err}"))
            return
        for document in documents:
            origin = Origin(path, document.index)
            try:
                value = self._parse(document.text)
            except DocumentError as err:
                self.errors.append(ManifestError(path, f"error loading {path}: {err}", document=document.index))
                continue
            self._accept(value, origin)

    def _parse(self, text: str) -> Any:
        value = _MEMO.parsed.get(text) if self.memoizable else None
        if value is None:
            value = parse_document(text)
        self.parsed_now[text] = value
        return value

    def _error(self, origin: Origin, message: str, *, kind: str = "", name: str = "", field_path: str = "") -> None:
        self.errors.append(
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
            self._error(origin, _unsupported(api_version, kind), kind=kind, name=_name_of(value))

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
        memo_key = (cls, id(value), origin)
        checked = _MEMO.checked.get(memo_key) if self.memoizable else None
        if checked is None or checked.value is not value:
            errors_before, self.recorded = len(self.errors), {}
            obj = self._check_object(cls, value, origin)
            checked = _CheckedObject(value, obj, tuple(self.errors[errors_before:]), self.recorded)
        else:
            self.errors.extend(checked.errors)
            for key, program in checked.compiled.items():
                self.compiled.setdefault(key, program)
        self.checked_now[memo_key] = checked
        self._manifest_rules(checked.obj, origin)
        self.objects.append(checked.obj)

    def _check_object(self, cls: type[TopLevel], value: Any, origin: Origin) -> TopLevel:
        """Decoding, defaulting, validation and compilation: everything that depends on this object alone."""
        self.decoder.issues.clear()
        decoded = self.decoder.decode(cls, value)
        obj = replace(decoded, origin=origin)
        kind, name = cls.KIND, obj.metadata.name
        for issue in self.decoder.issues:
            self._error(origin, issue.message, kind=kind, name=name, field_path=issue.field)
        obj = apply_defaults(obj)

        def compile_fn(source: str, expr: Expr, names: Sequence[str], field_path: str) -> str | None:
            return self._compile(kind, name, source, expr, names, field_path)

        for field_error in Validator(compile_fn).validate(obj):
            self._error(origin, str(field_error), kind=kind, name=name, field_path=field_error.field)
        return obj

    def _compile(
        self, kind: str, name: str, source: str, expr: Expr, names: Sequence[str], field_path: str
    ) -> str | None:
        if self.cel is None:
            self.compiled_count_wanted += 1
            return None
        mutating = expr in (Expr.APPLY_CONFIGURATION, Expr.JSON_PATCH)
        # Variables are compiled in order before anything reads them: their types are known here.
        types = {}
        for index, variable in enumerate(names):
            earlier = self.recorded.get(compiled_key(kind, name, f"spec.variables[{index}].expression"))
            types[variable] = getattr(earlier, "result_type", "dyn")
        try:
            program, error = self.cel(source, expr.value, names, types, mutating)
        except Exception as err:
            return f"internal error compiling expression: {type(err).__name__}: {err}"
        if error is not None:
            return error
        if kind == MutatingAdmissionPolicy.KIND and expr is Expr.VARIABLE:
            # Kubernetes checks MAP variables without the patch types, but mutation expressions read them
            # lazily from their own context, so the program kept for evaluation comes from that environment.
            try:
                program, error = self.cel(source, expr.value, names, types, True)
            except Exception as err:
                return f"internal error compiling expression: {type(err).__name__}: {err}"
            if error is not None:
                return error
        key = compiled_key(kind, name, field_path)
        self.compiled.setdefault(key, program)
        self.recorded.setdefault(key, program)
        return None

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
                if binding.spec.policy_name not in names:
                    self._error(
                        binding.origin,
                        f"binding {_q(binding.metadata.name)} references policy {_q(binding.spec.policy_name)} "
                        "which does not exist in the manifest directory",
                        kind=binding.KIND,
                        name=binding.metadata.name,
                        field_path="spec.policyName",
                    )


def _q(value: str) -> str:
    """Go's %q for the simple strings in loader messages."""
    return json.dumps(value, ensure_ascii=False)


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
