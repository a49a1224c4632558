"""Kubernetes CEL format library (``k8s.io/apiserver/pkg/cel/library/format.go``).

``<Format>.validate(s)`` returns Kubernetes' own validation messages, which policy authors often show
verbatim through ``messageExpression``; the validators below are ports of apimachinery's
``pkg/api/validate/content`` / ``pkg/util/validation``, kube-openapi's ``strfmt`` and Go's
``net/url.ParseRequestURI`` so that the strings match exactly.

Go measures string length in bytes and its regexps see bytes, so the name validators work on the
UTF-8 encoding of their input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from staticadm import gofmt
from staticadm.cel.libraries.ip import AddrParseError, parse_addr
from staticadm.cel.libraries.spec import CelFunctionError, Function, OpaqueType, Overload
from staticadm.cel.values import make_opaque, opaque_type_name

FORMAT_TYPE_NAME = "kubernetes.NamedFormat"

# --- apimachinery validation messages -------------------------------------------------------------


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def empty_error() -> str:
    return "must be non-empty"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return msg + " (regex used for validation is '" + fmt + "')"
    msg += " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += "'" + example + "', "
    msg += "regex used for validation is '" + fmt + "')"
    return msg


_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_MAX = 63
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MAX = 253
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_ERR = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
_DNS1035_LABEL_MAX = 63
_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_KEY_MAX = 63
_LABEL_VALUE_FMT = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MAX = 63

# Bytes patterns with fullmatch reproduce Go's anchored, byte-oriented RE2 matching (Python's ``$``
# would also accept a trailing newline).
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT.encode())
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT.encode())
_DNS1035_LABEL_RE = re.compile(_DNS1035_LABEL_FMT.encode())
_LABEL_KEY_RE = re.compile(_LABEL_KEY_FMT.encode())
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT.encode())


def _is_dns1123_label(value: bytes) -> list[str]:
    errs: list[str] = []
    if len(value) > _DNS1123_LABEL_MAX:
        errs.append(max_len_error(_DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_DNS1123_LABEL_ERR, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def _is_dns1123_subdomain(value: bytes) -> list[str]:
    errs: list[str] = []
    if len(value) > _DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(_DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def _is_dns1035_label(value: bytes) -> list[str]:
    errs: list[str] = []
    if len(value) > _DNS1035_LABEL_MAX:
        errs.append(max_len_error(_DNS1035_LABEL_MAX))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(regex_error(_DNS1035_LABEL_ERR, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def _mask_trailing_dash(name: bytes) -> bytes:
    # Go's maskTrailingDash drops the last *two* bytes before appending "a"; reproduced as is.
    if len(name) > 1 and name.endswith(b"-"):
        return name[:-2] + b"a"
    return name


def is_dns1123_label(value: str) -> list[str]:
    return _is_dns1123_label(value.encode())


def is_dns1123_subdomain(value: str) -> list[str]:
    return _is_dns1123_subdomain(value.encode())


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    raw = name.encode()
    return _is_dns1123_label(_mask_trailing_dash(raw) if prefix else raw)


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    raw = name.encode()
    return _is_dns1123_subdomain(_mask_trailing_dash(raw) if prefix else raw)


def name_is_dns1035_label(name: str, prefix: bool) -> list[str]:
    raw = name.encode()
    return _is_dns1035_label(_mask_trailing_dash(raw) if prefix else raw)


def is_qualified_name(value: str) -> list[str]:
    """``content.IsLabelKey`` (what ``validation.IsQualifiedName`` aliases)."""
    errs: list[str] = []
    parts = value.encode().split(b"/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if len(prefix) == 0:
            errs.append("prefix part " + empty_error())
        else:
            errs.extend("prefix part " + m for m in _is_dns1123_subdomain(prefix))
    else:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if len(name) == 0:
        errs.append("name part " + empty_error())
    elif len(name) > _LABEL_KEY_MAX:
        errs.append("name part " + max_len_error(_LABEL_KEY_MAX))
    if not _LABEL_KEY_RE.fullmatch(name):
        errs.append("name part " + regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    raw = value.encode()
    errs: list[str] = []
    if len(raw) > _LABEL_VALUE_MAX:
        errs.append(max_len_error(_LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.fullmatch(raw):
        errs.append(regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


# --- Go net/url.ParseRequestURI ------------------------------------------------------------------
# Ported from the Go 1.26 net/url that kube-apiserver 1.37 is built with, which validates bracketed
# IP literals with netip (CVE-2025-47912) and refuses extra colons in http(s) hosts.

_MODE_HOST = "host"
_MODE_ZONE = "zone"
_MODE_OTHER = "other"


class _URLError(ValueError):
    pass


def _is_hex(b: int) -> bool:
    return chr(b) in "0123456789abcdefABCDEF"


def _should_escape_host(b: int) -> bool:
    c = chr(b)
    if "a" <= c <= "z" or "A" <= c <= "Z" or "0" <= c <= "9":
        return False
    # Sub-delims, ':' and the brackets/quotes Go tolerates in hosts, plus the unreserved marks.
    return c not in "!$&'()*+,;=:[]<>\"-_.~"


def _escape_error(raw: bytes) -> _URLError:
    return _URLError("invalid URL escape " + gofmt.quote(raw.decode("utf-8", "surrogateescape")))


def _unescape(s: str, mode: str) -> str:
    """Go's ``url.unescape`` (``+`` handling omitted: no caller here decodes query components)."""
    raw = s.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(raw):
        b = raw[i]
        if b == 0x25:  # '%'
            if i + 2 >= len(raw) or not _is_hex(raw[i + 1]) or not _is_hex(raw[i + 2]):
                raise _escape_error(raw[i : i + 3])
            v = int(raw[i + 1 : i + 3], 16)
            # RFC 3986 allows %-escapes in hosts only for non-ASCII bytes; RFC 6874 adds %25 for zones.
            if mode == _MODE_HOST and v < 0x80 and raw[i : i + 3] != b"%25":
                raise _escape_error(raw[i : i + 3])
            if mode == _MODE_ZONE and raw[i : i + 3] != b"%25" and v != 0x20 and _should_escape_host(v):
                raise _escape_error(raw[i : i + 3])
            out.append(v)
            i += 3
        else:
            if mode in (_MODE_HOST, _MODE_ZONE) and b < 0x80 and _should_escape_host(b):
                raise _URLError("invalid character " + gofmt.quote(chr(b)) + " in host name")
            out.append(b)
            i += 1
    return out.decode("utf-8", "surrogateescape")


def _valid_optional_port(port: str) -> bool:
    if port == "":
        return True
    if port[0] != ":":
        return False
    return all("0" <= c <= "9" for c in port[1:])


def _parse_host(scheme: str, host: str) -> None:
    open_idx = host.rfind("[")
    if open_idx > 0:
        raise _URLError("invalid IP-literal")
    if open_idx == 0:
        close_idx = host.rfind("]")
        if close_idx < 0:
            raise _URLError("missing ']' in host")
        colon_port = host[close_idx + 1 :]
        if not _valid_optional_port(colon_port):
            raise _URLError(f"invalid port {gofmt.quote(colon_port)} after host")
        _unescape(colon_port, _MODE_HOST)
        hostname = host[1:close_idx]
        zone_idx = hostname.find("%25")
        if zone_idx >= 0:
            unescaped = _unescape(hostname[:zone_idx], _MODE_HOST) + _unescape(hostname[zone_idx:], _MODE_ZONE)
        else:
            unescaped = _unescape(hostname, _MODE_HOST)
        try:
            addr = parse_addr(unescaped)
        except AddrParseError as exc:
            raise _URLError(f"invalid host: {exc}") from None
        if addr.is4():
            raise _URLError("invalid IP-literal")
        return
    first = host.find(":")
    if first != -1:
        last = host.rfind(":")
        i = first
        # Go enforces a single colon only for http(s); other schemes keep the historic lenience.
        if last != first and scheme not in ("http", "https"):
            i = last
        colon_port = host[i:]
        if not _valid_optional_port(colon_port):
            raise _URLError(f"invalid port {gofmt.quote(colon_port)} after host")
    _unescape(host, _MODE_HOST)


_USERINFO_EXTRA = "-._:~!$&'()*+,;=%@"


def _valid_userinfo(s: str) -> bool:
    return all("A" <= c <= "Z" or "a" <= c <= "z" or "0" <= c <= "9" or c in _USERINFO_EXTRA for c in s)


def _parse_authority(scheme: str, authority: str) -> None:
    i = authority.rfind("@")
    _parse_host(scheme, authority if i < 0 else authority[i + 1 :])
    if i < 0:
        return
    userinfo = authority[:i]
    if not _valid_userinfo(userinfo):
        raise _URLError("net/url: invalid userinfo")
    for part in userinfo.split(":", 1):
        _unescape(part, _MODE_OTHER)


def _get_scheme(raw: str) -> tuple[str, str]:
    for i, c in enumerate(raw):
        if "a" <= c <= "z" or "A" <= c <= "Z":
            continue
        if "0" <= c <= "9" or c in "+-.":
            if i == 0:
                return "", raw
            continue
        if c == ":":
            if i == 0:
                raise _URLError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return "", raw
    return "", raw


def _parse_request_uri(raw: str) -> None:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise _URLError("net/url: invalid control character in URL")
    if raw == "":
        raise _URLError("empty url")
    if raw == "*":
        return
    scheme, rest = _get_scheme(raw)
    scheme = scheme.lower()
    # Go distinguishes a bare trailing "?" (ForceQuery) but either way the query is cut off unchecked.
    rest = rest.split("?", 1)[0]
    if not rest.startswith("/"):
        if scheme != "":
            return  # rootless paths are opaque
        raise _URLError("invalid URI for request")
    if scheme != "" and rest.startswith("//"):
        authority, rest = rest[2:], ""
        slash = authority.find("/")
        if slash >= 0:
            authority, rest = authority[:slash], authority[slash:]
        _parse_authority(scheme, authority)
    _unescape(rest, _MODE_OTHER)


def validate_uri(s: str) -> list[str]:
    try:
        _parse_request_uri(s)
    except _URLError as exc:
        return [f"parse {gofmt.quote(s)}: {exc}"]
    return []


# --- kube-openapi strfmt -------------------------------------------------------------------------

_UUID_RE = re.compile("[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.IGNORECASE | re.ASCII)
_BASE64_RE = re.compile("(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})")
_FULL_DATE_RE = re.compile("([0-9]{4})-([0-9]{2})-([0-9]{2})")
_DATE_TIME_RE = re.compile("([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")


def _days_in(month: int, year: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def is_date(s: str) -> bool:
    """``time.Parse("2006-01-02", s) == nil``: fixed-width fields and a real calendar day."""
    m = _FULL_DATE_RE.fullmatch(s)
    if m is None:
        return False
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    return 1 <= month <= 12 and 1 <= day <= _days_in(month, year)


def is_date_time(s: str) -> bool:
    """strfmt ``IsDateTime``; it splits on *every* 't' and only looks at the first two pieces."""
    if len(s.encode()) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not is_date(parts[0]):
        return False
    m = _DATE_TIME_RE.fullmatch(parts[1])
    if m is None:
        return False
    return m[1] <= "23" and m[2] <= "59" and m[3] <= "59"


# --- the library ---------------------------------------------------------------------------------


def _single(pred: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    def validate(s: str) -> list[str]:
        return [] if pred(s) else [message]

    return validate


#: Library key -> (Format.Name as Kubernetes spells it, validator).
CONSTANT_FORMATS: dict[str, tuple[str, Callable[[str], list[str]]]] = {
    "dns1123Label": ("DNS1123Label", lambda s: name_is_dns_label(s, False)),
    "dns1123Subdomain": ("DNS1123Subdomain", lambda s: name_is_dns_subdomain(s, False)),
    "dns1035Label": ("DNS1035Label", lambda s: name_is_dns1035_label(s, False)),
    "qualifiedName": ("QualifiedName", is_qualified_name),
    "dns1123LabelPrefix": ("DNS1123LabelPrefix", lambda s: name_is_dns_label(s, True)),
    "dns1123SubdomainPrefix": ("DNS1123SubdomainPrefix", lambda s: name_is_dns_subdomain(s, True)),
    "dns1035LabelPrefix": ("DNS1035LabelPrefix", lambda s: name_is_dns1035_label(s, True)),
    "labelValue": ("LabelValue", is_valid_label_value),
    "uri": ("URI", validate_uri),
    "uuid": ("uuid", _single(lambda s: _UUID_RE.fullmatch(s) is not None, "does not match the UUID format")),
    "byte": ("byte", _single(lambda s: _BASE64_RE.fullmatch(s) is not None, "invalid base64")),
    "date": ("date", _single(is_date, "invalid date")),
    "datetime": ("datetime", _single(is_date_time, "invalid datetime")),
}

_VALIDATORS_BY_NAME: dict[str, Callable[[str], list[str]]] = {
    name: validator for name, validator in CONSTANT_FORMATS.values()
}


def make_format(key: str) -> dict[str, Any]:
    # Kubernetes' Format equality compares Name only, so the name is the whole payload.
    return make_opaque(FORMAT_TYPE_NAME, name=CONSTANT_FORMATS[key][0])


def _format_named(name: str) -> dict[str, Any] | None:
    if name not in CONSTANT_FORMATS:
        return None
    return make_format(name)


def _format_validate(fmt: dict[str, Any], s: str) -> list[str] | None:
    if opaque_type_name(fmt) != FORMAT_TYPE_NAME or fmt.get("name") not in _VALIDATORS_BY_NAME:
        raise CelFunctionError("no such overload")
    errs = _VALIDATORS_BY_NAME[fmt["name"]](s)
    return errs or None


def _constant(key: str) -> Callable[[], dict[str, Any]]:
    def impl() -> dict[str, Any]:
        return make_format(key)

    return impl


def _to_string(value: dict[str, Any]) -> str:
    return str(value["name"])


TYPES: tuple[OpaqueType, ...] = (OpaqueType(FORMAT_TYPE_NAME, _to_string),)

FUNCTIONS: tuple[Function, ...] = (
    Function(
        "validate",
        (
            Overload(
                "format-validate",
                (FORMAT_TYPE_NAME, "string"),
                "optional_type(list(string))",
                _format_validate,
                member=True,
            ),
        ),
    ),
    Function(
        "format.named",
        (Overload("format-named", ("string",), f"optional_type({FORMAT_TYPE_NAME})", _format_named),),
    ),
    *(
        Function(f"format.{key}", (Overload(f"format.{key}", (), FORMAT_TYPE_NAME, _constant(key)),))
        for key in CONSTANT_FORMATS
    ),
)
