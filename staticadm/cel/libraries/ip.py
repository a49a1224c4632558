"""Kubernetes CEL IP library (``k8s.io/apiserver/pkg/cel/library/ip.go``).

Kubernetes parses with Go's ``net/netip`` and surfaces its error text verbatim, so this module carries a
faithful port of ``netip.ParseAddr`` (and ``ParsePrefix`` for the CIDR library) rather than relying on
Python's ``ipaddress``, whose accepted syntax and error wording differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from staticadm import gofmt
from staticadm.cel.libraries.spec import CelFunctionError, Function, OpaqueType, Overload
from staticadm.cel.values import make_opaque, opaque_type_name

IP_TYPE_NAME = "net.IP"

_MAX_UINT16 = 0xFFFF


class AddrParseError(ValueError):
    """Mirror of netip's ``parseAddrError``; ``str()`` is Go's exact ``Error()`` text."""

    def __init__(self, in_: str, msg: str, at: str = "") -> None:
        self.in_ = in_
        self.msg = msg
        self.at = at
        super().__init__(self._render())

    def _render(self) -> str:
        if self.at:
            return f"ParseAddr({gofmt.quote(self.in_)}): {self.msg} (at {gofmt.quote(self.at)})"
        return f"ParseAddr({gofmt.quote(self.in_)}): {self.msg}"


@dataclass(frozen=True, slots=True)
class Addr:
    """A parsed ``netip.Addr``: ``bits`` is 32 or 128, ``value`` the address as an integer."""

    bits: int
    value: int
    zone: str = ""

    def is4(self) -> bool:
        return self.bits == 32

    def is6(self) -> bool:
        return self.bits == 128

    def is4in6(self) -> bool:
        return self.is6() and (self.value >> 32) == 0xFFFF

    def unmap(self) -> Addr:
        if self.is4in6():
            return Addr(32, self.value & 0xFFFFFFFF)
        return self

    def _v4(self, i: int) -> int:
        return (self.value >> (8 * (3 - i))) & 0xFF

    def _v6u16(self, i: int) -> int:
        return (self.value >> (16 * (7 - i))) & 0xFFFF

    def is_unspecified(self) -> bool:
        # Go compares whole Addr values, zone included, against the zone-less unspecified addresses.
        return self.value == 0 and not self.zone

    def is_loopback(self) -> bool:
        ip = self.unmap()
        if ip.is4():
            return ip._v4(0) == 127
        return ip.value == 1

    def is_multicast(self) -> bool:
        ip = self.unmap()
        if ip.is4():
            return ip._v4(0) & 0xF0 == 0xE0
        return (ip.value >> 120) == 0xFF

    def is_link_local_multicast(self) -> bool:
        ip = self.unmap()
        if ip.is4():
            return ip._v4(0) == 224 and ip._v4(1) == 0 and ip._v4(2) == 0
        return ip._v6u16(0) & 0xFF0F == 0xFF02

    def is_link_local_unicast(self) -> bool:
        ip = self.unmap()
        if ip.is4():
            return ip._v4(0) == 169 and ip._v4(1) == 254
        return ip._v6u16(0) & 0xFFC0 == 0xFE80

    def is_global_unicast(self) -> bool:
        ip = self.unmap()
        if ip.is4() and ip.value in (0, 0xFFFFFFFF):
            return False
        return (
            not (ip.is6() and ip.value == 0 and not ip.zone)
            and not ip.is_loopback()
            and not ip.is_multicast()
            and not ip.is_link_local_unicast()
        )

    def string(self) -> str:
        """Go's ``Addr.String()``: the single canonical (RFC 5952) spelling."""
        if self.is4():
            return ".".join(str(self._v4(i)) for i in range(4))
        if self.is4in6():
            v4 = Addr(32, self.value & 0xFFFFFFFF).string()
            return "::ffff:" + v4 + (f"%{self.zone}" if self.zone else "")
        groups = [self._v6u16(i) for i in range(8)]
        zero_start, zero_end = 255, 255
        for i in range(8):
            j = i
            while j < 8 and groups[j] == 0:
                j += 1
            length = j - i
            if length >= 2 and length > zero_end - zero_start:
                zero_start, zero_end = i, j
        parts: list[str] = []
        i = 0
        while i < 8:
            if i == zero_start:
                parts.append("::")
                i = zero_end
                if i >= 8:
                    break
            elif i > 0:
                parts.append(":")
            parts.append(f"{groups[i]:x}")
            i += 1
        out = "".join(parts)
        if self.zone:
            out += "%" + self.zone
        return out


def _parse_ipv4_fields(in_: str, off: int, end: int) -> list[int]:
    s = in_[off:end]
    fields = [0, 0, 0, 0]
    val = 0
    pos = 0
    dig_len = 0
    for i, c in enumerate(s):
        if "0" <= c <= "9":
            if dig_len == 1 and val == 0:
                raise AddrParseError(in_, "IPv4 field has octet with leading zero")
            val = val * 10 + ord(c) - ord("0")
            dig_len += 1
            if val > 255:
                raise AddrParseError(in_, "IPv4 field has value >255")
        elif c == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                raise AddrParseError(in_, "IPv4 field must have at least one digit", s[i:])
            if pos == 3:
                raise AddrParseError(in_, "IPv4 address too long")
            fields[pos] = val
            pos += 1
            val = 0
            dig_len = 0
        else:
            raise AddrParseError(in_, "unexpected character", s[i:])
    if pos < 3:
        raise AddrParseError(in_, "IPv4 address too short")
    fields[3] = val
    return fields


def _parse_ipv4(s: str) -> Addr:
    f = _parse_ipv4_fields(s, 0, len(s))
    return Addr(32, (f[0] << 24) | (f[1] << 16) | (f[2] << 8) | f[3])


def _hex_digit(c: str) -> int | None:
    if "0" <= c <= "9":
        return ord(c) - ord("0")
    if "a" <= c <= "f":
        return ord(c) - ord("a") + 10
    if "A" <= c <= "F":
        return ord(c) - ord("A") + 10
    return None


def _parse_ipv6(in_: str) -> Addr:
    s = in_
    zone = ""
    pct = s.find("%")
    if pct != -1:
        s, zone = s[:pct], s[pct + 1 :]
        if zone == "":
            raise AddrParseError(in_, "zone must be a non-empty string")

    ip = [0] * 16
    ellipsis = -1
    if len(s) >= 2 and s[0] == ":" and s[1] == ":":
        ellipsis = 0
        s = s[2:]
        if len(s) == 0:
            return Addr(128, 0, zone)

    i = 0
    while i < 16:
        off = 0
        acc = 0
        while off < len(s):
            d = _hex_digit(s[off])
            if d is None:
                break
            acc = (acc << 4) + d
            if off > 3:
                raise AddrParseError(in_, "each group must have 4 or less digits", s)
            if acc > _MAX_UINT16:
                raise AddrParseError(in_, "IPv6 field has value >=2^16", s)
            off += 1
        if off == 0:
            raise AddrParseError(in_, "each colon-separated field must have at least one digit", s)

        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and i != 12:
                raise AddrParseError(in_, "embedded IPv4 address must replace the final 2 fields of the address", s)
            if i + 4 > 16:
                raise AddrParseError(in_, "too many hex fields to fit an embedded IPv4 at the end of the address", s)
            end = len(in_)
            if zone:
                end -= len(zone) + 1
            ip[i : i + 4] = _parse_ipv4_fields(in_, end - len(s), end)
            s = ""
            i += 4
            break

        ip[i] = acc >> 8
        ip[i + 1] = acc & 0xFF
        i += 2

        s = s[off:]
        if len(s) == 0:
            break

        if s[0] != ":":
            raise AddrParseError(in_, "unexpected character, want colon", s)
        if len(s) == 1:
            raise AddrParseError(in_, "colon must be followed by more characters", s)

        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                raise AddrParseError(in_, "multiple :: in address", s)
            ellipsis = i
            s = s[1:]
            if len(s) == 0:
                break

    if len(s) != 0:
        raise AddrParseError(in_, "trailing garbage after address", s)

    if i < 16:
        if ellipsis < 0:
            raise AddrParseError(in_, "address string too short")
        n = 16 - i
        for j in range(i - 1, ellipsis - 1, -1):
            ip[j + n] = ip[j]
        for j in range(ellipsis, ellipsis + n):
            ip[j] = 0
    elif ellipsis >= 0:
        raise AddrParseError(in_, "the :: must expand to at least one field of zeros", s)

    return Addr(128, int.from_bytes(bytes(ip), "big"), zone)


def parse_addr(s: str) -> Addr:
    """Go's ``netip.ParseAddr``; raises :class:`AddrParseError` with Go's message."""
    for c in s:
        if c == ".":
            return _parse_ipv4(s)
        if c == ":":
            return _parse_ipv6(s)
        if c == "%":
            raise AddrParseError(s, "missing IPv6 address")
    raise AddrParseError(s, "unable to parse IP")


def parse_ip_addr(raw: str) -> Addr:
    """Kubernetes' ``parseIPAddr``: netip parsing plus its zone and IPv4-mapped rejections."""
    try:
        addr = parse_addr(raw)
    except AddrParseError as exc:
        raise CelFunctionError(
            f"IP Address {gofmt.quote(raw)} parse error during conversion from string: {exc}") from None
    if addr.zone:
        raise CelFunctionError(f"IP address {gofmt.quote(raw)} with zone value is not allowed")
    if addr.is4in6():
        raise CelFunctionError(f"IPv4-mapped IPv6 address {gofmt.quote(raw)} is not allowed")
    return addr


def make_ip(addr: Addr) -> dict[str, Any]:
    # The canonical string is unique per address, so dict equality matches Go's Addr equality.
    return make_opaque(IP_TYPE_NAME, addr=addr.string())


def ip_value_addr(value: Any) -> Addr:
    """Recover the Addr from a runtime ``net.IP`` value."""
    if opaque_type_name(value) != IP_TYPE_NAME:
        raise CelFunctionError("no such overload")
    return parse_addr(value["addr"])


def _string_to_ip(s: str) -> dict[str, Any]:
    return make_ip(parse_ip_addr(s))


def _ip_to_string(ip: dict[str, Any]) -> str:
    return ip_value_addr(ip).string()


def _family(ip: dict[str, Any]) -> int:
    return 4 if ip_value_addr(ip).is4() else 6


def _ip_is_canonical(s: str) -> bool:
    return parse_ip_addr(s).string() == s


def _is_ip(s: str) -> bool:
    try:
        parse_ip_addr(s)
    except CelFunctionError:
        return False
    return True


def _is_unspecified(ip: dict[str, Any]) -> bool:
    return ip_value_addr(ip).is_unspecified()


def _is_loopback(ip: dict[str, Any]) -> bool:
    return ip_value_addr(ip).is_loopback()


def _is_link_local_multicast(ip: dict[str, Any]) -> bool:
    return ip_value_addr(ip).is_link_local_multicast()


def _is_link_local_unicast(ip: dict[str, Any]) -> bool:
    return ip_value_addr(ip).is_link_local_unicast()


def _is_global_unicast(ip: dict[str, Any]) -> bool:
    return ip_value_addr(ip).is_global_unicast()


def _to_string(value: dict[str, Any]) -> str:
    return str(value["addr"])


TYPES: tuple[OpaqueType, ...] = (OpaqueType(IP_TYPE_NAME, _to_string),)

FUNCTIONS: tuple[Function, ...] = (
    Function("ip", (Overload("string_to_ip", ("string",), IP_TYPE_NAME, _string_to_ip),)),
    Function("family", (Overload("ip_family", (IP_TYPE_NAME,), "int", _family, member=True),)),
    Function("ip.isCanonical", (Overload("ip_is_canonical", ("string",), "bool", _ip_is_canonical),)),
    Function(
        "isUnspecified",
        (Overload("ip_is_unspecified", (IP_TYPE_NAME,), "bool", _is_unspecified, member=True),),
    ),
    Function("isLoopback", (Overload("ip_is_loopback", (IP_TYPE_NAME,), "bool", _is_loopback, member=True),)),
    Function(
        "isLinkLocalMulticast",
        (Overload("ip_is_link_local_multicast", (IP_TYPE_NAME,), "bool", _is_link_local_multicast, member=True),),
    ),
    Function(
        "isLinkLocalUnicast",
        (Overload("ip_is_link_local_unicast", (IP_TYPE_NAME,), "bool", _is_link_local_unicast, member=True),),
    ),
    Function(
        "isGlobalUnicast",
        (Overload("ip_is_global_unicast", (IP_TYPE_NAME,), "bool", _is_global_unicast, member=True),),
    ),
    Function("isIP", (Overload("is_ip", ("string",), "bool", _is_ip),)),
    Function("string", (Overload("ip_to_string", (IP_TYPE_NAME,), "string", _ip_to_string),)),
)
