"""The Kubernetes format library against upstream format_test.go and apimachinery's messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from staticadm.cel.libraries import format as fmt

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def impl(overload_id: str) -> Callable[..., Any]:
    for function in fmt.FUNCTIONS:
        for overload in function.overloads:
            if overload.overload_id == overload_id:
                return overload.impl
    raise KeyError(overload_id)


def validate(name: str, value: str) -> list[str] | None:
    return impl("format-validate")(impl(f"format.{name}")(), value)


def test_declarations() -> None:
    names = {f.name for f in fmt.FUNCTIONS}
    assert names == {"validate", "format.named"} | {f"format.{k}" for k in fmt.CONSTANT_FORMATS}
    validate_overload = next(f for f in fmt.FUNCTIONS if f.name == "validate").overloads[0]
    assert validate_overload.result == "optional_type(list(string))"
    assert validate_overload.member


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("dns1123Label", "my-label-name"),
        ("dns1123Subdomain", "apiextensions.k8s.io"),
        ("dns1035Label", "my-label-name"),
        ("qualifiedName", "apiextensions.k8s.io/v1beta1"),
        ("qualifiedName", "my.name"),
        ("dns1123LabelPrefix", "my-label-prefix-"),
        ("dns1123SubdomainPrefix", "mysubdomain.prefix.-"),
        ("dns1035LabelPrefix", "my-label-prefix-"),
        ("labelValue", "my-cool-label-Value"),
        ("labelValue", ""),
        ("uri", "http://example.com"),
        ("uri", "/just/a/path?q=1"),
        ("uri", "mailto:someone@example.com"),
        ("uri", "http://[fe80::1%25en0]:8080/x"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
        ("uuid", "123E4567E89B12D3A456426614174000"),
        ("byte", "aGVsbG8="),
        ("date", "2021-01-01"),
        ("date", "2024-02-29"),
        ("datetime", "2021-01-01T00:00:00Z"),
        ("datetime", "2021-01-01t23:59:59.123+05:30"),
    ],
)
def test_valid(name: str, value: str) -> None:
    assert validate(name, value) is None


@pytest.mark.parametrize(
    ("name", "value", "errors"),
    [
        ("dns1123Label", "contains a space", [LABEL_MSG]),
        ("dns1123Label", "a.b", ["must not contain dots"]),
        ("dns1123Label", "a" * 64, ["must be no more than 63 characters"]),
        ("dns1123Subdomain", "contains a space", [SUBDOMAIN_MSG]),
        ("dns1035Label", "contains a space", [DNS1035_MSG]),
        ("dns1035Label", "1abc", [DNS1035_MSG]),
        ("qualifiedName", "contains a space", [NAME_PART_MSG]),
        ("qualifiedName", "/name", ["prefix part must be non-empty"]),
        ("qualifiedName", "example.com/", ["name part must be non-empty", NAME_PART_MSG]),
        ("qualifiedName", "Example.com/x", ["prefix part " + SUBDOMAIN_MSG]),
        (
            "qualifiedName",
            "a/b/c",
            [
                "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
                "and '/' (e.g. 'example.com/MyName')"
            ],
        ),
        ("dns1123LabelPrefix", "contains a space-", [LABEL_MSG]),
        ("dns1123SubdomainPrefix", "contains a space-", [SUBDOMAIN_MSG]),
        ("dns1035LabelPrefix", "contains a space-", [DNS1035_MSG]),
        ("labelValue", "my-cool-label-Value!!\n\n!!!", [LABEL_VALUE_MSG]),
        ("labelValue", "trailing\n", [LABEL_VALUE_MSG]),
        ("uri", "", ['parse "": empty url']),
        ("uri", "example.com", ['parse "example.com": invalid URI for request']),
        ("uri", "://x", ['parse "://x": missing protocol scheme']),
        ("uri", "http://a b.com/", ['parse "http://a b.com/": invalid character " " in host name']),
        ("uri", "http://x.com:abc/", ['parse "http://x.com:abc/": invalid port ":abc" after host']),
        ("uri", "http://x.com/%zz", ['parse "http://x.com/%zz": invalid URL escape "%zz"']),
        ("uri", "http://x\n", ['parse "http://x\\n": net/url: invalid control character in URL']),
        ("uri", "http://[1.2.3.4]/", ['parse "http://[1.2.3.4]/": invalid IP-literal']),
        ("uuid", "123e4567-e89b-12d3-a456-42661417400", ["does not match the UUID format"]),
        ("byte", "aGVsbG8", ["invalid base64"]),
        ("byte", "", ["invalid base64"]),
        ("date", "2020-01-32", ["invalid date"]),
        ("date", "2021-02-29", ["invalid date"]),
        ("date", "2021-1-01", ["invalid date"]),
        ("datetime", "2020-01-32T00:00:00Z", ["invalid datetime"]),
        ("datetime", "2020-01-01T24:00:00Z", ["invalid datetime"]),
        ("datetime", "2020-01-01", ["invalid datetime"]),
    ],
)
def test_invalid(name: str, value: str, errors: list[str]) -> None:
    assert validate(name, value) == errors


def test_named_lookup_and_equality() -> None:
    named = impl("format-named")
    assert named("unknown") is None
    for key in fmt.CONSTANT_FORMATS:
        assert named(key) == impl(f"format.{key}")()
        for other in fmt.CONSTANT_FORMATS:
            if other != key:
                assert impl(f"format.{key}")() != impl(f"format.{other}")()


# Listed in tests/cel/known_gaps.json: the engine cannot declare optional_type(T) results.


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('format.dns1123Label().validate("contains a space").value()', [LABEL_MSG]),
        ('format.named("unknown").hasValue()', False),
        ('format.named("uri").value() == format.uri()', True),
        ("format.dns1123Label() == format.dns1123Subdomain()", False),
        ('format.byte().validate("aGVsbG8=") == optional.none()', True),
    ],
)
def test_end_to_end(source: str, expected: Any) -> None:
    from staticadm.cel import evaluate_standalone

    assert evaluate_standalone(source) == expected
