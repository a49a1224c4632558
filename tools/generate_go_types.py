#!/usr/bin/env python3
"""Generate ``staticadm/kinds/go_types.json.gz``: how Go's encoding/json writes each built-in Kubernetes kind.

kube-apiserver decodes every request body into the Go struct of its kind (k8s.io/api) and admission sees that
struct encoded again: a field that is a struct without ``omitempty`` is always written (a container's
``resources: {}``), an ``omitempty`` field holding an empty value is dropped (``env: []``), a pointer or slice
without ``omitempty`` is written ``null``, unknown fields are gone. ``staticadm.kinds.typed`` redoes that round
trip offline from the facts this script extracts from the Go sources, and ``staticadm.kinds.defaulting`` applies
the ``+default=`` markers recorded here beside the ported ``SetDefaults_*`` functions.

Input: bare git snapshots (or checkouts) of kubernetes/api and kubernetes/apimachinery, read with ``git show``
so no work tree is needed. The shipped file was made from the snapshots the session's ``fetch`` tool brings
(``github:kubernetes/api`` at 10b39a39, July 2026, and ``github:kubernetes/apimachinery`` at eed236ce)::

    python tools/generate_go_types.py --api-git /work/.mirror/kubernetes+api/repo \\
        --apimachinery-git /work/.mirror/kubernetes+apimachinery/repo

Any clone works the same (``git clone --bare https://github.com/kubernetes/api``); ``--api-rev`` and
``--apimachinery-rev`` pick a tag such as ``v0.36.0``. The parser reads only what k8s.io/api's types are
written with (gofmt'd ``type X struct {...}`` blocks, one field per line, named types, string constants); it
fails loudly on a field it cannot read rather than guess.

Output (``format: 1``)::

    {"meta": {...}, "kinds": {"<group>/<version>": {"<Kind>": "<type id>"}},
     "types": {"<type id>": [[json name, omit, ref, default JSON text or null], ...]}}

    omit    := 1 if the tag has omitempty, plus 2 if it has omitzero (metadata.creationTimestamp has both)

    type id := "<Go package path>.<Name>", e.g. "k8s.io/api/core/v1.PodSpec"
    ref     := "string" | "int32" | "int64" | "int" | "uint8" ... | "float64" | "bool" | "bytes" | "any"
             | "time" | "microtime" | "duration" | "quantity" | "intorstring" | "raw"    (custom JSON encoders)
             | "*" ref | "[]" ref | "map:" ref | "@" type id

Fields are in Go's order with inlined (embedded, unnamed) structs flattened in place, as encoding/json writes them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

API = "k8s.io/api"
APIMACHINERY = "k8s.io/apimachinery"
META = f"{APIMACHINERY}/pkg/apis/meta/v1"

#: Types whose JSON form is their own MarshalJSON/UnmarshalJSON, by package path and name.
SPECIAL_TYPES = {
    f"{META}.Time": "time",
    f"{META}.MicroTime": "microtime",
    f"{META}.Duration": "duration",
    f"{META}.FieldsV1": "raw",
    f"{APIMACHINERY}/pkg/api/resource.Quantity": "quantity",
    f"{APIMACHINERY}/pkg/util/intstr.IntOrString": "intorstring",
    f"{APIMACHINERY}/pkg/runtime.RawExtension": "raw",
    f"{APIMACHINERY}/pkg/types.UID": "string",
    f"{APIMACHINERY}/pkg/types.NodeName": "string",
}
BASIC_TYPES = {
    "string": "string", "bool": "bool", "int": "int64", "int8": "int8", "int16": "int16", "int32": "int32",
    "int64": "int64", "uint": "uint64", "uint8": "uint8", "byte": "uint8", "uint16": "uint16", "uint32": "uint32",
    "uint64": "uint64", "float32": "float64", "float64": "float64", "interface{}": "any", "any": "any",
}
#: The apimachinery packages whose structs the API types use.
APIMACHINERY_PACKAGES = ("pkg/apis/meta/v1", "pkg/runtime", "pkg/api/resource", "pkg/util/intstr", "pkg/types")

#: The second column of a field: encoding/json's omitempty and (Go 1.24) omitzero options.
OMITEMPTY, OMITZERO = 1, 2

_TYPE_LINE = re.compile(r"^type (\w+) (.+)$")
_FIELD = re.compile(r"^\t(?P<names>\w+(?:, \w+)*)\s+(?P<type>[^\s`]+)\s*(?:`(?P<tag>[^`]*)`)?\s*(?://.*)?$")
_EMBEDDED = re.compile(r"^\t(?P<type>\*?[\w.]+)\s*(?:`(?P<tag>[^`]*)`)?\s*(?://.*)?$")
_CONST = re.compile(r'^\t?(?:const )?(\w+)(?:\s+[\w.]+)?\s*=\s*("(?:[^"\\]|\\.)*"|-?\d+|true|false)\s*(?://.*)?$')
_IMPORT = re.compile(r'^\s*(?:import\s+)?(?:(\w+|\.|_)\s+)?"([^"]+)"')


@dataclass
class GoField:
    name: str
    type_text: str
    tag: str
    embedded: bool
    default: str | None


@dataclass
class GoPackage:
    path: str
    structs: dict[str, list[GoField]] = field(default_factory=dict)
    #: Named non-struct types: name -> (underlying type text, imports of its file).
    named: dict[str, str] = field(default_factory=dict)
    consts: dict[str, str] = field(default_factory=dict)
    #: Per type: the imports of the file that declares it.
    imports: dict[str, dict[str, str]] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)
    group: str | None = None


def git_files(repo: str, rev: str, directory: str) -> dict[str, str]:
    names = subprocess.run(["git", "-C", repo, "ls-tree", "--name-only", f"{rev}:{directory}"], check=True,
                           capture_output=True, text=True).stdout.split()
    files = {}
    for name in names:
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("zz_generated") \
                or name.startswith("generated.") or "swagger_doc" in name or "fuzz" in name:
            continue
        files[name] = subprocess.run(["git", "-C", repo, "show", f"{rev}:{directory}/{name}"], check=True,
                                     capture_output=True, text=True).stdout
    return files


def git_dirs(repo: str, rev: str, directory: str = "") -> list[str]:
    listing = subprocess.run(["git", "-C", repo, "ls-tree", "-d", "--name-only", f"{rev}:{directory}" if directory
                              else rev], check=True, capture_output=True, text=True).stdout.split()
    return listing


def parse_package(path: str, files: dict[str, str]) -> GoPackage:
    package = GoPackage(path)
    for name, text in sorted(files.items()):
        # The group: register.go's GroupName constant (doc.go's +groupName marker where there is none).
        found = re.search(r'^const GroupName = "([\w.]*)"', text, re.MULTILINE) if name == "register.go" else \
            re.search(r"\+groupName=([\w.]*)", text) if name == "doc.go" else None
        if found and (package.group is None or name == "register.go"):
            package.group = found.group(1)
        _parse_file(package, text)
    return package


def _parse_file(package: GoPackage, text: str) -> None:
    imports: dict[str, str] = {}
    lines = text.splitlines()
    comments: list[str] = []
    index = 0
    in_import = in_const = False
    while index < len(lines):
        line = lines[index]
        index += 1
        if in_import:
            if line.strip() == ")":
                in_import = False
            elif (found := _IMPORT.match(line)) is not None:
                alias = found.group(1) or found.group(2).rsplit("/", 1)[-1]
                imports[alias] = found.group(2)
            continue
        if line.startswith("import ("):
            in_import = True
            continue
        if line.startswith("import "):
            found = _IMPORT.match(line)
            if found is not None:
                imports[found.group(1) or found.group(2).rsplit("/", 1)[-1]] = found.group(2)
            continue
        if line.startswith("const (") or line.startswith("var ("):
            in_const = True
            continue
        if in_const:
            if line.strip() == ")":
                in_const = False
            elif (found := _CONST.match(line)) is not None:
                package.consts[found.group(1)] = found.group(2)
            continue
        if line.startswith("const "):
            found = _CONST.match(line)
            if found is not None:
                package.consts[found.group(1)] = found.group(2)
            continue
        if line.startswith("//"):
            comments.append(line)
            continue
        if not line.strip():
            continue
        type_line = _TYPE_LINE.match(line)
        if type_line is None:
            comments = []
            continue
        type_name, rest = type_line.groups()
        package.imports[type_name] = imports
        if "+k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object" in "\n".join(comments):
            package.kinds.append(type_name)
        comments = []
        if rest.strip() == "struct {":
            fields, index = _parse_struct(lines, index, f"{package.path}.{type_name}")
            package.structs[type_name] = fields
        elif rest.strip() == "struct{}":
            package.structs[type_name] = []
        elif not rest.startswith("interface"):
            # A type alias (type X = other.X) encodes as the aliased type.
            package.named[type_name] = rest.split("//")[0].strip().removeprefix("= ")


def _parse_struct(lines: list[str], index: int, where: str) -> tuple[list[GoField], int]:
    fields: list[GoField] = []
    default: str | None = None
    while True:
        line = lines[index]
        index += 1
        if line == "}":
            return fields, index
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("/*"):
            while "*/" not in lines[index - 1]:
                index += 1
            continue
        if stripped.startswith("//"):
            found = re.match(r"//\s*\+default=(.*)$", stripped)
            if found:
                default = found.group(1).strip()
            continue
        field_match = _FIELD.match(line)
        if field_match is not None:
            for name in field_match.group("names").split(", "):
                fields.append(GoField(name, field_match.group("type"), field_match.group("tag") or "", False,
                                      default))
        else:
            embedded = _EMBEDDED.match(line)
            if embedded is None:
                # Unreadable (a func-typed field of some internal struct): fatal only if a kind uses the type.
                while lines[index] != "}":
                    index += 1
                return [GoField("", line, "", False, "unreadable")], index + 1
            fields.append(GoField(embedded.group("type").rsplit(".", 1)[-1].lstrip("*"), embedded.group("type"),
                                  embedded.group("tag") or "", True, default))
        default = None


class Generator:
    def __init__(self, packages: dict[str, GoPackage]) -> None:
        self.packages = packages
        self.types: dict[str, list[list[object]]] = {}
        self.unresolved: set[str] = set()

    def ref(self, type_text: str, package: GoPackage, owner: str) -> str:
        """The data file's ref for a Go type expression written in ``package`` (inside type ``owner``)."""
        if type_text.startswith("*"):
            return "*" + self.ref(type_text[1:], package, owner)
        if type_text == "[]byte":
            return "bytes"
        if type_text.startswith("[]"):
            return "[]" + self.ref(type_text[2:], package, owner)
        if type_text.startswith("map["):
            depth, position = 0, 3
            for position in range(3, len(type_text)):
                depth += {"[": 1, "]": -1}.get(type_text[position], 0)
                if depth == 0:
                    break
            return "map:" + self.ref(type_text[position + 1:], package, owner)
        if type_text in BASIC_TYPES:
            return BASIC_TYPES[type_text]
        if "." in type_text:
            alias, name = type_text.split(".", 1)
            imports = package.imports.get(owner, {})
            if alias not in imports:
                raise SystemExit(f"{package.path}.{owner}: unknown package {alias!r} in {type_text}")
            return self.named_ref(imports[alias], name)
        return self.named_ref(package.path, type_text)

    def named_ref(self, package_path: str, name: str) -> str:
        type_id = f"{package_path}.{name}"
        if type_id in SPECIAL_TYPES:
            return SPECIAL_TYPES[type_id]
        package = self.packages.get(package_path)
        if package is None:
            self.unresolved.add(type_id)
            return "any"
        if name in package.named:
            return self.ref(package.named[name], package, name)
        if name in package.structs:
            self.struct(package, name)
            return "@" + type_id
        self.unresolved.add(type_id)
        return "any"

    def struct(self, package: GoPackage, name: str) -> list[list[object]]:
        type_id = f"{package.path}.{name}"
        if type_id in self.types:
            return self.types[type_id]
        self.types[type_id] = fields = []
        for go_field in package.structs[name]:
            if go_field.default == "unreadable":
                raise SystemExit(f"{type_id}: cannot read the field line {go_field.type_text!r}")
            json_name, _, options = go_field.tag.partition('json:"')[2].partition('"')[0].partition(",")
            if 'json:"' not in go_field.tag:
                json_name, options = "", ""
            if json_name == "-":
                continue
            if go_field.embedded and not json_name:
                # Inlined: the embedded struct's fields take its place (encoding/json's embedding rules).
                embedded_ref = self.ref(go_field.type_text.lstrip("*"), package, name)
                if not embedded_ref.startswith("@"):
                    raise SystemExit(f"{type_id}: cannot inline {go_field.type_text}")
                fields.extend(self.types[embedded_ref[1:]])
                continue
            if not go_field.name[0].isupper():
                continue
            field_ref = self.ref(go_field.type_text, package, name)
            flags = options.split(",")
            omit = (OMITEMPTY if "omitempty" in flags else 0) | (OMITZERO if "omitzero" in flags else 0)
            fields.append([json_name or go_field.name, omit, field_ref,
                           self.default(go_field.default, package, type_id)])
        return fields

    def default(self, marker: str | None, package: GoPackage, where: str) -> str | None:
        """A ``+default=`` marker as JSON text: a JSON literal, or ``ref(Const)`` of a constant of the package."""
        if marker is None:
            return None
        found = re.fullmatch(r"ref\((?:[\w/.]+\.)?(\w+)\)", marker)
        if found:
            value = package.consts.get(found.group(1))
            if value is None:
                raise SystemExit(f"{where}: +default={marker} names no constant of {package.path}")
            marker = value
        json.loads(marker)  # every default the generator records is JSON
        return marker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api-git", required=True)
    parser.add_argument("--api-rev", default="HEAD")
    parser.add_argument("--apimachinery-git", required=True)
    parser.add_argument("--apimachinery-rev", default="HEAD")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "staticadm/kinds/go_types.json.gz"))
    args = parser.parse_args(argv)

    packages: dict[str, GoPackage] = {}
    for directory in APIMACHINERY_PACKAGES:
        path = f"{APIMACHINERY}/{directory}"
        packages[path] = parse_package(path, git_files(args.apimachinery_git, args.apimachinery_rev, directory))
    api_packages: list[GoPackage] = []
    for group_dir in git_dirs(args.api_git, args.api_rev):
        if group_dir.startswith(".") or group_dir in ("testdata", "imagepolicy"):
            continue
        for version in git_dirs(args.api_git, args.api_rev, group_dir):
            if not re.fullmatch(r"v\d+(?:(?:alpha|beta)\d+)?", version):
                continue
            path = f"{API}/{group_dir}/{version}"
            package = parse_package(path, git_files(args.api_git, args.api_rev, f"{group_dir}/{version}"))
            packages[path] = package
            api_packages.append(package)

    generator = Generator(packages)
    kinds: dict[str, dict[str, str]] = {}
    for package in api_packages:
        if package.group is None:
            continue
        version = package.path.rsplit("/", 1)[-1]
        group_version = f"{package.group}/{version}" if package.group else version
        for kind in package.kinds:
            if kind not in package.structs or kind.endswith("List"):
                continue
            generator.struct(package, kind)
            kinds.setdefault(group_version, {})[kind] = f"{package.path}.{kind}"
    if generator.unresolved:
        print("types kept as given (no struct found):", ", ".join(sorted(generator.unresolved)), file=sys.stderr)
    api_rev = subprocess.run(["git", "-C", args.api_git, "rev-parse", args.api_rev], check=True, capture_output=True,
                             text=True).stdout.strip()
    machinery_rev = subprocess.run(["git", "-C", args.apimachinery_git, "rev-parse", args.apimachinery_rev],
                                   check=True, capture_output=True, text=True).stdout.strip()
    document = {
        "format": 1,
        "meta": {"generator": "tools/generate_go_types.py", "k8s.io/api": api_rev,
                 "k8s.io/apimachinery": machinery_rev},
        "kinds": {gv: dict(sorted(k.items())) for gv, k in sorted(kinds.items())},
        "types": dict(sorted(generator.types.items())),
    }
    data = json.dumps(document, separators=(",", ":"), sort_keys=False).encode()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(data, mtime=0))
    print(f"{out}: {len(kinds)} group-versions, {sum(map(len, kinds.values()))} kinds, {len(generator.types)} types, "
          f"{out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
