"""string.format as kube-apiserver renders it: cel-go v0.26's formatter (strings extension version 2,
locale en_US), its compile-time validator, and the rows of cel-go's ``ext/formatting_test.go`` table.

Rows that set a locale other than en_US are left out (Kubernetes sets none); rows whose arguments are
cel-go test variables use ``dyn(<value>)`` instead, which takes the same dynamic path; rows on proto
messages use a Kubernetes value type (``quantity``), which cel-go formats the same way (not at all).
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.string_format import (
    FormatError,
    format_string,
    locale_fixed,
    locale_scientific,
)
from staticadm.gofmt import format_float_g as go_float_g
from staticadm.gofmt import quote as go_quote

# (name, format, CEL arguments, expected output or None, expected error substring or None)
CELGO_FORMAT_ROWS: list[Any] = [
    (
        'no-op',
        'no substitution',
        '',
        'no substitution',
        None,
    ),
    (
        'mid-string substitution',
        'str is %s and some more',
        '"filler"',
        'str is filler and some more',
        None,
    ),
    (
        'percent escaping',
        '%% and also %%',
        '',
        '% and also %',
        None,
    ),
    (
        'substution inside escaped percent signs',
        '%%%s%%',
        '"text"',
        '%text%',
        None,
    ),
    (
        'substitution with one escaped percent sign on the right',
        '%s%%',
        '"percent on the right"',
        'percent on the right%',
        None,
    ),
    (
        'substitution with one escaped percent sign on the left',
        '%%%s',
        '"percent on the left"',
        '%percent on the left',
        None,
    ),
    (
        'multiple substitutions',
        '%d %d %d, %s %s %s, %d %d %d, %s %s %s',
        '1, 2, 3, "A", "B", "C", 4, 5, 6, "D", "E", "F"',
        '1 2 3, A B C, 4 5 6, D E F',
        None,
    ),
    (
        'percent sign escape sequence support',
        '%%escaped %s%%',
        '"percent"',
        '%escaped percent%',
        None,
    ),
    (
        'fixed point formatting clause',
        '%.3f',
        '1.2345',
        '1.234',
        None,
    ),
    (
        'binary formatting clause',
        'this is 5 in binary: %b',
        '5',
        'this is 5 in binary: 101',
        None,
    ),
    (
        'negative binary formatting clause',
        'this is -5 in binary: %b',
        '-5',
        'this is -5 in binary: -101',
        None,
    ),
    (
        'uint support for binary formatting',
        'unsigned 64 in binary: %b',
        'uint(64)',
        'unsigned 64 in binary: 1000000',
        None,
    ),
    (
        'bool support for binary formatting',
        'bit set from bool: %b',
        'true',
        'bit set from bool: 1',
        None,
    ),
    (
        'octal formatting clause',
        '%o',
        '11',
        '13',
        None,
    ),
    (
        'negative octal formatting clause',
        '%o',
        '-11',
        '-13',
        None,
    ),
    (
        'uint support for octal formatting clause',
        'this is an unsigned octal: %o',
        'uint(65535)',
        'this is an unsigned octal: 177777',
        None,
    ),
    (
        'lowercase hexadecimal formatting clause',
        '%x is 30 in hexadecimal',
        '30',
        '1e is 30 in hexadecimal',
        None,
    ),
    (
        'uppercase hexadecimal formatting clause',
        '%X is 20 in hexadecimal',
        '30',
        '1E is 20 in hexadecimal',
        None,
    ),
    (
        'negative hexadecimal formatting clause',
        '%x is -30 in hexadecimal',
        '-30',
        '-1e is -30 in hexadecimal',
        None,
    ),
    (
        'unsigned support for hexadecimal formatting clause',
        '%X is 6000 in hexadecimal',
        'uint(6000)',
        '1770 is 6000 in hexadecimal',
        None,
    ),
    (
        'string support with hexadecimal formatting clause',
        '%x',
        '"Hello world!"',
        '48656c6c6f20776f726c6421',
        None,
    ),
    (
        'string support with uppercase hexadecimal formatting clause',
        '%X',
        '"Hello world!"',
        '48656C6C6F20776F726C6421',
        None,
    ),
    (
        'byte support with hexadecimal formatting clause',
        '%x',
        'b"byte string"',
        '6279746520737472696e67',
        None,
    ),
    (
        'byte support with hexadecimal formatting clause leading zero',
        '%x',
        'b"\\x00\\x00byte string\\x00"',
        '00006279746520737472696e6700',
        None,
    ),
    (
        'byte support with uppercase hexadecimal formatting clause',
        '%X',
        'b"byte string"',
        '6279746520737472696E67',
        None,
    ),
    (
        'scientific notation formatting clause',
        '%.6e',
        '1052.032911275',
        '1.052033\u202f×\u202f10⁰³',
        None,
    ),
    (
        'default precision for fixed-point clause',
        '%f',
        '2.71828',
        '2.718280',
        None,
    ),
    (
        'default precision for scientific notation',
        '%e',
        '2.71828',
        '2.718280\u202f×\u202f10⁰⁰',
        None,
    ),
    (
        'default precision for string',
        '%s',
        '2.71',
        '2.71',
        None,
    ),
    (
        'default list precision for string',
        '%s',
        '[2.71]',
        '[2.710000]',
        None,
    ),
    (
        'default scientific notation for string',
        '%s',
        '0.000000002',
        '2e-09',
        None,
    ),
    (
        'default list scientific notation for string',
        '%s',
        '[0.000000002]',
        '[0.000000]',
        None,
    ),
    (
        'unicode output for scientific notation',
        'unescaped unicode: %e, escaped unicode: %e',
        '2.71828, 2.71828',
        'unescaped unicode: 2.718280\u202f×\u202f10⁰⁰, escaped unicode: 2.718280\u202f×\u202f10⁰⁰',
        None,
    ),
    (
        'NaN support for fixed-point',
        '%f',
        '"NaN"',
        'NaN',
        None,
    ),
    (
        'positive infinity support for fixed-point',
        '%f',
        '"Infinity"',
        '∞',
        None,
    ),
    (
        'negative infinity support for fixed-point',
        '%f',
        '"-Infinity"',
        '-∞',
        None,
    ),
    (
        'NaN support for string',
        '%s',
        'double("NaN")',
        'NaN',
        None,
    ),
    (
        'positive infinity support for string',
        '%s',
        'double("Inf")',
        '+Inf',
        None,
    ),
    (
        'negative infinity support for string',
        '%s',
        'double("-Inf")',
        '-Inf',
        None,
    ),
    (
        'infinity list support for string',
        '%s',
        '[double("NaN"),double("+Inf"), double("-Inf")]',
        '["NaN", "+Inf", "-Inf"]',
        None,
    ),
    (
        'uint support for decimal clause',
        '%d',
        'uint(64)',
        '64',
        None,
    ),
    (
        'null support for string',
        'null: %s',
        'null',
        'null: null',
        None,
    ),
    (
        'int support for string',
        '%s',
        '999999999999',
        '999999999999',
        None,
    ),
    (
        'bytes support for string',
        'some bytes: %s',
        'b"xyz"',
        'some bytes: xyz',
        None,
    ),
    (
        'type() support for string',
        'type is %s',
        'type("test string")',
        'type is string',
        None,
    ),
    (
        'timestamp support for string',
        '%s',
        'timestamp("2023-02-03T23:31:20+00:00")',
        '2023-02-03T23:31:20Z',
        None,
    ),
    (
        'duration support for string',
        '%s',
        'duration("1h45m47s")',
        '6347s',
        None,
    ),
    pytest.param(
        'small duration support for string',
        '%s',
        'duration("2ns")',
        '0.000000002s',
        None,
    ),
    (
        'list support for string',
        '%s',
        '["abc", 3.14, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20Z")]',
        '["abc", 3.140000, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20Z")]',
        None,
    ),
    pytest.param(
        'map support (all key types)',
        'map with multiple key types: %s',
        '{1: "value1", uint(2): "value2", true: double("NaN")}',
        'map with multiple key types: {1:"value1", 2:"value2", true:"NaN"}',
        None,
    ),
    (
        'boolean support for %s',
        'true bool: %s, false bool: %s',
        'true, false',
        'true bool: true, false bool: false',
        None,
    ),
    (
        'dyntype support for string formatting clause',
        'dynamic string: %s',
        'dyn("a string")',
        'dynamic string: a string',
        None,
    ),
    (
        'dyntype support for numbers with string formatting clause',
        'dynIntStr: %s dynDoubleStr: %s',
        'dyn(32), dyn(56.8)',
        'dynIntStr: 32 dynDoubleStr: 56.8',
        None,
    ),
    (
        'dyntype support for integer formatting clause',
        'dynamic int: %d',
        'dyn(128)',
        'dynamic int: 128',
        None,
    ),
    (
        'dyntype support for integer formatting clause (unsigned)',
        'dynamic unsigned int: %d',
        'dyn(256u)',
        'dynamic unsigned int: 256',
        None,
    ),
    (
        'dyntype support for hex formatting clause',
        'dynamic hex int: %x',
        'dyn(22)',
        'dynamic hex int: 16',
        None,
    ),
    (
        'dyntype support for hex formatting clause (uppercase)',
        'dynamic hex int: %X (uppercase)',
        'dyn(26)',
        'dynamic hex int: 1A (uppercase)',
        None,
    ),
    (
        'dyntype support for unsigned hex formatting clause',
        'dynamic hex int: %x (unsigned)',
        'dyn(500u)',
        'dynamic hex int: 1f4 (unsigned)',
        None,
    ),
    (
        'dyntype support for fixed-point formatting clause',
        'dynamic double: %.3f',
        'dyn(4.5)',
        'dynamic double: 4.500',
        None,
    ),
    (
        'dyntype support for scientific notation',
        '(dyntype) e: %e',
        'dyn(2.71828)',
        '(dyntype) e: 2.718280\u202f×\u202f10⁰⁰',
        None,
    ),
    (
        'dyntype NaN/infinity support for fixed-point',
        'NaN: %f, infinity: %f',
        'dyn(double("NaN")), dyn(double("Inf"))',
        'NaN: NaN, infinity: ∞',
        None,
    ),
    (
        'dyntype support for timestamp',
        'dyntype timestamp: %s',
        'dyn(timestamp("2009-11-10T23:00:00Z"))',
        'dyntype timestamp: 2009-11-10T23:00:00Z',
        None,
    ),
    (
        'dyntype support for duration',
        'dyntype duration: %s',
        'dyn(duration("2h25m47s"))',
        'dyntype duration: 8747s',
        None,
    ),
    (
        'dyntype support for lists',
        'dyntype list: %s',
        'dyn([6, 4.2, "a string"])',
        'dyntype list: [6, 4.200000, "a string"]',
        None,
    ),
    (
        'dyntype support for maps',
        'dyntype map: %s',
        'dyn({"strKey": "x", 6: duration("422s"), true: 42})',
        'dyntype map: {"strKey":"x", 6:duration("422s"), true:42}',
        None,
    ),
    (
        'unrecognized formatting clause',
        '%a',
        '1',
        None,
        'could not parse formatting clause: unrecognized formatting clause "a"',
    ),
    (
        'out of bounds arg index',
        '%d %d %d',
        '0, 1',
        None,
        'index 2 out of range',
    ),
    (
        'string substitution is not allowed with binary clause',
        'string is %b',
        '"abc"',
        None,
        'error during formatting: only integers and bools can be formatted as binary, was given string',
    ),
    (
        'duration substitution not allowed with decimal clause',
        '%d',
        'duration("30m2s")',
        None,
        'error during formatting: decimal clause can only be used on integers, was given google.protobuf.Duration',
    ),
    (
        'string substitution not allowed with octal clause',
        'octal: %o',
        '"a string"',
        None,
        'error during formatting: octal clause can only be used on integers, was given string',
    ),
    (
        'double substitution not allowed with hex clause',
        'double is %x',
        '0.5',
        None,
        'error during formatting: only integers, byte buffers, and strings can be formatted as hex, was given double',
    ),
    (
        'uppercase not allowed for scientific clause',
        'double is %E',
        '0.5',
        None,
        'could not parse formatting clause: unrecognized formatting clause "E"',
    ),
    (
        'null not allowed for %d',
        'null: %d',
        'null',
        None,
        'error during formatting: decimal clause can only be used on integers, was given null_type',
    ),
    (
        'null not allowed for %e',
        'null: %e',
        'null',
        None,
        'error during formatting: scientific clause can only be used on doubles, was given null_type',
    ),
    (
        'null not allowed for %f',
        'null: %f',
        'null',
        None,
        'error during formatting: fixed-point clause can only be used on doubles, was given null_type',
    ),
    (
        'null not allowed for %x',
        'null: %x',
        'null',
        None,
        'error during formatting: only integers, byte buffers, and strings can be formatted as hex, was given '
        'null_type',
    ),
    (
        'null not allowed for %X',
        'null: %X',
        'null',
        None,
        'error during formatting: only integers, byte buffers, and strings can be formatted as hex, was given '
        'null_type',
    ),
    (
        'null not allowed for %b',
        'null: %b',
        'null',
        None,
        'error during formatting: only integers and bools can be formatted as binary, was given null_type',
    ),
    (
        'null not allowed for %o',
        'null: %o',
        'null',
        None,
        'error during formatting: octal clause can only be used on integers, was given null_type',
    ),
    (
        'compile-time cardinality check (too few for string)',
        '%s %s',
        '"abc"',
        None,
        'index 1 out of range',
    ),
    (
        'compile-time cardinality check (too many for string)',
        '%s %s',
        '"abc", "def", "ghi"',
        None,
        'too many arguments supplied to string.format (expected 2, got 3)',
    ),
    (
        'compile-time syntax check (unexpected end of string)',
        'filler %',
        '',
        None,
        'unexpected end of string',
    ),
    (
        'compile-time syntax check (unrecognized formatting clause)',
        '%j',
        '123',
        None,
        'could not parse formatting clause: unrecognized formatting clause "j"',
    ),
    (
        'compile-time %d check',
        'int is %d',
        '5.2',
        None,
        'error during formatting: decimal clause can only be used on integers',
    ),
    (
        'compile-time %f check',
        'double is %f',
        'true',
        None,
        'error during formatting: fixed-point clause can only be used on doubles',
    ),
    (
        'compile-time precision syntax check',
        'double is %.34',
        '5.0',
        None,
        'could not parse formatting clause: error while parsing precision: could not find end of precision specifier',
    ),
    (
        'compile-time %e check',
        'double is %e',
        'true',
        None,
        'error during formatting: scientific clause can only be used on doubles',
    ),
    (
        'compile-time %b check',
        'string is %b',
        '"a string"',
        None,
        'error during formatting: only integers and bools can be formatted as binary',
    ),
    (
        'compile-time %x check',
        '%x is a double',
        '2.5',
        None,
        'error during formatting: only integers, byte buffers, and strings can be formatted as hex',
    ),
    (
        'compile-time %X check',
        '%X is a double',
        '2.5',
        None,
        'error during formatting: only integers, byte buffers, and strings can be formatted as hex',
    ),
    (
        'compile-time %o check',
        'an octal: %o',
        '3.14',
        None,
        'error during formatting: octal clause can only be used on integers',
    ),
]


def _expression(template: str, args: str) -> str:
    return f"{go_quote(template)}.format([{args}])"


@pytest.mark.parametrize(("name", "template", "args", "expected", "error"), CELGO_FORMAT_ROWS,
                         ids=[(row.values if hasattr(row, "values") else row)[0] for row in CELGO_FORMAT_ROWS])
def test_celgo_format_table(name: str, template: str, args: str, expected: str | None, error: str | None) -> None:
    result = evaluate_standalone(_expression(template, args))
    if error is None:
        assert result == expected
    else:
        assert isinstance(result, CompileError | EvalError), result
        assert error in result.message


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        # A list literal is checked at compile time (cel-go's stringFormatValidator, always on at v0.26);
        # the same arguments through dyn() reach the runtime function, which reports the same words.
        ("'%a'.format(dyn([1]))", 'could not parse formatting clause: unrecognized formatting clause "a"'),
        ("'%d %d %d'.format(dyn([0, 1]))", "index 2 out of range"),
        ("'string is %b'.format(dyn(['abc']))",
         "error during formatting: only integers and bools can be formatted as binary, was given string"),
        ("'%d'.format(dyn([duration('30m2s')]))",
         "error during formatting: decimal clause can only be used on integers, was given google.protobuf.Duration"),
        ("'null: %e'.format(dyn([null]))",
         "error during formatting: scientific clause can only be used on doubles, was given null_type"),
        ("'%s'.format(dyn([quantity('1')]))",
         "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
         "lists, types, durations, and timestamps, was given kubernetes.Quantity"),
        ("'%s'.format(dyn([[1, quantity('1')]]))", "error during formatting: no formatting function for "
                                                    "kubernetes.Quantity"),
        ("'filler %'.format(dyn([]))", "index 0 out of range"),  # at run time the argument is fetched first
        ("'%.1001f'.format(dyn([1.0]))", "could not parse formatting clause: error while parsing precision: "
                                          "precision 1001 exceeds maximum allowed precision 1000"),
    ],
)
def test_runtime_errors(expression: str, error: str) -> None:
    result = evaluate_standalone(expression)
    assert isinstance(result, EvalError), result
    assert result.message == error


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("'%d'.format([1.5])", "ERROR: <input>:1:14: error during formatting: decimal clause can only be used on "
                               "integers, was given double"),
        ("'%s %s'.format(['a'])", "ERROR: <input>:1:15: index 1 out of range"),
        ("'%d'.format([1, 2])", "ERROR: <input>:1:12: too many arguments supplied to string.format (expected 1, "
                                "got 2)"),
        ("'filler %'.format([])", "ERROR: <input>:1:18: unexpected end of string"),
        ("'%s'.format([[1, quantity('1')]])", "ERROR: <input>:1:26: error during formatting: string clause can "
                                              "only be used on strings, bools, bytes, ints, doubles, maps, lists, "
                                              "types, durations, and timestamps, was given kubernetes.Quantity"),
        ("'%s'.format([optional.of(1)])", "ERROR: <input>:1:25: error during formatting: string clause can only be "
                                          "used on strings, bools, bytes, ints, doubles, maps, lists, types, "
                                          "durations, and timestamps, was given optional_type"),
        ("'%x'.format([{'a': 1}])", "ERROR: <input>:1:14: error during formatting: only integers, byte buffers, and "
                                    "strings can be formatted as hex, was given map"),
    ],
)
def test_compile_time_errors_point_at_the_argument(expression: str, message: str) -> None:
    result = evaluate_standalone(expression)
    assert isinstance(result, CompileError), result
    assert result.message.split("\n")[0] == message


def test_non_literal_formats_and_lists_are_checked_at_run_time_only() -> None:
    assert evaluate_standalone("('%' + 'd').format([1])") == "1"
    assert evaluate_standalone("'%d %s'.format(['a', 'b'].map(x, x).size() == 2 ? [1, 'x'] : [2, 'y'])") == "1 x"


@pytest.mark.parametrize(
    ("template", "args", "expected"),
    [
        ("%.3f", [1234567.5], "1,234,567.500"),  # en_US digit grouping
        ("%f", [-0.0], "0.000000"),  # x/text prints no sign for negative zero
        ("%.0f", [2.5], "2"),  # round half to even, as Go's strconv
        ("%e", [0.0], "0.000000\u202f×\u202f10⁰⁰"),
        ("%e", [-0.00123], "-1.230000\u202f×\u202f10⁻⁰³"),
        ("%e", [1e100], "1.000000\u202f×\u202f10¹⁰⁰"),
        ("%.2e", [1.0], "1.000000\u202f×\u202f10⁰⁰"),  # cel-go uses the precision as a width
        ("%.20e", [1.0], "     1.000000\u202f×\u202f10⁰⁰"),
        ("%e", [-math.inf], "    -∞"),  # x/text pads specials to the width (6) too
        ("%s", [1234567.0], "1.234567e+06"),  # Go's shortest %g
        ("%s", [123456.0], "123456"),
        ("%s", [0.0001], "0.0001"),
        ("%s", [0.00001], "1e-05"),
        ("%s", [-0.0], "-0"),
        ("%s", [[-0.0, 1e21]], "[-0.000000, 1000000000000000000000.000000]"),
        ("%s", [["é\n\x7f\u00a0😀"]], '["é\\n\\x7f\\u00a0😀"]'),  # Go's strconv.Quote
        ("%s", [{"b": 1, "a": [b"\x00"]}], '{"a":[b"\\x00"], "b":1}'),
        ("%s", [datetime.timedelta(milliseconds=1500)], "1.5s"),
        ("%s", [datetime.timedelta(seconds=-90)], "-90s"),
        ("%s", [datetime.datetime(2000, 1, 1, 0, 0, 0, 500_000, tzinfo=datetime.UTC)], "2000-01-01T00:00:00.5Z"),
        ("%x", ["é"], "c3a9"),
        ("%X", [bytearray(b"\xab")], "AB"),
        ("%b", [False], "0"),
    ],
)
def test_rendering(template: str, args: list[Any], expected: str) -> None:
    assert format_string(template, args) == expected


@pytest.mark.parametrize(
    ("template", "args", "error"),
    [
        ("%é", [1], 'could not parse formatting clause: unrecognized formatting clause "Ã"'),  # Go reads one byte
        ("%.f", [1.0], 'could not parse formatting clause: error while parsing precision: error while converting '
                       'precision to integer: strconv.Atoi: parsing "": invalid syntax'),
        ("%s", [b"\xff"], 'error during formatting: could not convert argument "invalid UTF-8 in bytes, cannot '
                          'convert to string" to string'),
        ("%s", [{1.5: "x"}], "error during formatting: no formatting function for map key of type double"),
        ("%d", [True], "error during formatting: decimal clause can only be used on integers, was given bool"),
    ],
)
def test_rendering_errors(template: str, args: list[Any], error: str) -> None:
    with pytest.raises(FormatError) as caught:
        format_string(template, args)
    assert str(caught.value) == error


def test_helpers_match_go() -> None:
    assert [go_float_g(v) for v in (1.0, 1e6, 1e-5, 123.456, math.nan, math.inf)] == [
        "1", "1e+06", "1e-05", "123.456", "NaN", "+Inf"]
    assert go_quote('a"b\\') == '"a\\"b\\\\"'
    assert locale_fixed(999.9999, 3) == "1,000.000"
    assert locale_scientific(math.nan, 10) == "       NaN"
