"""The Kubernetes IP library against upstream ip_test.go and Go netip's exact error text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from staticadm.cel.libraries import ip
from staticadm.cel.libraries.spec import CelFunctionError


def impl(overload_id: str) -> Callable[..., Any]:
    for function in ip.FUNCTIONS:
        for overload in function.overloads:
            if overload.overload_id == overload_id:
                return overload.impl
    raise KeyError(overload_id)


def parse(s: str) -> dict[str, Any]:
    return impl("string_to_ip")(s)


def test_declarations_match_kubernetes() -> None:
    names = {f.name: [(o.overload_id, o.params, o.result, o.member) for o in f.overloads] for f in ip.FUNCTIONS}
    assert names["ip"] == [("string_to_ip", ("string",), "net.IP", False)]
    assert names["ip.isCanonical"] == [("ip_is_canonical", ("string",), "bool", False)]
    assert names["family"] == [("ip_family", ("net.IP",), "int", True)]
    assert names["string"] == [("ip_to_string", ("net.IP",), "string", False)]
    assert [t.name for t in ip.TYPES] == ["net.IP"]


def test_equal_addresses_have_equal_payloads() -> None:
    assert parse("192.168.0.1") == parse("192.168.0.1")
    assert parse("2001:db8::1") == parse("2001:DB8:0:0::1")
    assert parse("192.168.0.1") != parse("192.168.0.2")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "192.168.0.1.0",
            'IP Address "192.168.0.1.0" parse error during conversion from string: '
            'ParseAddr("192.168.0.1.0"): IPv4 address too long',
        ),
        (
            "2001:db8:::68",
            'IP Address "2001:db8:::68" parse error during conversion from string: '
            'ParseAddr("2001:db8:::68"): each colon-separated field must have at least one digit (at ":68")',
        ),
        (
            "127.0.0.256",
            'IP Address "127.0.0.256" parse error during conversion from string: '
            'ParseAddr("127.0.0.256"): IPv4 field has value >255',
        ),
        (
            "010.0.0.1",
            'IP Address "010.0.0.1" parse error during conversion from string: '
            'ParseAddr("010.0.0.1"): IPv4 field has octet with leading zero',
        ),
        (
            "1.2.3.x",
            'IP Address "1.2.3.x" parse error during conversion from string: '
            'ParseAddr("1.2.3.x"): unexpected character (at "x")',
        ),
        (
            "",
            'IP Address "" parse error during conversion from string: ParseAddr(""): unable to parse IP',
        ),
        (
            "%eth0",
            'IP Address "%eth0" parse error during conversion from string: ParseAddr("%eth0"): missing IPv6 address',
        ),
        (
            "12345::1",
            'IP Address "12345::1" parse error during conversion from string: '
            'ParseAddr("12345::1"): each group must have 4 or less digits (at "12345::1")',
        ),
        (
            "1:2:3:4:5:6:7:8:9",
            'IP Address "1:2:3:4:5:6:7:8:9" parse error during conversion from string: '
            'ParseAddr("1:2:3:4:5:6:7:8:9"): trailing garbage after address (at "9")',
        ),
        (
            "1::2::3",
            'IP Address "1::2::3" parse error during conversion from string: '
            'ParseAddr("1::2::3"): multiple :: in address (at ":3")',
        ),
        ("fe80::1%eth0", 'IP address "fe80::1%eth0" with zone value is not allowed'),
        ("::ffff:1.2.3.4", 'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed'),
    ],
)
def test_parse_errors(raw: str, message: str) -> None:
    with pytest.raises(CelFunctionError) as exc:
        parse(raw)
    assert str(exc.value) == message
    assert impl("is_ip")(raw) is False


def test_is_ip() -> None:
    assert impl("is_ip")("127.0.0.1") is True
    assert impl("is_ip")("::1") is True
    assert impl("is_ip")("::1.2.3.4") is True  # IPv4-compatible (not mapped) is plain IPv6


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("127.0.0.1", True),
        ("2001:db8::abcd", True),
        ("2001:DB8::ABCD", False),
        ("2001:db8::0:0:0:abcd", False),
        ("2001:db8:0:0:1:0:0:1", False),
        ("2001:db8::1:0:0:1", True),
    ],
)
def test_is_canonical(raw: str, canonical: bool) -> None:
    assert impl("ip_is_canonical")(raw) is canonical


def test_is_canonical_propagates_parse_error() -> None:
    with pytest.raises(CelFunctionError, match=r"IP Address \"2001:db8:::68\" parse error"):
        impl("ip_is_canonical")("2001:db8:::68")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2001:db8:0:0:0:0:0:abcd", "2001:db8::abcd"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
        ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"),
        ("1:2:3:4:5:6:7:0", "1:2:3:4:5:6:7:0"),
        ("::1.2.3.4", "::102:304"),
        ("192.168.000.1".replace("000", "0"), "192.168.0.1"),
    ],
)
def test_string_is_go_canonical(raw: str, expected: str) -> None:
    assert impl("ip_to_string")(parse(raw)) == expected


@pytest.mark.parametrize(
    ("raw", "family", "unspecified", "loopback", "ll_multicast", "ll_unicast", "global_unicast"),
    [
        ("192.168.0.1", 4, False, False, False, False, True),
        ("0.0.0.0", 4, True, False, False, False, False),
        ("127.0.0.1", 4, False, True, False, False, False),
        ("224.0.0.1", 4, False, False, True, False, False),
        ("224.0.1.1", 4, False, False, False, False, False),
        ("169.254.169.254", 4, False, False, False, True, False),
        ("255.255.255.255", 4, False, False, False, False, False),
        ("::", 6, True, False, False, False, False),
        ("::1", 6, False, True, False, False, False),
        ("ff02::1", 6, False, False, True, False, False),
        ("fd00::1", 6, False, False, False, False, True),
        ("fe80::1", 6, False, False, False, True, False),
        ("fd80::1", 6, False, False, False, False, True),
        ("2001:db8::abcd", 6, False, False, False, False, True),
        ("ff00::1", 6, False, False, False, False, False),
    ],
)
def test_members(
    raw: str,
    family: int,
    unspecified: bool,
    loopback: bool,
    ll_multicast: bool,
    ll_unicast: bool,
    global_unicast: bool,
) -> None:
    value = parse(raw)
    assert impl("ip_family")(value) == family
    assert impl("ip_is_unspecified")(value) is unspecified
    assert impl("ip_is_loopback")(value) is loopback
    assert impl("ip_is_link_local_multicast")(value) is ll_multicast
    assert impl("ip_is_link_local_unicast")(value) is ll_unicast
    assert impl("ip_is_global_unicast")(value) is global_unicast


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('ip("192.168.0.1").family()', 4),
        ('ip("::1").isLoopback()', True),
        ('string(ip("2001:DB8::0:1"))', "2001:db8::1"),
        ('ip("10.0.0.1") == ip("10.0.0.1")', True),
        ('isIP("192.168.0.1.0")', False),
        ('ip.isCanonical("2001:DB8::68")', False),
    ],
)
def test_end_to_end(source: str, expected: Any) -> None:
    from staticadm.cel import evaluate_standalone

    assert evaluate_standalone(source) == expected


def test_end_to_end_error_text() -> None:
    from staticadm.cel import EvalError, evaluate_standalone

    result = evaluate_standalone('ip("192.168.0.1.0")')
    assert isinstance(result, EvalError)
    assert 'ParseAddr("192.168.0.1.0"): IPv4 address too long' in str(result)
