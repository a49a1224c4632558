"""cel-cpp's error texts mapped to cel-go's, at the compile and the runtime boundary.

Each expected text is cel-go v0.26's (common/types/err.go, interpreter/attributes.go, parser/macro.go,
ext/comprehensions.go, checker/errors.go), reached through real expressions in the environment.
"""

from __future__ import annotations

import pytest

from staticadm.cel import CompileError, EvalError, evaluate_standalone
from staticadm.cel.messages import compile_error_text, runtime_error_text, undeclared_variables_text


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("{'a': 1}['b']", "no such key: b"),
        ("{'a': 1}.b", "no such key: b"),
        ("{1: 1}[2]", "no such key: 2"),
        ("{'a': {'b': 1}}.a.c", "no such key: c"),
        ("1 / 0", "division by zero"),
        ("1u / 0u", "division by zero"),
        ("1 % 0", "modulus by zero"),
        ("[1][5]", "index out of bounds: 5"),
        ("[1][-1]", "index out of bounds: -1"),
        ("dyn([1])['x']", "unsupported index type 'string' in list"),
        ("9223372036854775807 + 1", "integer overflow"),
        ("0u - 1u", "unsigned integer overflow"),
        ("uint([-1][0])", "unsigned integer overflow"),
        ("int([1e20][0])", "integer overflow"),
        ("uint([1e20][0])", "unsigned integer overflow"),
        ("int([18446744073709551615u][0])", "integer overflow"),
        ("dyn(1) + 'a'", "no such overload"),
        ("dyn('a') < 1", "no such overload"),
        ("int(['abc'][0])", "type conversion error from 'string' to 'int'"),
        ("double(['x'][0])", "type conversion error from 'string' to 'double'"),
        ("bool(['maybe'][0])", "type conversion error from 'string' to 'bool'"),
        ("string([b'\\xff'][0])", "invalid UTF-8 in bytes, cannot convert to string"),
        ("timestamp('9999-12-31T23:59:59Z') + duration('1s')", "timestamp overflow"),
        ("optional.none().value()", "optional.none() dereference"),
        ("[1].slice(2, 1)", "cannot slice(2, 1), start index must be less than or equal to end index"),
        ("[[1], [2]].flatten(-1)", "level must be non-negative"),
        ("[dyn('d'), dyn(3)].sort()", "list elements must have the same type"),
        ("[dyn([1]), dyn(2)].sortBy(x, x)", "list elements must be comparable"),
    ],
)
def test_runtime_errors_in_cel_go_words(expression: str, message: str) -> None:
    result = evaluate_standalone(expression)
    assert isinstance(result, EvalError), result
    assert result.message == message


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # Type conversions of constants (literals, literal lists and maps, other such conversions) are made when
        # kube-apiserver builds the program (cel.OptOptimize): one that fails refuses the expression. Checked
        # against the admission oracle of ../shared/oracle, which answers "compilation error: <this text>".
        ("int(18446744073709551615u) > 0", "program instantiation failed: integer overflow"),
        ("uint(-1) > 0u", "program instantiation failed: unsigned integer overflow"),
        ("double('x') > 0.0", "program instantiation failed: type conversion error from 'string' to 'double'"),
        ("string(b'\\xff') == ''", "program instantiation failed: invalid UTF-8 in bytes, cannot convert to string"),
        ("int(string(int('9223372036854775808'))) == 1",
         "program instantiation failed: type conversion error from 'string' to 'int'"),
        ("size([1, int('x')]) == 2", "program instantiation failed: type conversion error from 'string' to 'int'"),
        ("object.spec.count > 0 ? true : uint(-1) == 0u", "program instantiation failed: unsigned integer overflow"),
        ("dyn(int('x')) == 0", "program instantiation failed: type conversion error from 'string' to 'int'"),
    ],
)
def test_constant_conversions_that_fail_refuse_the_program(expression: str, message: str) -> None:
    result = evaluate_standalone(expression, {"object": {"spec": {"count": 1}}})
    assert isinstance(result, CompileError), result
    assert result.message == message


@pytest.mark.parametrize("expression", ["int('12') == 12", "int(object.spec.text) == 1", "[int('1')][0] == 1"])
def test_conversions_that_succeed_or_read_the_request_still_compile(expression: str) -> None:
    assert evaluate_standalone(expression, {"object": {"spec": {"text": "1"}}}) is True


@pytest.mark.parametrize(
    ("expression", "first_line"),
    [
        ("has(a[0])", "ERROR: <input>:1:6: invalid argument to has() macro"),
        ("has(object)", "ERROR: <input>:1:5: invalid argument to has() macro"),
        ("[1].map(1, 2)", "ERROR: <input>:1:9: argument is not an identifier"),
        ("[1].filter(1, true)", "ERROR: <input>:1:12: argument is not an identifier"),
        ("[1].all(1, true)", "ERROR: <input>:1:9: argument must be a simple name"),
        ("[1].exists_one(1, true)", "ERROR: <input>:1:16: argument must be a simple name"),
        ("[].all(i.j, k, i.j < k)", "ERROR: <input>:1:9: argument must be a simple name"),
        ("[].existsOne(j, i.k, j < i.k)", "ERROR: <input>:1:18: argument must be a simple name"),
        ("[1].all(i, i, true)", "ERROR: <input>:1:12: duplicate variable name: i"),
        ("[].transformList(ab,  ab, ab)", "ERROR: <input>:1:23: duplicate variable name: ab"),
        ("[1].all(__result__, true)", "ERROR: <input>:1:21: iteration variable overwrites accumulator variable"),
        ("1.all(x, true)", "ERROR: <input>:1:1: expression of type 'int' cannot be range of a comprehension "
                           "(must be list, map, or dynamic)"),
        ("['a', 'b'].sum()", "ERROR: <input>:1:15: found no matching overload for 'sum' applied to 'list(string).()'"),
        ("'a'.startsWith(1)", "ERROR: <input>:1:15: found no matching overload for 'startsWith' applied to "
                              "'string.(int)'"),
        ("'a'.replace('a', {'x': [1, 2]})", "ERROR: <input>:1:12: found no matching overload for 'replace' applied "
                                            "to 'string.(string, map(string, list(int)))'"),
        ("strings.quote(1)", "ERROR: <input>:1:14: found no matching overload for 'strings.quote' applied to '(int)'"),
        ("1 + 'a'", "ERROR: <input>:1:3: found no matching overload for '_+_' applied to '(int, string)'"),
        ("'42'.indexOf('4', 0, 1)", "ERROR: <input>:1:13: found no matching overload for 'indexOf'"),
        ("size(1, 2)", "ERROR: <input>:1:5: found no matching overload for 'size'"),
        ("nope(1)", "ERROR: <input>:1:5: undeclared reference to 'nope' (in container '')"),
        ("x", "ERROR: <input>:1:1: undeclared reference to 'x' (in container '')"),
    ],
)
def test_compile_errors_in_cel_go_words(expression: str, first_line: str) -> None:
    result = evaluate_standalone(expression)
    assert isinstance(result, CompileError), result
    assert result.message.split("\n")[0] == first_line


def test_caret_follows_a_moved_column() -> None:
    result = evaluate_standalone("[1].all(i, i, true)")
    assert isinstance(result, CompileError)
    assert result.message == ("ERROR: <input>:1:12: duplicate variable name: i\n"
                              " | [1].all(i, i, true)\n"
                              " | ...........^")


def test_multiline_sources_and_several_errors() -> None:
    source = "has(a[0]) &&\n  ['a'].sum() == 'a'"
    text = ("ERROR: <input>:1:6: has() argument must be a field selection\n | has(a[0]) &&\n | .....^\n"
            "ERROR: <input>:2:12: found no matching overload for 'sum' applied to '(list(string))'\n"
            " |   ['a'].sum() == 'a'\n | ...........^")
    assert compile_error_text(text, source, functions={"sum"}) == (
        "ERROR: <input>:1:6: invalid argument to has() macro\n | has(a[0]) &&\n | .....^\n"
        "ERROR: <input>:2:12: found no matching overload for 'sum' applied to 'list(string).()'\n"
        " |   ['a'].sum() == 'a'\n | ...........^")


def test_unknown_texts_pass_through() -> None:
    assert runtime_error_text("composited variable \"x\" fails to evaluate: boom") == (
        "composited variable \"x\" fails to evaluate: boom")
    assert runtime_error_text('Key not found in map : "a\\"b"') == 'no such key: a"b'
    assert compile_error_text("program instantiation failed: x", "1", functions=()) == (
        "program instantiation failed: x")


def test_undeclared_variables_text() -> None:
    assert undeclared_variables_text("!variables.isLease", 1, 2) == (
        "ERROR: <input>:1:2: undeclared reference to 'variables' (in container '')\n"
        " | !variables.isLease\n | .^")
