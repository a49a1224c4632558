"""The one YAML/JSON reader: depth and alias limits before anything recursive runs, JSON semantics for YAML."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from staticadm.yamljson import (
    MAX_DEPTH,
    ParseError,
    copy_json,
    parse_document,
    parse_json,
    parse_stream,
    parse_yaml,
    parse_yaml_stream,
)
from tests.conftest import SHARED


def _flow(depth: int) -> str:
    return "[" * depth + "]" * depth


def _block(depth: int) -> str:
    # "- - - x": each entry opens a sequence one column further in (go-yaml's indents stack).
    return "- " * depth + "x\n"


@pytest.mark.parametrize("text", [
    "a: " + _flow(100_000), _block(100_000), "{a: " * 100_000, '{"a":' + _flow(100_000) + "}",
    "- " * 50_000 + "[" * 50_000,
])
def test_a_document_nested_100000_deep_is_refused_with_its_place_before_any_parser_recurses(text: str) -> None:
    # libyaml's composer overflowed the C stack near 30,000 levels (SIGSEGV); json raised RecursionError.
    started = time.monotonic()
    with pytest.raises(ParseError, match=rf"line 1, column \d+: nested more than {MAX_DEPTH} levels deep") as caught:
        parse_document(text)
    assert "kube-apiserver's decoders stop at 10000" in str(caught.value)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("nest", [_flow, _block])
def test_the_limit_is_exact_for_yaml(nest: Callable[[int], str]) -> None:
    parse_yaml(nest(MAX_DEPTH))
    with pytest.raises(ParseError, match="nested more than"):
        parse_yaml(nest(MAX_DEPTH + 1))


def test_the_limit_is_exact_for_json_and_brackets_in_strings_do_not_count() -> None:
    assert parse_json(_flow(MAX_DEPTH)) is not None
    with pytest.raises(ParseError, match="nested more than"):
        parse_json(_flow(MAX_DEPTH + 1))
    tricky = '{"a": "' + "]" * 1000 + '\\"]]", "b": ' + _flow(MAX_DEPTH + 1) + "}"
    with pytest.raises(ParseError, match=r"invalid JSON: line 1, column \d+: nested more than"):
        parse_json(tricky)
    assert parse_json('{"a": "' + "[" * (MAX_DEPTH * 2) + '"}') == {"a": "[" * (MAX_DEPTH * 2)}


def test_aliases_count_for_depth() -> None:
    half = MAX_DEPTH // 2 + 1
    text = f"a: &deep {_flow(half)}\nb: {'[' * half}*deep{']' * half}\n"
    with pytest.raises(ParseError, match=r"line 2, column \d+: nested more than"):
        parse_yaml(text)


def _laughs(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_bombs_are_refused_before_they_are_expanded() -> None:
    started = time.monotonic()
    with pytest.raises(ParseError, match="alias bomb"):
        parse_yaml(_laughs(9))
    assert time.monotonic() - started < 0.5
    with pytest.raises(ParseError, match="recursive alias"):
        parse_yaml("a: &a [*a]\n")
    with pytest.raises(ParseError, match="found undefined alias 'b'"):
        parse_yaml("a: *b\n")


def test_each_alias_is_a_value_of_its_own() -> None:
    value = parse_yaml("a: &x {k: [1]}\nb: *x\n")
    assert value == {"a": {"k": [1]}, "b": {"k": [1]}}
    value["b"]["k"].append(2)
    assert value["a"] == {"k": [1]}


def test_yaml_becomes_json_as_sigs_k8s_io_yaml_converts_it() -> None:
    assert parse_yaml("t: 2024-01-01T00:00:00Z\nd: 2024-01-01\n1: one\ntrue: yes\n'null': ~\n") == {
        "t": "2024-01-01T00:00:00Z", "d": "2024-01-01", "1": "one", "true": True, "null": None}
    # Merge keys set the merged maps' keys into the map (a merge list's from its last); under strict decoding a key
    # set twice is an error, explicit or merged (go-yaml v2 decode.go merge + setMapIndex, as kube-apiserver loads).
    assert parse_yaml("b: &b {x: 1, w: 1}\nc: &c {z: 2}\nm:\n  <<: [*b, *c]\n  v: 3\n")["m"] == {
        "w": 1, "x": 1, "z": 2, "v": 3}
    with pytest.raises(ParseError, match='line 4: key "message" already set in map'):
        parse_yaml("a: &a {message: x}\nb:\n  <<: *a\n  message: y\n")
    with pytest.raises(ParseError, match='line 1: key "w" already set in map'):
        parse_yaml("b: &b {x: 1, w: 1}\nc: &c {w: 2, z: 2}\nm:\n  <<: [*b, *c]\n")
    # Keys that only meet as JSON strings are two keys to go-yaml: they load (the later one is kept).
    assert parse_yaml("m: {y: '1', 'true': '1', 1: a, '1': b}\n")["m"] == {"true": "1", "1": "b"}
    # "<<" anywhere but a map key is text, as go-yaml decodes it.
    assert parse_yaml("a: <<\nb: [<<]\n") == {"a": "<<", "b": ["<<"]}
    with pytest.raises(ParseError, match='line 2: key "a" already set in map'):
        parse_yaml("a: 1\na: 2\n")
    with pytest.raises(ParseError, match='json: duplicate field "a"'):
        parse_json('{"a": 1, "a": 2}')


def test_a_syntax_error_later_in_the_document_is_reported_before_a_duplicate_key() -> None:
    with pytest.raises(ParseError, match="line 3, column 1"):
        parse_yaml("a: 1\na: 2\n{\n")


def test_streams_and_single_documents() -> None:
    assert parse_yaml_stream("a: 1\n---\n---\nb: 2\n") == [{"a": 1}, None, {"b": 2}]
    assert parse_yaml("") is None
    with pytest.raises(ParseError, match="line 2, column 1: but found another document"):
        parse_yaml("a: 1\n---\nb: 2\n")
    assert parse_stream('[{"a": 1}]', json_starts=("{", "[")) == [[{"a": 1}]]
    assert parse_stream("- a\n") == [["a"]]
    with pytest.raises(ParseError) as error:
        parse_yaml("a: [\n")
    assert str(error.value).startswith("invalid YAML: line 2, column 1:") and error.value.problem.startswith("line 2")


def test_copy_json_shares_no_container_at_any_depth() -> None:
    class Labels(dict[str, str]):
        pass

    class Items(list[object]):
        pass

    leaf: object = {"labels": Labels(team="a"), "items": Items([1, "x", None]), "nested": [[{"k": 1.5}]]}
    value: object = leaf
    for depth in range(100):  # past the levels copied recursively
        value = {"level": depth, "child": [value, {"same": leaf}]}
    copied = copy_json(value)
    assert copied == value

    def containers(node: object) -> list[object]:
        found: list[object] = []
        pending = [node]
        while pending:
            current = pending.pop()
            if isinstance(current, dict | list):
                found.append(current)
                pending.extend(current.values() if isinstance(current, dict) else current)
        return found

    originals = {id(node) for node in containers(value)}
    copies = containers(copied)
    assert len(copies) == len(containers(value))
    assert all(id(node) not in originals and type(node) in (dict, list) for node in copies)


def test_copy_json_does_not_recurse() -> None:
    value: object = 1
    for _ in range(50_000):
        value = {"a": [value]}
    copied = copy_json(value)
    assert copied is not value and isinstance(copied, dict) and copied["a"][0] is not value["a"][0]  # type: ignore[index]


# go-yaml v2's resolve.go, case by case: (plain scalar, the JSON value kube-apiserver reads from it).
GO_YAML_V2_SCALARS: list[tuple[str, object]] = [
    # Booleans: y/n and on/off in their three spellings; other capitalisations are text.
    ("y", True), ("Y", True), ("yes", True), ("Yes", True), ("YES", True), ("on", True), ("On", True),
    ("ON", True), ("true", True), ("True", True), ("TRUE", True), ("n", False), ("N", False), ("no", False),
    ("NO", False), ("off", False), ("OFF", False), ("false", False), ("FALSE", False),
    ("yEs", "yEs"), ("tRUE", "tRUE"), ("o", "o"), ("nil", "nil"), ("t", "t"),
    # Null.
    ("~", None), ("null", None), ("Null", None), ("NULL", None), ("nULL", "nULL"),
    # Integers by strconv.ParseInt(s, 0, 64), underscores removed first.
    ("0", 0), ("-0", 0), ("+12", 12), ("017", 15), ("0o17", 15), ("0O17", 15), ("0x1F", 31), ("0X1f", 31),
    ("-0x10", -16), ("0b101", 5), ("0B101", 5), ("-0b101", -5), ("0b-101", -5), ("1_000", 1000), ("1__", 1),
    ("9223372036854775807", 9223372036854775807), ("9223372036854775808", 9223372036854775808),
    ("18446744073709551615", 18446744073709551615),
    # Floats: yamlStyleFloat (no dot needed), whole ones written by encoding/json as integers.
    ("1e3", 1000), ("1E3", 1000), ("1.5e3", 1500), ("2.0", 2), ("1.", 1), (".5", 0.5), ("+.5", 0.5),
    ("-1.25", -1.25), ("08", 8), ("09.5", 9.5), ("1_0.5", 10.5), ("1e-7", 1e-07), ("1e21", 1e21),
    ("18446744073709551616", 1.8446744073709552e19), ("-9223372036854775809", -9223372036854775808),
    # Text: no base 60, out of range, not quite numbers, other first characters.
    ("1:30", "1:30"), ("190:20:30", "190:20:30"), ("1e999", "1e999"), (".e3", ".e3"), ("0x", "0x"),
    ("0o8", "0o8"), ("+", "+"), ("-x", "-x"), ("1.2.3", "1.2.3"), ("0x1p3", "0x1p3"), ("inf", "inf"),
    ("=", "="), ("<<", "<<"), ("_1", "_1"), ("1 2", "1 2"),
    # Timestamps stay text (go-yaml hands their text to interface{} targets).
    ("2001-12-14", "2001-12-14"), ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"),
]


@pytest.mark.parametrize(("text", "expected"), GO_YAML_V2_SCALARS)
def test_plain_scalars_resolve_as_go_yaml_v2_then_sigs_k8s_io_yaml(text: str, expected: object) -> None:
    value = parse_yaml(f"v: {text}\n")["v"]
    assert value == expected and type(value) is type(expected)
    # Quoted, every scalar is its text.
    assert parse_yaml(f"v: '{text}'\n") == {"v": text}


def test_map_keys_become_json_keys_as_sigs_k8s_io_yaml_writes_them() -> None:
    # A binding's matchLabels {y: "1"} selects the label key "true" in kube-apiserver.
    assert parse_yaml("matchLabels: {y: '1'}\n") == {"matchLabels": {"true": "1"}}
    assert list(parse_yaml("{off: a, 0x10: b, 1e3: c, 1e6: d, 0.1: e, 123456789.0: f, .inf: g, -.inf: h, "
                           ".nan: i, 1:30: j, 2.50: k}\n")) == [
        "false", "16", "1000", "1e+06", "0.1", "1.2345679e+08", ".inf", "-.inf", ".nan", "1:30", "2.5"]
    with pytest.raises(ParseError, match="line 1, column 1: a null map key has no JSON form"):
        parse_yaml("~: a\n")
    with pytest.raises(ParseError, match="map key 18446744073709551615 is beyond int64"):
        parse_yaml("18446744073709551615: a\n")
    # Keys that resolve alike are the same key (go-yaml's strict decoding compares resolved keys).
    with pytest.raises(ParseError, match="line 2: key true already set in map"):
        parse_yaml("y: 1\ntrue: 2\n")
    # A quoted or !!str "<<" is an ordinary key; a plain or !!merge one merges.
    assert parse_yaml("a: &a {x: 1}\nb: {'<<': *a}\nc: {!!merge <<: *a}\n") == {
        "a": {"x": 1}, "b": {"<<": {"x": 1}}, "c": {"x": 1}}


def test_explicit_tags_as_go_yaml_v2_decodes_them() -> None:
    assert parse_yaml("a: !!str 1\nb: !!int '12'\nc: !!float 1\nd: !!bool y\ne: !!null ''\nf: !custom 12\n"
                      "g: ! yes\nh: !!binary |\n  aGVs\n  bG8=\ni: !!timestamp 2001-01-01\n") == {
        "a": "1", "b": 12, "c": 1, "d": True, "e": None, "f": "12", "g": "yes", "h": "hello", "i": "2001-01-01"}
    with pytest.raises(ParseError, match=re.escape("line 1, column 4: cannot decode !!float `1.5` as a !!int")):
        parse_yaml("a: !!int 1.5\n")
    with pytest.raises(ParseError, match="cannot decode !!str `abc` as a !!bool"):
        parse_yaml("a: !!bool abc\n")
    with pytest.raises(ParseError, match="!!binary value contains invalid base64 data"):
        parse_yaml("a: !!binary '%%'\n")


def test_values_json_cannot_carry_are_refused_with_their_place() -> None:
    for text, shown in ((".inf", "+Inf"), ("-.Inf", "-Inf"), (".NaN", "NaN")):
        with pytest.raises(ParseError, match=re.escape(f"line 2, column 5: json: unsupported value: {shown}")):
            parse_yaml(f"a: 1\nb: [{text}]\n")
    # An infinity may still name a key, anchored or not.
    assert parse_yaml("k: {&i .inf : 1, j: {*i : 2}}\n") == {"k": {".inf": 1, "j": {".inf": 2}}}


ORACLE = SHARED / "oracle" / "k8s-admission-oracle"
#: A label key kube-apiserver's selectors accept (a qualified name), so a key can be checked by matching.
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _pod_review(uid: str, labels: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "team", "name": "p",
        "operation": "CREATE", "userInfo": {"username": "admin"},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team",
                                                                    "labels": labels}}}})


@pytest.mark.skipif(not ORACLE.exists(), reason=f"kube-apiserver's admission code as a command not found at {ORACLE}")
def test_manifest_scalars_mean_to_kube_apiserver_what_they_mean_here(tmp_path: Path) -> None:
    """Each scalar of the table written as a policy's message (where it is text here) and as a binding's
    label selector key, loaded by kube-apiserver's own manifest loader (the oracle): its denial message is the
    text, and its selector matches a pod labelled with the key as read here, not one labelled otherwise."""
    documents, requests, expected = [], [], {}
    texts = [text for text, value in GO_YAML_V2_SCALARS if isinstance(value, str)]
    # Null and unsigned keys are refused, as sigs.k8s.io/yaml refuses them, and "<<" as a key merges.
    keys = {text: key for text, value in GO_YAML_V2_SCALARS if value is not None and text != "<<" and not (
            isinstance(value, int) and value > 2**63 - 1)
            and _LABEL_KEY.fullmatch(key := next(iter(parse_yaml(f"{{{text}: v}}\n"))))}
    for index, (text, selector) in enumerate([(text, f"{{case: m{index}}}") for index, text in enumerate(texts)]
                                             + [("k", f"{{{text}: v}}") for text in keys]):
        documents.append(
            f"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
            f"metadata: {{name: p{index}.static.k8s.io}}\nspec:\n  matchConstraints:\n    resourceRules:\n"
            f"    - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}}\n"
            f"  validations:\n  - expression: 'false'\n    message: {text}\n---\n"
            f"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n"
            f"metadata: {{name: p{index}.static.k8s.io}}\nspec:\n  policyName: p{index}.static.k8s.io\n"
            f"  validationActions: [Deny]\n  matchResources:\n    objectSelector:\n      matchLabels: {selector}\n")
    for index, text in enumerate(texts):
        requests.append(_pod_review(f"m{index}", {"case": f"m{index}"}))
        expected[f"m{index}"] = (False, parse_yaml(f"message: {text}\n")["message"])
    for index, key in enumerate(keys.values()):
        requests.append(_pod_review(f"k{index}", {key: "v"}))
        requests.append(_pod_review(f"x{index}", {key + "-zz9": "v"}))
        expected[f"k{index}"], expected[f"x{index}"] = (False, "k"), (True, "")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "scalars.static.k8s.io.yaml").write_text("---\n".join(documents))
    completed = subprocess.run([str(ORACLE), "--manifests", str(manifests)], input="\n".join(requests) + "\n",
                               capture_output=True, text=True, timeout=120, check=True)
    decisions = {line["uid"]: line for line in map(json.loads, completed.stdout.splitlines())}
    for uid, (allowed, message) in expected.items():
        decision = decisions[uid]
        assert decision["allowed"] is allowed, (uid, decision)
        assert decision["policyMessage"].endswith(f"denied request: {message}" if message else ""), (uid, decision)
    assert len(keys) > 50
