"""Kubernetes' CEL Semver library (``k8s.io/apiserver/pkg/cel/library/semverlib.go``).

Parsing is blang/semver v4's ``Parse`` (with the same error texts); ``semver(s, true)`` first applies
Kubernetes' ``normalizeAndParse``. Kubernetes compares Semver values with ``Version.Compare``, which
ignores build metadata, so the payload keeps major/minor/patch and the prerelease identifiers only:
``semver("1.0.0+a") == semver("1.0.0+b")`` is true, as in Kubernetes.
"""

from __future__ import annotations

from typing import Any

from staticadm import gofmt
from staticadm.cel.libraries.spec import CelFunctionError, Function, OpaqueType, Overload
from staticadm.cel.values import make_opaque, opaque_type_name

TYPE_NAME = "kubernetes.Semver"

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_MAX_UINT64 = 2**64 - 1


class SemverError(ValueError):
    """The text is not a semantic version; the message is blang/semver's error text."""


def _contains_only(text: str, allowed: frozenset[str]) -> bool:
    return all(ch in allowed for ch in text)


def _has_leading_zeroes(text: str) -> bool:
    return len(text) > 1 and text[0] == "0"


def _parse_uint(text: str) -> int:
    """strconv.ParseUint(text, 10, 64) with its error texts."""
    if not text or not _contains_only(text, _NUMBERS):
        raise SemverError(f"strconv.ParseUint: parsing {gofmt.quote(text)}: invalid syntax")
    value = int(text)
    if value > _MAX_UINT64:
        raise SemverError(f"strconv.ParseUint: parsing {gofmt.quote(text)}: value out of range")
    return value


def _parse_number(text: str, label: str) -> int:
    if not _contains_only(text, _NUMBERS):
        raise SemverError(f"Invalid character(s) found in {label} number {gofmt.quote(text)}")
    if _has_leading_zeroes(text):
        raise SemverError(f"{label.capitalize()} number must not contain leading zeroes {gofmt.quote(text)}")
    return _parse_uint(text)


def _parse_prerelease(text: str) -> str:
    if not text:
        raise SemverError("Prerelease is empty")
    if _contains_only(text, _NUMBERS):
        if _has_leading_zeroes(text):
            raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {gofmt.quote(text)}")
        _parse_uint(text)
    elif not _contains_only(text, _ALPHANUM):
        raise SemverError(f"Invalid character(s) found in prerelease {gofmt.quote(text)}")
    return text


def parse(text: str) -> tuple[int, int, int, list[str], list[str]]:
    """blang/semver v4 ``Parse``: (major, minor, patch, prerelease, build)."""
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _parse_number(parts[0], "major")
    minor = _parse_number(parts[1], "minor")

    patch_text = parts[2]
    build: list[str] = []
    prerelease: list[str] = []
    if "+" in patch_text:
        patch_text, _, build_text = patch_text.partition("+")
        build = build_text.split(".")
    if "-" in patch_text:
        patch_text, _, pre_text = patch_text.partition("-")
        prerelease = pre_text.split(".")
    patch = _parse_number(patch_text, "patch")

    pre = [_parse_prerelease(item) for item in prerelease]
    for item in build:
        if not item:
            raise SemverError("Build meta data is empty")
        if not _contains_only(item, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in build meta data {gofmt.quote(item)}")
    return major, minor, patch, pre, build


def normalize_and_parse(text: str) -> tuple[int, int, int, list[str], list[str]]:
    """Kubernetes' ``normalizeAndParse``: ParseTolerant without trimming whitespace."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _NUMBERS:
                part = "0" + part
            parts[index] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend(["0"] * (3 - len(parts)))
    return parse(".".join(parts))


def _make(parsed: tuple[int, int, int, list[str], list[str]]) -> dict[str, Any]:
    major, minor, patch, pre, _build = parsed
    # Numbers are strings: blang keeps uint64s, which a CEL int cannot always hold.
    return make_opaque(TYPE_NAME, major=str(major), minor=str(minor), patch=str(patch), pre=".".join(pre))


def _fields(value: Any) -> tuple[int, int, int, list[str]]:
    if opaque_type_name(value) != TYPE_NAME:
        raise CelFunctionError("no such overload")
    pre = value["pre"].split(".") if value["pre"] else []
    return int(value["major"]), int(value["minor"]), int(value["patch"]), pre


def to_string(value: dict[str, Any]) -> str:
    major, minor, patch, pre = _fields(value)
    text = f"{major}.{minor}.{patch}"
    return f"{text}-{'.'.join(pre)}" if pre else text


def semver(text: str, normalize: bool = False) -> dict[str, Any]:
    try:
        return _make(normalize_and_parse(text) if normalize else parse(text))
    except SemverError as err:
        raise CelFunctionError(str(err)) from None


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        normalize_and_parse(text) if normalize else parse(text)
    except SemverError:
        return False
    return True


def _cmp(left: int | str, right: int | str) -> int:
    return (left > right) - (left < right)  # type: ignore[operator]


def _compare_prerelease(left: str, right: str) -> int:
    left_num, right_num = _contains_only(left, _NUMBERS), _contains_only(right, _NUMBERS)
    if left_num and right_num:
        return _cmp(int(left), int(right))
    if left_num != right_num:
        return -1 if left_num else 1
    return _cmp(left, right)


def compare_to(value: dict[str, Any], other: dict[str, Any]) -> int:
    """blang/semver ``Version.Compare``."""
    *left_core, left_pre = _fields(value)
    *right_core, right_pre = _fields(other)
    for left, right in zip(left_core, right_core, strict=True):
        if left != right:
            return _cmp(left, right)
    if not left_pre or not right_pre:
        return _cmp(not left_pre, not right_pre)
    for left_identifier, right_identifier in zip(left_pre, right_pre, strict=False):
        result = _compare_prerelease(left_identifier, right_identifier)
        if result:
            return result
    return _cmp(len(left_pre), len(right_pre))


def is_less_than(value: dict[str, Any], other: dict[str, Any]) -> bool:
    return compare_to(value, other) == -1


def is_greater_than(value: dict[str, Any], other: dict[str, Any]) -> bool:
    return compare_to(value, other) == 1


def _as_int64(number: int) -> int:
    # types.Int(v.Major) converts a uint64 to int64, wrapping above 2^63-1.
    return number - 2**64 if number >= 2**63 else number


def major(value: dict[str, Any]) -> int:
    return _as_int64(_fields(value)[0])


def minor(value: dict[str, Any]) -> int:
    return _as_int64(_fields(value)[1])


def patch(value: dict[str, Any]) -> int:
    return _as_int64(_fields(value)[2])


_S = TYPE_NAME

TYPES = (OpaqueType(TYPE_NAME, to_string),)

FUNCTIONS = (
    Function(
        "semver",
        (
            Overload("string_to_semver", ("string",), _S, semver),
            Overload("string_bool_to_semver", ("string", "bool"), _S, semver),
        ),
    ),
    Function(
        "isSemver",
        (
            Overload("is_semver_string", ("string",), "bool", is_semver),
            Overload("is_semver_string_bool", ("string", "bool"), "bool", is_semver),
        ),
    ),
    Function("isGreaterThan", (Overload("semver_is_greater_than", (_S, _S), "bool", is_greater_than, member=True),)),
    Function("isLessThan", (Overload("semver_is_less_than", (_S, _S), "bool", is_less_than, member=True),)),
    Function("compareTo", (Overload("semver_compare_to", (_S, _S), "int", compare_to, member=True),)),
    Function("major", (Overload("semver_major", (_S,), "int", major, member=True),)),
    Function("minor", (Overload("semver_minor", (_S,), "int", minor, member=True),)),
    Function("patch", (Overload("semver_patch", (_S,), "int", patch, member=True),)),
)
