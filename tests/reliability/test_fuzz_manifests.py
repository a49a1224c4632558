"""Fuzzing the manifest loader: random and type-confused YAML, alias bombs, enormous lists, odd bytes."""

from __future__ import annotations

import contextlib
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from staticadm.manifests import LoadResult, load_manifest_directory
from staticadm.manifests.documents import DocumentError, split_documents
from staticadm.yamljson import ParseError, parse_document
from tests.reliability.fuzzing import budget, mutated_manifests

YAML_FRAGMENTS = st.sampled_from([
    "---\n", "--- # c\n", "---x\n", "a: b\n", "a: &x [1, 2]\n", "b: *x\n", "<<: *x\n", "? [a]\n: b\n",
    "!!python/object:os.system x\n",
    "!!binary aGk=\n", "k: !!str 1\n", "- - - -\n", "{\n", "}\n", "'\n", '"\\x00"\n', "\t- a\n", "key: 0x1F\n",
    "key: 2024-01-01\n", "key: .inf\n", "a: b\na: c\n", "\ufeff", "%YAML 1.1\n", "%TAG ! x\n", "&a [*a]\n",
    "apiVersion: admissionregistration.k8s.io/v1\n", "kind: ValidatingAdmissionPolicy\n", "kind: List\nitems:\n",
    "metadata: {name: x.static.k8s.io}\n", "spec: {validations: [{expression: '1'}]}\n",
])

RANDOM_FILES = st.lists(YAML_FRAGMENTS | st.text(max_size=30), max_size=12).map("".join).map(str.encode) \
    | st.binary(max_size=200)


def _load(files: dict[str, bytes]) -> LoadResult:
    with tempfile.TemporaryDirectory() as directory:
        for name, data in files.items():
            Path(directory, name).write_bytes(data)
        result = load_manifest_directory(directory)
    assert isinstance(result, LoadResult)
    for error in result.errors:
        assert str(error)  # every error renders
    return result


@budget(60)
@given(data=RANDOM_FILES)
def test_random_documents_split_and_parse_or_fail_cleanly(data: bytes) -> None:
    try:
        documents = split_documents(data)
    except DocumentError:
        return
    for document in documents:
        with contextlib.suppress(ParseError):
            parse_document(document.text)


def test_control_character_is_a_manifest_error() -> None:
    # Found by the fuzzer with PyYAML's pure-Python reader, which refuses such characters while the
    # loader is being built (outside documents._parse_yaml's try block); LibYAML reports them later.
    result = load_manifest_directory_with({"a.yaml": b"kind: \x1b\n"})
    assert any("a.yaml" in str(error) for error in result.errors)


def load_manifest_directory_with(files: dict[str, bytes]) -> LoadResult:
    with tempfile.TemporaryDirectory() as directory:
        for name, data in files.items():
            Path(directory, name).write_bytes(data)
        return load_manifest_directory(directory)


@budget(30)
@given(files=st.dictionaries(st.sampled_from(["a.yaml", "b.yml", "c.json", "d.YAML", ".e.yaml", "f.txt"]),
                             RANDOM_FILES, max_size=3))
def test_random_files_load_without_raising(files: dict[str, bytes]) -> None:
    _load(files)


@budget(60)
@given(objects=mutated_manifests(), form=st.sampled_from(["yaml", "json", "list"]))
def test_type_confused_manifests_load_without_raising(objects: list[Any], form: str) -> None:
    if form == "yaml":
        data = yaml.safe_dump_all(objects, allow_unicode=True).encode()
    elif form == "json":
        data = "\n".join(json.dumps(o) for o in objects).encode()
    else:
        data = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}).encode()
    result = _load({"fuzz.static.k8s.io.yaml": data})
    if not result.errors:
        assert [p.metadata.name for p in result.validating_policies] == ["fuzz.static.k8s.io"]


def _billion_laughs(levels: int) -> bytes:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def test_alias_bombs_and_recursive_aliases_are_refused_in_bounded_time_and_memory() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    for data in (_billion_laughs(9), b"a: &a [*a]\n", b"&a {k: *a}\n", b"a: &a {<<: *a}\n"):
        result = _load({"bomb.yaml": data})
        assert result.errors, data[:60]
    assert time.monotonic() - started < 20
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 500, f"peak RSS grew by {grown_mib:.0f} MiB"


def test_enormous_lists_and_many_documents() -> None:
    # A list of 30k rules, 3k documents, a 2 MiB string (PyYAML's pure-Python parser needs ~80 µs a
    # node, so a full 3 MiB of list items would take half a minute: bounded, but not for the suite).
    rules = "spec:\n  matchConstraints:\n    resourceRules:\n" + "    - {}\n" * 30_000
    many = "---\n".join(f"kind: ConfigMap\nname: c{i}\n" for i in range(3_000))
    huge = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: '" \
           + "x" * 2_000_000 + "'}\n"
    started = time.monotonic()
    for data in (rules, many, huge):
        result = _load({"big.yaml": data.encode()})
        assert result.errors
    # One byte over the limit is refused before parsing.
    too_big = _load({"big.yaml": b"#" * (3 * 1024 * 1024 + 1)})
    assert any("larger than the limit" in str(e) for e in too_big.errors)
    assert time.monotonic() - started < 60
