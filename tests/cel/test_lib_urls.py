"""The Kubernetes URL library against Go's net/url (ParseRequestURI + Parse) and urls.go examples."""

from __future__ import annotations

from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.libraries import urls as u
from staticadm.cel.libraries.spec import CelFunctionError


@pytest.mark.parametrize(
    ("text", "scheme", "host", "hostname", "port", "path"),
    [
        ("https://example.com:80/", "https", "example.com:80", "example.com", "80", "/"),
        ("https://[::1]:80/", "https", "[::1]:80", "::1", "80", "/"),
        ("https://[::1]/", "https", "[::1]", "::1", "", "/"),
        ("/path", "", "", "", "", "/path"),
        ("https://example.com/with space/", "https", "example.com", "example.com", "", "/with%20space/"),
        ("https://example.com", "https", "example.com", "example.com", "", ""),
        ("HTTPS://example.com/a%2fb", "https", "example.com", "example.com", "", "/a%2fb"),
        ("https:://kubernetes.io/", "https", "", "", "", ""),
        ("https://user:pass@kubernetes.io:80/docs/home?k1=a#anchor", "https", "kubernetes.io:80",
         "kubernetes.io", "80", "/docs/home"),
    ],
)
def test_accessors(text: str, scheme: str, host: str, hostname: str, port: str, path: str) -> None:
    parsed = u.url(text)
    assert u.get_scheme(parsed) == scheme
    assert u.get_host(parsed) == host
    assert u.get_hostname(parsed) == hostname
    assert u.get_port(parsed) == port
    assert u.get_escaped_path(parsed) == path
    assert u.is_url(text) is True


def test_query() -> None:
    assert u.get_query(u.url("https://example.com/path?k1=a&k2=b&k2=c")) == {"k1": ["a"], "k2": ["b", "c"]}
    assert u.get_query(u.url("https://example.com/path?key with spaces=value with spaces")) == {
        "key with spaces": ["value with spaces"]
    }
    assert u.get_query(u.url("https://example.com/path?a=%41+b&bad=%zz&semi;x=1&&flag")) == {
        "a": ["A b"],
        "flag": [""],
    }
    assert u.get_query(u.url("https://example.com/path?")) == {}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("../relative-path", 'parse "../relative-path": invalid URI for request'),
        ("", 'parse "": empty url'),
        ("://x", 'parse "://x": missing protocol scheme'),
        ("https://example.com:abc/x", 'parse "https://example.com:abc/x": invalid port ":abc" after host'),
        ("https://a{b}/", 'invalid character "{" in host name'),
        ("https://example.com/%zz", 'invalid URL escape "%zz"'),
        ("https://[1.2.3.4]/", "invalid IP-literal"),
        ("https://[::1/", "missing ']' in host"),
        ("http://a:1:2/", 'invalid port ":1:2" after host'),
        ("http://x/\x01", "net/url: invalid control character in URL"),
        ("https://ü@example.com/", "net/url: invalid userinfo"),
    ],
)
def test_errors_use_go_text(text: str, error: str) -> None:
    assert u.is_url(text) is False
    with pytest.raises(CelFunctionError) as caught:
        u.url(text)
    assert str(caught.value).startswith("URL parse error during conversion from string: ")
    assert error in str(caught.value)


def test_colons_in_non_http_hosts_are_tolerated() -> None:
    # Go only enforces a single port colon for http and https (go.dev/issue/75223).
    assert u.get_host(u.url("mongodb://a:1,b:2/db")) == "a:1,b:2"


def test_equality_is_by_go_string_form() -> None:
    assert u.url("HTTPS://example.com/x") == u.url("https://example.com/x")
    assert u.url("https://example.com/x") != u.url("https://example.com/y")
    assert u.to_string(u.url("https://example.com/with space/?q#f g")) == "https://example.com/with%20space/?q#f%20g"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("url('https://example.com:80/').getHost()", "example.com:80"),
        ("url('https://[::1]:80/').getHostname()", "::1"),
        ("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()", {"k1": ["a"], "k2": ["b", "c"]}),
        ("isURL('../relative-path')", False),
    ],
)
def test_end_to_end(expr: str, expected: Any) -> None:
    result = evaluate_standalone(expr)
    assert not isinstance(result, CompileError | EvalError), result
    assert result == expected


def test_end_to_end_runtime_error() -> None:
    result = evaluate_standalone("url('../x')")
    assert isinstance(result, EvalError)
    assert 'URL parse error during conversion from string: parse "../x": invalid URI for request' in result.message
