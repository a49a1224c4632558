"""staticadm.gofmt against Go's own table values (strconv/quote_test.go, strconv/ftoa_test.go,
time/time_test.go, fmt/fmt_test.go, encoding/json/encode_test.go)."""

from __future__ import annotations

import pytest

from staticadm import gofmt


@pytest.mark.parametrize(("text", "quoted"), [
    ("\a\b\f\r\n\t\v", '"\\a\\b\\f\\r\\n\\t\\v"'),
    ("\\", '"\\\\"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("\u263a", '"\u263a"'),
    ("\U0010ffff", '"\\U0010ffff"'),
    ("\x04", '"\\x04"'),
    ("\x7f", '"\\x7f"'),
    # unicode.IsPrint: only U+0020 of the spaces is printable.
    ("!\u00a0!\u2000!\u3000!", '"!\\u00a0!\\u2000!\\u3000!"'),
    ("\u0085", '"\\u0085"'),
    ("\ufeff", '"\\ufeff"'),
])
def test_quote_matches_strconv(text: str, quoted: str) -> None:
    assert gofmt.quote(text) == quoted


def test_quote_shows_bytes_that_are_not_utf8_one_by_one() -> None:
    assert gofmt.quote(b"abc\xffdef") == '"abc\\xffdef"'
    assert gofmt.quote(b"\xe2\x98") == '"\\xe2\\x98"'
    assert gofmt.quote(b"abc\xffdef".decode("utf-8", "surrogateescape")) == '"abc\\xffdef"'
    assert gofmt.quote("\ud800") == '"\\ufffd"'


@pytest.mark.parametrize(("value", "text"), [
    (1.0, "1"), (100.0, "100"), (123456.0, "123456"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"),
    (1e-4, "0.0001"), (1e-5, "1e-05"), (1.5, "1.5"), (-0.0, "-0"), (0.1 + 0.2, "0.30000000000000004"),
    (1e21, "1e+21"), (float("nan"), "NaN"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"),
])
def test_format_float_g_is_shortest_g(value: float, text: str) -> None:
    assert gofmt.format_float_g(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (1e21, "1000000000000000000000"), (1.5e-7, "0.00000015"), (-2.5, "-2.5"), (0.0, "0"), (3600.0, "3600"),
])
def test_format_float_f_never_uses_an_exponent(value: float, text: str) -> None:
    assert gofmt.format_float_f(value) == text


@pytest.mark.parametrize(("nanoseconds", "text"), [
    (1_500_000_000, "1.5s"), (3_600_000_000_000, "3600s"), (1, "0.000000001s"), (-1, "-0.000000001s"), (0, "0s"),
])
def test_duration_seconds_is_cel_go_string_of_duration(nanoseconds: int, text: str) -> None:
    assert gofmt.duration_seconds(nanoseconds) == text


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("250ms", 0.25), ("-1s", -1.0), ("+5s", 5.0),
    ("1h2m3s4ms5us6ns", 3723.004005006), (".5s", 0.5), ("1µs", 1e-6),
])
def test_parse_duration_accepts_what_time_parse_duration_does(text: str, seconds: float) -> None:
    assert gofmt.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "1x", "s", "-", "1s ", "1.2.3s"])
def test_parse_duration_refuses_what_time_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="time: invalid duration"):
        gofmt.parse_duration(text)


def test_sprint_v_and_sharp_v_of_unstructured_values() -> None:
    value = {"b": 1, "a": [1, "x", None], "f": 1e6}
    assert gofmt.sprint_v(value) == "map[a:[1 x <nil>] b:1 f:1e+06]"
    assert gofmt.sprint_sharp_v({"a": "x", "n": [None]}, top=True) == (
        'map[string]interface {}{"a":"x", "n":[]interface {}{interface {}(nil)}}')
    assert gofmt.sprint_sharp_v(None, top=True) == "<nil>"
    assert [gofmt.type_name(v) for v in (True, 1, 1.5, "s", {}, [], None)] == [
        "bool", "int64", "float64", "string", "map[string]interface {}", "[]interface {}", "<nil>"]


def test_marshal_json_escapes_html_and_line_separators_as_go_does() -> None:
    assert gofmt.marshal_json({"m": "<a>&\u2028\u2029é"}) == '{"m":"\\u003ca\\u003e\\u0026\\u2028\\u2029é"}'
    assert gofmt.marshal_json([{"z": 1, "a": 2}]) == '[{"z":1,"a":2}]'


def test_quote_of_ip_error_inputs() -> None:
    # The case tests/cel/test_lib_ip.py held while ip.py had its own copy.
    assert gofmt.quote('a"b\\c\n\x01\u00e9\u200b') == '"a\\"b\\\\c\\n\\x01\u00e9\\u200b"'
