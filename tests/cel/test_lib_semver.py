"""The Kubernetes Semver library against blang/semver v4 and upstream semver_test.go."""

from __future__ import annotations

from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.libraries import semver as s
from staticadm.cel.libraries.spec import CelFunctionError


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Version string empty"),
        ("v1.0", "No Major.Minor.Patch elements found"),
        ("1.1", "No Major.Minor.Patch elements found"),
        ("01.1.1", 'Major number must not contain leading zeroes "01"'),
        (" 1.0.0", 'Invalid character(s) found in major number " 1"'),
        ("1.0.0 ", 'Invalid character(s) found in patch number "0 "'),
        ("1..0", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("1.0.0-", "Prerelease is empty"),
        ("1.0.0-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
        ("1.0.0+", "Build meta data is empty"),
        ("1.0.0+a_b", 'Invalid character(s) found in build meta data "a_b"'),
        ("99999999999999999999.0.0", 'parsing "99999999999999999999": value out of range'),
    ],
)
def test_parse_errors_use_blang_text(text: str, message: str) -> None:
    with pytest.raises(CelFunctionError) as caught:
        s.semver(text)
    assert message in str(caught.value)
    assert s.is_semver(text) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v1.0.0", "1.0.0"), ("01.01.01", "1.1.1"), ("1", "1.0.0"), ("v01.01", "1.1.0"), ("1.0.0-alpha", "1.0.0-alpha")],
)
def test_normalize(text: str, expected: str) -> None:
    assert s.to_string(s.semver(text, True)) == expected
    assert s.semver(text, True) == s.semver(expected)


@pytest.mark.parametrize("text", ["", "1. 0.0", "1.0.0 ", " 1.0.0", "1.0-beta", "v"])
def test_normalize_still_rejects(text: str) -> None:
    assert s.is_semver(text, True) is False


def test_short_version_with_metadata_message() -> None:
    with pytest.raises(CelFunctionError, match="short version cannot contain PreRelease/Build meta data"):
        s.semver("1.0-beta", True)


def test_build_metadata_is_ignored_by_equality_and_compare() -> None:
    assert s.semver("1.2.3+build.1") == s.semver("1.2.3+build.2")
    assert s.compare_to(s.semver("1.2.3+a"), s.semver("1.2.3")) == 0


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("1.2.3", "1.0.0", 1),
        ("1.0.0", "1.2.3", -1),
        ("1.0.0-alpha", "1.0.0", -1),
        ("1.0.0-alpha", "1.0.0-alpha.1", -1),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta", -1),
        ("1.0.0-beta.2", "1.0.0-beta.11", -1),
        ("1.0.0-rc.1", "1.0.0-beta.11", 1),
        ("2.0.0", "10.0.0", -1),
    ],
)
def test_compare_follows_semver_precedence(left: str, right: str, expected: int) -> None:
    assert s.compare_to(s.semver(left), s.semver(right)) == expected
    assert s.is_less_than(s.semver(left), s.semver(right)) is (expected == -1)
    assert s.is_greater_than(s.semver(left), s.semver(right)) is (expected == 1)


def test_accessors() -> None:
    version = s.semver("1.2.3-beta.1+build.1")
    assert (s.major(version), s.minor(version), s.patch(version)) == (1, 2, 3)
    assert s.major(s.semver("18446744073709551615.0.0")) == -1  # Go's int64(uint64) conversion


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('semver("v01.01", true) == semver("1.1.0")', True),
        ('semver("1.2.3").compareTo(semver("1.0.0"))', 1),
        ('semver("1.2.3").minor()', 2),
        ('isSemver("1.2.3-beta.1+build.1")', True),
        ('isSemver("01.01.01")', False),
    ],
)
def test_end_to_end(expr: str, expected: Any) -> None:
    result = evaluate_standalone(expr)
    assert not isinstance(result, CompileError | EvalError), result
    assert result == expected


def test_end_to_end_runtime_error() -> None:
    result = evaluate_standalone('semver("v1.0")')
    assert isinstance(result, EvalError)
    assert "No Major.Minor.Patch elements found" in result.message
