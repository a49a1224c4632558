"""Kubernetes value constructors called on a string literal are made at compile time, with the same
outcome as the call at run time: values, errors (a literal the constructor refuses is left to run time)
and cost. So are ``Object{...}``/``JSONPatch{...}`` creations, built as map literals by the engine."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from staticadm.cel import ExpressionKind, admission_environment, ast
from staticadm.cel.environment import CelEnvironment, CompiledExpression
from staticadm.cel.evaluation import EvalError
from staticadm.cel.libraries import BASE_LIBRARIES, MUTATION_LIBRARIES
from staticadm.cel.structs import RESERVED_NAMES

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


#: Mutation expressions: jsonpatch.escapeKey of a literal folded to a string (its concatenation then costs what
#: the runtime would charge for the folded string), and Object/JSONPatch creations built as map literals
#: (errors, optional fields, timestamps inside, a JSONPatch whose op is not provably a string left a call).
#: (expression, the creation calls left to run time).
MUTATION_CASES = [
    ("[JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('a.io/b~c'), value: 'x'}]", []),
    ("'/a/' + jsonpatch.escapeKey('k/' + 'v') + jsonpatch.escapeKey('')", ["jsonpatch.escapeKey"]),
    ("[JSONPatch{op: 'remove', path: jsonpatch.escapeKey('a/b')}]", []),
    ("[JSONPatch{op: 'remove', path: jsonpatch.escapeKey(string(1))}]", ["jsonpatch.escapeKey"]),
    ("Object{metadata: Object.metadata{labels: {'a': 'b'}, ?annotations: optional.none()}}", []),
    ("Object{spec: Object.spec{containers: [Object.spec.containers{name: 'c', args: ['x']}]}}", []),
    ("Object{metadata: Object.metadata{creationTimestamp: timestamp('2024-01-01T00:00:00Z')}}", []),
    ("Object{spec: Object.spec{replicas: 1 / 0}}", []),
    ("[JSONPatch{op: dyn(1), path: '/x'}]", ["__staticadm_jsonpatch__"]),
    ("[JSONPatch{op: 'replace', path: '/spec', ?from: optional.of('/a'), value: {'a': {'b': 2.5}}}]",
     ["__staticadm_jsonpatch__"]),
    ("[1, 2].map(i, JSONPatch{op: 'add', path: '/items/' + string(i), value: i})", []),
    ("Object{spec: Object.spec{x: 1}} == Object{spec: Object.spec{x: 1}}", []),
]
MUTATION_PLAIN = CelEnvironment((*BASE_LIBRARIES, *MUTATION_LIBRARIES), fold_literals=False)
CREATION_CALLS = (*RESERVED_NAMES, "jsonpatch.escapeKey")


@pytest.mark.parametrize(("source", "left"), MUTATION_CASES)
def test_mutation_literals_evaluate_as_the_calls(source: str, left: list[str]) -> None:
    def outcome(environment: CelEnvironment) -> tuple[object, int, list[str]]:
        compiled = environment.compile(source, ExpressionKind.STANDALONE)
        assert isinstance(compiled, CompiledExpression), compiled
        context = environment.new_context({}, budget=1_000_000)
        value = compiled.evaluate(context)
        shown = ("error", value.message) if isinstance(value, EvalError) else ("value", value)
        assert context.budget is not None
        calls = [node.call_expr.function for node in ast.walk(compiled.prepared.expr)
                 if node.WhichOneof("expr_kind") == "call_expr" and node.call_expr.function in CREATION_CALLS]
        return shown, context.budget.remaining, calls

    value, remaining, calls = outcome(admission_environment(True))
    plain_value, plain_remaining, plain_calls = outcome(MUTATION_PLAIN)
    assert value == plain_value
    assert remaining == plain_remaining, "building literals must not change what the expression costs"
    assert plain_calls, "the straightforward environment keeps every call"
    # A JSONPatch whose op, path or from the checker cannot prove a string (an optional one included) stays a
    # call, since its error is the call's; so does escapeKey of what is not a literal.
    assert calls == left


def _retained_bytes_per_evaluation(environment: CelEnvironment, source: str, count: int = 2000) -> float:
    compiled = environment.compile(source, ExpressionKind.STANDALONE)
    assert isinstance(compiled, CompiledExpression), compiled
    for _ in range(100):
        compiled.evaluate(environment.new_context({}, budget=1_000_000))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(count):
            compiled.evaluate(environment.new_context({}, budget=1_000_000))
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()


def test_mutation_literals_leave_nothing_in_the_engine() -> None:
    # cel-expr-python 0.1.3 never frees the arguments of a call into Python; built as literals, the benchmark's
    # mutations make no such call.
    source = ("[JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('bench.example.com/m0'), "
              "value: 'set-by-0'}].size() == 1 && Object{metadata: Object.metadata{labels: {'m1': 'yes'}}} != "
              "Object{metadata: Object.metadata{labels: {'m1': 'no'}}}")
    assert _retained_bytes_per_evaluation(MUTATION_PLAIN, source) > 100, "the calls keep their arguments"
    assert _retained_bytes_per_evaluation(admission_environment(True), source) < 8
