"""Kubernetes value constructors called on a string literal are made at compile time, with the same
outcome as the call at run time: values, errors (a literal the constructor refuses is left to run time)
and cost."""

from __future__ import annotations

import pytest

from staticadm.cel import ExpressionKind, admission_environment, ast
from staticadm.cel.environment import CelEnvironment, CompiledExpression
from staticadm.cel.evaluation import EvalError
from staticadm.cel.libraries import BASE_LIBRARIES

#: (expression, whether every constructor call in it is folded).
CASES = [
    ("quantity('1Gi').isLessThan(quantity('1025Mi'))", True),
    ("quantity('500m').asApproximateFloat() == 0.5", True),
    ("quantity('1Ki') == quantity('1024')", True),
    ("quantity('1.5').add(2).isGreaterThan(quantity('3'))", True),
    ("quantity('bogus').asInteger() == 0", False),
    ("ip('10.0.0.1').family() == 4 && ip('::1').isLoopback()", True),
    ("ip('10.0.0.256').family() == 4", False),
    ("cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))", True),
    ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && cidr('fd00::/8').prefixLength() == 8", True),
    ("cidr('10.0.0.1/33').prefixLength() == 33", False),
    ("url('https://example.com:8443/a?b=c').getPort() == '8443'", True),
    ("url('https://example.com/a').getHostname() + url('https://x.io').getScheme()", True),
    ("url('not a url').getHost() == ''", False),
    ("semver('1.2.3').isLessThan(semver('1.10.0')) && semver('1.2.3-rc.1').major() == 1", True),
    ("semver('v1.2').major() == 1", False),
    ("[1, 2, 3].all(i, quantity('1Gi').isLessThan(quantity(string(i) + 'Gi')) || i == 1)", False),
]

PLAIN = CelEnvironment(BASE_LIBRARIES, fold_literals=False)
CONSTRUCTORS = ("quantity", "ip", "cidr", "url", "semver")


def _constructor_calls(compiled: CompiledExpression) -> list[str]:
    return [node.call_expr.function for node in ast.walk(compiled.prepared.expr)
            if node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function in CONSTRUCTORS
            and not node.call_expr.HasField("target")]


def _outcome(environment: CelEnvironment, source: str) -> tuple[object, int, list[str]]:
    kind = ExpressionKind.STANDALONE
    compiled = environment.compile(source, kind)
    assert isinstance(compiled, CompiledExpression), compiled
    context = environment.new_context({}, budget=1_000_000)
    value = compiled.evaluate(context)
    shown = ("error", value.message) if isinstance(value, EvalError) else ("value", value)
    assert context.budget is not None
    return shown, context.budget.remaining, _constructor_calls(compiled)


@pytest.mark.parametrize(("source", "folded"), CASES)
def test_folded_constructors_evaluate_as_the_calls(source: str, folded: bool) -> None:
    value, remaining, calls = _outcome(admission_environment(False), source)
    plain_value, plain_remaining, plain_calls = _outcome(PLAIN, source)
    assert value == plain_value
    assert remaining == plain_remaining, "folding must not change what the expression costs"
    assert plain_calls, "the straightforward environment keeps every call"
    if folded:
        assert calls == []
    else:
        assert calls, "a refused or non-literal argument is left to run time"
