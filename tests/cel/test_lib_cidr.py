"""The Kubernetes CIDR library against upstream cidr_test.go and Go netip.ParsePrefix's error text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from staticadm.cel.libraries import cidr, ip
from staticadm.cel.libraries.spec import CelFunctionError

WRAP = "network address parse error during conversion from string: "


def impl(overload_id: str) -> Callable[..., Any]:
    for function in (*cidr.FUNCTIONS, *ip.FUNCTIONS):
        for overload in function.overloads:
            if overload.overload_id == overload_id:
                return overload.impl
    raise KeyError(overload_id)


def c(s: str) -> dict[str, Any]:
    return impl("string_to_cidr")(s)


def i(s: str) -> dict[str, Any]:
    return impl("string_to_ip")(s)


def test_declarations_match_kubernetes() -> None:
    decls = {f.name: [(o.overload_id, o.params, o.member) for o in f.overloads] for f in cidr.FUNCTIONS}
    assert decls["containsIP"] == [
        ("cidr_contains_ip_string", ("net.CIDR", "string"), True),
        ("cidr_contains_ip_ip", ("net.CIDR", "net.IP"), True),
    ]
    assert decls["ip"] == [("cidr_ip", ("net.CIDR",), True)]
    assert decls["string"] == [("cidr_to_string", ("net.CIDR",), False)]


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ("192.168.0.0/", 'netip.ParsePrefix("192.168.0.0/"): bad bits after slash: ""'),
        ("2001:db8::/", 'netip.ParsePrefix("2001:db8::/"): bad bits after slash: ""'),
        ("192.168.0.0/33", 'netip.ParsePrefix("192.168.0.0/33"): prefix length out of range'),
        ("::1/129", 'netip.ParsePrefix("::1/129"): prefix length out of range'),
        ("10.0.0.0/08", 'netip.ParsePrefix("10.0.0.0/08"): bad bits after slash: "08"'),
        ("10.0.0.0/-1", 'netip.ParsePrefix("10.0.0.0/-1"): bad bits after slash: "-1"'),
        ("10.0.0.0", "netip.ParsePrefix(\"10.0.0.0\"): no '/'"),
        ("fe80::1%eth0/64", 'netip.ParsePrefix("fe80::1%eth0/64"): IPv6 zones cannot be present in a prefix'),
        (
            "10.0.0.256/8",
            'netip.ParsePrefix("10.0.0.256/8"): ParseAddr("10.0.0.256"): IPv4 field has value >255',
        ),
    ],
)
def test_parse_errors(raw: str, detail: str) -> None:
    with pytest.raises(CelFunctionError) as exc:
        c(raw)
    assert str(exc.value) == WRAP + WRAP + detail
    assert impl("is_cidr")(raw) is False


def test_ipv4_mapped_rejected() -> None:
    with pytest.raises(CelFunctionError) as exc:
        c("::ffff:1.2.3.4/120")
    assert str(exc.value) == WRAP + 'IPv4-mapped IPv6 address "::ffff:1.2.3.4/120" is not allowed'
    assert impl("is_cidr")("::ffff:1.2.3.4/120") is False


def test_unmasked_prefix_is_kept() -> None:
    assert impl("is_cidr")("192.168.0.1/16") is True
    assert c("192.168.0.1/24") != c("192.168.0.0/24")
    assert impl("cidr_masked")(c("192.168.0.1/24")) == c("192.168.0.0/24")
    assert impl("cidr_masked")(c("2001:db8:1::/32")) == c("2001:db8::/32")
    assert impl("cidr_ip")(c("192.168.0.1/24")) == i("192.168.0.1")
    assert impl("cidr_to_string")(c("2001:DB8::/32")) == "2001:db8::/32"
    assert impl("cidr_prefix_length")(c("192.168.0.0/16")) == 16


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        ("192.168.0.0/24", "192.168.0.0/25", True),
        ("192.168.0.0/24", "192.168.0.0/23", False),
        ("192.168.0.0/24", "192.169.0.1/32", False),
        ("192.168.0.0/16", "192.168.10.0/24", True),
        ("192.168.0.0/24", "192.168.0.1/32", True),
        ("192.168.1.0/24", "192.168.2.0/24", False),
        ("2001:db8::/32", "2001:db8::/33", True),
        ("2001:db8::/32", "2001:db8::/31", False),
        ("::/0", "1.2.3.0/24", False),
    ],
)
def test_contains_cidr(outer: str, inner: str, expected: bool) -> None:
    assert impl("cidr_contains_cidr")(c(outer), c(inner)) is expected
    assert impl("cidr_contains_cidr_string")(c(outer), inner) is expected


@pytest.mark.parametrize(
    ("outer", "addr", "expected"),
    [
        ("192.168.0.0/24", "192.168.0.1", True),
        ("192.168.0.0/24", "192.168.1.1", False),
        ("2001:db8::/32", "2001:db8::1", True),
        ("2001:db8::/32", "2001:dc8::1", False),
        ("0.0.0.0/0", "::1", False),
        ("192.168.0.1/24", "192.168.0.200", True),
    ],
)
def test_contains_ip(outer: str, addr: str, expected: bool) -> None:
    assert impl("cidr_contains_ip_ip")(c(outer), i(addr)) is expected
    assert impl("cidr_contains_ip_string")(c(outer), addr) is expected


def test_string_arguments_surface_parse_errors() -> None:
    # containsIP answers MaybeNoSuchOverloadErr of the CIDR where the IP did not parse (library/cidr.go
    # cidrContainsIP): kube-apiserver's admission code answers the bare text, so does staticadm.
    with pytest.raises(CelFunctionError, match=r"^no such overload$"):
        impl("cidr_contains_ip_string")(c("10.0.0.0/8"), "nope")
    with pytest.raises(CelFunctionError, match=r"bad bits after slash"):
        impl("cidr_contains_cidr_string")(c("10.0.0.0/8"), "10.0.0.0/")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('cidr("192.168.0.0/24").containsIP(ip("192.168.0.1"))', True),
        ('cidr("192.168.0.0/24").containsIP("192.168.1.1")', False),
        ('cidr("192.168.0.0/16").containsCIDR("192.168.10.0/24")', True),
        ('cidr("192.168.0.1/24").masked() == cidr("192.168.0.0/24")', True),
        ('cidr("192.168.0.1/24").ip() == ip("192.168.0.1")', True),
        ('string(cidr("2001:db8::/32"))', "2001:db8::/32"),
        ('isCIDR("192.168.0.0/33")', False),
    ],
)
def test_end_to_end(source: str, expected: Any) -> None:
    from staticadm.cel import evaluate_standalone

    assert evaluate_standalone(source) == expected
