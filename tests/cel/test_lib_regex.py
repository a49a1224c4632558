"""The Kubernetes regex library (find/findAll) against Go regexp (RE2 syntax, error texts, FindAll)."""

from __future__ import annotations

from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.libraries import regex as rx
from staticadm.cel.libraries.spec import CelFunctionError


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        (")", "error parsing regexp: unexpected ): `)`"),
        ("(a", "error parsing regexp: missing closing ): `(a`"),
        ("[a", "error parsing regexp: missing closing ]: `[a`"),
        ("a**", "error parsing regexp: invalid nested repetition operator: `**`"),
        ("*", "error parsing regexp: missing argument to repetition operator: `*`"),
        ("a|*", "error parsing regexp: missing argument to repetition operator: `*`"),
        ("a{1001}", "error parsing regexp: invalid repeat count: `{1001}`"),
        ("a{2,1}", "error parsing regexp: invalid repeat count: `{2,1}`"),
        ("(a{500}){3}", "error parsing regexp: invalid repeat count: `{3}`"),
        ("\\1", "error parsing regexp: invalid escape sequence: `\\1`"),
        ("\\Z", "error parsing regexp: invalid escape sequence: `\\Z`"),
        ("[z-a]", "error parsing regexp: invalid character class range: `z-a`"),
        ("[[:foo:]]", "error parsing regexp: invalid character class range: `[:foo:]`"),
        ("(?=a)", "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
        ("(?<=a)b", "error parsing regexp: invalid named capture: `(?<=a)b`"),
        ("(?P<a-b>x)", "error parsing regexp: invalid named capture: `(?P<a-b>`"),
        ("\\", "error parsing regexp: trailing backslash at end of expression: ``"),
    ],
)
def test_go_rejections(pattern: str, error: str) -> None:
    assert rx.compile_error(pattern) == error
    with pytest.raises(CelFunctionError) as caught:
        rx.find("abc", pattern)
    assert str(caught.value) == f"Illegal regex: {error}"


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        ("this is a 123 string 456", "[0-9]+", "123"),
        ("this is a 123 string 456", "xyz", ""),
        ("x\n", "x$", ""),  # Go's $ is end of text without (?m)
        ("x\ny", "(?m)x$", "x"),
        ("ABC", "(?i)b", "B"),
        ("aaa", "(?U)a+", "a"),
        ("Héllo", "\\w+", "H"),  # \w is ASCII in RE2
        ("a.b", "\\Q.\\E", "."),
        ("a{,3}", "a{,3}", "a{,3}"),  # not a repeat in Go
        ("A", "\\x{41}", "A"),
        ("é1", "\\pL", "é"),
        ("ab", "(?P<first>a)(?<second>b)", "ab"),
        ("a\u00a0b", "\\s", ""),
        ("k\u212a", "(?i)\u212a", "k"),
    ],
)
def test_find(text: str, pattern: str, expected: str) -> None:
    assert rx.find(text, pattern) == expected


def test_find_all_follows_go_empty_match_rules() -> None:
    assert rx.find_all("baaab", "a*") == ["", "aaa", ""]
    assert rx.find_all("abc", "") == ["", "", "", ""]
    assert rx.find_all("this is a 123 string 456", "[0-9]+") == ["123", "456"]
    assert rx.find_all("this is a 123 string 456", "[0-9]+", 1) == ["123"]
    assert rx.find_all("this is a 123 string 456", "[0-9]+", 0) == []
    assert rx.find_all("this is a 123 string 456", "[0-9]+", -5) == ["123", "456"]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("'this is a 123 string 456'.find('[0-9]+')", "123"),
        ("'this is a 123 string 456'.findAll('[0-9]+')", ["123", "456"]),
        ("'this is a 123 string 456'.findAll('[0-9]+', 1)", ["123"]),
        ("'abc'.find('(?i)B')", "b"),
    ],
)
def test_end_to_end(expr: str, expected: Any) -> None:
    result = evaluate_standalone(expr)
    assert not isinstance(result, CompileError | EvalError), result
    assert result == expected


def test_literal_pattern_errors_at_compile_time() -> None:
    result = evaluate_standalone("'abc'.findAll(')', 1) == []")
    assert isinstance(result, CompileError)
    assert "error parsing regexp: unexpected ): `)`" in result.message
