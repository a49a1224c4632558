"""cel-go's strings extension (v0.26, version 2) as kube-apiserver 1.36 runs it, on the rows of cel-go's
``ext/strings_test.go`` table (``reverse`` rows left out: version 3 is not in Kubernetes' environment), plus
the places where cel-cpp's native extension answered differently."""

from __future__ import annotations

from typing import Any

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.libraries import macros, strings
from staticadm.cel.libraries.spec import CelFunctionError

CELGO_TRUE_ROWS = [
    "'tacocat'.charAt(3) == 'o'",
    "'tacocat'.charAt(7) == ''",
    "'©αT'.charAt(0) == '©' && '©αT'.charAt(1) == 'α' && '©αT'.charAt(2) == 'T'",
    "'tacocat'.indexOf('') == 0",
    "'tacocat'.indexOf('ac') == 1",
    "'tacocat'.indexOf('none') == -1",
    "'tacocat'.indexOf('', 3) == 3",
    "'tacocat'.indexOf('a', 3) == 5",
    "'tacocat'.indexOf('at', 3) == 5",
    "'ta©o©αT'.indexOf('©') == 2",
    "'ta©o©αT'.indexOf('©', 3) == 4",
    "'ta©o©αT'.indexOf('©αT', 3) == 4",
    "'ta©o©αT'.indexOf('©α', 5) == -1",
    "'ijk'.indexOf('k') == 2",
    "'hello wello'.indexOf('hello wello') == 0",
    "'hello wello'.indexOf('ello', 6) == 7",
    "'hello wello'.indexOf('elbo room!!') == -1",
    "'hello wello'.indexOf('elbo room!!!') == -1",
    "''.lastIndexOf('@@') == -1",
    "'tacocat'.lastIndexOf('') == 7",
    "'tacocat'.lastIndexOf('at') == 5",
    "'tacocat'.lastIndexOf('none') == -1",
    "'tacocat'.lastIndexOf('', 3) == 3",
    "'tacocat'.lastIndexOf('a', 3) == 1",
    "'ta©o©αT'.lastIndexOf('©') == 4",
    "'ta©o©αT'.lastIndexOf('©', 3) == 2",
    "'ta©o©αT'.lastIndexOf('©α', 4) == 4",
    "'hello wello'.lastIndexOf('ello', 6) == 1",
    "'hello wello'.lastIndexOf('low') == -1",
    "'hello wello'.lastIndexOf('elbo room!!') == -1",
    "'hello wello'.lastIndexOf('elbo room!!!') == -1",
    "'hello wello'.lastIndexOf('hello wello') == 0",
    "'bananananana'.lastIndexOf('nana', 7) == 6",
    "'TacoCat'.lowerAscii() == 'tacocat'",
    "'TacoCÆt'.lowerAscii() == 'tacocÆt'",
    "'TacoCÆt Xii'.lowerAscii() == 'tacocÆt xii'",
    '"12 days 12 hours".replace("{0}", "2") == "12 days 12 hours"',
    '"{0} days {0} hours".replace("{0}", "2") == "2 days 2 hours"',
    '"{0} days {0} hours".replace("{0}", "2", 1).replace("{0}", "23") == "2 days 23 hours"',
    '"1 ©αT taco".replace("αT", "o©α") == "1 ©o©α taco"',
    '"hello hello".replace("", "_") == "_h_e_l_l_o_ _h_e_l_l_o_"',
    '"hello hello".replace("h", "") == "ello ello"',
    '"hello world".split(" ") == ["hello", "world"]',
    '"hello world events!".split(" ", 0) == []',
    '"hello world events!".split(" ", 1) == ["hello world events!"]',
    '"o©o©o©o".split("©", -1) == ["o", "o", "o", "o"]',
    '"tacocat".substring(4) == "cat"',
    '"tacocat".substring(7) == ""',
    '"tacocat".substring(0, 4) == "taco"',
    '"tacocat".substring(4, 4) == ""',
    '\'ta©o©αT\'.substring(2, 6) == "©o©α"',
    '\'ta©o©αT\'.substring(7, 7) == ""',
    '" \\f\\n\\r\\t\\vtext  ".trim() == "text"',
    '"\\u0085\\u00a0\\u1680text".trim() == "text"',
    '"text\\u2000\\u2001\\u2002\\u2003\\u2004\\u2004\\u2006\\u2007\\u2008\\u2009".trim() == "text"',
    '"\\u200atext\\u2028\\u2029\\u202F\\u205F\\u3000".trim() == "text"',
    '"\\u180etext\\u200b\\u200c\\u200d\\u2060\\ufeff".trim()\n'
    '\t\t\t\t== "\\u180etext\\u200b\\u200c\\u200d\\u2060\\ufeff"',
    "'tacoCat'.upperAscii() == 'TACOCAT'",
    "'tacoCαt'.upperAscii() == 'TACOCαT'",
    "['x', 'y'].join() == 'xy'",
    "['x', 'y'].join('-') == 'x-y'",
    "[].join() == ''",
    "[].join('-') == ''",
    'strings.quote("first\\nsecond") == "\\"first\\\\nsecond\\""',
    'strings.quote("bell\\a") == "\\"bell\\\\a\\""',
    'strings.quote("\\bbackspace") == "\\"\\\\bbackspace\\""',
    'strings.quote("\\fform feed") == "\\"\\\\fform feed\\""',
    'strings.quote("carriage \\r return") == "\\"carriage \\\\r return\\""',
    'strings.quote("horizontal tab\\t") == "\\"horizontal tab\\\\t\\""',
    'strings.quote("vertical \\v tab") == "\\"vertical \\\\v tab\\""',
    'strings.quote("double \\\\\\\\ slash") == "\\"double \\\\\\\\\\\\\\\\ slash\\""',
    'strings.quote("two escape sequences \\a\\n") == "\\"two escape sequences \\\\a\\\\n\\""',
    'strings.quote("verbatim") == "\\"verbatim\\""',
    'strings.quote("ends with \\\\") == "\\"ends with \\\\\\\\\\""',
    'strings.quote("\\\\ starts with") == "\\"\\\\\\\\ starts with\\""',
    'strings.quote("printable unicode😀") == "\\"printable unicode😀\\""',
    'strings.quote("mid string \\" quote") == "\\"mid string \\\\\\" quote\\""',
    'strings.quote(\'single-quote with "double quote"\') == "\\"single-quote with \\\\\\"double quote\\\\\\"\\""',
    'strings.quote("size(\'ÿ\')") == "\\"size(\'ÿ\')\\""',
    'strings.quote("size(\'πέντε\')") == "\\"size(\'πέντε\')\\""',
    'strings.quote("завтра") == "\\"завтра\\""',
    'strings.quote("\\U0001F431\\U0001F600\\U0001F61B") == "\\"\\U0001F431\\U0001F600\\U0001F61B\\""',
    'strings.quote("ta©o©αT") == "\\"ta©o©αT\\""',
    'strings.quote("") == "\\"\\""',
    'strings.quote(\'%s %s\').format([\'hello\', \'world\']) == "\\"hello world\\""',
    "'tacocat'.indexOf('a', 30) == -1",
    "'tacocat'.lastIndexOf('a', 30) == -1",
]

# (expression, error substring, parse-only in cel-go: rejected by the type checker in Kubernetes)
CELGO_ERROR_ROWS = [
    ("'tacocat'.charAt(30) == ''", 'index out of range: 30', False),
    ("'tacocat'.lastIndexOf('a', -1) == -1", 'index out of range: -1', False),
    ('"tacocat".substring(40) == "cat"', 'index out of range: 40', False),
    ('"tacocat".substring(-1) == "cat"', 'index out of range: -1', False),
    ('"tacocat".substring(1, 50) == "cat"', 'index out of range: 50', False),
    ('"tacocat".substring(49, 50) == "cat"', 'index out of range: 49', False),
    ('"tacocat".substring(4, 3) == ""', 'invalid substring range. start: 4, end: 3', False),
    ('42.charAt(2) == ""', 'no such overload', True),
    ('\'hello\'.charAt(true) == ""', 'no such overload', True),
    ("24.indexOf('2') == 0", 'no such overload', True),
    ("'hello'.indexOf(true) == 1", 'no such overload', True),
    ("42.indexOf('4', 0) == 0", 'no such overload', True),
    ("'42'.indexOf(4, 0) == 0", 'no such overload', True),
    ("'42'.indexOf('4', '0') == 0", 'no such overload', True),
    ("'42'.indexOf('4', 0, 1) == 0", 'no such overload', True),
    ('42.split("2") == ["4"]', 'no such overload', True),
    ('42.replace(2, 1) == "41"', 'no such overload', True),
    ('"42".replace(2, 1) == "41"', 'no such overload', True),
    ('"42".replace("2", 1) == "41"', 'no such overload', True),
    ('42.replace("2", "1", 1) == "41"', 'no such overload', True),
    ('"42".replace(2, "1", 1) == "41"', 'no such overload', True),
    ('"42".replace("2", 1, 1) == "41"', 'no such overload', True),
    ('"42".replace("2", "1", "1") == "41"', 'no such overload', True),
    ('"42".replace("2", "1", 1, false) == "41"', 'no such overload', True),
    ('42.split("") == ["4", "2"]', 'no such overload', True),
    ('"42".split(2) == ["4"]', 'no such overload', True),
    ('42.split("2", "1") == ["4"]', 'no such overload', True),
    ('"42".split(2, 1) == ["4"]', 'no such overload', True),
    ('"42".split("2", "1") == ["4"]', 'no such overload', True),
    ('"42".split("2", 1, 1) == ["4"]', 'no such overload', True),
    ('\'hello\'.substring(1, 2, 3) == ""', 'no such overload', True),
    ('30.substring(true, 3) == ""', 'no such overload', True),
    ('"tacocat".substring(true, 3) == ""', 'no such overload', True),
    ('"tacocat".substring(0, false) == ""', 'no such overload', True),
]


@pytest.mark.parametrize("expression", CELGO_TRUE_ROWS)
def test_celgo_table(expression: str) -> None:
    assert evaluate_standalone(expression) is True


@pytest.mark.parametrize(("expression", "error", "parse_only"), CELGO_ERROR_ROWS)
def test_celgo_error_table(expression: str, error: str, parse_only: bool) -> None:
    result = evaluate_standalone(expression)
    if parse_only:
        # cel-go's table only parses these; Kubernetes type-checks every expression and refuses them.
        assert isinstance(result, CompileError), result
        assert "found no matching overload" in result.message or "undeclared reference" in result.message
    else:
        assert isinstance(result, EvalError), result
        assert result.message == error


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # Where cel-cpp's native strings extension answered differently from cel-go v0.26.
        ("'tacocat'.lastIndexOf('a', 30)", -1),  # cel-cpp: index out of range: 30
        # An empty needle is found where the search starts, clamped to the end (cel-go #1335, Kubernetes 1.37).
        ("'tacocat'.indexOf('', 30)", 7),
        ("'tacocat'.lastIndexOf('', 30)", 7),
        ("'ta©o©αT'.lastIndexOf('©α', 30)", -1),
        ("'©'.lastIndexOf('ab')", -1),  # cel-go compares byte lengths first
        ("'%s'.format([1234567.0])", "1.234567e+06"),  # cel-cpp: 1.23457e+06
        ("'%.3f'.format([1234.5])", "1,234.500"),  # en_US grouping; cel-cpp: 1234.500
        ("'\\x1c a \\x1f'.trim()", "\x1c a \x1f"),  # Go's unicode.IsSpace has no information separators
        ("'abc'.split('', 2)", ["a", "bc"]),
        ("''.split('')", []),
        ("'a,b,c'.split(',', -1)", ["a", "b", "c"]),
        ("'a,b,c'.split(',', 2)", ["a", "b,c"]),
        ("'abc'.replace('', '-', 2)", "-a-bc"),
        ("'abc'.replace('b', 'x', 0)", "abc"),
        ("'ÀÉ'.lowerAscii() + 'àé'.upperAscii()", "ÀÉàé"),
        ("strings.quote('\\u00a0\\x7f')", '"\u00a0\x7f"'),  # only CEL's escapes
    ],
)
def test_cel_go_semantics(expression: str, expected: Any) -> None:
    assert evaluate_standalone(expression) == expected


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("'abc'.substring(2, 1)", "invalid substring range. start: 2, end: 1"),  # cel-cpp words it differently
        ("'tacocat'.lastIndexOf('a', -1)", "index out of range: -1"),
        ("'tacocat'.indexOf('a', -2)", "index out of range: -2"),
        ("'abc'.charAt(-1)", "index out of range: -1"),
    ],
)
def test_cel_go_errors(expression: str, error: str) -> None:
    result = evaluate_standalone(expression)
    assert isinstance(result, EvalError), result
    assert result.message == error


def test_functions_outside_version_2_are_not_declared() -> None:
    result = evaluate_standalone("'abc'.reverse() == 'cba'")
    assert isinstance(result, CompileError)
    assert "found no matching overload for 'reverse'" in result.message or "undeclared reference" in result.message


def test_pure_functions() -> None:
    assert strings.char_at("©αT", 1) == "α"
    assert strings.last_index_of("bananananana", "nana", 7) == 6
    assert strings.trim("\u0085\u00a0\u1680text\u3000") == "text"
    assert strings.join([], "-") == ""
    assert strings.quote("a\ud800b") == '"a\ufffdb"'
    with pytest.raises(CelFunctionError, match=r"^join: invalid input: 1$"):
        strings.join(["a", 1])


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("{'hello': 'world', 'hello!': 'worlds'}.exists_one(k, v, k.startsWith('hello') && v.endsWith('world'))",
         True),
        ("[1, 2, 1].exists_one(i, v, v == 1)", False),
        ("[1, 2, 1].exists_one(i, v, i == 1 && v == 2)", True),
        ("[1, 2, 1].exists_one(v, v == 2)", True),  # the one-variable macro is untouched
        ("['exists_one('].exists_one(i, v, v.startsWith('exists_one'))", True),
    ],
)
def test_two_variable_exists_one_spelling(expression: str, expected: bool) -> None:
    assert evaluate_standalone(expression) is expected


def test_exists_one_respelling_keeps_positions_and_quotes_the_source_as_written() -> None:
    result = evaluate_standalone("[1].exists_one(i, v, v == 'a')")
    assert isinstance(result, CompileError)
    assert result.message == ("ERROR: <input>:1:24: found no matching overload for '_==_' applied to '(int, string)'\n"
                              " | [1].exists_one(i, v, v == 'a')\n"
                              " | .......................^")


def test_respelling_leaves_other_macros_and_strings_alone() -> None:
    assert macros.exists_one_edits("x.all(a, a > 0) && 'x.exists_one(a, b, c)' != ''") == []
    assert macros.exists_one_edits("x.exists_one(a, a > 0)") == []  # the one-variable macro
    assert len(macros.exists_one_edits("x.exists_one(a, b, [a, b].size() > 0)")) == 1
