"""The one YAML/JSON reader: depth and alias limits before anything recursive runs, JSON semantics for YAML."""

from __future__ import annotations

import time
from collections.abc import Callable

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
    assert parse_yaml("t: 2024-01-01T00:00:00Z\nd: 2024-01-01\n1: one\ntrue: yes\nnull: ~\n") == {
        "t": "2024-01-01T00:00:00Z", "d": "2024-01-01", "1": "one", "true": True, "null": None}
    # Merge keys: explicit keys win, earlier maps of a merge list win over later ones.
    assert parse_yaml("b: &b {x: 1, y: 1}\nc: &c {y: 2, z: 2}\nm:\n  <<: [*b, *c]\n  x: 3\n")["m"] == {
        "y": 1, "z": 2, "x": 3}
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


def test_copy_json_does_not_recurse() -> None:
    value: object = 1
    for _ in range(50_000):
        value = {"a": [value]}
    copied = copy_json(value)
    assert copied is not value and isinstance(copied, dict) and copied["a"][0] is not value["a"][0]  # type: ignore[index]
