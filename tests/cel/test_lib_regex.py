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


def test_nested_quantifiers_do_not_backtrack() -> None:
    """Issue 14: this annotation froze Python's backtracking matcher for ~30 s; RE2 answers at once.
    Timing figures are in bench/cel_micro.py ("find nested quantifier")."""
    pattern = "^(\\w+\\s?)*$"
    assert rx.find("a" * 40 + "!", pattern) == ""
    assert rx.find("a" * 40, pattern) == "a" * 40
    assert rx.find_all("ab cd " * 2000 + "!", pattern) == []
    assert evaluate_standalone(f"'{'a' * 31}!'.find('{pattern.replace(chr(92), chr(92) * 2)}')") == ""


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        ("abγδ", "\\p{Greek}+", "γδ"),  # scripts, from RE2's tables
        ("abγδ", "\\P{Greek}+", "ab"),
        ("1aB", "\\p{Letter}+", "aB"),  # Go 1.25+: category aliases
        ("1aB", "\\p{lu}", "B"),  # Go 1.25+: names are case-insensitive
        ("1aB", "\\p{Uppercase_Letter}", "B"),
        ("1aB", "\\p{uppercase letter}", "B"),
        ("1aB", "\\p{Cased_Letter}+", "aB"),
        ("1aB", "\\p{LC}+", "aB"),
        ("é1", "\\p{ASCII}", "1"),
        ("é1", "[\\p{^ASCII}]", "é"),
        ("\U000e0080a", "\\p{Assigned}", "a"),
        ("a\U000e0080", "\\p{Cn}", "\U000e0080"),
        ("ab", "\\p{Any}+", "ab"),
        ("aB", "(?i)\\p{Lu}+", "aB"),  # folding applies to Unicode classes, as in Go
        ("ka", "(?i)[^\u212a]", "a"),  # and to negated classes: the Kelvin sign folds to k
        ("\n", "[^a]", "\n"),  # Go's Perl flags include ClassNL
        ("a-b", "[\\w-]+", "a-b"),
        ("x]", "[]x]+", "x]"),
        ("a\tb", "[[:^alpha:]]", "\t"),
        ("a\u0301", "\\pM", "\u0301"),
    ],
)
def test_unicode_classes_follow_go(text: str, pattern: str, expected: str) -> None:
    assert rx.find(text, pattern) == expected


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("\\p{Nope}", "error parsing regexp: invalid character class range: `\\p{Nope}`"),
        ("[[:^^alpha:]]", "error parsing regexp: invalid character class range: `[:^^alpha:]`"),
        ("\\C", "error parsing regexp: invalid escape sequence: `\\C`"),  # RE2 has \C, Go does not
        ("(?P=n)", "error parsing regexp: invalid or unsupported Perl syntax: `(?P`"),
    ],
)
def test_go_rejects_what_re2_might_accept(pattern: str, error: str) -> None:
    assert rx.compile_error(pattern) == error


def test_find_all_steps_over_whole_code_points() -> None:
    assert rx.find_all("éa", "") == ["", "", ""]
    assert rx.find_all("héllo wörld", "\\w+") == ["h", "llo", "w", "rld"]
    assert rx.find_all("日本語", ".") == ["日", "本", "語"]
    assert rx.find_all("aé", "a*") == ["a", ""]


def test_large_repeats_go_accepts_compile() -> None:
    # 1,000 repeats of a Unicode class: Go accepts it, and RE2 needs more than its default memory budget.
    assert rx.compile_error("\\pL{1000}") is None
    assert rx.find("a" * 1001, "\\pL{1000}") == "a" * 1000


def test_literal_script_class_compiles_and_bad_class_is_a_compile_error() -> None:
    assert evaluate_standalone("'abγδ'.find('\\\\p{Greek}+')") == "γδ"
    result = evaluate_standalone("'abc'.find('\\\\p{Nope}') == ''")
    assert isinstance(result, CompileError)
    assert "error parsing regexp: invalid character class range: `\\p{Nope}`" in result.message
    runtime = evaluate_standalone("'abc'.find('\\\\p{' + 'Nope}') == ''")
    assert isinstance(runtime, EvalError)
    assert runtime.message == "Illegal regex: error parsing regexp: invalid character class range: `\\p{Nope}`"
