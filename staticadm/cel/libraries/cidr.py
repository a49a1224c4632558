"""Kubernetes CEL CIDR library (``k8s.io/apiserver/pkg/cel/library/cidr.go``).

A ``net.CIDR`` is Go's ``netip.Prefix``: the address is kept unmasked (``cidr('10.0.0.1/8')`` is valid
and differs from its ``masked()`` form), so the payload stores the prefix exactly as parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from staticadm import gofmt
from staticadm.cel.libraries.ip import (
    IP_TYPE_NAME,
    Addr,
    AddrParseError,
    ip_value_addr,
    make_ip,
    parse_addr,
    parse_ip_addr,
)
from staticadm.cel.libraries.spec import CelFunctionError, Function, OpaqueType, Overload
from staticadm.cel.values import make_opaque, opaque_type_name

CIDR_TYPE_NAME = "net.CIDR"


class PrefixParseError(ValueError):
    """Mirror of netip's ``parsePrefixError``."""

    def __init__(self, in_: str, msg: str) -> None:
        super().__init__(f"netip.ParsePrefix({gofmt.quote(in_)}): {msg}")


@dataclass(frozen=True, slots=True)
class Prefix:
    addr: Addr
    bits: int

    def masked_addr(self) -> Addr:
        host_bits = self.addr.bits - self.bits
        value = (self.addr.value >> host_bits) << host_bits
        return Addr(self.addr.bits, value)

    def masked(self) -> Prefix:
        return Prefix(self.masked_addr(), self.bits)

    def contains(self, ip: Addr) -> bool:
        # netip never matches across families and never matches zoned addresses.
        if ip.zone or ip.bits != self.addr.bits:
            return False
        host_bits = self.addr.bits - self.bits
        return (ip.value >> host_bits) == (self.addr.value >> host_bits)

    def string(self) -> str:
        return f"{self.addr.string()}/{self.bits}"


def _go_atoi(s: str) -> int | None:
    """``strconv.Atoi`` restricted to what ParsePrefix lets through (an optional sign, ASCII digits)."""
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body or any(not ("0" <= c <= "9") for c in body):
        return None
    return int(s)


def parse_prefix(s: str) -> Prefix:
    """Go's ``netip.ParsePrefix``."""
    i = s.rfind("/")
    if i < 0:
        raise PrefixParseError(s, "no '/'")
    try:
        ip = parse_addr(s[:i])
    except AddrParseError as exc:
        raise PrefixParseError(s, str(exc)) from None
    if ip.is6() and ip.zone:
        raise PrefixParseError(s, "IPv6 zones cannot be present in a prefix")
    bits_str = s[i + 1 :]
    # strconv.Atoi accepts a sign and leading zeros; netip refuses both.
    if len(bits_str) > 1 and not ("1" <= bits_str[0] <= "9"):
        raise PrefixParseError(s, "bad bits after slash: " + gofmt.quote(bits_str))
    bits = _go_atoi(bits_str)
    if bits is None:
        raise PrefixParseError(s, "bad bits after slash: " + gofmt.quote(bits_str))
    if bits < 0 or bits > ip.bits:
        raise PrefixParseError(s, "prefix length out of range")
    return Prefix(ip, bits)


def parse_cidr(raw: str) -> Prefix:
    """Kubernetes' ``stringToCIDR`` (which wraps ``parseCIDR``'s already-wrapped error once more)."""
    try:
        prefix = parse_prefix(raw)
    except PrefixParseError as exc:
        raise CelFunctionError(
            "network address parse error during conversion from string: "
            f"network address parse error during conversion from string: {exc}"
        ) from None
    if prefix.addr.is4in6():
        raise CelFunctionError(
            "network address parse error during conversion from string: "
            f"IPv4-mapped IPv6 address {gofmt.quote(raw)} is not allowed"
        )
    return prefix


def _is_cidr_string(raw: str) -> bool:
    try:
        prefix = parse_prefix(raw)
    except PrefixParseError:
        return False
    return not prefix.addr.is4in6()


def make_cidr(prefix: Prefix) -> dict[str, Any]:
    return make_opaque(CIDR_TYPE_NAME, cidr=prefix.string())


def cidr_value_prefix(value: Any) -> Prefix:
    if opaque_type_name(value) != CIDR_TYPE_NAME:
        raise CelFunctionError("no such overload")
    return parse_prefix(value["cidr"])


def _string_to_cidr(s: str) -> dict[str, Any]:
    return make_cidr(parse_cidr(s))


def _cidr_to_string(c: dict[str, Any]) -> str:
    return cidr_value_prefix(c).string()


def _contains_ip(c: dict[str, Any], ip: dict[str, Any]) -> bool:
    return cidr_value_prefix(c).contains(ip_value_addr(ip))


def _contains_ip_string(c: dict[str, Any], ip: str) -> bool:
    # Kubernetes parses the argument with ip()'s conversion and, when that gives an error instead of an IP,
    # answers MaybeNoSuchOverloadErr of the CIDR (library/cidr.go cidrContainsIP passes arg, not other): the bare
    # "no such overload", not the parse error (kube-apiserver answers so; containsCIDR passes the error on).
    try:
        addr = parse_ip_addr(ip)
    except CelFunctionError:
        raise CelFunctionError("no such overload") from None
    return cidr_value_prefix(c).contains(addr)


def _contains_prefix(outer: Prefix, inner: Prefix) -> bool:
    # Kubernetes compares both addresses masked to the outer length (the unmasked comparison was a bug,
    # fixed by kubernetes/kubernetes#130450 in 1.33); families never match across IPv4/IPv6.
    if inner.addr.bits != outer.addr.bits or outer.bits > inner.bits:
        return False
    return Prefix(inner.addr, outer.bits).masked_addr() == outer.masked_addr()


def _contains_cidr(c: dict[str, Any], other: dict[str, Any]) -> bool:
    return _contains_prefix(cidr_value_prefix(c), cidr_value_prefix(other))


def _contains_cidr_string(c: dict[str, Any], other: str) -> bool:
    inner = parse_cidr(other)
    return _contains_prefix(cidr_value_prefix(c), inner)


def _cidr_ip(c: dict[str, Any]) -> dict[str, Any]:
    return make_ip(cidr_value_prefix(c).addr)


def _prefix_length(c: dict[str, Any]) -> int:
    return cidr_value_prefix(c).bits


def _masked(c: dict[str, Any]) -> dict[str, Any]:
    return make_cidr(cidr_value_prefix(c).masked())


def _is_cidr(s: str) -> bool:
    return _is_cidr_string(s)


def _to_string(value: dict[str, Any]) -> str:
    return str(value["cidr"])


TYPES: tuple[OpaqueType, ...] = (OpaqueType(CIDR_TYPE_NAME, _to_string),)

FUNCTIONS: tuple[Function, ...] = (
    Function("cidr", (Overload("string_to_cidr", ("string",), CIDR_TYPE_NAME, _string_to_cidr),)),
    Function(
        "containsIP",
        (
            Overload(
                "cidr_contains_ip_string",
                (CIDR_TYPE_NAME, "string"),
                "bool",
                _contains_ip_string,
                member=True,
            ),
            Overload("cidr_contains_ip_ip", (CIDR_TYPE_NAME, IP_TYPE_NAME), "bool", _contains_ip, member=True),
        ),
    ),
    Function(
        "containsCIDR",
        (
            Overload(
                "cidr_contains_cidr_string",
                (CIDR_TYPE_NAME, "string"),
                "bool",
                _contains_cidr_string,
                member=True,
            ),
            Overload("cidr_contains_cidr", (CIDR_TYPE_NAME, CIDR_TYPE_NAME), "bool", _contains_cidr, member=True),
        ),
    ),
    Function("ip", (Overload("cidr_ip", (CIDR_TYPE_NAME,), IP_TYPE_NAME, _cidr_ip, member=True),)),
    Function(
        "prefixLength",
        (Overload("cidr_prefix_length", (CIDR_TYPE_NAME,), "int", _prefix_length, member=True),),
    ),
    Function("masked", (Overload("cidr_masked", (CIDR_TYPE_NAME,), CIDR_TYPE_NAME, _masked, member=True),)),
    Function("isCIDR", (Overload("is_cidr", ("string",), "bool", _is_cidr),)),
    Function("string", (Overload("cidr_to_string", (CIDR_TYPE_NAME,), "string", _cidr_to_string),)),
)
